"""Duplicate URL patterns per host: the features and the matcher (pure), the Column form against the
Python one, learning from a hand-made crawl DB (jobs/pattern_transforms.py), and generate skipping a
learnt pattern's URLs."""

from __future__ import annotations

import pytest

from crawl_udfs import url_patterns as U
from crawl_udfs.url_normalize import fingerprint
from tests.test_generate import URL

PRINT = {"pattern": "/print/", "kind": U.PREFIX}
SID = {"pattern": "?sid", "kind": U.PARAM}
REF_FRONT = {"pattern": "?ref=front", "kind": U.PARAM_VALUE}


def test_features_name_each_feature_and_the_url_without_it():
    assert U.features("http://a.test/print/article/3.html") == [
        ("/print/", U.PREFIX, "http://a.test/article/3.html", None)]
    assert U.features("http://a.test/article/3.html?ref=front&x=1") == [
        ("/article/", U.PREFIX, "http://a.test/3.html?ref=front&x=1", None),
        ("?ref", U.PARAM, "http://a.test/article/3.html?x=1", "front"),
        ("?ref=front", U.PARAM_VALUE, "http://a.test/article/3.html?x=1", None),
        ("?x", U.PARAM, "http://a.test/article/3.html?ref=front", "1"),
        ("?x=1", U.PARAM_VALUE, "http://a.test/article/3.html?ref=front", None)]
    assert U.features("http://a.test/news/3/?page=1")[1:] == [
        ("?page", U.PARAM, "http://a.test/news/3/", "1"), ("?page=1", U.PARAM_VALUE, "http://a.test/news/3/", None)]
    assert U.features("http://a.test/3.html") == []  # a last segment is no prefix
    assert U.features("http://a.test/") == [] and U.features("not a url") == []


CASES = [  # (url, rules, the pattern matched or None)
    ("http://a.test/print/article/3.html", [PRINT], "/print/"),
    ("http://a.test/printer/article/3.html", [PRINT], None),
    ("http://a.test/article/print/3.html", [PRINT], None),
    ("http://a.test/print", [PRINT], None),
    ("http://a.test/s.html?sid=9", [SID], "?sid"),
    ("http://a.test/s.html?x=1&sid", [SID], "?sid"),
    ("http://a.test/s.html?xsid=9&sidx=1", [SID], None),
    ("http://a.test/sid/s.html", [SID], None),
    ("http://a.test/a.html?ref=front", [REF_FRONT], "?ref=front"),
    ("http://a.test/a.html?a=1&ref=front&b=2", [PRINT, SID, REF_FRONT], "?ref=front"),
    ("http://a.test/a.html?ref=frontpage", [REF_FRONT], None),
    ("http://a.test/a.html?ref=home", [REF_FRONT], None),
    ("http://a.test/print/a.html?sid=1", [SID, PRINT], "?sid"),
    ("http://a.test/print/a.html", [], None),
    ("http://a.test/print/a.html", None, None),
    ("http://a.test:8080/print/a.html#x", [PRINT], "/print/"),
]


@pytest.mark.parametrize("url,rules,want", CASES)
def test_matches(url, rules, want):
    assert U.matches(url, rules) == want


@pytest.mark.spark
def test_the_column_form_agrees_with_the_python_form(spark):
    from pyspark.sql import functions as F

    from schemas.tables import DUP_PATTERN
    from pyspark.sql.types import ArrayType, StringType, StructField, StructType

    schema = StructType([StructField("i", StringType()), StructField("url", StringType()),
                         StructField("rules", ArrayType(DUP_PATTERN))])
    rows = [(str(i), url, None if rules is None else [dict(r, pages=None, dup_share=None) for r in rules])
            for i, (url, rules, _) in enumerate(CASES)]
    got = {r.i: r.hit for r in spark.createDataFrame(rows, schema)
           .select("i", U.matches_column(F.col("url"), F.col("rules")).alias("hit")).collect()}
    assert got == {str(i): U.matches(url, rules) is not None for i, (url, rules, _) in enumerate(CASES)}


# -- learning from a hand-made crawl DB -------------------------------------------------------------
def _learn(spark, rows, updated_rows, **kw):
    from jobs import pattern_transforms as P
    from pyspark.sql import functions as F

    from schemas.tables import CRAWLDB
    crawldb = spark.createDataFrame(rows, CRAWLDB)
    updated = spark.createDataFrame(updated_rows, CRAWLDB)
    # every host of the round learns, each page in its sample (threshold null)
    learning = updated.select("host").distinct().withColumn("threshold", F.lit(None).cast("long"))
    learnt = P.learn(P.stored_pages(crawldb, updated, learning), min_pages=kw.get("min_pages", 8),
                     min_share=kw.get("min_share", 0.9)).collect()
    return {r.host: {p.pattern: (p.pages, round(p.dup_share, 3)) for p in r.dup_patterns} for r in learnt}


def _page(url, status="fetched", dup_of=None):  # a tests.test_generate.url_row tuple (r[URL]: its URL)
    from tests.test_generate import url_row
    return url_row(url, status=status, dup_of=None if dup_of is None else fingerprint(dup_of))


@pytest.mark.spark
def test_learn_print_versions_variants_and_sessions_not_originals_nor_pagination(spark):
    o, m, s, z = "http://o.test", "http://m.test", "http://s.test", "http://z.test"
    rows = []
    for k in range(10):
        art, prn = f"{o}/article/{k}.html", f"{o}/print/article/{k}.html"
        if k % 2:  # which copy the crawl called the original does not matter
            rows += [_page(art), _page(prn, "duplicate", art)]
        else:
            rows += [_page(prn), _page(art, "duplicate", prn)]
        rows.append(_page(f"{art}?ref=front", "duplicate", prn if k % 2 == 0 else art))
        rows.append(_page(f"{o}/brief/{k}.html"))                       # distinct pages, one template
        # a mirror: every page a copy of the origin's, across hosts; ?page=1 is the page itself
        rows += [_page(f"{m}/news/{k}/", "duplicate", art), _page(f"{m}/news/{k}/?page=1", "duplicate", art)]
        rows.append(_page(f"{m}/list?page={k + 2}"))                     # a paginated list: distinct pages
        rows += [_page(f"{s}/s/{k}.html"), _page(f"{s}/s/{k}.html?sess=x{k}", "duplicate", f"{s}/s/{k}.html")]
        rows += [_page(f"{z}/print/{k}/a.html", "duplicate", f"{z}/{k}/a.html"), _page(f"{z}/{k}/a.html")]
    rows.append(_page(f"{m}/list"))
    # not fetched yet: its ?page=1 copy is no evidence either way (not counted), not evidence against
    rows = [r if r[URL] != f"{m}/news/9/" else _page(f"{m}/news/9/", "unfetched") for r in rows]
    # the round: one print version found a duplicate now (unfetched before), one host per round row
    last = f"{o}/print/article/9.html"
    before = [r if r[URL] != last else _page(last, "unfetched") for r in rows]
    updated = [r for r in rows if r[URL] in (last, f"{o}/brief/0.html", f"{m}/list", f"{s}/s/0.html")]
    got = _learn(spark, before, updated)
    assert got == {"o.test": {"/print/": (10, 1.0), "?ref=front": (10, 1.0)},
                   "m.test": {"?page=1": (9, 1.0)},
                   "s.test": {"?sess": (10, 1.0)}}  # z.test: not a host of the round
    # the evidence thresholds: the round's print page counted (10 pages) or not (9, under min_pages)
    assert "/print/" not in _learn(spark, before, [r for r in updated if r[URL] != last], min_pages=10)["o.test"]


# -- generate ---------------------------------------------------------------------------------------
@pytest.mark.spark
def test_generate_skips_or_lowers_the_urls_of_a_learnt_pattern(spark):
    from tests.test_generate import host_row, select, url_row, urls_of
    rules = [dict(PRINT, pages=12, dup_share=1.0), dict(REF_FRONT, pages=12, dup_share=1.0)]
    hosts = [host_row("o.test", dup_patterns=rules), host_row("p.test")]
    urls = [url_row("http://o.test/article/1.html", score=1.0), url_row("http://o.test/print/article/1.html", score=2.0),
            url_row("http://o.test/article/1.html?ref=front", score=3.0, status="duplicate"),
            url_row("http://p.test/print/article/1.html")]  # another host's rules are not its own
    kept = urls_of(select(spark, urls, hosts, pattern_action="skip"))
    assert kept == {"http://o.test/article/1.html", "http://p.test/print/article/1.html"}
    assert len(urls_of(select(spark, urls, hosts))) == 4  # patterns ignored
    lowered = select(spark, urls, hosts, pattern_action="lower", pattern_score_factor=0.1, max_per_host=1)
    assert urls_of(lowered) == kept  # the best of o.test is now the only URL matching no pattern


# -- the fetch task's in-round following ------------------------------------------------------------
@pytest.mark.parametrize("overrides,want", [
    ([], {"http://o.test/article/1.html": 0.5}),
    (['dedup.pattern_action="lower"', "dedup.pattern_score_factor=0.1"],
     {"http://o.test/article/1.html": 0.5, "http://o.test/print/article/1.html": 0.05}),
    (["dedup.learn_patterns=false"], {"http://o.test/article/1.html": 0.5, "http://o.test/print/article/1.html": 0.5}),
])
def test_in_round_following_skips_or_lowers_a_learnt_patterns_links(overrides, want):
    from crawl_udfs import config
    from crawl_udfs.host_runs import TaskHosts
    from crawl_udfs.known_urls import KnownUrls
    from crawl_udfs.rows import FetchItem, FetchResult, HostState, Outlink
    from crawl_udfs.scheduler import PolitenessScheduler

    conf = config.load(overrides=["scope.score_decay=1.0", *overrides])
    tasks = TaskHosts(conf, PolitenessScheduler(conf.politeness, clock=lambda: 0.0))
    home = FetchItem(url="http://o.test/", url_fp=fingerprint("http://o.test/"), host="o.test", score=1.0)
    tasks.admit([home], {"o.test": HostState(host="o.test", follow_cap=10, known=KnownUrls([]),
                                             dup_patterns=[dict(PRINT, pages=12, dup_share=1.0)])},
                start=0.0, retried=False)
    links = [Outlink(url=u, url_fp=fingerprint(u), kind="a", host="o.test")
             for u in ("http://o.test/article/1.html", "http://o.test/print/article/1.html")]
    tasks.follow(home, FetchResult(url=home.url, url_fp=home.url_fp, host="o.test", outcome="ok", outlinks=links), 0.0)
    assert {i.url: i.score for i in tasks.followed} == want


def test_the_reason_status_hosts_prints_gives_the_evidence():
    from jobs.pattern_transforms import reason
    assert reason({"pattern": "/print/", "kind": U.PREFIX, "pages": 12, "dup_share": 11 / 12}) == \
        "/print/: 11 of 12 fetched pages copy the URL without it"
