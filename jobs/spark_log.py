"""Where the JVM's own output goes: a log file, unless the operator asks for it (``--verbose``).

A command's console starts with deltacrawl's lines, not with Ivy's resolution report
and Spark's log4j banner. The JVM that PySpark launches inherits this process's
stdout and stderr (file descriptors 1 and 2), so while it starts they point at a log
file under ``spark.log_dir``; the JVM keeps that file for its whole life (its later
warnings land there too) and this process gets its console back at once.

Under ``spark-submit`` the JVM is already running (its launcher owns the output), and
a session that already exists in the process is reused: both leave the console alone.

A first start (packages missing from the Ivy cache) names them on the console and holds a lock in the
Ivy home while its JVM fetches them (:func:`package_fetch`), so commands starting together fetch in turn.
"""

from __future__ import annotations

import fcntl
import glob
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from crawl_udfs.config import Config

#: Log files of earlier commands kept in spark.log_dir (the newest).
KEEP_LOGS = 20
#: The Ivy home Spark 4's launcher uses when ``spark.jars.ivy`` is not set.
DEFAULT_IVY_HOME = "~/.ivy2.5.2"
#: The lock file in the Ivy home a first start holds while the JVM fetches packages into the cache.
FETCH_LOCK = "deltacrawl-fetch.lock"

_current: list[str] = []  # the log file of this process's JVM, once it was launched by us


def current() -> str | None:
    """The file the JVM of this process writes its log to (None: the console, or not launched by us)."""
    return _current[0] if _current else None


@contextmanager
def jvm_output(conf: Config, verb: str, *, jvm_running: bool):
    """Around the session's creation: fd 1 and 2 point at a new log file unless verbose or the JVM runs."""
    if conf.spark.verbose or jvm_running:
        yield None
        return
    log_dir = Path(os.path.expanduser(conf.spark.log_dir))
    log_dir.mkdir(parents=True, exist_ok=True)
    _prune(log_dir)
    path = log_dir / f"{verb or 'spark'}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}.log"
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        _current[:] = [str(path)]
        yield str(path)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def ivy_home(extra: list[str]) -> Path:
    """The Ivy home the launcher will use: ``spark.jars.ivy`` from ``spark.extra``, else Spark's default."""
    ivy = next((v.strip() for k, _, v in (p.partition("=") for p in extra) if k.strip() == "spark.jars.ivy"),
               DEFAULT_IVY_HOME)
    return Path(os.path.expanduser(ivy))


def missing_packages(packages: str, extra: list[str]) -> list[str]:
    """The Maven coordinates of ``packages`` ("group:artifact:version,...") not yet in the Ivy cache."""
    jars = ivy_home(extra) / "jars"
    out = []
    for coord in filter(None, (c.strip() for c in packages.split(","))):
        group, artifact, version = coord.split(":")[:3]
        if not (jars / f"{group}_{artifact}-{version}.jar").exists():
            out.append(coord)
    return out


@contextmanager
def package_fetch(packages: str, extra: list[str]):
    """Around the JVM's start: when some of ``packages`` are not in the Ivy cache yet, say so on the
    console and hold a lock in the Ivy home until the JVM is up, so commands starting together on a
    fresh machine fetch one after the other. Ivy's cache is not safe for two downloads of one JAR at
    once: of three crawls started together, one died with ``download failed: ...delta-spark_2.13.jar``.
    A start with everything cached takes no lock (Ivy only reads the cache then)."""
    missing = missing_packages(packages, extra)
    if not missing:
        yield
        return
    print(f"deltacrawl: first start: fetching {', '.join(missing)} and dependencies from Maven "
          f"(cached for every later start)", file=sys.stderr, flush=True)
    home = ivy_home(extra)
    try:
        home.mkdir(parents=True, exist_ok=True)
        lock = open(home / FETCH_LOCK, "a")
    except OSError:  # an Ivy home this user cannot write to: Ivy's own error says so, in the JVM's log
        yield
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"deltacrawl: another command is fetching them into {home}; waiting for it",
                  file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _mtime(path: str) -> float:
    """``path``'s modification time; 0 when it is gone (another command starting beside this one pruned it)."""
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


def _prune(log_dir: Path) -> None:
    logs = sorted(glob.glob(str(log_dir / "*.log")), key=_mtime)
    for old in logs[:max(0, len(logs) - KEEP_LOGS + 1)]:
        try:
            os.remove(old)
        except OSError:
            pass
