"""Reproducible benchmark of the fetch engine (``crawl_udfs.partition.fetch_partition``).

Run from the repository root with the venv's python::

    python -m bench.fetch_bench            # full run, ~4.5 minutes on 2 idle cores
    python -m bench.fetch_bench --quick    # smaller, under a minute on idle cores
    python -m bench.fetch_bench --profile  # also cProfile one crawler run of (b), print the top functions
    python -m bench.fetch_bench --set fetch.parse_threads=1   # any config override, in every crawler run
    python -m bench.fetch_bench --param a_pages=5            # any benchmark parameter (``Params``)

Every figure is a RATIO of two things measured side by side in one run, because
absolute times drift on a shared machine. Each measured run is a fresh
subprocess (``--worker SPEC``), so its peak RSS is its own (VmHWM: Linux keeps
``ru_maxrss`` across execve, so a child would inherit the parent's figure).
The server is the project's local test web (``tests/testweb``, ordinary sites
only), in its own process; it builds a host's pages on first use, so every
scenario starts with an untimed warm-up request per host.

(a) Politeness-bound. H ordinary sites, K known pages each (allowed by robots,
    HTML, 200, taken from ``web.plan``), host delay d. The robots.txt fetch is
    a request like any other, so a host needs K+1 requests and K delays. A
    perfect scheduler with zero-length requests finishes every host after K·d:

        ideal pages/s = H·K / (K·d) = H / d,        ratio = achieved / ideal

    where achieved = pages fetched OK / wall time of the ``fetch_partition``
    call (client side, start-up and shut-down included). Each request also
    lasts at least the server's latency L, so no scheduler can reach 1.0; the
    table also gives the ratio against H·K / (K·d + (K+1)·L) and against the
    span the server saw (first request start to last request end). Three
    variants run in turn (``A_VARIANTS``): the deployed defaults, the same with
    ``politeness.response_time_factor=0`` (delay = d exactly), and the defaults
    on a quarter of the hosts. The server's whole request log (warm-up and all
    runs, spaced by d) is checked with ``web.violations(host_delay_s=d)``. The
    table also gives the response times the task handed its scheduler ('sched
    rt', recorded by wrapping ``PolitenessScheduler.release``): the delay's
    response-time term is ``response_time_factor`` times the largest of a
    host's last few, so with the defaults it matters once they pass d/10.
    K is 20 (it was 5 until 2026-11-30): a real round gives a host up to
    ``fetch.task_budget_s / d`` pages (900 by default), so the start-up (every
    host's robots.txt at once) and the tail (the last burst's parsing) should
    weigh as little as they do there; at K = 5 they were ~0.4 s of a 5.7 s run.
    ``--param a_pages=5 --param web_hosts=300`` repeats the older setting.

(b) CPU-bound. H hosts, K pages each, host delay 0 and response-time factor 0
    (so the only limits are one request in flight per host, the per-IP cap and
    ``fetch.max_concurrency``). A = the full engine (robots, scheduler, fetch,
    parse, SimHash, WARC); B = a bare aiohttp GET loop over the same requests
    (robots.txt plus the K pages per host, one in flight per host, the same
    per-IP cap and global cap, names resolved from the same hosts file by a
    trivial aiohttp resolver, the whole body read, nothing parsed or written).
    F = B plus, per page, the C work the engine cannot avoid (an lxml tree,
    three SHA-1s, two gzip members at ``warc.gzip_level``), done inline: F/B is
    the ratio an engine that did nothing else in Python would reach.
    Run A B F A B F ... after one untimed warm-up of A and B; ratio = A pages/s /
    B pages/s, median and spread. CPU seconds of the client and of the server
    process are given per page, to show which side was the bottleneck, and the
    warm-up run of A carries in-situ timers (``_Timers``) that split A's CPU
    per page into parse, SimHash, WARC, ... and the rest (and time the garbage collector).
    (b) runs once per page kind (``B_PAGE_KINDS``, ``--pages``): the test web's own pages
    (2-3 KB) and realistic-size ones (48-56 KB: each planned page inside a real site's
    markup -- head metadata, inline scripts and CSS, a mega-menu and footer of ~150 links,
    nested wrappers, related cards, comments, entities; ``tests/testweb/realistic.py``).
    ENGINE/FLOOR = A's client CPU per page / F's, median over the pairs (goal: <= 2).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
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
from dataclasses import asdict, dataclass, replace
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


FULL = Params(seed=7, web_hosts=700, a_hosts=200, a_pages=20, a_delay_s=1.0, a_latency_s=0.02, a_runs=3,
              b_hosts=120, b_pages=30, b_latency_s=0.0, b_pairs=4)
QUICK = Params(seed=7, web_hosts=180, a_hosts=60, a_pages=5, a_delay_s=1.0, a_latency_s=0.02, a_runs=1,
               b_hosts=80, b_pages=8, b_latency_s=0.0, b_pairs=2)


# ============================================================== worker (one measured run, own process)


def _maxrss_mib() -> float:
    """Peak RSS of this process in MiB: VmHWM (Linux), else ru_maxrss.

    ``ru_maxrss`` survives execve on Linux, so a child started by a big parent
    reports the parent's size; VmHWM belongs to the process's own address space.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _quantiles(xs: list[float]) -> dict:
    if not xs:
        return {"p50": None, "p90": None, "max": None}
    xs = sorted(xs)
    return {"p50": xs[len(xs) // 2], "p90": xs[min(len(xs) - 1, int(0.9 * len(xs)))], "max": xs[-1]}


def _read_hosts_file(path: str) -> dict[str, str]:
    table: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            table.setdefault(name.lower(), fields[0])
    return table


class _Timers:
    """In-situ CPU timers around the engine's synchronous steps (~1 us each; used on one untimed run).

    Patched by name, so a renamed function is simply missing from the report.
    """

    TARGETS = (("page_done (all work after the body)", "crawl_udfs.pages", "PageWork", "page_done"),
               ("classify", "crawl_udfs.pages", None, "classify"),
               ("parse", "crawl_udfs.pages", None, "parse"),
               ("URL admission of the outlinks", "crawl_udfs.pages", None, "admitted"),
               ("main-text shingles", "crawl_udfs.pages", None, "shingled"),
               ("simhash", "crawl_udfs.pages", None, "simhash_of"),
               ("minhash", "crawl_udfs.pages", None, "minhash_of"),
               ("payload_digest", "crawl_udfs.classify", None, "payload_digest"),
               ("WARC write_exchange", "crawl_udfs.warc", "RollingWarcWriter", "write_exchange"),
               ("in-round follow (in 'everything else')", "crawl_udfs.host_runs", "TaskHosts", "follow"))

    GC = "garbage collection (inside the steps)"

    def __init__(self) -> None:
        self._gc_start = 0.0
        self.seconds: dict[str, float] = {}
        self.calls: Counter = Counter()
        self._undo: list = []

    def install(self) -> None:
        import functools
        import importlib

        for label, module, cls, name in self.TARGETS:
            owner = importlib.import_module(module)
            owner = getattr(owner, cls, None) if cls else owner
            fn = getattr(owner, name, None) if owner is not None else None
            if fn is None:
                continue

            @functools.wraps(fn)
            def timed(*a, __fn=fn, __label=label, **kw):
                t = time.thread_time()  # CPU time: a busy machine's preemption does not count
                try:
                    return __fn(*a, **kw)
                finally:
                    self.seconds[__label] = self.seconds.get(__label, 0.0) + time.thread_time() - t
                    self.calls[__label] += 1

            setattr(owner, name, timed)
            self._undo.append((owner, name, fn))
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict) -> None:
        """Garbage collections' CPU time (they run inside whichever step allocated: counted there too)."""
        if phase == "start":
            self._gc_start = time.thread_time()
        else:
            self.seconds[self.GC] = self.seconds.get(self.GC, 0.0) + time.thread_time() - self._gc_start
            self.calls[self.GC] += 1

    def uninstall(self) -> None:
        gc.callbacks.remove(self._gc)
        for owner, name, fn in reversed(self._undo):
            setattr(owner, name, fn)


def _worker_crawler(spec: dict) -> dict:
    from crawl_udfs import config
    from crawl_udfs.partition import fetch_partition
    from crawl_udfs.rows import FetchItem, HostResult
    from crawl_udfs.url_normalize import fingerprint, host_of

    from crawl_udfs.scheduler import PolitenessScheduler

    conf = config.load(overrides=spec["overrides"])
    # Record the response times the engine hands the scheduler (what response_time_factor multiplies).
    response_times: list[float] = []
    release = PolitenessScheduler.release

    def recording_release(self, host, *, response_time_s, **kw):
        if response_time_s is not None:
            response_times.append(response_time_s * 1000)
        return release(self, host, response_time_s=response_time_s, **kw)

    PolitenessScheduler.release = recording_release  # type: ignore[method-assign]
    items = [FetchItem(url=u, url_fp=fingerprint(u), host=host_of(u)) for u in spec["urls"]]
    # CPU time, not wall time: on a busy 2-core machine a send() that wakes the server would
    # otherwise be charged for the time the server ran instead of us.
    prof = cProfile.Profile(time.process_time) if spec.get("profile") else None
    timers = _Timers() if spec.get("components") else None
    if timers:
        timers.install()
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
    if timers:
        timers.uninstall()
    results = [r for r in rows if not isinstance(r, HostResult)]
    outcomes = Counter(r.outcome for r in results)
    hosts = [r for r in rows if isinstance(r, HostResult)]
    warc_bytes = sum(f.stat().st_size for f in Path(spec["warc_dir"]).glob("*.warc.gz"))
    return {"mode": "crawler", "elapsed_s": t1 - t0, "cpu_s": c1 - c0, "start": w0, "end": w1,
            "pages": outcomes.get("ok", 0), "requests": sum(h.requests for h in hosts),
            "outcomes": dict(outcomes), "warc_bytes": warc_bytes, "rss_before_mib": rss0,
            "first_byte_ms": _quantiles([r.t_first_byte_ms for r in results if r.t_first_byte_ms is not None]),
            "sched_rt_ms": _quantiles(response_times),
            "maxrss_mib": _maxrss_mib(),
            "components_s": timers.seconds if timers else None}


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

    floor = spec.get("floor", False)
    if floor:
        import hashlib
        import zlib

        from lxml import etree

        from crawl_udfs import config

        level = config.load(overrides=spec.get("overrides", [])).warc.gzip_level

    def c_work(body: bytes) -> None:
        """The engine's irreducible C work per page: lxml tree, SHA-1 (payload + 2 blocks), 2 gzip members."""
        etree.fromstring(body, etree.HTMLParser(recover=True, remove_comments=True, remove_pis=True,
                                                no_network=True, default_doctype=False))
        hashlib.sha1(body).digest()
        hashlib.sha1(b"GET / HTTP/1.1\r\n" * 8).digest()
        hashlib.sha1(body).digest()
        for block in (b"W" * 400 + b"GET / HTTP/1.1\r\n" * 8, b"W" * 600 + body):
            gz = zlib.compressobj(level, zlib.DEFLATED, 31)
            gz.compress(block)
            gz.flush()

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
                        if floor:
                            c_work(body)

            await asyncio.gather(*(one_host(h, us) for h, us in by_host.items()))

    rss0 = _maxrss_mib()
    w0, t0, c0 = time.time(), time.perf_counter(), time.process_time()
    asyncio.run(run())
    t1, c1, w1 = time.perf_counter(), time.process_time(), time.time()
    return {"mode": "floor" if floor else "bare", "elapsed_s": t1 - t0, "cpu_s": c1 - c0, "start": w0, "end": w1,
            "pages": counts["pages"], "requests": counts["requests"], "bytes": counts["bytes"],
            "rss_before_mib": rss0, "maxrss_mib": _maxrss_mib()}


def worker_main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    out = _worker_crawler(spec) if spec["mode"] == "crawler" else _worker_bare(spec)
    print(json.dumps(out))
    return 0


# ============================================================== orchestrator


def note(msg: str) -> None:
    print(f"[fetch-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Runner:
    """Starts worker subprocesses and reads the server process's CPU time around each."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.n = 0

    def run(self, spec: dict, server_pid: int | None = None) -> dict:
        self.n += 1
        path = self.tmp / f"spec-{self.n:03d}.json"
        path.write_text(json.dumps(spec))
        path_dirs = [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path_dirs)))
        s0 = _proc_cpu_s(server_pid)
        proc = subprocess.run([sys.executable, "-m", "bench.fetch_bench", "--worker", str(path)], cwd=REPO_ROOT,
                              env=env, capture_output=True, text=True, timeout=600)
        s1 = _proc_cpu_s(server_pid)
        if proc.returncode != 0:
            raise RuntimeError(f"worker {spec['mode']} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        note(f"{spec['mode']:>7} run: {out['pages']} pages, {out['requests']} requests in {out['elapsed_s']:.2f}s")
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
    """The first ``n_hosts`` ordinary sites with ``k`` allowed HTML 200 pages: those pages' URLs, host by host."""
    from tests.urls import normalize

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


#: Extra ``section.key=value`` overrides for every crawler run (``--set``), e.g. to compare settings.
EXTRA_OVERRIDES: list[str] = []


def base_overrides(web) -> list[str]:
    return [f'net.hosts_file="{web.hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]', *EXTRA_OVERRIDES]


#: (a) runs each variant in turn: (name, share of the H hosts, extra overrides). The deployed
#: defaults; the same with the response-time-derived delay off (isolates the scheduler and
#: the event loop); and the defaults on a quarter of the hosts (a quarter of the CPU load).
A_VARIANTS = (("defaults", 1.0, []), ("rt_factor=0", 1.0, ["politeness.response_time_factor=0.0"]),
              ("defaults H/4", 0.25, []))


def warm_up(runner: Runner, web, urls: list[str], conf, spacing_s: float) -> None:
    """One request per host (the server builds a host's pages on first use), then wait out the host delay."""
    first: dict[str, str] = {}
    for u in urls:
        first.setdefault(u.split("/", 3)[2], u)
    runner.run({"mode": "bare", "urls": list(first.values()), "hosts_file": str(web.hosts_file), "robots": False,
                "concurrency": conf.fetch.max_concurrency, "ip_cap": conf.politeness.max_in_flight_per_ip,
                "user_agent": "fetch-bench-warmup"}, web.proc.pid)
    time.sleep(spacing_s)


def scenario_a(p: Params, tmp: Path, runner: Runner) -> dict:
    from crawl_udfs import config
    from tests.testweb import TestWeb, analyze
    from tests.testweb.analysis import gaps

    H, K, d, L = p.a_hosts, p.a_pages, p.a_delay_s, p.a_latency_s
    spacing = d + 0.25  # a fresh task knows nothing of the last one: keep the host delay across runs too
    with TestWeb(tmp / "web-a", n_hosts=p.web_hosts, seed=p.seed, kinds=["site"], knobs={"latency_s": L}) as web:
        urls = pick_urls(web.plan, H, K)
        base = base_overrides(web) + [f"politeness.host_delay_s={d}"]
        conf = config.load(overrides=base)
        warm_up(runner, web, urls, conf, spacing)
        runs = []
        for r in range(p.a_runs):
            for name, share, extra in A_VARIANTS:
                if runs:
                    time.sleep(spacing)
                n_hosts = max(1, round(H * share))
                warc = tmp / f"warc-a-{len(runs)}"
                out = runner.run({"mode": "crawler", "urls": urls[:n_hosts * K], "overrides": base + extra,
                                  "warc_dir": str(warc)}, web.proc.pid)
                shutil.rmtree(warc, ignore_errors=True)
                out["variant"], out["H"] = name, n_hosts
                runs.append(out)
        time.sleep(0.3)  # let the server flush its last log lines
        log = web.log()
        violations = web.violations(host_delay_s=d, max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)
    ua = conf.crawler.user_agent
    for out in runs:
        ideal = out["H"] * K / (K * d)
        ideal_lat = out["H"] * K / (K * d + (K + 1) * L)
        lines = [r for r in log if r["ua"] == ua and out["start"] <= r["start"] <= out["end"]]
        by_host: dict[str, list[dict]] = {}
        for r in lines:
            by_host.setdefault(r["host"], []).append(r)
        out["server_requests"] = len(lines)
        out["server_span_s"] = (max(r["end"] for r in lines) - min(r["start"] for r in lines)) if lines else None
        out["server_request_ms"] = _quantiles([(r["end"] - r["start"]) * 1000 for r in lines])
        out["server_gap_s"] = _quantiles([g for rs in by_host.values() for _, g in gaps(rs)])
        out["server_host_span_s"] = _quantiles([max(r["end"] for r in rs) - min(r["start"] for r in rs)
                                                for rs in by_host.values()])
        out["run_clean"] = analyze(lines, d, max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip).clean
        out["achieved_pps"] = out["pages"] / out["elapsed_s"]
        out["ratio"] = out["achieved_pps"] / ideal
        out["ratio_latency_aware"] = out["achieved_pps"] / ideal_lat
        out["ratio_server_span"] = (out["pages"] / out["server_span_s"]) / ideal if out["server_span_s"] else None
    return {"H": H, "K": K, "d": d, "L": L, "runs": runs,
            "response_time_factor": conf.politeness.response_time_factor,
            "violations": violations.counts(), "violations_clean": violations.clean,
            "violations_summary": violations.summary(), "min_slack_s": violations.min_slack_s}


#: (b)'s page kinds: the test web's own pages (2-3 KB), and the same pages inside a real site's
#: markup (48-56 KB: ``tests/testweb/realistic.py``), each a ``TestWeb`` knob set.
B_PAGE_KINDS = {"test-web": {}, "realistic": {"realistic_pages": True}}


def scenario_b(p: Params, tmp: Path, runner: Runner, profile: bool, kind: str = "test-web") -> dict:
    from crawl_udfs import config
    from tests.testweb import TestWeb

    H, K = p.b_hosts, p.b_pages
    tmp = tmp / f"b-{kind}"
    with TestWeb(tmp / "web-b", n_hosts=p.web_hosts, seed=p.seed, kinds=["site"],
                 knobs={"latency_s": p.b_latency_s, **B_PAGE_KINDS[kind]}) as web:
        urls = pick_urls(web.plan, H, K)
        overrides = base_overrides(web) + ["politeness.host_delay_s=0.0", "politeness.response_time_factor=0.0"]
        conf = config.load(overrides=overrides)
        bare_spec = {"mode": "bare", "urls": urls, "hosts_file": str(web.hosts_file),
                     "concurrency": conf.fetch.max_concurrency, "ip_cap": conf.politeness.max_in_flight_per_ip,
                     "user_agent": conf.crawler.user_agent}

        def crawler(tag: str, prof: str | None = None, components: bool = False, extra: tuple = ()) -> dict:
            warc = tmp / f"warc-b-{tag}"
            out = runner.run({"mode": "crawler", "urls": urls, "overrides": overrides + list(extra),
                              "warc_dir": str(warc),
                              "profile": prof, "components": components}, web.proc.pid)
            shutil.rmtree(warc, ignore_errors=True)
            return out

        runner.run(bare_spec, web.proc.pid)  # warm-up: the server generates each host's pages on first use
        components = crawler("warmup", components=True)
        floor_spec = dict(bare_spec, mode="floor", floor=True, overrides=overrides)
        pairs = []
        for i in range(p.b_pairs):
            a = crawler(str(i))
            b = runner.run(bare_spec, web.proc.pid)
            f = runner.run(floor_spec, web.proc.pid)
            pairs.append({"A": a, "B": b, "F": f})
        prof_text = None
        if profile:
            prof_path = tmp / "crawler.prof"
            # cProfile sees one thread: profile with the page work inline on the event loop
            a = crawler("profile", str(prof_path), extra=("fetch.parse_threads=0",))
            prof_text = (f"profiled run (cProfile with a CPU-time timer, fetch.parse_threads=0 so that one thread "
                         f"does all the work; it slows the run down): "
                         f"{a['pages']} pages in {a['elapsed_s']:.2f}s\n" + profile_summary(prof_path))
    for pair in pairs:
        for side in pair.values():
            side["pps"] = side["pages"] / side["elapsed_s"]
        pair["ratio"] = pair["A"]["pps"] / pair["B"]["pps"]
        pair["floor_ratio"] = pair["F"]["pps"] / pair["B"]["pps"]
    ratios = [pair["ratio"] for pair in pairs]
    return {"kind": kind, "H": H, "K": K, "latency_s": p.b_latency_s, "concurrency": bare_spec["concurrency"],
            "ip_cap": bare_spec["ip_cap"], "pairs": pairs, "components_run": components,
            "median_ratio": statistics.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
            "profile": prof_text}


# ============================================================== report

#: Where the time of one crawler run goes: (label, file suffix, function), cumulative time.
HOT_SPOTS = (
    ("page handling (fetch + classify)", "crawl_udfs/partition.py", "_fetch_page"),
    ("  fetcher.fetch (aiohttp GET + body)", "crawl_udfs/fetcher.py", "fetch"),
    ("  page work (everything after the body)", "crawl_udfs/pages.py", "page_done"),
    ("    parser.parse (lxml, links, main text)", "crawl_udfs/parser.py", "parse"),
    ("      outlink normalisation", "crawl_udfs/url_normalize.py", "normalize"),
    ("      main-text extraction", "crawl_udfs/main_text.py", "main_text"),
    ("    main-text shingles", "crawl_udfs/simhash.py", "shingled"),
    ("    simhash", "crawl_udfs/simhash.py", "simhash_of"),
    ("    minhash", "crawl_udfs/near_dup.py", "minhash_of"),
    ("    WARC write_exchange (gzip, digests)", "crawl_udfs/warc.py", "write_exchange"),
    ("    payload_digest", "crawl_udfs/signatures.py", "payload_digest"),
    ("robots.txt fetch + parse", "crawl_udfs/partition.py", "_robots_hop"),
    ("scheduler lease", "crawl_udfs/scheduler.py", "lease"),
    ("scheduler release", "crawl_udfs/scheduler.py", "release"),
    ("drive loop (asyncio.wait etc., own time only)", "crawl_udfs/partition.py", "_drive_loop"),
)


def profile_summary(path: Path, top: int = 20) -> str:
    """Selected cumulative times (share of the profiled run) and the top functions by own time."""
    st = pstats.Stats(str(path))
    total = st.total_tt  # type: ignore[attr-defined]
    out = [f"  {'where':<48} {'cum s':>7} {'share':>6}"]
    for label, suffix, func in HOT_SPOTS:
        own = func == "_drive_loop"
        hits = [v[2] if own else v[3] for k, v in st.stats.items()  # type: ignore[attr-defined]
                if k[0].endswith(suffix) and k[2] == func]
        t = max(hits) if hits else None
        out.append(f"  {label:<48} {_fmt(t, '.2f'):>7} {_fmt(t and 100 * t / total, '.0f'):>5}%")
    s = io.StringIO()
    pstats.Stats(str(path), stream=s).sort_stats("tottime").print_stats(top)
    body = s.getvalue()
    body = body[body.find("   ncalls"):] if "   ncalls" in body else body
    return "\n".join(out) + f"\n  top {top} by own time (total {total:.2f}s):\n" + body


def _fmt(x, spec=".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def report(a: dict | None, bs: list[dict], p: Params, args, total_s: float) -> str:
    load = " -> ".join("/".join(f"{x:.1f}" for x in la) for la in (args.load_start, os.getloadavg()))
    lines = [f"fetch engine benchmark  ({'--quick' if args.quick else 'full'}{''.join(' --param ' + x for x in args.param)}; {os.cpu_count()} CPUs; "
             f"python {sys.version.split()[0]}; {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; total {total_s:.0f}s; "
             f"load average 1/5/15 min at start -> end: {load})"
             + (f"; --set {' '.join(args.set)}" if args.set else ""), ""]
    if a is not None:
        lines += report_a(a)
    for b in bs:
        lines += report_b(b)
    return "\n".join(lines)


def _rss(run: dict) -> str:
    return f"{run['maxrss_mib']:.1f} ({run['rss_before_mib']:.1f})"


def _q(q: dict, keys: tuple[str, ...], spec: str, scale: float = 1.0) -> str:
    return "/".join(_fmt(None if q[k] is None else q[k] * scale, spec) for k in keys)


def report_a(a: dict) -> list[str]:
    med = statistics.median
    H, K, d, L = a["H"], a["K"], a["d"], a["L"]
    quarter = next((r["H"] for r in a["runs"] if r["variant"] == "defaults H/4"), "?")
    cols = (("variant", 12), ("H", 3), ("pages", 5), ("reqs", 5), ("wall s", 6), ("pages/s", 7), ("ratio", 6),
            ("vs L-aware", 10), ("vs srv span", 11), ("srv gap p50/p90/max s", 21), ("srv req p50/p90 ms", 18),
            ("client 1st-byte p50/p90 ms", 26), ("sched rt p50/p90/max ms", 23), ("host span p50/max s", 19),
            ("cpu s", 5),
            ("peak RSS MiB (imports)", 22))
    lines = [
        f"(a) politeness-bound: {H} hosts x {K} pages (+1 robots.txt each), politeness.host_delay_s={d}, "
        f"server latency L={L}s; variants run in turn: 'defaults' (response_time_factor="
        f"{a['response_time_factor']:g}), 'rt_factor=0', and 'defaults H/4' ({quarter} of the hosts)",
        f"    ideal = H*K/(K*d) = H/d pages/s ({H / d:.1f} for H={H})  (robots.txt counted as one of the host's "
        f"requests: K+1 requests, K delays; requests take no time)",
        f"    latency-aware ideal = H*K/(K*d + (K+1)*L) ({H * K / (K * d + (K + 1) * L):.1f} pages/s for H={H})",
        "    ratio = (pages OK / wall time of fetch_partition) / ideal; 'vs srv span' uses the span the server saw;",
        "    'client 1st-byte' = fetch() start to response headers as the task saw them; 'sched rt' = the response "
        "time the task gave the scheduler (x response_time_factor = the delay's response-time term)",
        f"    gaps, request times and host spans (first request start to last end; ideal K*d+(K+1)*L = "
        f"{K * d + (K + 1) * L:.2f}s) are from the server's log",
        "    " + " ".join(f"{name:>{w}}" for name, w in cols),
    ]
    for r in a["runs"]:
        cells = (r["variant"], r["H"], r["pages"], r["requests"], f"{r['elapsed_s']:.2f}", f"{r['achieved_pps']:.1f}",
                 f"{r['ratio']:.3f}", f"{r['ratio_latency_aware']:.3f}", _fmt(r["ratio_server_span"]),
                 _q(r["server_gap_s"], ("p50", "p90", "max"), ".3f"),
                 _q(r["server_request_ms"], ("p50", "p90"), ".1f"), _q(r["first_byte_ms"], ("p50", "p90"), ".1f"),
                 _q(r.get("sched_rt_ms") or {"p50": None, "p90": None, "max": None}, ("p50", "p90", "max"), ".1f"),
                 _q(r["server_host_span_s"], ("p50", "max"), ".2f"), f"{r['cpu_s']:.2f}",
                 _rss(r))
        lines.append("    " + " ".join(f"{c:>{w}}" for c, (_, w) in zip(cells, cols)))
    for name, *_ in A_VARIANTS:
        ratios = [r["ratio"] for r in a["runs"] if r["variant"] == name]
        lines.append(f"    {name:>12}: ratio achieved/ideal median {med(ratios):.3f} (min {min(ratios):.3f}, "
                     f"max {max(ratios):.3f}, {len(ratios)} runs); goal >= 0.95: "
                     f"{'MET' if med(ratios) >= 0.95 else 'MISSED'}")
    lines += [f"    outcomes per run: {a['runs'][0]['outcomes']}",
              f"    server-side politeness check web.violations(host_delay_s={d}) over the whole log "
              f"(every run and the warm-up): {'CLEAN' if a['violations_clean'] else 'NOT CLEAN'}",
              *("      " + s for s in a["violations_summary"].splitlines()), ""]
    return lines


def report_b(b: dict) -> list[str]:
    med = statistics.median
    lines: list[str] = []
    lines += [
        f"(b) CPU-bound, {b['kind']} pages: {b['H']} hosts x {b['K']} pages (+1 robots.txt each), host_delay_s=0, "
        f"response_time_factor=0, server latency {b['latency_s']}s; concurrency {b['concurrency']}, "
        f"per-IP cap {b['ip_cap']}, one in flight per host",
        "    A = fetch_partition (robots+scheduler+fetch+parse+SimHash+WARC);"
        " B = bare aiohttp GET loop, same requests;",
        "    F = B plus the engine's irreducible C work per page, done in the loop (lxml tree, 3 SHA-1s, 2 gzip "
        "members at warc.gzip_level): F/B bounds what any engine doing that work on this loop can reach",
        f"    {'pair':>4} {'A pages/s':>9} {'B pages/s':>9} {'A/B':>6} {'F pages/s':>9} {'F/B':>6} "
        f"{'A cpu ms/pg':>11} {'B cpu ms/pg':>11} {'F cpu ms/pg':>11} "
        f"{'srv cpu ms/req A':>16} {'srv cpu ms/req B':>16} {'A peak RSS MiB (imports)':>24} "
        f"{'B peak RSS MiB (imports)':>24}",
    ]
    for i, pair in enumerate(b["pairs"]):
        A, B = pair["A"], pair["B"]
        sa = A["server_cpu_s"] and A["server_cpu_s"] * 1000 / A["requests"]
        sb = B["server_cpu_s"] and B["server_cpu_s"] * 1000 / B["requests"]
        F = pair["F"]
        lines.append(f"    {i:>4} {A['pps']:>9.1f} {B['pps']:>9.1f} {pair['ratio']:>6.3f} {F['pps']:>9.1f} "
                     f"{pair['floor_ratio']:>6.3f} "
                     f"{A['cpu_s'] * 1000 / A['pages']:>11.2f} {B['cpu_s'] * 1000 / B['pages']:>11.2f} "
                     f"{F['cpu_s'] * 1000 / F['pages']:>11.2f} "
                     f"{_fmt(sa, '.2f'):>16} {_fmt(sb, '.2f'):>16} {_rss(A):>24} {_rss(B):>24}")
    cpu_ratio = med([pair["B"]["cpu_s"] / pair["B"]["pages"] / (pair["A"]["cpu_s"] / pair["A"]["pages"])
                     for pair in b["pairs"]])
    floor_cpu_ratio = med([pair["B"]["cpu_s"] / pair["B"]["pages"] / (pair["F"]["cpu_s"] / pair["F"]["pages"])
                           for pair in b["pairs"]])
    engine_floor = [pair["A"]["cpu_s"] / pair["A"]["pages"] / (pair["F"]["cpu_s"] / pair["F"]["pages"])
                    for pair in b["pairs"]]
    kib = med([pair["B"]["bytes"] / pair["B"]["requests"] / 1024 for pair in b["pairs"]])
    lines += [f"    ratio A/B pages/s: median {b['median_ratio']:.3f} (min {b['min_ratio']:.3f}, "
              f"max {b['max_ratio']:.3f}, {len(b['pairs'])} pairs); "
              f"goal >= 0.5: {'MET' if b['median_ratio'] >= 0.5 else 'MISSED'}",
              f"    client CPU per page B/A (median): {cpu_ratio:.3f}",
              f"    floor F/B pages/s: median {med([pair['floor_ratio'] for pair in b['pairs']]):.3f}; "
              f"client CPU per page B/F (median): {floor_cpu_ratio:.3f}",
              f"    ENGINE/FLOOR client CPU per page A/F ({b['kind']} pages, {kib:.1f} KiB a response): "
              f"median {med(engine_floor):.2f} (min {min(engine_floor):.2f}, max {max(engine_floor):.2f}); "
              f"goal <= 2: {'MET' if med(engine_floor) <= 2 else 'MISSED'}",
              f"    A outcomes: {b['pairs'][0]['A']['outcomes']}"]
    comp = b.get("components_run")
    if comp and comp.get("components_s"):
        n = comp["pages"]
        bare_ms = med([pair["B"]["cpu_s"] * 1000 / pair["B"]["pages"] for pair in b["pairs"]])
        total_ms = comp["cpu_s"] * 1000 / n
        cs = comp["components_s"]
        lines += [f"    where A's client CPU goes (in-situ timers on the untimed warm-up run of A: {n} pages, "
                  f"{total_ms:.2f} ms CPU/page; thread CPU time inside each step):"]
        for label in [t[0] for t in _Timers.TARGETS] + [_Timers.GC]:
            if label in cs:
                share = 100 * cs[label] / comp["cpu_s"]
                lines.append(f"      {label:<40} {cs[label] * 1000 / n:>6.3f} ms/page  {share:>4.0f}%")
        rest = total_ms - cs.get(_Timers.TARGETS[0][0], 0.0) * 1000 / n
        lines.append(f"      {'everything else (fetch, scheduler, loop)':<40} {rest:>6.3f} ms/page  "
                     f"{100 * rest / total_ms:>4.0f}%   (B, the whole bare loop: {bare_ms:.3f} ms/page)")
    lines.append("")
    if b.get("profile"):
        lines += [f"(b) profile of one crawler run, {b['kind']} pages:", b["profile"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fetch_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller run (< 1 min on idle cores)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile one crawler run of (b) and print its top functions")
    ap.add_argument("--json", type=Path, help="also write every raw figure to this file")
    ap.add_argument("--only", choices=("a", "b"), help="run only scenario (a) or (b)")
    ap.add_argument("--pages", choices=("both", *B_PAGE_KINDS), default="both",
                    help="(b)'s page kinds: the test web's pages, realistic-size ones, or both (default)")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it (server logs, specs)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override a config key in every crawler run (repeatable), to compare settings")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="override a benchmark parameter of Params (e.g. a_pages=20, web_hosts=600)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args.worker)
    EXTRA_OVERRIDES[:] = args.set
    p = QUICK if args.quick else FULL
    for pair in args.param:
        name, _, value = pair.partition("=")
        if name not in Params.__dataclass_fields__:
            ap.error(f"--param {pair}: no such parameter (have: {', '.join(Params.__dataclass_fields__)})")
        p = replace(p, **{name: type(getattr(p, name))(value)})
    args.load_start = os.getloadavg()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="fetch-bench-") as tmp_s:
        tmp = Path(tmp_s)
        if args.keep:
            tmp = args.keep
            tmp.mkdir(parents=True, exist_ok=True)
        runner = Runner(tmp)
        a = scenario_a(p, tmp, runner) if args.only != "b" else None
        kinds = list(B_PAGE_KINDS) if args.pages == "both" else [args.pages]
        bs = [scenario_b(p, tmp, runner, args.profile, kind) for kind in kinds] if args.only != "a" else []
    text = report(a, bs, p, args, time.time() - t0)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"params": asdict(p), "a": a, "b": bs}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
