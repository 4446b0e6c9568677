"""Reproducible benchmark of the fetch engine (``crawl_udfs.partition.fetch_partition``).

Run from the repository root with the venv's python::

    python -m bench.fetch_bench            # full run, a few minutes on 2 cores
    python -m bench.fetch_bench --quick    # smaller, under a minute
    python -m bench.fetch_bench --profile  # also cProfile one crawler run of (b), print the top functions

Every figure is a RATIO of two things measured side by side in one run, because
absolute times drift on a shared machine. Each measured run is a fresh
subprocess (``--worker SPEC``), so its peak RSS (``ru_maxrss``) is its own. The
server is the project's local test web (``tests/testweb``), in its own process.

(a) Politeness-bound. H ordinary sites, K known pages each (allowed by robots,
    HTML, 200, taken from ``web.plan``), host delay d, everything else default.
    The robots.txt fetch is a request like any other, so a host needs K+1
    requests and K delays. A perfect scheduler with zero-length requests
    finishes every host after K·d, so

        ideal pages/s = H·K / (K·d) = H / d,        ratio = achieved / ideal

    where achieved = pages fetched OK / wall time of the ``fetch_partition``
    call (client side, start-up and shut-down included). Each request also
    lasts at least the server's latency L, so no scheduler can reach 1.0; the
    table also gives the ratio against H·K / (K·d + (K+1)·L) and against the
    span the server saw (first request start to last request end). The server's
    request log is checked for politeness (``web.violations(host_delay_s=d)``).
    Consecutive runs are spaced by d so that the log as a whole must be clean.

(b) CPU-bound. H hosts, K pages each, host delay 0 and response-time factor 0
    (so the only limits are one request in flight per host, the per-IP cap and
    ``fetch.max_concurrency``). A = the full engine (robots, scheduler, fetch,
    parse, SimHash, WARC); B = a bare aiohttp GET loop over the same requests
    (robots.txt plus the K pages per host, one in flight per host, the same
    per-IP cap and global cap, names resolved from the same hosts file by a
    trivial aiohttp resolver, the whole body read, nothing parsed or written).
    Run A B A B ... after one untimed warm-up of each (the server builds its
    pages lazily); ratio = A pages/s / B pages/s, median and spread. CPU seconds
    of the client and of the server process are given per page, to show which
    side was the bottleneck.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Params:
    seed: int
    web_hosts: int          # ordinary sites the test web serves (we pick those with enough pages)
    a_hosts: int            # (a) H
    a_pages: int            # (a) K
    a_delay_s: float        # (a) d
    a_latency_s: float      # (a) server latency knob L
    a_runs: int
    b_hosts: int            # (b) H
    b_pages: int            # (b) K
    b_latency_s: float      # (b) server latency knob
    b_pairs: int            # A B pairs


FULL = Params(seed=7, web_hosts=300, a_hosts=200, a_pages=5, a_delay_s=1.0, a_latency_s=0.02, a_runs=3,
              b_hosts=120, b_pages=20, b_latency_s=0.0, b_pairs=4)
QUICK = Params(seed=7, web_hosts=180, a_hosts=100, a_pages=5, a_delay_s=0.5, a_latency_s=0.02, a_runs=1,
               b_hosts=100, b_pages=8, b_latency_s=0.0, b_pairs=2)


# ============================================================== worker (one measured run, own process)


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _read_hosts_file(path: str) -> dict[str, str]:
    table: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            table.setdefault(name.lower(), fields[0])
    return table


def _worker_crawler(spec: dict) -> dict:
    from crawl_udfs import config
    from crawl_udfs.partition import fetch_partition
    from crawl_udfs.rows import FetchItem, HostResult
    from crawl_udfs.url_normalize import fingerprint, host_of

    conf = config.load(overrides=spec["overrides"])
    items = [FetchItem(url=u, url_fp=fingerprint(u), host=host_of(u)) for u in spec["urls"]]
    prof = cProfile.Profile() if spec.get("profile") else None
    rss0 = _maxrss_mib()
    w0, t0, c0 = time.time(), time.perf_counter(), time.process_time()
    if prof:
        prof.enable()
    rows = list(fetch_partition(items, conf, warc_dir=spec["warc_dir"],
                                warc_name=lambda i: f"bench-{i:05d}.warc.gz"))
    if prof:
        prof.disable()
        prof.dump_stats(spec["profile"])
    t1, c1, w1 = time.perf_counter(), time.process_time(), time.time()
    outcomes = Counter(r.outcome for r in rows if not isinstance(r, HostResult))
    hosts = [r for r in rows if isinstance(r, HostResult)]
    warc_bytes = sum(f.stat().st_size for f in Path(spec["warc_dir"]).glob("*.warc.gz"))
    return {"mode": "crawler", "elapsed_s": t1 - t0, "cpu_s": c1 - c0, "start": w0, "end": w1,
            "pages": outcomes.get("ok", 0), "requests": sum(h.requests for h in hosts),
            "outcomes": dict(outcomes), "warc_bytes": warc_bytes, "rss_before_mib": rss0,
            "maxrss_mib": _maxrss_mib()}


def _worker_bare(spec: dict) -> dict:
    import aiohttp
    from aiohttp.abc import AbstractResolver

    table = _read_hosts_file(spec["hosts_file"])

    class StaticResolver(AbstractResolver):
        async def resolve(self, host, port=0, family=socket.AF_INET):
            return [{"hostname": host, "host": table[host.lower()], "port": port, "family": socket.AF_INET,
                     "proto": 0, "flags": socket.AI_NUMERICHOST}]

        async def close(self) -> None:
            pass

    by_host: dict[str, list[str]] = {}
    for u in spec["urls"]:
        host = u.split("/", 3)[2].rsplit(":", 1)[0]
        by_host.setdefault(host, []).append(u)
    counts = Counter()

    async def run() -> None:
        glob = asyncio.Semaphore(spec["concurrency"])
        per_ip: dict[str, asyncio.Semaphore] = {}
        connector = aiohttp.TCPConnector(limit=spec["concurrency"], limit_per_host=0, resolver=StaticResolver(),
                                         use_dns_cache=False)
        headers = {"User-Agent": spec["user_agent"], "Accept-Encoding": "gzip, deflate, br"}
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False, trust_env=False) as session:
            async def one_host(host: str, urls: list[str]) -> None:
                ip = per_ip.setdefault(table[host], asyncio.Semaphore(spec["ip_cap"]))
                robots = ["/".join(urls[0].split("/", 3)[:3]) + "/robots.txt"] if spec.get("robots", True) else []
                for u in robots + urls:  # the same requests as the engine
                    async with ip, glob:
                        async with session.get(u, headers=headers, allow_redirects=False) as resp:
                            body = await resp.read()
                    counts["requests"] += 1
                    counts["bytes"] += len(body)
                    if resp.status == 200 and not u.endswith("/robots.txt"):
                        counts["pages"] += 1

            await asyncio.gather(*(one_host(h, us) for h, us in by_host.items()))

    rss0 = _maxrss_mib()
    w0, t0, c0 = time.time(), time.perf_counter(), time.process_time()
    asyncio.run(run())
    t1, c1, w1 = time.perf_counter(), time.process_time(), time.time()
    return {"mode": "bare", "elapsed_s": t1 - t0, "cpu_s": c1 - c0, "start": w0, "end": w1,
            "pages": counts["pages"], "requests": counts["requests"], "bytes": counts["bytes"],
            "rss_before_mib": rss0, "maxrss_mib": _maxrss_mib()}


def worker_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    out = _worker_crawler(spec) if spec["mode"] == "crawler" else _worker_bare(spec)
    print(json.dumps(out))
    return 0


# ============================================================== orchestrator


class Runner:
    """Starts worker subprocesses and reads the server process's CPU time around each."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.n = 0

    def run(self, spec: dict, server_pid: int | None = None) -> dict:
        self.n += 1
        path = self.tmp / f"spec-{self.n:03d}.json"
        path.write_text(json.dumps(spec))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        s0 = _proc_cpu_s(server_pid)
        proc = subprocess.run([sys.executable, "-m", "bench.fetch_bench", "--worker", str(path)], cwd=REPO_ROOT,
                              env=env, capture_output=True, text=True, timeout=600)
        s1 = _proc_cpu_s(server_pid)
        if proc.returncode != 0:
            raise RuntimeError(f"worker {spec['mode']} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        out["server_cpu_s"] = None if s0 is None or s1 is None else s1 - s0
        return out


def _proc_cpu_s(pid: int | None) -> float | None:
    """utime + stime of a process (Linux /proc), in seconds."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pick_urls(plan, n_hosts: int, k: int) -> list[str]:
    """The first ``n_hosts`` ordinary sites with at least ``k`` allowed HTML 200 pages; their first ``k`` such pages."""
    from crawl_udfs.url_normalize import normalize

    urls: list[str] = []
    hosts = 0
    for h in plan.hosts.values():
        if h.kind != "site" or h.variant != "ordinary" or h.crawl_delay:
            continue
        pages = [p.path for p in h.pages.values()
                 if p.behaviour == "html" and p.status == 200 and h.allowed(p.path)][:k]
        if len(pages) < k:
            continue
        for path in pages:
            u = normalize(h.url(path))
            assert u is not None, h.url(path)
            urls.append(u)
        hosts += 1
        if hosts == n_hosts:
            return urls
    raise SystemExit(f"only {hosts} sites have {k} fetchable pages; raise web_hosts")


def base_overrides(web) -> list[str]:
    return [f'net.hosts_file="{web.hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]']


def scenario_a(p: Params, tmp: Path, runner: Runner) -> dict:
    from tests.testweb import TestWeb, analyze

    H, K, d, L = p.a_hosts, p.a_pages, p.a_delay_s, p.a_latency_s
    with TestWeb(tmp / "web-a", n_hosts=p.web_hosts, seed=p.seed, kinds=["site"], knobs={"latency_s": L}) as web:
        urls = pick_urls(web.plan, H, K)
        overrides = base_overrides(web) + [f"politeness.host_delay_s={d}"]
        runs = []
        for r in range(p.a_runs):
            if r:
                time.sleep(d + 0.25)  # a fresh task knows nothing of the last one: keep the gap across runs too
            warc = tmp / f"warc-a-{r}"
            out = runner.run({"mode": "crawler", "urls": urls, "overrides": overrides, "warc_dir": str(warc)},
                             web.proc.pid)
            shutil.rmtree(warc, ignore_errors=True)
            runs.append(out)
        time.sleep(0.3)  # let the server flush its last log lines
        log = web.log()
        violations = web.violations(host_delay_s=d)
    for out in runs:
        lines = [r for r in log if out["start"] <= r["start"] <= out["end"]]
        out["server_requests"] = len(lines)
        out["server_span_s"] = (max(r["end"] for r in lines) - min(r["start"] for r in lines)) if lines else None
        out["server_mean_request_s"] = statistics.mean(r["end"] - r["start"] for r in lines) if lines else None
        out["run_clean"] = analyze(lines, d).clean
    ideal = H * K / (K * d)
    ideal_lat = H * K / (K * d + (K + 1) * L)
    for out in runs:
        out["achieved_pps"] = out["pages"] / out["elapsed_s"]
        out["ratio"] = out["achieved_pps"] / ideal
        out["ratio_latency_aware"] = out["achieved_pps"] / ideal_lat
        out["ratio_server_span"] = (out["pages"] / out["server_span_s"]) / ideal if out["server_span_s"] else None
    return {"H": H, "K": K, "d": d, "L": L, "ideal_pps": ideal, "ideal_latency_aware_pps": ideal_lat, "runs": runs,
            "violations": violations.counts(), "violations_clean": violations.clean,
            "violations_summary": violations.summary(), "min_slack_s": violations.min_slack_s}


def scenario_b(p: Params, tmp: Path, runner: Runner, profile: bool) -> dict:
    from crawl_udfs import config
    from tests.testweb import TestWeb

    H, K = p.b_hosts, p.b_pages
    with TestWeb(tmp / "web-b", n_hosts=p.web_hosts, seed=p.seed, kinds=["site"],
                 knobs={"latency_s": p.b_latency_s}) as web:
        urls = pick_urls(web.plan, H, K)
        overrides = base_overrides(web) + ["politeness.host_delay_s=0.0", "politeness.response_time_factor=0.0"]
        conf = config.load(overrides=overrides)
        bare_spec = {"mode": "bare", "urls": urls, "hosts_file": str(web.hosts_file),
                     "concurrency": conf.fetch.max_concurrency, "ip_cap": conf.politeness.max_in_flight_per_ip,
                     "user_agent": conf.crawler.user_agent}

        def crawler(tag: str, prof: str | None = None) -> dict:
            warc = tmp / f"warc-b-{tag}"
            out = runner.run({"mode": "crawler", "urls": urls, "overrides": overrides, "warc_dir": str(warc),
                              "profile": prof}, web.proc.pid)
            shutil.rmtree(warc, ignore_errors=True)
            return out

        runner.run(bare_spec, web.proc.pid)  # warm-up: the server generates each host's pages on first use
        crawler("warmup")
        pairs = []
        for i in range(p.b_pairs):
            a = crawler(str(i))
            b = runner.run(bare_spec, web.proc.pid)
            pairs.append({"A": a, "B": b})
        prof_text = None
        if profile:
            prof_path = tmp / "crawler.prof"
            a = crawler("profile", str(prof_path))
            s = io.StringIO()
            st = pstats.Stats(str(prof_path), stream=s)
            st.sort_stats("tottime").print_stats(25)
            st.sort_stats("cumulative").print_stats(40)
            prof_text = f"profiled run (cProfile slows it): {a['pages']} pages in {a['elapsed_s']:.2f}s\n" + s.getvalue()
    for pair in pairs:
        for side in pair.values():
            side["pps"] = side["pages"] / side["elapsed_s"]
        pair["ratio"] = pair["A"]["pps"] / pair["B"]["pps"]
    ratios = [pair["ratio"] for pair in pairs]
    return {"H": H, "K": K, "latency_s": p.b_latency_s, "concurrency": bare_spec["concurrency"],
            "ip_cap": bare_spec["ip_cap"], "pairs": pairs, "median_ratio": statistics.median(ratios),
            "min_ratio": min(ratios), "max_ratio": max(ratios), "profile": prof_text}


# ============================================================== report


def _fmt(x, spec=".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def report(a: dict, b: dict, p: Params, args, total_s: float) -> str:
    med = statistics.median
    lines = [f"fetch engine benchmark  ({'--quick' if args.quick else 'full'}; {os.cpu_count()} CPUs; "
             f"python {sys.version.split()[0]}; {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; total {total_s:.0f}s)", ""]
    H, K, d, L = a["H"], a["K"], a["d"], a["L"]
    lines += [
        f"(a) politeness-bound: {H} hosts x {K} pages (+1 robots.txt each), politeness.host_delay_s={d}, "
        f"server latency L={L}s, other keys default",
        f"    ideal = H*K/(K*d) = {a['ideal_pps']:.1f} pages/s  (robots.txt counted as one of the host's requests: "
        f"K+1 requests, K delays)",
        f"    latency-aware ideal = H*K/(K*d + (K+1)*L) = {a['ideal_latency_aware_pps']:.1f} pages/s",
        f"    {'run':>3} {'pages':>6} {'reqs':>5} {'wall s':>7} {'pages/s':>8} {'ratio':>6} {'vs L-aware':>10} "
        f"{'vs srv span':>11} {'srv mean req ms':>15} {'cpu s':>6} {'peak RSS MiB':>12}",
    ]
    for i, r in enumerate(a["runs"]):
        lines.append(f"    {i:>3} {r['pages']:>6} {r['requests']:>5} {r['elapsed_s']:>7.2f} {r['achieved_pps']:>8.1f} "
                     f"{r['ratio']:>6.3f} {r['ratio_latency_aware']:>10.3f} {_fmt(r['ratio_server_span']):>11} "
                     f"{_fmt(r['server_mean_request_s'] and r['server_mean_request_s'] * 1000, '.1f'):>15} "
                     f"{r['cpu_s']:>6.2f} {r['maxrss_mib']:>12.1f}")
    ratios = [r["ratio"] for r in a["runs"]]
    lines += [f"    ratio achieved/ideal: median {med(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
              f"goal >= 0.95: {'MET' if med(ratios) >= 0.95 else 'MISSED'}",
              f"    outcomes: {a['runs'][0]['outcomes']}",
              f"    server-side politeness check web.violations(host_delay_s={d}): "
              f"{'CLEAN' if a['violations_clean'] else 'NOT CLEAN'}",
              *("      " + s for s in a["violations_summary"].splitlines()), ""]
    lines += [
        f"(b) CPU-bound: {b['H']} hosts x {b['K']} pages (+1 robots.txt each), host_delay_s=0, "
        f"response_time_factor=0, server latency {b['latency_s']}s; concurrency {b['concurrency']}, "
        f"per-IP cap {b['ip_cap']}, one in flight per host",
        "    A = fetch_partition (robots+scheduler+fetch+parse+SimHash+WARC); B = bare aiohttp GET loop, same requests",
        f"    {'pair':>4} {'A pages/s':>9} {'B pages/s':>9} {'A/B':>6} {'A cpu ms/pg':>11} {'B cpu ms/pg':>11} "
        f"{'srv cpu ms/req A':>16} {'srv cpu ms/req B':>16} {'A RSS MiB':>9} {'B RSS MiB':>9}",
    ]
    for i, pair in enumerate(b["pairs"]):
        A, B = pair["A"], pair["B"]
        sa = A["server_cpu_s"] and A["server_cpu_s"] * 1000 / A["requests"]
        sb = B["server_cpu_s"] and B["server_cpu_s"] * 1000 / B["requests"]
        lines.append(f"    {i:>4} {A['pps']:>9.1f} {B['pps']:>9.1f} {pair['ratio']:>6.3f} "
                     f"{A['cpu_s'] * 1000 / A['pages']:>11.2f} {B['cpu_s'] * 1000 / B['pages']:>11.2f} "
                     f"{_fmt(sa, '.2f'):>16} {_fmt(sb, '.2f'):>16} {A['maxrss_mib']:>9.1f} {B['maxrss_mib']:>9.1f}")
    cpu_ratio = med([pair["B"]["cpu_s"] / pair["B"]["pages"] / (pair["A"]["cpu_s"] / pair["A"]["pages"])
                     for pair in b["pairs"]])
    lines += [f"    ratio A/B pages/s: median {b['median_ratio']:.3f} (min {b['min_ratio']:.3f}, max {b['max_ratio']:.3f}, "
              f"{len(b['pairs'])} pairs); goal >= 0.5: {'MET' if b['median_ratio'] >= 0.5 else 'MISSED'}",
              f"    client CPU per page B/A (median): {cpu_ratio:.3f}",
              f"    A outcomes: {b['pairs'][0]['A']['outcomes']}", ""]
    if b.get("profile"):
        lines += ["(b) profile of one crawler run:", b["profile"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fetch_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller run (< 1 min)")
    ap.add_argument("--profile", action="store_true", help="cProfile one crawler run of (b) and print its top functions")
    ap.add_argument("--json", type=Path, help="also write every raw figure to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args.worker)
    p = QUICK if args.quick else FULL
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="fetch-bench-") as tmp_s:
        tmp = Path(tmp_s)
        runner = Runner(tmp)
        a = scenario_a(p, tmp, runner)
        b = scenario_b(p, tmp, runner, args.profile)
    text = report(a, b, p, args, time.time() - t0)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"params": asdict(p), "a": a, "b": b}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
