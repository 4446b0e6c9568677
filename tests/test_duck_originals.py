"""The DuckDB twin of jobs/originals.py (jobs/duck_originals.py) against the Spark transforms: test_originals'
round (a consistent same-site canonical winning an exact cluster, inconsistent ones losing, a gone original's
earliest copy promoted, an original whose content became another page's), its near-duplicate canonical cases
(with and without a page that left), and ``with_original`` on a table of clusters."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from crawl_udfs import near_dup, simhash
from crawl_udfs.url_normalize import fingerprint as fp
from crawl_udfs.url_normalize import host_of
from schemas.tables import NEAR_DUP_INDEX
from tests.duck_diff import assert_same, duck_inputs
from tests.duck_dup_cases import assert_steps, both_plans, round_inputs
from tests.test_update import CONF, FIRST, T0, frame

pytestmark = pytest.mark.spark


@pytest.fixture
def con():
    from jobs.duck_engine import connect
    c = connect()
    yield c
    c.close()


def originals_round():
    """test_originals.exact_plan's round 1."""
    from tests import test_originals as TO
    S, S2, T, S3, T3, S4, T4 = TO.S, TO.S2, TO.T, TO.S3, TO.T3, TO.S4, TO.T4
    L, C1, C2, O, L2, C3 = TO.L, TO.C1, TO.C2, TO.O, TO.L2, TO.C3
    olds = [TO._stored(S, "sha1:D1", 0, canonical_fp=fp(T)),
            TO.old(S2, status="duplicate", dup_of=fp(S), digest="sha1:D1", first_fetched=FIRST + TO.sec(1)),
            TO._stored(S3, "sha1:D3", 0, canonical_fp=fp(T3)), TO.old(T3),
            TO._stored(S4, "sha1:D4", 0, canonical_fp=fp(T4)), TO.old(T4), TO.old(T),
            TO._stored(L, "sha1:L", 0),
            TO.old(C1, status="duplicate", dup_of=fp(L), digest="sha1:L", first_fetched=FIRST + TO.sec(20),
                   http_status=200),
            TO.old(C2, status="duplicate", dup_of=fp(L), digest="sha1:L", first_fetched=FIRST + TO.sec(10),
                   http_status=304),
            TO._stored(O, "sha1:O", -100), TO._stored(L2, "sha1:L2", 0),
            TO.old(C3, status="duplicate", dup_of=fp(L2), digest="sha1:L2", first_fetched=FIRST + TO.sec(5))]
    pages = [TO._ok(T, "sha1:D1", canonical=T), TO._ok(T3, "sha1:D3", canonical="http://shop.test/elsewhere"),
             TO._ok(T4, "sha1:D4", canonical=T4), TO.page(L, "http_error", status_code=404), TO._ok(L2, "sha1:O")]
    hosts = [dict(round=1, partition=0, kind="host", host=h, requests=1, parked=False)
             for h in sorted({host_of(p["url"]) for p in pages})]
    return olds, pages + hosts


def test_the_originals_round_agrees_with_spark(spark, con):
    olds, pages = originals_round()
    inp = round_inputs(spark, olds, pages, round_no=1, conf=CONF)
    counts = assert_steps(both_plans(con, inp, CONF, round_no=1))
    # test_originals: S and S2 follow to T, L's copies C2 (promoted) and C1, L2's copy C3 promoted
    assert (counts["repointed_rows"], counts["exact_demotions"], counts["leaving"]) == (5, 1, 3)


def _texts(seed: str):
    text = prose_of(seed)
    return text, "Printer-friendly version\n" + text + "\nPrinted from here"


def prose_of(seed: str) -> str:
    from tests.testweb.sites import prose
    return prose(random.Random(seed), 400)


def _sig(text: str) -> dict:
    n, perm = CONF.simhash.shingle_words, CONF.dedup.minhash_permutations
    return dict(simhash=simhash.simhash(text, n), minhash=near_dup.minhash(text, n, perm),
                words=len(simhash.words(text)))


@pytest.mark.parametrize("with_left", [False, True])
def test_a_consistent_canonical_wins_a_near_cluster_in_both_engines(spark, con, with_left):
    """test_originals' near cases: the indexed print copy demoted by its canonical target, a canonical pointing
    elsewhere and one named from another site losing; an indexed original that left since is skipped."""
    from jobs import dedup_transforms as D
    from jobs import duck_duplicates as DD
    k = CONF.simhash.near_duplicate_bits
    cases = {"wins": ("http://a.test/print/1", "http://a.test/1", "http://a.test/1", "http://a.test/1", "n/1"),
             "elsewhere": ("http://b.test/print/2", "http://b.test/2", "http://b.test/2", "http://b.test/x", "n/2"),
             "other site": ("http://c.test/print/3", "http://d.test/3", "http://d.test/3", "http://d.test/3", "n/3")}
    index, cands = [], []
    for printed, canon, url, own, seed in cases.values():
        text, print_text = _texts(seed)
        s = _sig(print_text)
        index += [dict(block_key=key, url_fp=fp(printed), host=host_of(printed), first_fetched=FIRST, round=1,
                       canonical_fp=fp(canon), **s) for key in near_dup.block_keys(s["simhash"], k)]
        cands.append(dict(url_fp=fp(url), host=host_of(url), canonical_fp=fp(own), first_fetched=T0, **_sig(text)))
    schema = ("url_fp long, host string, canonical_fp long, first_fetched timestamp, simhash long, minhash binary, "
              "words int")
    cands_df = spark.createDataFrame([tuple(c.values()) for c in cands], schema)
    index_df = frame(spark, index, NEAR_DUP_INDEX)
    left = spark.createDataFrame([(fp("http://b.test/print/2"),)], "url_fp long")
    d = duck_inputs(con, cands=cands_df, index=index_df, left=left)
    kw = dict(round_no=2, near_bits=k, jaccard_threshold=CONF.dedup.jaccard_threshold,
              length_ratio=CONF.dedup.length_ratio)
    got = DD.near_duplicate_of(con, d["cands"], d["index"], left=d["left"] if with_left else None, **kw)
    assert_same(D.near_duplicate_of(cands_df, index_df, left=left if with_left else None, **kw), got)
    assert len(got.fetchall()) == (2 if with_left else 3)


# -- with_original on a table of clusters ---------------------------------------------------------------
MEMBERS = "c long, url_fp long, host string, canonical_fp long, first_fetched timestamp, _batch boolean"
E = dt.datetime(2026, 1, 1)


def _s(n: float) -> dt.datetime:
    return E + dt.timedelta(seconds=n)


# (cluster, url_fp, host, canonical_fp, first_fetched)
CLUSTERS = [
    (1, 11, "www.a.test", 12, _s(0)), (1, 12, "a.test", 12, _s(9)),            # www speaks for a.test: 12 wins
    (2, 21, "x.github.io", 22, _s(0)), (2, 22, "y.github.io", 22, _s(9)),      # PSL private section: 21 wins
    (3, 31, "b.test", 32, _s(0)), (3, 32, "b.test", 33, _s(9)), (3, 33, "b.test", None, _s(5)),  # a chain: 31
    (4, 41, "c.test", None, None), (4, 42, "c.test", None, _s(0)),            # a NULL time sorts first: 41
    (5, 52, "d.test", None, _s(1)), (5, 51, "d.test", None, _s(1)),           # a tie: the smaller url_fp
    (6, 61, "e.test", 62, _s(0)), (6, 62, "e.test", 62, _s(5)),               # 62 named in cluster 6 ...
    (7, 62, "e.test", 62, _s(5)), (7, 63, "e.test", None, _s(1)),             # ... so it wins cluster 7 too
    (8, 81, "f.test", 81, _s(3)), (8, 82, "g.test", 81, _s(0)), (8, 83, "f.test", 81, _s(1)),  # one same-site namer
    (9, 91, "h.test", 91, _s(0)),                                              # alone: itself, by no canonical
]


def test_with_original_agrees_on_a_table_of_clusters(spark, con):
    from jobs import duck_originals as DO
    from jobs import originals as O
    df = spark.createDataFrame([(*r, i % 2 == 0) for i, r in enumerate(CLUSTERS)], MEMBERS)
    d = duck_inputs(con, members=df)
    got = DO.with_original(con, d["members"], "c")
    assert_same(O.with_original(df, "c"), got)
    orig = {c: (o, by) for c, o, by in got.select("c, _orig, _orig_by_canonical").distinct().fetchall()}
    assert orig == {1: (12, True), 2: (21, False), 3: (31, False), 4: (41, False), 5: (51, False), 6: (62, True),
                    7: (62, True), 8: (81, True), 9: (91, False)}
