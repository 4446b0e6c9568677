"""Update's writes of one round (``jobs/update.py`` says what each holds): the crawl-DB rows replaced, the
hosts MERGE and the appends, each guarded so that a rerun of round N writes nothing twice, and tagged
``deltacrawl update round N``."""

from __future__ import annotations

from typing import Any

from crawl_udfs.config import Config
from jobs import common, faults
from schemas.tables import HOSTS, TABLES

_META = "spark.databricks.delta.commitInfo.userMetadata"


def commit(spark, conf: Config, staged: dict[str, Any], n: int, tag: str, *, pinned: int) -> None:
    """The round's writes: the crawl-DB replace and the hosts MERGE in one thread, the appends beside them
    in another.

    Each write is guarded on its own (``txnVersion = N``, ``updated_round < N``), so their order does not
    matter to a rerun, and each is a different table: the appends (small jobs, mostly the driver's Delta
    commit work) overlap the MERGEs instead of following them (measured: bench/verb_cost.py, RESULTS.md
    "Session 18"). The commit tag is set once for both threads (session settings are the session's).
    ``pinned``: the crawl-DB version the round was decided from (:func:`replace_crawldb`)."""
    from concurrent.futures import ThreadPoolExecutor

    def merges():
        replace_crawldb(spark, conf, staged["crawldb_source"], n, tag, pinned=pinned)
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
    """The commits carry ``tag``; the MERGE sources are staged files (:func:`jobs.update._staged`), never
    copied again."""
    return common.session_conf(spark, {_META: tag, **common.STABLE_MERGE_SOURCE})


#: Delta's check that every row an overwrite with ``replaceWhere`` writes satisfies the predicate: it
#: evaluates the predicate's ``IN`` list on each written row (8.7 s against 2.7 for a round of 38,000 keys,
#: bench/RESULTS.md "Session 21"); the rows are the predicate's keys by construction.
_NO_REPLACE_CHECK = {"spark.databricks.delta.replaceWhere.constraintCheck.enabled": "false"}


def replace_crawldb(spark, conf: Config, source, n: int, tag: str, *, pinned: int | None = None) -> None:
    """The round's crawl-DB rows (``crawldb_rows.whole_rows``: whole rows, one per URL) in place of the
    rows of their URLs, in one commit: an overwrite whose ``replaceWhere`` is ``url_fp IN`` (their keys),
    which Delta applies as deletion vectors on the files the old rows are in, plus the new rows.

    Why not a MERGE: Delta's MERGE reads every column of every file it touches to build the updated rows,
    whatever its clauses set; a round whose URLs are spread over the crawl DB touches every file (10 M
    rows: 35-47 CPU s against 5-9 for this, bench/RESULTS.md "Session 21"). A deletion vector's delete
    reads the key column only. Once per round: Delta skips a write whose ``txnVersion`` it has committed,
    and a rerun decides again from the same pinned version.

    The predicate holds the keys of the rows read (``pinned``: the version the round was decided from).
    When the crawl DB has moved since that version (``inject``, ``rank`` or an operator between a crash
    and the rerun; or this round's own replace, which ``txnVersion`` skips anyway), the rows are made whole
    again from the table as it is now, as the MERGE this replaced kept them: what the round does not set
    (``importance``, a partial kind's other columns) as the other writer left it, a URL it added written
    back as it is; and the new URLs' keys are named too, so no URL is ever doubled. The lease keeps any
    other writer out while update runs. Delta keeps the predicate in the commit's
    ``commitInfo``: ~22 bytes a key (~250 KB for a round of 10,000 URLs; with the ~28,000 new links' keys
    too, ~900 KB), cleaned with the log (``delta.logRetentionDuration``)."""
    from jobs.crawldb_rows import INSERTED, whole_rows
    moved = pinned is None or common.version(spark, conf, "crawldb") != int(pinned)
    if moved:  # what the round does not set, as it is now: a row another writer changed or added keeps that
        source = whole_rows(source, common.read(spark, conf, "crawldb"))  # (one keyed scan, this case only)
    rows = source.selectExpr("url_fp", f"{INSERTED} AS inserted").collect()
    if not rows:
        return
    keys = [r.url_fp for r in rows if moved or not r.inserted]  # nothing written since: new URLs are absent
    where = f"url_fp IN ({', '.join(map(_bigint, keys))})" if keys else None  # none: an append
    with _tagged(spark, tag), common.session_conf(spark, _NO_REPLACE_CHECK):
        append(conf, source, "crawldb", n, tag, replace_where=where)


def _bigint(v: int) -> str:
    """A BIGINT literal of Spark SQL (its parser reads ``-9223372036854775808`` as a decimal)."""
    return "(-9223372036854775807L - 1L)" if v == -(1 << 63) else f"{int(v)}L"


def merge_hosts(spark, conf: Config, source, n: int, tag: str) -> None:
    cols = {f.name: f"s.`{f.name}`" for f in HOSTS.fields}
    with _tagged(spark, tag):
        (common.table(spark, conf, "hosts").alias("t").merge(source.alias("s"), "t.host = s.host")
         .whenMatchedUpdate(condition=f"t.updated_round < {n}", set=cols)
         .whenNotMatchedInsert(values=cols)
         .execute())


def append(conf: Config, df, name: str, n: int, tag: str, *, replace_where: str | None = None) -> None:
    """Append once per round: Delta skips a write whose (txnAppId, txnVersion) it has committed. With
    ``replace_where``, the rows it matches are removed by the same commit."""
    w = (common.conform(df, TABLES[name]).write.format("delta").mode("append" if replace_where is None else "overwrite")
         .option("txnAppId", f"deltacrawl-update-{name}").option("txnVersion", n).option("userMetadata", tag))
    if replace_where is not None:
        w = w.option("replaceWhere", replace_where)
    w.save(common.table_path(conf, name))
