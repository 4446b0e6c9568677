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

    PYTHONPATH=$PWD .venv/bin/python -m bench.schedule_gap --dir DIR/rep1 [--policy adaptive] [--until EPOCH]

One ``deltacrawl sql`` per call (a JVM start) reads the crawl DB. Nothing leaves loopback.
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

from tests.testweb import read_log  # noqa: E402
from tests.testweb import staleness as S  # noqa: E402
from tests.testweb.live import LiveWeb  # noqa: E402

QUERY = "SELECT url, change_rate, fetch_interval_s FROM crawldb WHERE url LIKE '%/live/%'"


def crawl_db(rep: Path, policy: str) -> list[dict]:
    """The crawl's rows of the live pages as it left them (its last rate estimates and intervals), read
    through the CLI as an operator would (the registered ``crawldb``)."""
    conf = rep / f"{policy}.toml"
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "--conf", str(conf), "sql", QUERY, "--format", "json"],
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
    if len(est) == len(keys):
        planned = S.oracle_intervals([est[k] for k in keys], b)
        out["estimates"] = S.expected_staleness(rates, planned)
        ratio = sorted(est[k] / live.rate(*k) for k in keys)
        out["estimate_over_true"] = {"p10": ratio[len(ratio) // 10], "median": ratio[len(ratio) // 2],
                                     "p90": ratio[len(ratio) * 9 // 10]}
    realised = {k: (t1 - t0) / max(1, sum(1 for f in fetches[k] if t0 < f <= t1)) for k in keys}
    out["realised"] = S.expected_staleness(rates, [realised[k] for k in keys])
    out["realised_run"] = S.realised_share(live, realised, t0, t1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, required=True, help="one kept rep: DIR/repN of bench.schedule_bench --keep DIR")
    ap.add_argument("--policy", default="adaptive")
    ap.add_argument("--until", type=float, help="judge up to this epoch time (default: the crawl's end)")
    a = ap.parse_args(argv)
    live = LiveWeb.load(a.dir / "web" / "live.json")
    times = json.loads((a.dir / "times.json").read_text())[a.policy]
    fetches = S.live_fetches(read_log(a.dir / "web" / "requests.jsonl"), live, ua=f"bench-{a.policy}")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
