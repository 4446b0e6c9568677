"""What the driver engine's update reads, gathered by Spark in one pass (``update.engine = "driver"``).

The decisions of a round (``jobs/update_decide.py``, DuckDB on the driver) read the round's own rows
and the rows of the crawl DB, ``hosts`` and ``near_dup_index`` that the round keys. Spark reads those
tables (they are O(crawl DB)) and hands over only the keyed rows, as Arrow:

- ``fetch_output`` and ``fetch_list`` of round N (every row: they are the round);
- ``crawldb``: ONE scan of the pinned snapshot, the rows that match any of
    1. ``url_fp`` a key of :func:`jobs.crawldb_slice.round_keys` (the round's URLs and outlink targets):
       every column (prepare, discover, sitemaps, moves);
    2. ``host`` a host of the round's rows: :data:`jobs.crawldb_slice.HOST_COLUMNS` (pattern learning,
       trap signals; the other columns null unless another key matches);
    3. ``digest`` one of the round's page digests, ``status`` fetched or not_modified: every column
       (``exact_dup_transforms.exact_members``: the stored copies of the round's digests);
    4. ``url_fp`` one of the :data:`near_dup_index` rows gathered below: every column
       (``originals.left_pages``: which indexed originals have left);
  with the pre-round count of eligible rows observed on the scan (``frontier_before``, as today);
- ``hosts``: the rows of the round's hosts and of its outlinks' hosts, and of every host out of budget
  under the current budgets (``hosts_transforms.exhausted_hosts`` reads those);
- ``near_dup_index`` (``dedup.near_duplicates``): the rows of rounds before N whose ``block_key`` is a
  block key of one of the round's page SimHashes (a superset of the candidates' keys: the lookup
  semi-joins on those, and the bucket cap counts within a key).

Two reads depend on decisions and run only when the round needs them, as in the Spark plan:
:func:`repoint_rows` (copies of originals that left) and :func:`budget_rows` (URLs of hosts that
reached their budget this round). Each key set is broadcast (the round's size); the crawl DB is scanned,
never shuffled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from crawl_udfs.config import Config
from jobs import crawldb_slice as S
from jobs import dedup_transforms as D
from jobs import hosts_transforms as HT
from jobs import originals as O


@dataclass(frozen=True)
class Gathered:
    """Spark DataFrames of what the round's decisions read (each collected once by the engine)."""

    fetch_output: DataFrame
    fetch_list: DataFrame
    crawldb: DataFrame
    hosts: DataFrame
    near_dup_index: DataFrame | None


def gather(crawldb: DataFrame, hosts: DataFrame, fetch_output: DataFrame, fetch_list: DataFrame, conf: Config, *,
           round_no: int, near_dup_index: DataFrame | None = None,
           observe: Callable[[str, Any], Any] = lambda name, df: df) -> Gathered:
    """The keyed rows (see the module); ``observe`` is applied to the whole crawl-DB scan (name ``crawldb``)."""
    pages = fetch_output.where(F.col("kind") == "page")
    index = None
    if near_dup_index is not None:
        k = int(conf.simhash.near_duplicate_bits)
        keys = (pages.where(F.col("simhash").isNotNull())
                .select(F.explode(D.block_keys(F.col("simhash"), k)).alias("block_key")).distinct())
        index = (near_dup_index.where(F.col("round") < F.lit(int(round_no)))
                 .join(F.broadcast(keys), "block_key", "left_semi"))
    by_url = S.round_keys(fetch_output).select("url_fp", F.lit(True).alias("_by_url"))
    if index is not None:
        by_url = by_url.unionByName(index.select("url_fp", F.lit(True).alias("_by_url"))).distinct()
    digests = (pages.where(F.col("digest").isNotNull()).select("digest", F.lit(True).alias("_by_digest"))
               .distinct())
    round_hosts = fetch_output.where(F.col("host").isNotNull()).select("host").distinct()
    stored = F.col("status").isin(*O.ORIGINAL_STATUSES)
    rows = (observe("crawldb", crawldb).join(F.broadcast(by_url), "url_fp", "left")
            .join(F.broadcast(digests), "digest", "left")
            .join(F.broadcast(round_hosts.select("host", F.lit(True).alias("_by_host"))), "host", "left"))
    whole = F.col("_by_url").isNotNull() | (F.col("_by_digest").isNotNull() & stored)
    rows = rows.where(whole | F.col("_by_host").isNotNull())
    rows = rows.select([F.col(c) if c in S.HOST_COLUMNS else F.when(whole, F.col(c)).alias(c) for c in crawldb.columns])
    link_hosts = pages.select(F.explode("outlinks").alias("l")).select(F.col("l.host").alias("host"))
    wanted = F.broadcast(round_hosts.unionByName(link_hosts).where(F.col("host").isNotNull()).distinct()
                         .select("host", F.lit(True).alias("_wanted")))
    out_of_budget = HT.budget_reason(conf.budget.max_pages_per_host, conf.budget.max_bytes_per_host).isNotNull()
    host_rows = (hosts.join(wanted, "host", "left").where(F.col("_wanted").isNotNull() | out_of_budget)
                 .select(*hosts.columns))
    return Gathered(fetch_output=fetch_output, fetch_list=fetch_list, crawldb=rows, hosts=host_rows,
                    near_dup_index=index)


def repoint_rows(crawldb: DataFrame, gone_fps: DataFrame) -> DataFrame:
    """The crawl-DB rows :func:`jobs.originals.repoint` reads for originals that left (``gone_fps``: ``url_fp``):
    rows whose ``url_fp`` or ``dup_of`` is one of them, in :data:`jobs.originals.REPOINT_COLUMNS`."""
    keys = F.broadcast(gone_fps.select(F.col("url_fp").alias("_k")).distinct())
    return (crawldb.select(*O.REPOINT_COLUMNS, F.explode(F.array("url_fp", "dup_of")).alias("_k"))
            .join(keys, "_k", "left_semi").drop("_k").dropDuplicates(["url_fp"]))


def budget_rows(crawldb: DataFrame, reached: DataFrame) -> DataFrame:
    """The crawl-DB rows :func:`jobs.hosts_transforms.budget_rows` reads for hosts that reached their budget
    this round (``reached``: ``host``): their unfetched rows, every column."""
    from schemas.status import Status
    return (crawldb.where(F.col("status") == Status.UNFETCHED.value)
            .join(F.broadcast(reached.select("host").distinct()), "host", "left_semi"))


def stored_buckets(crawldb: DataFrame, fetch_output: DataFrame, schedule) -> DataFrame:
    """The crawl-DB aggregate of the adaptive policy's multiplier (``jobs.duck_schedule.stored_buckets_sql``:
    per bucket of rate and weight, the stored pages outside the round), one small Spark job."""
    from jobs.duck_schedule import stored_buckets_sql
    spark = crawldb.sparkSession
    crawldb.createOrReplaceTempView("_gather_crawldb")
    fetch_output.where(F.col("kind") == "page").select("url_fp").createOrReplaceTempView("_gather_round_urls")
    return spark.sql(stored_buckets_sql(schedule, "_gather_crawldb", "_gather_round_urls"))
