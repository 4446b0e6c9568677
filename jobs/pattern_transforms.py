"""Pure transforms of ``update`` that learn each host's duplicate URL patterns (``hosts.dup_patterns``).

DataFrames in, DataFrames out, plain values as parameters (STYLE.md rule 2). ``jobs/update.py``
runs them with ``dedup.learn_patterns`` on, after the round's duplicates are marked (exact and,
with ``dedup.near_duplicates``, near), for the hosts of the round only:

    stored_pages(crawldb, updated)        the round's hosts' stored pages as this round leaves them
    learn(pages, min_pages=, min_share=)  host -> dup_patterns (the rules and their evidence)
    with_patterns(hosts_new, learnt)      the round's hosts rows with their dup_patterns replaced

The rule, decided here once (the features and the matching: ``crawl_udfs/url_patterns.py``):
for every stored page (status fetched, not_modified or duplicate) of a host and every feature
of its URL (first path segment ``/print/``, query parameter ``?ref`` and ``?ref=front``), the
page counts under the feature unless its counterpart (the URL without the feature) is a crawl-DB
URL not stored yet (no evidence either way: it waits), and counts as a *duplicate* under it when
the counterpart is a stored page of the host with the same content: both share an original
(``coalesce(dup_of, url_fp)`` is equal; exact and near duplicates alike). A counterpart the
crawl DB does not know counts against the feature. A feature
with at least ``min_pages`` pages (``dedup.pattern_min_pages``) of which at least ``min_share``
(``dedup.pattern_min_share``) are duplicates is learnt. A ``?name`` rule also needs two distinct
values among its duplicates (a session id, ``ref=front`` and ``ref=home``): when one value
carries the evidence (``?page=1``) only ``?page=1`` is learnt, not ``?page``, so the other pages
of a paginated list stay crawlable. A ``?name=value`` rule under a learnt ``?name`` is dropped.

Rules are recomputed from the host's whole crawl DB each round it is in, so they follow the
evidence; the pages a rule skips are not fetched again, so the evidence of a rule stays. Cost:
one scan of the crawl DB's ``host``/``url``/``url_fp``/``status``/``dup_of`` semi-joined with the
round's broadcast hosts (like trap detection), then work in the round's hosts' stored pages
(a Python UDF computes the features, ~a handful per URL).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from crawl_udfs import url_patterns
from jobs.update_transforms import touching
from schemas.status import STORED

#: The UDF's result: each feature of a URL with the fingerprint of its counterpart.
FEATURES = ArrayType(StructType([
    StructField("pattern", StringType()), StructField("kind", StringType()),
    StructField("value", StringType()), StructField("counterpart_fp", LongType())]))


def _features(url: str | None) -> list[tuple]:
    from crawl_udfs.url_normalize import fingerprint
    if url is None:
        return []
    return [(f.pattern, f.kind, f.value, fingerprint(f.counterpart)) for f in url_patterns.features(url)]


def stored_pages(crawldb: DataFrame, updated: DataFrame) -> DataFrame:
    """(host, url, url_fp, original) of every crawl-DB row of the round's hosts after this round (the
    round's ``updated`` rows over the pre-round rows of the same hosts); ``original`` is
    ``coalesce(dup_of, url_fp)`` for a stored page (fetched, not_modified, duplicate), else null."""
    cols = ("host", "url", "url_fp", "status", "dup_of")
    now = updated.select(*cols)
    before = touching(crawldb, now, "host").select(*cols).join(now.select("url_fp"), "url_fp", "left_anti")
    stored = F.col("status").isin([s.value for s in STORED])
    return (before.unionByName(now)
            .select("host", "url", "url_fp", F.when(stored, F.coalesce("dup_of", "url_fp")).alias("original")))


def learn(pages: DataFrame, *, min_pages: int, min_share: float) -> DataFrame:
    """(host, dup_patterns) for every host of ``pages`` (:func:`stored_pages`) with a rule learnt;
    ``dup_patterns`` sorted by pattern, each with its evidence: ``pages`` and ``dup_share``.

    A stored page whose counterpart the crawl DB knows but has not stored yet (unfetched, failed) is
    no evidence either way and is not counted; one whose counterpart is not in the crawl DB at all
    counts against the feature (nothing known serves its content elsewhere)."""
    feats = F.udf(_features, FEATURES)
    per_feature = (pages.where(F.col("original").isNotNull())
                   .select("host", "original", F.explode(feats("url")).alias("f")).select("host", "original", "f.*"))
    counterpart = pages.select(F.col("url_fp").alias("counterpart_fp"), F.col("original").alias("c_original"),
                               F.lit(True).alias("c_known"))
    dup = F.coalesce(F.col("c_original") == F.col("original"), F.lit(False))
    pending = F.col("c_known").isNotNull() & F.col("c_original").isNull()
    stats = (per_feature.join(counterpart, "counterpart_fp", "left").where(~pending)
             .groupBy("host", "pattern", "kind")
             .agg(F.count(F.lit(1)).alias("pages"), F.sum(dup.cast("int")).alias("dups"),
                  F.countDistinct(F.when(dup, F.col("value"))).alias("dup_values")))
    learnt = stats.where((F.col("pages") >= F.lit(int(min_pages)))
                         & (F.col("dups") >= F.col("pages") * F.lit(float(min_share)))
                         & ((F.col("kind") != F.lit(url_patterns.PARAM)) | (F.col("dup_values") >= 2)))
    names = (learnt.where(F.col("kind") == F.lit(url_patterns.PARAM))
             .select("host", F.col("pattern").alias("name")))
    value_name = F.regexp_extract(F.col("pattern"), r"^(\?[^=]*)", 1)
    learnt = (learnt.withColumn("name", F.when(F.col("kind") == F.lit(url_patterns.PARAM_VALUE), value_name))
              .join(names, ["host", "name"], "left_anti"))
    rule = F.struct("pattern", "kind", F.col("pages").cast("int").alias("pages"),
                    (F.col("dups") / F.col("pages")).alias("dup_share"))
    return learnt.groupBy("host").agg(F.sort_array(F.collect_list(rule)).alias("dup_patterns"))


def with_patterns(hosts_new: DataFrame, learnt: DataFrame) -> DataFrame:
    """``hosts_new`` (the round's hosts rows) with ``dup_patterns`` set to what :func:`learn` found
    (null: none learnt)."""
    base = hosts_new.drop("dup_patterns") if "dup_patterns" in hosts_new.columns else hosts_new
    return base.join(F.broadcast(learnt.select("host", "dup_patterns")), "host", "left")


def reason(rule: dict) -> str:
    """One line of evidence for a rule: ``/print/: 12 of 12 fetched pages copy the URL without it``."""
    dups = round(rule["pages"] * rule["dup_share"])
    return f"{rule['pattern']}: {dups} of {rule['pages']} fetched pages copy the URL without it"


def skipped(url: Column, patterns: Column) -> Column:
    """Whether a URL matches one of its host's learnt patterns (``crawl_udfs.url_patterns.matches_column``)."""
    return url_patterns.matches_column(url, patterns)
