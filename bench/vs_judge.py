"""Judge one crawler's run from the test web's request log (``bench/crawl_vs_scrapy.py``).

Definitions (every figure comes from the server's log, never from the crawler's own report):
- a *content page* is a logged request with a 2xx status, not ``aborted``, whose URL the plan serves
  as HTML (``Page.behaviour`` in ``HTML_BEHAVIOURS``: robots.txt, sitemaps, PDFs, images, CSVs,
  redirects, errors and bait are not content); *distinct* counts URLs after the plan's reference
  normalisation (``model.normalize``: session ids and tracking parameters stripped, so the session
  trap's endless spellings of one page count once);
- *distinct content pages/s at t* = distinct content pages whose first such response ended by
  ``t0 + t``, divided by t, t0 being the moment the crawler's process was launched (its start-up,
  JVM included, is inside t);
- *duty cycle* over [t0, t0 + T] = the share of that window with at least one request of the crawler
  in flight at the server (the union of the logged [start, end] intervals, clipped to the window);
- *violations* = :func:`tests.testweb.analysis.analyze` of the requests that started inside the
  window, judged by the host delay and per-address cap deltacrawl is configured with (Crawl-delay
  from the plan's robots.txt, traps from the plan).
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.testweb.analysis import Violations, analyze
from tests.testweb.model import HTML_BEHAVIOURS, normalize
from tests.testweb.sites import Plan


def content_url(plan: Plan, rec: dict) -> str | None:
    """The normalised URL of a logged request if it is a content page (module docstring), else None."""
    if not 200 <= rec["status"] < 300 or rec.get("aborted") or rec.get("bait"):
        return None
    url = normalize(plan.url(rec["host"], rec["path"]))
    page = plan.page(url)
    return url if page is not None and page.behaviour in HTML_BEHAVIOURS else None


def first_content_ends(plan: Plan, lines: list[dict]) -> list[float]:
    """For each distinct content page, when its first content response ended (epoch seconds), sorted."""
    first: dict[str, float] = {}
    for rec in lines:
        url = content_url(plan, rec)
        if url is not None and (url not in first or rec["end"] < first[url]):
            first[url] = rec["end"]
    return sorted(first.values())


def pages_per_s(ends: list[float], t0: float, at: float) -> float:
    """Distinct content pages/s at ``at`` seconds after ``t0`` (``ends`` from :func:`first_content_ends`)."""
    return sum(1 for e in ends if e <= t0 + at) / at


def duty_cycle(lines: list[dict], t0: float, window_s: float) -> float:
    """Share of [t0, t0 + window_s] with at least one request in flight."""
    lo, hi = t0, t0 + window_s
    spans = sorted((max(lo, r["start"]), min(hi, r["end"])) for r in lines if r["end"] > lo and r["start"] < hi)
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            busy += (cur_e - cur_s) if cur_e is not None else 0.0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += (cur_e - cur_s) if cur_e is not None else 0.0
    return busy / window_s


@dataclass
class Verdict:
    name: str
    t0: float
    window_s: float
    at: tuple[float, ...]
    rates: tuple[float, ...]          # distinct content pages/s at each of ``at``
    pages: int                        # distinct content pages in the window
    requests: int                     # requests started in the window
    duty: float
    violations: Violations
    server_cpu: float | None = None   # the test web's CPU seconds over the run / T (1.0 = one core busy)

    def row(self) -> list[str]:
        v = self.violations
        return ([self.name] + [f"{r:.1f}" for r in self.rates]
                + [str(self.pages), str(self.requests), f"{self.duty:.2f}",
                   "n/a" if self.server_cpu is None else f"{self.server_cpu:.2f}",
                   str(len(v.too_close)), str(len(v.overlapping)), str(len(v.crowded_addrs)),
                   str(len(v.disallowed)), str(len(v.retry_after)), str(len(v.bait))])


def judge(name: str, plan: Plan, lines: list[dict], t0: float, window_s: float, at: tuple[float, ...],
          host_delay_s: float, max_in_flight_per_addr: int) -> Verdict:
    """The :class:`Verdict` of one crawler's log lines over [t0, t0 + window_s]."""
    inside = [r for r in lines if t0 <= r["start"] < t0 + window_s]
    ends = first_content_ends(plan, inside)
    delays = {h.name: h.crawl_delay for h in plan.hosts.values() if h.crawl_delay}
    traps = {h.name for h in plan.by_kind("trap")}
    v = analyze(inside, host_delay_s, delays, traps, max_in_flight_per_addr=max_in_flight_per_addr)
    return Verdict(name, t0, window_s, at, tuple(pages_per_s(ends, t0, a) for a in at),
                   sum(1 for e in ends if e <= t0 + window_s), len(inside), duty_cycle(inside, t0, window_s), v)


VIOLATION_COLUMNS = ["too close", "overlap", "crowded addr", "robots", "Retry-After", "bait"]


def table(verdicts: list[Verdict]) -> str:
    """A plain-text table of the verdicts (same ``at`` for all), then the ratio of the first to the last."""
    at = verdicts[0].at
    head = ["crawler"] + [f"pages/s @{a:g}s" for a in at] + ["pages", "requests", "duty", "server cpu"] + VIOLATION_COLUMNS
    rows = [head] + [v.row() for v in verdicts]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    if len(verdicts) == 2 and all(verdicts[1].rates):
        a, b = verdicts
        out.append(f"ratio {a.name}/{b.name}: " + ", ".join(
            f"{x / y:.2f}x @{t:g}s" for x, y, t in zip(a.rates, b.rates, at)))
    return "\n".join(out)
