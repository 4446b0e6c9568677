"""The console is deltacrawl's: the JVM's output goes to a log file unless verbose (jobs/spark_log.py).

The end-to-end check (a real JVM start printing nothing but our one line) is
tests/test_errors.py::test_unreachable_storage_root.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time

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


def test_a_log_pruned_by_a_command_starting_beside_this_one_is_no_error(tmp_path, monkeypatch):
    """Two commands started together both prune: a file the other removed between the listing and the
    sort must not fail this one (it did, as a "storage write or read failed", in tests/test_lease.py)."""
    for i in range(spark_log.KEEP_LOGS + 5):
        (tmp_path / f"old-{i:02d}.log").write_text("x")
    real_glob = spark_log.glob.glob

    def glob_then_other_prunes(pattern):
        found = real_glob(pattern)
        for name in found[:3]:
            os.remove(name)  # the other command, between this one's listing and its sort
        return found

    monkeypatch.setattr(spark_log.glob, "glob", glob_then_other_prunes)
    spark_log._prune(tmp_path)
    assert len(list(tmp_path.glob("*.log"))) == spark_log.KEEP_LOGS - 1


def test_the_first_start_names_only_the_packages_missing_from_the_ivy_cache(tmp_path):
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "io.delta_delta-spark_2.13-4.0.1.jar").write_bytes(b"")
    packages = "io.delta:delta-spark_2.13:4.0.1,org.apache.hadoop:hadoop-aws:3.4.1"
    assert spark_log.missing_packages(packages, [f"spark.jars.ivy={tmp_path}"]) == [
        "org.apache.hadoop:hadoop-aws:3.4.1"]
    assert spark_log.missing_packages(packages, [f"spark.jars.ivy={tmp_path / 'empty'}"]) == packages.split(",")


def test_a_first_start_waits_for_another_fetching_into_the_same_ivy_cache(tmp_path, capfd):
    """Two commands starting together on a fresh machine: the second waits for the first's fetch
    (Ivy's cache is not safe for two downloads of one JAR); a start with the JARs cached takes no lock."""
    extra, entered = [f"spark.jars.ivy={tmp_path}"], threading.Event()

    def start():
        with spark_log.package_fetch("io.delta:delta-spark_2.13:4.0.1", extra):
            entered.set()

    with open(tmp_path / spark_log.FETCH_LOCK, "a") as other:  # another command's fetch under way
        fcntl.flock(other, fcntl.LOCK_EX)
        waiting = threading.Thread(target=start)
        waiting.start()
        assert not entered.wait(1.0)
        _, err = capfd.readouterr()
        assert "first start: fetching io.delta:delta-spark_2.13:4.0.1" in err and "waiting for it" in err
        fcntl.flock(other, fcntl.LOCK_UN)
        waiting.join(10)
        assert entered.is_set()

        fcntl.flock(other, fcntl.LOCK_EX)  # held again, but this start has nothing to fetch
        (tmp_path / "jars").mkdir()
        (tmp_path / "jars" / "io.delta_delta-spark_2.13-4.0.1.jar").write_bytes(b"")
        with spark_log.package_fetch("io.delta:delta-spark_2.13:4.0.1", extra):
            pass
        assert capfd.readouterr().err == ""

    (tmp_path / "a-file").write_bytes(b"")  # an Ivy home that cannot be made: no lock, and no error of ours
    with spark_log.package_fetch("io.delta:delta-spark_2.13:4.0.1", [f"spark.jars.ivy={tmp_path / 'a-file' / 'ivy'}"]):
        pass


# -- the live line of a fetch (jobs/progress.py) --------------------------------------------------
def _snap(pages, followed=0, hosts=10, busy=10, done=False):
    return {"pages": pages, "urls": pages + 5, "followed": followed, "hosts": hosts, "busy_hosts": busy,
            "seconds": 1.0, "done": done}


def test_task_snapshots_are_replaced_whole_and_summed_into_one_line(tmp_path):
    from jobs import progress
    d = progress.round_dir(str(tmp_path / "crawl"), 3)
    progress.TaskProgress(d, 0, 0)(_snap(5))
    progress.TaskProgress(d, 0, 1)(_snap(7, followed=2, busy=4))   # a retried attempt replaces the first
    progress.TaskProgress(d, 1, 0)(_snap(100, hosts=20, busy=0, done=True))
    snaps = progress.read(d)
    assert sorted(s["pages"] for s in snaps) == [7, 100]
    assert progress.line(3, 2, snaps, 12.34) == ("fetch round 3: 1/2 tasks done, 107 pages (2 followed in-round), "
                                                 "12.3 pages/s, 26/30 hosts finished")
    assert progress.read(str(tmp_path / "nothing-here")) == []
    assert progress.line(3, 2, [], None) == "fetch round 3: 2 task(s) starting"  # no snapshot written yet


def test_the_live_line_prints_plain_lines_off_a_terminal_and_cleans_up(tmp_path):
    import io
    from jobs import progress
    d = progress.round_dir(str(tmp_path / "crawl"), 1)
    out = io.StringIO()
    with progress.LiveLine(d, 1, 1, every_s=0.05, out=out) as live:
        writer = progress.TaskProgress(d, 0, 0)
        for pages in (1, 2, 3):
            writer(_snap(pages))
            time.sleep(0.2)
        writer(_snap(4, busy=0, done=True))
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("fetch round 1: 1/1 tasks done, 4 pages") and "\r" not in out.getvalue()
    assert len(lines) == 2  # the first tick, then the last: plain lines come every PLAIN_EVERY_S, not per tick
    assert live.last == lines[-1] and not (tmp_path / "crawl" / progress.PROGRESS).exists()


def test_no_live_line_when_progress_is_off(tmp_path):
    import io
    from jobs import progress
    out = io.StringIO()
    with progress.LiveLine(progress.round_dir(str(tmp_path), 1), 1, 1, every_s=0, out=out):
        pass
    assert out.getvalue() == ""
