"""WARC writing: exact bytes, read back by warcio, checked by `warcio check`, indexed by cdxj-indexer."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import itertools
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from warcio.archiveiterator import ArchiveIterator
from warcio.timeutils import iso_date_to_datetime

from crawl_udfs import config, warc

BIN = Path(sys.executable).parent
URL = "http://example.com/p?q=1"
WARCINFO = {"software": "deltacrawl/9.9", "operator": "Test Ops <ops@example.org>", "robots": "obey",
            "format": "WARC File Format 1.1", "conformsTo": warc.CONFORMS_TO}


def _ids():
    counter = itertools.count(1)
    return lambda: f"<urn:uuid:00000000-0000-4000-8000-{next(counter):012d}>"


GZIP_LEVEL = config.defaults().warc.gzip_level


def _writer(buf, **kw):
    return warc.WarcRecordWriter(buf, warcinfo_fields=kw.pop("fields", WARCINFO), gzip_level=GZIP_LEVEL,
                                 record_id_fn=_ids(), now_fn=lambda: 1700000000.0, **kw)


def _exchange(**kw) -> warc.HttpExchange:
    args = dict(url=URL, ip="127.0.0.2", fetch_time=1700000001.25, method="GET", request_target="/p?q=1",
                request_headers=[("Host", "example.com"), ("Accept-Encoding", "gzip")], http_version="1.1",
                status=200, reason="OK",
                response_headers=[("Content-Type", "text/plain"), ("Content-Encoding", "gzip"),
                                  ("Content-Length", "31")],
                body=b"hello\r\n", fetch_duration_ms=42)
    args.update(kw)
    return warc.HttpExchange(**args)


def _not_modified(**kw) -> warc.HttpExchange:
    args = dict(url=URL, ip=None, fetch_time=1700086401.0, method="GET", request_target="/p?q=1",
                request_headers=[("Host", "example.com"), ("If-None-Match", '"v1"')], http_version="1.1",
                status=304, reason="Not Modified", response_headers=[("ETag", '"v1"')], body=b"")
    args.update(kw)
    return warc.HttpExchange(**args)


def _members(data: bytes) -> list[bytes]:
    """Decompress gzip members one by one (each must be a complete member)."""
    out = []
    while data:
        d = zlib.decompressobj(wbits=31)
        out.append(d.decompress(data))
        assert d.eof, "truncated gzip member"
        data = d.unused_data
    return out


def _sha1(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


def _small_file() -> tuple[bytes, warc.RecordSpan, warc.RecordSpan]:
    buf = io.BytesIO()
    w = _writer(buf)
    w.write_warcinfo("t.warc.gz")
    resp = w.write_exchange(_exchange())
    rev = w.write_revisit(_not_modified(), refers_to="<urn:uuid:00000000-0000-4000-8000-000000000003>",
                          refers_to_uri=URL, refers_to_date=1700000001.25)
    return buf.getvalue(), resp, rev


EXPECTED_RECORDS = [
    b"WARC/1.1\r\n"
    b"WARC-Type: warcinfo\r\n"
    b"WARC-Date: 2023-11-14T22:13:20.000Z\r\n"
    b"WARC-Filename: t.warc.gz\r\n"
    b"WARC-Record-ID: <urn:uuid:00000000-0000-4000-8000-000000000001>\r\n"
    b"Content-Type: application/warc-fields\r\n"
    b"Content-Length: 201\r\n"
    b"WARC-Block-Digest: sha1:ASSINGCLFKQPMP6EJBI4LPVVDQBH3HMN\r\n"
    b"\r\n"
    b"software: deltacrawl/9.9\r\n"
    b"operator: Test Ops <ops@example.org>\r\n"
    b"robots: obey\r\n"
    b"format: WARC File Format 1.1\r\n"
    b"conformsTo: https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/\r\n"
    b"\r\n\r\n",

    b"WARC/1.1\r\n"
    b"WARC-Type: request\r\n"
    b"WARC-Date: 2023-11-14T22:13:21.250Z\r\n"
    b"WARC-Record-ID: <urn:uuid:00000000-0000-4000-8000-000000000002>\r\n"
    b"Content-Type: application/http; msgtype=request\r\n"
    b"WARC-Warcinfo-ID: <urn:uuid:00000000-0000-4000-8000-000000000001>\r\n"
    b"WARC-Target-URI: http://example.com/p?q=1\r\n"
    b"WARC-IP-Address: 127.0.0.2\r\n"
    b"Content-Length: 65\r\n"
    b"WARC-Block-Digest: sha1:I444NP6YGEXYTOKTCMLQ6VJUJAMGZYFG\r\n"
    b"\r\n"
    b"GET /p?q=1 HTTP/1.1\r\n"
    b"Host: example.com\r\n"
    b"Accept-Encoding: gzip\r\n"
    b"\r\n"
    b"\r\n\r\n",

    b"WARC/1.1\r\n"
    b"WARC-Type: response\r\n"
    b"WARC-Date: 2023-11-14T22:13:21.250Z\r\n"
    b"WARC-Record-ID: <urn:uuid:00000000-0000-4000-8000-000000000003>\r\n"
    b"Content-Type: application/http; msgtype=response\r\n"
    b"WARC-Warcinfo-ID: <urn:uuid:00000000-0000-4000-8000-000000000001>\r\n"
    b"WARC-Target-URI: http://example.com/p?q=1\r\n"
    b"WARC-Concurrent-To: <urn:uuid:00000000-0000-4000-8000-000000000002>\r\n"
    b"WARC-IP-Address: 127.0.0.2\r\n"
    b"WARC-Payload-Digest: sha1:VJMRNLT72FM2DCY3OLVJAXDVOID6EZUJ\r\n"
    b"Content-Length: 135\r\n"
    b"WARC-Block-Digest: sha1:OMXBAYQ4QTSMAMYLCT5HYSKJPICAFGFL\r\n"
    b"\r\n"
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/plain\r\n"
    b"X-Crawler-Content-Encoding: gzip\r\n"
    b"X-Crawler-Content-Length: 31\r\n"
    b"Content-Length: 7\r\n"
    b"\r\n"
    b"hello\r\n"
    b"\r\n\r\n",

    b"WARC/1.1\r\n"
    b"WARC-Type: metadata\r\n"
    b"WARC-Date: 2023-11-14T22:13:21.250Z\r\n"
    b"WARC-Record-ID: <urn:uuid:00000000-0000-4000-8000-000000000004>\r\n"
    b"Content-Type: application/warc-fields\r\n"
    b"WARC-Warcinfo-ID: <urn:uuid:00000000-0000-4000-8000-000000000001>\r\n"
    b"WARC-Target-URI: http://example.com/p?q=1\r\n"
    b"WARC-Concurrent-To: <urn:uuid:00000000-0000-4000-8000-000000000003>\r\n"
    b"Content-Length: 17\r\n"
    b"WARC-Block-Digest: sha1:6ZWKKHYQNX37L36M7ATHV5EGJZEO74AJ\r\n"
    b"\r\n"
    b"fetchTimeMs: 42\r\n"
    b"\r\n\r\n",

    b"WARC/1.1\r\n"
    b"WARC-Type: request\r\n"
    b"WARC-Date: 2023-11-15T22:13:21.000Z\r\n"
    b"WARC-Record-ID: <urn:uuid:00000000-0000-4000-8000-000000000005>\r\n"
    b"Content-Type: application/http; msgtype=request\r\n"
    b"WARC-Warcinfo-ID: <urn:uuid:00000000-0000-4000-8000-000000000001>\r\n"
    b"WARC-Target-URI: http://example.com/p?q=1\r\n"
    b"Content-Length: 63\r\n"
    b"WARC-Block-Digest: sha1:VWTIK5V3M22AJHPWMXIS6M2XQXUURXLD\r\n"
    b"\r\n"
    b"GET /p?q=1 HTTP/1.1\r\n"
    b"Host: example.com\r\n"
    b"If-None-Match: \"v1\"\r\n"
    b"\r\n"
    b"\r\n\r\n",

    b"WARC/1.1\r\n"
    b"WARC-Type: revisit\r\n"
    b"WARC-Date: 2023-11-15T22:13:21.000Z\r\n"
    b"WARC-Record-ID: <urn:uuid:00000000-0000-4000-8000-000000000006>\r\n"
    b"Content-Type: application/http; msgtype=response\r\n"
    b"WARC-Warcinfo-ID: <urn:uuid:00000000-0000-4000-8000-000000000001>\r\n"
    b"WARC-Target-URI: http://example.com/p?q=1\r\n"
    b"WARC-Concurrent-To: <urn:uuid:00000000-0000-4000-8000-000000000005>\r\n"
    b"WARC-Profile: http://netpreserve.org/warc/1.1/revisit/server-not-modified\r\n"
    b"WARC-Refers-To: <urn:uuid:00000000-0000-4000-8000-000000000003>\r\n"
    b"WARC-Refers-To-Target-URI: http://example.com/p?q=1\r\n"
    b"WARC-Refers-To-Date: 2023-11-14T22:13:21.250Z\r\n"
    b"Content-Length: 41\r\n"
    b"WARC-Block-Digest: sha1:4K6KP6NYU2YB4W3KLFPFUK76EZAXZWVT\r\n"
    b"\r\n"
    b"HTTP/1.1 304 Not Modified\r\n"
    b"ETag: \"v1\"\r\n"
    b"\r\n"
    b"\r\n\r\n",
]


# -- exact bytes ------------------------------------------------------------------------

def test_small_file_exact_bytes_one_gzip_member_per_record():
    data, resp, rev = _small_file()
    assert _members(data) == EXPECTED_RECORDS
    assert gzip.decompress(data) == b"".join(EXPECTED_RECORDS)
    # the spans are exactly the response's and the revisit's members
    assert _members(data[resp.offset:resp.offset + resp.length]) == [EXPECTED_RECORDS[2]]
    assert _members(data[rev.offset:rev.offset + rev.length]) == [EXPECTED_RECORDS[5]]
    assert resp.record_id == "<urn:uuid:00000000-0000-4000-8000-000000000003>"
    assert rev.offset + rev.length == len(data)


def test_expected_blob_is_self_consistent():
    """Lengths and digests in the literal above are what the spec says (not just what we wrote)."""
    for rec in EXPECTED_RECORDS:
        head, sep, rest = rec.partition(b"\r\n\r\n")
        fields = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
        n = int(fields["Content-Length"])
        block = rest[:n]
        assert rest[n:] == b"\r\n\r\n", "record must end block CRLF CRLF, nothing more"
        assert fields["WARC-Block-Digest"] == _sha1(block)
        if fields["WARC-Type"] == "response":
            payload = block.partition(b"\r\n\r\n")[2]
            assert payload == b"hello\r\n"
            assert fields["WARC-Payload-Digest"] == _sha1(payload)
        else:
            assert "WARC-Payload-Digest" not in fields


def test_record_framing_has_no_extra_crlf():
    """header CRLF block CRLF CRLF, exactly (Common Crawl's August 2018 files had one CRLF more)."""
    for body in (b"", b"x", b"ends with crlf\r\n", b"\r\n\r\n", bytes(range(256)) * 3):
        buf = io.BytesIO()
        w = _writer(buf)
        w.write_warcinfo("f.warc.gz")
        w.write_exchange(_exchange(body=body))
        for member in _members(buf.getvalue()):
            head, _, rest = member.partition(b"\r\n\r\n")
            length = int(next(line for line in head.split(b"\r\n") if line.startswith(b"Content-Length:"))[15:])
            assert len(rest) == length + 4
            assert rest.endswith(b"\r\n\r\n")
        resp = _members(buf.getvalue())[2]
        assert resp.endswith(b"\r\n\r\n" + body + b"\r\n\r\n")


def test_precomputed_payload_digest_gives_identical_bytes():
    a, b = io.BytesIO(), io.BytesIO()
    for buf, digest in ((a, None), (b, _sha1(b"hello\r\n"))):
        w = _writer(buf)
        w.write_warcinfo("t.warc.gz")
        w.write_exchange(_exchange(), payload_digest=digest)
    assert a.getvalue() == b.getvalue()


def test_warc_date_milliseconds():
    assert warc.warc_date(0) == "1970-01-01T00:00:00.000Z"
    assert warc.warc_date(1700000001.25) == "2023-11-14T22:13:21.250Z"
    assert warc.warc_date(1700000001.9996) == "2023-11-14T22:13:22.000Z"
    assert iso_date_to_datetime(warc.warc_date(1700000001.123)).microsecond == 123000


def test_records_before_warcinfo_are_refused():
    w = _writer(io.BytesIO())
    with pytest.raises(RuntimeError):
        w.write_exchange(_exchange())


def test_metadata_record_only_when_there_is_something_to_say():
    buf = io.BytesIO()
    w = _writer(buf)
    w.write_warcinfo("t.warc.gz")
    w.write_exchange(_exchange(fetch_duration_ms=None))
    w.write_exchange(_exchange(fetch_duration_ms=None, metadata={"charset-detected": "utf-8"}))
    types = [r.rec_type for r in ArchiveIterator(io.BytesIO(buf.getvalue()))]
    assert types == ["warcinfo", "request", "response", "request", "response", "metadata"]
    assert _members(buf.getvalue())[-1].endswith(b"\r\n\r\ncharset-detected: utf-8\r\n\r\n\r\n")


# -- read back with warcio --------------------------------------------------------------

def test_read_back_with_archive_iterator_and_seek_by_pointer():
    data, resp, rev = _small_file()
    records = []
    it = ArchiveIterator(io.BytesIO(data), check_digests=True)
    for rec in it:
        records.append((rec.rec_type, rec.rec_headers.get_header("WARC-Record-ID"), rec.content_stream().read()))
        assert rec.digest_checker.passed is not False
    info_id = records[0][1]
    assert [r[0] for r in records] == ["warcinfo", "request", "response", "metadata", "request", "revisit"]
    for rec in ArchiveIterator(io.BytesIO(data)):
        if rec.rec_type != "warcinfo":
            assert rec.rec_headers.get_header("WARC-Warcinfo-ID") == info_id
        assert rec.rec_headers.get_header("WARC-Record-ID").startswith("<urn:uuid:")

    f = io.BytesIO(data)
    f.seek(resp.offset)
    one = [(r, r.content_stream().read()) for r in ArchiveIterator(io.BytesIO(f.read(resp.length)))]
    assert len(one) == 1
    r, payload = one[0]
    assert r.rec_type == "response" and r.rec_headers.get_header("WARC-Record-ID") == resp.record_id
    assert r.http_headers.get_statuscode() == "200"
    assert r.http_headers.get_header("X-Crawler-Content-Encoding") == "gzip"
    assert r.http_headers.get_header("Content-Encoding") is None
    assert r.http_headers.get_header("Content-Length") == "7"
    assert payload == b"hello\r\n"

    f.seek(rev.offset)
    one = list(ArchiveIterator(io.BytesIO(f.read(rev.length))))
    assert [x.rec_type for x in one] == ["revisit"]
    h = one[0].rec_headers
    assert h.get_header("WARC-Profile") == warc.REVISIT_NOT_MODIFIED
    assert h.get_header("WARC-Payload-Digest") is None
    assert h.get_header("WARC-Refers-To-Date") == "2023-11-14T22:13:21.250Z"
    assert one[0].http_headers.get_statuscode() == "304"


def test_revisit_refers_to_date_equals_original_warc_date_and_optional_fields():
    buf = io.BytesIO()
    w = _writer(buf)
    w.write_warcinfo("t.warc.gz")
    w.write_exchange(_exchange(fetch_time=1712345678.987654))
    w.write_revisit(_not_modified(body=b"servers should not, but"), refers_to=None, refers_to_uri=URL,
                    refers_to_date=1712345678.987654)
    w.write_revisit(_not_modified(), refers_to=None, refers_to_uri="http://example.com/old", refers_to_date=None)
    recs = [(r.rec_type, r.rec_headers, r.content_stream().read()) for r in ArchiveIterator(io.BytesIO(buf.getvalue()))]
    response = next(h for t, h, _ in recs if t == "response")
    revisits = [(h, body) for t, h, body in recs if t == "revisit"]
    assert revisits[0][0].get_header("WARC-Refers-To-Date") == response.get_header("WARC-Date")
    assert revisits[0][1] == b"", "a revisit keeps headers only"
    assert revisits[0][0].get_header("WARC-Refers-To") is None
    assert revisits[1][0].get_header("WARC-Refers-To-Date") is None
    assert revisits[1][0].get_header("WARC-Refers-To-Target-URI") == "http://example.com/old"


def test_identical_payload_revisit_keeps_headers_and_the_payload_digest():
    """WARC 1.1 §6.7.2: profile identical-payload-digest, the full copy's digest, no payload; the HTTP headers
    as the response record stores them (framing hidden, the payload's true Content-Length), read by warcio."""
    buf = io.BytesIO()
    w = _writer(buf)
    w.write_warcinfo("t.warc.gz")
    body = b"<html>unchanged</html>"
    first = w.write_exchange(_exchange(body=body, fetch_time=1712345678.5))
    again = _exchange(body=body, fetch_time=1712999999.0,
                      response_headers=[("Content-Type", "text/html"), ("Content-Encoding", "gzip")])
    span = w.write_revisit(again, refers_to=first.record_id, refers_to_uri=URL, refers_to_date=1712345678.5,
                           payload_digest=_sha1(body))
    rec = next(iter(ArchiveIterator(io.BytesIO(buf.getvalue()[span.offset:span.offset + span.length]),
                                    check_digests=True)))
    h = rec.rec_headers
    assert rec.rec_type == "revisit" and h.get_header("WARC-Profile") == warc.REVISIT_IDENTICAL
    assert (h.get_header("WARC-Payload-Digest"), h.get_header("WARC-Refers-To")) == (_sha1(body), first.record_id)
    assert (h.get_header("WARC-Refers-To-Target-URI"), h.get_header("WARC-Refers-To-Date")) == (
        URL, "2024-04-05T19:34:38.500Z")
    assert rec.http_headers.get_statuscode() == "200"
    assert rec.http_headers.get_header("Content-Length") == str(len(body))
    assert rec.http_headers.get_header("X-Crawler-Content-Encoding") == "gzip"
    assert rec.content_stream().read() == b""


def test_truncated_record():
    buf = io.BytesIO()
    w = _writer(buf)
    w.write_warcinfo("t.warc.gz")
    body = b"a" * 1000
    span = w.write_exchange(_exchange(body=body, truncated="length"))
    rec = next(iter(ArchiveIterator(io.BytesIO(buf.getvalue()[span.offset:span.offset + span.length]),
                                    check_digests=True)))
    assert rec.rec_headers.get_header("WARC-Truncated") == "length"
    assert rec.rec_headers.get_header("WARC-Payload-Digest") == _sha1(body)
    assert rec.http_headers.get_header("Content-Length") == "1000"
    assert rec.content_stream().read() == body
    assert rec.digest_checker.passed is True
    with pytest.raises(ValueError):
        w.write_exchange(_exchange(truncated="because"))


# -- header bytes -----------------------------------------------------------------------

def _response_block(resp_headers, **kw) -> bytes:
    buf = io.BytesIO()
    w = _writer(buf)
    w.write_warcinfo("t.warc.gz")
    w.write_exchange(_exchange(response_headers=resp_headers, **kw))
    member = _members(buf.getvalue())[2]
    return member.partition(b"\r\n\r\n")[2][:-4]


def _read_response_headers(resp_headers, **kw):
    buf = io.BytesIO()
    w = _writer(buf)
    w.write_warcinfo("t.warc.gz")
    w.write_exchange(_exchange(response_headers=resp_headers, **kw))
    rec = [r for r in ArchiveIterator(io.BytesIO(buf.getvalue()), check_digests=True) if r.rec_type == "response"][0]
    rec.content_stream().read()
    assert rec.digest_checker.passed is True
    return rec.http_headers.headers


def test_non_ascii_and_long_headers_round_trip():
    long_value = "v" * 100_000
    raw = b"caf\xe9; filename=\xff\xfe"
    headers = [("X-Latin1", raw), ("X-Same-As-Aiohttp", raw.decode("utf-8", "surrogateescape")),
               ("X-Utf8", "na\u00efve \u2603"), ("X-Long", long_value), (b"X-Bytes-Name", b"ok"),
               ("content-encoding", "br")]
    block = _response_block(headers, reason="D\u00e9j\u00e0 vu")
    assert block.startswith(b"HTTP/1.1 200 D\xc3\xa9j\xc3\xa0 vu\r\n")
    assert b"\r\nX-Latin1: caf\xe9; filename=\xff\xfe\r\n" in block
    assert b"\r\nX-Same-As-Aiohttp: caf\xe9; filename=\xff\xfe\r\n" in block
    assert b"\r\nX-Utf8: na\xc3\xafve \xe2\x98\x83\r\n" in block
    assert b"\r\nX-Long: " + b"v" * 100_000 + b"\r\n" in block
    assert b"\r\nX-Crawler-content-encoding: br\r\n" in block
    read = dict(_read_response_headers(headers))
    assert read["X-Latin1"] == raw.decode("latin-1")      # warcio: utf-8, else ISO-8859-1
    assert read["X-Utf8"] == "na\u00efve \u2603"
    assert read["X-Long"] == long_value
    assert read["X-Bytes-Name"] == "ok"


def test_cr_lf_cannot_inject_lines():
    block = _response_block([("X-Evil", "a\r\nSet-Cookie: x=1"), ("X-\nName", "b")])
    assert b"\r\nX-Evil: a  Set-Cookie: x=1\r\n" in block
    assert b"\r\nX- Name: b\r\n" in block
    w = _writer(io.BytesIO())
    w.write_warcinfo("t.warc.gz")
    with pytest.raises(ValueError):
        w.write_exchange(_exchange(url="http://example.com/\r\nWARC-Type: x"))


TOKEN = st.text(alphabet="!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                min_size=1, max_size=30)
# CR and LF alone, as a line break, and as attempts to inject a header or end the header block
CRLF = st.sampled_from(["\r", "\n", "\r\n", "\n\n", "\r\nX-Injected: 1", "\r\n\r\n<html>", "\r\nContent-Length: 0"])
LATIN1_VALUE = st.lists(st.one_of(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=255), max_size=20),
                                  CRLF), max_size=4).map("".join)
TEXT_VALUE = st.lists(st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20), CRLF),
                      max_size=4).map("".join)
NAME = st.one_of(TOKEN, st.tuples(TOKEN, st.sampled_from(["\r", "\n", "\r\n", "\n\n"]), TOKEN).map("".join))
HIDDEN = {"content-encoding", "transfer-encoding", "content-length"}


def _warcio_decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def _one_line(raw: bytes) -> bytes:
    """What the writer stores for a header name or value: every CR and every LF a space."""
    return raw.replace(b"\r", b" ").replace(b"\n", b" ")


def _assert_records_intact(resp_headers) -> None:
    """The file still holds exactly its records, the response's body and digests intact."""
    buf = io.BytesIO()
    w = _writer(buf)
    w.write_warcinfo("t.warc.gz")
    w.write_exchange(_exchange(response_headers=resp_headers))
    recs = []
    for r in ArchiveIterator(io.BytesIO(buf.getvalue()), check_digests=True):
        recs.append((r.rec_type, r.content_stream().read()))
        assert r.digest_checker.passed is not False
    assert [t for t, _ in recs] == ["warcinfo", "request", "response", "metadata"]
    assert recs[2][1] == b"hello\r\n"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(NAME, LATIN1_VALUE), max_size=8))
def test_latin1_header_bytes_round_trip(pairs):
    """Values given as latin-1 bytes are stored verbatim (CR and LF as spaces), one line per
    header, in order, and warcio reads exactly those headers back: none injected, none lost."""
    pairs = [(n, v) for n, v in pairs if n.lower() not in HIDDEN]
    given_headers = [(n, v.encode("latin-1")) for n, v in pairs]
    block = _response_block(given_headers)
    lines = block.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]
    assert lines[:-1] == [_one_line(n.encode()) + b": " + _one_line(v) for n, v in given_headers]
    assert lines[-1] == b"Content-Length: 7"
    # the same bytes reach the file when the value comes as aiohttp decodes it
    assert _response_block([(n, v.decode("utf-8", "surrogateescape")) for n, v in given_headers]) == block
    read = _read_response_headers(given_headers)
    assert read[:-1] == [(_one_line(n.encode()).decode().strip(), _warcio_decode(_one_line(v)).strip())
                         for n, v in given_headers]
    _assert_records_intact(given_headers)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(NAME, TEXT_VALUE), max_size=8))
def test_text_header_values_round_trip(pairs):
    pairs = [(n, v) for n, v in pairs if n.lower() not in HIDDEN]
    read = _read_response_headers(pairs)
    one = [(_one_line(n.encode()).decode(), _one_line(v.encode()).decode()) for n, v in pairs]
    assert read == [(n.strip(), v.strip()) for n, v in one] + [("Content-Length", "7")]
    _assert_records_intact(pairs)


# -- rolling files, warcio check/index, cdxj-indexer -------------------------------------

def _rolling(tmp_path, max_file_bytes, **kw) -> warc.RollingWarcWriter:
    conf = config.defaults().with_overrides(f"warc.max_file_bytes={max_file_bytes}",
                                            'warc.operator="Crawl Ops <ops@example.org>"')
    return warc.RollingWarcWriter(str(tmp_path), conf.warc, name_fn=lambda i: f"dc-r7-p3-a0-{i:05d}.warc.gz",
                                  record_id_fn=_ids(), now_fn=lambda: 1700000000.0, **kw)


def _write_some(w: warc.RollingWarcWriter) -> list[tuple[warc.WarcPointer, str, str]]:
    """(pointer, expected status, expected digest or '') for a mix of records."""
    out = []
    for i in range(6):
        body = (f"page {i} " * (i * 50)).encode()
        ex = _exchange(url=f"http://example.com/{i}", request_target=f"/{i}", body=body,
                       truncated="length" if i == 4 else None, status=404 if i == 5 else 200)
        out.append((w.write_exchange(ex), "404" if i == 5 else "200", _sha1(body)))
    ptr0 = out[0][0]
    rev = w.write_revisit(_not_modified(url="http://example.com/0", request_target="/0"), refers_to=ptr0.record_id,
                          refers_to_uri="http://example.com/0", refers_to_date=1700000001.25)
    out.append((rev, "304", ""))
    return out


def _cli(*args) -> str:
    proc = subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _check_pointers(tmp_path, written):
    for ptr, status, digest in written:
        with open(tmp_path / ptr.filename, "rb") as f:
            f.seek(ptr.offset)
            recs = [(r, r.content_stream().read())
                    for r in ArchiveIterator(io.BytesIO(f.read(ptr.length)), check_digests=True)]
        assert len(recs) == 1
        rec, payload = recs[0]
        assert rec.rec_headers.get_header("WARC-Record-ID") == ptr.record_id
        assert rec.http_headers.get_statuscode() == status
        assert rec.rec_type == ("revisit" if status == "304" else "response")
        if status != "304":
            assert _sha1(payload) == digest
        assert rec.digest_checker.passed is (None if status == "304" else True)


def test_rolling_writer_single_file_cli_tools_and_cdxj(tmp_path):
    with _rolling(tmp_path, 1_000_000) as w:
        written = _write_some(w)
    assert [Path(p).name for p in w.files] == ["dc-r7-p3-a0-00000.warc.gz"]
    _check_pointers(tmp_path, written)
    path = w.files[0]

    out = _cli("warcio", "check", "-v", path)
    assert "digest pass" in out and "fail" not in out.lower()

    offsets = {json.loads(line)["offset"]: json.loads(line) for line in _cli("warcio", "index", path).splitlines()}
    for ptr, _, _ in written:
        assert offsets[str(ptr.offset)]["warc-type"] in ("response", "revisit")

    lines = [line for line in _cli("cdxj-indexer", path).splitlines() if line]
    cdx = {}
    for line in lines:
        surt, ts, js = line.split(" ", 2)
        rec = json.loads(js)
        cdx[int(rec["offset"])] = rec
        assert ts == ("20231115221321" if rec["mime"] == "warc/revisit" else "20231114221321")
    assert len(cdx) == len(written)
    for ptr, status, digest in written:
        rec = cdx[ptr.offset]
        assert (rec["status"], int(rec["length"]), rec["filename"]) == (status, ptr.length, ptr.filename)
        assert rec.get("digest", "") == digest


def test_warcio_check_catches_a_wrong_digest(tmp_path):
    """`warcio check` is not vacuous: a record whose payload disagrees with its digest fails."""
    rec = EXPECTED_RECORDS[2].replace(b"hello\r\n", b"jello\r\n")
    bad = tmp_path / "bad.warc.gz"
    bad.write_bytes(b"".join(gzip.compress(r) for r in (EXPECTED_RECORDS[0], rec)))
    proc = subprocess.run([str(BIN / "warcio"), "check", str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "digest failed" in proc.stdout


def test_rollover_at_tiny_size_each_file_starts_with_warcinfo(tmp_path):
    with _rolling(tmp_path, 1) as w:
        written = _write_some(w)
    assert len(w.files) == len(written)
    assert [Path(p).name for p in w.files] == [f"dc-r7-p3-a0-{i:05d}.warc.gz" for i in range(len(written))]
    assert [p.filename for p, _, _ in written] == [Path(p).name for p in w.files]
    _check_pointers(tmp_path, written)
    for path in w.files:
        recs = [(r.rec_type, r.rec_headers) for r in ArchiveIterator(open(path, "rb"))]
        assert recs[0][0] == "warcinfo"
        assert recs[0][1].get_header("WARC-Filename") == Path(path).name
        info_id = recs[0][1].get_header("WARC-Record-ID")
        assert all(h.get_header("WARC-Warcinfo-ID") == info_id for _, h in recs[1:])
        assert [t for t, _ in recs[1:3]] in (["request", "response"], ["request", "revisit"])
        assert len(_members(Path(path).read_bytes())) == len(recs)
    _cli("warcio", "check", *w.files)


def test_rollover_threshold_counts_bytes(tmp_path):
    with _rolling(tmp_path, 3000) as w:
        sizes = []
        for _ in range(12):
            w.write_exchange(_exchange())
    for path in w.files[:-1]:
        size = Path(path).stat().st_size
        assert size >= 3000
        sizes.append(size)
    assert len(w.files) >= 2
    one_exchange = max(sizes) - 3000
    assert one_exchange < 1500, "a file stops right after it passes the limit"


def test_rolling_writer_file_hygiene(tmp_path):
    w = _rolling(tmp_path, 1_000_000)
    w.close()
    assert w.files == [] and list(tmp_path.iterdir()) == [], "no file without a record"
    with pytest.raises(ValueError):
        w.write_exchange(_exchange())

    (tmp_path / "dc-r7-p3-a0-00000.warc.gz").write_bytes(b"committed")
    w = _rolling(tmp_path, 1_000_000)
    with pytest.raises(FileExistsError):
        w.write_exchange(_exchange())
    assert (tmp_path / "dc-r7-p3-a0-00000.warc.gz").read_bytes() == b"committed"

    conf = config.defaults().warc
    for bad in ("x.warc", "sub/x.warc.gz"):
        w = warc.RollingWarcWriter(str(tmp_path), conf, name_fn=lambda i, bad=bad: bad)
        with pytest.raises(ValueError):
            w.write_exchange(_exchange())


def test_warcinfo_fields_from_config():
    conf = config.defaults().with_overrides('warc.operator="Crawl Ops <ops@example.org>"').warc
    fields = warc.warcinfo_fields(conf, extra={"isPartOf": "round-7"})
    assert list(fields) == ["software", "operator", "robots", "format", "conformsTo", "isPartOf"]
    assert fields["software"].startswith("deltacrawl/")
    assert fields["operator"] == "Crawl Ops <ops@example.org>"
    assert (fields["robots"], fields["format"]) == ("obey", "WARC File Format 1.1")
    assert fields["conformsTo"] == "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
    assert "operator" not in warc.warcinfo_fields(config.defaults().warc), "an empty operator is left out"


def test_default_record_ids_are_urn_uuid():
    buf = io.BytesIO()
    w = warc.WarcRecordWriter(buf, warcinfo_fields=WARCINFO, gzip_level=GZIP_LEVEL)
    ids = {w.write_warcinfo("t.warc.gz"), w.write_exchange(_exchange()).record_id}
    assert len(ids) == 2
    assert all(i.startswith("<urn:uuid:") and i.endswith(">") and len(i) == 47 for i in ids)


def test_gzip_level_has_no_default_of_its_own():
    with pytest.raises(TypeError):
        warc.WarcRecordWriter(io.BytesIO(), warcinfo_fields=WARCINFO)  # type: ignore[call-arg]


def test_gzip_level_from_config_changes_size_not_content(tmp_path):
    body = b"".join(b"<p>line %d of a page that repeats itself with small changes</p>\n" % i for i in range(4000))
    sizes, records = {}, {}
    for level in (1, 9):
        conf = config.defaults().with_overrides(f"warc.gzip_level={level}")
        d = tmp_path / f"l{level}"
        d.mkdir()
        with warc.RollingWarcWriter(str(d), conf.warc, name_fn=lambda i: f"x-{i}.warc.gz", record_id_fn=_ids(),
                                    now_fn=lambda: 1700000000.0) as w:
            w.write_exchange(_exchange(body=body))
        data = next(d.glob("*.warc.gz")).read_bytes()
        sizes[level], records[level] = len(data), _members(data)
    assert records[1] == records[9]  # the same records, byte for byte, once decompressed
    assert sizes[9] < sizes[1]
