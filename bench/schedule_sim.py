"""Staleness of the re-crawl policies on simulated Poisson pages (no crawler, no Spark): a first look.

Pages change as Poisson processes at known rates (log-uniform between 1/20 s and 1/2000 s, the range the
issue's benchmark asks of the test web); every policy spends the same fetches per second. Staleness is
measured exactly from the change times (share of time the copy was older than the page), as the server
would judge it. Policies:
- uniform: every page every N / budget seconds;
- oracle: the SIGMOD 2000 optimum from the TRUE rates (crawl_udfs.change_rate.multiplier + adaptive_interval);
- adaptive: the same rule from rates estimated from its own visits (crawl_udfs.change_rate.change_rate with
  the pooled host prior), the multiplier re-solved every ``resolve_s`` over all pages;
- nutch: Nutch's AdaptiveFetchSchedule (its fetch count is whatever it spends; printed).

    python bench/schedule_sim.py [--pages 200] [--seconds 40000] [--seeds 3]

It is not the issue's benchmark (the crawler against the test web, judged by the server): see the report.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics

from crawl_udfs import change_rate as R


def change_times(rate: float, horizon: float, rnd: random.Random) -> list[float]:
    out, t = [], 0.0
    while True:
        t += rnd.expovariate(rate)
        if t > horizon:
            return out
        out.append(t)


def stale_time(changes: list[float], fetches: list[float], horizon: float) -> float:
    """Seconds the copy was stale: from the first change after a fetch to the next fetch."""
    stale, i = 0.0, 0
    edges = sorted(fetches) + [horizon]
    last = 0.0
    for f in edges:
        while i < len(changes) and changes[i] <= last:
            i += 1
        if i < len(changes) and changes[i] < f:
            stale += f - changes[i]
        last = f
    return stale


def run_policy(policy: str, rates: list[float], changes: list[list[float]], budget: float, horizon: float,
               resolve_s: float, min_s: float, max_s: float) -> tuple[float, int]:
    n = len(rates)
    if policy == "uniform":
        iv = n / budget
        fetches = [[k * iv + (j / n) * iv for k in range(int(horizon / iv) + 1)] for j in range(n)]
        fetches = [[f for f in fs if f < horizon] for fs in fetches]
    elif policy == "oracle":
        mu = R.multiplier([(r, 1.0, 1) for r in rates], budget, min_s, max_s)
        ivs = [R.adaptive_interval(r, 1.0, mu, min_s, max_s) for r in rates]
        fetches = [[k * iv + (j / n) * iv for k in range(int(horizon / iv) + 1)] for j, iv in enumerate(ivs)]
        fetches = [[f for f in fs if f < horizon] for fs in fetches]
    else:
        fetches = _adaptive(policy, changes, budget, horizon, resolve_s, min_s, max_s)
    stale = sum(stale_time(c, f, horizon) for c, f in zip(changes, fetches)) / (n * horizon)
    return stale, sum(len(f) for f in fetches)


def _adaptive(policy, changes, budget, horizon, resolve_s, min_s, max_s):
    n = len(changes)
    start_iv = n / budget
    nxt = [(j / n) * start_iv for j in range(n)]
    last = [None] * n
    hist, span, iv = [[] for _ in range(n)], [0.0] * n, [start_iv] * n
    fetches = [[] for _ in range(n)]
    host = [0, 0, 0.0]  # pooled revisits, changed, seconds
    mu, next_resolve = None, 0.0
    while True:
        j = min(range(n), key=nxt.__getitem__)
        t = nxt[j]
        if t >= horizon:
            return fetches
        if policy == "adaptive" and t >= next_resolve:
            prior = R.host_rate(host[0], host[1], host[2], start_iv)
            est = [R.change_rate(h, s, prior, 1.0) for h, s in zip(hist, span)]
            buckets: dict = {}
            for r in est:
                b = buckets.setdefault(round(math.log(r) * 2), [0.0, 0])
                b[0] += r
                b[1] += 1
            mu = R.multiplier([(s / c, 1.0, c) for s, c in buckets.values()], budget, min_s, max_s)
            next_resolve = t + resolve_s
        fetches[j].append(t)
        if last[j] is not None:
            gap = t - last[j]
            changed = any(last[j] < c <= t for c in changes[j])
            hist[j], span[j] = R.observe(hist[j], span[j], gap, changed, None, 32)
            host[0] += 1
            host[1] += changed
            host[2] += gap
            if policy == "nutch":
                iv[j] = R.nutch_interval(iv[j], changed, 0.4, 0.2, min_s, max_s)
        last[j] = t
        if policy == "adaptive":
            prior = R.host_rate(host[0], host[1], host[2], start_iv)
            iv[j] = R.adaptive_interval(R.change_rate(hist[j], span[j], prior, 1.0), 1.0, mu, min_s, max_s)
        nxt[j] = t + iv[j]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=40000.0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--mean-interval", type=float, default=200.0, help="budget: one fetch per page per this")
    a = ap.parse_args()
    results: dict = {}
    for seed in range(a.seeds):
        rnd = random.Random(seed)
        rates = [1 / 10 ** rnd.uniform(math.log10(20), math.log10(2000)) for _ in range(a.pages)]
        changes = [change_times(r, a.seconds, rnd) for r in rates]
        budget = a.pages / a.mean_interval
        for p in ("uniform", "oracle", "adaptive", "nutch"):
            results.setdefault(p, []).append(run_policy(p, rates, changes, budget, a.seconds, 2000.0, 1.0, 1e6))
    for p, rs in results.items():
        st = [s for s, _ in rs]
        print(f"{p:9s} staleness {statistics.mean(st):.3f} (runs {', '.join(f'{s:.3f}' for s in st)}), "
              f"fetches {statistics.mean(f for _, f in rs):.0f}")


if __name__ == "__main__":
    main()
