"""``deltacrawl fetch``: run round N's fetch list through ``fetch_partition``, one Spark task per partition.

Guarantees:

- **Written once.** The fetch is a side effect on the web, so its lineage is
  evaluated by exactly one action: the Delta write of round N's rows of
  ``fetch_output`` (``replaceWhere round = N``). No count, collect or cache
  touches it; counts are read back from the committed table. (Every action
  recomputes an unmaterialised lineage: docs/ARCHITECTURE.md, "Facts the design rests on".)
- **Idempotent per round** (ledger): ``fetched``/``updated`` rounds are skipped;
  when ``fetch_output`` already holds round N (a run committed and died before
  the ledger) nothing is fetched again, the WARC files are promoted and the
  ledger closed. A round found in state ``fetching`` is a resume after a crash:
  every task runs with ``retried=True``, waiting one host delay before its
  first request to each host, so the hosts the dead run was fetching get no
  burst. A task retried by Spark (``attemptNumber() > 0``) does the same.
- **Links followed inside the round** (``fetch.follow_in_round``): each host row
  carries the host's cap for the round (:func:`jobs.generate.host_cap`, the cap
  generate applied) and the url_fps the crawl DB knows on it, so the task follows
  links to its own hosts without fetching a known URL (``crawl_udfs.host_runs``);
  their rows come back ``in_round`` with depth, score and source for update.
- **One host, one task.** The input is the round's fetch list plus the
  ``hosts`` rows of its hosts, repartitioned by the fetch-list ``partition``
  column into ``n_partitions`` tasks, so a task sees all rows of its hosts
  before it starts (the politeness loop wants every host up front) and task
  ``p`` fetches exactly fetch partition ``p`` (see :func:`partition_keys`).
- **The per-IP cap across tasks.** Generate puts the hosts of one address in one task. A
  host it listed without an address (no answer within ``generate.resolve_wait_s``) is
  looked up by its task, which defers it untouched if the answer is an address the round
  gave another task: each task gets the round's addresses and their partitions
  (:func:`addresses`) when such hosts exist.
- **Only committed WARC files survive** (:mod:`jobs.warc_staging`): tasks stage
  their files per attempt; the driver promotes those the committed rows name.

Layers: :func:`fetch_input` is the pure DataFrame transform; :class:`FetchTask`
is the function shipped to the tasks (plain Python + Arrow, no session);
:func:`run` does the I/O and the ledger.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any, Iterable, Iterator

from crawl_udfs.config import Config
from crawl_udfs.known_urls import KnownUrls
from crawl_udfs.partition import fetch_partition
from crawl_udfs.rows import FetchItem, FetchResult, HostResult, HostState, Outcome, RobotsCapture
from crawl_udfs.tail import TAIL_CUT
from crawl_udfs.url_normalize import host_of
from jobs import common, faults, generate, ledger, pending_round, progress, spool, warc_staging
from schemas import counters
from schemas.tables import FETCH_OUTPUT

#: Columns of the one input DataFrame: ``kind`` = "item" (a fetch-list row) or "host" (a hosts row).
ITEM_COLUMNS = ("url", "url_fp", "depth", "score", "redirect_hops", "etag", "last_modified", "prev_digest",
                "prev_warc_record_id", "prev_fetch_time", "fetch_kind")
HOST_COLUMNS = ("robots_status", "robots_body", "robots_fetched_at", "robots_expires_at", "next_allowed_at",
                "consecutive_failures", "ip", "dup_patterns")
_EPOCH_COLUMNS = ("prev_fetch_time", "robots_fetched_at", "robots_expires_at", "next_allowed_at")
#: Columns of host rows for in-round following (null when it is off): the host's cap and known url_fps.
FOLLOW_COLUMNS = ("follow_cap", "known_fps")
FOLLOW_TYPES = {"follow_cap": "int", "known_fps": "array<bigint>"}


# -- the pure transform ---------------------------------------------------------------------------
def partition_keys(spark, n: int):
    """(partition, _key) with ``pmod(hash(_key), n) == partition`` for every partition in [0, n).

    ``repartition(n, col)`` places a row in ``pmod(murmur3(col), n)``; by the partition
    value itself, distinct fetch partitions collide (8 into 8 leaves ~3 tasks idle on
    average) and the task id differs from the fetch partition. Repartitioning by a key
    whose hash lands on the partition's own index gives one fetch partition per task, and
    ``TaskContext.partitionId() == partition``. Spark's ``hash()`` is the Murmur3 (seed 42)
    that ``HashPartitioning`` uses, so Spark itself finds the keys.
    """
    from pyspark.sql import functions as F

    k = F.col("id").cast("int")
    return (spark.range(0, 64 * max(n, 1)).select(k.alias("_key"), F.pmod(F.hash(k), F.lit(n)).alias("partition"))
            .groupBy("partition").agg(F.min("_key").alias("_key")))


def host_partitions(fetch_list):
    """(host, partition) of the round's hosts: generate puts a host in one fetch partition."""
    from pyspark.sql import functions as F

    return fetch_list.select("host", F.col("partition").cast("int").alias("partition")).distinct()


def fetch_input(fetch_list, hosts, n_partitions: int, *, crawldb=None, follow_cap=None, max_known: int | None = None):
    """The round's fetch-list rows (kind "item") and their hosts' rows (kind "host", with the
    partition of their URLs), one task per fetch partition. Timestamps become epoch seconds.

    With ``crawldb`` and ``follow_cap`` (a Column over ``hosts`` columns: the host's URLs in the
    round at most, :func:`jobs.generate.host_cap`), each host row also carries ``follow_cap`` and
    ``known_fps``, the url_fps of all its crawl-DB rows (an exact set, ``crawl_udfs.known_urls``),
    so the task may follow links to the host inside the round; without them it follows none. A host
    with more than ``max_known`` known URLs (``fetch.follow_max_known_urls``) follows none either
    (``follow_cap`` 0, no set shipped): its set would be megabytes in one row, and a host that big
    never lacks listed URLs for its round."""
    from pyspark.sql import functions as F

    def epoch(c):
        return (F.unix_micros(F.col(c)) / F.lit(1e6)).alias(c)

    item_cols = [epoch(c) if c in _EPOCH_COLUMNS else F.col(c) for c in ITEM_COLUMNS]
    host_types = dict((f.name, f.dataType) for f in hosts.schema.fields)
    host_types.update(FOLLOW_TYPES)
    items = fetch_list.select(
        F.lit("item").alias("kind"), F.col("partition").cast("int").alias("partition"), "host", *item_cols,
        *[F.lit(None).cast("double" if c in _EPOCH_COLUMNS else host_types[c]).alias(c)
          for c in HOST_COLUMNS + FOLLOW_COLUMNS])
    item_types = dict((f.name, f.dataType) for f in items.schema.fields)
    host_part = host_partitions(fetch_list)
    host_rows = hosts.join(F.broadcast(host_part), "host")  # the round's hosts: a few thousand rows
    if crawldb is None or follow_cap is None:
        follow = [F.lit(None).cast(FOLLOW_TYPES[c]).alias(c) for c in FOLLOW_COLUMNS]
    else:
        known = (crawldb.select("host", "url_fp").join(F.broadcast(host_part.select("host").distinct()), "host",
                                                       "left_semi")
                 .groupBy("host").agg(F.collect_list("url_fp").alias("known_fps")))
        host_rows = host_rows.join(known, "host", "left")
        empty = F.array().cast(FOLLOW_TYPES["known_fps"])
        fps = F.coalesce(F.col("known_fps"), empty)
        too_many = F.lit(False) if max_known is None else F.size(fps) > F.lit(int(max_known))
        follow = [F.when(too_many, F.lit(0)).otherwise(follow_cap).cast(FOLLOW_TYPES["follow_cap"]).alias("follow_cap"),
                  F.when(too_many, empty).otherwise(fps).alias("known_fps")]
    host_rows = host_rows.select(
        F.lit("host").alias("kind"), "partition", "host",
        *[F.lit(None).cast(item_types[c]).alias(c) for c in ITEM_COLUMNS],
        *[epoch(c) if c in _EPOCH_COLUMNS else F.col(c) for c in HOST_COLUMNS], *follow)
    keys = F.broadcast(partition_keys(fetch_list.sparkSession, n_partitions))
    both = items.unionByName(host_rows).join(keys, "partition", "left")
    return both.repartition(n_partitions, F.coalesce("_key", "partition")).drop("_key")


# -- inside the task ------------------------------------------------------------------------------
class FetchTask:
    """The function ``mapInArrow`` runs: all input batches first, then ``fetch_partition``, then rows.

    Pickles by reference to this class plus its plain fields; everything else (event
    loop, HTTP session, WARC writer, temp dir) is built inside :meth:`run` and closed there.
    """

    def __init__(self, conf: Config, round_no: int, warc_root: str, *, retried: bool = False,
                 progress_dir: str | None = None, store=None, addresses: dict[str, int] | None = None):
        """``progress_dir``: where the task's progress snapshots go for the driver's live line
        (:mod:`jobs.progress`; None: none written). ``store``: the object store's
        :class:`~jobs.object_store.S3Options`, resolved in the driver (a task has not its environment).
        ``addresses``: ip -> fetch partition of the round's hosts with an address (:func:`addresses`)."""
        self.conf, self.round_no, self.warc_root, self.retried = conf, round_no, warc_root, retried
        self.progress_dir, self.store, self.addresses = progress_dir, store, addresses or {}

    def __call__(self, batches: Iterator) -> Iterator:
        from pyspark import TaskContext
        yield from self.run(batches, TaskContext.get())

    def run(self, batches: Iterable, ctx) -> Iterator:
        """``batches``: pyarrow RecordBatches of :func:`fetch_input` rows; ``ctx``: a TaskContext (or alike)."""
        items, hosts, part_of = read_batches(batches)
        if not items:
            return
        pid, attempt = ctx.partitionId(), ctx.attemptNumber()
        with spool.task_spool(f"r{self.round_no}-p{pid}-a{attempt}") as tmp:
            faults.task_point(attempt)
            report = progress.TaskProgress(self.progress_dir, pid, attempt, self.store) if self.progress_dir else None
            elsewhere = frozenset(ip for ip, p in self.addresses.items() if p != pid)
            results = list(fetch_partition(
                items, self.conf, hosts=hosts, warc_dir=tmp,
                warc_name=partial(warc_staging.warc_name, self.conf.warc.prefix, self.round_no, pid),
                retried=self.retried or attempt > 0, progress=report, addresses_elsewhere=elsewhere))
            staging = warc_staging.attempt_dir(self.warc_root, self.round_no, ctx.stageId(), pid, attempt)
            files = sorted(os.path.join(tmp, f) for f in os.listdir(tmp))
            if files:
                warc_staging.upload(files, staging, self.store)
            faults.task_point(attempt, done=True)
        step = self.conf.fetch.arrow_batch_rows
        for i in range(0, len(results), step):
            yield output_batch(results[i:i + step], self.round_no, part_of, staging)


def read_batches(batches: Iterable) -> tuple[list[FetchItem], list[HostState], dict[str, int]]:
    """FetchItems, HostStates and host -> partition from Arrow batches of :func:`fetch_input` rows."""
    items, hosts, part_of = [], [], {}
    for batch in batches:
        for row in batch.to_pylist():
            part_of[row["host"]] = row["partition"]
            if row["kind"] == "item":
                items.append(FetchItem(host=row["host"], **{c: row[c] for c in ITEM_COLUMNS}))
            else:
                known = row.get("known_fps")
                hosts.append(HostState(host=row["host"], **{c: row[c] for c in HOST_COLUMNS},
                                       follow_cap=row.get("follow_cap"),
                                       known=None if known is None else KnownUrls(known)))
    return items, hosts, part_of


def _micros(t: float | None) -> int | None:
    return None if t is None else round(t * 1e6)


_TIMESTAMPS = frozenset(f.name for f in FETCH_OUTPUT.fields if f.dataType.typeName() == "timestamp")
_ARROW_SCHEMA = None


def arrow_schema():
    global _ARROW_SCHEMA
    if _ARROW_SCHEMA is None:
        from pyspark.sql.pandas.types import to_arrow_schema
        _ARROW_SCHEMA = to_arrow_schema(FETCH_OUTPUT)
    return _ARROW_SCHEMA


def output_columns(results: Iterable[FetchResult | HostResult], round_no: int, part_of: dict[str, int],
                   staging: str | None) -> dict[str, list]:
    """FETCH_OUTPUT columns (timestamps as epoch microseconds) from task results."""
    cols: dict[str, list] = {f.name: [] for f in FETCH_OUTPUT.fields}
    for r in _with_robots_captures(results):
        page = isinstance(r, FetchResult)
        kind = "page" if page else "robots" if isinstance(r, RobotsCapture) else "host"
        values: dict[str, Any] = {"round": round_no, "partition": part_of[r.host], "kind": kind}
        for name, col in cols.items():
            if name in values:
                v = values[name]
            elif name == "outlinks":
                v = [{"url": o.url, "url_fp": o.url_fp, "kind": o.kind, "nofollow": o.nofollow,
                      "host": o.host or host_of(o.url), "lastmod": _micros(o.lastmod)}
                     for o in r.outlinks] if page else None
            elif name == "warc_staging":
                v = staging if kind != "host" and r.warc_filename else None
            else:
                v = getattr(r, name, None)
                if name in _TIMESTAMPS:
                    v = _micros(v)
            col.append(v)
    return cols


def _with_robots_captures(results: Iterable[FetchResult | HostResult]) -> Iterator:
    """Each result, and after a host's result the robots.txt responses it stored (``robots`` rows)."""
    for r in results:
        yield r
        if isinstance(r, HostResult):
            yield from r.robots_captures


def output_batch(results, round_no: int, part_of: dict[str, int], staging: str | None):
    import pyarrow as pa

    schema = arrow_schema()
    cols = output_columns(results, round_no, part_of, staging)
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)


# -- the job --------------------------------------------------------------------------------------
def addresses(fetch_list, hosts) -> dict[str, int]:
    """ip -> fetch partition of the round's hosts that have an address (one small collect). Generate
    puts the hosts of one address in one partition, so each address has one."""
    from pyspark.sql import functions as F

    rows = (host_partitions(fetch_list)
            .join(hosts.select("host", "ip").where(F.col("ip").isNotNull()), "host")
            .select("ip", "partition").distinct().collect())
    return {r.ip: r.partition for r in rows}


def round_counts(spark, conf: Config, round_no: int) -> dict[str, int]:
    """The round's fetch counters (``schemas/counters.py``), from its committed ``fetch_output`` rows
    (one small query)."""
    from pyspark.sql import functions as F

    out = common.read(spark, conf, "fetch_output").where(F.col("round") == round_no)
    page, host = F.col("kind") == "page", F.col("kind") == "host"

    def total(cond, value=F.lit(1)):
        return F.coalesce(F.sum(F.when(cond, value)), F.lit(0)).cast("long")

    aggs = [total(page & (F.col("outcome") == o.value)).alias(f"fetched_{o.value}") for o in Outcome]
    cut = page & (F.col("outcome") == Outcome.NOT_ATTEMPTED.value) & (F.col("error_class") == TAIL_CUT)
    aggs.append(total(cut).alias("tail_cut"))
    aggs += [total(page).alias("pages"), total(page & F.coalesce(F.col("in_round"), F.lit(False))).alias(
        "in_round_pages"), total(host).alias("hosts"),
             total(host, F.col("requests")).alias("requests"),
             total(host, F.col("robots_requests")).alias("robots_requests"),
             total(host, F.col("bytes_received")).alias("bytes"),
             total(page, F.col("politeness_wait_ms")).alias("politeness_wait_ms"),
             total(page, F.col("outlinks_filtered")).alias("outlinks_filtered")]
    counts = {k: int(v) for k, v in out.agg(*aggs).collect()[0].asDict().items()}
    counts["pages_ok"] = counts[f"fetched_{Outcome.OK.value}"]
    counts["not_attempted"] = counts[f"fetched_{Outcome.NOT_ATTEMPTED.value}"]
    return counters.checked("fetch", counts)


def _promote(spark, conf: Config, round_no: int) -> dict[str, int]:
    """Move the WARC files the committed rows of round N point to into place; drop the rest."""
    pairs = (common.read(spark, conf, "fetch_output")
             .where(f"round = {round_no} AND kind IN ('page', 'robots') AND warc_filename IS NOT NULL")
             .select("warc_staging", "warc_filename").distinct().collect())
    return warc_staging.promote(common.warc_root(conf), round_no, [(r[0], r[1]) for r in pairs], conf)


def run(spark, conf: Config, *, round_no: int | None = None, row: dict | None = None) -> dict:
    """Fetch round ``round_no`` (default: the last in the ledger) when it is ``generated`` or ``fetching``.

    ``row`` is that round's ledger row when the caller has it. A round already
    ``fetched``/``updated`` is left alone: its counts come back with ``skipped=True``.
    A round found ``fetching`` is a resume after a crash: every task gets
    ``retried=True`` (one host delay before the first request to each host).
    The ledger row written comes back under ``row``.
    """
    with common.Timer() as timer:
        st = ledger.step(spark, conf, "fetch", round_no=round_no, row=row)
        n, row = st.round, st.row
        if st.action == "skip":
            return {"round": n, "state": row["state"], "skipped": True, **(row.get("counts") or {}), "row": row}
        resumed = st.action == "resume"
        # Rows of round N exist only if a fetch of it wrote them, and fetch moves the ledger to
        # ``fetching`` first: a round still ``generated`` has none (no query, no Delta snapshot).
        committed = resumed and common.read(spark, conf, "fetch_output").where(f"round = {n}").limit(1).count() > 0
        if not committed:
            if not resumed:
                row = ledger.set_state(spark, conf, n, "fetching", old=row)
            _fetch(spark, conf, n, int(row["n_partitions"] or 1), retried=resumed, row=row)
            faults.point("fetch.after_write")
        warc = _promote(spark, conf, n)
        counts = round_counts(spark, conf, n)
    seconds = {"fetch": timer.seconds}
    row = ledger.set_state(spark, conf, n, "fetched", counts=counts, seconds=seconds, old=row)
    return {"round": n, "state": "fetched", "skipped": False, "resumed": resumed, "refetched": not committed,
            **counts, "warc": warc, "seconds": seconds, "row": row}


def _fetch(spark, conf: Config, n: int, n_partitions: int, *, retried: bool, row: dict) -> None:
    """The one action over the fetch lineage: write round N of fetch_output."""
    from pyspark.sql import functions as F

    fetch_list = common.read(spark, conf, "fetch_list").where(F.col("round") == n)
    follow_on = bool(conf.fetch.follow_in_round)
    hosts = common.read(spark, conf, "hosts")
    crawldb = common.read(spark, conf, "crawldb") if follow_on else None
    prev = ledger.get_round(spark, conf, n - 1) if n > 1 else None
    if prev is not None and prev["state"] == "fetched":  # pipelined: update n-1 may commit beside this fetch
        prev_out = common.read(spark, conf, "fetch_output").where(F.col("round") == n - 1)
        hosts = pending_round.hosts_after(common.pinned(spark, conf, "hosts"), prev_out, conf, round_no=n - 1,
                                          now=prev["fetched_at"])
        if follow_on:
            crawldb = pending_round.known_urls(common.pinned(spark, conf, "crawldb"), prev_out)
    follow = {}
    if follow_on:  # the crawl DB as generate left it: what update will read as known
        follow = {"crawldb": crawldb, "max_known": conf.fetch.follow_max_known_urls, "follow_cap": generate.host_cap(
            max_per_host=generate.max_urls_per_host(conf), max_pages_per_host=conf.budget.max_pages_per_host,
            delay_window_s=generate.delay_window_s(conf))}
    live_dir = progress.round_dir(common.root(conf), n) if conf.fetch.progress_every_s > 0 else None
    store = common.store(conf)
    # Rounds listed before the counter existed have no figure: their addresses are collected too.
    unresolved = (row.get("counts") or {}).get("generated_unresolved_hosts")
    claimed = addresses(fetch_list, hosts) if unresolved is None or unresolved > 0 else None
    task = FetchTask(conf, n, common.warc_root(conf), retried=retried, progress_dir=live_dir, store=store,
                     addresses=claimed)
    out = fetch_input(fetch_list, hosts, n_partitions, **follow).mapInArrow(task, FETCH_OUTPUT)
    # Static plans (common.STATIC_PLANS): one job a stage, where adaptive execution ran one an exchange,
    # ~30 small jobs between the list and the first request.
    batch_rows = {"spark.sql.execution.arrow.maxRecordsPerBatch": str(conf.fetch.arrow_batch_rows),
                  **common.STATIC_PLANS}
    live = progress.LiveLine(live_dir, n, n_partitions, conf.fetch.progress_every_s, store=store)
    with common.session_conf(spark, batch_rows), live:
        (out.write.format("delta").mode("overwrite").option("replaceWhere", f"round = {n}")
         .save(common.table_path(conf, "fetch_output")))
