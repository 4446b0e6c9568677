"""Sitemaps end to end: the six sitemap hosts of the suite's shared 3-round crawl (``tests/e2e_crawl.py``,
``sitemaps.enabled``, links followed inside the round as by default), through the CLI.

Round 1 fetches each host's robots.txt and home page; its update makes the sitemaps robots.txt names
and each host's /sitemap.xml crawl-DB rows due now (``fetch_kind = 'sitemap'``). Round 2 fetches them
as requests of their hosts and reads them: their URLs are inserted (an index's children as sitemap
rows, read in round 3), the ones the host's cap leaves room for followed inside the round like a page's
links; a lastmod newer than the home page's round-1 fetch makes it due now (round 3 fetches it again),
the caps and the bomb are recorded in the fetch log, other hosts' URLs are dropped. Judged from the
tables (the crawl DB as update 2 left it: round 3's pre-round snapshot, by Delta time travel) and the
test web's log.
"""

from __future__ import annotations

import datetime as dt

import pytest

from crawl_udfs.url_normalize import fingerprint
from jobs import common, ledger
from tests.e2e_crawl import ROUNDS, SITEMAP_MAX_URLS
from tests.testweb.sites import SITEMAP_CAP_URLS

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def crawled(e2e_crawl):
    """(web, conf, request log, politeness violations) of the shared crawl (tests/e2e_crawl.py)."""
    assert ROUNDS >= 3, "round 3 reads the index's children and re-fetches what a lastmod made due"
    web, conf, base, log, v = e2e_crawl
    return web, conf, log, v


def _rows(spark, conf, name):
    return [r.asDict() for r in spark.read.format("delta").load(common.table_path(conf, name)).collect()]


def _after_update(spark, conf, n):
    """The crawl DB's rows as update ``n`` left them: round n+1's pre-round snapshot, from the ledger."""
    version = ledger.get_round(spark, conf, n + 1)["crawldb_version"]
    return [r.asDict() for r in common.read_at(spark, conf, "crawldb", version).collect()]


def _sitemap_hosts(web) -> set[str]:
    return {h.name for h in web.plan.by_kind("sitemap")}


def test_sitemaps_are_fetched_politely_as_requests_of_their_host(spark, crawled):
    web, conf, log, v = crawled
    assert v.clean, v.summary()
    for host in _sitemap_hosts(web):
        paths = [r["path"] for r in sorted(log, key=lambda r: r["start"]) if r["host"] == host]
        assert paths[0] == "/robots.txt" and "/sitemap.xml" in paths, (host, paths)
    plain = [r["path"] for r in log if r["host"] == "sitemap-plain.test"]
    assert "/sitemap-extra.xml" in plain  # named by its robots.txt (a 404)
    rows = {r["url"]: r for r in _rows(spark, conf, "crawldb")}
    sitemaps = {u for u, r in rows.items() if r["fetch_kind"] == "sitemap"}
    index = web.plan.host("sitemap-index.test")
    assert {index.url(p) for p in ("/sitemap.xml", "/sm/pages.xml", "/sm/more.xml.gz", "/sm/index2.xml")} <= sitemaps
    assert all(rows[u]["fetch_kind"] is None for u in rows if u.endswith(".html") or u.endswith("/"))


def test_sitemap_urls_are_inserted_within_the_caps_and_their_host(spark, crawled):
    web, conf, log, _ = crawled
    plan, hosts = web.plan, _sitemap_hosts(web)
    final = _rows(spark, conf, "crawldb")
    urls = {r["url"] for r in final}
    for host, paths in {"sitemap-plain.test": ("/p1.html", "/p2.html", "/p3.html"),
                        "sitemap-gzip.test": ("/z1.html", "/z2.html"), "sitemap-foreign.test": ("/f1.html",)}.items():
        assert {plan.url(host, p) for p in paths} <= urls, host
    assert plan.url("sitemap-plain.test", "/elsewhere.html") not in urls  # listed by sitemap-foreign only
    cap = [r["url"] for r in final if r["host"] == "sitemap-cap.test" and "/c/" in r["url"]]
    assert len(cap) == SITEMAP_MAX_URLS < SITEMAP_CAP_URLS
    # an index's children are sitemap rows after update 2, read in round 3: nothing they list known before
    after2 = {r["url"] for r in _after_update(spark, conf, 2) if r["host"] in hosts}
    assert not any("/deep.html" in u or "/i1.html" in u for u in after2)
    # round 3 read them: /sm/pages.xml's URLs inserted by update 3; /sm/index2.xml (index level 1) names
    # /sm/deep.xml, a level past sitemaps.max_index_depth, so /deep.html is never known
    index = plan.host("sitemap-index.test")
    found = {r["url"]: r["discovered_round"] for r in final if r["host"] in hosts}
    assert found[index.url("/i1.html")] == found[index.url("/i2.html")] == 3
    assert not any("/deep.html" in u or "/sm/deep.xml" in u for u in found)
    why = {r["url"]: r["error_message"] for r in _rows(spark, conf, "fetch_log") if r["round"] == 2}
    assert why[plan.url("sitemap-cap.test", "/sitemap.xml")] == "sitemap: max_urls"
    assert why[plan.url("sitemap-bomb.test", "/sitemap.xml")] == "sitemap: doctype"
    assert why[plan.url("sitemap-plain.test", "/sitemap.xml")] is None


def test_a_lastmod_newer_than_the_last_fetch_makes_the_url_due_now(spark, crawled):
    web, conf, _, _ = crawled
    plan = web.plan
    rows = {r["url"]: r for r in _after_update(spark, conf, 2)}
    home_url, other_url = plan.url("sitemap-plain.test", "/"), plan.url("sitemap-gzip.test", "/")
    home = rows[home_url]       # lastmod: the time of the sitemap request
    other = rows[other_url]     # fetched in round 1 too, no lastmod for it
    assert home["fetch_count"] == other["fetch_count"] == 1
    sitemap_url = plan.url("sitemap-plain.test", "/sitemap.xml")
    read = rows[sitemap_url]["last_fetch_time"]
    # due when update 2 read the sitemap (its "now": the round's end), not at the interval its policy gave it
    # after its round-1 fetch, as the other home page is (never shorter than schedule.min_interval_s)
    assert read <= home["next_fetch_time"] < read + dt_seconds(conf.schedule.min_interval_s)
    assert other["next_fetch_time"] >= other["last_fetch_time"] + dt_seconds(conf.schedule.min_interval_s)
    assert ledger.get_round(spark, conf, 2)["counts"]["sitemap_due"] == 1
    assert ledger.get_round(spark, conf, 1)["counts"]["sitemap_due"] == 0  # no sitemap stored yet to re-read
    # the URLs the sitemap lists (old, no and invalid lastmods) are new rows found on it by update 2; those
    # the host's cap left room for in round 2 were followed from it inside the round, the rest wait unfetched
    listed = [plan.url("sitemap-plain.test", p) for p in ("/p1.html", "/p2.html", "/p3.html")]
    assert all(rows[u]["discovered_round"] == 2 and rows[u]["source_fp"] == fingerprint(sitemap_url) for u in listed)
    out2 = {r["url"]: r for r in _rows(spark, conf, "fetch_output") if r["round"] == 2 and r["kind"] == "page"}
    followed = [u for u in listed if u in out2]
    assert all(out2[u]["in_round"] and out2[u]["source_fp"] == fingerprint(sitemap_url) for u in followed)
    waiting = [u for u in listed if u not in out2]
    assert waiting and all(rows[u]["status"] == "unfetched" for u in waiting), (followed, waiting)
    # and round 3 fetched the home page again, ahead of its schedule; the other home page waits for its own
    round3 = {r["url"] for r in _rows(spark, conf, "fetch_log") if r["round"] == 3}
    assert home_url in round3 and other_url not in round3
    final = {r["url"]: r for r in _rows(spark, conf, "crawldb") if r["url"] in (home_url, other_url)}
    assert final[home_url]["fetch_count"] == 2 and final[other_url]["fetch_count"] == 1


def dt_seconds(s: float) -> dt.timedelta:
    return dt.timedelta(seconds=s)
