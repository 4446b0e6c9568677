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
- *in flight* over [t0, t0 + T] = the share of that window with at least one request of the crawler
  in flight at the server (the union of the logged [start, end] intervals, clipped to the window). On
  loopback an answer takes a millisecond, so a polite crawler keeping 300 hosts at a 1 s delay has a
  request in flight ~15 % of the time however busy it keeps them: this measures the server's speed;
- *fetch duty* over [t0, t0 + T] = the share of that window covered by [start, end + d] of the
  crawler's requests, d the host delay: a host waiting out its delay after a request is being fetched
  (the crawler may not ask it sooner), so the window's uncovered seconds are those in which no host
  was fetched at all for longer than the delay (start-up, the gaps between rounds, an idle tail). With
  d = 0 it is the in-flight share;
- the *polite bound* at t (:func:`polite_bound`) = the most distinct content pages any crawler keeping
  the host delay and robots.txt could have by ``t0 + t``, even with no start-up, no CPU and answers
  that take no time: per host robots.txt at t0, then one page per delay, up to the host's content
  pages reachable from its home page; a crawler above it broke a rule;
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


def duty_cycle(lines: list[dict], t0: float, window_s: float, slack_s: float = 0.0) -> float:
    """Share of [t0, t0 + window_s] covered by the requests' [start, end + slack_s] (module docstring:
    slack 0 is *in flight*, the host delay is *fetch duty*)."""
    lo, hi = t0, t0 + window_s
    spans = sorted((max(lo, r["start"]), min(hi, r["end"] + slack_s)) for r in lines
                   if r["end"] + slack_s > lo and r["start"] < hi)
    busy, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            busy += (cur_e - cur_s) if cur_e is not None else 0.0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += (cur_e - cur_s) if cur_e is not None else 0.0
    return busy / window_s


def content_pages(plan: Plan) -> dict[str, int | None]:
    """Per host, the content pages a polite crawler reaches from its home page (same-host links that
    robots.txt allows: ``HostPlan.reachable``); None for a host without end (the traps)."""
    out: dict[str, int | None] = {}
    for h in plan.hosts.values():
        if h.infinite:
            out[h.name] = None
            continue
        paths = [url[len(h.base_url):] for url in h.reachable()]  # its home page even when disallowed
        urls = {content_url(plan, {"status": 200, "host": h.name, "path": p}) for p in paths if h.allowed(p)}
        out[h.name] = len(urls - {None})
    return out


def polite_bound(plan: Plan, pages: dict[str, int | None], at_s: float, host_delay_s: float) -> int | None:
    """The polite bound at ``at_s`` (module docstring); None when the host delay is 0 (only the CPU bounds)."""
    if host_delay_s <= 0:
        return None
    total = 0
    for name, n in pages.items():
        delay = max(host_delay_s, plan.hosts[name].crawl_delay or 0.0)
        k = int(at_s // delay)  # requests at 0 (robots.txt), delay, 2 x delay, ... <= at_s
        total += k if n is None else min(n, k)
    return total


@dataclass
class Verdict:
    name: str
    t0: float
    window_s: float
    at: tuple[float, ...]
    rates: tuple[float, ...]          # distinct content pages/s at each of ``at``
    pages: int                        # distinct content pages in the window
    requests: int                     # requests started in the window
    duty: float                       # in flight
    fetch_duty: float                 # [start, end + host delay] covered
    violations: Violations
    server_cpu: float | None = None   # the test web's CPU seconds over the run / T (1.0 = one core busy)

    def row(self) -> list[str]:
        v = self.violations
        return ([self.name] + [f"{r:.1f}" for r in self.rates]
                + [str(self.pages), str(self.requests), f"{self.duty:.2f}", f"{self.fetch_duty:.2f}",
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
                   sum(1 for e in ends if e <= t0 + window_s), len(inside), duty_cycle(inside, t0, window_s),
                   duty_cycle(inside, t0, window_s, host_delay_s), v)


VIOLATION_COLUMNS = ["too close", "overlap", "crowded addr", "robots", "Retry-After", "bait"]


def table(verdicts: list[Verdict], bound: list[int | None] | None = None) -> str:
    """A plain-text table of the verdicts (same ``at`` for all), then the ratio of the first to the last;
    ``bound``: the polite bound (pages) at each ``at``, as a last row and a ratio line."""
    at = verdicts[0].at
    head = ["crawler"] + [f"pages/s @{a:g}s" for a in at] + ["pages", "requests", "in flight", "fetch duty", "server cpu"] + VIOLATION_COLUMNS
    rows = [head] + [v.row() for v in verdicts]
    if bound and all(b is not None for b in bound):
        rows.append(["polite bound"] + [f"{b / a:.1f}" for b, a in zip(bound, at)] + [str(bound[-1])]
                    + [""] * (len(head) - len(at) - 2))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    if len(verdicts) == 2 and all(verdicts[1].rates):
        a, b = verdicts
        out.append(f"ratio {a.name}/{b.name}: " + ", ".join(
            f"{x / y:.2f}x @{t:g}s" for x, y, t in zip(a.rates, b.rates, at)))
    if bound and all(b is not None for b in bound):
        for v in verdicts:
            out.append(f"share of the polite bound, {v.name}: " + ", ".join(
                f"{r * t / b:.2f} @{t:g}s" for r, b, t in zip(v.rates, bound, at)))
    return "\n".join(out)
