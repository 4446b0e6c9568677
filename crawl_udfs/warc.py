"""WARC/1.1 writing: request, response (or revisit) and metadata records, one gzip member each.

Guarantees
- Every file starts with a ``warcinfo`` record (``application/warc-fields``: software,
  operator, robots policy, format, conformsTo); every other record names it in
  ``WARC-Warcinfo-ID``. Record ids are ``<urn:uuid:…>``; ``WARC-Date`` is UTC rounded to
  the millisecond, always written with three decimals (``2024-05-06T07:08:09.123Z``;
  WARC 1.1 §5.4 allows fractional seconds, and the Parquet index stores TIMESTAMP_MILLIS),
  so a revisit's ``WARC-Refers-To-Date`` rebuilt from the same epoch float equals the
  original's ``WARC-Date``.
- Each record is exactly ``header-block CRLF block CRLF CRLF`` (ISO 28500:2017 §4) in its
  own gzip member, so an (offset, length) pair returned here reads back one record alone.
  No stray CRLF (Common Crawl's August 2018 bug).
- The stored payload is the DECODED body. In the stored HTTP header block
  ``Content-Encoding``, ``Transfer-Encoding`` and ``Content-Length`` are renamed
  ``X-Crawler-<name>`` and a true ``Content-Length`` of the stored body is appended, so
  ``WARC-Payload-Digest`` (sha1, base32) is the digest of exactly the stored payload bytes
  and replay tools do not try to decode it again (Common Crawl's ``WarcRecordWriter``;
  warcio issues 74/75 on digests over chunk framing). ``WARC-Block-Digest`` covers the
  whole block. A cut body carries ``WARC-Truncated``.
- HTTP 304 becomes a ``revisit`` record, profile
  ``http://netpreserve.org/warc/1.1/revisit/server-not-modified``, headers only, with
  ``WARC-Refers-To``/``-Target-URI``/``-Date`` and no payload digest (WARC 1.1 §6.7.3).
- A response whose payload equals the stored copy's (same digest) becomes, when the caller
  asks, a ``revisit`` record of profile
  ``http://netpreserve.org/warc/1.1/revisit/identical-payload-digest`` (WARC 1.1 §6.7.2, as
  Heritrix writes them): the HTTP headers as a response record stores them (framing hidden,
  the true ``Content-Length`` of the payload appended), no payload, ``WARC-Payload-Digest``
  and ``WARC-Refers-To``/``-Target-URI``/``-Date`` naming the full copy.
- HTTP header names and values keep the bytes received, and no header can inject a line
  (``crawl_udfs.warc_headers``, which serialises the HTTP header blocks and hides framing).

Why not warcio's ``WARCWriter``: it percent-encodes every non-ASCII HTTP header value
(``StatusAndHeaders.to_ascii_bytes``), losing the bytes as received, digests the payload
of whatever stream it is given (the trap above), and adds payload digests to request and
metadata records. Record bytes are therefore assembled here and in ``warc_headers`` (a few
lines, tested byte for byte); warcio is the reference reader, checker and indexer in
``tests/test_warc.py``.

Two layers (STYLE rule 8): :class:`WarcRecordWriter` writes to any binary stream with
injectable record ids and clock; :class:`RollingWarcWriter` is what a fetch task uses:
files in one directory, named by the caller, rolled over after ``warc.max_file_bytes``.
"""

from __future__ import annotations

import os
import time
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from importlib import metadata as _metadata
from typing import BinaryIO, Callable, Mapping

from crawl_udfs.config import Section
from crawl_udfs.signatures import sha1_digest  # noqa: F401  (re-exported: warc.sha1_digest)
from crawl_udfs.warc_headers import Header, http_headers, octets

WARC_VERSION = b"WARC/1.1"
REVISIT_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
REVISIT_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
CONFORMS_TO = "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
TRUNCATION_REASONS = frozenset({"length", "time", "disconnect", "unspecified"})
_CRLF = b"\r\n"
_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class WarcPointer:
    """Where one response or revisit record lives: what the index and the crawl log store."""

    filename: str     # file name (no directory), as returned by the caller's name_fn
    offset: int       # byte offset of the record's gzip member in the file
    length: int       # byte length of that gzip member
    record_id: str    # "<urn:uuid:…>", as in WARC-Record-ID (usable as WARC-Refers-To)


@dataclass(frozen=True)
class RecordSpan:
    """Offset and length of one record (its gzip member) in the stream of a WarcRecordWriter."""

    offset: int
    length: int
    record_id: str


@dataclass
class HttpExchange:
    """One request and its response, as the fetcher hands them over."""

    url: str
    ip: str | None
    fetch_time: float                         # epoch seconds (request start) -> WARC-Date
    method: str                               # "GET"
    request_target: str                       # path?query as sent
    request_headers: list[Header]             # as sent, in order
    http_version: str                         # "1.1"
    status: int
    reason: str
    response_headers: list[Header]            # as received, in order
    body: bytes                               # DECODED payload (content/transfer codings removed)
    truncated: str | None = None              # "length" | "time" | "disconnect" -> WARC-Truncated
    fetch_duration_ms: float | None = None    # -> fetchTimeMs in the metadata record
    metadata: dict[str, str] = field(default_factory=dict)  # more warc-fields for the metadata record


def warc_date(epoch_s: float) -> str:
    """UTC ISO-8601 with milliseconds, e.g. ``2024-05-06T07:08:09.123Z``."""
    ms = round(epoch_s * 1000)
    return (_EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


def new_record_id() -> str:
    return f"<urn:uuid:{uuid.uuid4()}>"


def warcinfo_fields(warc_conf: Section, *, software: str | None = None,
                    extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The warcinfo fields of every file; an empty ``warc.operator`` is left out."""
    if software is None:
        try:
            software = f"deltacrawl/{_metadata.version('deltacrawl')}"
        except _metadata.PackageNotFoundError:
            software = "deltacrawl"
    fields = {"software": software, "operator": warc_conf.operator, "robots": "obey",
              "format": "WARC File Format 1.1", "conformsTo": CONFORMS_TO}
    fields.update(extra or {})
    return {k: v for k, v in fields.items() if v}


def _fields_block(fields: Mapping[str, str]) -> bytes:
    return b"".join(f"{k}: {v}\r\n".encode("utf-8") for k, v in fields.items())


class WarcRecordWriter:
    """Writes WARC records to a binary stream it is given; counts offsets itself (no ``tell``)."""

    def __init__(self, stream: BinaryIO, *, warcinfo_fields: Mapping[str, str], gzip_level: int,
                 record_id_fn: Callable[[], str] | None = None,
                 now_fn: Callable[[], float] | None = None):
        """``gzip_level`` is ``warc.gzip_level`` (zlib's 0-9), passed by whoever holds the configuration."""
        self._stream = stream
        self._level = gzip_level
        self._fields = dict(warcinfo_fields)
        self._new_id = record_id_fn or new_record_id
        self._now = now_fn or time.time
        self._warcinfo_id: str | None = None
        self.bytes_written = 0

    def write_warcinfo(self, filename: str) -> str:
        """Write the warcinfo record (must come first); returns its record id."""
        rid = self._new_id()
        block = _fields_block(self._fields)
        self._write([("WARC-Type", "warcinfo"), ("WARC-Date", warc_date(self._now())),
                     ("WARC-Filename", filename), ("WARC-Record-ID", rid),
                     ("Content-Type", "application/warc-fields")], [block], rid)
        self._warcinfo_id = rid
        return rid

    def write_exchange(self, ex: HttpExchange, *, payload_digest: str | None = None) -> RecordSpan:
        """Request, response (WARC-Concurrent-To the request), then metadata if there is any.

        ``payload_digest`` may be passed when already computed over ``ex.body``.
        Returns the span of the response record.
        """
        if ex.truncated is not None and ex.truncated not in TRUNCATION_REASONS:
            raise ValueError(f"WARC-Truncated must be one of {sorted(TRUNCATION_REASONS)}, got {ex.truncated!r}")
        req_id = self._write_request(ex)
        rid = self._new_id()
        head = self._status_line(ex) + http_headers(ex.response_headers, hide_framing=True)
        head += b"Content-Length: %d\r\n\r\n" % len(ex.body)
        headers = self._common("response", ex, rid, "application/http; msgtype=response")
        headers.append(("WARC-Concurrent-To", req_id))
        headers += self._address(ex)
        if ex.truncated:
            headers.append(("WARC-Truncated", ex.truncated))
        headers.append(("WARC-Payload-Digest", payload_digest or sha1_digest(ex.body)))
        span = self._write(headers, [head, ex.body], rid)
        self._write_metadata(ex, rid)
        return span

    def write_revisit(self, ex: HttpExchange, *, refers_to: str | None, refers_to_uri: str,
                      refers_to_date: float | None, payload_digest: str | None = None) -> RecordSpan:
        """Request, then a revisit record (headers only; the body is never stored).

        Without ``payload_digest``: a server-not-modified revisit (a 304). With it: an
        identical-payload-digest revisit of a response whose payload (``ex.body``, digest
        ``payload_digest``) is the one of the copy ``refers_to`` names.
        """
        req_id = self._write_request(ex)
        rid = self._new_id()
        head = self._status_line(ex) + http_headers(ex.response_headers, hide_framing=True)
        if payload_digest is not None:  # the headers of the payload it stands for, as its response record has them
            head += b"Content-Length: %d\r\n" % len(ex.body)
        head += _CRLF
        headers = self._common("revisit", ex, rid, "application/http; msgtype=response")
        headers.append(("WARC-Concurrent-To", req_id))
        headers += self._address(ex)
        headers.append(("WARC-Profile", REVISIT_NOT_MODIFIED if payload_digest is None else REVISIT_IDENTICAL))
        if payload_digest is not None:
            headers.append(("WARC-Payload-Digest", payload_digest))
        if refers_to:
            headers.append(("WARC-Refers-To", refers_to))
        headers.append(("WARC-Refers-To-Target-URI", refers_to_uri))
        if refers_to_date is not None:
            headers.append(("WARC-Refers-To-Date", warc_date(refers_to_date)))
        span = self._write(headers, [head], rid)
        self._write_metadata(ex, rid)
        return span

    # -- records ------------------------------------------------------------------------

    def _write_request(self, ex: HttpExchange) -> str:
        rid = self._new_id()
        line = b"%s %s HTTP/%s\r\n" % (octets(ex.method), octets(ex.request_target), octets(ex.http_version))
        head = line + http_headers(ex.request_headers, hide_framing=False) + _CRLF
        headers = self._common("request", ex, rid, "application/http; msgtype=request") + self._address(ex)
        self._write(headers, [head], rid)
        return rid

    def _write_metadata(self, ex: HttpExchange, concurrent_to: str) -> None:
        fields = {}
        if ex.fetch_duration_ms is not None:
            fields["fetchTimeMs"] = str(round(ex.fetch_duration_ms))
        fields.update(ex.metadata)
        if not fields:
            return
        rid = self._new_id()
        headers = self._common("metadata", ex, rid, "application/warc-fields")
        headers.append(("WARC-Concurrent-To", concurrent_to))
        self._write(headers, [_fields_block(fields)], rid)

    def _common(self, rec_type: str, ex: HttpExchange, rid: str, content_type: str) -> list[tuple[str, str]]:
        if self._warcinfo_id is None:
            raise RuntimeError("write_warcinfo() must be called before any other record")
        return [("WARC-Type", rec_type), ("WARC-Date", warc_date(ex.fetch_time)), ("WARC-Record-ID", rid),
                ("Content-Type", content_type), ("WARC-Warcinfo-ID", self._warcinfo_id),
                ("WARC-Target-URI", ex.url)]

    @staticmethod
    def _address(ex: HttpExchange) -> list[tuple[str, str]]:
        return [("WARC-IP-Address", ex.ip)] if ex.ip else []

    @staticmethod
    def _status_line(ex: HttpExchange) -> bytes:
        return b"HTTP/%s %d %s\r\n" % (octets(ex.http_version), ex.status, octets(ex.reason))

    def _write(self, headers: list[tuple[str, str]], block: list[bytes], rid: str) -> RecordSpan:
        """One record in one gzip member: header block, CRLF, block, CRLF CRLF."""
        length = sum(len(p) for p in block)
        head = [WARC_VERSION + _CRLF]
        for name, value in headers + [("Content-Length", str(length)), ("WARC-Block-Digest", sha1_digest(*block))]:
            if "\r" in value or "\n" in value:
                raise ValueError(f"WARC header {name} contains CR or LF: {value!r}")
            head.append(f"{name}: {value}\r\n".encode("utf-8"))
        head.append(_CRLF)
        gz = zlib.compressobj(self._level, zlib.DEFLATED, 31)  # gzip container
        start = self.bytes_written
        for part in [b"".join(head), *block, _CRLF + _CRLF]:
            self._emit(gz.compress(part))
        self._emit(gz.flush())
        return RecordSpan(start, self.bytes_written - start, rid)

    def _emit(self, data: bytes) -> None:
        if data:
            self._stream.write(data)
            self.bytes_written += len(data)


class RollingWarcWriter:
    """WARC files in ``directory``, named ``name_fn(serial)``; a new file (with its own warcinfo)
    is started once the current one has passed ``warc.max_file_bytes``.

    Files are opened lazily (no file without a record) in exclusive mode: a name is never
    overwritten, so a file that committed rows point to cannot be clobbered by a rerun.
    The records of one exchange always share a file.
    """

    def __init__(self, directory: str, warc_conf: Section, *, name_fn: Callable[[int], str],
                 record_id_fn: Callable[[], str] | None = None, now_fn: Callable[[], float] | None = None,
                 software: str | None = None, extra_warcinfo: Mapping[str, str] | None = None):
        self._dir = directory
        self._max_bytes = warc_conf.max_file_bytes
        self._gzip_level = warc_conf.gzip_level
        self._name_fn = name_fn
        self._record_id_fn = record_id_fn
        self._now_fn = now_fn
        self._fields = warcinfo_fields(warc_conf, software=software, extra=extra_warcinfo)
        self._file: BinaryIO | None = None
        self._writer: WarcRecordWriter | None = None
        self._name = ""
        self._closed = False
        self.files: list[str] = []

    def write_exchange(self, ex: HttpExchange, *, payload_digest: str | None = None) -> WarcPointer:
        span = self._current().write_exchange(ex, payload_digest=payload_digest)
        return self._finish(span)

    def write_revisit(self, ex: HttpExchange, *, refers_to: str | None, refers_to_uri: str,
                      refers_to_date: float | None, payload_digest: str | None = None) -> WarcPointer:
        span = self._current().write_revisit(ex, refers_to=refers_to, refers_to_uri=refers_to_uri,
                                             refers_to_date=refers_to_date, payload_digest=payload_digest)
        return self._finish(span)

    def close(self) -> None:
        self._close_file()
        self._closed = True

    def __enter__(self) -> "RollingWarcWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _current(self) -> WarcRecordWriter:
        if self._closed:
            raise ValueError("RollingWarcWriter is closed")
        if self._writer is None:
            name = self._name_fn(len(self.files))
            if not name.endswith(".warc.gz") or "/" in name or os.sep in name:
                raise ValueError(f"WARC file name must be a plain name ending in .warc.gz, got {name!r}")
            path = os.path.join(self._dir, name)
            self._file = open(path, "xb")
            self.files.append(path)
            self._name = name
            self._writer = WarcRecordWriter(self._file, warcinfo_fields=self._fields,
                                            record_id_fn=self._record_id_fn, now_fn=self._now_fn,
                                            gzip_level=self._gzip_level)
            self._writer.write_warcinfo(name)
        return self._writer

    def _finish(self, span: RecordSpan) -> WarcPointer:
        pointer = WarcPointer(self._name, span.offset, span.length, span.record_id)
        if self._writer is not None and self._writer.bytes_written >= self._max_bytes:
            self._close_file()
        return pointer

    def _close_file(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
            finally:
                self._file.close()
                self._file, self._writer = None, None
