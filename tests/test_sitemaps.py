"""Sitemaps read by the fetch task (crawl_udfs/sitemaps.py): pure tests, no Spark, no network.

Index files, gzip, the protocol's caps, hostile files (entity bombs, external entities), other
hosts' URLs, lastmod parsing; then the fetch task's page work reading a sitemap item
(crawl_udfs/pages.py) and the sitemaps a robots.txt fetch names."""

from __future__ import annotations

import datetime as dt
import gzip
import time

import pytest

from crawl_udfs import config
from crawl_udfs.classify import rules_for
from crawl_udfs.fetcher import FetchResponse
from crawl_udfs.pages import PageWork
from crawl_udfs.rows import FetchItem
from crawl_udfs.sitemaps import (CHILD_KIND, CLOCK_SKEW_S, SITEMAP, URL_KIND, parse_lastmod, parse_sitemap,
                                 robots_sitemaps)
from crawl_udfs.url_normalize import CachedNormalizer, UrlNormalizer, fingerprint

CONF = config.load(overrides=["sitemaps.enabled=true"])
NORM = UrlNormalizer(CONF.url)
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
T_FETCH = dt.datetime(2026, 6, 1, tzinfo=dt.timezone.utc).timestamp()


def urlset(*entries: tuple[str, str | None]) -> bytes:
    body = "".join(f"<url><loc>{loc}</loc>" + (f"<lastmod>{lm}</lastmod>" if lm else "") + "</url>"
                   for loc, lm in entries)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>{body}</urlset>'.encode()


def index(*locs: str) -> bytes:
    body = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex {NS}>{body}</sitemapindex>'.encode()


def read(body: bytes, *, depth: int = 0, max_urls: int = 50000, max_bytes: int = 52428800,
         max_index_depth: int = 2, host: str = "a.test"):
    return parse_sitemap(body, host=host, depth=depth, normalize=NORM.normalize, base_url=f"http://{host}/sitemap.xml",
                         max_urls=max_urls, max_bytes=max_bytes, max_index_depth=max_index_depth, not_after=T_FETCH)


def test_urlset_with_lastmods_and_relative_or_foreign_entries():
    sm = read(urlset(("http://a.test/p1", "2026-05-01"), ("http://A.test:80/p2#x", None),
                     ("http://b.test/elsewhere", "2026-05-01"), ("/relative", None), ("", None)))
    assert [(e.url, e.lastmod) for e in sm.urls] == [
        ("http://a.test/p1", dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc).timestamp()),
        ("http://a.test/p2", None), ("http://a.test/relative", None)]
    assert sm.foreign == 2 and sm.children == [] and sm.reason is None  # b.test's URL and the empty loc


def test_index_children_up_to_the_index_depth():
    body = index("http://a.test/s1.xml", "http://a.test/s2.xml.gz", "http://b.test/s3.xml")
    sm = read(body, depth=0, max_index_depth=1)
    assert [e.url for e in sm.children] == ["http://a.test/s1.xml", "http://a.test/s2.xml.gz"]
    assert sm.urls == [] and sm.foreign == 1 and sm.reason is None
    deep = read(body, depth=1, max_index_depth=1)  # an index listed by an index: its children are one level too deep
    assert deep.children == [] and deep.reason == "max_index_depth"


def test_gzip_sitemap_and_its_decompression_cap():
    body = urlset(*[(f"http://a.test/g{i}", None) for i in range(300)])
    packed = gzip.compress(body)
    assert [e.url for e in read(packed).urls] == [f"http://a.test/g{i}" for i in range(300)]
    cut = read(packed, max_bytes=4096)  # the first 4 KiB decompressed, read as far as they go
    assert cut.reason == "max_bytes" and 0 < len(cut.urls) < 300
    assert [e.url for e in cut.urls] == [f"http://a.test/g{i}" for i in range(len(cut.urls))]


def test_a_gzip_bomb_is_cut_at_the_cap_without_inflating_it():
    packed = gzip.compress(b"<urlset>" + b" " * (64 * 1024 * 1024), compresslevel=1)  # 64 MB of blanks, ~270 KB packed
    t = time.perf_counter()
    sm = read(packed, max_bytes=1 << 20)
    assert sm.reason == "max_bytes" and sm.urls == [] and time.perf_counter() - t < 2.0


def test_url_cap_keeps_the_first_entries():
    sm = read(urlset(*[(f"http://a.test/u{i}", None) for i in range(120)]), max_urls=100)
    assert len(sm.urls) == 100 and sm.reason == "max_urls" and sm.urls[-1].url == "http://a.test/u99"
    exact = read(urlset(*[(f"http://a.test/u{i}", None) for i in range(100)]), max_urls=100)
    assert len(exact.urls) == 100 and exact.reason is None


def test_byte_cap_of_a_plain_file():
    sm = read(urlset(*[(f"http://a.test/u{i}", None) for i in range(200)]), max_bytes=2048)
    assert sm.reason == "max_bytes" and 0 < len(sm.urls) < 200


BILLION_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY l0 "lol">'
                  + "".join(f'<!ENTITY l{i} "{("&l%d;" % (i - 1)) * 10}">' for i in range(1, 10))
                  + f']><urlset {NS}><url><loc>http://a.test/&l9;</loc></url></urlset>').encode()
EXTERNAL = (f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
            f'<urlset {NS}><url><loc>http://a.test/&e;</loc></url></urlset>').encode()


@pytest.mark.parametrize("body", [BILLION_LAUGHS, EXTERNAL], ids=["billion_laughs", "external_entity"])
def test_hostile_xml_is_refused_quickly(body):
    t = time.perf_counter()
    sm = read(body)
    assert sm.reason == "doctype" and sm.urls == [] and sm.children == []
    assert time.perf_counter() - t < 1.0


@pytest.mark.parametrize("body,reason", [
    (b"<html><body>soft 404</body></html>", "not_sitemap: <html>"),
    (b"", "not_sitemap: "),
    (urlset(("http://a.test/ok", None), ("http://a.test/two", None))[:-30], "xml_error"),  # cut inside the 2nd
])
def test_not_a_sitemap_or_broken(body, reason):
    sm = read(body)
    assert sm.reason.startswith(reason)
    assert [e.url for e in sm.urls] == (["http://a.test/ok"] if reason == "xml_error" else [])


@pytest.mark.parametrize("text,want", [
    ("2026-05-01", dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)),
    ("2026-05", dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)),
    ("2026", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)),
    ("2026-05-01T10:30+02:00", dt.datetime(2026, 5, 1, 8, 30, tzinfo=dt.timezone.utc)),
    ("2026-05-01T10:30:15.5Z", dt.datetime(2026, 5, 1, 10, 30, 15, tzinfo=dt.timezone.utc)),
    (" 2026-05-01T10:30:15-05:00 ", dt.datetime(2026, 5, 1, 15, 30, 15, tzinfo=dt.timezone.utc)),
    ("2026-13-01", None), ("2026-05-01T25:00Z", None), ("2026-05-01T10:30", None),  # no zone: not W3C
    ("yesterday", None), ("", None), (None, None), ("20260501", None),
])
def test_lastmod_parsing(text, want):
    assert parse_lastmod(text) == (None if want is None else want.timestamp())


def test_a_lastmod_after_the_fetch_is_ignored_unless_within_the_clock_skew():
    def at(seconds: float) -> str:
        return dt.datetime.fromtimestamp(T_FETCH + seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    sm = read(urlset(("http://a.test/f", "2030-01-01"), ("http://a.test/p", "2026-05-31"),
                     ("http://a.test/s", at(1)), ("http://a.test/e", at(CLOCK_SKEW_S)),
                     ("http://a.test/l", at(CLOCK_SKEW_S + 1))))
    # a "now" a second ahead of ours (a server's clock, or a whole-second stamp) is the fetch time, never later
    assert [e.lastmod for e in sm.urls] == [None, T_FETCH - 86400, T_FETCH, T_FETCH, None]


def test_robots_sitemaps_on_the_host_then_the_default_path():
    got = robots_sitemaps("http://a.test:8080/robots.txt", ("http://a.test:8080/s.xml", "/s.xml",
                                                            "http://b.test/x.xml", "http://"), NORM.normalize, "a.test")
    assert got == ["http://a.test:8080/s.xml", "http://a.test:8080/sitemap.xml"]


def _work() -> PageWork:
    return PageWork(CONF, rules_for(CONF, NORM), CachedNormalizer(NORM, 100), warc=None, results={})


def _resp(url: str, body: bytes, ctype: str = "application/xml") -> FetchResponse:
    return FetchResponse(url, 200, "OK", "1.1", [("Content-Type", ctype)], body, len(body), None, None, "/",
                         [], T_FETCH, None, None, None, None)


def test_page_work_reads_a_sitemap_item_as_outlinks():
    body = urlset(("http://a.test/p1", "2026-05-01T00:00Z"), ("http://b.test/x", None)) \
        .replace(b"</urlset>", b"<url><loc>http://a.test/a/a/a/a/a/a/a/a/a/a/a/a</loc></url></urlset>")
    item = FetchItem(url="http://a.test/sitemap.xml", url_fp=fingerprint("http://a.test/sitemap.xml"), host="a.test",
                     fetch_kind=SITEMAP)
    r = _work()._apply(_verdict(item, body), item, _resp(item.url, body))
    assert [(o.url, o.kind, o.lastmod) for o in r.outlinks] == [
        ("http://a.test/p1", URL_KIND, dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc).timestamp())]
    assert r.outlinks[0].url_fp == fingerprint("http://a.test/p1")
    assert r.outlinks_filtered == 2 and r.simhash is None  # b.test's URL, and the trap URL URL admission refused

    idx = index("http://a.test/child.xml")
    r = _work()._apply(_verdict(item, idx), item, _resp(item.url, idx))
    assert [(o.url, o.kind) for o in r.outlinks] == [("http://a.test/child.xml", CHILD_KIND)]
    bomb = _work()._apply(_verdict(item, BILLION_LAUGHS), item, _resp(item.url, BILLION_LAUGHS))
    assert bomb.outlinks == [] and bomb.error_message == "sitemap: doctype" and bomb.outcome == "ok"


def test_page_work_parses_a_page_item_as_html():
    body = urlset(("http://a.test/p1", None))
    item = FetchItem(url="http://a.test/sitemap.xml", url_fp=fingerprint("http://a.test/sitemap.xml"), host="a.test")
    r = _work()._apply(_verdict(item, body), item, _resp(item.url, body))
    assert r.outlinks == []  # a page: no <a href> in it


def _verdict(item, body):
    from crawl_udfs.classify import Store, classify
    v = classify(item, _resp(item.url, body), rules_for(CONF, NORM))
    v.store = Store.NOTHING  # no WARC writer in these tests
    return v


# -- update's sitemap rules (jobs/sitemap_transforms.py) on small DataFrames ------------------------
@pytest.mark.spark
def test_update_rules_robots_refresh_and_lastmod(spark):
    from jobs import sitemap_transforms as SM
    from jobs import update_transforms as T
    from jobs.discover_transforms import discover
    from schemas.tables import CRAWLDB, FETCH_OUTPUT

    t0, now = dt.datetime(2026, 3, 1, 12), dt.datetime(2026, 3, 1, 13)
    day = dt.timedelta(days=1)

    def known(url, status, last, nxt, kind=None):
        return dict(url_fp=fingerprint(url), host="a.test", status=status, next_fetch_time=nxt, score=1.0, depth=0,
                    redirect_hops=0, retries=0, fetch_count=1, change_count=0, unchanged_count=0,
                    fetch_interval_s=86400.0, first_seen=t0 - day, last_fetch_time=last, discovered_round=0,
                    updated_round=0, url=url, fetch_kind=kind)
    db = [known("http://a.test/sitemap.xml", "fetched", t0 - day, t0 + day, SITEMAP),  # stored: due again
          known("http://a.test/gone.xml", "gone", t0 - day, t0 + day, SITEMAP),        # keeps its back-off
          known("http://a.test/old", "fetched", t0 - day, t0 + day),                    # lastmod after: due now
          known("http://a.test/fresh", "fetched", t0, t0 + day),                        # lastmod before its fetch
          known("http://a.test/retry", "error_retry", t0 - day, t0 + day)]              # back-off kept
    crawldb = spark.createDataFrame([tuple(r.get(f.name) for f in CRAWLDB.fields) for r in db], CRAWLDB)

    def link(url, lastmod=None, kind=URL_KIND):
        return (url, fingerprint(url), kind, False, "a.test", lastmod)
    mid = t0 - dt.timedelta(hours=1)
    rows = [dict(round=1, partition=0, kind="host", host="a.test",
                 sitemap_urls=["http://a.test/sitemap.xml", "http://a.test/gone.xml", "http://a.test/new.xml"]),
            dict(round=1, partition=0, kind="page", host="a.test", url_fp=fingerprint("http://a.test/sitemap.xml"),
                 url="http://a.test/sitemap.xml", outcome="ok", fetch_time=t0,
                 outlinks=[link("http://a.test/old", mid), link("http://a.test/fresh", mid),
                           link("http://a.test/retry", mid), link("http://a.test/brand-new", mid),
                           link("http://a.test/child.xml", kind=CHILD_KIND)])]
    out = spark.createDataFrame([tuple(r.get(f.name) for f in FETCH_OUTPUT.fields) for r in rows], FETCH_OUTPUT)

    new, due = SM.robots_refresh(out, crawldb, now=now, round_no=1, score=1.0, default_interval_s=86400.0)
    assert [(r["url"], r["fetch_kind"], r["status"], r["depth"]) for r in new.collect()] == [
        ("http://a.test/new.xml", SITEMAP, "unfetched", 0)]
    lm = SM.lastmod_due(out.where(out["kind"] == "page"), crawldb, now=now, round_no=1)
    want_due = {fingerprint("http://a.test/sitemap.xml"), fingerprint("http://a.test/old")}
    got = due.unionByName(lm).collect()
    assert {r["url_fp"] for r in got} == want_due and {r["next_fetch_time"] for r in got} == {now}

    listed = spark.createDataFrame([(1, 0, fingerprint("http://a.test/sitemap.xml"), "a.test", 0, 1.0, 0,
                                     "http://a.test/sitemap.xml")],
                                   "round long, partition int, url_fp long, host string, depth int, score double, "
                                   "redirect_hops int, url string")
    prepared = T.prepare(out, T.with_followed(listed, out), None)
    found = {r["url"]: r for r in discover(prepared, crawldb, CONF.scope, duplicates=None, follow_nofollow=False,
                                           default_interval_s=86400.0, round_no=1, now=now).collect()}
    assert set(found) == {"http://a.test/brand-new", "http://a.test/child.xml"}
    assert found["http://a.test/child.xml"]["fetch_kind"] == SITEMAP and found["http://a.test/child.xml"]["depth"] == 1
    assert found["http://a.test/brand-new"]["fetch_kind"] is None
