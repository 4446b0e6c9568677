"""The files of an export directory, one round at a time (the driver's side of ``deltacrawl export``).

Guarantees:
- **A round's files are a function of the round alone**, so re-exporting a round (an
  incremental export after a crash, or ``export --full``) gives the same names and bytes:
  its index part files are ``part-r<round>-<k>.parquet`` (:func:`index_file_name`), its CDXJ
  ``cdxj/round-<round>.cdxj`` (:func:`cdxj_file_name`), and its WARC files keep their names,
  which carry the round (``jobs.warc_staging.warc_name``).
- **Every file appears whole**: it is written beside its place (a temp name, or Spark's
  output under ``.export-tmp``) and renamed into it. A WARC file already in place is never
  touched again (placed once; promoted WARC files are never rewritten, so a file of the same
  name and size is the same file).
- **The manifest is written last** (:func:`write_manifest`, ``DIR/export.json``): a round
  it lists has all its files in place; a round a crash left half written is not listed and
  is written again, whole, by the next export.
"""

from __future__ import annotations

import glob
import json
import os
import shutil

MANIFEST = "export.json"
TMP_DIR = ".export-tmp"


def index_file_name(round_no: int, k: int) -> str:
    """The k-th index file of a round in a subset directory (k follows the url_surtkey ranges)."""
    return f"part-r{int(round_no):06d}-{k:05d}.parquet"


def cdxj_file_name(round_no: int) -> str:
    return f"round-{int(round_no):06d}.cdxj"


# -- manifest ------------------------------------------------------------------------------------------
def read_manifest(export_dir: str) -> dict | None:
    """``{"crawl_id": str, "rounds": [int, ...]}`` of ``export_dir``, None when it has none (never exported
    there, or an export older than incremental ones)."""
    try:
        with open(os.path.join(export_dir, MANIFEST), "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return None


def write_manifest(export_dir: str, crawl_id: str, rounds: list[int]) -> None:
    """Replace the manifest (a temp file renamed over it: a reader sees the old one or the new one)."""
    doc = {"crawl_id": crawl_id, "rounds": sorted(int(n) for n in rounds)}
    _write_whole(os.path.join(export_dir, MANIFEST), (json.dumps(doc, sort_keys=True) + "\n").encode("utf-8"))


def _write_whole(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# -- WARC files ----------------------------------------------------------------------------------------
def place_warc_files(names: list[str], src_dir: str, dst_dir: str, *, hard_link: bool,
                     store=None) -> dict[str, int]:
    """Put each named WARC file of ``src_dir`` into ``dst_dir``: a hard link when allowed and possible
    (same filesystem), else a byte copy (to a temp name, renamed). A file already there with the same
    size is left alone (counted in ``warc_kept``). A named file missing from ``src_dir`` is an error.
    ``store``: how to reach an object store (:func:`jobs.warc_staging.filesystem`)."""
    from pyarrow import fs as pafs

    from jobs.warc_staging import filesystem

    os.makedirs(dst_dir, exist_ok=True)
    src_fs, src_root = filesystem(src_dir, store)
    local = isinstance(src_fs, pafs.LocalFileSystem)
    linked = copied = kept = nbytes = 0
    for name in sorted(set(names)):
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"unexpected WARC file name in fetch_log: {name!r}")
        src, dst = f"{src_root}/{name}", os.path.join(dst_dir, name)
        info = src_fs.get_file_info(src)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(f"fetch_log names WARC file {name}, which is not in {src_dir}")
        nbytes += info.size
        if os.path.isfile(dst):
            if os.path.getsize(dst) != info.size:
                raise FileExistsError(f"{dst} is not {src} (sizes differ): rebuild with `export --full`")
            kept += 1
            continue
        if local and hard_link:
            try:
                os.link(src, dst)
                linked += 1
                continue
            except OSError:  # other filesystem (EXDEV), or links not supported: copy
                pass
        tmp = f"{dst}.tmp-{os.getpid()}"
        pafs.copy_files(src, tmp, source_filesystem=src_fs, destination_filesystem=pafs.LocalFileSystem())
        os.replace(tmp, dst)
        copied += 1
    return {"warc_files": linked + copied + kept, "warc_linked": linked, "warc_copied": copied,
            "warc_kept": kept, "warc_bytes": nbytes}


# -- CDXJ -------------------------------------------------------------------------------------------------
def write_cdxj(export_dir: str, warc_files: list[str], out_file: str, *, records: list[str]) -> int:
    """A sorted CDXJ index of the named WARC files of ``export_dir/warc`` (cdxj-indexer), file names relative
    to ``export_dir``; an empty file when there are none. Returns the number of lines."""
    from cdxj_indexer.main import write_cdx_index

    os.makedirs(os.path.dirname(out_file), exist_ok=True)
    tmp = f"{out_file}.tmp-{os.getpid()}"
    files = [os.path.join(export_dir, "warc", n) for n in sorted(set(warc_files))]
    if files:
        write_cdx_index(tmp, files, {"sort": True, "dir_root": export_dir, "records": ",".join(records)})
    else:
        open(tmp, "w").close()
    os.replace(tmp, out_file)
    with open(out_file, "rb") as f:
        return sum(1 for _ in f)


# -- Parquet index ----------------------------------------------------------------------------------------
def move_index_files(spark_out: str, index_dir: str, round_no: int) -> dict[str, int]:
    """Spark's output of one round (``spark_out/_k=<k>/subset=<s>/part-….parquet``, one file each) renamed
    into ``index_dir/subset=<s>/`` as :func:`index_file_name`, after dropping the round's files an earlier,
    interrupted export left. Returns index rows per subset."""
    import pyarrow.parquet as pq

    for old in glob.glob(os.path.join(index_dir, "subset=*", f"part-r{int(round_no):06d}-*.parquet")):
        os.remove(old)
    rows: dict[str, int] = {}
    for src in sorted(glob.glob(os.path.join(spark_out, "_k=*", "subset=*", "part-*.parquet"))):
        k_dir, subset_dir = src.split(os.sep)[-3:-1]
        k, subset = int(k_dir.split("=", 1)[1]), subset_dir.split("=", 1)[1]
        dst = os.path.join(index_dir, subset_dir, index_file_name(round_no, k))
        if os.path.exists(dst):
            raise RuntimeError(f"two index files for {dst}: the writer was to emit one per (round, k, subset)")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        rows[subset] = rows.get(subset, 0) + pq.read_metadata(src).num_rows
        os.replace(src, dst)
    return rows


def remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)
