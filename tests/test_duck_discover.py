"""The driver engine's discovery (jobs/duck_discover.py) against its Spark twins, on the Spark tests' inputs.

Each case builds its inputs as Spark DataFrames with the Spark tests' builders (tests/test_update.py,
test_schedule.py, test_sitemaps.py, test_crawldb_slice.py), runs the Spark twin, hands the same
inputs to DuckDB (``duck_inputs``) and compares columns, types and rows (``assert_same``); then one
realistic round (a few hundred pages with outlinks, as ``bench/verb_cost.py``'s ``synthetic_fetch``).
"""

from __future__ import annotations

import datetime as dt
import random

import pytest

from crawl_udfs.sitemaps import CHILD_KIND, SITEMAP, URL_KIND
from crawl_udfs.url_normalize import fingerprint, host_of
from jobs import crawldb_slice as S
from jobs import duck_discover as DD
from jobs import duck_engine
from jobs import hosts_transforms as HT
from jobs import update_transforms as T
from jobs.discover_transforms import discover
from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT, HOSTS
from tests.duck_diff import assert_same, duck_inputs
from tests.test_update import CONF, FIRST, NOW, T0, frame, link, listed, old, page

pytestmark = pytest.mark.spark
DAY = 86400.0


@pytest.fixture
def con():
    c = duck_engine.connect()
    yield c
    c.close()


def prepared_of(spark, pages, flist, olds, *, crawldb=True):
    """(prepared, crawldb) as update builds them: the fetch list with the in-round rows, the crawl-DB rows."""
    out = frame(spark, pages, FETCH_OUTPUT)
    db = frame(spark, olds, CRAWLDB)
    return T.prepare(out, T.with_followed(frame(spark, flist, FETCH_LIST), out), db if crawldb else None), db


# -- scenarios: (pages, fetch list, crawl-DB rows) -----------------------------------------------------------
A, B = "http://a.test/", "http://b.test/"


def discovery():
    """tests/test_update.py's _discovery_inputs: depth, score, nofollow, a redirect, a not-attempted page."""
    pages = [
        page(A + "p1", "ok", status_code=200, outlinks=[
            link(A + "x"), link(A + "y", nofollow=True), link("http://u:pw@B.test:8080/z"), link(A + "known"),
            link("http://evil.test/"), link(A + "canon", "canonical", nofollow=True)]),
        page(A + "p2", "ok", status_code=200, outlinks=[link(A + "x"), link(A + "two")]),
        page(A + "p5", "ok", status_code=200, outlinks=[link(A + "deep")]),
        page(B + "p3", "redirect", status_code=301, redirect_to="http://c.test:81/r",
             outlinks=[link("http://c.test:81/r", "redirect")]),
        page(A + "p4", "not_attempted", outlinks=[link(A + "never")])]
    flist = [listed(A + "p1", depth=0, score=1.0), listed(A + "p2", depth=1, score=8.0), listed(A + "p5", depth=2),
             listed(B + "p3", depth=1, score=0.3, hops=2), listed(A + "p4", depth=0, score=1.0)]
    olds = [old(A + "known"), old(A + "p1"), old(A + "p2"), old(B + "p3"), old(A + "p4"), old(A + "p5")]
    return pages, flist, olds


def depth_score_table():
    """test_the_task_and_update_give_a_followed_link_the_same_depth_and_score: every kind, nofollow or not."""
    table = [("p0", 0, 1.0, [("a", False), ("a", True), ("frame", False), ("iframe", False), ("canonical", True)]),
             ("p1", 2, 0.3, [("a", False)]),
             ("p2", 1, 8.0, [("area", False), ("a", True), ("redirect", False), ("a", False), ("frame", True)]),
             ("p3", 4, 0.0, [("a", False), ("canonical", False)]),
             ("p4", 3, 0.7, [("a", True), ("canonical", False)])]
    pages = [page(A + n, "ok", status_code=200, outlinks=[link(f"{A}{n}/{i}", k, nf) for i, (k, nf) in enumerate(ls)])
             for n, _, _, ls in table]
    return pages, [listed(A + n, depth=d, score=sc) for n, d, sc, _ in table], []


def odd_links():
    """Outlinks the writers never give, for three-valued logic: a null element, a null kind, a null nofollow,
    a null url_fp, an empty list; and a URL linked by two pages at one depth (the smaller src_fp's)."""
    odd = [(A + "nk", fingerprint(A + "nk"), None, False, "a.test", None),
           (A + "nn", fingerprint(A + "nn"), "a", None, "a.test", None),
           (A + "nofp", None, "a", False, "a.test", None), None, link(A + "both")]
    pages = [page(A + "o1", "ok", status_code=200, outlinks=odd),
             page(A + "o2", "ok", status_code=200, outlinks=[link(A + "both"), link(A + "nk", "canonical")]),
             page(A + "o3", "ok", status_code=200, outlinks=[])]
    return pages, [listed(A + "o1", depth=1, score=2.0), listed(A + "o2", depth=1, score=2.0),
                   listed(A + "o3")], [old(A + "o1"), old(A + "o2")]


def moves():
    """test_schedule.py's permanent redirects: to a new URL (history moves), a 302 (nothing moves), to
    known URLs never fetched and fetched, and two 301s to one target (the higher score, then the smaller fp)."""
    m = "http://m.test/"
    hist = dict(status="fetched", change_count=4, unchanged_count=9, last_change_time=FIRST,
                change_intervals_s=[3600.0, 0.0], unchanged_span_s=5 * DAY, change_rate=2e-5)
    own = dict(change_count=1, unchanged_count=2, last_change_time=NOW, change_intervals_s=[60.0],
               unchanged_span_s=DAY, change_rate=1e-3)

    def redirect(src, dst, code=301):
        return page(m + src, "redirect", status_code=code, redirect_to=m + dst, outlinks=[link(m + dst, "redirect")])
    pages = [redirect("old", "known"), redirect("o2", "seen", 308), redirect("tmp", "t2", 302), redirect("nw", "new"),
             redirect("tie1", "tied"), redirect("tie2", "tied"), redirect("lo", "tied"),
             redirect("nw2", "new2"), redirect("nw3", "new2")]
    scores = dict(old=3.0, o2=2.0, tmp=3.0, nw=3.0, tie1=5.0, tie2=5.0, lo=1.0, nw2=4.0, nw3=4.0)
    olds = [old(m + s, score=sc, **{**hist, "change_count": 4 + i}) for i, (s, sc) in enumerate(scores.items())]
    olds += [old(m + "known", score=0.5), old(m + "seen", status="fetched", fetch_count=3, score=9.0, **own),
             old(m + "t2", score=0.5), old(m + "tied", score=0.1)]
    return pages, [listed(m + s, score=sc) for s, sc in scores.items()], olds


def in_round():
    """test_a_url_followed_in_round_is_inserted_as_if_generated_and_fetched: a followed page's links inherit."""
    par, kid = "http://f.test/", "http://f.test/kid"
    pages = [page(par, "ok", status_code=200, digest="sha1:P", outlinks=[link(kid), link(par + "other")]),
             page(kid, "ok", status_code=200, digest="sha1:K", outlinks=[link(kid + "/grand")], in_round=True,
                  depth=1, score=0.2, source_fp=fingerprint(par))]
    return pages, [listed(par, score=0.8)], [old(par, score=0.8)]


def sitemap_page():
    """test_sitemaps.py's sitemap page: URLs with lastmod, a child sitemap (fetch_kind sitemap)."""
    def sm(url, lastmod=None, kind=URL_KIND):
        return (url, fingerprint(url), kind, False, "a.test", lastmod)
    mid = T0 - dt.timedelta(hours=1)
    pages = [page(A + "sitemap.xml", "ok", status_code=200, outlinks=[
        sm(A + "old", mid), sm(A + "brand-new", mid), sm(A + "child.xml", kind=CHILD_KIND)])]
    return pages, [listed(A + "sitemap.xml")], [old(A + "sitemap.xml", fetch_kind=SITEMAP), old(A + "old")]


SCENARIOS = {"discovery": discovery, "depth_score_table": depth_score_table, "odd_links": odd_links,
             "moves": moves, "in_round": in_round, "sitemap_page": sitemap_page}


# -- the round's keys and slice --------------------------------------------------------------------------
def test_round_keys_and_slice(spark, con):
    u, other = "http://s.test/", "http://o.test/"
    db = [old(u, digest="sha1:P"), old(u + "known", digest="sha1:K"), old(other + "target", digest="sha1:T"),
          old(u + "sibling", status="duplicate", dup_of=7, digest="sha1:S"), old(other + "far", digest="sha1:F"),
          old("http://hostonly.test/x", digest="sha1:H")]
    out = [page(u, "ok", outlinks=[link(u + "known"), link(other + "target"), link(other + "absent"), None]),
           page(u + "nolinks", "ok"), dict(round=1, partition=0, kind="host", host="hostonly.test")]
    db, out = frame(spark, db, CRAWLDB), frame(spark, out, FETCH_OUTPUT)
    d = duck_inputs(con, db=db, out=out)
    assert_same(S.round_keys(out), DD.round_keys(con, d["out"]))
    assert_same(S.round_slice(db, out), DD.round_slice(con, d["db"], d["out"]))


# -- edges, discover, moved_to_known on every scenario ----------------------------------------------------
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_edges_and_moved_to_known(spark, con, name):
    prepared, db = prepared_of(spark, *SCENARIOS[name]())
    d = duck_inputs(con, prepared=prepared, db=db)
    assert_same(T.edges(prepared), DD.edges(con, d["prepared"]))
    assert_same(T.moved_to_known(prepared, db, round_no=2), DD.moved_to_known(con, d["prepared"], d["db"], round_no=2))


@pytest.mark.parametrize("follow_nofollow", [False, True])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_discover(spark, con, name, follow_nofollow):
    conf = CONF.with_overrides("scope.score_decay=0.7")
    prepared, db = prepared_of(spark, *SCENARIOS[name]())
    d = duck_inputs(con, prepared=prepared, db=db)
    kw = dict(duplicates=None, follow_nofollow=follow_nofollow, default_interval_s=DAY, round_no=4, now=NOW)
    assert_same(discover(prepared, db, conf.scope, **kw), DD.discover(con, d["prepared"], d["db"], conf.scope, **kw))


def test_a_duplicates_links_enter_with_a_lower_score(spark, con):
    """test_update.py's case: a duplicate's shared links get duplicate_score_factor, its canonical target
    the whole score, a kept row's old duplicate status is no decision of this round."""
    pages = [page(A + "dup", "ok", status_code=200, outlinks=[link(A + "x"), link(A + "shared"),
                                                               link(A + "canon", "canonical")]),
             page(A + "other", "ok", status_code=200, outlinks=[link(A + "shared")])]
    prepared, db = prepared_of(spark, pages, [listed(A + "dup", score=1.0), listed(A + "other", score=0.4)], [],
                               crawldb=False)
    up = spark.createDataFrame([(fingerprint(A + "dup"), "duplicate", "ok"), (fingerprint(A + "other"), "duplicate",
                                T.KEEP)], f"url_fp long, status string, {T.CAT} string")
    conf = CONF.with_overrides("scope.score_decay=0.8", "scope.duplicate_score_factor=0.25")
    d = duck_inputs(con, prepared=prepared, db=db, up=up)
    kw = dict(follow_nofollow=False, default_interval_s=1.0, round_no=4, now=NOW)
    assert_same(discover(prepared, db, conf.scope, duplicates=up, **kw),
                DD.discover(con, d["prepared"], d["db"], conf.scope, duplicates=d["up"], **kw))


# -- a realistic round ---------------------------------------------------------------------------------------
def realistic_round(spark, n_pages: int = 300, seed: int = 7):
    """A round of ``n_pages`` pages on 10 hosts with 4-10 outlinks each (known and new targets, shared
    between pages, nofollow, canonical), 301/302 redirects to known and new URLs, errors, deferred pages,
    a few URLs followed in the round, sitemaps named by robots.txt; crawl DB, fetch list, prepared (from
    the slice, as update reads it), transition and a duplicate marking. Returns a dict of DataFrames."""
    from pyspark.sql import functions as F

    rnd = random.Random(seed)
    hosts = [f"h{i}.test" for i in range(10)]
    urls = [f"http://{hosts[i % 10]}/p{i}" for i in range(n_pages)]
    targets = [f"http://{hosts[j % 10]}/k{j}" for j in range(120)]
    olds, pages, flist = [], [], []
    for j, t in enumerate(targets):
        fetched = j % 3 == 0
        olds.append(old(t, status="fetched" if fetched else "unfetched", fetch_count=2 if fetched else 0,
                        score=rnd.choice([0.1, 0.5, 2.0]), change_count=j % 4, change_intervals_s=[float(j)],
                        last_fetch_time=T0 - dt.timedelta(days=2) if fetched else None,
                        next_fetch_time=T0 + dt.timedelta(days=1)))
    for i, u in enumerate(urls):
        depth, score = rnd.randint(0, 3), rnd.choice([0.25, 0.5, 1.0, 3.0])
        olds.append(old(u, status="fetched", digest=f"sha1:{i}", fetch_count=1, score=score, depth=depth,
                        change_count=i % 3, unchanged_count=1, change_intervals_s=[100.0 * i]))
        flist.append(listed(u, depth=depth, score=score, hops=i % 2))
        r = rnd.random()
        if r < 0.06:
            dst = rnd.choice(targets) if i % 2 else f"http://{host_of(u)}/moved{i % 7}"
            pages.append(page(u, "redirect", status_code=rnd.choice([301, 308, 302]), redirect_to=dst,
                              outlinks=[link(dst, "redirect")]))
        elif r < 0.1:
            pages.append(page(u, "http_error", status_code=404))
        elif r < 0.13:
            pages.append(page(u, rnd.choice(["deferred", "not_attempted"]), outlinks=[link(rnd.choice(targets))]))
        else:
            links = [link(rnd.choice(targets) if rnd.random() < 0.5 else f"http://{host_of(u)}/n{rnd.randint(0, 400)}",
                          rnd.choice(["a", "a", "a", "area", "iframe"]), rnd.random() < 0.15)
                     for _ in range(rnd.randint(4, 10))]
            if rnd.random() < 0.1:
                links.append(link(f"http://{host_of(u)}/c{i}", "canonical"))
            pages.append(page(u, "ok", status_code=200, digest=f"sha1:{i}x", simhash=i, outlinks=links,
                              wire_bytes=5200))
    for i in range(5):  # followed in the round from p{i}
        u = f"http://{hosts[i]}/n{i}"
        pages.append(page(u, "ok", status_code=200, digest=f"sha1:f{i}", in_round=True, depth=2, score=0.1,
                          source_fp=fingerprint(urls[i]), outlinks=[link(f"http://{hosts[i]}/g{i}")]))
    host_rows = [dict(round=1, partition=0, kind="host", host=h, requests=30,
                      sitemap_urls=[f"http://{h}/sitemap.xml"] if k % 2 else None) for k, h in enumerate(hosts)]
    olds.append(old("http://h1.test/sitemap.xml", status="fetched", fetch_kind=SITEMAP, fetch_count=1))
    out = frame(spark, pages + host_rows, FETCH_OUTPUT).localCheckpoint()
    db = frame(spark, olds, CRAWLDB).localCheckpoint()
    known = S.round_slice(db, out).localCheckpoint()
    prepared = T.prepare(out, T.with_followed(frame(spark, flist, FETCH_LIST), out), known).localCheckpoint()
    nxt = HT.host_next(frame(spark, [], HOSTS), out, park_duration_s=60.0, now=NOW)
    updated = T.transition(prepared, nxt, CONF.schedule, round_no=5, now=NOW)
    dup = (F.col("url_fp") % 5 == 0) & (F.col(T.CAT) == "ok")
    updated = updated.withColumn("status", F.when(dup, F.lit("duplicate")).otherwise(F.col("status"))).localCheckpoint()
    return dict(out=out, db=db, known=known, prepared=prepared, updated=updated)


@pytest.fixture(scope="module")
def realistic(spark):
    return realistic_round(spark)


def test_realistic_round(spark, con, realistic):
    r = realistic
    d = duck_inputs(con, **r)
    assert r["prepared"].count() > 250 and T.edges(r["prepared"]).count() > 1000
    assert_same(S.round_keys(r["out"]), DD.round_keys(con, d["out"]))
    assert_same(r["known"], DD.round_slice(con, d["db"], d["out"]))
    assert_same(T.edges(r["prepared"]), DD.edges(con, d["prepared"]))
    assert_same(T.moved_to_known(r["prepared"], r["known"], round_no=5),
                DD.moved_to_known(con, d["prepared"], d["known"], round_no=5))
    for follow_nofollow in (False, True):
        kw = dict(follow_nofollow=follow_nofollow, default_interval_s=DAY, round_no=5, now=NOW)
        assert_same(discover(r["prepared"], r["known"], CONF.scope, duplicates=r["updated"], **kw),
                    DD.discover(con, d["prepared"], d["known"], CONF.scope, duplicates=d["updated"], **kw))
