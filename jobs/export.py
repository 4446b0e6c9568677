"""``deltacrawl export --out DIR [--full]``: the corpus as WARC files, a Parquet index and CDXJ, by round.

Incremental: an export writes only the rounds ``DIR`` does not hold yet, of those the round
ledger has ``updated`` (their ``fetch_log`` rows are final), and lists them in
``DIR/export.json`` (:mod:`jobs.export_files`). Every file of the export belongs to one
round and is a function of that round alone, so a round exported again gives the same
names and bytes, and an export after round 2 then after round 4 is the export after round 4
(tests/test_export.py). ``--full`` (also taken when ``DIR`` holds no manifest, or when
``export.crawl_id`` changed) rebuilds from scratch: the export is built in
``DIR/.export-tmp`` and swapped in for ``DIR/warc``, ``DIR/index``, ``DIR/cdxj`` and
``DIR/export.json``, so stale files go; nothing else in ``DIR`` is touched.

Layout written (docs/ARCHITECTURE.md, "External contract"; Common Crawl's layout):

- ``DIR/warc/<name>.warc.gz`` — every WARC file an exported row points into,
  hard-linked from ``storage.root/warc/`` when both are on one local filesystem
  (``export.hard_link``; promoted WARC files are never rewritten, so a link is
  safe), copied otherwise; placed once. Files are passed through byte for byte.
- ``DIR/index/crawl=<export.crawl_id>/subset=<subset>/part-r<round>-<k>.parquet`` — one row
  per stored response or revisit record, in the columns of Common Crawl's
  columnar index (``cc-index-schema-flat.json``: :data:`CC_INDEX`, types exact:
  ``url_port``/``warc_record_offset``/``warc_record_length`` int32,
  ``fetch_status`` int16, ``fetch_time`` TIMESTAMP_MILLIS in UTC, rounded to
  the millisecond as the record's ``WARC-Date`` is), plus ``duplicate_of`` and
  ``simhash``. A round's rows of a subset are cut into
  ``export.index_files`` consecutive ``url_surtkey`` ranges of equal row counts (files k = 0, 1, …)
  and sorted by (``url_surtkey``, ``fetch_time``) inside every file. ``warc_filename`` is
  relative to ``DIR`` (``warc/<name>``), as Common Crawl's is relative to its
  bucket. A revisit record's row (a 304, or a 2xx stored as an identical-payload
  revisit: ``fetch_log.warc_refers_to``) has ``content_mime_type`` ``warc/revisit``, as in
  Common Crawl's index and cdxj-indexer's lines, and the payload digest of the copy it stands for.
- ``DIR/cdxj/round-<round>.cdxj`` — a sorted CDXJ index of the round's WARC files by
  cdxj-indexer (the library pywb uses; pywb merges the files of a collection's
  ``indexes/``), records ``export.cdxj_records``, with
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

Once the export is done, ``storage.root/exports/latest.json``
names ``DIR`` (:mod:`jobs.export_record`): the export ``deltacrawl lookup`` reads. ``DIR`` must be a local
path (or a mount every Spark executor sees under the same path).
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlsplit

from crawl_udfs.config import Config, ConfigError
from crawl_udfs.dns import parse_ip
from crawl_udfs.sites import psl as _psl  # the one PSL extractor (also the site of a rel=canonical)
from jobs import export_files

SUBSETS = ("warc", "crawldiagnostics", "robotstxt")
PARTS = ("warc", "index", "cdxj", export_files.MANIFEST)  # what an export owns in DIR
REVISIT_MIME = "warc/revisit"

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


def index_rows(fetch_log, *, crawl_id: str, warc_dir: str = "warc", robots=None, named_by=None):
    """fetch_log rows -> Common Crawl index rows (:func:`cc_index_schema`), unsorted.

    One row per fetch_log row with a WARC pointer (response or revisit record);
    rows without one (errors, robots_denied) are dropped. ``robots`` (:func:`robots_rows`),
    when given, adds the robots.txt responses, in the ``robotstxt`` subset. ``warc_filename`` is
    ``<warc_dir>/<name>``; ``warc_segment`` is the round number. The URL columns
    are computed last, by one pandas UDF over the final rows (evaluated once per row). ``named_by``
    (default ``fetch_log``) is where an original's URL is looked up: the whole ``fetch_log`` when
    ``fetch_log`` is some rounds of it (an original stored in an earlier round).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf

    fl = fetch_log.where(F.col("warc_filename").isNotNull() & F.col("warc_offset").isNotNull()
                         & F.col("warc_length").isNotNull())
    # update's verdict, as the original's URL: the original was stored, so fetch_log names it too
    originals = ((fetch_log if named_by is None else named_by)
                 .select(F.col("url_fp").alias("dup_of"), F.col("url").alias("_orig_url"))
                 .join(fl.select("dup_of").where(F.col("dup_of").isNotNull()).distinct(), "dup_of", "left_semi")
                 .dropDuplicates(["dup_of"]))
    fl = fl.join(originals, "dup_of", "left").withColumn("_robots", F.lit(False))
    if robots is not None:
        fl = fl.unionByName(robots.withColumn("_orig_url", F.lit(None).cast("string"))
                            .withColumn("_robots", F.lit(True)))
    status = F.col("status_code")
    refers_to = F.col("warc_refers_to") if "warc_refers_to" in fl.columns else F.lit(None)
    revisit = (status == 304) | refers_to.isNotNull()
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
        # a revisit record's, as Common Crawl's index and cdxj-indexer give it (a 304, or an identical payload)
        "content_mime_type": F.when(revisit, F.lit(REVISIT_MIME)).otherwise(F.col("content_type")),
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


#: The columns that place an index row in its file: (round, subset, k); the file's rows sorted by the rest.
FILE_KEYS = ("_round", "_k", "subset")
ROW_ORDER = ("url_surtkey", "fetch_time", "url")


def sorted_for_write(rows, n_files: int):
    """Rows with their file (``_round``, ``_k``: the k-th of ``n_files`` equal consecutive url_surtkey ranges
    of the round's rows of a subset, by ``ntile``), each (round, subset) in one task, sorted by (file, url_surtkey,
    fetch_time, url): what a writer partitioned by :data:`FILE_KEYS` needs to emit one file per key, sorted
    by url_surtkey. A file's rows are a function of its round's rows alone (no sampling), so a round
    exported again gives the same files."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if n_files < 1:
        raise ConfigError(f"export.index_files must be >= 1, got {n_files}")
    # The window puts each (round, subset) in one task. ntile(1) rather than a literal 0: a constant
    # sort key is dropped by the optimizer, and the writer then re-sorts by its partition columns alone.
    ranges = Window.partitionBy("_round", "subset").orderBy(*ROW_ORDER)
    return (rows.withColumn("_round", F.col("warc_segment").cast("long"))
            .withColumn("_k", F.ntile(int(n_files)).over(ranges) - 1)
            .sortWithinPartitions(*FILE_KEYS, *ROW_ORDER))


# -- the job -----------------------------------------------------------------------------------------
def _write_index(spark, rows, path: str, n_files: int) -> None:
    """Write the rounds' ``rows`` (one crawl) under ``path/_round=<n>/_k=<k>/subset=<s>/``, one file each
    (:func:`jobs.export_files.move_index_files` then names them and moves them into the crawl level).

    The crawl level is a directory name, not a ``partitionBy`` column: the writer
    sorts by its partition columns unless the input's order starts with them, and the constant
    ``crawl`` column does not survive in the input's order (the optimizer drops constant sort
    keys), so ``partitionBy("crawl", "subset")`` re-sorted by those two alone and the files came
    out unsorted by url_surtkey (measured, Spark 4.0.1; tests/test_export.py checks the order).
    """
    from jobs.common import session_conf

    with session_conf(spark, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS"}):
        (sorted_for_write(rows, n_files).drop("crawl").write.mode("overwrite").partitionBy(*FILE_KEYS)
         .parquet(path))


# -- the job -----------------------------------------------------------------------------------------
def updated_rounds(spark, conf: Config) -> list[int]:
    """The rounds the ledger has ``updated``, oldest first: their ``fetch_log`` rows are final."""
    from jobs import ledger

    return sorted(n for n, row in ledger.current(spark, conf).rows.items() if row["state"] == "updated")


def run(spark, conf: Config, out_dir: str, *, full: bool = False) -> dict[str, int]:
    """Export to ``out_dir`` the updated rounds it does not hold yet (all of them, into a fresh directory,
    with ``full``, when ``out_dir`` holds no export manifest, or when ``export.crawl_id`` changed).
    Returns counts of what this run wrote."""
    from jobs import common, export_record

    if "://" in out_dir:
        raise ConfigError(f"export --out must be a local path (or a shared mount), got {out_dir}")
    c = conf.export
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", c.crawl_id):
        raise ConfigError(f"export.crawl_id must be a plain name (letters, digits, . _ -), got {c.crawl_id!r}")
    out_dir = os.path.abspath(out_dir)
    tmp = os.path.join(out_dir, export_files.TMP_DIR)
    export_files.remove(tmp)  # a crashed run's leftovers
    manifest = None if full else export_files.read_manifest(out_dir)
    if manifest is not None and manifest.get("crawl_id") != c.crawl_id:
        manifest = None  # every index row names the crawl: a new name is a new export
    rebuild = manifest is None
    target = tmp if rebuild else out_dir  # a rebuild is made aside and swapped in whole
    done = [] if rebuild else [int(n) for n in manifest["rounds"]]
    todo = [n for n in updated_rounds(spark, conf) if n not in done]

    counts = {"rounds_exported": len(todo), "full": int(rebuild), "index_rows": 0,
              **{f"index_{s}": 0 for s in SUBSETS}, "warc_files": 0, "warc_linked": 0, "warc_copied": 0,
              "warc_kept": 0, "warc_bytes": 0, "cdxj_lines": 0}
    os.makedirs(os.path.join(target, "warc"), exist_ok=True)
    os.makedirs(os.path.join(target, "index", f"crawl={c.crawl_id}"), exist_ok=True)
    os.makedirs(os.path.join(target, "cdxj"), exist_ok=True)
    if todo:
        for k, v in _export_rounds(spark, conf, todo, target, os.path.join(tmp, "spark")).items():
            counts[k] += v
    export_files.write_manifest(target, c.crawl_id, done + todo)  # last: the rounds listed are whole
    if rebuild:
        for part in PARTS:  # swap in: the old output goes, the new one takes its place
            export_files.remove(os.path.join(out_dir, part))
            os.rename(os.path.join(target, part), os.path.join(out_dir, part))
    export_files.remove(tmp)
    export_record.write(common.root(conf), out_dir, c.crawl_id, counts, conf)  # what `deltacrawl lookup` reads
    return counts


def _export_rounds(spark, conf: Config, todo: list[int], target: str, scratch: str) -> dict[str, int]:
    """Rounds ``todo`` into ``target``: their WARC files, then a CDXJ per round, then their index files
    (written by one Spark job under ``scratch`` first, then moved). Returns counts."""
    from pyspark.sql import functions as F

    from jobs import common

    c = conf.export
    whole_log = common.read(spark, conf, "fetch_log")
    fetch_log = whole_log.where(F.col("round").isin(todo))
    robots = robots_rows(common.read(spark, conf, "fetch_output").where(F.col("round").isin(todo)), fetch_log)
    files: dict[int, list[str]] = {n: [] for n in todo}
    for r in (fetch_log.select("round", "warc_filename").unionByName(robots.select("round", "warc_filename"))
              .where(F.col("warc_filename").isNotNull()).distinct().collect()):
        files[int(r["round"])].append(r["warc_filename"])
    counts = export_files.place_warc_files([n for names in files.values() for n in names], common.warc_root(conf),
                                           os.path.join(target, "warc"), hard_link=c.hard_link, store=conf)
    counts["cdxj_lines"] = sum(
        export_files.write_cdxj(target, files[n], os.path.join(target, "cdxj", export_files.cdxj_file_name(n)),
                                records=list(c.cdxj_records)) for n in todo)
    rows = index_rows(fetch_log, crawl_id=c.crawl_id, warc_dir="warc", robots=robots, named_by=whole_log)
    _write_index(spark, rows, scratch, c.index_files)
    by_subset: dict[str, int] = {}
    for n in todo:
        got = export_files.move_index_files(os.path.join(scratch, f"_round={n}"),
                                            os.path.join(target, "index", f"crawl={c.crawl_id}"), n)
        for s, rows in got.items():
            by_subset[s] = by_subset.get(s, 0) + rows
    export_files.remove(scratch)
    counts["index_rows"] = sum(by_subset.values())
    for s in SUBSETS:
        counts[f"index_{s}"] = by_subset.get(s, 0)
    return counts
