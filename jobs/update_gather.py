"""What the driver engine's update reads, gathered by Spark (``update.engine = "driver"``).

The decisions of a round (``jobs/update_decide.py``, DuckDB on the driver) read the round's own rows
and the rows of the crawl DB, ``hosts`` and ``near_dup_index`` that the round keys. ``jobs.update.decide``
collects the round's ``fetch_output`` and ``fetch_list`` first; :func:`keys` and :func:`block_keys`
compute the key sets from them on the driver, and Spark reads only the keyed rows, each table in one
scan joined with a broadcast of those local rows:

- :func:`index_rows` (``dedup.near_duplicates``): the ``near_dup_index`` rows of rounds before N whose
  ``block_key`` is a block key of one of the round's page SimHashes (a superset of the candidates' keys:
  the lookup semi-joins on those, and the bucket cap counts within a key);
- :func:`crawldb_rows`: ONE scan of the pinned crawl-DB snapshot, the rows that match any of
    1. ``url_fp`` one of the round's URLs or outlink targets (``jobs.crawldb_slice.round_keys``): every
       column (prepare, discover, sitemaps, moves);
    2. ``host`` a host whose duplicate URL patterns the round learns again
       (``pattern_transforms.learning_hosts``), a stored page in its sample (``in_sample``):
       :data:`jobs.crawldb_slice.HOST_COLUMNS` (the other columns null unless another key matches).
       Bounded by ``dedup.pattern_sample_pages`` a host, not by the host's size, and a host is
       learnt again only when its fetched pages grew ~10 %, so in proportion to the round: the counterparts
       the sampled pages name come from :func:`counterpart_rows`, a keyed read, and the other
       readers of a host's rows are keyed instead (robots refresh: the hosts' sitemap URLs are in
       key 1; trap signals: a first copy's original is a round row or a key 3 or 4 row);
    3. ``digest`` one of the round's page digests, ``status`` fetched or not_modified: every column
       (``exact_dup_transforms.exact_members``: the stored copies of the round's digests);
    4. ``url_fp`` one of the gathered index rows': every column (``originals.left_pages``);
  with the pre-round count of eligible rows observed on the scan (``frontier_before``);
- :func:`hosts_rows`: the rows of the round's hosts and of its outlinks' hosts, and of every host out
  of budget under the current budgets (``hosts_transforms.exhausted_hosts`` reads those);
- :func:`stored_buckets` (``schedule.policy = "adaptive"`` only): the crawl-DB aggregate of the round's
  multiplier.

Three reads depend on decisions and run only in a round that needs them: :func:`repoint_rows`
(copies of originals that left), :func:`budget_rows` (URLs of hosts that reached their budget this
round) and :func:`counterpart_rows` (the counterparts pattern learning lacks). The crawl DB is
scanned, never shuffled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from crawl_udfs.config import Config
from jobs import crawldb_slice as S
from jobs import hosts_transforms as HT
from jobs import originals as O
from jobs import pattern_transforms as P
from schemas.status import STORED


@dataclass(frozen=True)
class Keys:
    """The key sets of a round (small DataFrames, each broadcast; :func:`keys` computes them on the driver)."""

    url_fps: DataFrame      # ``url_fp``: the round's URLs, outlink targets, sitemap URLs (1.), index rows' (4.)
    digests: DataFrame      # ``digest``: the round's page digests (3.)
    link_hosts: DataFrame   # ``host``: those and the hosts of the round's outlinks (``hosts`` rows)


def keys(con, fetch_output, index_fps=None):
    """The key sets from the round's rows collected on the driver (``fetch_output``: a DuckDB relation;
    ``index_fps``: the gathered index rows' ``url_fp``, or None), as DuckDB relations by :class:`Keys` field."""
    from jobs import duck_discover as DD
    from jobs import duck_engine as E
    by_url = E.query(con, f"""SELECT url_fp FROM {{keys}} UNION
                              SELECT {E.XXHASH64}(unnest(sitemap_urls)) AS url_fp FROM {{fo}}
                              WHERE kind = 'host' AND sitemap_urls IS NOT NULL""",
                     keys=DD.round_keys(con, fetch_output), fo=fetch_output)
    if index_fps is not None:
        by_url = E.query(con, "SELECT url_fp FROM {a} UNION SELECT url_fp FROM {b}", a=by_url, b=index_fps)
    pages = "SELECT * FROM {fo} WHERE kind = 'page'"
    return {"url_fps": by_url,
            "digests": E.query(con, f"SELECT DISTINCT digest FROM ({pages}) WHERE digest IS NOT NULL", fo=fetch_output),
            "link_hosts": E.query(con, f"""SELECT host FROM {{fo}} WHERE host IS NOT NULL
                                           UNION SELECT unnest(outlinks).host AS host FROM ({pages})""", fo=fetch_output)}


def block_keys(con, fetch_output, near_bits: int):
    """``block_key`` of every SimHash of the round's page rows (a superset of the near-duplicate candidates')."""
    from jobs import duck_duplicates as DX
    from jobs import duck_engine as E
    return E.query(con, f"""SELECT DISTINCT unnest({DX.block_keys('simhash', near_bits)}) AS block_key
                            FROM {{fo}} WHERE kind = 'page' AND simhash IS NOT NULL""", fo=fetch_output)


def index_rows(near_dup_index: DataFrame, block_keys: DataFrame, *, round_no: int) -> DataFrame:
    """The ``near_dup_index`` rows of rounds before ``round_no`` whose ``block_key`` is one of ``block_keys``."""
    return (near_dup_index.where(F.col("round") < F.lit(int(round_no)))
            .join(F.broadcast(block_keys), "block_key", "left_semi"))


def crawldb_rows(crawldb: DataFrame, keys: Keys, learning: DataFrame | None, *,
                 observe: Callable[[str, Any], Any] = lambda name, df: df) -> DataFrame:
    """The crawl-DB rows of the module's keys 1.-4., in one scan; ``observe`` gets the whole scan (``crawldb``).
    ``learning``: ``pattern_transforms.learning_hosts`` (key 2; None: ``dedup.learn_patterns`` off, none)."""
    stored = F.col("status").isin(*O.ORIGINAL_STATUSES)
    if learning is None:
        learning = crawldb.sparkSession.createDataFrame([], "host string, threshold long")
    by_host = learning.select("host", F.lit(True).alias("_by_host"), F.col("threshold").alias("_threshold"))
    rows = (observe("crawldb", crawldb)
            .join(F.broadcast(keys.url_fps.select("url_fp", F.lit(True).alias("_by_url"))), "url_fp", "left")
            .join(F.broadcast(keys.digests.select("digest", F.lit(True).alias("_by_digest"))), "digest", "left")
            .join(F.broadcast(by_host), "host", "left"))
    whole = F.col("_by_url").isNotNull() | (F.col("_by_digest").isNotNull() & stored)
    sampled = (F.col("_by_host").isNotNull() & F.col("status").isin(*[s.value for s in STORED])
               & P.in_sample(F.col("url_fp"), F.col("_threshold")))
    rows = rows.where(whole | sampled)
    return rows.select([F.col(c) if c in S.HOST_COLUMNS else F.when(whole, F.col(c)).alias(c) for c in crawldb.columns])


def hosts_rows(hosts: DataFrame, keys: Keys, conf: Config) -> DataFrame:
    """The ``hosts`` rows of the round's and its outlinks' hosts, and of every host out of budget."""
    wanted = F.broadcast(keys.link_hosts.select("host", F.lit(True).alias("_wanted")))
    out_of_budget = HT.budget_reason(conf.budget.max_pages_per_host, conf.budget.max_bytes_per_host).isNotNull()
    return hosts.join(wanted, "host", "left").where(F.col("_wanted").isNotNull() | out_of_budget).select(*hosts.columns)


def repoint_rows(crawldb: DataFrame, gone_fps: DataFrame) -> DataFrame:
    """The crawl-DB rows :func:`jobs.originals.repoint` reads for originals that left (``gone_fps``: ``url_fp``):
    rows whose ``url_fp`` or ``dup_of`` is one of them, every column (the re-pointed ones are written whole:
    ``jobs.duck_outputs.whole_rows``)."""
    return O.stored_rows(crawldb, gone_fps, columns=crawldb.columns)


def counterpart_rows(crawldb: DataFrame, fps: DataFrame) -> DataFrame:
    """The crawl-DB rows pattern learning looks its sampled pages' counterparts up in (``fps``:
    ``url_fp``, ``jobs.duck_patterns.missing_counterparts``), in :data:`jobs.crawldb_slice.HOST_COLUMNS`."""
    return crawldb.join(F.broadcast(fps.select("url_fp")), "url_fp", "left_semi").select(*S.HOST_COLUMNS)


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
