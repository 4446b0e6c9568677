"""The crawl-DB rows one round's update reads by URL or by host, in one scan (a pure transform).

``jobs/update.py`` stages this slice once (Parquet written, read back) and hands it, in place of the
crawl DB, to every step whose crawl-DB read is keyed by the round's URLs or hosts:

- :func:`jobs.update_transforms.prepare`: the rows of the round's URLs (every column);
- :func:`jobs.discover_transforms.discover`: which outlink targets are known (``url_fp``);
- :func:`jobs.pattern_transforms.stored_pages`: every row of the round's learning hosts
  (``host``, ``url``, ``url_fp``, ``status``, ``dup_of``);
- :func:`jobs.hosts_transforms.trap_signals`: an original's host (``url_fp``, ``host``). A copy
  counts against its host when its original is on the same host, and every copy is a page of a
  round's host: an original the slice lacks is on another host, which counts as the crawl DB's
  answer would (no evidence).

Each of these semi-joins on the slice gives the rows its semi-join on the whole crawl DB gives. The
steps keyed by content or by decisions of the round (exact members by digest, the lookup's pages that
left, re-pointing by ``dup_of``, budget rows) still read the crawl DB: their keys are not known
before the round's rows are decided.

Why: every plan that reads the crawl DB (a Delta table with deletion vectors) pays Delta's snapshot
and file-listing jobs when it is planned, 5-7 Spark jobs each (``bench/verb_cost.py --job-names``);
one read instead of five. Cost: the slice holds every row of the round's hosts in the five
columns above, the other columns only for the round's URLs and outlink targets. This is the Spark
plan's (``update.engine = "spark"``), staged as Parquet, so on disk: it grows with the round's hosts'
sizes. The driver engine gathers keyed rows instead (``jobs/update_gather.py``), bounded by the round.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

#: Columns of a row of the round's hosts that the slice keeps (the others only for rows keyed by URL).
HOST_COLUMNS = ("url_fp", "host", "url", "status", "dup_of")


def round_keys(fetch_output: DataFrame) -> DataFrame:
    """``url_fp`` of the round's page rows and of every outlink target of them (distinct)."""
    pages = fetch_output.where(F.col("kind") == "page")
    links = pages.select(F.explode("outlinks").alias("l")).select(F.col("l.url_fp").alias("url_fp"))
    return pages.select("url_fp").unionByName(links).where(F.col("url_fp").isNotNull()).distinct()


def round_slice(crawldb: DataFrame, fetch_output: DataFrame) -> DataFrame:
    """The crawl-DB rows whose ``url_fp`` is a :func:`round_keys` key (every column) or whose host is a
    host of the round's rows (page and host rows: :data:`HOST_COLUMNS`, the others null). Both
    are broadcast joins: the crawl DB is scanned once and never shuffled."""
    keys = F.broadcast(round_keys(fetch_output).withColumn("_by_url", F.lit(True)))
    hosts = F.broadcast(fetch_output.where(F.col("host").isNotNull()).select("host").distinct()
                        .withColumn("_by_host", F.lit(True)))
    by_url = F.col("_by_url").isNotNull()
    rows = crawldb.join(keys, "url_fp", "left").join(hosts, "host", "left").where(by_url | F.col("_by_host").isNotNull())
    return rows.select([F.col(c) if c in HOST_COLUMNS else F.when(by_url, F.col(c)).alias(c) for c in crawldb.columns])
