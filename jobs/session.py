"""The one place a SparkSession is built: from ``conf/``, with Delta Lake on.

Embedded by default (``spark.master = local[*]``); under ``spark-submit`` the
master and resources given there win, and the same code runs on a cluster.
Delta's JARs come through ``spark.jars.packages`` (resolved from Maven Central
at the first start and cached by Ivy in ``~/.ivy2.5.2``), and so does Hadoop's S3A
(``hadoop-aws`` and the AWS SDK it needs) when ``storage.root`` is ``s3a://``, with
the ``fs.s3a.*`` settings of the ``storage.s3_*`` keys (:mod:`jobs.object_store`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from contextlib import nullcontext

from crawl_udfs.config import Config, ConfigError
from jobs import faults, object_store, spark_log

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
#: Generated classes Spark keeps compiled (``spark.sql.codegen.cache.maxEntries``, a static setting; its
#: default 100 is under one round's distinct plans). ``spark.extra`` may override it.
CODEGEN_CACHE_ENTRIES = 1000


#: The oldest Java the bundled Spark runs on (Spark 4 needs 17).
MIN_JAVA = 17
_java_checked: list[str] = []  # the java found good once in this process


def _check_java() -> None:
    """Find the ``java`` Spark's launcher will run (``$JAVA_HOME/bin/java`` when JAVA_HOME is set,
    else ``java`` on PATH, as ``spark-class`` does) and check its version, so a missing or old
    Java is one clear line instead of a gateway error after a JVM crash."""
    java_home = os.environ.get("JAVA_HOME")
    if os.environ.get("PYSPARK_GATEWAY_PORT") or _java_checked == [java_home or os.environ.get("PATH", "")]:
        return  # under spark-submit the JVM is already running
    if java_home:
        java = os.path.join(java_home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise ConfigError(f"JAVA_HOME={java_home} has no bin/java: point JAVA_HOME at a Java "
                              f"{MIN_JAVA}+ installation, or unset it to use java on PATH")
    else:
        java = shutil.which("java")
        if java is None:
            raise ConfigError(f"Java was not found: Spark needs Java {MIN_JAVA}+ on PATH or in JAVA_HOME")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.SubprocessError) as e:
        raise ConfigError(f"{java} does not run ({e}): Spark needs Java {MIN_JAVA}+") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = (int(m.group(2) or 0) if m.group(1) == "1" else int(m.group(1))) if m else None
    if major is None or major < MIN_JAVA:
        found = out.strip().splitlines()[0] if out.strip() else "no version output"
        raise ConfigError(f"{java} is not Java {MIN_JAVA}+ ({found}): install Java {MIN_JAVA} or set JAVA_HOME")
    _java_checked[:] = [java_home or os.environ.get("PATH", "")]


def build_session(conf: Config, *, app_suffix: str = ""):
    """Get or create the process's SparkSession configured for deltacrawl."""
    _check_java()
    faults.note_driver()
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
        # A round plans ~230 whole-stage and expression classes; with Spark's default of 100 cached, each
        # round compiled nearly all of them again (Janino: ~2 CPU s a round, bench/RESULTS.md "Session 20").
        .config("spark.sql.codegen.cache.maxEntries", str(CODEGEN_CACHE_ENTRIES))
    )
    if "spark.master" not in _submitted_conf():
        master, cores = with_spare_slots(local_master(conf.spark.master, conf.spark.local_max_failures),
                                         conf.spark.local_spare_slots)
        builder = builder.master(master).config("spark.driver.memory", conf.spark.driver_memory)
        if conf.spark.driver_java_options.strip():  # read by the launcher when it starts this driver's JVM
            builder = builder.config("spark.driver.extraJavaOptions", conf.spark.driver_java_options.strip())
        if cores:
            builder = builder.config("spark.default.parallelism", str(cores))
        if conf.spark.master.startswith("local"):
            # Delta reads its log with 50 tasks by default: pure overhead on a laptop.
            builder = builder.config("spark.databricks.delta.snapshotPartitions", "2")
    for key, value in object_store.spark_settings(conf).items():  # s3a:// roots only; spark.extra may override
        builder = builder.config(key, value)
    for pair in conf.spark.extra:  # each "key=value" (the rule of spark.extra, crawl_udfs/config_rules.py)
        key, _, value = pair.partition("=")
        builder = builder.config(key.strip(), value.strip())
    builder = configure_spark_with_delta_pip(builder, extra_packages=object_store.packages(conf))
    from pyspark import SparkContext
    jvm_running = SparkContext._active_spark_context is not None or bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    # Delta's helper names its packages only on the builder (no public getter).
    fetch = nullcontext() if jvm_running else spark_log.package_fetch(
        builder._options.get("spark.jars.packages", ""), conf.spark.extra)
    with fetch, spark_log.jvm_output(conf, app_suffix, jvm_running=jvm_running):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(conf.spark.log_level)
    return spark


def local_master(master: str, max_failures: int) -> str:
    """``local`` / ``local[N]`` / ``local[*]`` with task retries (``local[N,F]``); any other master as given."""
    if max_failures < 1:
        raise ConfigError(f"spark.local_max_failures must be >= 1, got {max_failures}")
    m = re.fullmatch(r"local(?:\[(\*|\d+)\])?", master.strip())
    if not m:
        return master
    return f"local[{m.group(1) or 1},{max_failures}]"


def with_spare_slots(master: str, spare: int) -> tuple[str, int | None]:
    """``local[N,F]`` as ``local[N+spare,F]`` and N (``*``: the machine's cores), for
    ``spark.default.parallelism``; any other master as given, with None."""
    m = re.fullmatch(r"local\[(\*|\d+),(\d+)\]", master)
    if not m or spare <= 0:
        return master, None
    cores = usable_cores() if m.group(1) == "*" else int(m.group(1))
    return f"local[{cores + spare},{m.group(2)}]", cores


def usable_cores() -> int:
    """The cores ``local[*]`` would use: this process's CPUs, within a cgroup v2 CPU quota if one
    is set (the JVM's ``availableProcessors`` honours it; ``os.cpu_count`` does not)."""
    n = len(os.sched_getaffinity(0)) or 1
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            n = min(n, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return n


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
