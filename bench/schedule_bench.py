"""The re-crawl policies' staleness judged from the server's side (issue 15, "Benchmark").

The test web's live pages (``tests/testweb/live.py``: ``--hosts`` × ``--pages`` pages whose main text
changes as Poisson processes at rates spread log-uniformly over 1/20 .. 1/2000 per nominal second, or
in two classes with ``--fast-share``,
``--time-scale`` real seconds a nominal second) are crawled by the real CLI (``init``, ``inject`` every
live URL, then ``crawl --rounds R --wait W``: a policy whose pages are not due yet waits for them
instead of stopping), once per policy
(``schedule.policy`` = fixed, adaptive, nutch), the three crawls running side by side against one server,
so they face the same change instants; each sends its own User-Agent. Same budget: every round's fetch
list is capped at ``--cap`` URLs (``generate.top_n``) and every policy runs the same rounds (the first
N / cap fetch every page once: the judged window starts when every page has a copy); the order is
by due time alone (``priority.importance_s = depth_s = 0``), and ``schedule.default_interval_s`` is set
below the cap's cycle (N / cap rounds) so that the cap binds (fixed then re-fetches round-robin: uniform).

Judged from the request log per policy, from when every page has a copy to the crawl's end: the
time-averaged share of pages whose crawler copy was stale (``tests.testweb.staleness.judge``), the
wasted re-fetch share (fetches that found no change, by the truth), and the references at the run's own
measured budget (its successful live-page fetches per second):
- uniform: every page re-fetched every N / budget seconds, expected staleness 1 - mean F(λ, budget / N);
- oracle (Cho & Garcia-Molina, SIGMOD 2000): the intervals maximising Σ F(λ_i, f_i) under Σ f_i = budget
  from the TRUE rates (``crawl_udfs.change_rate.multiplier`` / ``adaptive_interval``, weight 1, no clamp),
  expected staleness 1 - mean F(λ_i, f_i), F(λ, f) = (f/λ)(1 - exp(-λ/f));
- both also "on this run's changes": the expected staleness of that periodic schedule at a random phase
  over the run's own change instants (``staleness.realised_periodic``), which takes the draw's luck out.

    PYTHONPATH=$PWD .venv/bin/python -m bench.schedule_bench --reps 2 --rounds 9
    PYTHONPATH=$PWD .venv/bin/python -m bench.schedule_bench --reps 2 --first-rep 1 --rounds 2000 --seconds 2300 \
        --hosts 4 --pages 24 --cap 48 --time-scale 6 --interval 200 --window 20 --wait 900   # ~80 min, quiet
    # two classes of pages (30 % fast), a budget where the oracle wastes < 50 % (tests/test_live_pages.py):
    PYTHONPATH=$PWD .venv/bin/python -m bench.schedule_bench --reps 1 --first-rep 1 --rounds 2000 --seconds 2300 \
        --hosts 4 --pages 24 --cap 48 --time-scale 6 --fast-share 0.3 --interval 400 --window 20 --wait 900

``--seconds`` interrupts every crawl (SIGINT, as Ctrl-C) at one deadline, so the three are judged over the
same window: adaptive's rounds are small and frequent and reach any ``--rounds`` long before fixed's.

Nothing leaves loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.testweb import TestWeb  # noqa: E402
from tests.testweb import staleness as S  # noqa: E402

POLICIES = ("fixed", "adaptive", "nutch")
UA = "deltacrawl/0.1 (bench-{policy}; +https://github.com/deltacrawl/deltacrawl/blob/main/docs/BOT.md)"


def ua_tag(name: str) -> str:
    """What a crawl's User-Agent holds and no other crawl's does: the name up to its ";" (adaptive is not
    adaptive@...)."""
    return f"bench-{name};"


AHEAD = "ahead_"  # a crawl named ahead_<policy>: that policy with generate.due_ahead_share = --ahead
UNDATED = "undated_"  # undated_<policy>: that policy with schedule.first_copy_dated = false


SET = "@"  # <name>@section.key=value: that crawl with one more setting (several: @a.b=1@c.d=2)


def base_policy(name: str) -> str:
    """The schedule.policy of a crawl named ``name`` (its variant prefixes and settings removed)."""
    return name.split(SET)[0].removeprefix(UNDATED).removeprefix(AHEAD)


def with_settings(toml: str, name: str) -> str:
    """``toml`` (one ``[section]`` line per table) with the ``@section.key=value`` settings of ``name`` put in
    their tables, replacing a key already there."""
    tables: dict[str, list[str]] = {}
    current = ""
    for line in toml.splitlines():
        if line.startswith("["):
            current = line.strip("[]")
        tables.setdefault(current, []).append(line)
    for setting in name.split(SET)[1:]:
        dotted, value = setting.split("=", 1)
        section, key = dotted.rsplit(".", 1)
        lines = tables.setdefault(section, [f"[{section}]"])
        lines[:] = [ln for ln in lines if not ln.startswith(f"{key} =")] + [f"{key} = {value}"]
    return "\n".join(ln for lines in tables.values() for ln in lines) + "\n"


def overlay(work: Path, web: TestWeb, policy: str, a) -> Path:
    path = work / f"{policy}.toml"
    ahead = a.ahead if policy.removeprefix(UNDATED).startswith(AHEAD) else 0.0
    path.write_text(with_settings(
        f'[storage]\nroot = "{work / policy}"\n'
        f'[crawler]\nuser_agent = "{UA.format(policy=policy)}"\n'
        f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
        f"[politeness]\nhost_delay_s = {a.delay}\n[fetch]\ntask_budget_s = {a.window}\n"
        f"[generate]\ntop_n = {a.cap}\ndue_ahead_share = {ahead}\n"
        f"[priority]\nimportance_s = 0.0\ndepth_s = 0.0\n"
        f"[importance]\nevery_rounds = 0\n"
        f"[dedup]\nnear_duplicates = false\nlearn_patterns = false\n"
        f'[schedule]\npolicy = "{base_policy(policy)}"\ndefault_interval_s = {a.interval}\n'
        f"first_copy_dated = {'false' if policy.startswith(UNDATED) else 'true'}\n"
        f"min_interval_s = 1.0\nmax_interval_s = 1000000.0\n", policy))
    return path


def crawl(work: Path, web: TestWeb, policy: str, a, out: dict) -> None:
    """init, inject every live page, then ``crawl --rounds R`` (its start and end in ``out``)."""
    conf = overlay(work, web, policy, a)
    seeds = work / "seeds.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    log = open(work / f"{policy}.out", "w")

    def run(*argv: str, until: float | None = None) -> None:
        """One CLI command; with ``until``, interrupted then (SIGINT, as an operator's Ctrl-C) if still running."""
        cmd = [sys.executable, "-m", "jobs.cli", "--conf", str(conf), *argv]
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        try:
            rc = proc.wait(timeout=None if until is None else max(0.0, until - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return
        if rc != 0:
            raise RuntimeError(f"{policy}: deltacrawl {' '.join(argv)} exited {rc} (see {log.name})")
    try:
        run("init")
        run("inject", str(seeds))
        out["t0"] = time.time()
        run("crawl", "--rounds", str(a.rounds), "--wait", str(a.wait), until=a.deadline)
        out["t1"] = min(time.time(), a.deadline or float("inf"))  # a crawl interrupted is judged up to then
    except Exception as e:  # reported with the results; the other crawls go on
        out["error"] = repr(e)
    finally:
        log.close()


def one_rep(work: Path, rep: int, a) -> list[dict]:
    knobs = {"live_hosts": a.hosts, "live_pages": a.pages, "live_time_scale": a.time_scale,
             "live_fast_share": a.fast_share, "max_lifetime_s": 7200.0}
    with TestWeb(work / "web", n_hosts=0, kinds=[], seed=100 + rep, knobs=knobs) as web:
        (work / "seeds.txt").write_text("\n".join(web.live.urls()) + "\n")
        times = {p: {} for p in a.policies}
        a.deadline = time.time() + a.seconds if a.seconds else None  # one end for every policy: the same window
        threads = [threading.Thread(target=crawl, args=(work, web, p, a, times[p])) for p in a.policies]
        for t in threads:
            t.start()
            time.sleep(a.stagger)  # the JVMs' start-ups apart
        for t in threads:
            t.join()
        records = web.log()
        live = web.live
    (work / "times.json").write_text(json.dumps(times))  # with web/live.json and the log: judge again later
    return judge_rep(records, live, times, rep, a)


def judge_rep(records: list[dict], live, times: dict, rep: int, a) -> list[dict]:
    rows = []
    for p in a.policies:
        t = dict(times.get(p, {}))
        if a.until:  # a crawl stopped early (--judge --until): judged up to then
            t = {**t, "t1": min(t.get("t1", a.until), a.until)}
        if "t1" not in t:
            rows.append({"rep": rep, "policy": p, "error": t.get("error", "no end time")})
            continue
        fetches = S.live_fetches(records, live, ua=ua_tag(p))
        if not all(fetches.values()):
            rows.append({"rep": rep, "policy": p, "error": "a live page was never fetched: more rounds"})
            continue
        t0 = max(fs[0] for fs in fetches.values())  # from when every page has a copy (the first N / cap rounds)
        t0 += a.settle  # and, with --settle, once the estimates had that long to learn (every policy alike)
        if t0 >= t["t1"]:
            rows.append({"rep": rep, "policy": p, "error": "--settle leaves no window"})
            continue
        j = S.judge(live, fetches, t0, t["t1"])
        ref = S.references(live, j.fetches_per_s, t0, t["t1"])
        n304 = sum(1 for r in records if r.get("kind") == "live" and ua_tag(p) in r.get("ua", "")
                   and r.get("status") == 304 and t0 < r["start"] <= t["t1"])
        halves = []  # the noise of the change draws: the same crawl judged on two halves of the hosts
        for half in (0, 1):
            sub = {k: v for k, v in fetches.items() if int(k[0].split("-")[1].split(".")[0]) % 2 == half}
            halves.append(S.judge(live, sub, t0, t["t1"]).stale_share)
        refs = S.page_references(live, j.fetches_per_s)
        pages = [[f"{k[0]} {k[1]}", st, *refs[k]] for k, st in S.page_stale_shares(live, fetches, t0, t["t1"]).items()]
        rows.append({"rep": rep, "policy": p, "pages": pages, "halves": halves, "seconds": round(j.seconds, 1),
                     "fetches": j.fetches,
                     "per_s": j.fetches_per_s, "stale": j.stale_share, "wasted": j.wasted_share, "n304": n304,
                     **ref, "epoch": live.epoch, "t0": t0, "t1": t["t1"]})
    return rows


def report(rows: list[dict], a) -> None:
    print("| rep | policy | s | fetches | stale (halves) | uniform (exp.) | oracle (exp.) | uniform (run) | oracle (run) "
          "| stale/oracle | stale/uniform | wasted (uniform, oracle exp.) | 304s |")
    print("|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['rep']} | {r['policy']} | error: {r['error']} |")
            continue
        hv = "/".join(f"{h:.3f}" for h in r["halves"])
        print(f"| {r['rep']} | {r['policy']} | {r['seconds']} | {r['fetches']} | {r['stale']:.3f} ({hv}) | {r['uniform']:.3f} "
              f"| {r['oracle']:.3f} | {r['uniform_run']:.3f} | {r['oracle_run']:.3f} | {r['stale'] / r['oracle']:.2f} "
              f"| {r['stale'] / r['uniform']:.2f} | {r['wasted']:.0%} ({r['uniform_wasted']:.0%}, {r['oracle_wasted']:.0%}) "
              f"| {r['n304']} |")
    ok = [r for r in rows if "error" not in r]
    for p in a.policies:
        rs = [r for r in ok if r["policy"] == p]
        if rs:
            st = [r["stale"] for r in rs]
            print(f"{p}: stale {statistics.mean(st):.3f} (runs {', '.join(f'{s:.3f}' for s in st)}), "
                  f"/oracle {statistics.mean(r['stale'] / r['oracle'] for r in rs):.2f}, "
                  f"/uniform {statistics.mean(r['stale'] / r['uniform'] for r in rs):.2f}, "
                  f"wasted {statistics.mean(r['wasted'] for r in rs):.0%}")
    ranges(ok, a.policies)


def ranges(ok: list[dict], policies) -> None:
    """90 % ranges of the pooled ratios (every judged page of every rep, drawn again with replacement,
    ``staleness.bootstrap``): stale over the oracle's and uniform's expected staleness at the run's own
    budget, and the stale-share difference of each policy against the first, paired on the same pages."""
    by = {p: {(r["rep"], pg[0]): pg[1:] for r in ok if r["policy"] == p and "pages" in r for pg in r["pages"]}
          for p in policies}
    for p, pages in by.items():
        if pages:
            o = S.bootstrap([(st, orc) for st, _, orc in pages.values()])
            u = S.bootstrap([(st, uni) for st, uni, _ in pages.values()])
            print(f"{p}: {len(pages)} pages: stale/oracle {o[0]:.2f} [{o[1]:.2f}, {o[2]:.2f}], "
                  f"stale/uniform {u[0]:.2f} [{u[1]:.2f}, {u[2]:.2f}] (90 %, pages drawn again)")
    first = next(iter(policies), None)
    for p in list(policies)[1:]:
        both = [k for k in by.get(p, {}) if k in by.get(first, {})]
        if both:
            d = S.bootstrap([(by[p][k][0] - by[first][k][0], 1.0) for k in both])
            print(f"{p} - {first}: stale share {d[0]:+.3f} per page "
                  f"[{d[1]:+.3f}, {d[2]:+.3f}] ({len(both)} pages, paired)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=12, help="rounds per crawl (the first N / cap fetch every page once)")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--pages", type=int, default=12, help="live pages per host")
    ap.add_argument("--cap", type=int, default=16, help="generate.top_n of every measured round")
    ap.add_argument("--time-scale", type=float, default=8.0, help="real seconds per nominal second of the rates")
    ap.add_argument("--fast-share", type=float, default=0.0,
                    help="0: rates log-uniform over 1/20 .. 1/2000; s > 0: that share of the pages at 1/20, the rest "
                         "at 1/2000 (Knobs.live_fast_share)")
    ap.add_argument("--interval", type=float, default=120.0,
                    help="schedule.default_interval_s: below N / cap rounds of real time, so the cap binds")
    ap.add_argument("--delay", type=float, default=0.2, help="politeness.host_delay_s")
    ap.add_argument("--window", type=float, default=20.0, help="fetch.task_budget_s")
    ap.add_argument("--wait", type=float, default=900.0,
                    help="crawl --wait: idle seconds a crawl waits for its next due URL before it stops")
    ap.add_argument("--seconds", type=float, default=0.0,
                    help="stop every crawl this many seconds after the rep starts (0: at --rounds or --wait)")
    ap.add_argument("--first-rep", type=int, default=0, help="the first rep's number (its web's seed is 100 + it)")
    ap.add_argument("--stagger", type=float, default=5.0, help="seconds between the crawls' starts")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help=f"crawls side by side: a policy, or {AHEAD}<policy>: it with generate.due_ahead_share = "
                         f"--ahead, or {UNDATED}<policy>: it with schedule.first_copy_dated = false; any of these with "
                         f"{SET}section.key=value: that setting too (adaptive{SET}schedule.prior_changes=1.0)")
    ap.add_argument("--ahead", type=float, default=0.5, help=f"generate.due_ahead_share of the {AHEAD}<policy> crawls")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--keep", help="keep the crawls under this directory")
    ap.add_argument("--judge", type=Path, help="only judge the reps kept under this directory again")
    ap.add_argument("--until", type=float, help="with --judge: judge up to this epoch time (crawls stopped early)")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="judge from this many seconds after every page holds a copy (the rate estimates' "
                         "learning left out of the window, for every policy alike)")
    a = ap.parse_args(argv)
    a.policies = tuple(a.policies.split(","))
    base = Path(a.keep or tempfile.mkdtemp(prefix="schedule-bench-"))
    rows: list[dict] = []
    started = time.time()
    if a.judge:
        from tests.testweb import read_log
        from tests.testweb.live import LiveWeb

        for rep in range(a.first_rep, a.first_rep + a.reps):
            d = a.judge / f"rep{rep}"
            times = json.loads((d / "times.json").read_text()) if (d / "times.json").exists() else {}
            rows += judge_rep(read_log(d / "web" / "requests.jsonl"), LiveWeb.load(d / "web" / "live.json"),
                              times, rep, a)
        report(rows, a)
        return 0
    try:
        for rep in range(a.first_rep, a.first_rep + a.reps):
            work = base / f"rep{rep}"
            work.mkdir(parents=True)
            rows += one_rep(work, rep, a)
            print(f"rep {rep} done at {time.time() - started:.0f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    n = a.hosts * a.pages
    spread = f"{a.fast_share:.0%} at 1/20, the rest at 1/2000" if a.fast_share else "1/20..1/2000 log-uniform"
    print(f"schedule_bench: {n} live pages ({a.hosts} hosts), rates {spread} per nominal s x {a.time_scale} real s, "
          f"cap {a.cap}/round, {a.rounds} rounds{f' or {a.seconds:.0f} s' if a.seconds else ''}, "
          f"default_interval_s {a.interval}; {time.time() - started:.0f} s")
    report(rows, a)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
