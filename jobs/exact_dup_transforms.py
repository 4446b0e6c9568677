"""Pure transforms of ``update`` for exact duplicates: copies of one payload digest.

DataFrames in, DataFrames out, plain values as parameters; no table is read or written here
(STYLE.md rule 2). ``jobs/update.py`` runs them after :func:`jobs.update_transforms.transition`
and before the near-duplicates (``jobs/dedup_transforms.py``, which marks its copies with
:func:`as_duplicates` too). Which copy is the original is ``jobs/originals.py``'s.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.originals import MEMBER_COLUMNS, ORIG, ORIGINAL_STATUSES, first_copy_time, with_original
from jobs.update_transforms import BASE, CAT, KEEP, plus_seconds
from schemas.status import Status


def exact_members(updated: DataFrame, crawldb: DataFrame) -> DataFrame:
    """``digest``, ``_batch`` and :data:`jobs.originals.MEMBER_COLUMNS` of every copy of the batch's digests:
    the batch's ok/304 rows, and the crawl DB's fetched/not_modified rows not re-decided by the batch."""
    cols = ("digest", *MEMBER_COLUMNS)
    batch = (updated.where(F.col("_stored") & F.col("digest").isNotNull())
             .withColumn("first_fetched", first_copy_time()).select(*cols, F.lit(True).alias("_batch")))
    touched = updated.where(F.col(CAT) != KEEP).select("url_fp")
    digests = batch.select("digest").distinct()
    stored = (crawldb.where(F.col("status").isin(*ORIGINAL_STATUSES) & F.col("digest").isNotNull())
              .join(F.broadcast(digests), "digest", "left_semi")
              .join(touched, "url_fp", "left_anti")
              .withColumn("first_fetched", first_copy_time()).select(*cols, F.lit(False).alias("_batch")))
    return batch.unionByName(stored)


def mark_duplicates(updated: DataFrame, crawldb: DataFrame, *, duplicate_interval_s: float,
                    members: DataFrame | None = None) -> DataFrame:
    """Mark ok/304 rows whose digest is another URL's stored copy as ``duplicate``.

    Copies of a digest: :func:`exact_members` (``members``, when the caller has them). Their original is
    `jobs.originals.with_original`'s (a consistent same-site canonical, else the earliest fetched, ties by
    the smallest ``url_fp``); every other copy among the batch's rows becomes ``duplicate`` with ``dup_of`` =
    the original. A crawl-DB copy that lost is :func:`exact_demotions`'.
    """
    members = exact_members(updated, crawldb) if members is None else members
    df = updated.join(with_original(members, "digest").select("digest", ORIG).distinct(), "digest", "left")
    dup = F.col("_stored") & F.col(ORIG).isNotNull() & (F.col(ORIG) != F.col("url_fp"))
    return as_duplicates(df, dup, F.col(ORIG), duplicate_interval_s=duplicate_interval_s).drop(ORIG)


def exact_demotions(members: DataFrame) -> DataFrame:
    """``url_fp``, ``_to``: crawl-DB originals (not of the batch) whose digest's original is now another page
    (a canonical target of the batch, or a copy fetched earlier): duplicates of it from this round."""
    return (with_original(members, "digest").where(~F.col("_batch") & (F.col(ORIG) != F.col("url_fp")))
            .select("url_fp", F.col(ORIG).alias("_to")))


def as_duplicates(df: DataFrame, dup: Column, original: Column, *, duplicate_interval_s: float) -> DataFrame:
    """Rows where ``dup`` holds become ``duplicate`` copies of ``original`` (``dup_of``), due again after
    ``duplicate_interval_s``; the one change for exact and near duplicates (``jobs/dedup_transforms.py``)."""
    iv = F.lit(float(duplicate_interval_s))
    df = df.withColumn("_dup", dup)
    dup = F.col("_dup")
    return (df.withColumn("status", F.when(dup, Status.DUPLICATE.value).otherwise(F.col("status")))
            .withColumn("dup_of", F.when(dup, original).otherwise(F.col("dup_of")))
            .withColumn("fetch_interval_s", F.when(dup, iv).otherwise(F.col("fetch_interval_s")))
            .withColumn("next_fetch_time", F.when(dup, plus_seconds(F.col(BASE), iv))
                        .otherwise(F.col("next_fetch_time")))
            .drop("_dup"))
