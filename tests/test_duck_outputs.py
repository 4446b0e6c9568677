"""The driver engine's outputs (jobs/duck_outputs.py) against their Spark twins: sitemaps' due and new rows,
the merge source, the fetch_log and links appends (columns, types and rows: ``tests/duck_diff.py``).

Inputs are the Spark tests' (tests/test_sitemaps.py, test_update.py) and the scenarios and realistic round
of tests/test_duck_discover.py; each function gets the same Spark-built inputs in both engines."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql import functions as F

from crawl_udfs.sitemaps import CHILD_KIND, SITEMAP, URL_KIND
from crawl_udfs.url_normalize import fingerprint
from jobs import crawldb_rows as CR
from jobs import duck_outputs as DO
from jobs import hosts_transforms as HT
from jobs import sitemap_transforms as SM
from jobs import update_transforms as T
from jobs.discover_transforms import discover
from schemas.tables import CRAWLDB, FETCH_OUTPUT, HOSTS
from tests.duck_diff import assert_same, duck_inputs
from tests.test_duck_discover import DAY, SCENARIOS, con, prepared_of, realistic, realistic_round  # noqa: F401
from tests.test_update import CONF, NOW, T0, frame, old

pytestmark = pytest.mark.spark


def _updated(spark, prepared, round_no: int = 4):
    nxt = HT.host_next(frame(spark, [], HOSTS), frame(spark, [], FETCH_OUTPUT), park_duration_s=1.0, now=NOW)
    return T.transition(prepared, nxt, CONF.schedule, round_no=round_no, now=NOW)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_link_and_fetch_log_rows(spark, con, name):
    prepared, _ = prepared_of(spark, *SCENARIOS[name]())
    updated = _updated(spark, prepared)
    d = duck_inputs(con, prepared=prepared, updated=updated)
    assert_same(T.link_rows(prepared, round_no=4), DO.link_rows(con, d["prepared"], round_no=4))
    assert_same(T.fetch_log_rows(prepared, updated, round_no=4),
                DO.fetch_log_rows(con, d["prepared"], d["updated"], round_no=4))


# -- sitemaps: tests/test_sitemaps.py's case -------------------------------------------------------------------
def test_robots_refresh_and_lastmod_due(spark, con):
    t0, now, day = dt.datetime(2026, 3, 1, 12), dt.datetime(2026, 3, 1, 13), dt.timedelta(days=1)

    def known(url, status, last, nxt, kind=None):
        return old(url, status=status, next_fetch_time=nxt, fetch_count=1, first_seen=t0 - day, last_fetch_time=last,
                   fetch_kind=kind)
    db = [known("http://a.test/sitemap.xml", "fetched", t0 - day, t0 + day, SITEMAP),   # stored: due again
          known("http://a.test/gone.xml", "gone", t0 - day, t0 + day, SITEMAP),         # keeps its back-off
          known("http://a.test/nm.xml", "not_modified", t0 - day, t0 + day, SITEMAP),   # stored: due again
          known("http://a.test/old", "fetched", t0 - day, t0 + day),                     # lastmod after: due now
          known("http://a.test/fresh", "fetched", t0, t0 + day),                         # lastmod before its fetch
          known("http://a.test/soon", "fetched", t0 - day, now),                         # due by now already
          known("http://a.test/retry", "error_retry", t0 - day, t0 + day)]               # back-off kept

    def link(url, lastmod=None, kind=URL_KIND):
        return (url, fingerprint(url), kind, False, "a.test", lastmod)
    mid, late = t0 - dt.timedelta(hours=1), t0 - dt.timedelta(minutes=1)
    rows = [dict(round=1, partition=0, kind="host", host="a.test",
                 sitemap_urls=["http://a.test/sitemap.xml", "http://a.test/gone.xml", "http://a.test/new.xml",
                               "http://a.test/nm.xml", "http://a.test/new.xml"]),
            dict(round=1, partition=0, kind="host", host="b.test", sitemap_urls=None),
            dict(round=1, partition=0, kind="page", host="a.test", url_fp=fingerprint("http://a.test/sitemap.xml"),
                 url="http://a.test/sitemap.xml", outcome="ok", fetch_time=t0,
                 outlinks=[link("http://a.test/old", mid), link("http://a.test/fresh", mid),
                           link("http://a.test/retry", mid), link("http://a.test/brand-new", mid),
                           link("http://a.test/soon", mid), link("http://a.test/old", late),
                           link("http://a.test/fresh", None), link("http://a.test/old", mid, kind="a"),
                           link("http://a.test/child.xml", kind=CHILD_KIND)]),
            dict(round=1, partition=0, kind="page", host="a.test", url_fp=fingerprint("http://a.test/p"),
                 url="http://a.test/p", outcome="ok", fetch_time=t0, outlinks=None)]
    crawldb, out = frame(spark, db, CRAWLDB), frame(spark, rows, FETCH_OUTPUT)
    pages = out.where(out["kind"] == "page")
    d = duck_inputs(con, db=crawldb, out=out, pages=pages)
    kw = dict(now=now, round_no=1, score=1.5, default_interval_s=DAY)
    (new, due), (dnew, ddue) = SM.robots_refresh(out, crawldb, **kw), DO.robots_refresh(con, d["out"], d["db"], **kw)
    assert new.count() == 1 and due.count() == 2
    assert_same(new, dnew)
    assert_same(due, ddue)
    lm = SM.lastmod_due(pages, crawldb, now=now, round_no=1)
    assert lm.count() == 1
    assert_same(lm, DO.lastmod_due(con, d["pages"], d["db"], now=now, round_no=1))


# -- the merge source ------------------------------------------------------------------------------------------
def test_merge_source_ranks_and_budgets(spark, con):
    """One url_fp in several inputs keeps the highest-ranked row (update > repoint > new > budget > due >
    moved); unfetched rows of an exhausted host (any kind) become budget_exhausted with the reason."""
    x, e = "http://x.test/", "http://ex.test/"
    fp = fingerprint
    updated = frame(spark, [old(x + "u", status="fetched"), old(e + "deferred"), old(x + "up_due")], CRAWLDB)
    updated = updated.withColumn(T.WAS, updated["status"]).withColumn(T.CHANGED, updated["status"] == "fetched")
    new = frame(spark, [old(x + "u", score=9.0), old(x + "n"), old(e + "n", fetch_kind=SITEMAP),
                        old(x + "new_budget")], CRAWLDB).drop("gone_checks", "importance")
    budget = frame(spark, [old(x + "new_budget", status="budget_exhausted", error_class="budget:pages"),
                           old(x + "rp", status="budget_exhausted")], CRAWLDB)
    repointed = spark.createDataFrame([(fp(x + "rp"), "x.test", "duplicate", fp(x + "u"), "fetched", 4)],
                                      f"url_fp long, host string, status string, dup_of long, {T.WAS} string, "
                                      "updated_round long")
    due = spark.createDataFrame([(fp(x + "up_due"), "x.test", NOW, 4), (fp(x + "d"), "x.test", NOW, 4)],
                                "url_fp long, host string, next_fetch_time timestamp, updated_round long")
    moved = spark.createDataFrame([(fp(x + "d"), "x.test", x + "d", "fetched", 2.0, 1, 2, None, [1.0], 3.0, 0.5, 4),
                                   (fp(x + "m"), "x.test", x + "m", "unfetched", 2.0, 1, 2, T0, None, None, None, 4)],
                                  "url_fp long, host string, url string, status string, score double, "
                                  "change_count int, unchanged_count int, last_change_time timestamp, "
                                  "change_intervals_s array<double>, unchanged_span_s double, change_rate double, "
                                  "updated_round long")
    exhausted = spark.createDataFrame([("ex.test", "bytes")], "host string, budget_reason string")
    dfs = dict(updated=updated, new=new, budget=budget, exhausted=exhausted, repointed=repointed, due=due, moved=moved)
    d = duck_inputs(con, **dfs)
    got = T.merge_source(**dfs)
    kinds = {x + "u": "update", e + "deferred": "update", x + "up_due": "update", x + "n": "new", e + "n": "new",
             x + "new_budget": "new", x + "rp": "repoint", x + "d": "due", x + "m": "moved"}
    assert {r.url_fp: r["_kind"] for r in got.collect()} == {fp(u): k for u, k in kinds.items()}
    assert_same(got, DO.merge_source(con, **d))
    assert_same(T.merge_source(updated, new, budget, exhausted), DO.merge_source(con, d["updated"], d["new"],
                                                                                  d["budget"], d["exhausted"]))


def test_whole_rows_are_what_update_writes_in_place_of_the_rows_read(spark, con):
    """Each merge-source row made the whole row written: a partial kind sets only its columns over the row
    read, ``importance`` always stays as read, a ``new`` row of a URL known after all leaves that row as it
    is, a partial row of a URL not read is dropped, an update of a URL not read is inserted as decided."""
    x, fp = "http://x.test/", fingerprint
    late = NOW + dt.timedelta(days=3)
    updated = frame(spark, [old(x + "u", status="fetched", updated_round=4),            # importance: null here
                            old(x + "in_round", status="fetched", updated_round=4)], CRAWLDB)
    updated = updated.withColumn(T.WAS, updated["status"]).withColumn(T.CHANGED, updated["status"] == "fetched")
    new = frame(spark, [old(x + "n", discovered_round=4)], CRAWLDB)
    budget = frame(spark, [], CRAWLDB)
    repointed = spark.createDataFrame([(fp(x + "rp"), "x.test", "duplicate", fp(x + "u"), "fetched", 4)],
                                      f"url_fp long, host string, status string, dup_of long, {T.WAS} string, "
                                      "updated_round long")
    due = spark.createDataFrame([(fp(x + "d"), "x.test", NOW, 4), (fp(x + "unread"), "x.test", NOW, 4)],
                                "url_fp long, host string, next_fetch_time timestamp, updated_round long")
    moved = spark.createDataFrame([(fp(x + "m"), "x.test", x + "m", "unfetched", 7.0, 2, 3, T0, [5.0], 9.0, 0.25, 4)],
                                  "url_fp long, host string, url string, status string, score double, "
                                  "change_count int, unchanged_count int, last_change_time timestamp, "
                                  "change_intervals_s array<double>, unchanged_span_s double, change_rate double, "
                                  "updated_round long")
    exhausted = spark.createDataFrame([], "host string, budget_reason string")
    stored = dict(status="fetched", fetch_count=3, score=5.0, importance=0.7, next_fetch_time=late, updated_round=2)
    crawldb = frame(spark, [old(x + "u", **stored), old(x + "rp", **stored), old(x + "d", **stored),
                            old(x + "m", **stored), old(x + "n", **stored)], CRAWLDB)
    source = T.merge_source(updated, new, budget, exhausted, repointed, due, moved).localCheckpoint()
    got = {r.url_fp: r for r in CR.whole_rows(source, crawldb).collect()}
    assert set(got) == {fp(x + u) for u in ("u", "in_round", "n", "rp", "d", "m")}       # "unread" dropped
    u, rp, d, m, n = (got[fp(x + k)] for k in ("u", "rp", "d", "m", "n"))
    assert (u.status, u.updated_round, u.importance, u.fetch_count) == ("fetched", 4, 0.7, 0)   # decided; importance read
    assert (rp.status, rp.dup_of, rp.updated_round) == ("duplicate", fp(x + "u"), 4)
    assert (rp.score, rp.fetch_count, rp.next_fetch_time, rp.importance) == (5.0, 3, late, 0.7)
    assert (d.next_fetch_time, d.updated_round, d.status, d.score, d.fetch_count) == (NOW, 4, "fetched", 5.0, 3)
    assert (m.score, m.change_count, m.change_rate, m.updated_round) == (7.0, 2, 0.25, 4)
    assert (m.status, m.fetch_count, m.next_fetch_time) == ("fetched", 3, late)
    assert {k: n[k] for k in CRAWLDB.fieldNames()} == {k: crawldb.where(f"url_fp = {fp(x + 'n')}").first()[k]
                                                      for k in CRAWLDB.fieldNames()}
    assert n[T.WAS] == "fetched"  # known after all: not inserted (crawldb_rows.INSERTED), written back as read
    assert got[fp(x + "in_round")].importance is None and got[fp(x + "in_round")]["_kind"] == "update"
    assert source.columns == CR.whole_rows(source, crawldb).columns
    # the driver twin, with the gather's host-only rows (fetch_count null) among the rows read: not a URL read
    host_only = frame(spark, [old(x + "unread")], CRAWLDB).withColumn("fetch_count", F.lit(None).cast("int"))
    d_ = duck_inputs(con, source=source, crawldb=crawldb.unionByName(host_only))
    assert_same(CR.whole_rows(source, crawldb), DO.whole_rows(con, d_["source"], d_["crawldb"]))


# -- a realistic round -------------------------------------------------------------------------------------------
def test_realistic_round(spark, con, realistic):
    r = realistic
    kw = dict(now=NOW, round_no=5)
    new, due = SM.robots_refresh(r["out"], r["known"], score=1.0, default_interval_s=DAY, **kw)
    found = discover(r["prepared"], r["known"], CONF.scope, duplicates=r["updated"], follow_nofollow=False,
                     default_interval_s=DAY, **kw)
    exhausted = spark.createDataFrame([("h3.test", "pages"), ("h4.test", "bytes")], "host string, budget_reason string")
    inputs = dict(updated=r["updated"], new=found.unionByName(new, allowMissingColumns=True).localCheckpoint(),
                  budget=HT.budget_rows(r["known"], exhausted, round_no=5), exhausted=exhausted,
                  due=due.unionByName(SM.lastmod_due(r["prepared"], r["known"], **kw)),
                  moved=T.moved_to_known(r["prepared"], r["known"], round_no=5))
    d = duck_inputs(con, out=r["out"], known=r["known"], prepared=r["prepared"], **inputs)
    assert_same(T.link_rows(r["prepared"], round_no=5), DO.link_rows(con, d["prepared"], round_no=5))
    assert_same(T.fetch_log_rows(r["prepared"], r["updated"], round_no=5),
                DO.fetch_log_rows(con, d["prepared"], d["updated"], round_no=5))
    dnew, ddue = DO.robots_refresh(con, d["out"], d["known"], score=1.0, default_interval_s=DAY, **kw)
    assert new.count() == 4 and due.count() == 1
    assert_same(new, dnew)
    assert_same(due, ddue)
    source = T.merge_source(**inputs)
    kinds = {r["_kind"] for r in source.select("_kind").distinct().collect()}
    assert kinds == {"update", "new", "budget", "moved"} | ({"due"} if inputs["due"].count() else set()), kinds
    assert_same(source, DO.merge_source(con, **{k: d[k] for k in inputs}))


def test_the_driver_gather_holds_what_robots_refresh_and_lastmod_read(spark, con, realistic):
    """The driver engine's gather (``update_gather.crawldb_rows``: by URL, and by host only the sampled
    stored pages) gives the sitemap and lastmod rules the rows the Spark slice gives them: a sitemap URL
    is keyed by its ``url_fp``, not found among every row of its host."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from jobs import update_gather as G
    from jobs.duck_engine import to_spark
    r = realistic
    d = duck_inputs(con, out=r["out"], prepared=r["prepared"])
    keys = G.Keys(**{name: to_spark(spark, rel, StructType([StructField(rel.columns[0], LongType() if rel.columns[0]
                                                                        == "url_fp" else StringType())]))
                     for name, rel in G.keys(con, d["out"]).items()})
    from tests.test_generate import host_row
    # learning hosts of a billion pages, a sample of one: no stored page of a host is in it (threshold 0)
    from jobs import pattern_transforms as P
    big = spark.createDataFrame([host_row(f"h{i}.test", pages_fetched=10**9) for i in range(10)], HOSTS)
    learning = big.select("host", P.sample_threshold(F.col("pages_fetched"), 1).alias("threshold"))
    assert {r.threshold for r in learning.collect()} == {0}
    gathered = G.crawldb_rows(r["db"], keys, learning)
    g = duck_inputs(con, gathered=gathered)["gathered"]
    kw = dict(now=NOW, round_no=5)
    new, due = SM.robots_refresh(r["out"], r["known"], score=1.0, default_interval_s=DAY, **kw)
    dnew, ddue = DO.robots_refresh(con, d["out"], g, score=1.0, default_interval_s=DAY, **kw)
    assert due.count() == 1  # h1.test's sitemap, stored: due again
    assert_same(new, dnew)
    assert_same(due, ddue)
    assert_same(SM.lastmod_due(r["prepared"], r["known"], **kw), DO.lastmod_due(con, d["prepared"], g, **kw))
    assert gathered.where("fetch_count IS NULL").count() == 0  # no row by host: every row keyed whole
