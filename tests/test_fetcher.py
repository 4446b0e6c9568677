"""The bounded, guarded HTTP fetcher (crawl_udfs.fetcher) against servers on loopback only.

Names resolve through a temporary hosts file; the system resolver is replaced
by one that always fails, so no test sends DNS or any other traffic off 127/8.
"""

import asyncio
import contextlib
import functools
import gzip
import random
import socket
import struct
import time
import tracemalloc
import zlib
from collections import Counter
from types import SimpleNamespace

import brotli
import pytest
from aiohttp import web

from crawl_udfs import config
from crawl_udfs.fetcher import Fetcher

PAYLOAD = b"<html><body>" + "café <a href='/x'>link</a> ".encode() * 2000 + b"</body></html>"
NOISE = random.Random(7).randbytes(200_000)  # incompressible: its gzip spans many decoder steps
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"
MB = 1 << 20


async def no_dns(name):
    raise socket.gaierror(socket.EAI_NONAME, f"{name}: Name or service not known")


@functools.cache
def gzip_bomb_blocks():
    """(head, body block, tail) of a gzip stream of 1 GiB of zeros, ~1 MiB compressed.

    After a full flush the compressor's state repeats, so one 1 MiB block of zeros
    compresses to the same bytes every time: head + block * 1023 + tail is the
    whole stream without compressing 1 GiB.
    """
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zero = bytes(MB)
    head = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    assert block == c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    return head, block


def gzip_bomb_stream():
    head, block = gzip_bomb_blocks()
    yield head
    for _ in range(1023 // 64):
        yield block * 64
    yield block * (1023 % 64)
    crc = 0
    for _ in range(1024):
        crc = zlib.crc32(bytes(MB), crc)
    yield b"\x03\x00" + struct.pack("<II", crc, (1 << 30) & 0xFFFFFFFF)  # empty final block + trailer


def test_gzip_bomb_construction_is_valid():
    head, block = gzip_bomb_blocks()
    d = zlib.decompressobj(31)
    assert d.decompress(head + block * 3, 5 * MB) == bytes(4 * MB)
    assert len(head) < 2048 and len(block) < 2048


def _encoded():
    z = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw_deflate = z.compress(PAYLOAD) + z.flush()
    half = len(PAYLOAD) // 2
    return {
        "gzip": ("gzip", gzip.compress(PAYLOAD)),
        "x-gzip": ("x-gzip", gzip.compress(PAYLOAD)),
        "gzip-multi": ("gzip", gzip.compress(PAYLOAD[:half]) + gzip.compress(PAYLOAD[half:])),
        "deflate-zlib": ("deflate", zlib.compress(PAYLOAD)),
        "deflate-raw": ("deflate", raw_deflate),
        "br": ("br", brotli.compress(PAYLOAD)),
        "identity": ("identity", PAYLOAD),
    }


async def _stream(request, chunks, **headers):
    resp = web.StreamResponse(headers=headers)
    await resp.prepare(request)
    for chunk in chunks:
        await resp.write(chunk)
    await resp.write_eof()
    return resp


def _app(state):
    encoded = _encoded()

    async def count(request, handler):
        state.hits[request.path] += 1
        state.seen[request.path] = list(request.raw_headers)
        return await handler(request)

    app = web.Application(middlewares=[web.middleware(count)])

    async def plain(request):
        return web.Response(body=b"hello world", content_type="text/plain")

    async def enc(request):
        coding, body = encoded[request.match_info["name"]]
        return web.Response(body=body, headers={"Content-Encoding": coding, "Content-Type": "text/html"})

    async def mislabelled(request):
        return web.Response(body=PAYLOAD, headers={"Content-Encoding": "gzip"})

    async def unknown(request):
        return web.Response(body=b"\x28\xb5\x2f\xfd opaque", headers={"Content-Encoding": "zstd"})

    async def corrupt(request):
        c = zlib.compressobj(6, zlib.DEFLATED, 31)  # valid gzip up to a byte-aligned flush, then
        good = c.compress(NOISE) + c.flush(zlib.Z_FULL_FLUSH)  # a block of reserved type 3
        return web.Response(body=good + b"\x07" + b"\xff" * 5000, headers={"Content-Encoding": "gzip"})

    async def short_gzip(request):
        good = gzip.compress(PAYLOAD)
        return web.Response(body=good[:-100], headers={"Content-Encoding": "gzip"})

    async def gz_bomb(request):
        return await _stream(request, gzip_bomb_stream(), **{"Content-Encoding": "gzip"})

    async def br_bomb(request):
        return await _stream(request, [state.br_bomb], **{"Content-Encoding": "br"})

    async def huge(request):
        return await _stream(request, (bytes([65 + i % 26]) * 65536 for i in range(800)))

    async def drip(request):
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(600):
            await resp.write(b"x")
            await asyncio.sleep(0.05)
        return resp

    async def slow_headers(request):
        await asyncio.sleep(30)
        return web.Response(text="late")

    async def late(request):
        await asyncio.sleep(0.15)
        return web.Response(text="late")

    async def cond(request):
        if request.headers.get("If-None-Match") == '"v1"' and request.headers.get("If-Modified-Since") == LAST_MODIFIED:
            return web.Response(status=304, headers={"ETag": '"v1"'})
        return web.Response(text="fresh", headers={"ETag": '"v1"', "Last-Modified": LAST_MODIFIED})

    async def redirect(request):
        return web.Response(status=301, headers={"Location": "/plain"})

    async def robots(request):
        return web.Response(body=b"User-agent: *\nDisallow: /private\n" * 30000, content_type="text/plain")

    app.router.add_get("/plain", plain)
    app.router.add_get("/late", late)
    app.router.add_get("/enc/{name}", enc)
    app.router.add_get("/mislabelled", mislabelled)
    app.router.add_get("/unknown", unknown)
    app.router.add_get("/corrupt", corrupt)
    app.router.add_get("/short-gzip", short_gzip)
    app.router.add_get("/gzip-bomb", gz_bomb)
    app.router.add_get("/br-bomb", br_bomb)
    app.router.add_get("/huge", huge)
    app.router.add_get("/drip", drip)
    app.router.add_get("/slow-headers", slow_headers)
    app.router.add_get("/cond", cond)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/robots.txt", robots)
    return app


async def _raw_handler(state, reader, writer):
    """Answers that an HTTP framework would not send: cut bodies, huge headers, garbage."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        state.raw_requests.append(head)
        path = head.split(b" ", 2)[1]
        if path == b"/cut":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"y" * 1000)
        elif path == b"/big-header":
            writer.write(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 20000 + b"\r\nContent-Length: 2\r\n\r\nok")
        elif path == b"/garbage":
            writer.write(b"SPDY/9 what?\r\n\r\n")
        elif path == b"/echo":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\necho")
        await writer.drain()
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def serve(tmp_path):
    """The test web: an app on 127.0.0.1:P, a connection counter on 127.0.0.2:P, a raw server."""
    state = SimpleNamespace(hits=Counter(), seen={}, raw_requests=[], evil_connections=0,
                            br_bomb=_br_bomb())

    def evil(reader, writer):
        state.evil_connections += 1
        writer.close()

    runner = web.AppRunner(_app(state), handler_cancellation=True)
    await runner.setup()
    for _ in range(20):  # find a port free on both 127.0.0.1 and 127.0.0.2
        evil_server = await asyncio.start_server(evil, "127.0.0.2", 0)
        port = evil_server.sockets[0].getsockname()[1]
        try:
            await web.TCPSite(runner, "127.0.0.1", port).start()
            break
        except OSError:
            evil_server.close()
    raw_server = await asyncio.start_server(functools.partial(_raw_handler, state), "127.0.0.1", 0)
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 site.test raw.test\n127.0.0.2 evil.test\n"
                     "127.0.0.2 mixed.test\n127.0.0.1 mixed.test\n")
    state.port, state.raw_port = port, raw_server.sockets[0].getsockname()[1]
    state.base, state.raw = f"http://site.test:{port}", f"http://raw.test:{state.raw_port}"

    def conf(**kw):
        return config.defaults().with_overrides(
            net__hosts_file=str(hosts), net__allow_private_cidrs=["127.0.0.1/32"], **kw)

    state.conf = conf
    try:
        yield state
    finally:
        raw_server.close()
        evil_server.close()
        await runner.cleanup()


@functools.cache
def _br_bomb():
    c = brotli.Compressor(quality=1)
    return b"".join(c.process(bytes(MB)) for _ in range(256)) + c.finish()


def run_with(tmp_path, body, **conf_overrides):
    """Run ``body(fetcher, state)`` inside a fresh event loop with the test web up."""
    async def main():
        async with serve(tmp_path) as state:
            async with Fetcher(state.conf(**conf_overrides), wall_clock=lambda: 1_700_000_000.0006,
                               dns_lookup=no_dns) as f:
                return await body(f, state)

    return asyncio.run(main())


def test_plain_200_and_request_recorded_exactly(tmp_path):
    async def body(f, s):
        r = await f.fetch(f"{s.base}/plain?q=1")
        e = await f.fetch(f"{s.raw}/echo", etag='"abc"', last_modified=LAST_MODIFIED)
        return r, e, s

    r, e, s = run_with(tmp_path, body, fetch__accept_language="en;q=0.8")
    assert (r.status, r.reason, r.http_version, r.body) == (200, "OK", "1.1", b"hello world")
    assert r.error_class is None and r.truncated is None and r.decoded
    assert r.ip == "127.0.0.1" and r.wire_bytes == 11
    assert r.started_at == 1_700_000_000.001  # the wall clock's time in whole milliseconds (WARC-Date's)
    assert 0 <= r.t_first_byte_ms <= r.t_total_ms < 5000
    assert ("Content-Type", "text/plain") in r.headers and ("Content-Length", "11") in r.headers
    assert r.request_target == "/plain?q=1"
    conf = config.defaults()
    assert r.request_headers == [
        ("Host", f"site.test:{s.port}"), ("User-Agent", conf.crawler.user_agent),
        ("Accept", conf.fetch.accept), ("Accept-Encoding", "gzip, deflate, br"), ("Accept-Language", "en;q=0.8")]
    server_saw = [(k.decode(), v.decode()) for k, v in s.seen["/plain"]]
    assert server_saw == r.request_headers
    # byte-exact: the request head rebuilt from the record is what the server read
    rebuilt = f"GET {e.request_target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in e.request_headers) + "\r\n"
    assert s.raw_requests == [rebuilt.encode()]
    assert ("If-None-Match", '"abc"') in e.request_headers
    assert ("If-Modified-Since", LAST_MODIFIED) in e.request_headers
    assert e.status == 200 and e.body == b"echo"


def test_server_time_excludes_event_loop_lag(tmp_path):
    """t_server_ms runs from the request's write to the first bytes read off the socket: a busy
    event loop delays when fetch() sees the response (t_first_byte_ms) but not that."""
    hog_s = 0.06

    async def body(f, s):
        quiet = await f.fetch(f"{s.base}/late")
        stop = asyncio.Event()

        async def hog():  # another task's CPU work: blocks the loop once per iteration
            while not stop.is_set():
                time.sleep(hog_s)
                await asyncio.sleep(0)

        task = asyncio.ensure_future(hog())
        busy = await f.fetch(f"{s.base}/late")
        stop.set()
        await task
        return quiet, busy

    quiet, busy = run_with(tmp_path, body)
    for r in (quiet, busy):
        assert r.status == 200 and r.body == b"late"
        assert 140 <= r.t_server_ms <= r.t_first_byte_ms <= r.t_total_ms
    assert quiet.t_first_byte_ms - quiet.t_server_ms < 50
    # the response is read in one loop iteration; the coroutine resumes only after the next hog
    assert busy.t_first_byte_ms - busy.t_server_ms >= 0.8 * hog_s * 1000


@pytest.mark.parametrize("name", ["gzip", "x-gzip", "gzip-multi", "deflate-zlib", "deflate-raw", "br", "identity"])
def test_content_encodings_decoded(tmp_path, name):
    async def body(f, s):
        return await f.fetch(f"{s.base}/enc/{name}")

    r = run_with(tmp_path, body)
    assert r.status == 200 and r.error_class is None and r.truncated is None
    assert r.body == PAYLOAD and r.decoded and r.error_message is None
    assert r.wire_bytes == len(_encoded()[name][1])
    if name != "identity":
        assert r.wire_bytes < len(PAYLOAD) / 5
    assert dict(r.headers)["Content-Encoding"] == _encoded()[name][0]


def test_unknown_mislabelled_and_corrupt_encodings(tmp_path):
    async def body(f, s):
        return [await f.fetch(f"{s.base}/{p}") for p in ("unknown", "mislabelled", "corrupt", "short-gzip")]

    unknown, mislabelled, corrupt, short = run_with(tmp_path, body)
    assert unknown.body == b"\x28\xb5\x2f\xfd opaque" and not unknown.decoded and unknown.truncated is None
    assert "zstd" in unknown.error_message and unknown.error_class is None
    assert mislabelled.body == PAYLOAD and not mislabelled.decoded and mislabelled.truncated is None
    assert "stored as received" in mislabelled.error_message
    assert corrupt.decoded and corrupt.truncated == "unspecified" and "gzip decoding failed" in corrupt.error_message
    assert corrupt.error_class is None and NOISE.startswith(corrupt.body) and len(corrupt.body) > 150_000
    # transfer complete but the gzip stream ends early: what decoded is kept, with a note
    assert short.truncated is None and short.decoded and "ended before" in short.error_message
    assert 0 < len(short.body) < len(PAYLOAD) and PAYLOAD.startswith(short.body)


@pytest.mark.parametrize("path", ["/gzip-bomb", "/br-bomb"])
def test_decompression_bomb_cut_early_with_bounded_memory(tmp_path, path):
    async def body(f, s):
        tracemalloc.start()
        try:
            t = time.monotonic()
            r = await f.fetch(s.base + path)
            return r, time.monotonic() - t, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    floor = MB
    r, elapsed, peak = run_with(tmp_path, body, fetch__compression_check_floor_bytes=floor)
    assert r.status == 200 and r.error_class is None
    assert r.truncated == "length" and r.error_message.startswith("decompression bomb")
    assert floor < len(r.body) <= floor + 65536 and r.body == bytes(len(r.body))
    assert r.wire_bytes < 2 * MB  # stopped long before the 1 GiB / 256 MiB behind it
    assert peak < 48 * MB, peak
    assert elapsed < 10


def test_huge_body_cut_at_cap(tmp_path):
    async def body(f, s):
        r = await f.fetch(f"{s.base}/huge")
        again = await f.fetch(f"{s.base}/plain")  # the cut connection is not reused
        return r, again

    r, again = run_with(tmp_path, body, fetch__max_body_bytes=3 * MB + 5)
    assert r.status == 200 and r.truncated == "length" and r.error_class is None
    assert len(r.body) == 3 * MB + 5 and r.body[:65536] == b"A" * 65536 and r.body[-5:] == b"W" * 5
    assert 3 * MB + 5 <= r.wire_bytes < 4 * MB
    assert again.status == 200 and again.body == b"hello world"


def test_robots_accept_and_cap(tmp_path):
    async def body(f, s):
        return await f.fetch(f"{s.base}/robots.txt", accept_robots=True), s

    r, s = run_with(tmp_path, body)
    conf = config.defaults()
    assert ("Accept", conf.fetch.accept_robots) in r.request_headers
    assert dict((k.decode(), v.decode()) for k, v in s.seen["/robots.txt"])["Accept"] == conf.fetch.accept_robots
    assert len(r.body) == conf.robots.max_body_bytes and r.truncated == "length"


def test_slow_drip_cut_at_total_timeout(tmp_path):
    async def body(f, s):
        return await f.fetch(f"{s.base}/drip")

    r = run_with(tmp_path, body, fetch__total_timeout_s=1.0)
    assert r.status == 200 and r.error_class is None and r.truncated == "time"
    assert 0 < len(r.body) < 600 and set(r.body) == {ord("x")}
    assert 900 <= r.t_total_ms < 6000


def test_slow_headers(tmp_path):
    async def body(f, s):
        first_byte = await f.fetch(f"{s.base}/slow-headers")
        return first_byte

    r = run_with(tmp_path, body, fetch__first_byte_timeout_s=0.3)
    assert r.error_class == "timeout_first_byte" and r.status is None and r.body == b""
    assert 250 <= r.t_total_ms < 5000

    async def body2(f, s):
        return await f.fetch(f"{s.base}/slow-headers")

    r = run_with(tmp_path, body2, fetch__first_byte_timeout_s=20.0, fetch__total_timeout_s=0.4)
    assert r.error_class == "timeout_total" and 350 <= r.t_total_ms < 5000


def test_timeout_connect(tmp_path):
    """A listener with a full accept queue drops SYNs: the connect hangs."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    port = lsock.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=2)
    try:
        async def body(f, s):
            return await f.fetch(f"http://127.0.0.1:{port}/")

        r = run_with(tmp_path, body, fetch__connect_timeout_s=0.3)
        assert r.error_class == "timeout_connect" and r.status is None
        assert 250 <= r.t_total_ms < 5000
    finally:
        filler.close()
        lsock.close()


def test_conditional_get_304(tmp_path):
    async def body(f, s):
        return (await f.fetch(f"{s.base}/cond", etag='"v1"', last_modified=LAST_MODIFIED),
                await f.fetch(f"{s.base}/cond"),
                await f.fetch(f"{s.base}/cond", etag='"v1"\r\nX-Injected: 1'), s)

    hit, miss, injected, s = run_with(tmp_path, body)
    assert hit.status == 304 and hit.body == b"" and hit.error_class is None and hit.truncated is None
    assert ("If-None-Match", '"v1"') in hit.request_headers
    assert ("If-Modified-Since", LAST_MODIFIED) in hit.request_headers
    assert miss.status == 200 and miss.body == b"fresh"
    assert not any(k.startswith("If-") for k, _ in miss.request_headers)
    assert injected.status == 200 and not any(k in ("If-None-Match", "X-Injected") for k, _ in injected.request_headers)
    assert s.hits["/cond"] == 3


def test_redirect_not_followed(tmp_path):
    async def body(f, s):
        return await f.fetch(f"{s.base}/redirect"), s

    r, s = run_with(tmp_path, body)
    assert r.status == 301 and r.error_class is None
    assert ("Location", "/plain") in r.headers
    assert s.hits["/redirect"] == 1 and s.hits["/plain"] == 0


def test_ssrf_blocked_names_and_literals(tmp_path):
    async def body(f, s):
        results = {
            "name": await f.fetch(f"http://evil.test:{s.port}/plain"),
            "literal": await f.fetch(f"http://127.0.0.2:{s.port}/plain"),
            "literal6": await f.fetch(f"http://[::1]:{s.port}/plain"),
            "mapped6": await f.fetch(f"http://[::ffff:127.0.0.2]:{s.port}/plain"),
            "metadata": await f.fetch("http://169.254.169.254/latest/meta-data/"),
            "numeric": await f.fetch(f"http://2130706434:{s.port}/plain"),
            "short": await f.fetch(f"http://127.2:{s.port}/plain"),
            "hex": await f.fetch(f"http://0x7f.0.0.2:{s.port}/plain"),
            "octal": await f.fetch(f"http://0177.0.0.2:{s.port}/plain"),
            "dotted": await f.fetch(f"http://127.0.0.2.:{s.port}/plain"),
            "localhost": await f.fetch(f"http://localhost:{s.port}/plain"),
        }
        # a name with one refused and one allowed address: only the allowed one is used
        results["mixed"] = await f.fetch(f"http://mixed.test:{s.port}/plain")
        return results, s

    results, s = run_with(tmp_path, body)
    for key in ("name", "literal", "literal6", "mapped6", "metadata"):
        r = results[key]
        assert r.error_class == "ssrf_blocked", (key, r.error_class, r.error_message)
        assert r.status is None and r.ip is None
    assert "evil.test" in results["name"].error_message
    for key in ("numeric", "short", "hex", "octal", "dotted"):  # legacy IPv4 spellings are not fetched
        assert results[key].error_class == "bad_url" and results[key].status is None, key
    assert results["localhost"].error_class == "dns"  # not in the hosts file; system DNS is stubbed out
    assert results["mixed"].status == 200 and results["mixed"].ip == "127.0.0.1"
    assert s.evil_connections == 0
    assert s.hits["/plain"] == 1


def test_refuses_to_start_without_identity():
    base = config.defaults()
    for overrides in ({"crawler__agent_name": ""}, {"crawler__agent_name": "bad agent"},
                      {"crawler__agent_name": "bot/1.0"}):
        with pytest.raises(ValueError, match="crawler.agent_name"):
            Fetcher(base.with_overrides(**overrides))
    for ua in ("", "deltacrawl/0.1", "deltacrawl/0.1 (mailto:ops@example.org)",
               "deltacrawl/0.1 (+https://example.org/bot)\r\nX-Evil: 1"):
        with pytest.raises(ValueError, match="crawler.user_agent"):
            Fetcher(base.with_overrides(crawler__user_agent=ua))
    Fetcher(base.with_overrides(crawler__user_agent="x/1 (+http://example.org/bot)"))


def test_network_failures_classified(tmp_path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()

    async def body(f, s):
        return {
            "dns": await f.fetch("http://unknown-host.test/"),
            "connect": await f.fetch(f"http://site.test:{closed_port}/"),
            "cut": await f.fetch(f"{s.raw}/cut"),
            "big": await f.fetch(f"{s.raw}/big-header"),
            "garbage": await f.fetch(f"{s.raw}/garbage"),
            "closed": await f.fetch(f"{s.raw}/close"),
            "scheme": await f.fetch("ftp://site.test/file"),
            "bad": await f.fetch("http:///nohost"),
            "after": await f.fetch(f"{s.base}/plain"),
        }

    r = run_with(tmp_path, body)
    assert r["dns"].error_class == "dns" and "unknown-host.test" in r["dns"].error_message
    assert r["connect"].error_class == "connect"
    cut = r["cut"]
    assert cut.status == 200 and cut.error_class is None and cut.truncated == "disconnect"
    assert cut.body == b"y" * 1000 and cut.wire_bytes == 1000
    assert r["big"].error_class == "too_large_headers"
    assert r["garbage"].error_class == "protocol"
    assert r["closed"].error_class == "disconnect"  # the server read the request, then hung up
    assert r["scheme"].error_class == "unsupported_scheme"
    assert r["bad"].error_class == "bad_url"
    assert r["after"].status == 200
    for key in ("dns", "connect", "big", "garbage", "closed", "scheme", "bad"):
        assert r[key].status is None and r[key].body == b"" and r[key].error_message, key
