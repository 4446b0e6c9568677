"""WARC files of fetch tasks: named by (round, partition), staged per attempt, promoted after commit.

Files written by Python code inside a task get no output-commit protocol from
Spark (docs/ARCHITECTURE.md, "Facts the design rests on"): a failed or duplicated attempt
leaves its files behind, and a retried attempt writes files of the same names.
So (Hadoop's FileOutputCommitter, done by hand):

- a task writes its WARC files in a task-local temp dir (:mod:`jobs.spool`: removed at
  the task's end, or by a later task when the worker was killed) under their FINAL names,
  ``{warc.prefix}-r{round:06d}-p{partition:05d}-{serial:05d}.warc.gz`` — the
  same names in every attempt of that task;
- at its end it copies them to a directory unique to the attempt,
  ``warc/_staging/r{round:06d}/s{stage}-p{partition}-a{attempt}/``, and its rows
  name both (``warc_filename``, ``warc_staging``);
- after the rows are committed to ``fetch_output``, the driver moves exactly the
  files the committed rows name to ``warc/<warc_filename>`` (:func:`promote`;
  idempotent: a file already there is left alone) and deletes the round's whole
  staging tree, which removes every failed attempt's orphans.

All storage access goes through ``pyarrow.fs``, so the same code works on local
paths and on object storage (``s3a://…`` with the ``storage.s3_*`` keys: :mod:`jobs.object_store`;
``gs://…``, ``abfs://…`` with Arrow's own settings).
"""

from __future__ import annotations

import functools
import os
from typing import Iterable

from pyarrow import fs as pafs

from jobs import object_store

STAGING = "_staging"


def warc_name(prefix: str, round_no: int, partition: int, serial: int) -> str:
    """The final name of a WARC file: fixed by round, task partition and serial, never by attempt."""
    return f"{prefix}-r{round_no:06d}-p{partition:05d}-{serial:05d}.warc.gz"


def round_staging_dir(warc_root: str, round_no: int) -> str:
    return f"{warc_root.rstrip('/')}/{STAGING}/r{round_no:06d}"


def attempt_dir(warc_root: str, round_no: int, stage_id: int, partition: int, attempt: int) -> str:
    """Where one task attempt's files wait for the commit: unique to (stage, partition, attempt)."""
    return f"{round_staging_dir(warc_root, round_no)}/s{stage_id}-p{partition}-a{attempt}"


def filesystem(uri: str, store=None) -> tuple[pafs.FileSystem, str]:
    """A filesystem and the path in it; plain paths are local (made absolute). Hadoop's
    ``s3a://``/``s3n://`` (what Spark is given) are S3 to Arrow, reached with ``store``: the
    :class:`~jobs.object_store.S3Options` (or the Config they come from) the driver resolved. An S3
    URI without them is an error, never a silent fall-back to Arrow's defaults (the real AWS)."""
    if "://" not in uri:
        return pafs.LocalFileSystem(), os.path.abspath(uri)
    if object_store.is_s3(uri):
        if store is None:
            raise ValueError(f"{uri}: an S3 path needs the storage.s3_* settings (pass the config)")
        opts = store if isinstance(store, object_store.S3Options) else object_store.options(store)
        return _s3(opts), object_store.bucket_path(uri)
    return pafs.FileSystem.from_uri(uri)


@functools.lru_cache(maxsize=4)
def _s3(opts: object_store.S3Options) -> pafs.FileSystem:
    return object_store.pyarrow_filesystem(opts)


def upload(local_files: Iterable[str], dest_dir: str, store=None) -> list[str]:
    """Copy task-local files into ``dest_dir`` (emptied first: a name reused by a dead run). Returns names.
    ``store``: as :func:`filesystem`'s."""
    fs, base = filesystem(dest_dir, store)
    fs.create_dir(base, recursive=True)
    fs.delete_dir_contents(base, missing_dir_ok=True)
    local = pafs.LocalFileSystem()
    names = []
    for path in local_files:
        name = os.path.basename(path)
        pafs.copy_files(path, f"{base}/{name}", source_filesystem=local, destination_filesystem=fs)
        names.append(name)
    return names


def promote(warc_root: str, round_no: int, committed: Iterable[tuple[str, str]], store=None) -> dict[str, int]:
    """Move each committed (staging dir, file name) to ``warc_root/<name>``, then drop the round's staging.

    Idempotent: a file already at its final place is not touched (an earlier run moved
    it). A committed file found nowhere is an error, raised before anything is deleted.
    Returns {"promoted": moved now, "present": already in place, "orphans_removed": files deleted}.
    """
    fs, root = filesystem(warc_root, store)
    fs.create_dir(root, recursive=True)
    moved = present = 0
    for staging, name in sorted(set(committed)):
        dst = f"{root}/{name}"
        if fs.get_file_info(dst).type == pafs.FileType.File:
            present += 1
            continue
        src = f"{filesystem(staging, store)[1]}/{name}"  # staging lives under warc_root: same filesystem
        if fs.get_file_info(src).type != pafs.FileType.File:
            raise FileNotFoundError(f"committed WARC file {name} is neither in {staging} nor in {warc_root}")
        fs.move(src, dst)
        moved += 1
    stage_fs, stage_root = filesystem(round_staging_dir(warc_root, round_no), store)
    orphans = 0
    if stage_fs.get_file_info(stage_root).type == pafs.FileType.Directory:
        sel = pafs.FileSelector(stage_root, recursive=True)
        orphans = sum(1 for i in stage_fs.get_file_info(sel) if i.type == pafs.FileType.File)
        stage_fs.delete_dir(stage_root)
    parent = stage_root.rsplit("/", 1)[0]  # warc/_staging: gone once no round is staged
    if (stage_fs.get_file_info(parent).type == pafs.FileType.Directory
            and not stage_fs.get_file_info(pafs.FileSelector(parent))):
        stage_fs.delete_dir(parent)
    return {"promoted": moved, "present": present, "orphans_removed": orphans}
