"""What the Airflow DAGs (``airflow_dags/``) take from a crawl's configuration, without Spark.

Airflow runs in its own environment, where pyspark is not installed (docs/ARCHITECTURE.md,
"Airflow"): this module imports only the standard library, :mod:`crawl_udfs.config` and
:mod:`jobs.cli`'s exit statuses, so a DAG file can import it. The DAG files only wire tasks;
every value they use is decided here, from two environment variables:

- ``DELTACRAWL``: the ``deltacrawl`` executable of the crawler's own venv (default: the one on PATH);
- ``DELTACRAWL_CONF``: its configuration overlay(s), ``os.pathsep``-separated, read with
  :func:`crawl_udfs.config.load` exactly as ``deltacrawl --conf`` reads them;
- ``DELTACRAWL_EXPORT_DIR`` (optional): where the export DAG writes, default ``<storage.root>/export``.

Guarantees:

- **The fetch task's timeout covers one fetch window**: ``fetch.task_budget_s`` (each fetch
  task's wall-clock budget), plus ``fetch.total_timeout_s`` (a request started just before the
  budget ends may take that long), plus :data:`STEP_MARGIN_S` for what is not fetching (the JVM
  start, reading the fetch list, promoting WARC files, the ledger). A fetch past it is hung;
  Airflow kills it and retries, and the retry resumes the round (the ledger says ``fetching``).
  It assumes one wave of fetch tasks: ``generate.fetch_partitions`` at most the task slots (its
  default, 0, is Spark's defaultParallelism); a Spark task retried after a crash starts a new
  window, and may then run into the timeout (the Airflow retry resumes it).
- **A retry waits out a dead attempt's lease**: ``retry_delay`` is ``lease.ttl_s`` plus one
  ``lease.heartbeat_s``, so the lease of an attempt killed on another machine has expired and the
  retry takes it over (on the same machine a dead holder is taken over at once). A retry that
  still meets a live writer (a person's ``deltacrawl crawl``) exits 3 and waits again.
- **storage.root must be absolute** (or a URI): Airflow runs bash tasks in temporary directories,
  where a relative root would start a new, empty crawl.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
from dataclasses import dataclass
from typing import Mapping

from crawl_udfs import config
from crawl_udfs.config import ConfigError
from jobs.cli import EXIT_LEASE_HELD, EXIT_NOTHING_DUE

__all__ = ["EXIT_LEASE_HELD", "EXIT_NOTHING_DUE", "Plan", "STEP_MARGIN_S", "WRITES", "plan"]

#: Seconds a fetch step spends outside its fetch window at most (JVM start, job set-up, WARC promotion).
STEP_MARGIN_S = 600.0
#: The tables each round verb writes (besides the ledger, which every verb keeps): the DAG's Assets.
WRITES = {
    "generate": ("fetch_list",),
    "fetch": ("fetch_output",),
    "update": ("crawldb", "hosts", "fetch_log", "links", "near_dup_index"),
}


@dataclass(frozen=True)
class Plan:
    """The commands, Asset URIs and time limits of one crawl's DAGs."""

    deltacrawl: str
    conf_files: tuple[str, ...]
    root: str  # storage.root, absolute or a URI, no trailing slash
    fetch_timeout: dt.timedelta
    retry_delay: dt.timedelta
    export_dir: str

    def command(self, verb: str, *args: str) -> str:
        """The bash command of one CLI verb (every path quoted)."""
        words = [self.deltacrawl, *(w for f in self.conf_files for w in ("--conf", f)), verb, *args]
        return " ".join(shlex.quote(w) for w in words)

    def table_uri(self, name: str) -> str:
        """The URI of table ``name`` (an Airflow Asset's): ``file://`` for a local storage.root."""
        path = f"{self.root}/tables/{name}"
        return path if "://" in path else f"file://{path}"


def plan(environ: Mapping[str, str] = os.environ) -> Plan:
    """The plan of the crawl ``environ`` names (:class:`ConfigError` for a bad configuration)."""
    files = tuple(os.path.abspath(f) for f in environ.get("DELTACRAWL_CONF", "").split(os.pathsep) if f)
    conf = config.load(files)
    root = conf.storage.root.rstrip("/")
    if "://" not in root and not os.path.isabs(root):
        raise ConfigError(f"storage.root {conf.storage.root!r} is relative: under Airflow it must be an absolute "
                          "path or a URI (bash tasks run in temporary directories); set it in DELTACRAWL_CONF")
    window = conf.fetch.task_budget_s + conf.fetch.total_timeout_s
    return Plan(deltacrawl=environ.get("DELTACRAWL", "deltacrawl"), conf_files=files, root=root,
                fetch_timeout=dt.timedelta(seconds=window + STEP_MARGIN_S),
                retry_delay=dt.timedelta(seconds=conf.lease.ttl_s + conf.lease.heartbeat_s),
                export_dir=environ.get("DELTACRAWL_EXPORT_DIR") or f"{root}/export")
