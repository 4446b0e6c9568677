"""The embedded SparkSession (jobs/session.py): what the one JVM of local[N] is started with."""

from __future__ import annotations


def test_the_embedded_jvm_runs_with_spark_driver_java_options(spark):
    from crawl_udfs import config

    wanted = config.load().spark.driver_java_options
    assert wanted, "the default names options (conf/defaults.toml [spark] driver_java_options)"
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    args = list(runtime.getInputArguments())
    assert all(opt in args for opt in wanted.split()), args
