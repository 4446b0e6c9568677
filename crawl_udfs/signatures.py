"""Content signatures of fetched payloads.

Guarantee: :func:`payload_digest` returns exactly the string warcio writes as
``WARC-Payload-Digest`` for the same payload bytes -- ``"sha1:"`` followed by
the RFC 4648 base32 (upper case, 32 characters, no padding needed for 20
bytes) of the SHA-1 digest -- so the crawl DB, the fetch log and the WARC
files agree, and a digest can be compared with Common Crawl's
``content_digest`` after stripping the ``sha1:`` prefix.

What is digested is the *stored* payload: the body after content decoding
and without chunk framing (see the WARC field notes: warcio digests chunked
bodies with their framing unless the caller stores the decoded body).
"""

from __future__ import annotations

import hashlib

__all__ = ["payload_digest", "sha1_digest"]

# RFC 4648 base32 of a 20-byte digest, 10 bits (two letters) at a time: a third of the time of
# ``base64.b32encode``, which is Python code looping over 5-byte groups; the same letters
# (tests/test_signatures.py compares them with base64's).
_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_PAIRS = tuple(a + b for a in _B32 for b in _B32)
_SHIFTS = tuple(range(150, -1, -10))


def sha1_digest(*parts: bytes) -> str:
    """``"sha1:"`` + base32 of SHA-1 of the concatenated ``parts``: the form of WARC-Payload-Digest and
    WARC-Block-Digest (warcio's ``Digester``; Common Crawl's ``content_digest`` without the prefix).

    The one implementation: :mod:`crawl_udfs.warc` digests blocks with it too.
    """
    sha = hashlib.sha1()
    for part in parts:
        sha.update(part)
    n = int.from_bytes(sha.digest(), "big")
    return "sha1:" + "".join([_B32_PAIRS[(n >> shift) & 1023] for shift in _SHIFTS])


def payload_digest(data: bytes) -> str:
    """``"sha1:"`` + base32 of SHA-1 of ``data``, as in ``WARC-Payload-Digest``.

    The fetch task computes it once per page and hands it to the WARC writer
    (``write_exchange(payload_digest=...)``), so a body is digested once for it.
    """
    return sha1_digest(data)
