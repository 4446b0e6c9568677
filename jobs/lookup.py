"""``deltacrawl lookup URL``: every stored capture of one URL, read from an export, without Spark.

Guarantees:
- The URL is normalised first by the crawl's own normaliser (``crawl_udfs.url_normalize``
  with the configuration's ``[url]`` section), the form the crawl DB keys and ``fetch_log``
  (hence the index's ``url`` column) holds: ``HTTP://Example.COM:80/a#top`` finds the
  captures of ``http://example.com/a``. A URL that does not normalise is a one-line error.
- It reads the export that ``storage.root/exports/latest.json`` names
  (:mod:`jobs.export_record`, written by every ``export``), or the one ``--export DIR``
  names: the Parquet index with DuckDB (one query, ``url = ?``), and with ``--payload``
  each record with warcio at the row's (offset, length). It never imports pyspark nor
  starts a JVM (``tests/test_export.py`` checks ``sys.modules`` after a lookup).
- Every capture is one line, oldest first: WARC-Date, HTTP status, payload digest, WARC
  file, offset, length, subset, round, and ``duplicate_of`` when update marked the capture
  a duplicate. ``--payload`` prints the stored payload after each line; a revisit record
  stores none, so its payload is the one of the record it refers to (``WARC-Refers-To-
  Target-URI`` and ``-Date``, looked up in the same index).
- Exit status 0 when the URL has captures; 1 with one line on stderr when it has none;
  2 (through ``jobs.cli``) for a missing export or a URL that does not normalise.

The index is scanned on its ``url`` column (DuckDB reads that one column of every file):
the file order is by ``url_surtkey``, but computing a SURT key needs ``surt``, whose
import (tldextract, requests) costs more than the scan of a crawl's index.
"""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass
from typing import BinaryIO

from crawl_udfs.config import Config, ConfigError

#: The index files under an export directory (the layout ``jobs/export.py`` writes).
INDEX_GLOB = "index/**/*.parquet"

_COLUMNS = ("url", "epoch_ms(fetch_time)", "fetch_status", "content_digest", "duplicate_of", "warc_filename",
            "warc_record_offset", "warc_record_length", "subset", "warc_segment", "content_mime_type")


@dataclass(frozen=True)
class Capture:
    """One index row: a stored response or revisit record of the URL."""

    url: str
    fetch_ms: int                 # fetch time, epoch milliseconds (the record's WARC-Date)
    status: int
    digest: str | None            # base32 sha1 of the payload, no "sha1:" prefix (as the index holds it)
    duplicate_of: str | None
    warc_filename: str            # relative to the export directory ("warc/<name>")
    offset: int
    length: int
    subset: str
    round: str | None
    mime: str | None


def export_dir_of(conf: Config, export_dir: str | None) -> str:
    """``export_dir`` if given, else the latest export recorded under ``storage.root``; checked to hold an index."""
    from jobs import common, export_record

    if export_dir is None:
        export_dir = export_record.latest_dir(common.root(conf), conf)
    if not os.path.isdir(os.path.join(export_dir, "index")):
        raise ConfigError(f"{export_dir} is not an export (no index/ in it): name one with --export DIR")
    return os.path.abspath(export_dir)


def normalized(conf: Config, url: str) -> str:
    """``url`` as the crawl DB keys it; a :class:`ConfigError` if the crawl would not keep it."""
    from crawl_udfs.url_normalize import UrlNormalizer

    norm = UrlNormalizer(conf.url).normalize(url)
    if norm is None:
        raise ConfigError(f"{url!r} is not a URL the crawl keeps (not http(s), unparsable or too long): "
                          "nothing to look up")
    return norm


def captures(export_dir: str, url: str, *, at_ms: int | None = None) -> list[Capture]:
    """Index rows of ``url`` (already normalised) in ``export_dir``, oldest first; only the one fetched at
    ``at_ms`` when given."""
    import duckdb

    pattern = os.path.join(export_dir, INDEX_GLOB)
    if not _any_index_file(export_dir):
        return []
    where, params = "url = ?", [url]
    if at_ms is not None:
        where, params = where + " AND epoch_ms(fetch_time) = ?", params + [at_ms]
    query = (f"SELECT {', '.join(_COLUMNS)} FROM read_parquet('{_sql_string(pattern)}', hive_partitioning = true) "
             f"WHERE {where} ORDER BY fetch_time, warc_filename, warc_record_offset")
    with duckdb.connect() as con:
        try:
            rows = con.execute(query, params).fetchall()
        except duckdb.Error as e:
            raise ConfigError(f"cannot read the index of {export_dir}: {str(e).splitlines()[0]}") from None
    return [Capture(*row) for row in rows]


def _any_index_file(export_dir: str) -> bool:
    import glob
    return next(glob.iglob(os.path.join(export_dir, INDEX_GLOB), recursive=True), None) is not None


def _sql_string(text: str) -> str:
    return text.replace("'", "''")


@dataclass(frozen=True)
class Payload:
    """A capture's payload and where it was read: the capture's own record, or the one a revisit refers to."""

    data: bytes
    source: Capture


def payload(export_dir: str, cap: Capture) -> Payload | None:
    """The stored payload of ``cap``: its response record's, or for a revisit the payload of the record it
    refers to (None when that one is not in the export)."""
    rec = _record(export_dir, cap)
    if rec.rec_type != "revisit":
        return Payload(rec.content_stream().read(), cap)
    headers = rec.rec_headers
    target, date = headers.get_header("WARC-Refers-To-Target-URI"), headers.get_header("WARC-Refers-To-Date")
    refers_to = headers.get_header("WARC-Refers-To")
    if not (target and date):
        return None
    for other in captures(export_dir, target, at_ms=_epoch_ms(date)):
        original = _record(export_dir, other)
        if original.rec_type == "response" and (
                refers_to is None or original.rec_headers.get_header("WARC-Record-ID") == refers_to):
            return Payload(original.content_stream().read(), other)
    return None


def _record(export_dir: str, cap: Capture):
    """The one WARC record at the capture's (file, offset, length), read with warcio."""
    from warcio.archiveiterator import ArchiveIterator

    with open(os.path.join(export_dir, cap.warc_filename), "rb") as f:
        f.seek(cap.offset)
        blob = f.read(cap.length)
    rec = next(iter(ArchiveIterator(io.BytesIO(blob))), None)
    if rec is None:
        raise ConfigError(f"no WARC record at {cap.warc_filename} offset {cap.offset}: the export is damaged")
    return rec


def _epoch_ms(warc_date_text: str) -> int:
    """``2024-05-06T07:08:09.123Z`` (or without fraction) -> epoch milliseconds."""
    import datetime as dt

    text = warc_date_text.rstrip("Z")
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in text else "%Y-%m-%dT%H:%M:%S"
    when = dt.datetime.strptime(text, fmt).replace(tzinfo=dt.timezone.utc)
    return round(when.timestamp() * 1000)


def describe(cap: Capture) -> str:
    """One line per capture: ``WARC-Date status digest file offset= length= subset= round= [duplicate_of=]``."""
    from crawl_udfs.warc import warc_date

    digest = f"sha1:{cap.digest}" if cap.digest else "-"
    line = (f"{warc_date(cap.fetch_ms / 1000)} {cap.status} {digest} {cap.warc_filename} offset={cap.offset} "
            f"length={cap.length} subset={cap.subset} round={cap.round}")
    return line + (f" duplicate_of={cap.duplicate_of}" if cap.duplicate_of else "")


def run(conf: Config, url: str, *, export_dir: str | None = None, with_payload: bool = False,
        out: BinaryIO | None = None, err=None) -> int:
    """The verb: print the captures of ``url`` (and their payloads) to ``out``; returns the exit status."""
    out = out if out is not None else sys.stdout.buffer
    err = err if err is not None else sys.stderr
    export_dir = export_dir_of(conf, export_dir)
    norm = normalized(conf, url)
    found = captures(export_dir, norm)
    shown = norm if norm == url else f"{norm} (normalised from {url})"
    if not found:
        print(f"deltacrawl: lookup: no capture of {shown} in {export_dir}", file=err)
        return 1
    out.write(f"{shown}: {len(found)} capture(s) in {export_dir}\n".encode("utf-8"))
    for cap in found:
        out.write((describe(cap) + "\n").encode("utf-8"))
        if with_payload:
            _write_payload(out, export_dir, cap)
    out.flush()
    return 0


def _write_payload(out: BinaryIO, export_dir: str, cap: Capture) -> None:
    from crawl_udfs.warc import warc_date

    got = payload(export_dir, cap)
    if got is None:
        out.write(b"--- no payload: the record this revisit refers to is not in the export ---\n")
        return
    whose = "" if got.source is cap else f", of the record of {warc_date(got.source.fetch_ms / 1000)} it refers to"
    out.write(f"--- payload: {len(got.data)} bytes{whose} ---\n".encode("utf-8"))
    out.write(got.data)
    out.write(b"\n" if got.data and not got.data.endswith(b"\n") else b"")
    out.write(b"--- end of payload ---\n")
