"""Where a policy's staleness above the oracle's comes from (issue 15): one kept rep of ``bench.schedule_bench``.

``bench.schedule_bench`` judges each crawl's copies against the SIGMOD 2000 oracle at the run's own budget
B (live fetches per second, from the server's log). This splits the adaptive policy's gap into factors,
each an expected stale share under the TRUE rates of periodic re-fetching (``tests.testweb.staleness``):

1. ``oracle``: the intervals from the true rates at B;
2. ``estimates``: the same solution from the crawl's own rate estimates (``crawldb.change_rate`` at the
   window's end), re-solved at B: what the estimates' errors cost, had the crawl kept that plan exactly;
3. ``realised``: each page re-fetched periodically at its realised mean interval in the window (window /
   fetches): what the crawl's actual allocation of its fetches costs (plan drift, lateness that differs
   by page, the round cap);
4. ``actual``: the crawl's measured stale share; against ``realised`` on this run's own change instants
   (``staleness.realised_periodic``), what irregular intervals (a page fetched early, then late) cost.

And the re-fetch rate the crawl's last intervals plan (Σ 1 / ``fetch_interval_s``) against B: a policy that
plans more re-fetches than its rounds can make fetches every page late, by the same seconds whatever its
interval. ``estimates`` needs the stored rates (``schedule.policy = "adaptive"``).

Two questions about the ``estimates`` factor (session 24):
- ``--over-time N``: is it the estimator or the time it had? The factor from the estimates the crawl DB
  held at N evenly spaced times of the window (Delta time travel, ``TIMESTAMP AS OF``).
- ``--priors K,...``: would another prior do better? Each page's rate re-estimated from its stored history
  (``change_intervals_s``, ``unchanged_span_s``) and its host's pooled revisits with the prior weight
  ``schedule.prior_changes`` = K, by ``crawl_udfs.change_rate`` itself; and with a nonparametric
  empirical-Bayes prior (a grid over log λ fitted by EM to all the pages' likelihoods, posterior mean).

    PYTHONPATH=$PWD .venv/bin/python -m bench.schedule_gap --dir DIR/rep1 [--policy adaptive] [--until EPOCH] \
        [--over-time 5] [--priors 0.25,0.5,1,2]

One ``deltacrawl sql`` per question (a JVM start) reads the crawl DB. Nothing leaves loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.schedule_bench import ua_tag  # noqa: E402
from tests.testweb import read_log  # noqa: E402
from tests.testweb import staleness as S  # noqa: E402
from tests.testweb.live import LiveWeb  # noqa: E402

QUERY = "SELECT url, change_rate, fetch_interval_s FROM crawldb WHERE url LIKE '%/live/%'"


def crawl_db(rep: Path, policy: str, query: str = QUERY) -> list[dict]:
    """The crawl's rows of the live pages as it left them (its last rate estimates and intervals), read
    through the CLI as an operator would (the registered ``crawldb``)."""
    conf = rep / f"{policy}.toml"
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "--conf", str(conf), "sql", query, "--format", "json"],
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"deltacrawl sql exited {out.returncode}: {out.stderr[-2000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]  # one JSON object a row


def split(live, fetches: dict, rows: dict, t0: float, t1: float) -> dict:
    """The factors of the module docstring over [t0, t1]: ``fetches`` the crawl's live fetches (server log),
    ``rows`` its crawl-DB rows by page key."""
    keys = live.keys()
    rates = [live.rate(*k) for k in keys]
    j = S.judge(live, fetches, t0, t1)
    b = j.fetches_per_s
    oracle = S.oracle_staleness(rates, b)
    out = {"B": b, "actual": j.stale_share, "oracle": oracle, "uniform": S.uniform_staleness(rates, b)}
    est = {k: r["change_rate"] for k, r in rows.items() if r.get("change_rate")}
    out["planned_per_s"] = sum(1.0 / r["fetch_interval_s"] for r in rows.values())
    longest = max((r["fetch_interval_s"] for r in rows.values()), default=0.0)
    out["given_up"] = sorted(f"{k[0]}{k[1]} ({live.rate(*k) * 3600:.2f}/h)" for k, r in rows.items()
                             if r["fetch_interval_s"] >= longest > 100 * (t1 - t0))
    if len(est) == len(keys):
        factor, out["estimate_over_true"] = estimates_factor(live, est, b)
        out["estimates"] = factor * oracle
    realised = {k: (t1 - t0) / max(1, sum(1 for f in fetches[k] if t0 < f <= t1)) for k in keys}
    out["realised"] = S.expected_staleness(rates, [realised[k] for k in keys])
    out["realised_run"] = S.realised_share(live, realised, t0, t1)
    return out


def estimates_factor(live, est: dict, b: float) -> tuple[float, dict]:
    """(expected staleness of the SIGMOD 2000 plan from the estimates ``est`` at budget ``b``, over the
    oracle's; estimate / true rate percentiles)."""
    keys = live.keys()
    rates = [live.rate(*k) for k in keys]
    planned = S.oracle_intervals([est[k] for k in keys], b)
    ratio = sorted(est[k] / live.rate(*k) for k in keys)
    n = len(ratio)
    return (S.expected_staleness(rates, planned) / S.oracle_staleness(rates, b),
            {"p10": ratio[n // 10], "median": ratio[n // 2], "p90": ratio[n * 9 // 10]})


def over_time(rep: Path, policy: str, live, b: float, t0: float, t1: float, n: int) -> list[tuple[float, float, dict]]:
    """(seconds into the window, estimates factor, ratio percentiles) at ``n`` evenly spaced times."""
    import datetime as dt
    from crawl_udfs import config
    from jobs import common
    path = common.table_path(config.load([rep / f"{policy}.toml"]), "crawldb")
    at = [t0 + (t1 - t0) * (i + 1) / n for i in range(n)]
    stamp = {t: dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") for t in at}
    query = " UNION ALL ".join(  # the last: the table as the crawl left it (its last commit is before t1)
        f"SELECT '{stamp[t]}' AS at, url, change_rate FROM delta.`{path}` "
        + (f"TIMESTAMP AS OF '{stamp[t]}' " if t < at[-1] else "") + "WHERE url LIKE '%/live/%'" for t in at)
    rows = crawl_db(rep, policy, query)
    out = []
    for t in at:
        est = {live.key(r["url"]): r["change_rate"] for r in rows if r["at"] == stamp[t] and r["change_rate"]}
        if len(est) == len(live.keys()):
            out.append((t - t0, *estimates_factor(live, est, b)))
    return out


def other_priors(rep: Path, policy: str, live, b: float, weights: list[float]) -> list[tuple[str, float, dict]]:
    """(label, estimates factor, ratio percentiles) of the rates re-estimated from the stored histories."""
    from crawl_udfs import change_rate as R
    from crawl_udfs import config
    default_s = config.load([rep / f"{policy}.toml"]).schedule.default_interval_s
    rows = {live.key(r["url"]): r for r in crawl_db(rep, policy, PRIOR_QUERY)}
    out = []
    for k in weights:
        est = {key: R.change_rate(r["change_intervals_s"] or [], r["unchanged_span_s"] or 0.0,
                                  R.host_rate(r["revisits"] or 0, r["revisit_changes"] or 0,
                                              r["revisit_span_s"] or 0.0, default_s), k)
               for key, r in rows.items()}
        out.append((f"prior_changes = {k:g}", *estimates_factor(live, est, b)))
    out.append(("nonparametric EB, posterior mean", *estimates_factor(live, _npeb(rows), b)))
    return out


PRIOR_QUERY = ("SELECT c.url, c.change_intervals_s, c.unchanged_span_s, h.revisits, h.revisit_changes, "
               "h.revisit_span_s FROM crawldb c JOIN hosts h ON c.host = h.host WHERE c.url LIKE '%/live/%'")


def _npeb(rows: dict, points: int = 61, iterations: int = 200) -> dict:
    """Each page's posterior-mean rate under a grid prior over log λ (1e-6 .. 1 per second) fitted by EM to
    every page's likelihood (Σ log(1 - e^{-λt_i}) - λU; a dated change's term log λ)."""
    import math
    grid = [math.exp(math.log(1e-6) + i * -math.log(1e-6) / (points - 1)) for i in range(points)]

    def loglik(r, lam):
        ll = -lam * (r["unchanged_span_s"] or 0.0)
        for t in r["change_intervals_s"] or []:
            ll += math.log(max(1e-300, -math.expm1(-lam * t))) if t > 0 else math.log(lam)
        return ll
    lik = {k: [loglik(r, g) for g in grid] for k, r in rows.items()}

    def posterior(k, w):
        logs = [lik[k][i] + math.log(max(w[i], 1e-300)) for i in range(points)]
        top = max(logs)
        p = [math.exp(x - top) for x in logs]
        return [x / sum(p) for x in p]
    w = [1.0 / points] * points
    for _ in range(iterations):
        w = [sum(col) / len(lik) for col in zip(*(posterior(k, w) for k in lik))]
    return {k: sum(p * g for p, g in zip(posterior(k, w), grid)) for k in lik}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, required=True, help="one kept rep: DIR/repN of bench.schedule_bench --keep DIR")
    ap.add_argument("--policy", default="adaptive")
    ap.add_argument("--until", type=float, help="judge up to this epoch time (default: the crawl's end)")
    ap.add_argument("--over-time", type=int, default=0, help="the estimates factor at this many times of the window")
    ap.add_argument("--priors", default="", help="comma-separated prior weights to re-estimate the rates with")
    a = ap.parse_args(argv)
    live = LiveWeb.load(a.dir / "web" / "live.json")
    times = json.loads((a.dir / "times.json").read_text())[a.policy]
    fetches = S.live_fetches(read_log(a.dir / "web" / "requests.jsonl"), live, ua=ua_tag(a.policy))
    t0 = max(fs[0] for fs in fetches.values())  # as bench.schedule_bench: from when every page has a copy
    t1 = min(times["t1"], a.until or times["t1"])
    rows = {live.key(r["url"]): r for r in crawl_db(a.dir, a.policy)}
    s = split(live, fetches, rows, t0, t1)
    print(f"{a.dir} {a.policy}: window {t1 - t0:.0f} s, {len(fetches)} pages, B = {s['B']:.4f} live fetches/s")
    print(f"  stale share (expected under the true rates, periodic, at B): oracle {s['oracle']:.3f}, "
          f"uniform {s['uniform']:.3f}")
    if "estimates" in s:
        e = s["estimate_over_true"]
        print(f"  from the crawl's final estimates, re-solved at B: {s['estimates']:.3f} "
              f"({s['estimates'] / s['oracle']:.3f}x oracle); estimate/true rate p10 {e['p10']:.2f}, "
              f"median {e['median']:.2f}, p90 {e['p90']:.2f}")
    print(f"  at each page's realised mean interval: {s['realised']:.3f} ({s['realised'] / s['oracle']:.3f}x oracle); "
          f"on this run's changes {s['realised_run']:.3f}")
    print(f"  actual: {s['actual']:.3f} ({s['actual'] / s['oracle']:.3f}x oracle, "
          f"{s['actual'] / s['realised_run']:.3f}x its own realised periodic)")
    print(f"  re-fetch rate the crawl's last intervals plan (sum of 1 / fetch_interval_s): {s['planned_per_s']:.4f}/s "
          f"against B {s['B']:.4f}/s achieved")
    print(f"  pages given up at the end (the longest interval, never due in the window): {len(s['given_up'])} "
          f"{', '.join(map(str, s['given_up']))}")
    for secs, factor, e in over_time(a.dir, a.policy, live, s["B"], t0, t1, a.over_time) if a.over_time else []:
        print(f"  estimates held {secs:6.0f} s into the window: {factor:.3f}x oracle; estimate/true rate "
              f"p10 {e['p10']:.2f}, median {e['median']:.2f}, p90 {e['p90']:.2f}")
    weights = [float(x) for x in a.priors.split(",") if x]
    for label, factor, e in other_priors(a.dir, a.policy, live, s["B"], weights) if weights else []:
        print(f"  re-estimated, {label}: {factor:.3f}x oracle; estimate/true rate p10 {e['p10']:.2f}, "
              f"median {e['median']:.2f}, p90 {e['p90']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
