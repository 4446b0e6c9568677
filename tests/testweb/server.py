"""The test web's server: one port, one listening socket per address, virtual hosts by Host header.

Run as ``python -m tests.testweb serve`` (a subprocess of :class:`~tests.testweb.TestWeb`),
so it has its own event loop and GIL and measures the crawler as it really behaves.

Guarantees:
- every request that reaches a handler is logged as one JSON line, flushed at once,
  when its response is fully written or the connection is gone (``aborted``);
- ``start`` is stamped when the handler starts (after the request has arrived) and
  ``end`` just before the server's last write of the exchange (see
  :meth:`TestWebServer.finish`), so a client can never have read a response
  before its ``end``;
- a request is served only on the address its host maps to (else 421), and
  everything arriving on a bait address (127.0.0.1, 127.66.0.1, ::1) is logged
  with ``bait: true``;
- ``disallowed`` is judged by the rules the host serves at that moment, and
  ``in_retry_after`` by the windows announced earlier to that client
  (remote address + User-Agent);
- nothing large is held in memory: huge bodies are generated as streamed, bombs
  are built once (in a thread, cached on disk) from a repeated deflate segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import hashlib
import itertools
import json
import math
import os
import random
import resource
import signal
import socket
import struct
import time
import zlib
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path

from aiohttp import web

from . import realistic, render, robots
from .live import LiveWeb, not_modified
from .model import Knobs, Page, split_target
from .sites import BAIT_ADDRESSES, HostPlan, Plan, build_plan

SERVER_HEADER = "deltacrawl-testweb"
LAST_MODIFIED = "Sun, 01 Nov 2026 00:00:00 GMT"  # of every page served with validators (send_validated)


# ------------------------------------------------------------------ bombs


def build_bombs(cache_dir: Path, n_bytes: int) -> dict[str, Path]:
    """gzip and brotli encodings of ``n_bytes`` zeros, cached under ``cache_dir`` (atomic rename)."""
    import brotli

    cache_dir.mkdir(parents=True, exist_ok=True)
    out = {"gzip": cache_dir / f"zeros-{n_bytes}.gz", "br": cache_dir / f"zeros-{n_bytes}.br"}
    mib = 1 << 20
    n_chunks, rest = divmod(n_bytes, mib)
    if not out["gzip"].exists():
        # A full flush resets the deflate state, so each 1 MiB of zeros compresses to the same segment.
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        seg = c.compress(bytes(mib)) + c.flush(zlib.Z_FULL_FLUSH)
        tail = c.compress(bytes(rest)) + c.flush(zlib.Z_FINISH)
        crc, block = 0, bytes(16 * mib)
        left = n_bytes
        while left:
            k = min(left, len(block))
            crc = zlib.crc32(block[:k] if k < len(block) else block, crc)
            left -= k
        tmp = out["gzip"].with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")
            for _ in range(n_chunks):
                f.write(seg)
            f.write(tail + struct.pack("<II", crc, n_bytes & 0xFFFFFFFF))
        os.replace(tmp, out["gzip"])
    if not out["br"].exists():
        comp = brotli.Compressor(quality=2)
        tmp = out["br"].with_suffix(f".tmp{os.getpid()}")
        zeros = bytes(mib)
        with open(tmp, "wb") as f:
            for _ in range(n_chunks):
                f.write(comp.process(zeros))
            f.write(comp.process(bytes(rest)) + comp.finish())
        os.replace(tmp, out["br"])
    return out


# ------------------------------------------------------------------ log


class RequestLog:
    def __init__(self, path: Path):
        self.f = open(path, "a", encoding="utf-8")

    def write(self, rec: dict) -> None:
        self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.f.flush()

    def close(self) -> None:
        self.f.close()


class Exchange:
    """One request being served; becomes one log line."""

    def __init__(self, host: str, addr: str, target: str, method: str, ua: str, peer: str, transport=None):
        self.transport = _stamped(transport)
        self.rec = {"host": host, "addr": addr, "path": target, "method": method, "ua": ua, "peer": peer,
                    "start": time.time(), "end": None, "status": 0, "bytes": 0, "kind": None,
                    "disallowed": False, "in_retry_after": False, "bait": False, "aborted": False}

    def __getitem__(self, k):
        return self.rec[k]

    def __setitem__(self, k, v):
        self.rec[k] = v


def _stamped(transport):
    """``transport``, its ``write`` wrapped to note in ``last_write_at`` when it was last called.

    Why: a write to a socket wakes the reading client, and on a busy machine the kernel
    may run the client at once and this server only later (wake-up preemption). A
    stamp taken after the last write returned was measured 10-20 ms after the client
    had read the whole response and even released the host, so the log showed gaps
    shorter than the client really left. A stamp taken before the write is never
    after the bytes left."""
    if transport is not None and not hasattr(transport, "last_write_at"):
        write = transport.write

        def stamped_write(data) -> None:
            transport.last_write_at = time.time()
            write(data)

        transport.last_write_at = None
        transport.write = stamped_write
    return transport


def _host_of(header: str) -> str:
    h = header.strip().lower()
    if h.startswith("["):
        return h[: h.find("]") + 1]
    return h.rsplit(":", 1)[0] if ":" in h else h


# ------------------------------------------------------------------ server


class TestWebServer:
    __test__ = False

    def __init__(self, plan: Plan, log_path: Path, cache_dir: Path):
        self.plan, self.knobs = plan, plan.knobs
        self.log = RequestLog(log_path)
        self.cache_dir = cache_dir
        self.started = time.time()
        self.requests: dict[str, int] = {}
        self.windows: dict[tuple[str, str, str], float] = {}  # (host, peer ip, ua) -> Retry-After window end
        self.throttled: dict[tuple[str, str, str], int] = {}
        self.flaky: dict[str, random.Random] = {}
        self.sids = itertools.count()
        self.bombs: asyncio.Future | None = None
        self.live = LiveWeb.from_knobs(plan.seed, self.knobs, self.started, plan.port) if self.knobs.live_hosts else None
        self._deep: bytes | None = None

    # -- state

    def changed(self, h: HostPlan) -> bool:
        if h.robots_variant != "changing":
            return False
        k = self.knobs
        by_time = k.robots_change_after_s is not None and time.time() - self.started >= k.robots_change_after_s
        by_count = k.robots_change_after_requests is not None and self.requests.get(h.name, 0) > k.robots_change_after_requests
        return by_time or by_count

    def begin(self, ex: Exchange, local: str, peer_ip: str) -> HostPlan | None:
        """Classify a request (host, kind, bait, disallowed, in_retry_after) before it is served."""
        if local in BAIT_ADDRESSES:
            ex["bait"] = True
            ex["kind"] = "bait"
            return None
        h = self.plan.hosts.get(ex["host"])
        if h is None:
            return None
        ex["kind"] = h.kind
        self.requests[h.name] = self.requests.get(h.name, 0) + 1
        ex["disallowed"] = not h.allowed(ex["path"], self.changed(h))
        until = self.windows.get((h.name, peer_ip, ex["ua"]))
        ex["in_retry_after"] = until is not None and ex["start"] < until
        return h

    def finish(self, ex: Exchange) -> None:
        """Log the exchange with ``end`` = when this server last handed the client bytes of it.

        That is the moment before its last write (see :func:`_stamped`): for a complete
        response, if the write left nothing in the transport's buffer; for an exchange the
        client cut off (``aborted``), whatever that write did, since a server notices a
        closed connection only when it next runs, which on a busy machine was measured
        0.1-1 s after the client had closed it and waited. Now, when no such write happened
        or bytes of a complete response stayed buffered (sent later by the loop)."""
        ex["end"] = time.time()
        t = ex.transport
        wrote = t.last_write_at if t is not None else None
        if wrote is not None and wrote >= ex["start"]:
            if ex["aborted"] or (not t.is_closing() and t.get_write_buffer_size() == 0):
                ex["end"] = wrote
        self.log.write(ex.rec)

    def sid(self, h: HostPlan) -> str:
        return hashlib.sha1(f"{self.plan.seed}/{h.name}/{next(self.sids)}".encode()).hexdigest()[:24].upper()

    def deep(self) -> bytes:
        if self._deep is None:
            self._deep = render.deep_html(self.knobs.deep_divs)
        return self._deep

    # -- aiohttp

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        transport = request.transport
        sockname = transport.get_extra_info("sockname") if transport else None
        local = sockname[0] if sockname else ""
        peer_ip = request.remote or ""
        ex = Exchange(_host_of(request.headers.get("Host", "")), local, request.raw_path, request.method,
                      request.headers.get("User-Agent", ""), peer_ip, transport)
        resp = None
        try:
            h = self.begin(ex, local, peer_ip)
            resp = await self.dispatch(request, ex, h, peer_ip)
            return resp
        except asyncio.CancelledError:
            ex["aborted"] = True
            raise
        except ConnectionError:
            ex["aborted"] = True
            return resp or web.Response(status=500)
        except Exception as e:  # a bug of the test web: aiohttp answers 500, the log says why
            ex["status"], ex["error"] = 500, repr(e)
            raise
        finally:
            self.finish(ex)

    async def send(self, request, ex: Exchange, status: int, body: bytes = b"", ctype: str = "text/html",
                   headers: dict | None = None) -> web.StreamResponse:
        resp = web.StreamResponse(status=status, headers={"Server": SERVER_HEADER, **(headers or {})})
        resp.content_type = ctype.split(";")[0]
        resp.headers["Content-Type"] = ctype
        resp.content_length = len(body)
        ex["status"] = status
        await resp.prepare(request)
        if body and request.method != "HEAD":
            await resp.write(body)
            ex["bytes"] += len(body)
        await resp.write_eof()
        return resp

    async def send_validated(self, request, ex: Exchange, body: bytes, ctype: str) -> web.StreamResponse:
        """200 with an ETag (of the body) and a Last-Modified, or 304 to a conditional GET they satisfy.

        If-None-Match wins over If-Modified-Since (RFC 9110, 13.2.2). A page whose body changes from
        request to request (a timestamp line, a session id) gets a new ETag each time, so it is never 304.
        """
        validators = {"ETag": '"' + hashlib.sha1(body).hexdigest()[:20] + '"', "Last-Modified": LAST_MODIFIED}
        if_none_match = request.headers.get("If-None-Match")
        if if_none_match is not None:
            fresh = validators["ETag"] in (t.strip().removeprefix("W/") for t in if_none_match.split(","))
        else:
            since = _http_date(request.headers.get("If-Modified-Since"))
            fresh = since is not None and since >= _LAST_MODIFIED_AT
        if not fresh:
            return await self.send(request, ex, 200, body, ctype, validators)
        resp = web.StreamResponse(status=304, headers={"Server": SERVER_HEADER, **validators})
        ex["status"] = 304
        await resp.prepare(request)
        await resp.write_eof()
        return resp

    async def stream(self, request, ex: Exchange, chunks, ctype="text/html", length: int | None = None,
                     interval: float = 0.0) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Server": SERVER_HEADER, "Content-Type": ctype})
        if length is not None:
            resp.content_length = length
        ex["status"] = 200
        await resp.prepare(request)
        if request.method != "HEAD":
            for chunk in chunks:
                await resp.write(chunk)
                ex["bytes"] += len(chunk)
                # Yield even without an interval: a client that cut the body is noticed at once
                # (its end logged when it closed, not after megabytes more written into the
                # socket's buffers), and other hosts are served meanwhile, as by a real server.
                await asyncio.sleep(interval)
        await resp.write_eof()
        return resp

    async def dispatch(self, request, ex: Exchange, h: HostPlan | None, peer_ip: str) -> web.StreamResponse:
        k = self.knobs
        if k.latency_s:
            await asyncio.sleep(k.latency_s)
        if ex["bait"]:
            return await self.send(request, ex, 200, render.small("bait: a crawler must never fetch this"))
        if h is None:
            return await self.send(request, ex, 404, render.small(f"unknown host {ex['host']}"))
        if h.address != ex["addr"]:
            return await self.send(request, ex, 421, render.small("misdirected request"))
        path, _ = split_target(ex["path"])
        rr = robots.reply(h.robots_variant, path, h.base_url, self.changed(h), k.robots_slow_s)
        if rr is not None:
            if rr.delay_s:
                await asyncio.sleep(rr.delay_s)
            location = rr.location if rr.location is None or "://" in rr.location else h.url(rr.location)
            headers = {"Location": location} if location else {}
            return await self.send(request, ex, rr.status, rr.body, "text/plain; charset=utf-8", headers)
        if h.variant in ("throttle-seconds", "throttle-date"):
            resp = await self.throttle(request, ex, h, peer_ip)
            if resp is not None:
                return resp
        if h.variant == "flaky" and h.kind == "hostile":
            rng = self.flaky.setdefault(h.name, h.rng("flaky"))
            if rng.random() < k.flaky_p:
                return await self.send(request, ex, 503, render.small("flaky: try again"))
        page = h.page(ex["path"])
        if page is None:
            return await self.send(request, ex, 404, render.small("not found"))
        return await self.serve_page(request, ex, h, page)

    async def throttle(self, request, ex: Exchange, h: HostPlan, peer_ip: str) -> web.StreamResponse | None:
        k, key, now = self.knobs, (h.name, peer_ip, ex["ua"]), ex["start"]
        until = self.windows.get(key, 0.0)
        if now >= until and self.throttled.get(key, 0) >= k.throttle_count:
            return None
        if now >= until:
            self.throttled[key] = self.throttled.get(key, 0) + 1
            until = now + k.retry_after_s if h.variant == "throttle-seconds" else math.ceil(now) + k.retry_after_s
            self.windows[key] = until
        value = str(max(1, math.ceil(until - now))) if h.variant == "throttle-seconds" else formatdate(until, usegmt=True)
        return await self.send(request, ex, 429, render.small("slow down"), headers={"Retry-After": value})

    async def serve_page(self, request, ex: Exchange, h: HostPlan, page: Page) -> web.StreamResponse:
        k, b = self.knobs, page.behaviour
        accept = request.headers.get("Accept-Encoding", "").lower()
        if b in ("html", "html-gzip", "html-br"):
            body, ctype = (realistic if k.realistic_pages else render).html(
                page, sid=self.sid(h) if h.kind == "dup" or (h.kind, h.variant) == ("trap", "session") else "")
            headers = {}
            if b == "html" and page.status == 200:
                return await self.send_validated(request, ex, body, ctype)
            if b == "html-gzip" and "gzip" in accept:
                body, headers = gzip.compress(body), {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
            elif b == "html-br" and "br" in accept:
                import brotli

                body, headers = brotli.compress(body), {"Content-Encoding": "br", "Vary": "Accept-Encoding"}
            return await self.send(request, ex, page.status, body, ctype, headers)
        if b == "live":
            return await self.serve_live(request, ex, h, page)
        if b == "file":
            ctype = page.content_type + (f"; charset={page.charset}" if page.charset else "")
            return await self.send_validated(request, ex, page.body or b"", ctype)
        if b == "file-now":  # a sitemap whose {now} lastmods are the time of the request (sites._gen_sitemap)
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()).encode()
            return await self.send(request, ex, 200, (page.body or b"").replace(b"{now}", now), page.content_type)
        if b == "redirect":
            return await self.send(request, ex, page.status, render.small("moved"), headers={"Location": page.location})
        if b == "status":
            return await self.send(request, ex, page.status, render.small(page.text or "error"))
        if b == "many-links":
            return await self.send(request, ex, 200, render.many_links(page))
        if b == "deep-html":
            return await self.send(request, ex, 200, self.deep())
        if b == "hang":
            await asyncio.sleep(k.hang_s)
            return await self.send(request, ex, 200, render.small("finally"))
        if b == "drip":
            text = itertools.chain(b"<!DOCTYPE html><html><body>\n", itertools.cycle(b"<p>still dripping</p>\n"))
            n_chunks = int(k.drip_total_s / k.drip_interval_s)
            chunks = (bytes(itertools.islice(text, k.drip_bytes)) for _ in range(n_chunks))
            return await self.stream(request, ex, chunks, interval=k.drip_interval_s)
        if b in ("huge", "huge-chunked"):
            return await self.stream(request, ex, _huge_chunks(k.huge_bytes),
                                     length=k.huge_bytes if b == "huge" else None)
        if b in ("bomb-gzip", "bomb-br"):
            paths = await asyncio.shield(self.bombs)
            data = paths["gzip" if b == "bomb-gzip" else "br"].read_bytes()
            enc = "gzip" if b == "bomb-gzip" else "br"
            return await self.send(request, ex, 200, data, "text/html", {"Content-Encoding": enc})
        return await self.send(request, ex, 500, render.small(f"behaviour {b} is not served here"))

    async def serve_live(self, request, ex: Exchange, h: HostPlan, page: Page) -> web.StreamResponse:
        """The version of a live page at the request's start (``tests/testweb/live.py``), or 304."""
        at = ex["start"]
        version = self.live.version(h.name, page.path, at=at)
        ex["live_version"] = version
        validators = self.live.headers(h.name, page.path, version=version, at=at)
        fresh = not_modified(validators["ETag"], self.live.last_modified(h.name, page.path, at=at),
                             request.headers.get("If-None-Match"),
                             _http_date(request.headers.get("If-Modified-Since")))
        if not fresh:
            return await self.send(request, ex, 200, self.live.body(h.name, page.path, version=version),
                                   "text/html; charset=utf-8", validators)
        resp = web.StreamResponse(status=304, headers={"Server": SERVER_HEADER, **validators})
        ex["status"] = 304
        await resp.prepare(request)
        await resp.write_eof()
        return resp

    # -- raw sockets (reset, malformed headers)

    async def raw_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        local = writer.get_extra_info("sockname")[0]
        peer = writer.get_extra_info("peername")
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target = (lines[0].split(" ") + ["", ""])[:2]
        headers = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        ex = Exchange(_host_of(headers.get("host", "")), local, target, method, headers.get("user-agent", ""),
                      peer[0] if peer else "", writer.transport)
        try:
            h = self.begin(ex, local, ex["peer"])
            await self.raw_dispatch(writer, ex, h)
        except ConnectionError:
            ex["aborted"] = True
        finally:
            self.finish(ex)
            with contextlib.suppress(Exception):
                writer.close()

    async def raw_dispatch(self, writer: asyncio.StreamWriter, ex: Exchange, h: HostPlan | None) -> None:
        def head(status: str, body: bytes, extra: str = "", ctype: str = "text/html", length: bool = True) -> bytes:
            cl = f"Content-Length: {len(body)}\r\n" if length else ""
            return f"HTTP/1.1 {status}\r\nServer: {SERVER_HEADER}\r\nContent-Type: {ctype}\r\n{extra}{cl}Connection: close\r\n\r\n".encode("latin-1")

        async def out(data: bytes, status: int, body_len: int) -> None:
            ex["status"] = status
            writer.write(data)
            await writer.drain()
            ex["bytes"] = body_len

        if h is None or h.address != ex["addr"]:
            body = render.small("unknown or misdirected host")
            return await out(head("404 Not Found", body) + body, 404, len(body))
        path, _ = split_target(ex["path"])
        rr = robots.reply(h.robots_variant, path, h.base_url, False, 0)
        if rr is not None:
            return await out(head(f"{rr.status} OK", rr.body, ctype="text/plain") + rr.body, rr.status, len(rr.body))
        page = h.page(ex["path"])
        b = page.behaviour if page else "missing"
        body = render.small(f"{h.name} {path}: {b}")
        if b == "raw-ok":
            body, _ = render.html(page)
            return await out(head("200 OK", body) + body, 200, len(body))
        if b in ("raw-reset", "raw-reset-partial"):
            if b == "raw-reset-partial":
                body = b"<!DOCTYPE html><html><body>" + b"<p>partial</p>\n" * 40
                await out(head("200 OK", b"", f"Content-Length: {len(body) * 20}\r\n", length=False) + body, 200, len(body))
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            ex["aborted"] = True
            return None
        raw = {
            "raw-no-colon": head("200 OK", body, "This header line has no colon\r\n") + body,
            "raw-bad-status": head("2OO OK", body) + body,
            "raw-two-lengths": head("200 OK", body, f"Content-Length: {len(body) + 10}\r\n") + body,
            "raw-huge-header": head("200 OK", body, "X-Filler: " + "a" * 200_000 + "\r\n") + body,
            "raw-lf-only": head("200 OK", body).replace(b"\r\n", b"\n") + body,
            "raw-http09": body,
            "raw-bad-chunk": head("200 OK", b"", "Transfer-Encoding: chunked\r\n", length=False) + b"zz\r\nhello\r\n0\r\n\r\n",
            "raw-short-body": head("200 OK", b"", "Content-Length: 1000\r\n", length=False) + body[:100],
            "raw-nul-header": head("200 OK", body, "X-Bad: a\x00b\r\n") + body,
        }
        if b in raw:
            return await out(raw[b], 0 if b == "raw-http09" else 200, len(body))
        body = render.small("not found")
        return await out(head("404 Not Found", body) + body, 404, len(body))


def _http_date(value: str | None) -> float | None:
    """Epoch seconds of an HTTP-date, None when absent or unparsable."""
    try:
        return parsedate_to_datetime(value).timestamp() if value else None
    except (TypeError, ValueError):
        return None


_LAST_MODIFIED_AT = _http_date(LAST_MODIFIED)


def _huge_chunks(total: int):
    prefix = b'<!DOCTYPE html><html><body><a href="/chunked">chunked</a>\n'
    block = (b"<p>" + b"huge " * 13000 + b"</p>\n")[: 64 * 1024]
    yield prefix[:total]
    left = total - len(prefix)
    while left > 0:
        yield block[: min(left, len(block))]
        left -= len(block)


# ------------------------------------------------------------------ start-up


def _quiet_gc() -> None:
    """Keep the collector from stopping every host at once.

    This one process stands for hundreds of independent servers, and a full
    collection over the plan and the pages built from it stopped all of them
    together for 80-200 ms (measured with ``gc.callbacks``): every response in
    flight looked slow, and a crawler that adapts its delays to response times
    rightly slowed down for all of them. The plan is frozen out of collections and
    full collections are made rare (young ones still run, and free the short-lived
    cycles of request handling)."""
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1000)


def _raise_nofile(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(need, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def _listen(addr: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind((addr, port))
        s.listen(256)
        s.setblocking(False)
        return s
    except OSError:
        s.close()
        raise


def bind_all(addresses: list[str], port: int | None, attempts: int = 50) -> tuple[int, dict[str, socket.socket]]:
    """One listening socket per address, all on one port (``port`` or a free one)."""
    _raise_nofile(len(addresses) + 4096)
    last: OSError | None = None
    for _ in range(attempts if not port else 1):
        socks: dict[str, socket.socket] = {}
        try:
            first = _listen("127.0.0.1", port or 0)
            socks["127.0.0.1"] = first
            p = first.getsockname()[1]
            for a in addresses:
                if a in socks:
                    continue
                try:
                    socks[a] = _listen(a, p)
                except OSError as e:
                    if a == "::1" and e.errno in (97, 99):  # no IPv6 on this machine
                        continue
                    raise
            return p, socks
        except OSError as e:
            last = e
            for s in socks.values():
                s.close()
    raise OSError(f"could not bind all {len(addresses)} addresses on one port: {last}")


async def serve(n_hosts: int, seed: int, out_dir: Path, port: int | None = None, kinds=None,
                knobs: Knobs | None = None, log_path: Path | None = None, cache_dir: Path | None = None,
                parent_pid: int | None = None, announce=print) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    knobs = knobs or Knobs()
    draft = build_plan(n_hosts, seed, 0, kinds, knobs)
    raw_addrs = {h.address for h in draft.hosts.values() if h.raw}
    addresses = list(BAIT_ADDRESSES) + sorted(draft.addresses())
    port, socks = bind_all(addresses, port)
    plan = build_plan(n_hosts, seed, port, kinds, knobs)
    hosts_file = out_dir / "hosts"
    hosts_file.write_text(plan.hosts_file_text())
    log_path = log_path or out_dir / "requests.jsonl"
    cache_dir = cache_dir or Path(os.environ.get("TMPDIR", "/tmp")) / "deltacrawl-testweb-cache"
    srv = TestWebServer(plan, log_path, cache_dir)
    if srv.live is not None:
        srv.live.write(out_dir / "live.json")
    if knobs.warm:
        for h in plan.hosts.values():
            h.pages  # noqa: B018 - the cached property builds the site now, not on its first request
    _quiet_gc()
    loop = asyncio.get_running_loop()
    if "hostile-bombs.test" in plan.hosts:  # built in a thread so start-up does not wait (cached on disk)
        srv.bombs = loop.run_in_executor(None, build_bombs, cache_dir, knobs.bomb_bytes)
    app_server = web.Server(srv.handle, handler_cancellation=True, max_line_size=65536, max_field_size=65536)
    runner = web.ServerRunner(app_server, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    raw_servers = []
    for addr, s in socks.items():
        if addr in raw_addrs:
            raw_servers.append(await asyncio.start_server(srv.raw_client, sock=s, limit=65536))
        else:
            await web.SockSite(runner, s).start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    info = {"port": port, "hosts_file": str(hosts_file), "log": str(log_path), "pid": os.getpid(),
            "addresses": len(socks), "hosts": len(plan.hosts),
            "live": str(out_dir / "live.json") if srv.live is not None else None}
    tmp = out_dir / "ready.json.tmp"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, out_dir / "ready.json")
    announce(f"port {port}\nhosts_file {hosts_file}\nlog {log_path}\npid {os.getpid()}", flush=True)
    deadline = time.monotonic() + knobs.max_lifetime_s
    while not stop.is_set() and time.monotonic() < deadline:
        if parent_pid and os.getppid() != parent_pid:
            break
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    for r in raw_servers:
        r.close()
    await runner.cleanup()
    srv.log.close()
