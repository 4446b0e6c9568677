"""Tail-cut benchmark: ``python -m bench.tail_bench`` (PYTHONPATH at the repository), ~2.5 min.

Side by side in one run, each on a fresh copy of the same test web: one fetch task over the
ordinary sites of >= 10 pages (10 URLs each, up to 30 sites) plus a slow-drip host (every request
runs to fetch.total_timeout_s = 10 s) and a host learnt slow (robots.txt answered after 2 s), 30
URLs each; once with the tail cut at its defaults ([fetch] tail_*), once with it off (both shares
0). Prints per run the task's wall time, when the sites' last request ended (server log),
requests, pages ok, slow-host URLs left not_attempted and the server-side verdict; then the
ratios. Measured 2026-12-01 on the shared 2-core machine (load ~6): task 43.9 s vs 90.0 s
(the budget), sites done at 27.1 s vs 34.1 s, 183 vs 213 ok (the 30 more are the slow hosts'),
ok pages/s of task time 1.76x, both clean.
"""
import pathlib
import tempfile
import time

from crawl_udfs import config
from crawl_udfs.partition import fetch_partition
from crawl_udfs.rows import FetchItem, FetchResult
from crawl_udfs.url_normalize import fingerprint, host_of
from tests.testweb import TestWeb
from tests.testweb.model import Knobs
from tests.urls import normalize

SLOW = ("hostile-drip.test", "robots-slow.test")
BUDGET = 90.0

def one(tmp, cut: bool):
    knobs = Knobs(robots_slow_s=2.0, drip_interval_s=0.5, drip_total_s=120.0)
    with TestWeb(tmp / f"web{cut}", n_hosts=70, seed=5, kinds=["site", "robots", "hostile"], knobs=knobs) as web:
        extra = [] if cut else ["fetch.tail_busy_host_share=0", "fetch.tail_rate_share=0"]
        conf = config.load(overrides=[f'net.hosts_file="{web.hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]',
                                      f"fetch.task_budget_s={BUDGET}", "fetch.total_timeout_s=10", *extra])
        sites = [h for h in web.plan.by_kind("site") if len(h.pages) >= 10 and h.robots_variant != "disallow-all"][:30]
        urls = [normalize(h.url(p)) for h in sites for p in sorted(h.pages)[:10]]
        urls += [normalize(web.url("hostile-drip.test", f"/?n={i}")) for i in range(30)]
        urls += [normalize(web.url("robots-slow.test", f"/?n={i}")) for i in range(30)]
        items = [FetchItem(url=u, url_fp=fingerprint(u), host=host_of(u)) for u in urls]
        t0 = time.time()
        out = list(fetch_partition(items, conf, warc_dir=str(tmp / f"w{cut}"), warc_name=lambda i: f"m-{i}.warc.gz"))
        wall = time.time() - t0
        log = [r for r in web.log() if r["ua"] == conf.crawler.user_agent]
        v = web.violations(host_delay_s=conf.politeness.host_delay_s, max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)
    res = [r for r in out if isinstance(r, FetchResult)]
    sites_done = max(r["end"] for r in log if r["host"] not in SLOW) - t0
    ok = sum(r.outcome == "ok" for r in res)
    left = sum(r.outcome == "not_attempted" for r in res)
    print(f"cut {'on ' if cut else 'off'}: task {wall:6.1f} s (budget {BUDGET:.0f} s), sites done at {sites_done:5.1f} s, "
          f"{len(sites)} sites, {len(log)} requests, {ok} ok, {left} slow-host URLs not attempted, "
          f"{ok / wall:5.2f} ok pages/s of task time, clean={v.clean}", flush=True)
    return wall, ok

def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        on = one(tmp, True)
        off = one(tmp, False)
    print(f"task time off/on: {off[0] / on[0]:.2f}x; "
          f"ok pages/s of task time on/off: {(on[1] / on[0]) / (off[1] / off[0]):.2f}x")


if __name__ == "__main__":
    main()
