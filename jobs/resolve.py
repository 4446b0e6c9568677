"""resolve: learn the address of every due host with none, before generate partitions by it.

Why. Generate puts each host in fetch partition ``pmod(xxhash64(coalesce(ip, host)), n)``,
so that hosts sharing an address meet in one task, whose scheduler holds the per-IP cap
(``politeness.max_in_flight_per_ip``). A host never fetched has no ``hosts.ip``; without
this step it is partitioned by name, and three names on one address can sit in three
tasks, each allowing the cap: the cap then holds per task, not per address.

What it does (called by ``jobs.generate.run`` when it opens a round, before it reads
``hosts``):

1. :func:`unknown_hosts`: the distinct hosts of the URLs due now
   (``jobs.generate.due_urls``, the same rule generate selects by) whose ``hosts`` row
   is missing or has ``ip`` null.
2. Those hosts are spread over ``generate.fetch_partitions`` Spark tasks; each task looks
   them up through :func:`crawl_udfs.dns.resolve_all`: the hosts file
   (``net.hosts_file``), then the system resolver bounded by ``fetch.dns_timeout_s``,
   at most ``net.dns_concurrency`` lookups in flight, and the SSRF guard
   (``net.allow_private_cidrs``), exactly as a fetch task resolves. No lookup happens in
   the driver or in a partitioner (STYLE.md rule 4).
3. The addresses written to ``hosts``: a missing row is appended (counters 0,
   ``updated_round`` 0, so the round's update still merges into it); an existing row with
   ``ip`` null gets the address by a MERGE, run only when there is such a row. In a first
   round every host is new, so the write is one append (a MERGE costs a join and a
   dozen Spark jobs more: bench/first_request.py). Only this writer holds the crawl
   lease, so no other command appends a row for the same host meanwhile; a crash between
   the append and the MERGE leaves the appended rows, which the rerun finds known. A host that does not resolve, or resolves only to refused addresses,
   keeps ``ip`` null (it is partitioned by name, and its fetch task finds the same
   answer and reports ``dns`` / ``ssrf_blocked`` for its URLs) and its row records why in
   ``resolve_error``; a later round tries again while its URLs are still due.

The crawl DB is never written here (only update does); ``hosts`` is, and only its
``ip`` / ``resolve_error`` for hosts that had no address. Idempotent: a rerun finds
nothing unknown but the hosts that did not resolve. When nothing is unknown the cost is
one small job (the due scan, pushed down as in generate) and no commit.
"""

from __future__ import annotations

from typing import Any, Iterator

from crawl_udfs.config import Config
from jobs import common
from schemas.tables import HOSTS, TABLES

HOSTS_TABLE = TABLES["hosts"]

#: Columns of the task output: the host, its first guard-approved address, or why none.
RESOLVED_COLUMNS = ("host", "ip", "resolve_error")


def unknown_hosts(due, hosts):
    """Distinct ``host`` of the ``due`` crawl DB rows with no ``hosts`` row or a null ``ip``, and
    ``has_row``: whether it has a ``hosts`` row (with ``ip`` null)."""
    from pyspark.sql import functions as F

    rows = hosts.select("host", F.col("ip").isNotNull().alias("_has_ip"))
    return (due.select("host").distinct().join(rows, "host", "left")
            .where(~F.coalesce(F.col("_has_ip"), F.lit(False)))
            .select("host", F.col("_has_ip").isNotNull().alias("has_row")))


def new_host_rows(resolved):
    """HOSTS rows for hosts first seen here: the address (or why none), counters 0, round 0."""
    from pyspark.sql import functions as F

    zero = [F.lit(0).cast(f.dataType).alias(f.name) for f in HOSTS.fields
            if not f.nullable and f.name not in RESOLVED_COLUMNS]
    return resolved.select(*RESOLVED_COLUMNS, *zero)


class ResolveTask:
    """The ``mapInArrow`` function: :func:`unknown_hosts` rows in, RESOLVED_COLUMNS + ``has_row`` out
    (pickles: two Sections)."""

    def __init__(self, conf: Config):
        self.fetch, self.net = conf.fetch, conf.net

    def __call__(self, batches: Iterator) -> Iterator:
        import asyncio

        import pyarrow as pa

        from crawl_udfs.dns import resolve_all

        names, has_row = [], []
        for b in batches:
            names += b.column("host").to_pylist()
            has_row += b.column("has_row").to_pylist()
        if not names:
            return
        rows = asyncio.run(resolve_all(names, self.fetch, self.net))  # in the order of ``names``
        yield pa.RecordBatch.from_arrays([pa.array(list(c), pa.string()) for c in zip(*rows)]
                                         + [pa.array(has_row, pa.bool_())], names=[*RESOLVED_COLUMNS, "has_row"])


def run(spark, conf: Config, *, now=None, crawldb=None) -> dict[str, Any]:
    """Resolve the due hosts with no address and write ``hosts.ip``. Returns the counts.

    ``crawldb`` is the crawl DB generate selects from (default: the table; a pipelined
    round's view, ``jobs.pending_round.generate_crawldb``, adds the URLs a round not yet
    merged discovered, whose new hosts are resolved before they are partitioned)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, StructField, StructType, StringType

    from jobs.generate import due_urls, fetch_partitions

    now = now or common.now_utc()
    crawldb = common.read(spark, conf, "crawldb") if crawldb is None else crawldb
    unknown = unknown_hosts(due_urls(crawldb, now), common.read(spark, conf, "hosts"))
    schema = StructType([StructField(c, StringType()) for c in RESOLVED_COLUMNS]
                        + [StructField("has_row", BooleanType())])
    resolved = (unknown.repartition(fetch_partitions(spark, conf))
                .mapInArrow(ResolveTask(conf), schema)
                .persist(StorageLevel.MEMORY_AND_DISK))  # one lookup per host: the writes read it again
    try:
        row = resolved.agg(F.count(F.lit(1)).alias("n"), F.count("ip").alias("ok"),
                           F.count(F.when(F.col("has_row"), 1)).alias("old")).collect()[0]
        if row.n > row.old:
            new = common.conform(new_host_rows(resolved.where(~F.col("has_row"))), HOSTS_TABLE)
            new.write.format("delta").mode("append").save(common.table_path(conf, "hosts"))
        if row.old:
            (common.table(spark, conf, "hosts").alias("t")
             .merge(resolved.where(F.col("has_row")).alias("s"), "t.host = s.host")
             .whenMatchedUpdate(condition="t.ip IS NULL", set={"ip": "s.ip", "resolve_error": "s.resolve_error"})
             .execute())
    finally:
        resolved.unpersist()
    return {"resolved_hosts": row.ok, "unresolved_hosts": row.n - row.ok}
