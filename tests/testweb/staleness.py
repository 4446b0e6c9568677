"""Staleness judged from the server's side: a crawler's copies of the live pages against their truth.

Guarantees:
- A crawler's copy of a live page is the version the server served at its last successful fetch (a 200,
  or a 304, which confirms the copy it holds is that version); it is stale from the first change after
  that fetch until the next one. ``judge`` integrates that over a time window, exactly (no sampling),
  from the request log and the model's change instants (``tests.testweb.live``); a page not yet fetched
  counts as stale.
- A re-fetch is wasted when the page had not changed since the crawler's previous fetch (truth, not the
  crawler's change detection).
- The references are the same formulas the crawler's schedule uses (``crawl_udfs.change_rate``): a page
  of rate λ re-fetched every 1/f is fresh a share F(λ, f) = (f/λ)(1 - exp(-λ/f)) of the time; uniform
  spends the budget B (fetches per second) as f = B/N each; the oracle (Cho & Garcia-Molina, SIGMOD 2000)
  spends it to maximise Σ F(λ_i, f_i) with the true rates: f_i = 1/I_i from ``adaptive_interval`` at the
  multiplier ``multiplier`` finds for Σ f_i = B, 0 for pages not worth a fetch. Expected staleness is
  1 - mean F.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from crawl_udfs import change_rate as R

OK = (200, 304)
NEVER_S = 1e12  # the oracle's interval of a page not worth its fetches (change_rate's max_s)


def live_fetches(records: list[dict], live, ua: str | None = None) -> dict[tuple[str, str], list[float]]:
    """Start times of the successful fetches (200, 304, not aborted) of each live page, in order, by the
    requests whose User-Agent contains ``ua`` (all when None)."""
    out: dict[tuple[str, str], list[float]] = {k: [] for k in live.keys()}
    for r in records:
        if r.get("kind") != "live" or r.get("status") not in OK or r.get("aborted"):
            continue
        if ua is not None and ua not in r.get("ua", ""):
            continue
        key = (r["host"], r["path"].split("?", 1)[0])
        if key in out:
            out[key].append(r["start"])
    return {k: sorted(v) for k, v in out.items()}


def stale_seconds(changes: list[float], fetches: list[float], t0: float, t1: float) -> float:
    """Seconds of [t0, t1] during which the copy was stale (see the module docstring)."""
    stale, prev = 0.0, None
    for f in [f for f in fetches if f < t1] + [t1]:  # each fetch closes the span since the previous one
        lo = max(t0, prev) if prev is not None else t0
        if f > lo:
            if prev is None:
                stale += f - lo  # never held yet
            else:
                i = bisect.bisect_right(changes, prev)  # first change after the previous fetch
                if i < len(changes) and changes[i] < f:
                    stale += f - max(changes[i], lo)
        prev = f
    return stale


def wasted(changes: list[float], fetches: list[float], t0: float, t1: float) -> tuple[int, int]:
    """(re-fetches in (t0, t1], those of them that found no change since the previous fetch)."""
    n = w = 0
    for prev, f in zip(fetches, fetches[1:]):
        if t0 < f <= t1:
            n += 1
            w += bisect.bisect_right(changes, f) == bisect.bisect_right(changes, prev)
    return n, w


@dataclass(frozen=True)
class Judgement:
    stale_share: float   # time-averaged share of pages whose copy was stale
    fetches: int         # successful fetches in (t0, t1]
    refetches: int       # of them, re-fetches of a page held before
    wasted: int          # re-fetches that found no change
    seconds: float       # t1 - t0

    @property
    def wasted_share(self) -> float:
        return self.wasted / self.refetches if self.refetches else 0.0

    @property
    def fetches_per_s(self) -> float:
        return self.fetches / self.seconds


def judge(live, fetches: dict[tuple[str, str], list[float]], t0: float, t1: float) -> Judgement:
    """The copies given by ``fetches`` (``live_fetches``) judged over [t0, t1] against ``live``."""
    if not t1 > t0:
        raise ValueError(f"empty window {t0}..{t1}")
    stale = n = re = w = 0
    for key, fs in fetches.items():
        ch = live.changes(*key, until=t1)
        stale += stale_seconds(ch, fs, t0, t1)
        n += sum(t0 < f <= t1 for f in fs)
        r, x = wasted(ch, fs, t0, t1)
        re, w = re + r, w + x
    return Judgement(stale / (len(fetches) * (t1 - t0)), n, re, w, t1 - t0)


def page_stale_shares(live, fetches: dict[tuple[str, str], list[float]], t0: float, t1: float) -> dict:
    """Each page's stale share of [t0, t1] (``judge``'s, before it averages them)."""
    return {key: stale_seconds(live.changes(*key, until=t1), fs, t0, t1) / (t1 - t0) for key, fs in fetches.items()}


def page_references(live, fetches_per_s: float) -> dict:
    """Each page's expected stale share under uniform's and the oracle's intervals at ``fetches_per_s``
    (``references``' per page): key -> (uniform, oracle)."""
    keys = live.keys()
    rates = [live.rate(*k) for k in keys]
    uni, orc = len(keys) / fetches_per_s, oracle_intervals(rates, fetches_per_s)
    return {k: (expected_staleness([r], [uni]), expected_staleness([r], [o])) for k, r, o in zip(keys, rates, orc)}


def bootstrap(pairs: list[tuple[float, float]], *, draws: int = 2000, seed: int = 1,
              share: float = 0.9) -> tuple[float, float, float]:
    """(Σa / Σb, low, high): the ratio over ``pairs`` (a, b) and its ``share`` range when the pairs (pages)
    are drawn again with replacement ``draws`` times: how much the ratio owes to which pages the web
    happened to have. ``b`` 0 with ``a`` anything: use (a - b, 1) pairs for a difference."""
    import random
    rnd = random.Random(seed)
    ratio = sum(a for a, _ in pairs) / sum(b for _, b in pairs)
    got = []
    for _ in range(draws):
        pick = [pairs[rnd.randrange(len(pairs))] for _ in pairs]
        den = sum(b for _, b in pick)
        if den:
            got.append(sum(a for a, _ in pick) / den)
    got.sort()
    cut = int(len(got) * (1 - share) / 2)
    return ratio, got[cut], got[len(got) - 1 - cut]


def oracle_intervals(rates: list[float], fetches_per_s: float) -> list[float]:
    """The SIGMOD 2000 optimal re-fetch interval of each page (seconds; NEVER_S: not worth a fetch)."""
    pages = [(r, 1.0, 1) for r in rates]
    mu = R.multiplier(pages, fetches_per_s, 1e-9, NEVER_S)
    return [R.adaptive_interval(r, 1.0, mu, 1e-9, NEVER_S) for r in rates]


def expected_staleness(rates: list[float], intervals: list[float]) -> float:
    """1 - mean F(λ, 1/I) of periodic re-fetching (a page never re-fetched is stale in the long run)."""
    return 1.0 - sum(R.freshness(r, i) if i < NEVER_S else 0.0 for r, i in zip(rates, intervals)) / len(rates)


def expected_wasted(rates: list[float], intervals: list[float]) -> float:
    """Share of periodic re-fetches that find no change: Σ f e^(-λ/f) / Σ f over the pages re-fetched."""
    kept = [(r, i) for r, i in zip(rates, intervals) if i < NEVER_S]
    return sum(math.exp(-r * i) / i for r, i in kept) / sum(1 / i for _, i in kept)


def uniform_staleness(rates: list[float], fetches_per_s: float) -> float:
    return expected_staleness(rates, [len(rates) / fetches_per_s] * len(rates))


def oracle_staleness(rates: list[float], fetches_per_s: float) -> float:
    return expected_staleness(rates, oracle_intervals(rates, fetches_per_s))


def oracle_gain(rates: list[float], fetches_per_s: float) -> float:
    """The oracle's staleness over uniform's at the same budget (what no policy can beat in expectation)."""
    return oracle_staleness(rates, fetches_per_s) / uniform_staleness(rates, fetches_per_s)


def realised_periodic(changes: list[float], interval: float, t0: float, t1: float) -> float:
    """Expected stale seconds of [t0, t1] of re-fetching every ``interval`` at a uniformly random phase, on
    this run's own change instants: the last fetch before t is uniform in the I seconds before t, and the
    copy is stale when it came before the last change c at or before t: probability max(0, 1 - (t - c)/I).
    Removes the noise of the change draws from the comparison with a crawl run over the same changes."""
    if interval >= NEVER_S:
        first = bisect.bisect_right(changes, t0)  # kept the copy of t0 for ever
        return t1 - changes[first] if first < len(changes) and changes[first] < t1 else 0.0
    edges = [c for c in changes if c < t1]
    stale = 0.0
    for i, c in enumerate(edges):
        a, b = max(c, t0), min(edges[i + 1] if i + 1 < len(edges) else t1, t1)
        m = min(b, c + interval)  # ∫_a^m (1 - (t - c)/I) dt; nothing after c + I
        if m > a:
            stale += (m - a) - ((m - c) ** 2 - (a - c) ** 2) / (2 * interval)
    return stale


def realised_share(live, intervals: dict[tuple[str, str], float], t0: float, t1: float) -> float:
    """Stale share over [t0, t1] of periodic re-fetching at ``intervals`` on the run's changes."""
    total = sum(realised_periodic(live.changes(*k, until=t1), iv, t0, t1) for k, iv in intervals.items())
    return total / (len(intervals) * (t1 - t0))


def references(live, fetches_per_s: float, t0: float, t1: float) -> dict[str, float]:
    """Uniform's and the oracle's staleness at ``fetches_per_s``: expected (analytic) and on this run's changes;
    and their expected wasted re-fetch shares."""
    keys = live.keys()
    rates = [live.rate(*k) for k in keys]
    orc = oracle_intervals(rates, fetches_per_s)
    uni = [len(keys) / fetches_per_s] * len(keys)
    return {"uniform": expected_staleness(rates, uni), "oracle": expected_staleness(rates, orc),
            "uniform_wasted": expected_wasted(rates, uni), "oracle_wasted": expected_wasted(rates, orc),
            "uniform_run": realised_share(live, dict(zip(keys, uni)), t0, t1),
            "oracle_run": realised_share(live, dict(zip(keys, orc)), t0, t1)}

