"""payload_digest equals what warcio computes and writes as WARC-Payload-Digest."""

import io
import os
import re

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.utils import Digester
from warcio.warcwriter import WARCWriter

from crawl_udfs.signatures import payload_digest

PAYLOADS = [b"", b"a", b"<html><body>hello</body></html>", "café 日本".encode(), bytes(range(256)) * 40,
            os.urandom(100_003)]


def test_known_value():
    assert payload_digest(b"") == "sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"  # SHA-1 of nothing


@pytest.mark.parametrize("data", PAYLOADS)
def test_matches_warcio_digester(data):
    d = Digester("sha1")
    d.update(data)
    assert payload_digest(data) == str(d)
    assert re.fullmatch(r"sha1:[A-Z2-7]{32}", payload_digest(data))  # RFC 4648 base32, no padding


@pytest.mark.parametrize("data", PAYLOADS)
def test_matches_the_header_warcio_writes(data):
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True)
    http = StatusAndHeaders("200 OK", [("Content-Type", "text/html"), ("Content-Length", str(len(data)))],
                            protocol="HTTP/1.1")
    writer.write_record(writer.create_warc_record("http://example.com/", "response",
                                                  payload=io.BytesIO(data), http_headers=http))
    out.seek(0)
    record = next(iter(ArchiveIterator(out)))
    assert record.rec_headers.get_header("WARC-Payload-Digest") == payload_digest(data)
    assert record.content_stream().read() == data


def test_base32_letters_are_rfc_4648s():
    """The two-letters-at-a-time base32 equals base64.b32encode on many digests (all bit patterns)."""
    import base64
    import hashlib

    for i in range(3000):
        data = i.to_bytes(4, "big") + os.urandom(i % 7)
        assert payload_digest(data) == "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()
