"""Where the last export went: ``storage.root/exports/latest.json``, written by ``export``, read by ``lookup``.

One small JSON object, replaced whole at the end of every export (after its swap, so
it never names a half-built directory)::

    {"dir": "/abs/export/dir", "crawl_id": "deltacrawl", "finished": "2026-12-03T15:40:00Z", "counts": {...}}

A reader sees the old record or the new one, never a torn one: on a local disk the
record is written beside its place and renamed over it; on an object store a put of
one object is atomic. Plain Python, no Spark: ``deltacrawl lookup`` reads it without
starting the JVM (pyarrow's filesystems are imported only for a ``scheme://`` root).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

from crawl_udfs.config import ConfigError

RECORD = "exports/latest.json"


def record_path(root: str) -> str:
    """The record's path under ``storage.root`` (``root`` as ``jobs.common.root`` gives it)."""
    return f"{root.rstrip('/')}/{RECORD}"


def write(root: str, export_dir: str, crawl_id: str, counts: dict[str, int], store=None) -> str:
    """Record that ``export_dir`` (absolute, local) now holds the latest export; returns the record's path.
    ``store``: how to reach an object store (:func:`jobs.warc_staging.filesystem`)."""
    record = {"dir": export_dir, "crawl_id": crawl_id,
              "finished": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "counts": counts}
    data = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8")
    path = record_path(root)
    if "://" not in path:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return path
    from jobs.warc_staging import filesystem
    fs, where = filesystem(path, store)
    fs.create_dir(where.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(where) as f:
        f.write(data)
    return path


def latest_dir(root: str, store=None) -> str:
    """The directory of the latest export recorded under ``root``; a :class:`ConfigError` if none is."""
    path = record_path(root)
    try:
        if "://" not in path:
            with open(path, "rb") as f:
                data = f.read()
        else:
            from jobs.warc_staging import filesystem
            fs, where = filesystem(path, store)
            with fs.open_input_stream(where) as f:
                data = f.read()
    except FileNotFoundError:
        raise ConfigError(f"no export recorded under {root} (no {RECORD}): run `deltacrawl export --out DIR` "
                          "first, or name one with --export DIR") from None
    record: dict[str, Any] = json.loads(data)
    return record["dir"]
