"""HTTP header blocks as a WARC record stores them: one job, turning header lines into bytes.

Guarantees
- Names and values keep the bytes received: ``bytes`` are written verbatim, ``str`` is
  encoded UTF-8 with ``surrogateescape`` (how aiohttp decodes header bytes, so its
  ``headers`` and its ``raw_headers`` give the same bytes). A CR or LF inside a name or
  value (never produced by a conforming parser) is written as a space, so no header can
  inject a line.
- With ``hide_framing``, ``Content-Encoding``, ``Transfer-Encoding`` and ``Content-Length``
  (ASCII names, any case) are renamed ``X-Crawler-<name>``: the stored payload is the decoded
  body, and ``crawl_udfs.warc`` appends its true ``Content-Length`` (why: its docstring).

Used by ``crawl_udfs.warc`` for the request and response (or revisit) header blocks and
their request and status lines (:func:`octets`).
"""

from __future__ import annotations

from typing import Iterable

HIDDEN_HEADER_PREFIX = b"X-Crawler-"
_HIDDEN_HEADERS = frozenset({b"content-encoding", b"transfer-encoding", b"content-length"})
_HIDDEN_LENGTHS = frozenset(map(len, _HIDDEN_HEADERS))
_HIDDEN_PREFIX_STR = HIDDEN_HEADER_PREFIX.decode("ascii")
_HIDDEN_NAMES_STR = frozenset(n.decode("ascii") for n in _HIDDEN_HEADERS)

Header = tuple[str | bytes, str | bytes]


def octets(value: str | bytes) -> bytes:
    """One name, value or status-line part as stored: the bytes received, CR and LF made spaces."""
    raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")
    if b"\r" in raw or b"\n" in raw:
        raw = raw.replace(b"\r", b" ").replace(b"\n", b" ")
    return raw


def http_headers(lines: Iterable[Header], *, hide_framing: bool) -> bytes:
    """The header lines, ``name: value CRLF`` each, with the bytes the module docstring promises.

    Fast path (what aiohttp hands over): every name and value a ``str`` without CR or LF,
    joined and encoded once -- UTF-8 with ``surrogateescape`` encodes code point by code
    point, so that is byte for byte what :func:`_header_octets` gives. Anything else goes
    through :func:`_header_octets`.
    """
    if not isinstance(lines, list):
        lines = list(lines)
    try:
        text = _header_text(lines, hide_framing)
    except TypeError:  # a bytes (or otherwise non-str) name or value
        text = None
    return _header_octets(lines, hide_framing) if text is None else text.encode("utf-8", "surrogateescape")


def _header_octets(lines: list[Header], hide_framing: bool) -> bytes:
    """Header by header through :func:`octets`: any mix of ``str`` and ``bytes``, CR/LF made spaces."""
    out = []
    for name, value in lines:
        n = octets(name)
        if hide_framing and len(n) in _HIDDEN_LENGTHS and n.lower() in _HIDDEN_HEADERS:
            n = HIDDEN_HEADER_PREFIX + n
        out.append(b"%s: %s\r\n" % (n, octets(value)))
    return b"".join(out)


def _header_text(lines: list[Header], hide_framing: bool) -> str | None:
    """All-``str`` header lines as one ``str``; None if a name or value holds CR or LF.

    Raises TypeError if a name or value is not a ``str``. Framing headers are hidden exactly
    as :func:`_header_octets` hides them: ASCII names, compared case-insensitively.
    """
    lines = [(_HIDDEN_PREFIX_STR + n, v) if hide_framing and n.lower() in _HIDDEN_NAMES_STR and n.isascii()
             else (n, v) for n, v in lines]  # (n, v): a malformed line fails as in _header_octets
    text = "\r\n".join(map(": ".join, lines)) + "\r\n" if lines else ""
    if text.count("\r") != len(lines) or text.count("\n") != len(lines):
        return None
    return text
