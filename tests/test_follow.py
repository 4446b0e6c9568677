"""Links followed inside the round (crawl_udfs.host_runs.TaskHosts.follow), judged from the server's log.

A fetch task given a host's known set and cap keeps that host busy for its whole
window with the links its pages name, never fetches a URL twice nor one the crawl
DB knows, and stays polite (tests/testweb/analysis.py).
"""

from __future__ import annotations

import collections

from crawl_udfs import config
from crawl_udfs.known_urls import KnownUrls
from crawl_udfs.partition import fetch_partition
from crawl_udfs.rows import FetchItem, FetchResult, HostState
from crawl_udfs.url_normalize import fingerprint, host_of
from tests.testweb import TestWeb
from tests.urls import normalize

DELAY = 0.5
BUDGET = 6.0


def _conf(web, *extra):
    return config.load(overrides=[
        f'net.hosts_file="{web.hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]',
        f"politeness.host_delay_s={DELAY}", f"fetch.task_budget_s={BUDGET}", "politeness.response_time_factor=0",
        "fetch.total_timeout_s=5", "fetch.first_byte_timeout_s=4", *extra])


def _run(tmp_path, web, conf, hosts, known=(), cap=1000, name="f"):
    """One task over the home pages of ``hosts``, each host with ``known`` and ``cap``."""
    homes = [normalize(h.url("/")) for h in hosts]
    items = [FetchItem(url=u, url_fp=fingerprint(u), host=host_of(u), score=1.0) for u in homes]
    states = [HostState(host=host_of(u), follow_cap=cap, known=KnownUrls(known)) for u in homes]
    out = list(fetch_partition(items, conf, hosts=states, warc_dir=str(tmp_path / "w"),
                               warc_name=lambda i: f"{name}-{i}.warc.gz"))
    pages = [r for r in out if isinstance(r, FetchResult)]
    lines = [r for r in web.log() if r["ua"] == conf.crawler.user_agent and r["path"] != "/robots.txt"]
    return pages, lines


def _big_site(web):
    return max(web.plan.by_kind("site"), key=lambda h: len(h.pages))


def test_a_host_with_many_pages_is_fetched_through_the_window_and_nothing_twice(tmp_path):
    with TestWeb(tmp_path / "web", n_hosts=12, seed=3, kinds=["site"]) as web:
        conf = _conf(web)
        big, small = _big_site(web), web.plan.hosts["news-6.test"]  # 300 pages; 4 pages that link to each other
        pages, lines = _run(tmp_path, web, conf, [big, small])
        v = web.violations(host_delay_s=DELAY, max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)
    # Nothing is fetched twice in the round: the seen set holds the fetch list and every URL followed
    # (the small site is crawled out well inside the window, and its pages link back to each other).
    twice = {k: n for k, n in collections.Counter((r["host"], r["path"]) for r in lines).items() if n > 1}
    assert twice == {}
    assert {r["path"] for r in lines if r["host"] == small.name} >= set(small.pages) - {"/robots.txt"}
    # One fetch-list URL on the big host, and the host kept busy: one request per delay for the whole window.
    on_big = sorted(r["start"] for r in lines if r["host"] == big.name)
    assert len(on_big) >= 0.7 * BUDGET / DELAY, len(on_big)
    assert on_big[-1] - on_big[0] >= BUDGET - 2.0, (on_big[0], on_big[-1])
    followed = [r for r in pages if r.in_round]
    assert len(pages) == len(followed) + 2 and len(followed) >= len(lines) - 2
    assert all(r.depth >= 1 and r.source_fp is not None and r.score > 0 for r in followed)
    assert v.too_close == [] and v.overlapping == [] and v.disallowed == [], v.summary()


def test_no_url_the_crawl_db_knows_is_fetched_again(tmp_path):
    with TestWeb(tmp_path / "web", n_hosts=12, seed=3, kinds=["site"]) as web:
        conf = _conf(web)
        host = _big_site(web)
        home = normalize(host.url("/"))
        # Every other link of the home page (the plan's), known to the crawl DB: the rest may be followed.
        same = [normalize(u) for u in host.pages["/"].outlinks()]
        links = [fingerprint(u) for u in same if host_of(u) == host_of(home) and u != home]
        known = links[::2]
        assert len(known) >= 3
        pages, lines = _run(tmp_path, web, conf, [host], known=known, name="k")
    requested = {fingerprint(normalize(web.url(r["host"], r["path"]))) for r in lines}
    assert len(requested) >= 4, "links not known were followed"
    assert fingerprint(home) in requested  # the fetch list's own URL (known too, in a real crawl DB)
    assert requested & set(known) == set()
    assert all(r.url_fp not in set(known) for r in pages)


def test_the_cap_bounds_what_is_followed(tmp_path):
    with TestWeb(tmp_path / "web", n_hosts=12, seed=3, kinds=["site"]) as web:
        conf = _conf(web)
        pages, lines = _run(tmp_path, web, conf, [_big_site(web)], cap=3)
    assert len(pages) == 3 and sum(r.in_round for r in pages) == 2
    assert len(lines) == 3
