"""The ``deltacrawl`` command: the stable external contract (docs/ARCHITECTURE.md).

    deltacrawl [--conf FILE.toml] [--set KEY=VALUE]... COMMAND

Every failure an operator can cause (bad configuration, missing tables,
unreachable storage, no Java, a SQL query Spark rejects) ends in one line on stderr and exit status 2;
``--debug`` shows the traceback as well. This is the one entry point: the job
modules have no ``main()`` of their own.

The verbs that write (:data:`WRITERS`) run holding the crawl lease
(:mod:`jobs.lease`): a second writer on the same ``storage.root`` exits at once
with status 3 and one line naming the holder. ``generate`` exits with status 4 when
nothing is due and no round is unfinished (no round opened: there is nothing to
fetch or update), so a scheduler can skip the rest of the round (``airflow_dags/``). They also keep the ``rounds`` table
following the ledger's records, flushed before they exit (:mod:`jobs.ledger_mirror`). ``sql``, ``status``, ``report`` and ``export``
only read committed snapshots and run beside a writer; ``lookup`` reads an export's
files and starts no Spark session at all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from crawl_udfs import config
from crawl_udfs.config import ConfigError

#: Commands that write under storage.root, so hold the crawl lease.
WRITERS = ("init", "inject", "generate", "fetch", "update", "round", "crawl", "rank")
#: Exit status of a writer refused because another one holds the lease.
EXIT_LEASE_HELD = 3
#: Exit status of ``generate`` when nothing is due: no round was opened and none is unfinished.
EXIT_NOTHING_DUE = 4


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="deltacrawl", description="A polite batch web crawler on Spark + Delta Lake.")
    p.add_argument("--conf", action="append", default=[], metavar="FILE.toml", help="configuration overlay")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override one key, e.g. --set politeness.host_delay_s=2")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--verbose", action="store_true",
                   help="show the JVM's, Ivy's and Spark's log lines on the console (default: a file under "
                        "spark.log_dir, named when a command fails)")
    p.add_argument("--force", action="store_true",
                   help="take the crawl lease even from a live holder. RISKS: if that holder still runs, two "
                        "fetchers hit the same web (requests closer than the host delay) until it notices at its "
                        "next renewal, and Delta conflicts fail steps; use only when the holder is surely gone")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="create or upgrade the tables (idempotent)")
    inj = sub.add_parser("inject", help="add seeds (files with one URL a line, or URLs)")
    inj.add_argument("sources", nargs="+")
    inj.add_argument("--boost", type=float, default=None, help="raise existing URLs to this score and make them due")
    inj.add_argument("--due-now", action="store_true",
                     help="make the URLs named (known or new) due now, ahead of the schedule: listed by the next "
                          "round before every URL that waited less than priority.due_now_s")
    sub.add_parser("generate", help="open a round: select due URLs into its fetch list")
    sub.add_parser("fetch", help="fetch the open round")
    sub.add_parser("update", help="merge the fetched round into the crawl DB")
    sub.add_parser("rank", help="recompute link importance (crawldb.importance) now, whatever importance.every_rounds")
    sub.add_parser("round", help="one generate -> fetch -> update cycle (finishes an interrupted round first)")
    cr = sub.add_parser("crawl", help="up to N rounds; stops early when nothing is due (see --wait)")
    cr.add_argument("--rounds", type=int, required=True)
    cr.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                    help="when nothing is due, sleep until the next URL falls due if that is within SECONDS "
                         "of idle time, then go on (a continuous crawl); default 0: stop")
    ex = sub.add_parser("export", help="WARC files, Parquet index (Common Crawl columns) and CDXJ into DIR")
    ex.add_argument("--out", required=True, metavar="DIR",
                    help="export directory: the updated rounds it does not hold yet are added")
    ex.add_argument("--full", action="store_true",
                    help="rebuild DIR's export from scratch (warc/, index/, cdxj/, export.json replaced)")
    lk = sub.add_parser("lookup", help="every stored capture of a URL in the latest export (no Spark)")
    lk.add_argument("url", metavar="URL", help="normalised first, as the crawl DB keys it")
    lk.add_argument("--export", metavar="DIR", default=None,
                    help="read this export instead of the latest (storage.root/exports/latest.json)")
    lk.add_argument("--payload", action="store_true", help="print each capture's stored payload after its line")
    sq = sub.add_parser("sql", help="run a SQL query over the registered tables")
    sq.add_argument("query")
    sq.add_argument("--format", choices=["table", "json", "csv"], default="table")
    sq.add_argument("--limit", type=int, default=1000, help="most rows printed (table format)")
    rp = sub.add_parser("report", help="write a round's report (HTML + plots) under reports/round=N/ and print it")
    rp.add_argument("--round", type=int, default=None, dest="round_no", help="default: the last round fetched")
    rp.add_argument("--open", action="store_true", help="open the HTML page in a browser too")
    st = sub.add_parser("status", help="frontier size, due URLs, hosts, last rounds")
    st.add_argument("--hosts", action="store_true",
                    help="list every host out of budget, throttled or parked, with the reason")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        conf = config.load(args.conf, args.overrides + (["spark.verbose=true"] if args.verbose else []))
        if args.command == "lookup":  # reads an export's files: no Spark session, no JVM (jobs/lookup.py)
            from jobs import lookup
            return lookup.run(conf, args.url, export_dir=args.export, with_payload=args.payload)
        return _dispatch(args, conf)
    except ConfigError as e:
        from jobs.lease import LeaseHeld
        if _debug(args):
            raise
        if isinstance(e, LeaseHeld):
            print(f"deltacrawl: {args.command} refused: {e}", file=sys.stderr)
            return EXIT_LEASE_HELD
        print(f"deltacrawl: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("deltacrawl: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the operator gets one line, --debug the rest
        if _debug(args):
            raise
        from jobs.common import error_hint, error_line
        from jobs.spark_log import current
        log = f" (Spark's log: {current()})" if current() else ""
        print(f"deltacrawl: {args.command} failed: {error_line(e)}; {error_hint(e)}{log}", file=sys.stderr)
        return 1


def _debug(args) -> bool:
    """--debug or DELTACRAWL_DEBUG: tracebacks and Spark's own error logs are shown."""
    return bool(args.debug or os.environ.get("DELTACRAWL_DEBUG"))


def _dispatch(args, conf) -> int:
    from jobs import lease
    from jobs.session import build_session

    if args.command in WRITERS:
        lease.refuse_unsafe_storage(conf, force=args.force)  # before the JVM: a config-only decision
    if not _debug(args):
        _quiet_query_logs()
    spark = build_session(conf, app_suffix=args.command)
    _check_storage(spark, conf)
    if args.command not in WRITERS:
        return _run(spark, conf, args)
    from jobs.ledger_mirror import mirroring
    with lease.hold(spark, conf, args.command, force=args.force, out=sys.stderr), mirroring(spark, conf):
        return _run(spark, conf, args)


def _run(spark, conf, args) -> int:
    from jobs import common

    if args.command == "init":
        from jobs import ledger
        changed = common.ensure_tables(spark, conf)
        ledger.current(spark, conf)  # the ledger's records, seeded from the rounds table once
        print(f"init: {', '.join(changed) if changed else 'tables up to date'}, under {common.root(conf)}")
        return 0
    if args.command == "inject":
        from jobs import inject
        _print_counts("inject", inject.run(spark, conf, args.sources, boost=args.boost, due_now=args.due_now))
    elif args.command == "generate":
        from jobs import generate
        counts = generate.run(spark, conf)
        if counts["round"] is None:
            print("generate: nothing is due; no round opened")
            return EXIT_NOTHING_DUE
        _print_counts("generate", counts)
    elif args.command == "fetch":
        from jobs import fetch
        _print_counts("fetch", fetch.run(spark, conf))
    elif args.command == "update":
        from jobs import update
        _print_counts("update", update.run(spark, conf))
    elif args.command == "rank":
        from jobs import importance
        _print_counts("rank", importance.run(spark, conf))
    elif args.command in ("round", "crawl"):
        from jobs import rounds
        n, wait = (1, 0.0) if args.command == "round" else (args.rounds, args.wait)
        done = rounds.crawl(spark, conf, n, out=sys.stdout, wait_s=wait)
        print(f"{done} round(s) completed")
    elif args.command == "export":
        from jobs import export
        _print_counts("export", export.run(spark, conf, args.out, full=args.full))
    elif args.command == "sql":
        common.register_tables(spark, conf)  # the names are for the query; every verb reads tables by path
        _sql(spark, args.query, args.format, args.limit, quiet=not _debug(args),
             log_level=conf.spark.log_level)
    elif args.command == "report":
        from jobs import report
        directory, md = report.run(spark, conf, args.round_no)
        print(md + f"\nreport written to {directory}/index.html")
        if args.open:
            import webbrowser
            webbrowser.open(f"{directory}/index.html" if "://" in directory else f"file://{directory}/index.html")
    elif args.command == "status":
        from jobs import status
        print(status.hosts_report(spark, conf) if args.hosts else status.report(spark, conf))
        from jobs import lease
        held = lease.holder(spark, conf)
        print(f"writer: {held.describe() if held else 'none (the crawl lease is free)'}")
    return 0


def _check_storage(spark, conf) -> None:
    """A clear error when storage.root cannot be reached, before any job starts."""
    from jobs import common
    root = common.root(conf)
    jvm = spark.sparkContext._jvm
    try:
        path = jvm.org.apache.hadoop.fs.Path(root)
        fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        fs.mkdirs(path)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"storage.root {root} is not reachable: {common.error_line(e)}") from None


def _print_counts(verb: str, counts: dict) -> None:
    items = ", ".join(f"{k}={v}" for k, v in counts.items() if k != "row")  # row: the ledger row, for rounds.crawl
    print(f"{verb}: {items}")


def _sql(spark, query: str, fmt: str, limit: int, *, quiet: bool, log_level: str) -> None:
    """Print the query's rows; a query Spark rejects (syntax, unknown table or column, a value that
    does not cast...) is the operator's error: one line, exit status 2. ``quiet``: the JVM logs
    nothing meanwhile (a task failing on a bad value logs its stack trace twice, from the executor
    and the scheduler)."""
    from pyspark.errors import PySparkException

    if quiet:
        spark.sparkContext.setLogLevel("OFF")
    try:
        df = spark.sql(query)
        if fmt == "table":
            df.show(limit, truncate=80)
        elif fmt == "json":
            for row in df.toLocalIterator():
                print(json.dumps(row.asDict(recursive=True), default=str))
        else:
            import csv
            w = csv.writer(sys.stdout)
            w.writerow(df.columns)
            for row in df.toLocalIterator():
                w.writerow(list(row))
    except PySparkException as e:
        if not quiet:
            raise
        raise ConfigError(f"sql: {query_error(e)}") from None
    finally:
        spark.sparkContext.setLogLevel(log_level)


def query_error(e) -> str:
    """The first line of a rejected query's error (Spark's error class and message, without the
    plan or the query echoed under it), naming the tables when the query named an unknown one."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    line = (lines[0] if lines else type(e).__name__)[:300]
    if "TABLE_OR_VIEW_NOT_FOUND" in line:
        from schemas.tables import TABLES
        line += f" (deltacrawl's tables: {', '.join(TABLES)})"
    return line


def _quiet_query_logs() -> None:
    """PySpark logs each SQL error it raises as a JSON line carrying the Java stack trace (its
    ``SQLQueryContextLogger``), before our one line says the same; --debug keeps them."""
    import logging

    from pyspark.logger import PySparkLogger
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


if __name__ == "__main__":
    sys.exit(main())
