"""Pure transforms of ``update`` that learn each host's duplicate URL patterns (``hosts.dup_patterns``).

DataFrames in, DataFrames out, plain values as parameters (STYLE.md rule 2). ``jobs/update.py``
runs them with ``dedup.learn_patterns`` on, after the round's duplicates are marked (exact and,
with ``dedup.near_duplicates``, near), for the hosts of the round only:

    learning_hosts(fetch_output, fetch_list, hosts, sample_pages=)
                                          the round's hosts whose evidence grew enough, their samples
    stored_pages(crawldb, updated, learning)
                                          those hosts' pages as this round leaves them, sampled
    learn(pages, min_pages=, min_share=)  host -> dup_patterns (the rules and their evidence)
    with_patterns(hosts_new, learnt, learning)
                                          those hosts' rows with their dup_patterns replaced

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

Rules are recomputed in a round where the host's fetched pages (``hosts.pages_fetched`` as the round's
fetch list carries it, :func:`listed_pages`, plus the round's responses) pass one of
:data:`RELEARN_AT` (every count up to 10, then each ~10 % above the last): so they follow the
evidence, and a round re-reads a host in proportion to what it added to it, not to its size (a host
of 100,000 pages is learnt again after ~10,000 more, a new host after each page). The other hosts
keep their rules. The pages a rule skips are not fetched again, so the evidence of a rule stays.

**A sample, not the whole host.** The pages counted are the host's stored pages whose ``url_fp``
falls in its sample (:func:`in_sample`): every page while the host has fetched at most
``dedup.pattern_sample_pages`` pages (``hosts.pages_fetched``, which bounds its stored pages), else
the pages whose low :data:`SAMPLE_BITS` bits of ``url_fp`` (a hash: uniform) are under
:func:`sample_threshold` — about that many pages, whatever the host's size. Their counterparts are
looked up among all the host's rows, so a sampled page's evidence is the whole crawl DB's: only the
number of pages counted shrinks (a rule's ``pages`` is the sample's count, ``dup_share`` its share;
a feature carried by fewer than ``min_pages / sample share`` pages of a big host goes unlearnt).
Why: without it the update of a round that touches a host of 2 M URLs reads all of them, and the
driver engine collects them (``bench/bigdb.py``: 6.9 M rows, 2 GB, at 10 M crawl-DB rows), so its
memory grew with the crawl DB, not the round. Cost: the UDF computes features (a handful per URL)
for the sampled pages only.
"""

from __future__ import annotations

import math

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


#: Pattern learning's sample (module docstring): the low bits of ``url_fp`` it is drawn by.
SAMPLE_BITS = 20
SAMPLE_SPAN = 1 << SAMPLE_BITS
#: Fetched-page counts at which a host's rules are learnt again (module docstring): ceil(1.1 ** k).
RELEARN_AT = tuple(sorted({math.ceil(1.1 ** k) for k in range(440)}))


def learning_hosts(fetch_output: DataFrame, fetch_list: DataFrame, hosts: DataFrame, *,
                   sample_pages: int) -> DataFrame:
    """(host, threshold): the hosts of the round's rows whose fetched pages pass a :data:`RELEARN_AT` count
    this round (:func:`listed_pages` before, null 0, plus the round's page rows with a response), with
    their :func:`sample_threshold` (``hosts``: the pre-round rows)."""
    responses = F.when((F.col("kind") == "page") & F.col("status_code").isNotNull(), 1).otherwise(0)
    round_hosts = (fetch_output.where(F.col("host").isNotNull()).groupBy("host")
                   .agg(F.sum(responses).cast("long").alias("_responses")))
    before = F.coalesce(F.col("pages_fetched"), F.lit(0).cast("long"))
    after = before + F.col("_responses")
    passes = F.exists(F.array(*[F.lit(b).cast("long") for b in RELEARN_AT]), lambda b: (b > before) & (b <= after))
    return (round_hosts.join(listed_pages(round_hosts, fetch_list, hosts), "host", "left")
            .where(passes).select("host", sample_threshold(F.col("pages_fetched"), sample_pages).alias("threshold")))


def listed_pages(round_hosts: DataFrame, fetch_list: DataFrame, hosts: DataFrame) -> DataFrame:
    """(host, pages_fetched) of ``round_hosts``' hosts: the value the round's fetch list carries
    (``hosts.pages_fetched`` when generate listed it, so update reads no ``hosts`` row for it), else,
    for a host the list holds no value of (a round listed before the column existed), the pre-round
    ``hosts`` row's. Generate lists a pipelined round from ``hosts`` as the pending update will leave
    them (``jobs/pending_round.hosts_after``), so the listed count is the pre-round count there too."""
    listed = fetch_list.groupBy("host").agg(F.max("pages_fetched").alias("_listed"))
    wanted = round_hosts.select("host").join(listed, "host", "left")
    lacking = wanted.where(F.col("_listed").isNull()).select("host")
    stored = touching(hosts, lacking, "host").select("host", F.col("pages_fetched").alias("_stored"))
    return (wanted.join(stored, "host", "left")
            .select("host", F.coalesce(F.col("_listed"), F.col("_stored")).alias("pages_fetched")))


def sample_threshold(pages_fetched: Column, sample_pages: int) -> Column:
    """A host's sample threshold from its ``hosts.pages_fetched`` (null: 0): :data:`SAMPLE_SPAN` (every
    page) up to ``sample_pages``, else ``SAMPLE_SPAN * sample_pages / pages_fetched`` rounded down (an
    expected ``sample_pages`` pages at most: a stored page was fetched at least once)."""
    fetched = F.coalesce(pages_fetched, F.lit(0))
    part = F.floor(F.lit(float(SAMPLE_SPAN * int(sample_pages))) / fetched)
    return F.when(fetched <= F.lit(int(sample_pages)), F.lit(SAMPLE_SPAN).cast("long")).otherwise(part)


def in_sample(url_fp: Column, threshold: Column) -> Column:
    """Whether a URL is in its host's sample (``threshold``: :func:`sample_threshold`; null: every URL)."""
    return url_fp.bitwiseAND(F.lit(SAMPLE_SPAN - 1)) < F.coalesce(threshold, F.lit(SAMPLE_SPAN).cast("long"))


def stored_pages(crawldb: DataFrame, updated: DataFrame, learning: DataFrame) -> DataFrame:
    """(host, url, url_fp, original, sampled) of every crawl-DB row of the ``learning`` hosts
    (:func:`learning_hosts`) after this round (the round's ``updated`` rows over the pre-round rows of
    the same hosts); ``original`` is ``coalesce(dup_of, url_fp)`` for a stored page (fetched,
    not_modified, duplicate), else null; ``sampled``: a stored page in its host's sample."""
    cols = ("host", "url", "url_fp", "status", "dup_of")
    hosts = F.broadcast(learning.select("host", F.col("threshold").alias("_threshold")))
    now = updated.select(*cols).join(hosts, "host", "left_semi")
    before = touching(crawldb, now, "host").select(*cols).join(now.select("url_fp"), "url_fp", "left_anti")
    stored = F.col("status").isin([s.value for s in STORED])
    return (before.unionByName(now).join(hosts, "host", "left")
            .select("host", "url", "url_fp", F.when(stored, F.coalesce("dup_of", "url_fp")).alias("original"),
                    (F.coalesce(stored, F.lit(False)) & in_sample(F.col("url_fp"), F.col("_threshold")))
                    .alias("sampled")))


def learn(pages: DataFrame, *, min_pages: int, min_share: float) -> DataFrame:
    """(host, dup_patterns) for every host of ``pages`` (:func:`stored_pages`) with a rule learnt from
    its sampled pages; ``dup_patterns`` sorted by pattern, each with its evidence: ``pages`` and ``dup_share``.

    A stored page whose counterpart the crawl DB knows but has not stored yet (unfetched, failed) is
    no evidence either way and is not counted; one whose counterpart is not in the crawl DB at all
    counts against the feature (nothing known serves its content elsewhere)."""
    feats = F.udf(_features, FEATURES)
    per_feature = (pages.where(F.col("sampled"))
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


def with_patterns(hosts_new: DataFrame, learnt: DataFrame, learning: DataFrame) -> DataFrame:
    """``hosts_new`` (the round's hosts rows) with ``dup_patterns`` set to what :func:`learn` found for
    the ``learning`` hosts (null: none learnt); the other hosts keep theirs."""
    base = hosts_new.withColumnRenamed("dup_patterns", "_kept") if "dup_patterns" in hosts_new.columns \
        else hosts_new.withColumn("_kept", F.lit(None).cast(learnt.schema["dup_patterns"].dataType))
    relearnt = F.broadcast(learning.select("host", F.lit(True).alias("_relearnt")))
    out = (base.join(F.broadcast(learnt.select("host", "dup_patterns")), "host", "left").join(relearnt, "host", "left")
           .withColumn("dup_patterns", F.when(F.col("_relearnt").isNotNull(), F.col("dup_patterns"))
                       .otherwise(F.col("_kept"))))
    return out.drop("_kept", "_relearnt")


def reason(rule: dict) -> str:
    """One line of evidence for a rule: ``/print/: 12 of 12 fetched pages copy the URL without it``."""
    dups = round(rule["pages"] * rule["dup_share"])
    return f"{rule['pattern']}: {dups} of {rule['pages']} fetched pages copy the URL without it"


def skipped(url: Column, patterns: Column) -> Column:
    """Whether a URL matches one of its host's learnt patterns (``crawl_udfs.url_patterns.matches_column``)."""
    return url_patterns.matches_column(url, patterns)
