"""The one place a SparkSession is built: from ``conf/``, with Delta Lake on.

Embedded by default (``spark.master = local[*]``); under ``spark-submit`` the
master and resources given there win, and the same code runs on a cluster.
Delta's JARs come through ``spark.jars.packages`` (resolved from Maven Central
at the first start and cached by Ivy in ``~/.ivy2``).
"""

from __future__ import annotations

import os
import shutil
import sys

from crawl_udfs.config import Config, ConfigError

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def _check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.path.exists(os.path.join(java_home, "bin", "java")):
        return
    if shutil.which("java") is None:
        raise ConfigError("Java was not found: Spark needs Java 17 on PATH or JAVA_HOME")


def build_session(conf: Config, *, app_suffix: str = ""):
    """Get or create the process's SparkSession configured for deltacrawl."""
    _check_java()
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(conf.spark.app_name + (f"-{app_suffix}" if app_suffix else ""))
        .config("spark.sql.extensions", DELTA_EXTENSION)
        .config("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
        .config("spark.speculation", "false")
        .config("spark.ui.enabled", str(conf.spark.ui_enabled).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(conf.spark.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.databricks.delta.schema.autoMerge.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    if "spark.master" not in _submitted_conf():
        builder = builder.master(conf.spark.master).config("spark.driver.memory", conf.spark.driver_memory)
        if conf.spark.master.startswith("local"):
            # Delta reads its log with 50 tasks by default: pure overhead on a laptop.
            builder = builder.config("spark.databricks.delta.snapshotPartitions", "2")
    for pair in conf.spark.extra:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"spark.extra entries must be key=value, got {pair!r}")
        builder = builder.config(key.strip(), value.strip())
    spark = configure_spark_with_delta_pip(builder).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _submitted_conf() -> dict[str, str]:
    """Settings spark-submit passed to this driver (empty when run as a plain script)."""
    raw = os.environ.get("SPARK_SUBMIT_OPTS", "")
    out = {}
    if os.environ.get("PYSPARK_GATEWAY_PORT") or os.environ.get("SPARK_ENV_LOADED"):
        out["spark.master"] = "submitted"
    for token in raw.split():
        if token.startswith("-Dspark.master="):
            out["spark.master"] = token.split("=", 1)[1]
    return out
