"""The next round's list prepared ahead, while the round before it is fetched (``generate.list_ahead``).

In a pipelined crawl (``generate.pipeline``, :mod:`jobs.rounds`) generate N+1 runs the moment
fetch N ends, from the crawl DB as update N will leave it (:mod:`jobs.pending_round`), and every
host waits for it. Most of that listing does not depend on round N's results: the crawl DB's due
rows, the part that grows with the crawl DB, are what update N-1 left, minus round N's fetch
list, all known while fetch N runs. :func:`prepare` computes them then, in the thread that ran
update N-1 once it committed (a fetch is I/O-bound: the cores are mostly idle), reduced to the
rows that can still be listed, and stages them beside the crawl DB's url_fps. When fetch N ends,
generate N+1 reads these two staged files instead of the crawl DB (:func:`jobs.generate.run`,
``ahead``) and is left with work of the round's size: round N's new links, its hosts, the
selection, all by the same transforms as without it.

The list is the one generate would make from the crawl DB, because:

- **A host's best rows suffice.** :func:`jobs.generate.select_due` lists at most
  M = :func:`jobs.generate.max_urls_per_host` URLs of a host, in the order
  :func:`jobs.generate.in_order` gives them (per row: the row and its host's ``dup_patterns``,
  which only update changes). Of the due rows not in round N's list, :func:`candidates` keeps the
  2M first of each host. Of them only the URLs fetch N follows inside the round can still leave,
  at most M a host (its ``follow_cap`` less its listed URLs), so the M best that remain are among
  the kept; round N's new links are added to them, and the M best of a union are within the union
  of the M bests. Host state (budget, park, delay cap) filters whole hosts: applied later, as ever.
- **Nothing changes the crawl DB in between.** Update N-1 has committed and update N starts after
  generate N+1 (:mod:`jobs.rounds`); the staged rows carry the crawl DB's version, and generate
  uses them only when the table is still at that version (else it reads the crawl DB as before).

One difference, by design: the due set is read when :func:`prepare` runs, so a URL whose
``next_fetch_time`` falls during fetch N is listed one round later (it stays due: nothing is lost).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from crawl_udfs.config import Config
from jobs import common, generate, priority
from jobs.due import due_urls
from schemas.tables import CRAWLDB


@dataclass(frozen=True)
class Ahead:
    """Staged inputs of round ``listing``'s generate, read from crawl DB version ``crawldb_version``."""

    listing: int
    path: str
    crawldb_version: int
    due_at: dt.datetime

    @property
    def candidates(self) -> str:
        return f"{self.path}/candidates"

    @property
    def known(self) -> str:
        return f"{self.path}/known"


def ahead_dir(conf: Config, listing: int) -> str:
    """Where round ``listing``'s staged candidates and known url_fps go."""
    return f"{common.root(conf)}/staging/generate/ahead/round={int(listing)}"


def candidates(crawldb, hosts, fetch_list, conf: Config, *, now: dt.datetime):
    """The due rows of ``crawldb`` at ``now`` (CRAWLDB columns) that generate can still list once the
    round of ``fetch_list`` is fetched: its URLs left out, then of each host the 2M first in
    :func:`jobs.generate.in_order`'s order (M: :func:`jobs.generate.max_urls_per_host`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    k = 2 * generate.max_urls_per_host(conf)
    due = (due_urls(crawldb, now).join(F.broadcast(fetch_list.select("url_fp")), "url_fp", "left_anti")
           .withColumn("_score", F.col("score")))  # "lower" patterns change score for the order only
    ranked = generate.in_order(due.join(hosts.select("host", "dup_patterns"), "host", "left"),
                               priority.Weights.of(conf.priority), *generate.pattern_args(conf))
    best = (ranked.withColumn("_rank", F.row_number().over(Window.partitionBy("host").orderBy(*priority.order())))
            .where(F.col("_rank") <= F.lit(k)))
    return best.withColumn("score", F.col("_score")).select(*[f.name for f in CRAWLDB.fields])


def prepare(spark, conf: Config, fetching: dict, *, now: dt.datetime | None = None) -> Ahead:
    """Stage round ``fetching["round"] + 1``'s inputs while that round is fetched (its list is written).

    Two Parquet files under :func:`ahead_dir`: the :func:`candidates` and the crawl DB's
    (``host``, ``url_fp``), which round N's new links are checked against."""
    n = int(fetching["round"])
    now = now or common.now_utc()
    version = common.version(spark, conf, "crawldb")
    crawldb = common.read_at(spark, conf, "crawldb", version)
    fetch_list = common.read(spark, conf, "fetch_list").where(f"round = {n}")
    ahead = Ahead(n + 1, ahead_dir(conf, n + 1), version, now)
    with common.session_conf(spark, common.STATIC_PLANS):
        (candidates(crawldb, common.pinned(spark, conf, "hosts"), fetch_list, conf, now=now)
         .write.mode("overwrite").parquet(ahead.candidates))
        crawldb.select("host", "url_fp").write.mode("overwrite").parquet(ahead.known)
    _remove_older(conf, n + 1)
    return ahead


def usable(spark, conf: Config, ahead: Ahead | None, pending: dict) -> bool:
    """Whether ``ahead`` holds the inputs of the round after ``pending`` on the crawl DB as it is."""
    return (ahead is not None and ahead.listing == int(pending["round"]) + 1
            and common.version(spark, conf, "crawldb") == ahead.crawldb_version)


def read(spark, ahead: Ahead):
    """(candidate rows, known ``host``, ``url_fp``) as DataFrames (schemas given: no job reads a footer)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    known = StructType([StructField("host", StringType()), StructField("url_fp", LongType())])
    return spark.read.schema(CRAWLDB).parquet(ahead.candidates), spark.read.schema(known).parquet(ahead.known)


def _remove_older(conf: Config, listing: int) -> None:
    """Drop the staged inputs of rounds before ``listing`` (their generate has run)."""
    from pyarrow import fs as pafs

    from jobs.warc_staging import filesystem
    fs, base = filesystem(f"{common.root(conf)}/staging/generate/ahead", conf)
    for info in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)):
        name = info.base_name
        if name.startswith("round=") and name[6:].isdigit() and int(name[6:]) < listing:
            fs.delete_dir(info.path)
