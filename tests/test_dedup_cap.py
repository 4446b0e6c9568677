"""The bucket cap of the near-duplicate lookup (``dedup.max_bucket_rows``, jobs/dedup_transforms.py):
a template bucket of twelve index rows capped at five keeps the five earliest; a copy of a kept page is
still found, a copy of a page outside them is missed (the cap's documented cost) and found without it.
Small hand-made DataFrames, no table.
"""

from __future__ import annotations

import datetime as dt
import random
import struct

import pytest

from crawl_udfs import config, near_dup
from schemas.tables import NEAR_DUP_INDEX
from tests.test_update import frame

pytestmark = pytest.mark.spark

CONF0 = config.defaults()
K = CONF0.simhash.near_duplicate_bits
PERM = CONF0.dedup.minhash_permutations
T0 = dt.datetime(2026, 1, 1)
TEMPLATE = 0x5A5A_1234_0F0F_BEEF       # the SimHash every page of the template family has
FAMILY = 12                            # index pages of the family: each of its block keys' bucket has 12 rows
CAP = 5


def minhash(seed: str) -> bytes:
    """A signature of its own: two pages of different seeds share almost no value (Jaccard ~0)."""
    rng = random.Random(seed)
    return struct.pack(f"<{PERM}I", *(rng.getrandbits(32) for _ in range(PERM)))


def family_rows() -> list[dict]:
    """Index rows of FAMILY distinct pages of one template: same SimHash, own MinHash; page i fetched at T0 + i s,
    inserted latest first (the cap must order them, not rely on the input order)."""
    rows = []
    for i in reversed(range(FAMILY)):
        rows += [dict(block_key=key, url_fp=1000 + i, host="t.test", simhash=TEMPLATE, words=500,
                      first_fetched=T0 + dt.timedelta(seconds=i), round=1, minhash=minhash(f"page{i}"))
                 for key in near_dup.block_keys(TEMPLATE, K)]
    return rows


def lookup(spark, max_bucket_rows: int) -> dict:
    from jobs import dedup_transforms as D

    later = T0 + dt.timedelta(days=1)
    # two copies of family pages, one bit away (block 0 differs: they meet the family in blocks 1-3 only)
    cands = spark.createDataFrame(
        [(1, "m.test", TEMPLATE ^ 1, None, minhash("page1"), 500, later),                            # of page 1: kept
         (2, "m.test", TEMPLATE ^ 1, None, minhash("page9"), 500, later + dt.timedelta(seconds=1))],  # of page 9: not
        "url_fp long, host string, simhash long, canonical_fp long, minhash binary, words int, first_fetched timestamp")
    near = D.near_duplicate_of(cands, frame(spark, family_rows(), NEAR_DUP_INDEX), round_no=2, near_bits=K,
                               jaccard_threshold=0.9, length_ratio=0.8, max_bucket_rows=max_bucket_rows)
    return {r.url_fp: r[D.NEAR_OF] for r in near.collect()}


def test_a_capped_bucket_keeps_its_earliest_rows_whatever_their_order(spark):
    from jobs import dedup_transforms as D

    rows = family_rows() + [dict(r, block_key=7, url_fp=r["url_fp"] + 100) for r in family_rows()[0:5:4]]
    kept = D.capped(frame(spark, rows, NEAR_DUP_INDEX), CAP).collect()
    by_key: dict[int, set[int]] = {}
    for r in kept:
        by_key.setdefault(r.block_key, set()).add(r.url_fp)
    assert by_key.pop(7) == {1111, 1110}  # a small bucket keeps every row
    assert by_key == {key: {1000, 1001, 1002, 1003, 1004} for key in near_dup.block_keys(TEMPLATE, K)}
    # equal fetch times: the smallest url_fp first
    tied = [dict(r, first_fetched=T0) for r in family_rows()]
    assert {r.url_fp for r in D.capped(frame(spark, tied, NEAR_DUP_INDEX), 2).collect()} == {1000, 1001}


def test_a_copy_inside_the_kept_rows_is_found_one_outside_is_missed(spark):
    assert lookup(spark, CAP) == {1: 1001}
    assert lookup(spark, 0) == {1: 1001, 2: 1009}  # no cap: every row compared, the second copy found too
