"""The DuckDB twins of the duplicate steps (jobs/duck_duplicates.py, jobs/duck_originals.py) against the Spark
transforms, step by step, on the rounds of the Spark tests: test_update's exact copies (in the round and against
the crawl DB), test_dedup's near-duplicates (in the round and against the index, the canonical target beating an
indexed copy, a gone original's copy promoted), test_update's trap round (a mirror fetched earlier), the bucket
cap of test_dedup_cap, and a realistic round of a few hundred pages. Originals: tests/test_duck_originals.py."""

from __future__ import annotations

import datetime as dt
import random
import struct

import pytest

from crawl_udfs import config, near_dup, simhash
from crawl_udfs.url_normalize import fingerprint as fp
from crawl_udfs.url_normalize import host_of
from schemas.tables import NEAR_DUP_INDEX
from tests.duck_diff import assert_same, duck_inputs
from tests.duck_dup_cases import assert_steps, both_plans, round_inputs
from tests.test_update import CONF, FIRST, T0, frame, old, page, sec

pytestmark = pytest.mark.spark

K = CONF.simhash.near_duplicate_bits


@pytest.fixture
def con():
    from jobs.duck_engine import connect
    c = connect()
    yield c
    c.close()


# -- exact copies: test_update.test_exact_duplicates ------------------------------------------------
def exact_round():
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
             page(u + "l", "ok", status_code=200, digest="sha1:D5"),
             page(u + "m", "deferred", error_class="retry_after")]  # a kept row: its stored copy stays a member
    olds += [old(u + "m", status="fetched", digest="sha1:D2", first_seen=FIRST - sec(5)),
             old(u + "i2", status="duplicate", dup_of=fp(u + "i"), digest="sha1:D4", http_status=304),  # promoted
             old(u + "j2", status="duplicate", dup_of=fp(u + "j"), digest="sha1:D1")]  # follows j to a
    return olds, pages, []


# -- near copies: test_dedup._seed, with a copy of the indexed page the canonical target beats ------
def near_round():
    from tests import test_dedup as TD
    olds = [old(TD.A, status="fetched", digest="sha1:A", fetch_count=1, simhash=TD.sig(TD.ARTICLE)["simhash"],
                last_fetch_time=FIRST, discovered_round=1, updated_round=1),
            old(TD.T, status="fetched", digest="sha1:T", fetch_count=1, simhash=TD.sig(TD.BRIEF_OLD)["simhash"],
                last_fetch_time=FIRST, discovered_round=1, updated_round=1),
            old(TD.Q1, status="fetched", digest="sha1:Q1", fetch_count=1, simhash=TD.sig(TD.NEWS_PRINT)["simhash"],
                last_fetch_time=FIRST, first_fetched=FIRST, canonical_fp=fp(TD.Q), discovered_round=1, updated_round=1),
            old(Q1C, status="duplicate", dup_of=fp(TD.Q1), digest="sha1:Q1", fetch_count=1, first_fetched=FIRST,
                http_status=200, updated_round=1),
            old(TD.G, status="fetched", digest="sha1:G", fetch_count=1, first_fetched=FIRST, updated_round=1),
            old(TD.G2, status="duplicate", dup_of=fp(TD.G), digest="sha1:G", fetch_count=1,
                first_fetched=FIRST + sec(5), http_status=200, updated_round=1),
            old(GONE_INDEXED, status="gone", digest="sha1:GI", first_fetched=FIRST, updated_round=1),
            *[old(u, first_seen=FIRST + sec(1), discovered_round=1, updated_round=1)
              for u in (TD.M, TD.P, TD.B, TD.X, TD.Y, TD.H, TD.Q, COPY_OF_GONE)]]
    pages = [TD._ok(TD.M, TD.ARTICLE, "sha1:M"), TD._ok(TD.P, TD.PRINT, "sha1:P"),
             TD._ok(TD.B, TD.BRIEF_NEW, "sha1:B"), TD._ok(TD.X, TD.STORY, "sha1:X"),
             TD._ok(TD.Y, TD.STORY_PRINT, "sha1:Y", fetch_time=T0 + sec(10)),
             TD._ok(TD.H, TD.ARTICLE, "sha1:H", simhash=TD.far_from(TD.sig(TD.ARTICLE)["simhash"])),
             TD._ok(TD.Q, TD.NEWS, "sha1:Q", canonical=TD.Q), page(TD.G, "http_error", 2, status_code=404,
                                                                   wire_bytes=10),
             TD._ok(COPY_OF_GONE, GONE_TEXT, "sha1:CG")]
    pages = [dict(p, round=2) for p in pages]
    hosts = [dict(round=2, partition=0, kind="host", host=h, requests=1, ip="127.10.0.9", next_allowed_at=T0,
                  consecutive_failures=0, parked=False) for h in sorted({p["host"] for p in pages})]
    index = (TD._index_rows(TD.A, TD.ARTICLE, FIRST) + TD._index_rows(TD.T, TD.BRIEF_OLD, FIRST)
             + [dict(r, canonical_fp=fp(TD.Q)) for r in TD._index_rows(TD.Q1, TD.NEWS_PRINT, FIRST)]
             + TD._index_rows(GONE_INDEXED, GONE_TEXT, FIRST)           # left since: skipped by the lookup
             + TD._index_rows(TD.M, TD.ARTICLE, T0, round_no=2))        # of this round: never read
    return olds, pages + hosts, index


Q1C = "http://q.test/print/6?copy=1"        # a copy of Q1, which Q beats by its canonical: it follows Q1 to Q
GONE_INDEXED = "http://gi.test/page"        # indexed in round 1, gone since
COPY_OF_GONE = "http://cg.test/page"        # round 2: its text, yet an original (it left)
GONE_TEXT = "\n".join(["Gone page text"] + [f"line {i} of the page that went away" for i in range(60)])


@pytest.mark.parametrize("case", ["exact", "near", "trap"])
def test_the_duplicate_steps_agree_with_spark(spark, con, case):
    olds, pages, index = ROUNDS[case]()
    round_no = pages[0]["round"]
    inp = round_inputs(spark, olds, pages, round_no=round_no, conf=CONF, index=index)
    counts = assert_steps(both_plans(con, inp, CONF, round_no=round_no))
    if case == "exact":  # the rows each case is about are there
        assert (counts["exact_members"], counts["leaving"], counts["repointed_rows"]) == (10, 2, 2)
    elif case == "near":
        assert counts["near_duplicate_of"] == 4 and counts["demotions"] == 1 and counts["repointed_rows"] == 3
        assert counts["index_rows"] == 5 * (K + 1) and counts["left_pages"] == 3
    else:
        assert counts["near_duplicate_of"] == 11


def trap_round():
    """test_update's trap round: calm's pages copy the mirror's (fetched 10 s earlier), trap's pages one text."""
    from tests.testweb.sites import prose
    n, perm = CONF.simhash.shingle_words, CONF.dedup.minhash_permutations

    def ok(url: str, text: str, **kw) -> dict:
        sig = dict(simhash=simhash.simhash(text, n), minhash=near_dup.minhash(text, n, perm),
                   words=len(simhash.words(text)))
        return page(url, "ok", 2, status_code=200, digest=f"sha1:{url}", content_type="text/html", wire_bytes=10,
                    **sig, **kw)
    same = prose(random.Random("facet"), 80)
    texts = [prose(random.Random(f"calm/{i}"), 80) for i in range(6)]
    pages = [ok(f"http://trap.test/p{i}", same) for i in range(6)]
    pages += [ok(f"http://calm.test/p{i}", texts[i]) for i in range(6)]
    pages += [ok(f"http://mirror.test/m{i}", texts[i], fetch_time=T0 - sec(10)) for i in range(6)]
    return [old(p["url"]) for p in pages], pages, []


ROUNDS = {"exact": exact_round, "near": near_round, "trap": trap_round}


# -- the bucket cap: test_dedup_cap ----------------------------------------------------------------------
TEMPLATE = 0x5A5A_1234_0F0F_BEEF
CANDS_SCHEMA = ("url_fp long, host string, simhash long, canonical_fp long, minhash binary, words int, "
                "first_fetched timestamp")


def _minhash(seed: str) -> bytes:
    rng = random.Random(seed)
    return struct.pack(f"<{CONF.dedup.minhash_permutations}I", *(rng.getrandbits(32) for _ in range(
        CONF.dedup.minhash_permutations)))


def _family(base: dt.datetime) -> list[dict]:
    rows = []
    for i in reversed(range(12)):
        rows += [dict(block_key=key, url_fp=1000 + i, host="t.test", simhash=TEMPLATE, words=500,
                      first_fetched=base + dt.timedelta(seconds=i), round=1, minhash=_minhash(f"page{i}"))
                 for key in near_dup.block_keys(TEMPLATE, K)]
    return rows


def test_the_bucket_cap_agrees(spark, con):
    from jobs import dedup_transforms as D
    from jobs import duck_duplicates as DD
    base = dt.datetime(2026, 1, 1)
    rows = _family(base) + [dict(r, block_key=7, url_fp=r["url_fp"] + 100) for r in _family(base)[0:5:4]]
    tied = [dict(r, first_fetched=base) for r in _family(base)]
    index, ties = frame(spark, rows, NEAR_DUP_INDEX), frame(spark, tied, NEAR_DUP_INDEX)
    later = base + dt.timedelta(days=1)
    cands = spark.createDataFrame(
        [(1, "m.test", TEMPLATE ^ 1, None, _minhash("page1"), 500, later),
         (2, "m.test", TEMPLATE ^ 1, None, _minhash("page9"), 500, later + dt.timedelta(seconds=1))], CANDS_SCHEMA)
    d = duck_inputs(con, index=index, ties=ties, cands=cands)
    assert_same(D.capped(index, 5), DD.capped(con, d["index"], 5))
    assert_same(D.capped(ties, 2), DD.capped(con, d["ties"], 2))
    assert_same(D.capped(index, 0), DD.capped(con, d["index"], 0))
    for cap, found in ((5, 1), (0, 2)):  # capped: the copy of page 9 is missed; uncapped: found
        kw = dict(round_no=2, near_bits=K, jaccard_threshold=0.9, length_ratio=0.8, max_bucket_rows=cap)
        got = DD.near_duplicate_of(con, d["cands"], d["index"], **kw)
        assert_same(D.near_duplicate_of(cands, index, **kw), got)
        assert len(got.fetchall()) == found


@pytest.mark.parametrize("k", [1, 3, 7])
def test_block_keys_are_near_dups_layout(con, k):
    from jobs import duck_duplicates as DD
    rng = random.Random(5)
    fps = [0, -1, 2**63 - 1, -2**63, TEMPLATE] + [rng.randrange(-2**63, 2**63) for _ in range(50)]
    rel = con.sql("SELECT fp, " + DD.block_keys("fp", k) + " AS keys FROM unnest(?::BIGINT[]) t(fp)", params=[fps])
    assert dict(rel.fetchall()) == {f: near_dup.block_keys(f, k) for f in fps}


# -- a realistic round -----------------------------------------------------------------------------------
def realistic_round(seed: int = 13, n_hosts: int = 12, per_host: int = 25):
    """Round 2 of a crawl: per host, stored originals (half of them indexed), their exact copies, pages
    re-fetched unchanged / changed / gone / turned into another page's copy, and new first copies: unique
    pages, exact copies (of the crawl DB and of the round), near copies (of the index and of the round),
    template pages that SimHash alone would call copies, and print versions naming their canonical."""
    rng = random.Random(seed)
    perm = CONF.dedup.minhash_permutations
    olds, pages, index = [], [], []

    def sig():
        return dict(simhash=rng.randrange(-2**63, 2**63), words=rng.randrange(300, 600),
                    minhash=struct.pack(f"<{perm}I", *(rng.getrandbits(32) for _ in range(perm))))

    def near(s, values=3, bits=2):  # a near copy: a few MinHash values and SimHash bits differ
        mh = list(struct.unpack(f"<{perm}I", s["minhash"]))
        for i in rng.sample(range(perm), values):
            mh[i] = rng.getrandbits(32)
        u = (s["simhash"] % 2**64) ^ sum(1 << b for b in rng.sample(range(64), bits))
        return dict(simhash=u - 2**64 if u >= 2**63 else u, words=s["words"], minhash=struct.pack(f"<{perm}I", *mh))

    def ok(url, digest, s, **kw):
        return page(url, "ok", 2, status_code=200, digest=digest, content_type="text/html", wire_bytes=100,
                    fetch_time=T0 + sec(rng.randrange(0, 600)), **s, **kw)
    template = sig()
    for h in range(n_hosts):
        base = f"http://h{h}.test/"
        stored = []
        # o5 (indexed) and o11 name a page of the round as canonical, o5 a near copy, o11 an exact one
        canon_of = {5: f"{base}ncanon", 11: f"{base}canon"}
        for i in range(per_host // 2):  # round 1's originals
            url, s = f"{base}o{i}", sig()
            canon = fp(canon_of[i]) if i in canon_of else fp(url) if i % 3 == 0 else None
            olds.append(old(url, status="fetched", digest=f"sha1:{url}", fetch_count=1, simhash=s["simhash"],
                            first_fetched=FIRST + sec(rng.randrange(0, 10**5)), http_status=200,
                            canonical_fp=canon, discovered_round=1, updated_round=1))
            stored.append((url, s))
            if i % 2 == 0 or i == 5:
                row = olds[-1]
                index += [dict(block_key=key, url_fp=fp(url), host=host_of(url), first_fetched=row["first_fetched"],
                               round=1, canonical_fp=row["canonical_fp"], **s)
                          for key in near_dup.block_keys(s["simhash"], K)]
            if i % 4 == 1:  # a stored exact copy of it
                olds.append(old(f"{url}?c", status="duplicate", dup_of=fp(url), digest=f"sha1:{url}", fetch_count=1,
                                first_fetched=FIRST + sec(2 * 10**5 + i), http_status=200 if i % 8 == 1 else 304,
                                updated_round=1))
        for i, (url, s) in enumerate(stored):  # re-fetched: unchanged, 304, changed, gone, another's copy
            kind = i % 6
            if kind == 0:
                pages.append(ok(url, f"sha1:{url}", s))
            elif kind == 1:
                pages.append(page(url, "not_modified", 2, status_code=304, digest=f"sha1:{url}", wire_bytes=10))
            elif kind == 2:
                pages.append(ok(url, f"sha1:{url}#2", sig()))
            elif kind == 3:
                pages.append(page(url, "http_error", 2, status_code=404, wire_bytes=10))
            elif kind == 4:
                pages.append(ok(url, f"sha1:{stored[0][0]}", stored[0][1]))
        olds += [old(canon_of[5]), old(canon_of[11])]
        pages += [ok(canon_of[5], f"sha1:{canon_of[5]}", near(stored[5][1]), canonical=canon_of[5]),
                  ok(canon_of[11], f"sha1:{stored[11][0]}", stored[11][1], canonical=canon_of[11])]
        round_first = []
        for i in range(per_host):  # new URLs, first fetched now
            url = f"{base}n{i}"
            olds.append(old(url, first_seen=FIRST + sec(i), discovered_round=1, updated_round=1))
            kind = i % 8
            if kind == 0 or not round_first:
                s = sig()
                pages.append(ok(url, f"sha1:{url}", s, canonical=url if i % 16 == 0 else None))
                round_first.append((url, s))
            elif kind == 1:
                src_url, src = rng.choice(stored)
                pages.append(ok(url, f"sha1:{src_url}", src))
            elif kind == 2:
                src_url, src = rng.choice(round_first)
                pages.append(ok(url, f"sha1:{src_url}", src))
            elif kind == 3:
                src_url, src = rng.choice(stored[::2])
                pages.append(ok(url, f"sha1:{url}", near(src)))
            elif kind == 4:
                src_url, src = rng.choice(round_first)
                pages.append(ok(url, f"sha1:{url}", near(src)))
            elif kind == 5:
                pages.append(ok(url, f"sha1:{url}", dict(sig(), simhash=template["simhash"])))
            elif kind == 6:  # a print version: its canonical is a page of the round fetched later or earlier
                src_url, src = rng.choice(round_first)
                pages.append(ok(f"{url}", f"sha1:{url}", near(src, values=1, bits=1), canonical=src_url))
            else:
                pages.append(page(url, "http_error", 2, status_code=503, wire_bytes=10))
    hosts = [dict(round=2, partition=0, kind="host", host=f"h{h}.test", requests=per_host, next_allowed_at=T0,
                  consecutive_failures=0, parked=False) for h in range(n_hosts)]
    return olds, pages + hosts, index


def test_a_realistic_round_agrees(spark, con):
    olds, pages, index = realistic_round()
    inp = round_inputs(spark, olds, pages, round_no=2, conf=CONF, index=index)
    counts = assert_steps(both_plans(con, inp, CONF, round_no=2))
    # the round exercises every step
    for step in ("near_duplicate_of", "index_rows", "exact_demotions", "demotions", "leaving", "repoint",
                 "repointed_rows"):
        assert counts[step] > 0, (step, counts)
