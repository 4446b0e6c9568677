"""The console is deltacrawl's: the JVM's output goes to a log file unless verbose (jobs/spark_log.py).

The end-to-end check (a real JVM start printing nothing but our one line) is
tests/test_errors.py::test_unreachable_storage_root.
"""

from __future__ import annotations

import subprocess
import sys

from crawl_udfs import config
from jobs import spark_log

CHILD = [sys.executable, "-c", "import sys; print('Ivy says', file=sys.stderr); print('log4j says')"]


def test_a_process_started_inside_writes_to_the_log_and_the_console_stays_ours(tmp_path, capfd):
    conf = config.load(overrides=[f'spark.log_dir="{tmp_path}"'])
    with spark_log.jvm_output(conf, "init", jvm_running=False) as path:
        subprocess.run(CHILD, check=True)  # inherits fd 1 and 2, as the JVM PySpark launches does
    print("ours")
    out, err = capfd.readouterr()
    assert out == "ours\n" and err == ""
    assert open(path).read().splitlines() == ["Ivy says", "log4j says"]
    assert spark_log.current() == path


def test_verbose_or_a_running_jvm_leaves_the_console_alone(tmp_path, capfd):
    for overrides, running in ((["spark.verbose=true"], False), ([], True)):
        conf = config.load(overrides=[f'spark.log_dir="{tmp_path}"', *overrides])
        with spark_log.jvm_output(conf, "status", jvm_running=running) as path:
            subprocess.run(CHILD, check=True)
        assert path is None
        out, err = capfd.readouterr()
        assert (out, err) == ("log4j says\n", "Ivy says\n")


def test_old_logs_are_pruned(tmp_path):
    for i in range(spark_log.KEEP_LOGS + 5):
        (tmp_path / f"old-{i:02d}.log").write_text("x")
    conf = config.load(overrides=[f'spark.log_dir="{tmp_path}"'])
    with spark_log.jvm_output(conf, "init", jvm_running=False):
        pass
    assert len(list(tmp_path.glob("*.log"))) == spark_log.KEEP_LOGS


def test_the_first_start_names_only_the_packages_missing_from_the_ivy_cache(tmp_path):
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "io.delta_delta-spark_2.13-4.0.1.jar").write_bytes(b"")
    packages = "io.delta:delta-spark_2.13:4.0.1,org.apache.hadoop:hadoop-aws:3.4.1"
    assert spark_log.missing_packages(packages, [f"spark.jars.ivy={tmp_path}"]) == [
        "org.apache.hadoop:hadoop-aws:3.4.1"]
    assert spark_log.missing_packages(packages, [f"spark.jars.ivy={tmp_path / 'empty'}"]) == packages.split(",")
