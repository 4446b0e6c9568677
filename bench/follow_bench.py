"""In-round following, side by side in one run: one fetch task over the home pages of every ordinary
site of the test web, with links followed inside the round (each host given an empty known set and a
cap of window / delay, as ``jobs/fetch.fetch_input`` would for hosts the crawl DB knows nothing more
of) and without. Judged from the server's log: page requests, distinct 200 pages, hosts still being
fetched near the end of the window, and the politeness check (tests/testweb/analysis.py).

    .venv/bin/python -m bench.follow_bench [--budget 20] [--hosts 40] [--delay 1.0]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from crawl_udfs import config
from crawl_udfs.known_urls import KnownUrls
from crawl_udfs.partition import fetch_partition
from crawl_udfs.rows import FetchItem, HostState
from crawl_udfs.url_normalize import fingerprint, host_of
from tests.testweb import TestWeb
from tests.urls import normalize


def one(follow: bool, budget: float, n_hosts: int, delay: float) -> str:
    with TestWeb(tempfile.mkdtemp() + "/web", n_hosts=n_hosts, seed=3, kinds=["site"]) as web:
        conf = config.load(overrides=[f'net.hosts_file="{web.hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]',
                                      f"politeness.host_delay_s={delay}", f"fetch.task_budget_s={budget}"])
        homes = [normalize(h.url("/")) for h in web.plan.by_kind("site")]
        items = [FetchItem(url=u, url_fp=fingerprint(u), host=host_of(u), score=1.0) for u in homes]
        states = [HostState(host=host_of(u), follow_cap=int(budget / delay), known=KnownUrls())
                  for u in homes] if follow else []
        start = time.time()
        list(fetch_partition(items, conf, hosts=states, warc_dir=tempfile.mkdtemp(),
                             warc_name=lambda i: f"b-{i}.warc.gz"))
        wall = time.time() - start
        lines = [r for r in web.log() if r["path"] != "/robots.txt"]
        v = web.violations(host_delay_s=delay, max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)
    distinct = {(r["host"], r["path"]) for r in lines if r["status"] == 200}
    last = {}
    for r in lines:
        last[r["host"]] = max(last.get(r["host"], 0.0), r["start"])
    busy = sum(1 for t in last.values() if t - start >= budget - 3)
    return (f"follow {'on ' if follow else 'off'}: hosts {len(homes)}, page requests {len(lines)}, distinct 200 pages "
            f"{len(distinct)}, task wall {wall:.1f} s, hosts fetched in the window's last 3 s {busy}, violations "
            f"too_close={len(v.too_close)} overlapping={len(v.overlapping)} disallowed={len(v.disallowed)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=20.0, help="fetch.task_budget_s, seconds")
    ap.add_argument("--hosts", type=int, default=40, help="test-web hosts")
    ap.add_argument("--delay", type=float, default=1.0, help="politeness.host_delay_s, seconds")
    a = ap.parse_args()
    for follow in (False, True):
        print(one(follow, a.budget, a.hosts, a.delay), flush=True)


if __name__ == "__main__":
    main()
