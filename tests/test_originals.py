"""Which copy is the original (jobs/originals.py): a consistent same-site canonical wins over the earliest
fetched copy, for exact and near-duplicates; copies of an original that went are re-pointed in the MERGE
source. Small hand-made DataFrames; the near-duplicate rerun and change feed are in tests/test_dedup.py."""

from __future__ import annotations

import random

import pytest

from crawl_udfs import near_dup, simhash, sites
from crawl_udfs.url_normalize import fingerprint as fp
from crawl_udfs.url_normalize import host_of
from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT, HOSTS, NEAR_DUP_INDEX
from tests.test_update import CONF, FIRST, NOW, T0, frame, old, page, sec
from tests.testweb.sites import prose


@pytest.mark.parametrize("a, b, same", [
    ("www.shop.test", "shop.test", True), ("m.example.co.uk", "www.example.co.uk", True),
    ("a.example.com", "a.example.com", True), ("x.github.io", "y.github.io", False),   # the PSL's private section
    ("shop.test", "mirror.test", False), ("127.0.0.1", "127.0.0.2", False), ("localhost", "localhost", True),
    (None, "a.test", False)])
def test_same_site_is_the_registered_domain(a, b, same):
    assert sites.same_site(a, b) is same


# -- exact duplicates, and the originals that go ---------------------------------------------------
S, S2 = "http://www.shop.test/print/1", "http://www.shop.test/print/1?ref=a"   # stored original and its copy
T = "http://shop.test/1"                                                       # fetched now, S's canonical
S3, T3 = "http://shop.test/print/3", "http://shop.test/3"    # T3's own canonical points elsewhere
S4, T4 = "http://www.shop.test/print/4", "http://mirror.test/4"  # S4 names a page of another site
L, C1, C2 = "http://l.test/orig", "http://l.test/copy1", "http://l.test/copy2"  # L is gone now
O, L2, C3 = "http://o.test/a", "http://o.test/b", "http://o.test/b-copy"         # L2's content becomes O's


def _stored(url, digest, first, **kw):
    return old(url, status="fetched", digest=digest, fetch_count=1, first_fetched=FIRST + sec(first), **kw)


def _ok(url, digest, canonical=None):
    return page(url, "ok", status_code=200, digest=digest, wire_bytes=10, canonical=canonical)


@pytest.fixture(scope="module")
def exact_plan(spark):
    from jobs import update
    olds = [_stored(S, "sha1:D1", 0, canonical_fp=fp(T)),
            old(S2, status="duplicate", dup_of=fp(S), digest="sha1:D1", first_fetched=FIRST + sec(1)),
            _stored(S3, "sha1:D3", 0, canonical_fp=fp(T3)), old(T3),
            _stored(S4, "sha1:D4", 0, canonical_fp=fp(T4)), old(T4), old(T),
            _stored(L, "sha1:L", 0),
            old(C1, status="duplicate", dup_of=fp(L), digest="sha1:L", first_fetched=FIRST + sec(20), http_status=200),
            old(C2, status="duplicate", dup_of=fp(L), digest="sha1:L", first_fetched=FIRST + sec(10), http_status=304),
            _stored(O, "sha1:O", -100), _stored(L2, "sha1:L2", 0),
            old(C3, status="duplicate", dup_of=fp(L2), digest="sha1:L2", first_fetched=FIRST + sec(5))]
    pages = [_ok(T, "sha1:D1", canonical=T), _ok(T3, "sha1:D3", canonical="http://shop.test/elsewhere"),
             _ok(T4, "sha1:D4", canonical=T4), page(L, "http_error", status_code=404), _ok(L2, "sha1:O")]
    hosts = [dict(round=1, partition=0, kind="host", host=h, requests=1, parked=False)
             for h in sorted({host_of(p["url"]) for p in pages})]
    p = update.plan(frame(spark, olds, CRAWLDB), frame(spark, [], HOSTS), frame(spark, pages + hosts, FETCH_OUTPUT),
                    frame(spark, [], FETCH_LIST), CONF, round_no=1, now=NOW, keep=lambda d: d.localCheckpoint())
    return {r.url_fp: r for r in p.crawldb_source.collect()}


def _got(src, url):
    r = src[fp(url)]
    return r["_kind"], r.status, r.dup_of


def test_a_consistent_same_site_canonical_wins_an_exact_cluster(exact_plan):
    assert _got(exact_plan, T) == ("update", "fetched", None)          # fetched later, yet the original
    assert _got(exact_plan, S) == ("repoint", "duplicate", fp(T))      # the stored original names T
    assert _got(exact_plan, S2) == ("repoint", "duplicate", fp(T))     # S's copy follows S's content to T
    assert exact_plan[fp(S)].updated_round == 1


def test_an_inconsistent_canonical_does_not(exact_plan):
    assert _got(exact_plan, T3) == ("update", "duplicate", fp(S3))     # T3 names another page
    assert _got(exact_plan, T4) == ("update", "duplicate", fp(S4))     # S4 names a page of another site
    assert fp(S3) not in exact_plan and fp(S4) not in exact_plan      # unchanged rows stay out of the MERGE


def test_a_gone_originals_earliest_copy_is_promoted(exact_plan):
    assert _got(exact_plan, L) == ("update", "gone", None)
    assert _got(exact_plan, C2) == ("repoint", "not_modified", None)   # earliest fetched copy; its last was a 304
    assert _got(exact_plan, C1) == ("repoint", "duplicate", fp(C2))


def test_an_original_whose_content_became_a_duplicate_leaves_its_copy_promoted(exact_plan):
    assert _got(exact_plan, L2) == ("update", "duplicate", fp(O))
    assert _got(exact_plan, C3) == ("repoint", "fetched", None)
    assert fp(O) not in exact_plan
    assert sum(r["_kind"] == "repoint" for r in exact_plan.values()) == 5


# -- near-duplicates ----------------------------------------------------------------------------------
def _texts(seed: str):
    text = prose(random.Random(seed), 400)
    return text, "Printer-friendly version\n" + text + "\nPrinted from here"


def _sig(text: str) -> dict:
    n, perm = CONF.simhash.shingle_words, CONF.dedup.minhash_permutations
    return dict(simhash=simhash.simhash(text, n), minhash=near_dup.minhash(text, n, perm), words=len(simhash.words(text)))


def test_a_consistent_same_site_canonical_wins_a_near_cluster(spark):
    from jobs import dedup_transforms as D
    k = CONF.simhash.near_duplicate_bits
    # (indexed print copy, its canonical, the page fetched now, the page's own canonical, seed)
    cases = {"wins": ("http://a.test/print/1", "http://a.test/1", "http://a.test/1", "http://a.test/1", "n/1"),
             "elsewhere": ("http://b.test/print/2", "http://b.test/2", "http://b.test/2", "http://b.test/x", "n/2"),
             "other site": ("http://c.test/print/3", "http://d.test/3", "http://d.test/3", "http://d.test/3", "n/3")}
    index, cands = [], []
    for printed, canon, url, own, seed in cases.values():
        text, print_text = _texts(seed)
        s = _sig(print_text)
        assert simhash.hamming(s["simhash"], _sig(text)["simhash"]) <= k, seed   # a near-duplicate pair
        index += [dict(block_key=key, url_fp=fp(printed), host=host_of(printed), first_fetched=FIRST, round=1,
                       canonical_fp=fp(canon), **s) for key in near_dup.block_keys(s["simhash"], k)]
        cands.append(dict(url_fp=fp(url), host=host_of(url), canonical_fp=fp(own), first_fetched=T0, **_sig(text)))
    schema = "url_fp long, host string, canonical_fp long, first_fetched timestamp, simhash long, minhash binary, words int"
    got = D.near_duplicate_of(spark.createDataFrame([tuple(c.values()) for c in cands], schema),
                              frame(spark, index, NEAR_DUP_INDEX), round_no=2, near_bits=k,
                              jaccard_threshold=CONF.dedup.jaccard_threshold, length_ratio=CONF.dedup.length_ratio)
    near = {r.url_fp: r[D.NEAR_OF] for r in got.collect()}
    assert near == {fp("http://a.test/print/1"): fp("http://a.test/1"),      # the indexed copy is demoted
                    fp("http://b.test/2"): fp("http://b.test/print/2"),      # its own canonical points elsewhere
                    fp("http://d.test/3"): fp("http://c.test/print/3")}      # named from another site
    # an indexed original that left since (gone, or a duplicate now) is skipped: b.test/2 is no copy of it
    left = spark.createDataFrame([(fp("http://b.test/print/2"),)], "url_fp long")
    got = D.near_duplicate_of(spark.createDataFrame([tuple(c.values()) for c in cands], schema),
                              frame(spark, index, NEAR_DUP_INDEX), round_no=2, near_bits=k,
                              jaccard_threshold=CONF.dedup.jaccard_threshold, length_ratio=CONF.dedup.length_ratio,
                              left=left)
    assert {r.url_fp: r[D.NEAR_OF] for r in got.collect()} == {
        fp("http://a.test/print/1"): fp("http://a.test/1"), fp("http://d.test/3"): fp("http://c.test/print/3")}
