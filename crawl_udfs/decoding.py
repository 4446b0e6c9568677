"""Response bodies decoded as they stream in, never past their caps.

Guarantees: gzip (multi-member included), deflate (zlib-wrapped or raw), br and
identity are decoded incrementally; each decoder step yields at most 64 KiB, and
compressed input is fed in 4 KiB slices, so memory stays within ``cap`` however
small the compressed input. A body past ``cap`` decoded (or wire) bytes is cut
(``truncated="length"``); a decoded/wire ratio over ``ratio`` once past ``floor``
decoded bytes is cut the same way, noted "decompression bomb". A corrupt stream
keeps the decoded prefix (``truncated="unspecified"``), or, when nothing decoded,
the body as received (``decoded=False``), as does an unknown or stacked
Content-Encoding. Pure: no I/O; ``crawl_udfs.fetcher`` feeds it.
"""

from __future__ import annotations

import zlib
from typing import Any

import brotli

ACCEPT_ENCODING = "gzip, deflate, br"  # exactly what _Decoder decodes
_STEP = 65536  # most decoded bytes produced per decoder step
_FEED = 4096  # compressed bytes handed to a decoder at once (bounds the over-read of a bomb)


class _DecodeError(Exception):
    pass


class _Decoder:
    """Incremental Content-Encoding decoder; ``read(limit)`` yields at most ``limit`` bytes."""

    def __init__(self, encoding: str):
        self.encoding = encoding
        self._in = b""
        self._z: Any = None
        self._br = brotli.Decompressor() if encoding == "br" else None
        self.done = False
        if encoding == "gzip":
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, data: bytes) -> None:
        if not self.done:
            self._in += data

    def read(self, limit: int) -> bytes:
        try:
            while not self.done:
                if self._br is not None:
                    if self._in or not self._br.can_accept_more_data():
                        data, self._in = self._in, b""
                        out = self._br.process(data, output_buffer_limit=limit)
                        self.done = self._br.is_finished()
                        if out:
                            return out
                        if not data:
                            return b""
                        continue
                    return b""
                if not self._in:
                    return b""
                if self.encoding == "identity":
                    out, self._in = self._in[:limit], self._in[limit:]
                    return out
                if self._z is None:  # deflate: zlib-wrapped (RFC 1950) or raw (RFC 1951)
                    if len(self._in) < 2:
                        return b""
                    b0, b1 = self._in[0], self._in[1]
                    wrapped = b0 & 0x0F == 8 and (b0 << 8 | b1) % 31 == 0
                    self._z = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
                before = self._in
                out = self._z.decompress(before, limit)
                self._in = self._z.unconsumed_tail
                if self._z.eof:
                    rest = self._z.unused_data + self._in
                    if self.encoding == "gzip" and rest.lstrip(b"\0"):
                        self._z, self._in = zlib.decompressobj(16 + zlib.MAX_WBITS), rest.lstrip(b"\0")
                    else:
                        self._in, self.done = b"", True
                if out:
                    return out
                if self._in == before:
                    return b""
            return b""
        except (zlib.error, brotli.error) as e:
            raise _DecodeError(f"{self.encoding} decoding failed: {e}") from None


def _encoding(values: list[str]) -> tuple[str | None, str | None]:
    """(decoder name or None, note) for a response's Content-Encoding header values."""
    codings = [c.strip().lower() for v in values for c in v.split(",") if c.strip()]
    codings = ["gzip" if c == "x-gzip" else c for c in codings if c != "identity"]
    if not codings:
        return "identity", None
    if len(codings) == 1 and codings[0] in ("gzip", "deflate", "br"):
        return codings[0], None
    return None, f"content-encoding {', '.join(codings)!r} not decoded; body stored as received"



class Body:
    """A response body decoded as it streams in, under the size and decompression-bomb caps.

    Compressed input is fed to the decoder in small slices and each decoder step
    yields at most ``_STEP`` bytes, so the ratio check sees every step and memory
    stays within the cap whatever the input.
    """

    def __init__(self, content_encoding: list[str], cap: int, ratio: float, floor: int):
        name, self.note = _encoding(content_encoding)
        self.dec, self.decoded = _Decoder(name or "identity"), name is not None
        self.cap, self.ratio, self.floor = cap, ratio, floor
        self.buf = bytearray()
        self.fed = 0                 # wire bytes handed to the decoder
        self.raw_head = bytearray()  # wire bytes kept only until the first decoded byte
        self.truncated: str | None = None

    def feed(self, chunk: bytes) -> None:
        step = len(chunk) if self.dec.encoding == "identity" else _FEED
        for i in range(0, len(chunk), step):
            piece = chunk[i:i + step]
            self.fed += len(piece)
            if not self.buf and self.dec.encoding != "identity":
                self.raw_head += piece
            self.dec.feed(piece)
            try:
                self._drain()
            except _DecodeError as e:
                self._decode_failed(e)
            if self.buf:
                self.raw_head.clear()
            if self.truncated is not None:
                return
        if self.fed > self.cap:  # wire bytes that decode to (almost) nothing
            self.truncated = "length"

    def _drain(self) -> None:
        while out := self.dec.read(min(_STEP, self.cap - len(self.buf) + 1)):
            self.buf += out
            if len(self.buf) > self.cap:
                del self.buf[self.cap:]
                self.truncated = "length"
                return
            if len(self.buf) > self.floor and len(self.buf) > self.ratio * self.fed:
                self.truncated = "length"
                self.note = (f"decompression bomb: {len(self.buf)} bytes decoded from {self.fed} "
                             f"({self.dec.encoding}), ratio over {self.ratio:g}")
                return

    def _decode_failed(self, e: _DecodeError) -> None:
        if self.buf:  # corrupt mid-stream: keep the decoded prefix
            self.truncated, self.note = "unspecified", str(e)
            return
        # nothing decoded yet: most likely a mislabelled body; keep it as it came
        self.dec, self.decoded, self.note = _Decoder("identity"), False, f"{e}; body stored as received"
        self.dec.feed(bytes(self.raw_head))
        self.raw_head.clear()
        self._drain()
