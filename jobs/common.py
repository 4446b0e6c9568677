"""Plumbing every job shares: where tables live, creating and registering them, the round ledger.

Kept small on purpose (STYLE.md rule 1): a job module imports these helpers,
never a base class.
"""

from __future__ import annotations

import datetime as dt
import time

from crawl_udfs.config import Config, ConfigError
from schemas.tables import TABLES, Table


def root(conf: Config) -> str:
    r = conf.storage.root.rstrip("/")
    if not r:
        raise ConfigError("storage.root is empty")
    if "://" not in r:
        import os
        r = os.path.abspath(r)
    return r


def table_path(conf: Config, name: str) -> str:
    return f"{root(conf)}/tables/{name}"


def warc_root(conf: Config) -> str:
    return f"{root(conf)}/warc"


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def ensure_tables(spark, conf: Config) -> list[str]:
    """Create missing tables, add missing columns to old ones; idempotent. Returns what changed."""
    from delta.tables import DeltaTable

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
        existing = {f.name for f in spark.read.format("delta").load(path).schema.fields}
        missing = [f for f in t.schema.fields if f.name not in existing]
        if missing:
            cols = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
            spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({cols})")
            changed.append(f"added {len(missing)} column(s) to {t.name}")
    register_tables(spark, conf)
    return changed


def register_tables(spark, conf: Config) -> None:
    """Make every existing table queryable by name in this session."""
    from delta.tables import DeltaTable

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


class Timer:
    """Wall-clock seconds of a block: ``with Timer() as t: …; t.seconds``."""

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
