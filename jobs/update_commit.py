"""Update's writes of one round (``jobs/update.py`` says what each holds): the crawl-DB and hosts MERGEs
and the appends, each guarded so that a rerun of round N writes nothing twice, and tagged
``deltacrawl update round N``."""

from __future__ import annotations

from typing import Any

from crawl_udfs.config import Config
from jobs import common, faults
from jobs import update_transforms as T
from schemas.tables import CRAWLDB, HOSTS, TABLES

_META = "spark.databricks.delta.commitInfo.userMetadata"


def commit(spark, conf: Config, staged: dict[str, Any], n: int, tag: str) -> None:
    """The round's writes: the two MERGEs in one thread, the appends beside them in another.

    Each write is guarded on its own (``updated_round < N``, ``txnVersion = N``), so their order does not
    matter to a rerun, and each is a different table: the appends (small jobs, mostly the driver's Delta
    commit work) overlap the MERGEs instead of following them (measured: bench/verb_cost.py, RESULTS.md
    "Session 18"). The commit tag is set once for both threads (session settings are the session's)."""
    from concurrent.futures import ThreadPoolExecutor

    def merges():
        merge_crawldb(spark, conf, staged["crawldb_source"], n, tag)
        merge_hosts(spark, conf, staged["hosts"], n, tag)

    def appends():
        append(conf, staged["fetch_log"], "fetch_log", n, tag)
        faults.point("update.after_fetch_log")
        append(conf, staged["links"], "links", n, tag)
        if "near_dup_index" in staged:
            append(conf, staged["near_dup_index"], "near_dup_index", n, tag)

    with _tagged(spark, tag), ThreadPoolExecutor(2, thread_name_prefix="update-commit") as pool:
        done = [pool.submit(merges), pool.submit(appends)]
        for f in done:
            f.result()
    faults.point("update.after_links")


def _tagged(spark, tag: str):
    """The MERGE commits carry ``tag``; their sources are staged files (:func:`jobs.update._staged`), never
    copied again."""
    return common.session_conf(spark, {_META: tag, **common.STABLE_MERGE_SOURCE})


#: Crawl-DB columns update never rewrites on a known URL (another step owns them; a new URL starts null).
NOT_UPDATED = ("importance",)  # jobs/importance.py


def merge_crawldb(spark, conf: Config, source, n: int, tag: str) -> None:
    cols = {f.name: f"s.`{f.name}`" for f in CRAWLDB.fields}
    owned = {c: v for c, v in cols.items() if c not in NOT_UPDATED}
    with _tagged(spark, tag):  # tagged by the caller too: nesting keeps the same values
        source = source.repartition(spark.sparkContext.defaultParallelism, "url_fp")
        (common.table(spark, conf, "crawldb").alias("t").merge(source.alias("s"), "t.url_fp = s.url_fp")
         .whenMatchedUpdate(condition=f"s._kind IN ('update', 'budget') AND t.updated_round < {n}", set=owned)
         .whenMatchedUpdate(condition=f"s._kind = 'repoint' AND t.updated_round < {n}",
                            set={c: f"s.`{c}`" for c in ("status", "dup_of", "updated_round")})
         .whenMatchedUpdate(condition=f"s._kind = 'due' AND t.updated_round < {n}",
                            set={c: f"s.`{c}`" for c in ("next_fetch_time", "updated_round")})
         .whenMatchedUpdate(condition=f"s._kind = 'moved' AND t.updated_round < {n}",
                            set={c: f"s.`{c}`" for c in ("score", *T.MOVED, "updated_round")})
         .whenNotMatchedInsert(condition="s._kind IN ('update', 'new')", values=cols)
         .execute())


def merge_hosts(spark, conf: Config, source, n: int, tag: str) -> None:
    cols = {f.name: f"s.`{f.name}`" for f in HOSTS.fields}
    with _tagged(spark, tag):
        (common.table(spark, conf, "hosts").alias("t").merge(source.alias("s"), "t.host = s.host")
         .whenMatchedUpdate(condition=f"t.updated_round < {n}", set=cols)
         .whenNotMatchedInsert(values=cols)
         .execute())


def append(conf: Config, df, name: str, n: int, tag: str) -> None:
    """Append once per round: Delta skips a write whose (txnAppId, txnVersion) it has committed."""
    (common.conform(df, TABLES[name]).write.format("delta").mode("append")
     .option("txnAppId", f"deltacrawl-update-{name}").option("txnVersion", n).option("userMetadata", tag)
     .save(common.table_path(conf, name)))
