"""Where the seconds between ``deltacrawl crawl`` launch and its first request go (issue 13, point 3).

Run from the repository root with the project's venv::

    PYTHONPATH=$PWD .venv/bin/python -m bench.first_request                       # 300-host web, 2 runs
    PYTHONPATH=$PWD .venv/bin/python -m bench.first_request --variant cpu3000     # 3,000 hosts at delay 0
    PYTHONPATH=$PWD .venv/bin/python -m bench.first_request --code /tmp/base --code .   # two checkouts, alternated

What it does, per run: starts nothing new on the web (one test web, as ``bench/crawl_vs_scrapy.py``
starts it, serves every run), makes a fresh ``storage.root``, runs ``deltacrawl init`` and ``inject``
(every host's home page) untimed, then launches ``deltacrawl crawl --rounds 1`` at t0 as this file
run as a script (``--child``): it wraps the driver's steps (the session build, the storage check,
the lease, ``register_tables``, the ledger reads and writes, resolve, generate, fetch) and the fetch
task (a subclass of ``jobs.fetch.FetchTask``, pickled by value), each writing a stamp (start, end,
Spark jobs started) to a file, then calls ``jobs.cli.main`` as the ``deltacrawl`` command does.
The process is stopped a few seconds after the server logged the crawl's first request.

Printed per run: each step's start and end after t0, its seconds and Spark jobs (the DAG
scheduler's job counter before and after), and the first request in the server's log. The
fetch task's lines say when its Python worker (and the daemon that forked it) started, when the
task was called, when its input was read, and when its first request left. Every time is from
one clock (epoch seconds of this machine); the machine is shared, so the load is printed too.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

STAMPS_ENV = "FIRST_REQUEST_STAMPS"
#: (module, attribute, label) of the driver steps the child wraps, in the order a crawl reaches them.
DRIVER_STEPS = (
    ("jobs.session", "build_session", "session (JVM + Delta)"),
    ("jobs.cli", "_check_storage", "_check_storage"),
    ("jobs.lease", "Lease.take", "lease take"),
    ("jobs.common", "register_tables", "register_tables"),
    ("jobs.ledger", "last_round", "ledger read"),
    ("jobs.generate", "run", "GENERATE"),
    ("jobs.ledger", "step", "ledger.step"),
    ("jobs.resolve", "run", "resolve"),
    ("jobs.generate", "select_due", "select_due (lazy)"),
    ("jobs.ledger", "set_state", "ledger write"),
    ("jobs.fetch", "run", "FETCH"),
    ("jobs.fetch", "_fetch", "fetch job (until stopped)"),
)
#: Spark actions and Delta calls, stamped as the sub-steps that cost jobs or snapshot loads.
ACTIONS = (
    ("pyspark.sql.classic.dataframe", "DataFrame.collect", "  collect"),
    ("pyspark.sql.classic.dataframe", "DataFrame.count", "  count"),
    ("pyspark.sql", "DataFrameWriter.save", "  write"),
    ("pyspark.sql", "SparkSession.sql", "  sql"),
    ("delta.tables", "DeltaMergeBuilder.execute", "  MERGE"),
    ("delta.tables", "DeltaTable.isDeltaTable", "  isDeltaTable"),
    ("delta.tables", "DeltaTable.forPath", "  forPath"),
)


# ------------------------------------------------------------------ the child: stamps from inside the crawl


def _stamp(path: str, **rec) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def _jobs() -> int | None:
    from pyspark import SparkContext
    sc = SparkContext._active_spark_context
    return None if sc is None else int(sc._jsc.sc().dagScheduler().numTotalJobs())


def _wrap(path: str, owner, attr: str, label: str) -> None:
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    def wrapped(*a, **kw):
        t0, j0 = time.time(), _jobs()
        _stamp(path, label=label, t0=t0, t1=None, jobs=None, where="driver", open=True)
        try:
            return fn(*a, **kw)
        finally:
            j1 = _jobs()
            _stamp(path, label=label, t0=t0, t1=time.time(),
                   jobs=None if j1 is None else j1 - (j0 or 0), where="driver")
    setattr(owner, attr, wrapped)


def _job_stamps(path: str) -> None:
    """Every Spark job once it has ended: its name, submission and completion (from the status store)."""
    from pyspark import SparkContext

    done = 0
    while True:
        time.sleep(0.5)
        sc = SparkContext._active_spark_context
        if sc is None:
            continue
        try:
            store, total = sc._jsc.sc().statusStore(), int(sc._jsc.sc().dagScheduler().numTotalJobs())
            while done < total:
                d = store.job(done)
                if not d.completionTime().isDefined():
                    break
                _stamp(path, label=f"    job {done}: {str(d.name())[:40]}", t0=d.submissionTime().get().getTime() / 1e3,
                       t1=d.completionTime().get().getTime() / 1e3, jobs=1, where="spark job")
                done += 1
        except Exception:  # noqa: BLE001 - a job not in the store yet, or the JVM going down
            continue


def _proc_start(pid: int) -> float:
    """Epoch seconds at which process ``pid`` started (Linux /proc)."""
    with open("/proc/stat") as f:
        btime = next(float(ln.split()[1]) for ln in f if ln.startswith("btime"))
    with open(f"/proc/{pid}/stat") as f:
        ticks = float(f.read().rsplit(")", 1)[1].split()[19])
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def child(stamps: str, argv: list[str]) -> int:
    import importlib

    _stamp(stamps, label="python up, importing the CLI", t0=time.time(), t1=time.time(), jobs=None, where="driver")
    from jobs import cli, fetch

    for mod, attr, label in DRIVER_STEPS + ACTIONS:
        owner = importlib.import_module(mod)
        if "." in attr:
            cls, attr = attr.split(".")
            owner = getattr(owner, cls)
        _wrap(stamps, owner, attr, label)

    class TimedFetchTask(fetch.FetchTask):
        """FetchTask that stamps when its worker started, when it was called and when its input was read."""

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.stamps = stamps

        def __call__(self, batches):
            called = time.time()
            pid = os.getpid()
            first = []

            def counted(it):
                for b in it:
                    if not first:
                        first.append(time.time())
                    yield b
                _stamp(self.stamps, label="task input read", t0=first[0] if first else called, t1=time.time(),
                       jobs=None, where=f"task pid {pid}")
            _stamp(self.stamps, label="python daemon started", t0=_proc_start(os.getppid()), t1=None, jobs=None,
                   where=f"task pid {pid}")
            _stamp(self.stamps, label="python worker started", t0=_proc_start(pid), t1=None, jobs=None,
                   where=f"task pid {pid}")
            _stamp(self.stamps, label="fetch task called", t0=called, t1=None, jobs=None, where=f"task pid {pid}")
            yield from super().__call__(counted(batches))

    fetch.FetchTask = TimedFetchTask
    import threading
    threading.Thread(target=_job_stamps, args=(stamps,), daemon=True).start()
    _stamp(stamps, label="CLI imported, steps wrapped", t0=time.time(), t1=time.time(), jobs=None, where="driver")
    return cli.main(argv)


# ------------------------------------------------------------------ the parent


def note(msg: str) -> None:
    print(f"[first-request {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def one_run(args, web, variant, code: str, work) -> dict:
    import subprocess

    from bench.crawl_vs_scrapy import _stop_group, deltacrawl_env

    work.mkdir(parents=True)
    overlay = work / "bench.toml"
    overlay.write_text(f'[storage]\nroot = "{work / "crawl"}"\n'
                       f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = {json.dumps(web.allow_cidrs)}\n')
    sets = [f"politeness.host_delay_s={variant.delay_s}", *variant.overrides, *args.set]
    base = ["--conf", str(overlay)] + [a for s in sets for a in ("--set", s)]
    seeds = work / "seeds.txt"
    seeds.write_text("\n".join(web.seeds()) + "\n")
    env = dict(deltacrawl_env(), PYTHONPATH=code)
    exe = [sys.executable, "-m", "jobs.cli"]
    for verb in (["init"], ["inject", str(seeds)]):
        subprocess.run(exe + base + verb, check=True, env=env, cwd=code, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    stamps = work / "stamps.jsonl"
    load = os.getloadavg()[0]
    with open(work / "crawl.out", "wb") as out:
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", str(stamps), "--", *base,
                                 "crawl", "--rounds", "1"], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=code, start_new_session=True)
        first = None
        while time.time() < t0 + args.timeout:
            mine = [r for r in web.log() if r["start"] >= t0]
            if mine:
                first = min(r["start"] for r in mine)
                if time.time() > first + args.after:
                    break
            if proc.poll() is not None:
                break
            time.sleep(0.25)
        _stop_group(proc)
    lines = [r for r in web.log() if r["start"] >= t0]
    recs = [json.loads(ln) for ln in stamps.read_text().splitlines()] if stamps.exists() else []
    return {"code": code, "t0": t0, "load": load, "first_request": first, "stamps": recs,
            "requests_in_window": len(lines),
            "first_page": min((r["start"] for r in lines if not r["path"].startswith("/robots")), default=None)}


def report(run: dict) -> str:
    t0 = run["t0"]
    rel = (lambda t: "" if t is None else f"{t - t0:7.2f}")
    lines = [f"code {run['code']}  (load {run['load']:.2f} at launch)",
             f"  {'step':<34} {'start':>7} {'end':>7} {'seconds':>8} {'jobs':>5}  where"]
    closed = {(r["label"], r["t0"]) for r in run["stamps"] if not r.get("open")}
    for r in sorted(run["stamps"], key=lambda r: r["t0"]):
        if r.get("open") and (r["label"], r["t0"]) in closed:
            continue
        if r.get("open"):
            r = dict(r, label=r["label"] + " (not ended)")
        dur = "" if r["t1"] is None else f"{r['t1'] - r['t0']:8.2f}"
        lines.append(f"  {r['label']:<34} {rel(r['t0'])} {rel(r['t1']):>7} {dur:>8} "
                     f"{'' if r['jobs'] is None else r['jobs']:>5}  {r['where']}")
    fr, fp = run["first_request"], run["first_page"]
    lines.append(f"  first request at {'never' if fr is None else f'{fr - t0:.2f} s'} after launch"
                 f" (first page request {'never' if fp is None else f'{fp - t0:.2f} s'});"
                 f" {run['requests_in_window']} requests before the stop")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        rest = argv[2:]
        return child(argv[1], rest[1:] if rest[:1] == ["--"] else rest)
    from pathlib import Path
    import shutil
    import tempfile

    from bench.crawl_vs_scrapy import VARIANTS, Variant
    from tests.testweb import TestWeb

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="web300")
    ap.add_argument("--hosts", type=int, default=0, help="hosts of the test web (0: the variant's)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--runs", type=int, default=2, help="runs per checkout, alternated")
    ap.add_argument("--code", action="append", default=[], help="a checkout to run (default: this one; repeatable)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a deltacrawl override")
    ap.add_argument("--after", type=float, default=3.0, help="seconds to let the crawl run after its first request")
    ap.add_argument("--timeout", type=float, default=300.0, help="give up on a run after this many seconds")
    ap.add_argument("--json", type=Path, default=None, help="also write the raw stamps here")
    args = ap.parse_args(argv)
    base = VARIANTS[args.variant]
    variant = Variant(args.hosts or base.hosts, base.kinds, base.delay_s, base.overrides)
    codes = [os.path.abspath(c) for c in (args.code or [str(Path(__file__).resolve().parents[1])])]
    tmp = Path(tempfile.mkdtemp(prefix="first-request-"))
    runs = []
    try:
        with TestWeb(tmp / "web", n_hosts=variant.hosts, seed=args.seed, kinds=variant.kinds) as web:
            for i in range(args.runs):
                for j, code in enumerate(codes):
                    note(f"run {i + 1}, {code} (load {os.getloadavg()[0]:.2f})")
                    runs.append(one_run(args, web, variant, code, tmp / f"run{i}-{j}"))
                    print(report(runs[-1]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"first_request: variant {args.variant}, {variant.hosts} hosts, settings "
          f"{' '.join([f'politeness.host_delay_s={variant.delay_s}', *variant.overrides, *args.set])}")
    for code in codes:
        firsts = [r["first_request"] - r["t0"] for r in runs if r["code"] == code and r["first_request"]]
        print(f"  {code}: first request after launch, s: {', '.join(f'{x:.1f}' for x in firsts) or 'none'}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    if os.path.dirname(os.path.abspath(__file__)) == os.path.abspath(sys.path[0]):
        sys.path.pop(0)  # run as a script (the child): import jobs from PYTHONPATH, not bench/
    sys.exit(main())
