"""update: the transition table, duplicates, discovery, hosts, budget (small DataFrames),
then the job on Delta: ledger refusals, one MERGE, idempotent reruns and crash resume."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from crawl_udfs import config
from crawl_udfs.config import ConfigError
from crawl_udfs.url_normalize import fingerprint, host_of
from jobs import hosts_transforms as HT
from jobs import exact_dup_transforms as X
from jobs import update_transforms as T
from jobs.discover_transforms import discover
from jobs.update_counters import Counters
from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT, HOSTS

pytestmark = pytest.mark.spark

T0 = dt.datetime(2026, 3, 1, 12, 0, 0)          # fetch time of the round
NOW = dt.datetime(2026, 3, 1, 13, 0, 0)         # the update's "now"
FIRST = dt.datetime(2026, 1, 1)                 # first_seen of the old rows
H = 3600.0
CONF = config.load(overrides=[  # the fixed policy: the transition table's intervals are its (test_schedule: the others)
    'schedule.policy="fixed"', "schedule.default_interval_s=86400.0", "schedule.gone_interval_s=1000000.0",
    "schedule.redirect_perm_interval_s=500000.0", "schedule.duplicate_interval_s=700000.0",
    "schedule.robots_denied_interval_s=200000.0", "schedule.retry_base_s=3600.0", "schedule.retry_max_s=20000.0",
    "schedule.max_retries=5", "politeness.failure_park_duration_s=7200.0", "budget.max_pages_per_host=12",
    "scope.max_depth=2", 'scope.deny_hosts=["^evil\\\\."]'])


def sec(s: float) -> dt.timedelta:
    return dt.timedelta(seconds=s)


def old(url: str, **kw) -> dict:
    row = dict(url_fp=fingerprint(url), host=host_of(url), status="unfetched", next_fetch_time=T0 - sec(H),
               score=1.0, depth=0, redirect_hops=0, retries=0, fetch_count=0, change_count=0, unchanged_count=0,
               fetch_interval_s=86400.0, first_seen=FIRST, discovered_round=0, updated_round=0, url=url)
    row.update(kw)
    return row


def page(url: str, outcome: str, n: int = 1, **kw) -> dict:
    fetched = outcome not in ("robots_denied", "robots_unavailable", "deferred", "not_attempted")
    row = dict(round=n, partition=0, kind="page", host=host_of(url), url_fp=fingerprint(url), url=url,
               outcome=outcome, fetch_time=T0 if fetched else None, redirect_hops=0)
    row.update(kw)
    return row


def link(url: str, kind: str = "a", nofollow: bool = False) -> tuple:
    return (url, fingerprint(url), kind, nofollow, host_of(url), None)  # lastmod: sitemaps' only


def listed(url: str, n: int = 1, depth: int = 0, score: float = 1.0, hops: int = 0) -> dict:
    return dict(round=n, partition=0, url_fp=fingerprint(url), host=host_of(url), depth=depth, score=score,
                redirect_hops=hops, url=url)


def frame(spark, rows: list[dict], schema):
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows], schema)


def by_url(df) -> dict:
    return {r["url"]: r.asDict() for r in df.collect()}


def no_hosts(spark):
    return frame(spark, [], HOSTS)


# -- the transition table -----------------------------------------------------------------------
D = "http://t.test/"
SH = -0x0F0F_1234_5678_9ABC  # a stored main-text SimHash
# (name, page fields, old crawl-DB fields, expected fields of the updated row)
TRANSITIONS = [
    ("ok_first", dict(outcome="ok", status_code=200, digest="sha1:A", simhash=7, content_type="text/html",
                      etag='"e1"', last_modified="Mon", warc_record_id="<urn:1>"), {},
     dict(status="fetched", retries=0, fetch_count=1, change_count=0, unchanged_count=0, digest="sha1:A",
          simhash=7, etag='"e1"', warc_record_id="<urn:1>", warc_fetch_time=T0, http_status=200,
          next_fetch_time=T0 + sec(86400), fetch_interval_s=86400.0, last_fetch_time=T0, last_change_time=None)),
    ("ok_changed", dict(outcome="ok", status_code=200, digest="sha1:B", warc_record_id="<urn:2>"),
     dict(status="fetched", digest="sha1:A", fetch_count=3, retries=0, change_count=1, warc_record_id="<urn:0>"),
     dict(status="fetched", fetch_count=4, change_count=2, unchanged_count=0, digest="sha1:B",
          last_change_time=T0, warc_record_id="<urn:2>", next_fetch_time=T0 + sec(86400))),
    ("ok_same", dict(outcome="ok", status_code=200, digest="sha1:S"),
     dict(status="fetched", digest="sha1:S", fetch_count=1, last_change_time=FIRST),
     dict(status="fetched", fetch_count=2, change_count=0, unchanged_count=1, last_change_time=FIRST)),
    # change detection by main text (schedule.unchanged_simhash_bits = 1): a new digest whose SimHash is
    # 1 bit from the stored copy's is unchanged (a timestamp, an ad); 5 bits is changed (an edit); a
    # missing or empty SimHash leaves the digest to decide (SH is negative: bits of a signed long)
    ("ok_boilerplate_only", dict(outcome="ok", status_code=200, digest="sha1:B2", simhash=SH ^ (1 << 40)),
     dict(status="fetched", digest="sha1:B1", simhash=SH, change_count=1, unchanged_count=2, last_change_time=FIRST),
     dict(change_count=1, unchanged_count=3, last_change_time=FIRST, digest="sha1:B2", simhash=SH ^ (1 << 40))),
    ("ok_edited_5_bits", dict(outcome="ok", status_code=200, digest="sha1:E2", simhash=SH ^ 0b11111),
     dict(status="fetched", digest="sha1:E1", simhash=SH, change_count=1, unchanged_count=2, last_change_time=FIRST),
     dict(change_count=2, unchanged_count=2, last_change_time=T0)),
    ("ok_no_simhash", dict(outcome="ok", status_code=200, digest="sha1:M2"),
     dict(status="fetched", digest="sha1:M1", simhash=SH, last_change_time=FIRST),
     dict(change_count=1, unchanged_count=0, last_change_time=T0, simhash=None)),
    ("ok_no_simhash_same_digest", dict(outcome="ok", status_code=200, digest="sha1:M1"),
     dict(status="fetched", digest="sha1:M1", last_change_time=FIRST),
     dict(change_count=0, unchanged_count=1, last_change_time=FIRST)),
    ("ok_stored_empty_text", dict(outcome="ok", status_code=200, digest="sha1:T2", simhash=1),
     dict(status="fetched", digest="sha1:T1", simhash=0, last_change_time=FIRST),
     dict(change_count=1, unchanged_count=0, last_change_time=T0)),
    ("ok_after_errors", dict(outcome="ok", status_code=200, digest="sha1:R"),
     dict(status="error_retry", retries=2, error_class="timeout"),
     dict(status="fetched", retries=0, error_class=None)),
    ("not_modified", dict(outcome="not_modified", status_code=304, digest="sha1:N", etag='"e2"',
                          warc_record_id="<urn:revisit>"),
     dict(status="fetched", digest="sha1:N", etag='"e1"', last_modified="Tue", warc_record_id="<urn:orig>",
          warc_fetch_time=FIRST, content_type="text/html", fetch_count=1),
     dict(status="not_modified", fetch_count=2, unchanged_count=1, change_count=0, digest="sha1:N",
          warc_record_id="<urn:orig>", warc_fetch_time=FIRST, etag='"e2"', last_modified="Tue",
          content_type="text/html", http_status=304, next_fetch_time=T0 + sec(86400))),
    # a 200 stored as an identical-payload revisit: fetched and unchanged, but the crawl DB keeps naming the
    # full copy (the next revisit refers to it, and lookup follows it there)
    ("ok_identical_payload", dict(outcome="ok", status_code=200, digest="sha1:N", warc_record_id="<urn:revisit>",
                                  warc_refers_to="<urn:orig>", etag='"e2"'),
     dict(status="fetched", digest="sha1:N", warc_record_id="<urn:orig>", warc_fetch_time=FIRST, fetch_count=1),
     dict(status="fetched", fetch_count=2, unchanged_count=1, change_count=0, digest="sha1:N",
          warc_record_id="<urn:orig>", warc_fetch_time=FIRST, etag='"e2"', http_status=200)),
    ("redirect_301", dict(outcome="redirect", status_code=301, redirect_to="https://t.test/a"), {},
     dict(status="redirect_perm", redirect_to="https://t.test/a", fetch_count=1, retries=0,
          fetch_interval_s=500000.0, next_fetch_time=T0 + sec(500000))),
    ("redirect_308", dict(outcome="redirect", status_code=308, redirect_to="https://t.test/b"), {},
     dict(status="redirect_perm")),
    ("redirect_302", dict(outcome="redirect", status_code=302, redirect_to="http://t.test/c"), {},
     dict(status="redirect_temp", redirect_to="http://t.test/c", next_fetch_time=T0 + sec(86400))),
    ("redirect_303", dict(outcome="redirect", status_code=303, redirect_to="http://t.test/d"), {},
     dict(status="redirect_temp")),
    ("redirect_307", dict(outcome="redirect", status_code=307, redirect_to="http://t.test/e"), {},
     dict(status="redirect_temp")),
    ("redirect_loop", dict(outcome="bad_redirect", status_code=301, redirect_to=D + "redirect_loop",
                           error_class="redirect_loop"), {},
     dict(status="error_final", retries=1, fetch_count=1, redirect_to=D + "redirect_loop",
          error_class="redirect_loop", next_fetch_time=T0 + sec(1000000))),
    ("http_404", dict(outcome="http_error", status_code=404), dict(status="fetched", digest="sha1:X", retries=1),
     dict(status="gone", retries=0, fetch_count=1, digest="sha1:X", http_status=404,
          fetch_interval_s=1000000.0, next_fetch_time=T0 + sec(1000000))),
    ("http_410", dict(outcome="http_error", status_code=410), {}, dict(status="gone")),
    ("http_503", dict(outcome="http_error", status_code=503), {},
     dict(status="error_retry", retries=1, fetch_count=1, fetch_interval_s=86400.0,
          next_fetch_time=T0 + sec(3600))),
    ("http_429_retry_after", dict(outcome="http_error", status_code=429, retry_after_s=15000.0), dict(retries=1),
     dict(status="error_retry", retries=2, next_fetch_time=T0 + sec(15000))),
    ("http_500_backoff", dict(outcome="http_error", status_code=500), dict(retries=2),
     dict(status="error_retry", retries=3, next_fetch_time=T0 + sec(14400))),
    ("backoff_capped", dict(outcome="error", error_class="timeout"), dict(status="error_retry", retries=3),
     dict(status="error_retry", retries=4, fetch_count=0, error_class="timeout",
          next_fetch_time=T0 + sec(20000))),
    ("retries_exhausted", dict(outcome="error", error_class="connect"), dict(status="error_retry", retries=4),
     dict(status="error_final", retries=5, fetch_interval_s=1000000.0, next_fetch_time=T0 + sec(1000000))),
    ("robots_unavailable", dict(outcome="robots_unavailable", error_class="robots_unavailable"), {},
     dict(status="error_retry", retries=1, fetch_count=0, last_fetch_time=None,
          next_fetch_time=NOW + sec(3600))),
    ("http_403", dict(outcome="http_error", status_code=403), {},
     dict(status="error_final", retries=1, fetch_count=1, next_fetch_time=T0 + sec(1000000))),
    ("robots_denied", dict(outcome="robots_denied"), dict(status="fetched", digest="sha1:Q", fetch_count=2),
     dict(status="robots_denied", retries=0, fetch_count=2, digest="sha1:Q", next_fetch_time=NOW + sec(200000),
          fetch_interval_s=200000.0)),
    ("deferred", dict(outcome="deferred", error_class="retry_after", host="slow.test"),
     dict(status="error_retry", retries=1, fetch_count=1, fetch_interval_s=86400.0, digest="sha1:Z"),
     dict(status="error_retry", retries=1, fetch_count=1, digest="sha1:Z", error_class="retry_after",
          next_fetch_time=T0 + sec(9 * H), fetch_interval_s=86400.0)),
    ("not_attempted", dict(outcome="not_attempted", error_class="task_budget"),
     dict(status="fetched", fetch_count=1, digest="sha1:W", next_fetch_time=T0 + sec(5 * H)),
     dict(status="fetched", fetch_count=1, retries=0, digest="sha1:W", next_fetch_time=T0 + sec(5 * H),
          updated_round=1, last_fetch_time=None)),
]


@pytest.fixture(scope="module")
def transitioned(spark):
    pages, olds = [], []
    for name, p, o, _ in TRANSITIONS:
        url = D + name
        pg = page(url, p["outcome"], **{k: v for k, v in p.items() if k != "outcome"})
        pages.append(pg)
        olds.append(old(url, host=pg["host"], **o))
    crawldb = frame(spark, olds, CRAWLDB)
    hosts = frame(spark, [dict(host="slow.test", next_allowed_at=T0 + sec(9 * H), consecutive_failures=0,
                               pages_fetched=0, bytes_fetched=0, requests=0, duplicate_pages=0,
                               new_content_pages=0, updated_round=0)], HOSTS)
    fetch_output = frame(spark, pages, FETCH_OUTPUT)
    prepared = T.prepare(fetch_output, frame(spark, [], FETCH_LIST), crawldb)
    nxt = HT.host_next(hosts, fetch_output, park_duration_s=60.0, now=NOW)
    return by_url(T.transition(prepared, nxt, CONF.schedule, round_no=1, now=NOW))


@pytest.mark.parametrize("name,expected", [(c[0], c[3]) for c in TRANSITIONS], ids=[c[0] for c in TRANSITIONS])
def test_transition_table(transitioned, name, expected):
    row = transitioned[D + name]
    assert row["updated_round"] == 1
    got = {k: row[k] for k in expected}
    assert got == expected


def test_every_outcome_is_covered():
    from crawl_udfs.rows import Outcome
    assert {c[1]["outcome"] for c in TRANSITIONS} == {o.value for o in Outcome}


# -- duplicates -----------------------------------------------------------------------------------
def test_exact_duplicates(spark):
    u = "http://d.test/"
    olds = [old(u + "a", status="fetched", digest="sha1:D1", first_seen=FIRST),
            old(u + "b", first_seen=FIRST + sec(10)),
            old(u + "c", first_seen=FIRST + sec(20)), old(u + "e", first_seen=FIRST + sec(30)),
            old(u + "g", status="gone", digest="sha1:D3", first_seen=FIRST - sec(99)),
            old(u + "f", first_seen=FIRST + sec(40)),
            old(u + "i", status="fetched", digest="sha1:D4", first_seen=FIRST - sec(99)),
            old(u + "h", first_seen=FIRST + sec(50)),
            old(u + "j", status="fetched", digest="sha1:D1", first_seen=FIRST + sec(60)),
            old(u + "k", first_seen=FIRST + sec(70)), old(u + "l", first_seen=FIRST + sec(70))]
    pages = [page(u + "b", "ok", status_code=200, digest="sha1:D1"),
             page(u + "c", "ok", status_code=200, digest="sha1:D2"),
             page(u + "e", "ok", status_code=200, digest="sha1:D2"),
             page(u + "f", "ok", status_code=200, digest="sha1:D3"),
             page(u + "i", "http_error", status_code=404),
             page(u + "h", "ok", status_code=200, digest="sha1:D4"),
             page(u + "j", "not_modified", status_code=304, digest="sha1:D1"),
             page(u + "k", "ok", status_code=200, digest="sha1:D5"),
             page(u + "l", "ok", status_code=200, digest="sha1:D5")]
    crawldb = frame(spark, olds, CRAWLDB)
    prepared = T.prepare(frame(spark, pages, FETCH_OUTPUT), frame(spark, [], FETCH_LIST), crawldb)
    nxt = HT.host_next(no_hosts(spark), frame(spark, [], FETCH_OUTPUT), park_duration_s=1.0, now=NOW)
    up = T.transition(prepared, nxt, CONF.schedule, round_no=1, now=NOW)
    got = by_url(X.mark_duplicates(up, crawldb, duplicate_interval_s=700000.0))
    fp = fingerprint
    kl = sorted([fp(u + "k"), fp(u + "l")])
    tie_dup = u + "k" if fp(u + "k") == kl[1] else u + "l"
    expected = {u + "b": ("duplicate", fp(u + "a")), u + "c": ("fetched", None), u + "e": ("duplicate", fp(u + "c")),
                u + "f": ("fetched", None), u + "i": ("gone", None), u + "h": ("fetched", None),
                u + "j": ("duplicate", fp(u + "a")),
                u + "k": ("duplicate", kl[0]) if tie_dup == u + "k" else ("fetched", None),
                u + "l": ("duplicate", kl[0]) if tie_dup == u + "l" else ("fetched", None)}
    assert {k: (r["status"], r["dup_of"]) for k, r in got.items()} == expected
    assert got[u + "b"]["fetch_interval_s"] == 700000.0
    assert got[u + "b"]["next_fetch_time"] == T0 + sec(700000)
    assert got[u + "c"]["next_fetch_time"] == T0 + sec(86400)
    assert got[u + "b"]["fetch_count"] == 1 and got[u + "b"]["digest"] == "sha1:D1"


# -- discovery ------------------------------------------------------------------------------------
def _discovery_inputs(spark):
    a, b = "http://a.test/", "http://b.test/"
    pages = [
        page(a + "p1", "ok", status_code=200, outlinks=[
            link(a + "x"), link(a + "y", nofollow=True), link("http://u:pw@B.test:8080/z"), link(a + "known"),
            link("http://evil.test/"), link(a + "canon", "canonical", nofollow=True)]),
        page(a + "p2", "ok", status_code=200, outlinks=[link(a + "x"), link(a + "two")]),
        page(a + "p5", "ok", status_code=200, outlinks=[link(a + "deep")]),
        page(b + "p3", "redirect", status_code=301, redirect_to="http://c.test:81/r",
             outlinks=[link("http://c.test:81/r", "redirect")]),
        page(a + "p4", "not_attempted", outlinks=[link(a + "never")]),
    ]
    flist = [listed(a + "p1", depth=0, score=1.0), listed(a + "p2", depth=1, score=8.0), listed(a + "p5", depth=2),
             listed(b + "p3", depth=1, score=0.3, hops=2), listed(a + "p4", depth=0, score=1.0)]
    crawldb = frame(spark, [old(a + "known"), old(a + "p1"), old(a + "p2"), old(b + "p3"), old(a + "p4"),
                           old(a + "p5")], CRAWLDB)
    prepared = T.prepare(frame(spark, pages, FETCH_OUTPUT), frame(spark, flist, FETCH_LIST), crawldb)
    return prepared, crawldb


def _discover(spark, conf):
    prepared, crawldb = _discovery_inputs(spark)
    return by_url(discover(prepared, crawldb, conf.scope, duplicates=None, follow_nofollow=conf.parse.follow_nofollow,
                           default_interval_s=conf.schedule.default_interval_s, round_no=4, now=NOW))


def test_discovery_depth_score_dedup(spark):
    """Every followed outlink the task returned is discovered: admission was the task's (test_admission.py),
    so a/deep (depth 3 > scope.max_depth) and evil.test (scope.deny_hosts) are not dropped again here."""
    got = _discover(spark, CONF)
    a = "http://a.test/"
    z = "http://u:pw@B.test:8080/z"
    assert set(got) == {a + "x", a + "two", z, a + "canon", "http://c.test:81/r", a + "deep", "http://evil.test/"}
    x = got[a + "x"]   # from p1 (depth 1, 1/4) and p2 (depth 2, 8/2): min depth, max score, source of min depth
    assert (x["depth"], x["score"], x["source_fp"]) == (1, 4.0, fingerprint(a + "p1"))
    assert got[z]["host"] == "b.test" and got[z]["score"] == 0.25      # the outlink's host; 4 followed links on p1
    assert (got[a + "canon"]["depth"], got[a + "canon"]["score"]) == (0, 1.0)
    assert got[a + "deep"]["depth"] == 3
    r = got["http://c.test:81/r"]
    assert (r["host"], r["depth"], r["redirect_hops"], r["score"]) == ("c.test", 1, 3, 0.3)
    assert all(v["status"] == "unfetched" and v["next_fetch_time"] == NOW and v["first_seen"] == NOW
               and v["discovered_round"] == 4 and v["updated_round"] == 4 and v["retries"] == 0
               and v["fetch_interval_s"] == 86400.0 for v in got.values())


def test_discovery_nofollow(spark):
    a = "http://a.test/"
    follow = _discover(spark, CONF.with_overrides("parse.follow_nofollow=true"))
    assert a + "y" in follow and follow[a + "x"]["score"] == 4.0   # p2's 8/2 still wins
    assert follow[a + "y"]["score"] == pytest.approx(1 / 5)          # 5 followed links on p1 now
    assert a + "y" not in _discover(spark, CONF)


def test_the_task_and_update_give_a_followed_link_the_same_depth_and_score(spark):
    """One rule (crawl_udfs.admission.link_depth / link_score): the depth and score the fetch task gives a
    link it follows in the round (host_runs.TaskHosts.follow) are those update gives the same link as a
    new URL (discover), and update's same-document targets get the plain rule's, on a table of pages
    (depth, score, links of every kind, nofollow or not), nofollow obeyed and not."""
    from crawl_udfs.admission import SAME_DOC_KINDS, link_depth, link_score, shares_score
    from crawl_udfs.host_runs import TaskHosts
    from crawl_udfs.known_urls import KnownUrls
    from crawl_udfs.rows import FetchItem, FetchResult, HostState, Outlink
    from crawl_udfs.scheduler import PolitenessScheduler
    a = "http://a.test/"
    table = [  # (page, depth, score, its links as (kind, nofollow))
        ("p0", 0, 1.0, [("a", False), ("a", True), ("frame", False), ("iframe", False), ("canonical", True)]),
        ("p1", 2, 0.3, [("a", False)]),
        ("p2", 1, 8.0, [("area", False), ("a", True), ("redirect", False), ("a", False), ("frame", True)]),
        ("p3", 4, 0.0, [("a", False), ("canonical", False)]),
        ("p4", 3, 0.7, [("a", True), ("canonical", False)])]
    pages = [page(a + name, "ok", status_code=200, outlinks=[link(f"{a}{name}/{i}", k, nf) for i, (k, nf) in
                                                              enumerate(links)]) for name, _, _, links in table]
    flist = [listed(a + name, depth=d, score=sc) for name, d, sc, _ in table]
    prepared = T.prepare(frame(spark, pages, FETCH_OUTPUT), frame(spark, flist, FETCH_LIST), frame(spark, [], CRAWLDB))
    for follow_nofollow in (False, True):
        conf = CONF.with_overrides(f"parse.follow_nofollow={str(follow_nofollow).lower()}", "scope.score_decay=0.7")
        got = {u: (r["depth"], r["score"]) for u, r in by_url(discover(
            prepared, frame(spark, [], CRAWLDB), conf.scope, duplicates=None, follow_nofollow=follow_nofollow,
            default_interval_s=1.0, round_no=1, now=NOW)).items()}
        task = TaskHosts(conf, PolitenessScheduler(conf.politeness, clock=lambda: 0.0))
        items = [FetchItem(url=a + name, url_fp=fingerprint(a + name), host="a.test", depth=d, score=sc)
                 for name, d, sc, _ in table]
        task.admit(items, {"a.test": HostState("a.test", follow_cap=1000, known=KnownUrls([]))}, 0.0, False)
        for item, p in zip(items, pages):
            task.follow(item, FetchResult(item.url, item.url_fp, "a.test", "ok",
                                          outlinks=[Outlink(*o) for o in p["outlinks"]]), now=0.0)
        in_round = {i.url: (i.depth, i.score) for i in task.followed}
        shared = {u for u, _, kind, nf, *_ in (o for p in pages for o in p["outlinks"])
                  if shares_score(kind, nf, follow_nofollow=follow_nofollow)}
        assert set(in_round) == shared and len(shared) >= 7, follow_nofollow
        assert {u: got[u] for u in in_round} == in_round, follow_nofollow
        for (name, d, sc, links), p in zip(table, pages):  # same-document targets: the page's depth and score
            n = sum(shares_score(k, nf, follow_nofollow=follow_nofollow) for k, nf in links)
            for (u, _, kind, *_) in p["outlinks"]:
                if kind in SAME_DOC_KINDS:
                    assert got[u] == (link_depth(d, True), link_score(sc, True, n, 0.7)) == (d, sc), u


def test_a_duplicates_links_enter_with_a_lower_score(spark):
    """A page that update marked a duplicate this round (exact or near: ``status``; test_plan_hosts_counters_and_budget
    runs it through the plan) passes scope.duplicate_score_factor of its score to its links; its canonical
    target keeps the whole score; a URL also linked from a page that is no duplicate keeps the larger score;
    a deferred row's old duplicate status is no decision of this round."""
    a = "http://a.test/"
    pages = [page(a + "dup", "ok", status_code=200, outlinks=[link(a + "x"), link(a + "shared"),
                                                               link(a + "canon", "canonical")]),
             page(a + "other", "ok", status_code=200, outlinks=[link(a + "shared")])]
    flist = [listed(a + "dup", score=1.0), listed(a + "other", score=0.4)]
    prepared = T.prepare(frame(spark, pages, FETCH_OUTPUT), frame(spark, flist, FETCH_LIST), None)
    crawldb = frame(spark, [], CRAWLDB)
    up = spark.createDataFrame([(fingerprint(a + "dup"), "duplicate", "ok"), (fingerprint(a + "other"), "duplicate",
                                T.KEEP)], f"url_fp string, status string, {T.CAT} string")
    conf = CONF.with_overrides("scope.score_decay=0.8", "scope.duplicate_score_factor=0.25")
    got = {u: r["score"] for u, r in by_url(discover(
        prepared, crawldb, conf.scope, duplicates=up, follow_nofollow=False, default_interval_s=1.0, round_no=4,
        now=NOW)).items()}
    assert got == pytest.approx({a + "x": 1.0 * 0.25 * 0.8 / 2, a + "shared": 0.4 * 0.8, a + "canon": 1.0})


def test_links_and_fetch_log(spark):
    prepared, crawldb = _discovery_inputs(spark)
    links = T.link_rows(prepared, round_no=4).collect()
    assert len(links) == 10   # p1: 6, p2: 2, p3: 1, p5: 1; p4 was not attempted
    p1 = {(r.dst_url, r.kind, r.nofollow) for r in links if r.src_fp == fingerprint("http://a.test/p1")}
    assert ("http://a.test/y", "a", True) in p1 and ("http://a.test/canon", "canonical", True) in p1
    assert all(r["round"] == 4 for r in links)
    nxt = HT.host_next(no_hosts(spark), frame(spark, [], FETCH_OUTPUT), park_duration_s=1.0, now=NOW)
    up = T.transition(prepared, nxt, CONF.schedule, round_no=4, now=NOW)
    log = {r.url: r for r in T.fetch_log_rows(prepared, up, round_no=4).collect()}
    assert set(log) == {"http://a.test/p1", "http://a.test/p2", "http://b.test/p3", "http://a.test/p5"}
    assert log["http://a.test/p1"].n_outlinks == 6 and log["http://b.test/p3"].redirect_to == "http://c.test:81/r"


# -- hosts counters and budget (the whole plan, on small DataFrames) ----------------------------------
def test_plan_hosts_counters_and_budget(spark):
    from jobs import update
    a, b = "http://a.test/", "http://b.test/"
    olds = [old(a + "ok"), old(a + "dup"), old(a + "nm", status="fetched", digest="sha1:NM"),
            old(a + "404"), old(a + "err"), old(a + "def"), old(a + "orig", status="fetched", digest="sha1:O"),
            old(a + "left1"), old(a + "left2", status="error_retry"), old(b + "left"), old(b + "ok")]
    pages = [page(a + "ok", "ok", status_code=200, digest="sha1:NEW", wire_bytes=100,
                  outlinks=[link(a + "fresh"), link(b + "fresh"), link("http://c.test/fresh")]),
             page(a + "dup", "ok", status_code=200, digest="sha1:O", wire_bytes=50, outlinks=[link(b + "fromdup")]),
             page(a + "nm", "not_modified", status_code=304, digest="sha1:NM", wire_bytes=0),
             page(a + "404", "http_error", status_code=404, wire_bytes=7),
             page(a + "err", "error", error_class="timeout"),
             page(a + "def", "deferred", error_class="parked"),
             page(b + "ok", "ok", status_code=200, digest="sha1:B", wire_bytes=10)]
    host_rows = [dict(round=1, partition=0, kind="host", host="a.test", requests=5, robots_status=200,
                      robots_fetched_at=T0, robots_expires_at=T0 + sec(86400), crawl_delay_s=2.0,
                      sitemaps=["http://a.test/sm.xml"], ip="127.10.0.1", next_allowed_at=T0 + sec(60),
                      consecutive_failures=1, parked=True, park_reason="failures", robots_body=b"User-agent: *",
                      delay_s=2.5),
                 dict(round=1, partition=1, kind="host", host="b.test", requests=1, parked=False),
                 dict(round=1, partition=1, kind="host", host="d.test", requests=0, parked=False, delay_s=1.0)]
    hosts = [dict(host="a.test", consecutive_failures=0, pages_fetched=8, bytes_fetched=1000, requests=20,
                  duplicate_pages=1, new_content_pages=3, updated_round=0, robots_status=404, resolve_error="dns",
                  delay_s=9.0),
             dict(host="b.test", ip="127.10.0.2", consecutive_failures=0, pages_fetched=0, bytes_fetched=0,
                  requests=0, duplicate_pages=0, new_content_pages=0, updated_round=0, robots_status=200,
                  robots_fetched_at=FIRST, parked_until=FIRST, park_reason="failures", delay_s=1.5),
             dict(host="d.test", consecutive_failures=0, pages_fetched=0, bytes_fetched=0, requests=0,
                  duplicate_pages=0, new_content_pages=0, updated_round=0, resolve_error="ssrf_blocked"),
             dict(host="c.test", consecutive_failures=0, pages_fetched=40, bytes_fetched=0, requests=40,
                  duplicate_pages=0, new_content_pages=0, updated_round=0)]
    p = update.plan(frame(spark, olds, CRAWLDB), frame(spark, hosts, HOSTS),
                    frame(spark, pages + host_rows, FETCH_OUTPUT), frame(spark, [], FETCH_LIST), CONF,
                    round_no=1, now=NOW, keep=lambda d: d.localCheckpoint())
    h = {r.host: r.asDict() for r in p.hosts.collect()}
    ha, hb = h["a.test"], h["b.test"]
    assert (ha["pages_fetched"], ha["bytes_fetched"], ha["requests"]) == (12, 1157, 25)
    assert (ha["duplicate_pages"], ha["new_content_pages"]) == (2, 4)
    assert ha["parked_until"] == NOW + sec(7200) and ha["park_reason"] == "failures"
    assert (ha["robots_status"], ha["crawl_delay_s"], ha["sitemaps"], ha["ip"]) == (200, 2.0, ["http://a.test/sm.xml"],
                                                                                   "127.10.0.1")
    assert ha["robots_body"] == b"User-agent: *" and ha["consecutive_failures"] == 1 and ha["updated_round"] == 1
    # b.test: no robots fetched this round -> cached robots kept; not parked -> old parked_until kept
    assert (hb["pages_fetched"], hb["requests"], hb["robots_status"], hb["robots_fetched_at"]) == (1, 1, 200, FIRST)
    assert (hb["parked_until"], hb["ip"]) == (FIRST, "127.10.0.2")
    # the effective delay is the task's, else the old row's; resolve_error only while there is no address
    assert (ha["delay_s"], hb["delay_s"], h["d.test"]["delay_s"]) == (2.5, 1.5, 1.0)
    assert (ha["resolve_error"], hb["resolve_error"], h["d.test"]["resolve_error"]) == (None, None, "ssrf_blocked")
    rows = p.crawldb_source.collect()
    src = {r.url: (r["_kind"], r.status) for r in rows}
    # a.test reached 12 = budget: its unfetched URLs (old, deferred and new) are budget_exhausted
    assert src[a + "left1"] == ("budget", "budget_exhausted")
    assert src[a + "def"] == ("update", "budget_exhausted")
    assert src[a + "fresh"] == ("new", "budget_exhausted")
    assert src[b + "fresh"] == ("new", "unfetched")
    assert src["http://c.test/fresh"] == ("new", "budget_exhausted")   # host at its budget since earlier rounds
    assert set(h) == {"a.test", "b.test", "d.test"}                      # c.test's row is not rewritten
    assert a + "left2" not in src and b + "left" not in src     # not unfetched / host under budget
    assert src[a + "dup"] == ("update", "duplicate") and src[a + "ok"] == ("update", "fetched")
    assert len(src) == p.crawldb_source.count()                  # one row per url_fp
    # the duplicate's link: its score (1.0) x scope.duplicate_score_factor (the plan passes the marked rows)
    score = {r.url: r.score for r in rows}
    assert score[b + "fromdup"] == 1.0 * CONF.scope.duplicate_score_factor == 0.5
    assert score[b + "fresh"] == pytest.approx(1 / 3)


def test_byte_budget_marks_with_the_reason(spark):
    """A host over budget.max_bytes_per_host (pages left) gets its unfetched URLs budget_exhausted with
    error_class budget:bytes and hosts.budget_reason bytes; a page-budget host says pages."""
    from jobs import update
    conf = config.load(overrides=["budget.max_pages_per_host=10", "budget.max_bytes_per_host=1000"])
    big, many, calm = "http://big.test/", "http://many.test/", "http://calm.test/"
    olds = [old(big + "p"), old(big + "left"), old(many + "p"), old(many + "left"), old(calm + "p"),
            old(calm + "left")]
    pages = [page(big + "p", "ok", status_code=200, digest="sha1:BIG", wire_bytes=900, outlinks=[link(big + "new")]),
             page(many + "p", "ok", status_code=200, digest="sha1:MANY", wire_bytes=10),
             page(calm + "p", "ok", status_code=200, digest="sha1:CALM", wire_bytes=10)]
    hosts = [dict(host=h, consecutive_failures=0, pages_fetched=n, bytes_fetched=b, requests=n, duplicate_pages=0,
                  new_content_pages=0, updated_round=0)
             for h, n, b in (("big.test", 1, 200), ("many.test", 9, 100), ("calm.test", 1, 100))]
    p = update.plan(frame(spark, olds, CRAWLDB), frame(spark, hosts, HOSTS), frame(spark, pages, FETCH_OUTPUT),
                    frame(spark, [], FETCH_LIST), conf, round_no=1, now=NOW, keep=lambda d: d.localCheckpoint())
    h = {r.host: r for r in p.hosts.collect()}
    assert (h["big.test"].bytes_fetched, h["big.test"].budget_reason) == (1100, "bytes")
    assert (h["many.test"].pages_fetched, h["many.test"].budget_reason) == (10, "pages")
    assert h["calm.test"].budget_reason is None
    src = {r.url: (r["_kind"], r.status, r.error_class) for r in p.crawldb_source.collect()}
    assert src[big + "left"] == ("budget", "budget_exhausted", "budget:bytes")
    assert src[big + "new"] == ("new", "budget_exhausted", "budget:bytes")
    assert src[many + "left"] == ("budget", "budget_exhausted", "budget:pages")
    assert calm + "left" not in src and src[big + "p"][1] == "fetched"


def test_a_url_followed_in_round_is_inserted_as_if_generated_and_fetched(spark):
    """An in_round page row becomes the crawl-DB row a generated URL with its outcome would get (depth,
    score, first_seen, source, fetch_log, links), and wins over the same URL as its parent's new outlink."""
    from jobs import update
    par, kid, grand = "http://f.test/", "http://f.test/kid", "http://f.test/kid/grand"
    kid_score = 0.8 * 0.5 / 2  # parent score x score_decay / the parent's followed links
    pages = [page(par, "ok", status_code=200, digest="sha1:P", outlinks=[link(kid), link(par + "other")]),
             page(kid, "ok", status_code=200, digest="sha1:K", outlinks=[link(grand)], in_round=True, depth=1,
                  score=kid_score, source_fp=fingerprint(par))]
    conf = config.load(overrides=["scope.score_decay=0.5"])
    p = update.plan(frame(spark, [old(par, score=0.8)], CRAWLDB), no_hosts(spark), frame(spark, pages, FETCH_OUTPUT),
                    frame(spark, [listed(par, score=0.8)], FETCH_LIST), conf, round_no=3, now=NOW,
                    keep=lambda d: d.localCheckpoint())
    observed = Counters(NOW)
    src = by_url(observed("crawldb_source", p.crawldb_source))
    # the MERGE inserts kid (followed: kind update, absent from the crawl DB), grand and other (new): all
    # three are new URLs; only the parent's row existed
    got = observed.seen["crawldb_source"].get
    assert (got["new_urls"], got["updated_urls"]) == (3, 1), got
    k = src[kid]
    assert (k["_kind"], k["status"], k["fetch_count"], k["digest"]) == ("update", "fetched", 1, "sha1:K")
    assert (k["depth"], k["score"], k["source_fp"]) == (1, kid_score, fingerprint(par))
    assert (k["first_seen"], k["discovered_round"], k["last_fetch_time"]) == (NOW, 3, T0)
    # the same score and depth update would give it as a new outlink (the sibling shows it)
    assert (src[par + "other"]["score"], src[par + "other"]["depth"]) == (kid_score, 1)
    # its own links inherit from it as from any fetched page
    g = src[grand]
    assert (g["_kind"], g["status"], g["depth"], g["score"], g["source_fp"]) == (
        "new", "unfetched", 2, kid_score * 0.5, fingerprint(kid))
    assert {r.url_fp for r in p.fetch_log.collect()} == {fingerprint(par), fingerprint(kid)}
    assert {(r.src_fp, r.dst_fp) for r in p.links.collect()} >= {(fingerprint(kid), fingerprint(grand))}


# -- trap detection --------------------------------------------------------------------------------------
SIG_SCHEMA = "host string, url_fp long, status string, dup_of long, _first boolean"
DUP, OK = "duplicate", "fetched"


def test_trap_signals_count_copies_of_the_hosts_own_pages(spark):
    """trap_signals reads the duplicate steps' result (status, dup_of) and their lookup (``near``: url_fp ->
    original); a copy counts against its host when its original is the host's, or when other first copies of
    the round copy the same page of another host (all but one); a mirror's copies count for nothing."""
    rows = [  # a.test copies itself: stored page 100, and its own first copy 4
        ("a.test", 1, DUP, 100, True),     # exact copy of its stored page: exact
        ("a.test", 2, DUP, 100, True),     # near copy of it (in ``near``): near
        ("a.test", 3, DUP, 4, True),       # near copy of a first copy of the same round: near
        ("a.test", 4, OK, None, True),     # new content
        ("a.test", 5, DUP, 102, True),     # exact copy of a page of c.test, alone: no evidence
        ("a.test", 6, DUP, 100, False),    # a re-fetch: not judged at all
        # m.test mirrors c.test: each page copies a different page there
        ("m.test", 7, DUP, 102, True), ("m.test", 8, DUP, 103, True), ("m.test", 9, OK, None, True),
        # f.test repeats one page of c.test over and over (a trap on a mirror): all copies but one count
        ("f.test", 10, DUP, 102, True), ("f.test", 11, DUP, 102, True), ("f.test", 12, DUP, 102, True),
        ("f.test", 13, DUP, 102, True),    # an exact one among them
        ("f.test", 14, DUP, 999, True),    # an original found nowhere: taken as another host's
    ]
    updated = spark.createDataFrame(rows, SIG_SCHEMA)
    near = spark.createDataFrame([(2, 100), (3, 4), (7, 102), (8, 103), (10, 102), (11, 102), (12, 102), (14, 999)],
                                 "url_fp long, _near_of long")
    crawldb = spark.createDataFrame([(100, "a.test"), (102, "c.test"), (103, "c.test"), (6, "a.test")],
                                    "url_fp long, host string")
    got = {r.host: (r.t_pages, r.t_exact, r.t_near) for r in HT.trap_signals(updated, near, crawldb).collect()}
    assert got == {"a.test": (5, 1, 2), "m.test": (3, 0, 0), "f.test": (5, 1, 2)}
    # dedup.near_duplicates off: no lookup, the round has exact duplicates only, judged as such
    exact_only = updated.where("url_fp IN (1, 4, 5, 9, 13)")
    got = {r.host: (r.t_pages, r.t_exact, r.t_near) for r in HT.trap_signals(exact_only, None, crawldb).collect()}
    assert got == {"a.test": (3, 1, 0), "m.test": (1, 0, 0), "f.test": (1, 0, 0)}


TRAP = config.load(overrides=["trap.min_pages=10", "trap.max_new_share=0.25", "trap.throttle_after_rounds=2",
                              "trap.park_after_rounds=3", "trap.park_duration_s=1000.0"]).trap
JUDGE_SCHEMA = ("host string, pages_fetched long, t_pages long, t_exact long, t_near long, trap_strikes int, "
                "trap_new_share double, trap_streak_pages long, trap_streak_exact long, trap_streak_near long, "
                "round_cap int, parked_until timestamp, park_reason string")


# TRAP: max_new_share 0.25, park_confidence 0.99 (the default): a streak proves a trap from 17 copies with none new
@pytest.mark.parametrize("name, row, want", [
    ("too_few_pages", ("h", 9, 8, 0, 8, None, None, None, None, None, None, None, None),
     dict(trap_strikes=None, round_cap=None, parked_until=None)),
    ("no_first_copy", ("h", 50, 0, 0, 0, 1, 0.1, 5, 0, 5, None, None, None),
     dict(trap_strikes=1, trap_streak_pages=5, round_cap=None)),
    ("first_strike", ("h", 50, 8, 2, 5, None, None, None, None, None, None, None, None),
     dict(trap_strikes=1, trap_new_share=0.125, trap_streak_pages=8, trap_streak_near=5, round_cap=None,
          parked_until=None)),
    ("at_the_threshold_no_strike", ("h", 50, 8, 0, 6, 1, 0.0, 4, 0, 4, None, None, None),
     dict(trap_strikes=0, trap_new_share=0.25, trap_streak_pages=0, round_cap=None)),
    ("throttle_halves_the_base_cap", ("h", 50, 8, 0, 8, 1, 0.0, 8, 0, 8, None, None, None),  # 16 copies: bound 25.3 %
     dict(trap_strikes=2, round_cap=8, parked_until=None)),
    ("park_after_rounds_on_weak_evidence", ("h", 50, 4, 1, 3, 2, 0.0, 16, 0, 15, 8, None, None),
     dict(trap_strikes=3, round_cap=4, parked_until=NOW + sec(1000),
          park_reason="trap: 95% duplicates (1 exact, 18 near-duplicates of 20 new pages) over 3 rounds; "
                      "new-content share at most 28.5% at 99% confidence")),
    ("hundreds_of_copies_park_at_the_first_strike", ("h", 500, 300, 10, 288, None, None, None, None, None, None,
                                                     None, None),
     dict(trap_strikes=1, round_cap=None, parked_until=NOW + sec(1000),
          park_reason="trap: 99% duplicates (10 exact, 288 near-duplicates of 300 new pages) over 1 round; "
                      "new-content share at most 2.9% at 99% confidence")),
    ("five_copies_never_park_at_once", ("h", 50, 5, 0, 5, None, None, None, None, None, None, None, None),
     dict(trap_strikes=1, trap_new_share=0.0, round_cap=None, parked_until=None, park_reason=None)),
    ("evidence_adds_up_over_the_streak", ("h", 50, 8, 0, 8, 1, 0.0, 10, 2, 8, None, None, None),  # 18: 23.1 %
     dict(trap_strikes=2, round_cap=8, parked_until=NOW + sec(1000), trap_streak_pages=18)),
    ("recovery_lifts_the_throttle", ("h", 50, 4, 0, 0, 2, 0.0, 16, 0, 16, 4, None, None),
     dict(trap_strikes=0, round_cap=None, trap_new_share=1.0, parked_until=None)),
])
def test_judge_traps(spark, name, row, want):
    hosts_new = spark.createDataFrame([row], JUDGE_SCHEMA)
    got = HT.judge_traps(hosts_new, TRAP, base_cap=16, now=NOW).collect()[0].asDict()
    assert {k: got[k] for k in want} == want


def _staged_in(spark, tmp_path):
    """A ``keep`` for update.plan that cuts the lineage as ``update.run`` does (Parquet written, read back):
    with the near-duplicate steps a persisted lineage takes Spark minutes to analyse."""
    from jobs.update import _staged
    n = iter(range(1000))
    return lambda df: _staged(spark, df, str(tmp_path / f"part-{next(n)}"))


def test_plan_parks_a_self_copying_host_and_spares_an_ordinary_one_and_its_mirror(spark, tmp_path):
    """Through update.plan, near-duplicates on: the lookup that marks the near-duplicates is the one trap
    detection reads. First copies with one main text park a host on its last strike; a host of distinct
    pages is untouched, and so is its mirror, fetched earlier: calm's pages become duplicates of the
    mirror's, yet neither host copies itself, so neither is a trap (fetch order decides nothing)."""
    from crawl_udfs import near_dup, simhash
    from jobs import update
    from schemas.tables import NEAR_DUP_INDEX
    from tests.testweb.sites import prose
    conf = config.load(overrides=["trap.min_pages=5", "trap.max_new_share=0.5", "trap.throttle_after_rounds=1",
                                  "trap.park_after_rounds=2", "trap.park_duration_s=5000.0",
                                  "generate.max_urls_per_host=8", "budget.max_pages_per_host=100",
                                  "dedup.near_duplicates=true"])
    n, perm = conf.simhash.shingle_words, conf.dedup.minhash_permutations

    def ok(url: str, text: str, **kw) -> dict:
        sig = dict(simhash=simhash.simhash(text, n), minhash=near_dup.minhash(text, n, perm),
                   words=len(simhash.words(text)))
        return page(url, "ok", status_code=200, digest=f"sha1:{url}", content_type="text/html", wire_bytes=10,
                    **sig, **kw)
    same = prose(random.Random("facet"), 80)
    texts = [prose(random.Random(f"calm/{i}"), 80) for i in range(6)]
    pages = [ok(f"http://trap.test/p{i}", same) for i in range(6)]
    pages += [ok(f"http://calm.test/p{i}", texts[i]) for i in range(6)]
    pages += [ok(f"http://mirror.test/m{i}", texts[i], fetch_time=T0 - sec(10)) for i in range(6)]
    olds = [old(p["url"]) for p in pages]
    hosts = [dict(host=h, consecutive_failures=0, pages_fetched=4, bytes_fetched=40, requests=4, duplicate_pages=0,
                  new_content_pages=4, updated_round=0, trap_strikes=1, trap_streak_pages=4, trap_streak_exact=0,
                  trap_streak_near=3, round_cap=4) for h in ("trap.test", "calm.test", "mirror.test")]
    p = update.plan(frame(spark, olds, CRAWLDB), frame(spark, hosts, HOSTS), frame(spark, pages, FETCH_OUTPUT),
                    frame(spark, [], FETCH_LIST), conf, round_no=2, now=NOW,
                    near_dup_index=frame(spark, [], NEAR_DUP_INDEX), keep=_staged_in(spark, tmp_path))
    h = {r.host: r.asDict() for r in p.hosts.collect()}
    t = h["trap.test"]
    assert (t["trap_strikes"], t["round_cap"], t["near_duplicate_pages"]) == (2, 2, 5)
    assert t["parked_until"] == NOW + sec(5000)
    assert t["park_reason"] == ("trap: 80% duplicates (0 exact, 8 near-duplicates of 10 new pages) over 2 rounds; "
                                "new-content share at most 56.5% at 99% confidence")
    calm_dups = {r.url for r in p.updated.where("status = 'duplicate'").collect() if "calm" in r.url}
    assert len(calm_dups) == 6  # the mirror was fetched first: calm's pages are its copies
    for name in ("calm.test", "mirror.test"):
        c = h[name]
        assert (c["trap_strikes"], c["round_cap"], c["parked_until"], c["park_reason"]) == (0, None, None, None)
        assert c["trap_new_share"] == 1.0 and c["near_duplicate_pages"] == 0


# -- the job on Delta ---------------------------------------------------------------------------------
TABLE_NAMES = ("crawldb", "hosts", "fetch_log", "links")
#: Spark jobs of update.run on :func:`_seed`'s round, ledger writes included (measured 2026-12-01:
#: 113; 174 with adaptive execution on during update; 2026-12-03: 136 with near-duplicates on by default,
#: the originals' copies re-pointed and duplicate URL patterns learnt; session 13: 96, the crawl DB read
#: once for the round's URLs and hosts, no re-pointing or budget plans when none is needed).
JOBS_UPDATE_MAX = 100


def _seed(spark, conf, n: int = 1):
    """A crawl DB of 6 URLs, round n fetched: ok (2 outlinks), duplicate, 404, 503, deferred, not fetched."""
    from jobs import common, ledger
    common.ensure_tables(spark, conf)
    u = "http://s.test/"
    olds = [old(u), old(u + "a", status="fetched", digest="sha1:A", fetch_count=1),
            old(u + "b"), old(u + "c"), old(u + "d"), old(u + "e"), old(u + "later")]
    pages = [page(u, "ok", n, status_code=200, digest="sha1:ROOT", wire_bytes=10,
                  outlinks=[link(u + "new1"), link(u + "a"), link("http://t.test/new2")]),
             page(u + "a", "ok", n, status_code=200, digest="sha1:A2", wire_bytes=10),
             page(u + "b", "ok", n, status_code=200, digest="sha1:A2", wire_bytes=10),
             page(u + "c", "http_error", n, status_code=404),
             page(u + "d", "http_error", n, status_code=503),
             page(u + "e", "deferred", n, error_class="parked")]
    hosts = [dict(round=n, partition=0, kind="host", host="s.test", requests=6, ip="127.10.0.9",
                  next_allowed_at=T0 + sec(5), consecutive_failures=1, parked=False)]
    flist = [listed(p["url"], n) for p in pages]
    common.conform(frame(spark, olds, CRAWLDB), common.TABLES["crawldb"]).write.format("delta").mode("append") \
        .save(common.table_path(conf, "crawldb"))
    frame(spark, pages + hosts, FETCH_OUTPUT).write.format("delta").mode("append") \
        .save(common.table_path(conf, "fetch_output"))
    frame(spark, flist, FETCH_LIST).write.format("delta").mode("append").save(common.table_path(conf, "fetch_list"))
    ledger.set_state(spark, conf, n, "generated", n_partitions=1)


def _content(spark, conf) -> dict:
    from jobs import common
    return {t: sorted((tuple(r) for r in common.read(spark, conf, t).collect()), key=repr) for t in TABLE_NAMES}


@pytest.fixture(scope="module")
def updated_a(spark, tmp_path_factory):
    """Root A: the ledger refusals, then one update of round 1 with the default ``now``."""
    from jobs import ledger, update
    conf = config.load(overrides=[f'storage.root="{tmp_path_factory.mktemp("upd_a") / "crawl"}"',
                                  "spark.shuffle_partitions=4", "budget.max_pages_per_host=100"])
    _seed(spark, conf)
    refusals = []
    for state, kw in (("generated", {}), ("fetching", {"round_no": 1}), (None, {"round_no": 7})):
        if state:
            ledger.set_state(spark, conf, 1, state)
        with pytest.raises(ConfigError) as e:
            update.run(spark, conf, **kw)
        refusals.append(str(e.value))
    ledger.set_state(spark, conf, 1, "fetched")
    fetched_at = ledger.get_round(spark, conf, 1)["fetched_at"]
    return conf, update.run(spark, conf), fetched_at, refusals


def test_refuses_unfetched_rounds(updated_a):
    refusals = updated_a[3]
    assert "round 1 is generated, not fetched" in refusals[0]
    assert "round 1 is fetching, not fetched" in refusals[1]
    assert "round 7 is not in the round ledger" in refusals[2]
    assert all("\n" not in r for r in refusals)


def test_update_merges_the_round(spark, updated_a):
    from jobs import common, ledger
    conf, result, fetched_at, _ = updated_a
    assert result["skipped"] is False
    assert (result["updated_urls"], result["new_urls"], result["duplicates"]) == (6, 2, 1)
    assert result["frontier_size"] == 9 and result["status_gone"] == 1 and result["links"] == 3
    assert result["fetch_log_rows"] == 5 and result["hosts_updated"] == 1
    db = {r.url: r for r in common.read(spark, conf, "crawldb").collect()}
    u = "http://s.test/"
    assert db[u].status == "fetched" and db[u + "a"].status == "fetched" and db[u + "a"].change_count == 1
    assert db[u + "b"].status == "duplicate" and db[u + "b"].dup_of == fingerprint(u + "a")
    assert (db[u + "c"].status, db[u + "d"].status, db[u + "e"].status) == ("gone", "error_retry", "unfetched")
    assert db[u + "e"].next_fetch_time == T0 + sec(5) and db[u + "later"].updated_round == 0
    assert db[u + "new1"].status == "unfetched" and db[u + "new1"].depth == 1
    assert db[u + "new1"].first_seen == fetched_at == db[u + "new1"].next_fetch_time   # default now: fetched_at
    assert db["http://t.test/new2"].host == "t.test" and db[u + "a"].depth == 0   # known URL not touched by discovery
    assert all(r.updated_round == 1 for k, r in db.items() if k != u + "later")
    host = common.read(spark, conf, "hosts").collect()
    assert [(h.host, h.pages_fetched, h.requests, h.duplicate_pages, h.ip) for h in host] == [
        ("s.test", 5, 6, 1, "127.10.0.9")]
    assert sorted(r.url for r in common.read(spark, conf, "fetch_log").collect()) == sorted(
        [u, u + "a", u + "b", u + "c", u + "d"])
    r = ledger.get_round(spark, conf, 1)
    assert r["state"] == "updated" and r["counts"]["new_urls"] == 2 and r["seconds"]["update"] > 0


def test_second_run_and_rerun_after_ledger_reset_change_nothing(spark, updated_a):
    from jobs import ledger, update
    conf = updated_a[0]
    before = _content(spark, conf)
    assert update.run(spark, conf)["skipped"] is True
    assert _content(spark, conf) == before
    # a crash after every write but before the ledger: the rerun changes no table (guards, txn versions)
    counts = ledger.get_round(spark, conf, 1)["counts"]
    ledger.set_state(spark, conf, 1, "fetched")
    again = update.run(spark, conf, round_no=1, now=updated_a[2])
    assert _content(spark, conf) == before
    assert {k: again[k] for k in counts} == counts


def test_crash_after_crawldb_merge_resumes_to_the_same_tables(spark, updated_a, tmp_path, monkeypatch):
    from jobs import ledger, update, update_commit
    conf = config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"', "spark.shuffle_partitions=4",
                                  "budget.max_pages_per_host=100"])
    _seed(spark, conf)
    ledger.set_state(spark, conf, 1, "fetched")
    now = updated_a[2]

    def boom(*a, **k):
        raise RuntimeError("crash after the crawl-DB write, before the hosts MERGE")
    with monkeypatch.context() as m:
        m.setattr(update_commit, "merge_hosts", boom)
        with pytest.raises(RuntimeError):
            update.run(spark, conf, now=now)
    assert ledger.get_round(spark, conf, 1)["state"] == "fetched"
    update.run(spark, conf, now=now)
    assert _content(spark, conf) == _content(spark, updated_a[0])
    got, want = (ledger.get_round(spark, c, 1)["counts"] for c in (conf, updated_a[0]))
    assert got == want


def test_a_url_inserted_after_the_pinned_version_stays_one_row(spark, tmp_path, monkeypatch):
    """Writers between the version update decides from and its write (``inject``, ``rank`` between a crash and
    the rerun): what they left in the columns the round does not set is kept, as the MERGE kept it; a URL
    they added and the round discovers as new stays one row, theirs; every other URL is one row too."""
    from jobs import common, ledger, update, update_commit
    conf = config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"', "spark.shuffle_partitions=4"])
    _seed(spark, conf)
    ledger.set_state(spark, conf, 1, "fetched")
    late, ranked = "http://s.test/new1", "http://s.test/a"
    real = update_commit.replace_crawldb

    def after_other_writers(*a, **kw):
        path = common.table_path(conf, "crawldb")
        common.conform(frame(spark, [old(late, score=0.123)], CRAWLDB), common.TABLES["crawldb"]) \
            .write.format("delta").mode("append").save(path)
        common.table(spark, conf, "crawldb").update(f"url_fp = {fingerprint(ranked)}", {"importance": "0.42D"})
        return real(*a, **kw)
    monkeypatch.setattr(update_commit, "replace_crawldb", after_other_writers)
    update.run(spark, conf)
    db = common.read(spark, conf, "crawldb")
    assert db.count() == db.select("url_fp").distinct().count() == 9   # 7 seeded + new1 + t.test/new2
    row = db.where(f"url_fp = {fingerprint(late)}").collect()
    assert len(row) == 1 and (row[0].score, row[0].discovered_round) == (0.123, 0)   # the inject's row
    a = db.where(f"url_fp = {fingerprint(ranked)}").collect()[0]
    assert (a.importance, a.updated_round, a.fetch_count) == (0.42, 1, 2)  # the round's fetch, rank's importance
    assert fingerprint(late) in _replaced_keys(spark, conf, 1)  # the crawl DB moved: new URLs' keys too


def _replaced_keys(spark, conf, n: int) -> set[int]:
    """The keys of the ``replaceWhere`` predicate of round ``n``'s crawl-DB write, as Delta recorded it."""
    import re

    from delta.tables import DeltaTable

    from jobs import common
    hist = [h for h in DeltaTable.forPath(spark, common.table_path(conf, "crawldb")).history().collect()
            if h["userMetadata"] == f"deltacrawl update round {n}" and h["operation"] == "WRITE"
            and "predicate" in h["operationParameters"]]
    assert len(hist) == 1, hist
    return {int(k) for k in re.findall(r"-?\d+", hist[0]["operationParameters"]["predicate"])}


def test_the_write_replaces_the_rows_read_and_only_inserts_new_urls(spark, updated_a):
    """Nothing else wrote the crawl DB since the version read: the predicate names the round's URLs and
    no new URL (a smaller commit), and the new URLs are inserted all the same."""
    conf = updated_a[0]
    keys = _replaced_keys(spark, conf, 1)
    u = "http://s.test/"
    assert {fingerprint(u + p) for p in ("", "a", "b", "c", "d", "e")} <= keys
    assert not keys & {fingerprint(x) for x in (u + "new1", "http://t.test/new2", u + "later")}
    from jobs import common
    db = common.read(spark, conf, "crawldb")
    assert db.where(f"url_fp = {fingerprint(u + 'new1')}").count() == 1


def test_frontier_size_is_the_count_after_the_merge_without_a_scan_of_its_own(spark, tmp_path):
    """frontier_size = the pinned snapshot's eligible rows + the MERGE source's status changes: rows
    leaving the frontier (budget_exhausted, matched or new) and rows joining it (new URLs) both move it."""
    from jobs import common, ledger, update
    from schemas.status import ELIGIBLE
    conf = config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"', "spark.shuffle_partitions=4",
                                  "budget.max_pages_per_host=3"])
    _seed(spark, conf)
    ledger.set_state(spark, conf, 1, "fetched")
    result = update.run(spark, conf)
    db = {r.url: r.status for r in common.read(spark, conf, "crawldb").collect()}
    assert (db["http://s.test/later"], db["http://s.test/new1"]) == ("budget_exhausted", "budget_exhausted")
    assert result["frontier_size"] == sum(s in {e.value for e in ELIGIBLE} for s in db.values()) == 6


def test_update_plans_statically_and_counts_without_jobs_of_its_own(spark, tmp_path):
    """Update's Spark jobs (load-independent): with adaptive execution on, each exchange would be a job
    of its own, and each counter a count action (bench/verb_cost.py measures the same at scale)."""
    from jobs import ledger, update
    conf = config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"', "spark.shuffle_partitions=4",
                                  "budget.max_pages_per_host=100"])
    _seed(spark, conf)
    ledger.set_state(spark, conf, 1, "fetched")
    jobs = spark.sparkContext._jsc.sc().dagScheduler()
    first = jobs.numTotalJobs()
    update.run(spark, conf)
    used = jobs.numTotalJobs() - first
    assert used <= JOBS_UPDATE_MAX, f"{used} Spark jobs"


def test_main_reports_a_missing_crawl_in_one_line(spark, tmp_path, capsys):
    from jobs import cli
    rc = cli.main(["--set", f'storage.root="{tmp_path / "none"}"', "--set", "spark.shuffle_partitions=4",
                   "--set", "spark.master=local[2]", "update"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "table rounds not found" in err and "\n" not in err
