"""Pure transforms of ``update`` for near-duplicates: the round's first copies against the index.

DataFrames in, DataFrames out, plain values as parameters; no table is read or
written here (STYLE.md rule 2). ``jobs/update.py`` runs them when
``dedup.near_duplicates`` is on, after the exact duplicates
(:func:`jobs.exact_dup_transforms.mark_duplicates`) and before trap detection,
which reads this lookup's result (:func:`jobs.hosts_transforms.trap_signals`).

Pipeline:

    candidates(updated, prepared)                the round's first copies with a SimHash and a MinHash
    near_duplicate_of(cands, index, ...)         url_fp -> the original's url_fp, for the copies found
    mark_near_duplicates(updated, near, ...)     status duplicate, dup_of (crawldb and fetch_log)
    index_rows(updated, cands, ...)              the round's new originals, one row per block key

The rules, each decided here once:

- **Candidates** are first copies (``_first``: ok, a digest, no stored copy before) that are not
  exact duplicates and have a SimHash (not :data:`crawl_udfs.simhash.EMPTY`), a MinHash and a
  length. Re-fetched pages are not looked up again (left: a page whose content changed keeps its
  index rows).
- **Lookup**: each candidate's k + 1 block keys (:func:`block_keys`, the layout of
  :func:`crawl_udfs.near_dup.block_keys`, k = ``simhash.near_duplicate_bits``; Manku, Jain and
  Das Sarma, WWW 2007) are equi-joined with the index's ``block_key`` and with the other
  candidates of the round; a pair is kept when ``bit_count(a ^ b) <= k`` and the second check
  passes (:func:`crawl_udfs.near_dup.near_duplicates`: MinHash Jaccard estimate and main-text
  length, run as a Python UDF on the candidate pairs only). Across hosts: a mirror lives on
  another host. Only index rows of earlier rounds are read (``round < N``), so a rerun of round N
  decides the same whatever it already appended.
- **The original** of a candidate's cluster (itself and the pages it is close to) is
  :func:`jobs.originals.with_original`'s, the rule exact duplicates use too: a consistent same-site
  ``rel=canonical`` wins, else the earliest fetched copy, ties by the smallest url_fp (index rows are
  originals of earlier rounds; of two candidates of the round the later one is the copy). An index
  page in the cluster of a candidate that won it by its canonical becomes that candidate's copy (a
  ``near`` row too; update re-points it in the crawl DB, :func:`demotions`). A copy whose original is
  itself a copy (near-duplicates are not transitive) names that one's original, one hop only: a
  chain of three or more copies within one round can still name a copy. An exact duplicate (same
  payload digest) of a page found a near-duplicate names that page's original too.
- A copy is not added to the index; every other candidate is, under each of its block keys.
- **Bucket cap** (``dedup.max_bucket_rows``, :func:`capped`): a candidate is compared with at most
  that many rows of each of its block keys (index rows and the round's candidates together), the
  earliest by ``first_fetched`` then ``url_fp``: a total order, so a rerun keeps the same rows, and
  the earliest rows are the ones that can be an original. A template shared by thousands of pages
  of one host makes its keys' buckets that large; capped, the pairs of a round are at most
  candidates x (k + 1) x the cap. The cost: a copy of a page outside the kept rows is missed when
  the two share no other block key whose bucket kept that page (it then joins the index as an
  original).

What the lookup reads, and how it grows (measured: ``bench/near_dup_lookup.py``, RESULTS.md
"Session 12"): every file's ``round``, ``block_key``, ``url_fp``, ``simhash``, ``first_fetched``,
``words`` and ``minhash`` (the semi-join with the round's broadcast keys runs after the scan), then
the rows of the buckets hit, shuffled, paired and checked. At 1M index rows (166 MB: a page's k + 1
rows sit together, so Parquet's dictionary stores its MinHash about once) the scan and semi-join took
about as long as at 10k (2.4-5.2 s at load 25-30, a tenth of the lookup); what grew was the pairs of
the buckets hit (1,131 rows at 10k, 93,488 at 1M: the template families grow with the crawl). The
table is left unclustered: a round's distinct keys (~8,000 for 2,000 pages, k = 3) are uniform over
the (k + 1) x 2^16 key space, so a file holding 1/F of the key range is skipped by min/max only with
probability (1 - 1/F)^8000, nil unless the table has far more files than the round has keys; no
layout by ``block_key`` (liquid clustering, Z-order, range partitions) prunes a lookup of random keys.

Trap detection reads this lookup's result (``jobs.hosts_transforms.trap_signals``). Promotion of a
copy when its original goes: :mod:`jobs.originals`.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType
from pyspark.sql.window import Window

from crawl_udfs import near_dup
from crawl_udfs.simhash import EMPTY as EMPTY_SIMHASH
from jobs.originals import BY_CANONICAL, MEMBER_COLUMNS, ORIG, first_copy_time, with_original
from jobs.exact_dup_transforms import as_duplicates
from jobs.update_transforms import FIRST
from schemas.status import Status
from schemas.tables import NEAR_DUP_INDEX

#: Column of :func:`near_duplicate_of`: the url_fp of the copy's original.
NEAR_OF = "_near_of"


def block_keys(simhash: Column, k: int) -> Column:
    """:func:`crawl_udfs.near_dup.block_keys` of a SimHash Column, as ``array<long>`` (same layout, same keys)."""
    keys = []
    for i, (shift, width) in enumerate(near_dup.blocks(int(k))):
        bits = F.shiftrightunsigned(simhash, shift).bitwiseAND(F.lit((1 << width) - 1).cast("long"))
        keys.append(bits.bitwiseOR(F.lit(i << near_dup.INDEX_SHIFT).cast("long")))
    return F.array(*keys)


def candidates(updated: DataFrame, prepared: DataFrame) -> DataFrame:
    """``url_fp``, ``host``, ``simhash``, ``canonical_fp``, ``minhash``, ``words``, ``first_fetched`` of the round's
    first copies that are no exact duplicate and have both signatures (``prepared``: the page rows, for the MinHash)."""
    sig = prepared.select("url_fp", "minhash", "words")
    first = updated.where(F.col(FIRST) & (F.col("status") != Status.DUPLICATE.value) & F.col("simhash").isNotNull()
                          & (F.col("simhash") != F.lit(EMPTY_SIMHASH)))
    return (first.select("url_fp", "host", "simhash", "canonical_fp", first_copy_time().alias("first_fetched"))
            .join(sig, "url_fp")
            .where(F.col("minhash").isNotNull() & F.col("words").isNotNull() & F.col("first_fetched").isNotNull()))


def _second_check(jaccard_threshold: float, length_ratio: float):
    """:func:`crawl_udfs.near_dup.near_duplicates` as a UDF; signatures of other sizes never match."""
    def check(a, b, words_a, words_b) -> bool:
        if len(a) != len(b):  # dedup.minhash_permutations changed during the crawl
            return False
        return near_dup.near_duplicates(bytes(a), bytes(b), int(words_a), int(words_b), jaccard_threshold,
                                        length_ratio)
    return F.udf(check, BooleanType())


def capped(rows: DataFrame, max_rows: int, order: tuple[str, ...] = ("first_fetched", "url_fp")) -> DataFrame:
    """``rows`` (with ``block_key``) keeping at most ``max_rows`` of each block key: the earliest by ``order``
    (a total order, so a rerun keeps the same rows); 0 keeps every row."""
    if int(max_rows) <= 0:
        return rows
    rank = F.row_number().over(Window.partitionBy("block_key").orderBy(*order))
    return rows.withColumn("_rank", rank).where(F.col("_rank") <= F.lit(int(max_rows))).drop("_rank")


def near_duplicate_of(cands: DataFrame, index: DataFrame, *, round_no: int, near_bits: int,
                      jaccard_threshold: float, length_ratio: float, max_bucket_rows: int = 0,
                      left: DataFrame | None = None) -> DataFrame:
    """``url_fp``, ``_near_of``: each candidate that is a near-duplicate of another page (index rows of rounds
    before ``round_no``, or another candidate of the round) with its original, and each index page a candidate
    beat by a consistent canonical, with that candidate (see the module). A candidate is paired with at most
    ``max_bucket_rows`` rows of each of its block keys (:func:`capped`). ``left``: url_fps of pages that
    have left since they were indexed (gone, or a duplicate now: :data:`jobs.originals.LEAVING_STATUSES`);
    their index rows are no original any more and are skipped (their copies were re-pointed when they left)."""
    k = int(near_bits)
    cols = ("url_fp", "host", "canonical_fp", "simhash", "minhash", "words", "first_fetched")
    mine = cands.select(*cols, F.explode(block_keys(F.col("simhash"), k)).alias("block_key"))
    keys = mine.select("block_key").distinct()
    indexed = (index.where(F.col("round") < F.lit(int(round_no)))
               .join(F.broadcast(keys), "block_key", "left_semi").select("block_key", *cols))
    if left is not None:  # the rows of the buckets hit against the crawl DB's few pages that left
        indexed = indexed.join(left.select("url_fp"), "url_fp", "left_anti")
    other = capped(indexed.withColumn("indexed", F.lit(True)).unionByName(mine.withColumn("indexed", F.lit(False))),
                   max_bucket_rows)
    other = other.select("block_key", *[F.col(c).alias(f"o_{c}") for c in (*cols, "indexed")])
    close = F.bit_count(F.col("simhash").bitwiseXOR(F.col("o_simhash"))) <= F.lit(k)
    pairs = (mine.join(other, "block_key").where(close & (F.col("o_url_fp") != F.col("url_fp")))
             .dropDuplicates(["url_fp", "o_url_fp"]))  # a pair agreeing on several blocks is one pair
    check = _second_check(float(jaccard_threshold), float(length_ratio))
    pairs = pairs.where(check(F.col("minhash"), F.col("o_minhash"), F.col("words"), F.col("o_words")))
    # each candidate's cluster: itself and the pages it is a near-duplicate of; jobs.originals decides.
    # One pass over the pairs (each gives its candidate's own row and the other page's), one over the ranks.
    def member(side: str, indexed: Column) -> Column:
        return F.struct(*[F.col(f"{side}{c}").alias(c) for c in MEMBER_COLUMNS], indexed.alias("indexed"))
    members = (pairs.select(F.col("url_fp").alias("_c"), F.explode(F.array(
        member("", F.lit(False)), member("o_", F.col("o_indexed")))).alias("m")).select("_c", "m.*").distinct())
    ranked = with_original(members, "_c")
    # a copy names its cluster's original; an index page in the cluster of a candidate that won it by a
    # consistent canonical becomes that candidate's copy
    copy = (F.col("url_fp") == F.col("_c")) & (F.col(ORIG) != F.col("_c"))
    won = (F.col(ORIG) == F.col("_c")) & F.col(BY_CANONICAL) & F.col("indexed")
    found = (ranked.select("url_fp", F.when(copy, F.col(ORIG)).when(won, F.col("_c")).alias(NEAR_OF))
             .where(F.col(NEAR_OF).isNotNull()).groupBy("url_fp").agg(F.min(NEAR_OF).alias(NEAR_OF)))
    hop = found.select(F.col("url_fp").alias("_hop_fp"), F.col(NEAR_OF).alias("_hop_of"))
    return (found.join(hop, F.col(NEAR_OF) == F.col("_hop_fp"), "left")
            .select("url_fp", F.coalesce(F.col("_hop_of"), F.col(NEAR_OF)).alias(NEAR_OF)))


def mark_near_duplicates(updated: DataFrame, near: DataFrame, *, duplicate_interval_s: float) -> DataFrame:
    """``updated`` with each row of ``near`` made a ``duplicate`` of its original (``dup_of``, the duplicate
    interval): the same change :func:`jobs.exact_dup_transforms.mark_duplicates` makes for an exact copy."""
    df = updated.join(near, "url_fp", "left")
    df = as_duplicates(df, F.col(NEAR_OF).isNotNull(), F.col(NEAR_OF),
                       duplicate_interval_s=duplicate_interval_s).drop(NEAR_OF)
    # an exact copy of a page this round found a near-duplicate names that page's original instead
    hop = near.select(F.col("url_fp").alias("_exact_of"), F.col(NEAR_OF).alias("_exact_near_of"))
    return (df.join(hop, F.col("dup_of") == F.col("_exact_of"), "left")
            .withColumn("dup_of", F.coalesce(F.col("_exact_near_of"), F.col("dup_of")))
            .drop("_exact_of", "_exact_near_of"))


def demotions(updated: DataFrame, near: DataFrame) -> DataFrame:
    """``url_fp``, ``_to``: the index pages of ``near`` not fetched this round that a candidate beat by a
    consistent canonical (:func:`jobs.originals.repoint` makes them its copies in the crawl DB)."""
    return near.join(updated.select("url_fp"), "url_fp", "left_anti").select("url_fp", F.col(NEAR_OF).alias("_to"))


def index_rows(cands: DataFrame, near: DataFrame, *, round_no: int, near_bits: int) -> DataFrame:
    """NEAR_DUP_INDEX rows of the round's candidates that are no near-duplicate: one per block key."""
    kept = cands.join(near.select("url_fp"), "url_fp", "left_anti")
    df = kept.select("*", F.explode(block_keys(F.col("simhash"), int(near_bits))).alias("block_key"),
                     F.lit(int(round_no)).cast("long").alias("round"))
    return df.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in NEAR_DUP_INDEX.fields])
