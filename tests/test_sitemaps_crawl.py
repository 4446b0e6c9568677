"""Sitemaps end to end: one short crawl (2 rounds) of the test web's sitemap hosts through the CLI.

Round 1 fetches each host's robots.txt and home page; its update makes the sitemaps robots.txt names
and each host's /sitemap.xml crawl-DB rows due now (``fetch_kind = 'sitemap'``). Round 2 fetches them
as requests of their hosts and reads them: their URLs are inserted (an index's children as sitemap
rows), a lastmod newer than the home page's round-1 fetch makes it due now, the caps and the bomb are
recorded in the fetch log, other hosts' URLs are dropped. Judged from the tables and the test web's log.
"""

from __future__ import annotations

import datetime as dt

import pytest

from crawl_udfs import config
from jobs import cli, common, ledger
from tests.testweb import TestWeb
from tests.testweb.sites import SITEMAP_CAP_URLS

pytestmark = pytest.mark.spark

DELAY = 0.2
MAX_URLS = 50  # below sitemap-cap.test's SITEMAP_CAP_URLS


@pytest.fixture(scope="module")
def crawled(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("sitemaps")
    with TestWeb(d / "web", n_hosts=6, seed=5, kinds=["sitemap"]) as web:
        overlay = d / "sitemaps.toml"
        overlay.write_text(
            f'[storage]\nroot = "{d / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
            f"[politeness]\nhost_delay_s = {DELAY}\n"
            "[fetch]\ntask_budget_s = 10.0\ntotal_timeout_s = 5.0\nfollow_in_round = false\n"
            "[generate]\nfetch_partitions = 1\n"
            f"[sitemaps]\nenabled = true\nmax_urls = {MAX_URLS}\nmax_index_depth = 1\n")
        seeds = d / "seeds.txt"
        seeds.write_text("\n".join(h.url("/") for h in web.plan.hosts.values()) + "\n")
        base = ["--conf", str(overlay)]
        assert cli.main(base + ["init"]) == 0
        assert cli.main(base + ["inject", str(seeds)]) == 0
        assert cli.main(base + ["crawl", "--rounds", "2"]) == 0
        conf = config.load([overlay])
        v = web.violations(host_delay_s=DELAY, max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)
        yield web, conf, web.log(), v


def _rows(spark, conf, name):
    return [r.asDict() for r in spark.read.format("delta").load(common.table_path(conf, name)).collect()]


def test_sitemaps_are_fetched_politely_as_requests_of_their_host(spark, crawled):
    web, conf, log, v = crawled
    assert v.clean, v.summary()
    for host in web.plan.hosts:
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
    urls = {r["url"] for r in _rows(spark, conf, "crawldb")}
    plan = web.plan
    for host, paths in {"sitemap-plain.test": ("/p1.html", "/p2.html", "/p3.html"),
                        "sitemap-gzip.test": ("/z1.html", "/z2.html"), "sitemap-foreign.test": ("/f1.html",)}.items():
        assert {plan.url(host, p) for p in paths} <= urls, host
    assert plan.url("sitemap-plain.test", "/elsewhere.html") not in urls  # listed by sitemap-foreign only
    cap = [u for u in urls if "/c/" in u]
    assert len(cap) == MAX_URLS < SITEMAP_CAP_URLS
    assert not any("/deep.html" in u or "/i1.html" in u for u in urls)  # children are read in round 3
    why = {r["url"]: r["error_message"] for r in _rows(spark, conf, "fetch_log") if r["round"] == 2}
    assert why[plan.url("sitemap-cap.test", "/sitemap.xml")] == "sitemap: max_urls"
    assert why[plan.url("sitemap-bomb.test", "/sitemap.xml")] == "sitemap: doctype"
    assert why[plan.url("sitemap-plain.test", "/sitemap.xml")] is None


def test_a_lastmod_newer_than_the_last_fetch_makes_the_url_due_now(spark, crawled):
    web, conf, _, _ = crawled
    rows = {r["url"]: r for r in _rows(spark, conf, "crawldb")}
    home = rows[web.plan.url("sitemap-plain.test", "/")]       # lastmod: the time of the sitemap request
    other = rows[web.plan.url("sitemap-gzip.test", "/")]       # fetched in round 1 too, no lastmod for it
    assert home["fetch_count"] == other["fetch_count"] == 1
    read = rows[web.plan.url("sitemap-plain.test", "/sitemap.xml")]["last_fetch_time"]
    # due when update 2 read the sitemap (its "now": the round's end), not a day after its round-1 fetch
    assert read <= home["next_fetch_time"] < home["last_fetch_time"] + dt_seconds(conf.schedule.default_interval_s / 2)
    assert other["next_fetch_time"] >= other["last_fetch_time"] + dt_seconds(conf.schedule.default_interval_s - 1)
    assert rows[web.plan.url("sitemap-plain.test", "/p1.html")]["status"] == "unfetched"
    assert ledger.get_round(spark, conf, 2)["counts"]["sitemap_due"] == 1
    assert ledger.get_round(spark, conf, 1)["counts"]["sitemap_due"] == 0  # no sitemap stored yet to re-read


def dt_seconds(s: float) -> dt.timedelta:
    return dt.timedelta(seconds=s)
