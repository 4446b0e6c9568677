"""``deltacrawl export --out DIR``: the corpus as WARC files, a Parquet index and a CDXJ index.

Layout written (docs/ARCHITECTURE.md, "External contract"; Common Crawl's layout):

- ``DIR/warc/<name>.warc.gz`` — every WARC file an exported row points into,
  hard-linked from ``storage.root/warc/`` when both are on one local filesystem
  (``export.hard_link``; promoted WARC files are never rewritten, so a link is
  safe), copied otherwise. Files are passed through byte for byte.
- ``DIR/index/crawl=<export.crawl_id>/subset=<subset>/part-*.parquet`` — one row
  per stored response or revisit record, in the columns of Common Crawl's
  columnar index (``cc-index-schema-flat.json``: :data:`CC_INDEX`, types exact:
  ``url_port``/``warc_record_offset``/``warc_record_length`` int32,
  ``fetch_status`` int16, ``fetch_time`` TIMESTAMP_MILLIS in UTC, rounded to
  the millisecond as the record's ``WARC-Date`` is), plus ``duplicate_of`` and
  ``simhash``. Rows are range-partitioned by
  ``url_surtkey`` into ``export.index_files`` tasks and sorted by
  (``url_surtkey``, ``fetch_time``) inside every file. ``warc_filename`` is
  relative to ``DIR`` (``warc/<name>``), as Common Crawl's is relative to its
  bucket.
- ``DIR/cdxj/index.cdxj`` — a sorted CDXJ index of the exported files by
  cdxj-indexer (the library pywb uses), records ``export.cdxj_records``, with
  ``filename`` relative to ``DIR`` too, so both indexes name a record alike.

Subsets: ``robotstxt`` = the robots.txt responses (every answered request of a
robots.txt chain, redirect hops included: ``fetch_output`` rows of kind ``robots``,
which never reach ``fetch_log``: they are not pages of the crawl DB); of the
other records ``warc`` = 2xx responses, ``crawldiagnostics`` = every other
stored response (3xx incl. 304 revisits, 4xx, 5xx), as Common Crawl splits them.
Unlike Common Crawl, one WARC file holds records of both subsets (the subset
is a property of the index row, not of the file).

Columns Common Crawl fills with tools deltacrawl does not run are null:
``content_mime_detected`` (Tika) and ``content_languages`` (CLD2).
Registered domains and suffixes come from the Public Suffix List snapshot that
ships inside ``tldextract`` (never fetched at run time): ``registry_suffix`` /
``registered_domain`` from its ICANN section, ``private_suffix`` /
``private_domain`` with the private section included (``blogspot.com``). IP
hosts get null host parts. ``url_surtkey`` is ``surt.surt(url)``, the function
cdxj-indexer keys CDXJ lines with, so both indexes sort alike.

``duplicate_of`` (our addition): the URL of the original when update marked
the capture an exact duplicate (``fetch_log.dup_of``, a url_fp, written from
the same decision as ``crawldb.dup_of``: which copy is the original is
``jobs/originals.py``'s, a consistent same-site canonical, else the earliest
fetched), for an exact or (``dedup.near_duplicates``) a near-duplicate; null
otherwise. A copy promoted later (its original went) changes ``crawldb`` only:
its captures keep the verdict of their round, and the original's capture is
still in the corpus. It is
read per capture from ``fetch_log`` rather than from ``crawldb.dup_of``, which
holds only a URL's latest copy: an older capture keeps the verdict it had.

Idempotent: everything is built in ``DIR/.export-tmp`` and then swapped for
``DIR/warc``, ``DIR/index`` and ``DIR/cdxj``; a rerun replaces the three
cleanly (a leftover temp dir of a crashed run is removed first). Nothing else in
``DIR`` is touched. Once the swap is done, ``storage.root/exports/latest.json``
names ``DIR`` (:mod:`jobs.export_record`): the export ``deltacrawl lookup`` reads. ``DIR`` must be a local path (or a mount every Spark
executor sees under the same path).
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any
from urllib.parse import urlsplit

from crawl_udfs.config import Config, ConfigError
from crawl_udfs.dns import parse_ip
from crawl_udfs.sites import psl as _psl  # the one PSL extractor (also the site of a rel=canonical)

SUBSETS = ("warc", "crawldiagnostics", "robotstxt")
TMP_DIR = ".export-tmp"
PARTS = ("warc", "index", "cdxj")
CDXJ_FILE = "index.cdxj"

#: Output columns in order: Common Crawl's flat schema, then ours, then the partition columns.
CC_COLUMNS = (
    "url_surtkey", "url", "url_host_name", "url_host_tld", "url_host_2nd_last_part", "url_host_3rd_last_part",
    "url_host_4th_last_part", "url_host_5th_last_part", "url_host_registry_suffix", "url_host_registered_domain",
    "url_host_private_suffix", "url_host_private_domain", "url_host_name_reversed", "url_protocol", "url_port",
    "url_path", "url_query", "fetch_time", "fetch_status", "fetch_redirect", "content_digest",
    "content_mime_type", "content_mime_detected", "content_charset", "content_languages", "content_truncated",
    "warc_filename", "warc_record_offset", "warc_record_length", "warc_segment",
)
EXTRA_COLUMNS = ("duplicate_of", "simhash")
PARTITION_COLUMNS = ("crawl", "subset")

#: Host/URL parts computed in Python (:func:`url_parts`), all strings but url_port.
URL_PART_COLUMNS = (
    "url_surtkey", "url_host_name", "url_host_tld", "url_host_2nd_last_part", "url_host_3rd_last_part",
    "url_host_4th_last_part", "url_host_5th_last_part", "url_host_registry_suffix", "url_host_registered_domain",
    "url_host_private_suffix", "url_host_private_domain", "url_host_name_reversed", "url_protocol", "url_port",
    "url_path", "url_query",
)


def cc_index_schema():
    """The StructType of an index row (what :func:`index_rows` returns), partition columns last."""
    from pyspark.sql.types import IntegerType, LongType, ShortType, StringType, StructField, StructType, TimestampType

    special = {"url_port": IntegerType(), "fetch_time": TimestampType(), "fetch_status": ShortType(),
               "warc_record_offset": IntegerType(), "warc_record_length": IntegerType(), "simhash": LongType()}
    names = CC_COLUMNS + EXTRA_COLUMNS + PARTITION_COLUMNS
    return StructType([StructField(n, special.get(n, StringType()), n not in ("url_surtkey", "url", "crawl", "subset"))
                       for n in names])


# -- plain Python: URL parts ------------------------------------------------------------------------
def surt_key(url: str) -> str:
    """SURT form of ``url`` as cdxj-indexer computes it (``surt.surt``); the URL itself if it cannot parse."""
    import surt
    try:
        return surt.surt(url)
    except Exception:  # noqa: BLE001 - a malformed URL still gets a key (and sorts)
        return url


def url_parts(url: str) -> dict[str, Any]:
    """Common Crawl's URL columns of one URL (``url_surtkey`` … ``url_query``); pure, offline."""
    out: dict[str, Any] = dict.fromkeys(URL_PART_COLUMNS)
    out["url_surtkey"] = surt_key(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return out
    host = (parts.hostname or "").rstrip(".").lower()
    out.update(url_protocol=parts.scheme.lower() or None, url_port=port, url_path=parts.path or None,
               url_query=parts.query or None, url_host_name=host or None)
    if not host or parse_ip(host) is not None:
        return out
    labels = host.split(".")
    names = ("url_host_tld", "url_host_2nd_last_part", "url_host_3rd_last_part", "url_host_4th_last_part",
             "url_host_5th_last_part")
    for i, name in enumerate(names):
        if i < len(labels):
            out[name] = labels[-1 - i]
    out["url_host_name_reversed"] = ".".join(reversed(labels))
    icann = _psl(False)(host)
    out["url_host_registry_suffix"] = icann.suffix or None
    out["url_host_registered_domain"] = icann.top_domain_under_public_suffix or None
    private = _psl(True)(host)
    out["url_host_private_suffix"] = private.suffix or None
    out["url_host_private_domain"] = private.top_domain_under_public_suffix or None
    return out


def _url_parts_struct():
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType
    return StructType([StructField(c, IntegerType() if c == "url_port" else StringType(), True)
                       for c in URL_PART_COLUMNS])  # Arrow UDF results are nullable


def _url_parts_batch(urls):
    """pandas Series of URLs -> DataFrame of :func:`url_parts` (the pandas UDF's body)."""
    import pandas as pd
    df = pd.DataFrame([url_parts(u) for u in urls], columns=list(URL_PART_COLUMNS))
    df["url_port"] = df["url_port"].astype("Int32")
    return df


# -- transforms ---------------------------------------------------------------------------------------
def robots_rows(fetch_output, fetch_log):
    """fetch_output's robots.txt responses stored in WARC (kind ``robots``), in fetch_log's columns; only of
    rounds update has logged (``fetch_log`` holds them), so the export is one consistent set of rounds."""
    from pyspark.sql import functions as F

    from schemas.tables import FETCH_LOG

    r = (fetch_output.where((F.col("kind") == "robots") & F.col("warc_filename").isNotNull())
         .join(fetch_log.select("round").distinct(), "round", "left_semi"))
    return r.select([(F.col(f.name) if f.name in r.columns else F.lit(None)).cast(f.dataType).alias(f.name)
                     for f in FETCH_LOG.fields])


def index_rows(fetch_log, *, crawl_id: str, warc_dir: str = "warc", robots=None):
    """fetch_log rows -> Common Crawl index rows (:func:`cc_index_schema`), unsorted.

    One row per fetch_log row with a WARC pointer (response or revisit record);
    rows without one (errors, robots_denied) are dropped. ``robots`` (:func:`robots_rows`),
    when given, adds the robots.txt responses, in the ``robotstxt`` subset. ``warc_filename`` is
    ``<warc_dir>/<name>``; ``warc_segment`` is the round number. The URL columns
    are computed last, by one pandas UDF over the final rows (evaluated once per row).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf

    fl = fetch_log.where(F.col("warc_filename").isNotNull() & F.col("warc_offset").isNotNull()
                         & F.col("warc_length").isNotNull())
    # update's verdict, as the original's URL: the original was stored, so fetch_log names it too
    originals = (fetch_log.select(F.col("url_fp").alias("dup_of"), F.col("url").alias("_orig_url"))
                 .join(fl.select("dup_of").where(F.col("dup_of").isNotNull()).distinct(), "dup_of", "left_semi")
                 .dropDuplicates(["dup_of"]))
    fl = fl.join(originals, "dup_of", "left").withColumn("_robots", F.lit(False))
    if robots is not None:
        fl = fl.unionByName(robots.withColumn("_orig_url", F.lit(None).cast("string"))
                            .withColumn("_robots", F.lit(True)))
    status = F.col("status_code")
    subset = (F.when(F.col("_robots"), F.lit("robotstxt"))
              .when((status >= 200) & (status < 300), F.lit("warc")).otherwise(F.lit("crawldiagnostics")))
    cols = {
        "url": F.col("url"),
        # Fetch times are whole milliseconds (crawl_udfs.fetcher), so this is exact; rounding rather than
        # the TIMESTAMP_MILLIS write's truncation keeps older fetch_log rows (microseconds) within the
        # millisecond of their WARC-Date, which rounds (crawl_udfs.warc.warc_date).
        "fetch_time": F.expr("timestamp_millis((unix_micros(fetch_time) + 500) div 1000)"),
        "fetch_status": status,
        "fetch_redirect": F.col("redirect_to"),
        "content_digest": F.regexp_replace(F.col("digest"), r"^sha1:", ""),
        "content_mime_type": F.col("content_type"),
        "content_mime_detected": F.lit(None),
        "content_charset": F.col("charset"),
        "content_languages": F.lit(None),
        "content_truncated": F.col("truncated"),
        "warc_filename": F.concat(F.lit(warc_dir.rstrip("/") + "/"), F.col("warc_filename")),
        "warc_record_offset": F.col("warc_offset"),
        "warc_record_length": F.col("warc_length"),
        "warc_segment": F.col("round").cast("string"),
        "duplicate_of": F.col("_orig_url"),
        "simhash": F.col("simhash"),
        "crawl": F.lit(crawl_id),
        "subset": subset,
    }
    schema = cc_index_schema()
    types = {f.name: f.dataType for f in schema.fields}
    base = fl.select([c.cast(types[n]).alias(n) for n, c in cols.items()])
    parts = pandas_udf(_url_parts_batch, _url_parts_struct())
    with_parts = base.withColumn("_p", parts(F.col("url")))
    return with_parts.select([(F.col(f"_p.{f.name}").cast(f.dataType) if f.name in URL_PART_COLUMNS
                               else F.col(f.name)).alias(f.name) for f in schema.fields])


def sorted_for_write(rows, n_files: int):
    """Range-partition by url_surtkey into ``n_files`` tasks, each sorted by (subset, url_surtkey,
    fetch_time, url): what a writer partitioned by subset needs to emit files sorted by url_surtkey."""
    if n_files < 1:
        raise ConfigError(f"export.index_files must be >= 1, got {n_files}")
    return (rows.repartitionByRange(n_files, "url_surtkey", "fetch_time")
            .sortWithinPartitions("subset", "url_surtkey", "fetch_time", "url"))


# -- file work (driver) -------------------------------------------------------------------------------
def place_warc_files(names: list[str], src_dir: str, dst_dir: str, *, hard_link: bool) -> dict[str, int]:
    """Put each named WARC file of ``src_dir`` into ``dst_dir``: a hard link when allowed and possible
    (same filesystem), else a byte copy. A named file missing from ``src_dir`` is an error."""
    from jobs.warc_staging import filesystem
    from pyarrow import fs as pafs

    os.makedirs(dst_dir, exist_ok=True)
    src_fs, src_root = filesystem(src_dir)
    local = isinstance(src_fs, pafs.LocalFileSystem)
    linked = copied = nbytes = 0
    for name in sorted(set(names)):
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"unexpected WARC file name in fetch_log: {name!r}")
        src, dst = f"{src_root}/{name}", os.path.join(dst_dir, name)
        info = src_fs.get_file_info(src)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(f"fetch_log names WARC file {name}, which is not in {src_dir}")
        nbytes += info.size
        if local and hard_link:
            try:
                os.link(src, dst)
                linked += 1
                continue
            except OSError:  # other filesystem (EXDEV), or links not supported: copy
                pass
        pafs.copy_files(src, dst, source_filesystem=src_fs, destination_filesystem=pafs.LocalFileSystem())
        copied += 1
    return {"warc_files": linked + copied, "warc_linked": linked, "warc_copied": copied, "warc_bytes": nbytes}


def write_cdxj(export_dir: str, warc_dir: str, out_file: str, *, records: list[str]) -> int:
    """A sorted CDXJ index of every WARC file in ``warc_dir`` (cdxj-indexer), file names relative to
    ``export_dir``. Returns the number of lines."""
    from cdxj_indexer.main import write_cdx_index

    os.makedirs(os.path.dirname(out_file), exist_ok=True)
    files = sorted(os.path.join(warc_dir, n) for n in os.listdir(warc_dir) if n.endswith(".warc.gz"))
    if not files:
        open(out_file, "w").close()
        return 0
    write_cdx_index(out_file, files, {"sort": True, "dir_root": export_dir, "records": ",".join(records)})
    with open(out_file, "rb") as f:
        return sum(1 for _ in f)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def _tidy_spark_output(index_dir: str) -> None:
    """Drop Spark's _SUCCESS markers and .crc side files: the index is the Parquet files alone."""
    for root, _dirs, files in os.walk(index_dir):
        for n in files:
            if n.startswith(("_SUCCESS", ".")) and (n == "_SUCCESS" or n.endswith(".crc")):
                os.remove(os.path.join(root, n))


def _write_index(spark, rows, path: str, crawl_id: str) -> None:
    """Write ``rows`` (one crawl, sorted by :func:`sorted_for_write`) under ``path/crawl=<crawl_id>/``.

    The crawl level is a directory name written here, not a ``partitionBy`` column: the writer
    sorts by its partition columns unless the input's order starts with them, and the constant
    ``crawl`` column does not survive in the input's order (the optimizer drops constant sort
    keys), so ``partitionBy("crawl", "subset")`` re-sorted by those two alone and the files came
    out unsorted by url_surtkey (measured, Spark 4.0.1; tests/test_export.py checks the order).
    """
    from jobs.common import session_conf

    with session_conf(spark, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS"}):
        target = f"{path}/crawl={crawl_id}"
        rows.drop("crawl").write.mode("overwrite").partitionBy("subset").parquet(target)


# -- the job -----------------------------------------------------------------------------------------
def run(spark, conf: Config, out_dir: str) -> dict[str, int]:
    """Export the whole crawl to ``out_dir`` (replacing an earlier export there). Returns counts."""
    from pyspark.sql import functions as F

    from jobs import common, export_record

    if "://" in out_dir:
        raise ConfigError(f"export --out must be a local path (or a shared mount), got {out_dir}")
    c = conf.export
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", c.crawl_id):
        raise ConfigError(f"export.crawl_id must be a plain name (letters, digits, . _ -), got {c.crawl_id!r}")
    out_dir = os.path.abspath(out_dir)
    tmp = os.path.join(out_dir, TMP_DIR)
    _remove(tmp)
    os.makedirs(tmp)

    fetch_log = common.read(spark, conf, "fetch_log")
    robots = robots_rows(common.read(spark, conf, "fetch_output"), fetch_log)
    rows = index_rows(fetch_log, crawl_id=c.crawl_id, warc_dir="warc", robots=robots)
    names = [r[0] for r in fetch_log.select("warc_filename").unionByName(robots.select("warc_filename"))
             .where(F.col("warc_filename").isNotNull()).distinct().collect()]
    counts = place_warc_files(names, common.warc_root(conf), os.path.join(tmp, "warc"), hard_link=c.hard_link)

    # computed once: range partitioning samples its input, then the write reads it again
    rows = rows.persist()
    try:
        _write_index(spark, sorted_for_write(rows, c.index_files), os.path.join(tmp, "index"), c.crawl_id)
    finally:
        rows.unpersist()
    _tidy_spark_output(os.path.join(tmp, "index"))
    by_subset = {}
    if any(n.endswith(".parquet") for _r, _d, files in os.walk(os.path.join(tmp, "index")) for n in files):
        by_subset = {r["subset"]: r["n"] for r in spark.read.parquet(os.path.join(tmp, "index"))
                     .groupBy("subset").agg(F.count("*").alias("n")).collect()}
    counts["cdxj_lines"] = write_cdxj(tmp, os.path.join(tmp, "warc"), os.path.join(tmp, "cdxj", CDXJ_FILE),
                                      records=list(c.cdxj_records))

    for part in PARTS:  # swap in: the old output goes, the new one takes its place
        _remove(os.path.join(out_dir, part))
        os.rename(os.path.join(tmp, part), os.path.join(out_dir, part))
    _remove(tmp)
    counts["index_rows"] = sum(by_subset.values())
    for s in SUBSETS:
        counts[f"index_{s}"] = by_subset.get(s, 0)
    export_record.write(common.root(conf), out_dir, c.crawl_id, counts)  # what `deltacrawl lookup` reads
    return counts
