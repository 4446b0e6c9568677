"""deltacrawl against Scrapy on the same local test web, for the same wall time, judged by the server's log.

Run from the repository root with the project's venv (issue 13, "Measured side by side, in one run")::

    python -m bench.crawl_vs_scrapy                          # 300-host web, 300 s each (~12 min)
    python -m bench.crawl_vs_scrapy --variant cpu3000        # 3,000 ordinary sites, host delay 0
    python -m bench.crawl_vs_scrapy --seconds 120 --hosts 100 --set fetch.task_budget_s=45
    python -m bench.crawl_vs_scrapy --only deltacrawl        # or --only scrapy

Variants (``VARIANTS``): ``web300`` is the web of the issue: every special host of the test web
(robots variants, traps, duplicates, hostile hosts: slow drip, hang, bombs, throttling with
Retry-After, ...) and ordinary sites up to ``--hosts`` (300), whose sizes are heavy-tailed
(``sites._site_size``: log-uniform from 1 to 300 pages), at a 1 s host delay. ``cpu3000`` is
ordinary sites only (3,000 by default) at host delay 0: one request in flight per host is the only
politeness limit left, so the CPU is.

Steps, each crawler in turn on a FRESH test web of the same seed (its own server process and log):
1. deltacrawl: ``deltacrawl init`` and ``inject`` (every host's home page) untimed, then
   ``deltacrawl crawl --rounds N`` as a subprocess (JVM start and every round inside the window),
   storage.root in a temporary directory, the test web's hosts file and CIDR as the tests pass them;
2. Scrapy: ``bench/scrapy_spider.py`` in a bench-only venv (``bench/.venv-scrapy``, made here with
   ``python -m venv`` + pip from ``bench/scrapy-requirements.txt`` when missing or stale), the same
   seeds, Scrapy's documented broad-crawl settings (see that module);
3. each process is launched at t0 and its process group stopped at t0 + ``--seconds``; then the
   server's log is judged (``bench/vs_judge.py``: distinct content pages/s at 60, 120, 300 s,
   duty cycle, violations).

Prints what it measured and how, the load average before and after each crawler (the machine is
shared: compare the ratio, measured in one run, more than absolute figures), and a table.
Progress goes to stderr, the report to stdout. Nothing leaves loopback.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench.fetch_bench import _proc_cpu_s, _read_hosts_file
from bench.vs_judge import Verdict, content_pages, duty_cycle, judge, polite_bound, table

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
SCRAPY_VENV = BENCH / ".venv-scrapy"
SCRAPY_REQUIREMENTS = BENCH / "scrapy-requirements.txt"
AT_S = (60.0, 120.0, 300.0)
STOP_GRACE_S = 15.0


@dataclass(frozen=True)
class Variant:
    hosts: int
    kinds: tuple[str, ...] | None   # None: every kind of the test web
    delay_s: float
    overrides: tuple[str, ...]      # deltacrawl settings of the variant (before --set)


# deltacrawl's settings in both variants: a 60 s fetch window, each host's list derived from it
# (max_urls_per_host 0: floor(window / the host's delay), see conf/defaults.toml [generate]).
DELTACRAWL_SETTINGS = ("fetch.task_budget_s=60.0", "generate.max_urls_per_host=0")
VARIANTS = {
    "web300": Variant(300, None, 1.0, DELTACRAWL_SETTINGS),
    "cpu3000": Variant(3000, ("site",), 0.0, DELTACRAWL_SETTINGS),
}


def note(msg: str) -> None:
    print(f"[vs-scrapy {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load() -> str:
    return "load avg " + " ".join(f"{x:.2f}" for x in os.getloadavg())


# ------------------------------------------------------------------ the bench venv


def scrapy_python() -> Path:
    """The bench venv's python, (re)made when the pinned requirements changed since it was built."""
    want = hashlib.sha256(SCRAPY_REQUIREMENTS.read_bytes()).hexdigest()
    stamp = SCRAPY_VENV / "requirements.sha256"
    py = SCRAPY_VENV / "bin" / "python"
    if py.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return py
    note(f"building {SCRAPY_VENV} from {SCRAPY_REQUIREMENTS.name} (pip, PyPI)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(SCRAPY_VENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "-r", str(SCRAPY_REQUIREMENTS)], check=True)
    stamp.write_text(want + "\n")
    return py


# ------------------------------------------------------------------ running a crawler for T seconds


def run_for(cmd: list[str], seconds: float, env: dict, out: Path) -> tuple[float, int | None]:
    """Launch ``cmd`` in its own process group at t0, stop the group at t0 + seconds; (t0, exit code or None)."""
    with open(out, "wb") as f:
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=REPO, start_new_session=True)
        try:
            code = proc.wait(max(0.0, t0 + seconds - time.time()))
        except subprocess.TimeoutExpired:
            code = None
            _stop_group(proc)
    return t0, code


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)  # the group of our own child (the JVM included), by its id
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def deltacrawl_env() -> dict:
    py = sys.executable
    return dict(os.environ, PYTHONPATH=str(REPO), PYSPARK_PYTHON=py, PYSPARK_DRIVER_PYTHON=py, PYTHONUNBUFFERED="1")


def run_deltacrawl(args, web, v: Variant, work: Path) -> tuple[float, int | None, list[str]]:
    exe = args.deltacrawl or str(Path(sys.executable).parent / "deltacrawl")
    overlay = work / "bench.toml"
    overlay.write_text(f'[storage]\nroot = "{work / "crawl"}"\n'
                       f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = {json.dumps(web.allow_cidrs)}\n')
    sets = [f"politeness.host_delay_s={v.delay_s}", *v.overrides, *args.set]
    base = [exe, "--conf", str(overlay)] + [a for s in sets for a in ("--set", s)]
    seeds = work / "seeds.txt"
    seeds.write_text("\n".join(web.seeds()) + "\n")
    env = deltacrawl_env()
    for verb in (["init"], ["inject", str(seeds)]):
        subprocess.run(base + verb, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    note(f"deltacrawl crawl --rounds {args.rounds} for {args.seconds:g} s ({load()})")
    t0, code = run_for(base + ["crawl", "--rounds", str(args.rounds)], args.seconds, env, work / "deltacrawl.out")
    return t0, code, sets


def rounds_done(out: Path) -> list[str]:
    """``round N: seconds: generate .., fetch .., update ..`` of each round deltacrawl finished (its printout)."""
    done, head = [], None
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith("round ") and ":" in line:
            head = line.split(":", 1)[0]
        elif head and line.startswith("  seconds:"):
            done.append(f"{head}:{line[len('  seconds:'):]}")
    return done


def run_scrapy(args, web, v: Variant, work: Path) -> tuple[float, int | None]:
    py = scrapy_python()
    seeds, hosts_map = work / "seeds.txt", work / "hosts.json"
    seeds.write_text("\n".join(web.seeds()) + "\n")
    hosts_map.write_text(json.dumps(loopback_hosts(web)))
    cmd = [str(py), str(BENCH / "scrapy_spider.py"), "--seeds", str(seeds), "--hosts-map", str(hosts_map),
           "--delay", str(v.delay_s), "--seconds", str(args.seconds)]
    note(f"scrapy for {args.seconds:g} s ({load()})")
    env = {k: val for k, val in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return run_for(cmd, args.seconds, env, work / "scrapy.out")


def loopback_hosts(web) -> dict[str, str]:
    """The test web's hosts file, only the names whose address is in its CIDR (no bait address)."""
    import ipaddress

    nets = [ipaddress.ip_network(c) for c in web.allow_cidrs]
    return {name: addr for name, addr in _read_hosts_file(str(web.hosts_file)).items()
            if any(ipaddress.ip_address(addr) in n for n in nets)}


def measure(name: str, args, v: Variant, tmp: Path, details: list[str]) -> Verdict:
    """Run one crawler on a fresh test web and judge it; what the report should add goes to ``details``."""
    from tests.testweb import TestWeb

    work = tmp / name
    work.mkdir()
    with TestWeb(work / "web", n_hosts=v.hosts, seed=args.seed, kinds=v.kinds, knobs={"warm": True}) as web:
        cpu0 = _proc_cpu_s(web.proc.pid)
        if name == "deltacrawl":
            t0, code, sets = run_deltacrawl(args, web, v, work)
            note(f"deltacrawl settings: {' '.join(sets)}")
            details.append("deltacrawl rounds finished inside T (seconds): "
                           + ("; ".join(rounds_done(work / "deltacrawl.out")) or "none"))
        else:
            t0, code = run_scrapy(args, web, v, work)
        note(f"{name}: {'stopped at T' if code is None else f'exited {code}'} ({load()})")
        time.sleep(0.5)  # the server logs an aborted exchange when it notices the closed connection
        server_cpu = (_proc_cpu_s(web.proc.pid) or 0.0) - (cpu0 or 0.0)
        lines = web.log()
    first = min((r["start"] for r in lines if r["start"] >= t0), default=None)
    at = tuple(a for a in AT_S if a < args.seconds) + (args.seconds,)
    after_start = "" if first is None else (
        f"; fetch duty from it to T {duty_cycle(lines, first, t0 + args.seconds - first, v.delay_s):.2f}")
    details.append(f"{name}: first request at " + ("never" if first is None else f"{first - t0:.1f} s")
                   + " after launch (server's log)" + after_start)
    verdict = judge(name, web.plan, lines, t0, args.seconds, at,
                    v.delay_s, args.max_in_flight_per_ip)
    details.append(f"{name}, server-side check: " + verdict.violations.summary().replace("\n", "\n  "))
    return replace(verdict, server_cpu=server_cpu / args.seconds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="web300")
    ap.add_argument("--seconds", type=float, default=300.0, help="wall time T of each crawler")
    ap.add_argument("--hosts", type=int, default=0, help="hosts of the test web (0: the variant's)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=100, help="deltacrawl crawl --rounds (stopped at T anyway)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a deltacrawl override (repeatable)")
    ap.add_argument("--max-in-flight-per-ip", type=int, default=2,
                    help="per-address cap the log is judged by (deltacrawl's politeness.max_in_flight_per_ip)")
    ap.add_argument("--only", choices=("deltacrawl", "scrapy"), default=None)
    ap.add_argument("--deltacrawl", default="", help="the deltacrawl executable (default: beside this python)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the work directory (logs, crawl data) here")
    args = ap.parse_args(argv)
    base = VARIANTS[args.variant]
    v = Variant(args.hosts or base.hosts, base.kinds, base.delay_s, base.overrides)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="vs-scrapy-", dir=args.keep))
    names = [args.only] if args.only else ["deltacrawl", "scrapy"]
    started = time.time()
    loads = [load()]
    verdicts, details = [], []
    for name in names:
        verdicts.append(measure(name, args, v, tmp, details))
        loads.append(load())
    from tests.testweb.sites import build_plan

    at = verdicts[0].at
    plan = build_plan(v.hosts, args.seed, 0, v.kinds)
    pages = content_pages(plan) if v.delay_s > 0 else {}
    bound = [polite_bound(plan, pages, a, v.delay_s) for a in at]
    print(report(args, v, verdicts, loads, details, time.time() - started, tmp, bound))
    if not args.keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def report(args, v: Variant, verdicts: list[Verdict], loads: list[str], details: list[str], total_s: float,
           tmp: Path, bound: list[int | None]) -> str:
    sets = " ".join([f"politeness.host_delay_s={v.delay_s}", *v.overrides, *args.set])
    kinds = "every kind (sites, robots variants, traps, duplicates, hostile, ssrf)" if v.kinds is None else ",".join(v.kinds)
    lines = [
        f"crawl_vs_scrapy: variant {args.variant}, {v.hosts} hosts ({kinds}), seed {args.seed}, "
        f"host delay {v.delay_s:g} s, T = {args.seconds:g} s each, one after the other on a fresh test web",
        f"deltacrawl: crawl --rounds {args.rounds}, {sets}",
        "scrapy: bench/scrapy_spider.py (Scrapy's 'Broad Crawls' settings, ROBOTSTXT_OBEY, "
        f"DOWNLOAD_DELAY={v.delay_s:g}, CONCURRENT_REQUESTS_PER_DOMAIN=1, CONCURRENT_REQUESTS=100)",
        "measured from the server's log: distinct content pages (2xx HTML the plan serves, normalised URL) "
        "whose first response ended by t0+t, over t; t0 = launch of the crawler's process (start-up inside); "
        "in flight = share of [t0, t0+T] with >= 1 request in flight; fetch duty = share of [t0, t0+T] "
        "covered by the requests' [start, end + host delay] (no host fetched for longer than the delay: "
        "start-up, gaps between rounds, an idle tail); server cpu = the test web's CPU seconds "
        "over the run / T (near 1.0: the one-process server, not the crawler, was the limit); violations judged at "
        f"host delay {v.delay_s:g} s + robots Crawl-delay, per-address cap {args.max_in_flight_per_ip}; "
        "polite bound = the most distinct content pages a crawler keeping the delay and robots.txt could "
        "have by t with no start-up and instant answers (bench/vs_judge.py)"
        + ("" if bound[0] is not None else " (none at host delay 0: only the CPU bounds)"),
        "the test web is warm: every site built before it reports ready (Knobs.warm)",
        "load: " + " | ".join(f"{p} {l}" for p, l in zip(["before"] + [f"after {x.name}" for x in verdicts], loads))
        + f" ({os.cpu_count()} cores)",
        "",
        table(verdicts, bound),
        "",
        *details,
        f"total {total_s:.0f} s" + (f"; work directory kept: {tmp}" if args.keep else ""),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
