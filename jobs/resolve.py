"""resolve: learn the address of every listed host with none, before generate writes its list.

Why. Generate puts each host in fetch partition ``pmod(xxhash64(coalesce(ip, host)), n)``,
so that hosts sharing an address meet in one task, whose scheduler holds the per-IP cap
(``politeness.max_in_flight_per_ip``). A host never fetched has no ``hosts.ip``; without
this step it is partitioned by name, and three names on one address can sit in three
tasks, each allowing the cap: the cap then holds per task, not per address.

What it does (called by ``jobs.generate.run`` once it has selected the round's list, before
it writes it):

1. :func:`unknown_hosts`: the aggregate generate's count of the selection computes beside
   its counts, the distinct listed hosts whose ``hosts`` row is missing or has ``ip`` null
   (``jobs.generate.select_due`` carries each row's ``ip`` and ``has_host_row``). When every
   listed host has an address, that is all this step costs: no job, no commit.
2. :func:`run`: those hosts are spread over ``generate.fetch_partitions`` Spark tasks; each
   task looks them up through :func:`crawl_udfs.dns.resolve_all`: the hosts file
   (``net.hosts_file``), then the system resolver bounded by ``fetch.dns_timeout_s``,
   at most ``net.dns_concurrency`` lookups in flight, and the SSRF guard
   (``net.allow_private_cidrs``), exactly as a fetch task resolves. No lookup happens in
   the driver or in a partitioner (STYLE.md rule 4). The step waits at most
   ``generate.resolve_wait_s`` for all answers: a name the resolver is slow over
   (``fetch.dns_timeout_s`` is seconds) must not hold every host's round. A name still
   unanswered then is written nowhere and listed by name; its fetch task looks it up
   before its first request and defers it untouched when the address is one the round
   placed in another task (``crawl_udfs.host_runs.ADDRESS_ELSEWHERE``), so the per-IP cap
   still holds across tasks; its ``hosts.ip`` comes from that task's answer.
3. The addresses written to ``hosts``: a missing row is appended (counters 0,
   ``updated_round`` 0, so the round's update still merges into it); an existing row with
   ``ip`` null gets the address by a MERGE, run only when there is such a row. In a first
   round every host is new, so the write is one append (a MERGE costs a join and a
   dozen Spark jobs more: bench/first_request.py). Only this writer holds the crawl
   lease, so no other command appends a row for the same host meanwhile; a crash between
   the append and the MERGE, or before generate writes its list, leaves the appended rows,
   which the rerun finds known. A host that does not resolve, or resolves only to refused
   addresses, keeps ``ip`` null (it is partitioned by name, and its fetch task finds the same
   answer and reports ``dns`` / ``ssrf_blocked`` for its URLs) and its row records why in
   ``resolve_error``; a later round that lists it tries again.
4. Generate moves the resolved hosts' rows to their address's partition
   (``jobs.generate.with_addresses``) and writes the list.

Only hosts the round lists are looked up: a due host that is parked, out of budget or
beyond ``top_n`` waits for the round that lists it. The crawl DB is never written here
(only update does); ``hosts`` is, and only its ``ip`` / ``resolve_error`` for hosts that
had no address.
"""

from __future__ import annotations

from typing import Any, Iterator

from crawl_udfs.config import Config
from jobs import common
from schemas.tables import HOSTS, TABLES

HOSTS_TABLE = TABLES["hosts"]

#: Columns of the task output: the host, its first guard-approved address, or why none.
RESOLVED_COLUMNS = ("host", "ip", "resolve_error")


def unknown_hosts():
    """The aggregate of :func:`jobs.generate.select_due`'s rows that :func:`run` takes: the distinct
    (``host``, ``has_host_row``) of rows whose host has no ``ip``, as an array of structs."""
    from pyspark.sql import functions as F

    return F.collect_set(F.when(F.col("ip").isNull(), F.struct("host", "has_host_row")))


def new_host_rows(resolved):
    """HOSTS rows for hosts first seen here: the address (or why none), counters 0, round 0."""
    from pyspark.sql import functions as F

    zero = [F.lit(0).cast(f.dataType).alias(f.name) for f in HOSTS.fields
            if not f.nullable and f.name not in RESOLVED_COLUMNS]
    return resolved.select(*RESOLVED_COLUMNS, *zero)


class ResolveTask:
    """The ``mapInArrow`` function: :func:`unknown_hosts` rows in, RESOLVED_COLUMNS + ``has_row`` out
    (pickles: two Sections)."""

    def __init__(self, conf: Config, lookup=None):
        """``lookup``: the system resolver's stand-in (tests; picklable by reference), None: the real one."""
        self.fetch, self.net, self.wait_s = conf.fetch, conf.net, float(conf.generate.resolve_wait_s)
        self.lookup = lookup

    def __call__(self, batches: Iterator) -> Iterator:
        import asyncio

        import pyarrow as pa

        from crawl_udfs.dns import resolve_all, system_lookup

        names, has_row = [], []
        for b in batches:
            names += b.column("host").to_pylist()
            has_row += b.column("has_row").to_pylist()
        if not names:
            return
        rows = asyncio.run(resolve_all(names, self.fetch, self.net, lookup=self.lookup or system_lookup,
                                       within_s=self.wait_s))  # in ``names``' order
        yield pa.RecordBatch.from_arrays([pa.array(list(c), pa.string()) for c in zip(*rows)]
                                         + [pa.array(has_row, pa.bool_())], names=[*RESOLVED_COLUMNS, "has_row"])


def run(spark, conf: Config, unknown, *, lookup=None) -> dict[str, Any]:
    """Look up ``unknown`` (rows of :func:`unknown_hosts`: ``host``, ``has_host_row``) in Spark tasks and
    write ``hosts.ip`` / ``resolve_error``. Returns the counts and ``addresses``: host -> ip of those found
    (``pending_hosts``: names unanswered within ``generate.resolve_wait_s``, not written)."""
    from pyspark.sql.types import BooleanType, StructField, StructType, StringType

    from jobs.generate import fetch_partitions

    from crawl_udfs.dns import PENDING

    unknown = sorted((r["host"], bool(r["has_host_row"])) for r in unknown)
    if not unknown:
        return {"resolved_hosts": 0, "unresolved_hosts": 0, "pending_hosts": 0, "addresses": {}}
    schema = StructType([StructField(c, StringType()) for c in RESOLVED_COLUMNS]
                        + [StructField("has_row", BooleanType())])
    names = spark.createDataFrame(unknown, "host string, has_row boolean")
    answered = (names.repartition(min(len(unknown), fetch_partitions(spark, conf)))
                .mapInArrow(ResolveTask(conf, lookup), schema).collect())  # one row a host: small
    resolved = [r for r in answered if r.resolve_error != PENDING]
    new = [r for r in resolved if not r.has_row]
    old = [r for r in resolved if r.has_row]
    if new:
        rows = common.conform(new_host_rows(spark.createDataFrame(new, schema)), HOSTS_TABLE)
        rows.write.format("delta").mode("append").save(common.table_path(conf, "hosts"))
    if old:
        (common.table(spark, conf, "hosts").alias("t")
         .merge(spark.createDataFrame(old, schema).alias("s"), "t.host = s.host")
         .whenMatchedUpdate(condition="t.ip IS NULL", set={"ip": "s.ip", "resolve_error": "s.resolve_error"})
         .execute())
    addresses = {r.host: r.ip for r in resolved if r.ip is not None}
    return {"resolved_hosts": len(addresses), "unresolved_hosts": len(resolved) - len(addresses),
            "pending_hosts": len(answered) - len(resolved), "addresses": addresses}
