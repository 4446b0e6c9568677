"""What an operator sees when the setup is wrong: one line on stderr, a non-zero exit, no traceback.

Each case runs the real ``deltacrawl`` command in a subprocess. Configuration
and Java errors are found before Spark starts (about a second each); the
storage case starts a JVM. A failed write and a Delta commit conflict during
update are in tests/test_crash.py (``failed_writes``), where a fetched round
exists to update.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DELTACRAWL = str(Path(sys.executable).with_name("deltacrawl"))


def run(args: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 300) -> tuple[int, list[str]]:
    p = subprocess.run([DELTACRAWL, *args], capture_output=True, text=True, env=env or dict(os.environ),
                       cwd=cwd, timeout=timeout)
    return p.returncode, [ln for ln in p.stderr.splitlines() if ln.strip()]


def assert_one_clear_line(rc: int, lines: list[str], *words: str) -> str:
    ours = [ln for ln in lines if ln.startswith("deltacrawl:")]
    assert rc != 0, lines
    assert len(ours) == 1, lines
    assert not any("Traceback" in ln for ln in lines), lines
    for w in words:
        assert w in ours[0], (w, ours[0])
    return ours[0]


@pytest.mark.parametrize("args, words", [
    (["--set", "politeness.nope=1"], ["unknown configuration key 'politeness.nope'", "defaults.toml"]),
    (["--set", "politeness.host_delay_s=abc"], ["politeness.host_delay_s", "float", "'abc'"]),
    (["--set", "no_equals_sign"], ["section.key=value"]),
    (["--conf", "/nonexistent/deltacrawl.toml"], ["not found", "/nonexistent/deltacrawl.toml"]),
    (["--set", "politeness.host_delay_s=-1"], ["politeness.host_delay_s", "must be >= 0", "-1.0"]),
    (["--set", 'net.allow_private_cidrs=["10.1.2.3/8"]'], ["net.allow_private_cidrs", "'10.1.2.3/8'",
                                                           "host bits set"]),
    (["--set", "inject.fetch_interval_s=60"], ["inject.fetch_interval_s was removed",
                                               "use schedule.default_interval_s"]),
])
def test_bad_configuration_is_one_line_and_exit_2(args, words):
    rc, lines = run([*args, "status"])
    assert rc == 2
    assert_one_clear_line(rc, lines, *words)


def test_invalid_toml_and_unknown_key_in_a_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[politeness\nhost_delay_s = 1\n")
    rc, lines = run(["--conf", str(bad), "status"])
    assert rc == 2
    assert_one_clear_line(rc, lines, "not valid TOML", str(bad))
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[politeness]\nhost_delay = 2.0\n")
    rc, lines = run(["--conf", str(unknown), "status"])
    assert rc == 2
    assert_one_clear_line(rc, lines, "politeness.host_delay", str(unknown))
    removed = tmp_path / "removed.toml"
    removed.write_text("[robots]\nmax_redirects = 3\n")
    rc, lines = run(["--conf", str(removed), "status"])
    assert rc == 2
    assert_one_clear_line(rc, lines, "robots.max_redirects was removed: use fetch.max_redirect_hops", str(removed))


def test_java_home_pointing_nowhere(tmp_path):
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-jdk")}
    rc, lines = run(["status"], env=env)
    assert rc == 2
    assert_one_clear_line(rc, lines, "JAVA_HOME", "no bin/java")


def test_no_java_at_all():
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv's bin: python and deltacrawl, no java
    rc, lines = run(["status"], env=env)
    assert rc == 2
    assert_one_clear_line(rc, lines, "Java was not found", "17")


def test_too_old_java(tmp_path):
    java = tmp_path / "jdk8" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text('#!/bin/sh\necho \'openjdk version "1.8.0_412"\' >&2\n')
    java.chmod(0o755)
    rc, lines = run(["status"], env={**os.environ, "JAVA_HOME": str(tmp_path / "jdk8")})
    assert rc == 2
    assert_one_clear_line(rc, lines, "is not Java 17+", "1.8.0_412")


def test_debug_shows_the_traceback(tmp_path):
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-jdk")}
    rc, lines = run(["--debug", "status"], env=env)
    assert rc != 0 and any("Traceback" in ln for ln in lines), lines


@pytest.mark.slow
def test_unreachable_storage_root(tmp_path):
    """storage.root below a regular file: no directory can be made there (even as root)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    root = blocker / "crawl"
    logs = tmp_path / "logs"
    rc, lines = run(["--set", f'storage.root="{root}"', "--set", "spark.master=local[1]",
                     "--set", "spark.driver_memory=1g", "--set", f'spark.log_dir="{logs}"', "init"])
    assert rc == 2
    line = assert_one_clear_line(rc, lines, "storage.root", str(root), "not reachable")
    assert len(line) < 600
    assert lines == [line]  # quiet by default: Ivy's report and Spark's banner went to the command's log
    (log,) = logs.glob("init-*.log")
    assert "log4j" in log.read_text()


def test_commit_conflict_and_java_errors_read_as_one_line_with_a_remedy():
    """The line main() prints for a Delta commit conflict, a wrapped Java error and a storage error."""
    from delta.exceptions.base import ConcurrentAppendException  # the captured one's base; needs no JVM

    from jobs.common import error_hint, error_line

    conflict = ConcurrentAppendException(message="[DELTA_CONCURRENT_APPEND] Files were added to the root of the "
                                              "table by a concurrent update. Please try the operation again.\n"
                                              "Conflicting commit: {...}")
    assert error_line(conflict).startswith("ConcurrentAppendException: [DELTA_CONCURRENT_APPEND]")
    assert "\n" not in error_line(conflict)
    assert "another writer" in error_hint(conflict) and "rerun" in error_hint(conflict)

    class JavaError(Exception):  # the shape of py4j's Py4JJavaError: str() says nothing useful
        class java_exception:
            @staticmethod
            def toString():
                return "java.io.IOException: Mkdirs failed to create /x/_delta_log\n\tat org.apache..."

        def __str__(self):
            return "An error occurred while calling o123.save.\n: java.io.IOException: ..."
    e = JavaError()
    assert error_line(e) == "java.io.IOException: Mkdirs failed to create /x/_delta_log"
    assert "storage" in error_hint(e)
    assert "storage" in error_hint(PermissionError(13, "Permission denied"))
    assert "--debug" in error_hint(ValueError("something else"))
    # a write to a table older than the code (the message Delta 4.0 gave for fetch_list.pages_fetched)
    old = Exception("[_LEGACY_ERROR_TEMP_DELTA_0007] A schema mismatch detected when writing to the Delta table "
                    "(Table ID: 5bea72bd).\nTo enable schema migration using DataFrameWriter ...")
    assert "deltacrawl init" in error_hint(old) and "rerun" in error_hint(old)


def test_local_master_gets_task_retries():
    from crawl_udfs.config import ConfigError
    from jobs.session import local_master
    assert local_master("local[*]", 4) == "local[*,4]"
    assert local_master("local[2]", 4) == "local[2,4]"
    assert local_master("local", 3) == "local[1,3]"
    assert local_master("local[2,7]", 4) == "local[2,7]"          # the operator's own choice wins
    assert local_master("spark://127.0.0.1:7077", 4) == "spark://127.0.0.1:7077"
    with pytest.raises(ConfigError):
        local_master("local[2]", 0)


def test_embedded_master_gets_spare_slots_for_the_update_beside_a_fetch(spark):
    import os

    from jobs.session import with_spare_slots
    assert with_spare_slots("local[2,4]", 2) == ("local[4,4]", 2)
    from jobs.session import usable_cores
    assert 1 <= usable_cores() <= len(os.sched_getaffinity(0))
    assert with_spare_slots("local[*,4]", 1) == (f"local[{usable_cores() + 1},4]", usable_cores())
    assert with_spare_slots("local[2,4]", 0) == ("local[2,4]", None)
    assert with_spare_slots("spark://127.0.0.1:7077", 2) == ("spark://127.0.0.1:7077", None)
    # the suite's session (spark.master local[2], the default 2 spare): fetch partitions stay the cores
    assert spark.sparkContext.defaultParallelism == 2
    assert spark.sparkContext.master == "local[4,4]"


def test_the_driver_jvm_deltacrawl_starts_gets_its_java_options(spark):
    """``spark.driver_java_options`` reaches the JVM the launcher starts (the suite's session is one: its
    conftest sets a marker), and a value that is not one line of text is refused with the key named."""
    from crawl_udfs import config
    from jobs.session import CODEGEN_CACHE_ENTRIES
    # the default: the parallel collector (bench/RESULTS.md, "Session 20"), which the suite's session keeps
    assert config.load().spark.driver_java_options == "-XX:+UseParallelGC"
    mf = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    args = list(mf.getRuntimeMXBean().getInputArguments())
    assert "-Ddeltacrawl.suite=1" in args and "-XX:+UseParallelGC" in args, args
    assert {str(gc.getName()) for gc in mf.getGarbageCollectorMXBeans()} == {"PS MarkSweep", "PS Scavenge"}
    # and the session keeps a round's generated classes compiled (jobs/session.py)
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == str(CODEGEN_CACHE_ENTRIES)
    with pytest.raises(config.ConfigError, match="spark.driver_java_options"):
        config.load(overrides=["spark.driver_java_options=3"])
