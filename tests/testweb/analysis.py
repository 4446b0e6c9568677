"""Judge a crawler by the test web's request log: politeness gaps, concurrency, robots, Retry-After, SSRF.

Definitions (so that expectations are exact):
- *gap* before a request to a host = its ``start`` minus the latest ``end`` of all
  earlier-starting requests to that host (negative when they overlap); the first
  request to a host has no gap. robots.txt requests count like any other; bait
  hits are not requests to a host.
- *required delay* of a host = max(``host_delay_s``, its robots Crawl-delay); a
  request whose gap is below it by more than ``tolerance_s`` (default 5 ms) is
  *too close*. The tolerance is measurement slack, not leniency: the server
  stamps ``end`` just before its last write and ``start`` when the handler
  starts, with the wall clock; the client counts its delays on the monotonic
  clock, and the two may drift apart by a fraction of a millisecond a second.
- *in flight* = the most requests whose [start, end] intervals overlap at one
  instant (one ending exactly when another starts does not overlap), per host
  name and per local address. An address whose in flight exceeds the caller's
  cap ``max_in_flight_per_addr`` (the crawler's ``politeness.max_in_flight_per_ip``)
  is a violation; one above ``max_in_flight_per_host`` on a host name is one too
  (a host name overlapping itself is also *overlapping*, see *gap*).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping


def read_log(path: str | Path) -> list[dict]:
    """Every complete line of a request log (a half-written last line is skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n"):
                out.append(json.loads(line))
    return out


def gaps(lines: Iterable[dict]) -> list[tuple[dict, float]]:
    """(line, gap) for every request after the first of one host, in start order (see module docstring)."""
    ordered = sorted(lines, key=lambda r: (r["start"], r["end"]))
    out, busy_until = [], None
    for r in ordered:
        if busy_until is not None:
            out.append((r, r["start"] - busy_until))
        busy_until = r["end"] if busy_until is None else max(busy_until, r["end"])
    return out


def max_in_flight(lines: Iterable[dict]) -> int:
    events = sorted([(r["start"], 1) for r in lines] + [(r["end"], -1) for r in lines])
    best = cur = 0
    for _, delta in events:  # at equal times -1 sorts first: end-then-start is no overlap
        cur += delta
        best = max(best, cur)
    return best


@dataclass
class Violations:
    host_delay_s: float
    max_in_flight_per_addr: int
    requests: int = 0
    requests_by_host: dict[str, int] = field(default_factory=dict)
    trap_requests: dict[str, int] = field(default_factory=dict)
    min_gap_s: float | None = None                             # smallest gap over all hosts
    min_gap_by_host: dict[str, float] = field(default_factory=dict)
    min_slack_s: float | None = None                           # smallest (gap - required delay); < 0 is a violation
    too_close: list[dict] = field(default_factory=list)        # lines with gap_s < required_s (both added)
    overlapping: list[dict] = field(default_factory=list)      # lines that started while the host was busy
    max_in_flight_by_host: dict[str, int] = field(default_factory=dict)
    max_in_flight_by_addr: dict[str, int] = field(default_factory=dict)
    disallowed: list[dict] = field(default_factory=list)
    retry_after: list[dict] = field(default_factory=list)
    bait: list[dict] = field(default_factory=list)

    @property
    def max_in_flight_host(self) -> int:
        return max(self.max_in_flight_by_host.values(), default=0)

    @property
    def max_in_flight_addr(self) -> int:
        return max(self.max_in_flight_by_addr.values(), default=0)

    @property
    def crowded_addrs(self) -> dict[str, int]:
        """Addresses whose in flight exceeded ``max_in_flight_per_addr``, with that in flight."""
        return {a: n for a, n in self.max_in_flight_by_addr.items() if n > self.max_in_flight_per_addr}

    def counts(self) -> dict[str, int]:
        return {"requests": self.requests, "too_close": len(self.too_close), "overlapping": len(self.overlapping),
                "disallowed": len(self.disallowed), "retry_after": len(self.retry_after), "bait": len(self.bait),
                "max_in_flight_host": self.max_in_flight_host, "max_in_flight_addr": self.max_in_flight_addr,
                "crowded_addrs": len(self.crowded_addrs), "trap_requests": sum(self.trap_requests.values())}

    @property
    def clean(self) -> bool:
        """No politeness (gaps, per-address in flight), robots, Retry-After or SSRF violation."""
        return not (self.too_close or self.overlapping or self.crowded_addrs or self.disallowed
                    or self.retry_after or self.bait)

    def summary(self) -> str:
        c = self.counts()
        gap = "n/a" if self.min_gap_s is None else f"{self.min_gap_s:.3f}s"
        slack = "n/a" if self.min_slack_s is None else f"{self.min_slack_s:+.3f}s"
        lines = [
            f"{c['requests']} requests to {len(self.requests_by_host)} hosts; min gap {gap}, "
            f"min slack vs required delay {slack} (host delay {self.host_delay_s}s)",
            f"too close: {c['too_close']}, overlapping: {c['overlapping']}, max in flight per host "
            f"{c['max_in_flight_host']}, per address {c['max_in_flight_addr']} (cap {self.max_in_flight_per_addr}, "
            f"{c['crowded_addrs']} address(es) over it)",
            f"disallowed hit: {c['disallowed']}, inside Retry-After: {c['retry_after']}, SSRF bait: {c['bait']}, "
            f"trap requests: {c['trap_requests']} {dict(sorted(self.trap_requests.items()))}",
        ]
        for addr, n in sorted(self.crowded_addrs.items())[:3]:
            lines.append(f"  crowded: {addr} {n} in flight > cap {self.max_in_flight_per_addr}")
        for name, bad in (("too close", self.too_close), ("disallowed", self.disallowed),
                          ("retry-after", self.retry_after), ("bait", self.bait)):
            for r in bad[:3]:
                lines.append(f"  {name}: {r.get('host')} {r.get('path')} at {r.get('start'):.3f}"
                             + (f" gap {r['gap_s']:.3f}s < {r['required_s']}s" if "gap_s" in r else ""))
        return "\n".join(lines)


def analyze(lines: list[dict], host_delay_s: float, crawl_delays: Mapping[str, float] | None = None,
            trap_hosts: Iterable[str] | None = None, tolerance_s: float = 0.005, *,
            max_in_flight_per_addr: int) -> Violations:
    """Compute :class:`Violations` from log lines (``crawl_delays``: host -> robots Crawl-delay).

    ``host_delay_s`` and ``max_in_flight_per_addr`` are the crawler's settings the log is
    judged against (``politeness.host_delay_s``, ``politeness.max_in_flight_per_ip``): the
    caller passes them, so a check never judges by a number the crawler was not given.
    """
    crawl_delays = crawl_delays or {}
    traps = set(trap_hosts) if trap_hosts is not None else {r["host"] for r in lines if r.get("kind") == "trap"}
    v = Violations(host_delay_s=host_delay_s, max_in_flight_per_addr=max_in_flight_per_addr, requests=len(lines))
    by_host: dict[str, list[dict]] = {}
    by_addr: dict[str, list[dict]] = {}
    for r in lines:
        by_addr.setdefault(r["addr"], []).append(r)
        if r.get("bait"):
            v.bait.append(r)
            continue
        by_host.setdefault(r["host"], []).append(r)
        if r.get("disallowed"):
            v.disallowed.append(r)
        if r.get("in_retry_after"):
            v.retry_after.append(r)
    for host, rs in sorted(by_host.items()):
        v.requests_by_host[host] = len(rs)
        if host in traps:
            v.trap_requests[host] = len(rs)
        v.max_in_flight_by_host[host] = max_in_flight(rs)
        required = max(host_delay_s, crawl_delays.get(host) or 0.0)
        for r, gap in gaps(rs):
            v.min_gap_by_host[host] = min(v.min_gap_by_host.get(host, gap), gap)
            v.min_gap_s = gap if v.min_gap_s is None else min(v.min_gap_s, gap)
            slack = gap - required
            v.min_slack_s = slack if v.min_slack_s is None else min(v.min_slack_s, slack)
            if gap < 0:
                v.overlapping.append(r)
            if gap < required - tolerance_s:
                v.too_close.append({**r, "gap_s": gap, "required_s": required})
    for addr, rs in sorted(by_addr.items()):
        v.max_in_flight_by_addr[addr] = max_in_flight(rs)
    return v
