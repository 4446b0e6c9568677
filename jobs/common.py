"""Plumbing every job shares: where tables live, creating and registering them, the round ledger.

Kept small on purpose (STYLE.md rule 1): a job module imports these helpers,
never a base class.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING

from crawl_udfs.config import Config, ConfigError

if TYPE_CHECKING:  # schemas.tables imports pyspark: `deltacrawl lookup` needs root() without it
    from schemas.tables import Table


def __getattr__(name: str):
    """``common.TABLES``, imported on first use (pyspark) rather than with this module."""
    if name == "TABLES":
        from schemas.tables import TABLES
        return TABLES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def root(conf: Config) -> str:
    r = conf.storage.root.rstrip("/")
    if not r:
        raise ConfigError("storage.root is empty")
    if "://" not in r:
        import os
        r = os.path.abspath(r)
    return r


def store(conf: Config):
    """How ``pyarrow.fs`` reaches ``storage.root``: its S3 options (credentials resolved from the
    environment, in the driver) when it is on S3, else None (:mod:`jobs.object_store`)."""
    from jobs import object_store
    return object_store.options(conf) if object_store.is_s3(root(conf)) else None


def table_path(conf: Config, name: str) -> str:
    return f"{root(conf)}/tables/{name}"


def warc_root(conf: Config) -> str:
    return f"{root(conf)}/warc"


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def ensure_tables(spark, conf: Config) -> list[str]:
    """Create missing tables, add missing columns to old ones; idempotent. Returns what changed."""
    from delta.tables import DeltaTable

    from schemas.tables import TABLES

    changed = []
    for t in TABLES.values():
        path = table_path(conf, t.name)
        if not DeltaTable.isDeltaTable(spark, path):
            builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(t.schema)
            if t.partition_by:
                builder = builder.partitionedBy(*t.partition_by)
            for k, v in t.properties:
                builder = builder.property(k, v)
            if t.comment:
                builder = builder.comment(t.comment)
            builder.execute()
            changed.append(f"created {t.name}")
            continue
        missing = _missing_fields(spark.read.format("delta").load(path).schema, t.schema)
        if missing:
            cols = ", ".join(f"{name} {f.dataType.simpleString()}" for name, f in missing)
            spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
            changed.append(f"added {len(missing)} column(s) to {t.name}")
    register_tables(spark, conf)
    return changed


def _missing_fields(existing, wanted, prefix: str = "") -> list:
    """(ALTER TABLE column path, field) of each field of ``wanted`` absent from ``existing``, nested
    ones included (a field added to a struct inside an array is ``outer.element.field``)."""
    from pyspark.sql.types import ArrayType, StructType

    have = {f.name: f.dataType for f in existing.fields}
    out = []
    for f in wanted.fields:
        name = f"{prefix}`{f.name}`"
        if f.name not in have:
            out.append((name, f))
        elif isinstance(f.dataType, StructType) and isinstance(have[f.name], StructType):
            out += _missing_fields(have[f.name], f.dataType, f"{name}.")
        elif (isinstance(f.dataType, ArrayType) and isinstance(f.dataType.elementType, StructType)
              and isinstance(have[f.name], ArrayType) and isinstance(have[f.name].elementType, StructType)):
            out += _missing_fields(have[f.name].elementType, f.dataType.elementType, f"{name}.element.")
    return out


def register_tables(spark, conf: Config) -> None:
    """Make every existing table queryable by name in this session."""
    from delta.tables import DeltaTable

    from schemas.tables import TABLES

    for t in TABLES.values():
        path = table_path(conf, t.name)
        if DeltaTable.isDeltaTable(spark, path):
            # The session catalog may name a table of another storage.root (tests,
            # notebooks): these are external tables, so dropping the name keeps the data.
            spark.sql(f"DROP TABLE IF EXISTS {t.name}")
            spark.sql(f"CREATE TABLE {t.name} USING delta LOCATION '{path}'")


def read(spark, conf: Config, name: str):
    path = table_path(conf, name)
    try:
        return spark.read.format("delta").load(path)
    except Exception as e:  # AnalysisException: not a Delta table
        if "DELTA_MISSING_DELTA_TABLE" in str(e) or "is not a Delta table" in str(e) or "PATH_NOT_FOUND" in str(e):
            raise ConfigError(f"table {name} not found under {root(conf)}: run `deltacrawl init` first") from None
        raise


def version(spark, conf: Config, name: str) -> int:
    """Table ``name``'s current version (one commit of its history read)."""
    return int(table(spark, conf, name).history(1).select("version").collect()[0][0])


def read_at(spark, conf: Config, name: str, at: int):
    """Table ``name`` as of version ``at``, however many commits came since."""
    return spark.read.format("delta").option("versionAsOf", int(at)).load(table_path(conf, name))


def pinned(spark, conf: Config, name: str):
    """Table ``name`` read at its current version: every scan of the DataFrame sees that one
    version, whatever another thread commits meanwhile."""
    return read_at(spark, conf, name, version(spark, conf, name))


def table(spark, conf: Config, name: str):
    from delta.tables import DeltaTable
    return DeltaTable.forPath(spark, table_path(conf, name))


def conform(df, t: Table):
    """Select ``t``'s columns in order, cast to its types (missing nullable columns as null)."""
    from pyspark.sql import functions as F

    cols = []
    present = set(df.columns)
    for f in t.schema.fields:
        if f.name in present:
            cols.append(F.col(f.name).cast(f.dataType).alias(f.name))
        else:
            cols.append(F.lit(None).cast(f.dataType).alias(f.name))
    return df.select(*cols)


#: Delta's MERGE copies its source first unless told not to (``auto``: whenever the source is not a
#: Delta scan alone), to guard against a source that changes between its two reads. A source that
#: is a staged Parquet file or a local row cannot change: the copy is a Spark job and a local
#: checkpoint for nothing (measured: bench/verb_cost.py, RESULTS.md "Rounds that cost seconds").
STABLE_MERGE_SOURCE = {"spark.databricks.delta.merge.materializeSource": "none"}

#: Plans of joins of small staged files and one-column scans whose sizes are known when they are
#: planned (update's, and generate's of a pipelined round): adaptive execution would run every
#: exchange as a Spark job of its own, to re-plan from sizes that change no decision (measured:
#: bench/verb_cost.py, RESULTS.md "Rounds that cost seconds"). Explicit broadcasts stay.
STATIC_PLANS = {"spark.sql.adaptive.enabled": "false"}



class session_conf:
    """``with session_conf(spark, {key: value}):`` session settings for a block, restored after it."""

    def __init__(self, spark, settings: dict[str, str]):
        self.spark, self.settings = spark, settings

    def __enter__(self):
        self.old = {k: self.spark.conf.get(k, None) for k in self.settings}
        for k, v in self.settings.items():
            self.spark.conf.set(k, v)

    def __exit__(self, *exc):
        for k, v in self.old.items():
            if v is None:
                self.spark.conf.unset(k)
            else:
                self.spark.conf.set(k, v)


class Timer:
    """Wall-clock seconds of a block: ``with Timer() as t: …; t.seconds``."""

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0


# -- errors an operator reads -----------------------------------------------------------------------
_CONFLICT_NAMES = ("Concurrent", "MetadataChangedException", "ProtocolChangedException")


def error_line(e: BaseException) -> str:
    """``ExceptionType: first line of its message`` (at most 300 characters).

    A raw Py4J error says only "An error occurred while calling o123.execute";
    the Java exception it wraps is what names the problem, so that one is used.
    """
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            text = str(java.toString())
        except Exception:  # noqa: BLE001 - the JVM may be gone
            text = ""
        if text:
            return text.strip().splitlines()[0][:300]
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def error_hint(e: BaseException) -> str:
    """What the operator should do about ``e``, for the one-line message."""
    line = error_line(e)
    if any(n in type(e).__name__ or n in line for n in _CONFLICT_NAMES) or "DELTA_CONCURRENT" in line:
        return ("another writer committed to the same table meanwhile (run one deltacrawl per storage.root); "
                "nothing of the failed step was committed: rerun the same command to resume the round")
    if "A schema mismatch detected when writing to the Delta table" in line or "DELTA_0007" in line:
        return ("the tables predate this deltacrawl (a column was added since): run `deltacrawl init`, which adds "
                "it and loses nothing, then rerun the same command to resume")
    if "JAVA_GATEWAY_EXITED" in line or "Java gateway process exited" in line:
        return "the JVM did not start: check Java (17+), spark.* settings and the output above"
    if isinstance(e, OSError) or any(s in line for s in ("IOException", "AccessDenied", "Permission denied",
                                                          "No space left", "FileSystem")):
        return "a storage write or read failed: check storage.root is reachable and writable, then rerun to resume"
    return "rerun the same command to resume; --debug (or DELTACRAWL_DEBUG=1) shows the traceback"
