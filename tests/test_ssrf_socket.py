"""The fetcher's SSRF checks below the resolver, each reached with the layers above it gone.

``crawl_udfs/fetcher.py`` guards a connection four times (its module docstring):
(1) IP-literal hosts, (2) the resolver hands aiohttp only approved addresses,
(3) the connector's socket factory re-checks every socket address right before
``connect()``, (4) the connected peer is checked before the request is written.
(1) and (2) meet real inputs (``tests/test_fetcher.py`` has literals and
refused names; the DNS-rebinding test here). (3) and (4) are reached only when
the layers above them fail, so each test takes those layers away (a resolver
whose guard is laxer than the fetcher's, a socket factory that checks nothing)
and asserts, on the listening side, that the refused address got no connection
(3) or no byte of a request (4), and which check stopped it.

Everything listens on loopback: 127.0.0.1 is allowed (``net.allow_private_cidrs``),
127.0.0.2 is refused and counts what reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from types import SimpleNamespace

import pytest

from crawl_udfs import config, connection, dns, fetcher
from crawl_udfs.fetcher import Fetcher

ALLOWED, REFUSED = "127.0.0.1", "127.0.0.2"


async def _no_dns(name: str) -> list[str]:
    raise socket.gaierror(socket.EAI_NONAME, f"{name}: Name or service not known")


@contextlib.asynccontextmanager
async def _listeners(tmp_path):
    """An HTTP server on ALLOWED:P (closes every connection) and a recorder on REFUSED:P."""
    state = SimpleNamespace(ok_requests=0, refused_connections=0, refused_bytes=b"", open=0)

    async def ok(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        state.ok_requests += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    async def refused(reader, writer):
        state.refused_connections += 1
        state.open += 1
        try:
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(5):
                    while chunk := await reader.read(65536):  # until the client closes
                        state.refused_bytes += chunk
        finally:
            state.open -= 1
            writer.close()

    for _ in range(20):  # a port free on both addresses
        ok_server = await asyncio.start_server(ok, ALLOWED, 0)
        port = ok_server.sockets[0].getsockname()[1]
        try:
            refused_server = await asyncio.start_server(refused, REFUSED, port)
            break
        except OSError:
            ok_server.close()
    hosts = tmp_path / "hosts"
    hosts.write_text(f"{ALLOWED} site.test\n{REFUSED} evil.test\n")
    state.port, state.hosts = port, hosts
    try:
        yield state
    finally:
        ok_server.close()
        refused_server.close()


async def _settled(state) -> None:
    """Wait until the recorder has seen every connection to its end."""
    for _ in range(200):
        await asyncio.sleep(0.02)
        if state.open == 0:
            return


def _conf(state, *extra: str):
    return config.load(overrides=[f'net.hosts_file="{state.hosts}"', f'net.allow_private_cidrs=["{ALLOWED}/32"]',
                                  *extra])


def _fetch(tmp_path, urls, *, lookup=_no_dns, extra=()):
    """Fetch ``urls`` in order with one Fetcher; (responses, listener state)."""
    async def main():
        async with _listeners(tmp_path) as state:
            async with Fetcher(_conf(state, *extra), dns_lookup=lookup) as f:
                out = []
                for u in urls:
                    out.append(await f.fetch(u.format(port=state.port)))
                    await asyncio.sleep(0.1)
            await _settled(state)
            return out, state

    return asyncio.run(main())


@pytest.fixture
def lax_resolver(monkeypatch):
    """Check (2) gone: the resolver approves every loopback address, whatever the fetcher's guard says."""
    real = fetcher.CachingResolver
    monkeypatch.setattr(fetcher, "CachingResolver",
                        lambda cache, guard: real(cache, dns.AddressGuard(["127.0.0.0/8"])))


@pytest.fixture
def plain_sockets(monkeypatch):
    """Check (3) gone: the connector's socket factory makes any socket."""
    def make(self, addr_info):
        family, type_, proto, _, _ = addr_info
        return socket.socket(family=family, type=type_, proto=proto)

    monkeypatch.setattr(connection.GuardedConnector, "_socket", make)


def test_dns_rebinding_is_refused_by_the_resolver(tmp_path):
    """A name that answers an allowed address, then (its TTL run out) a refused one."""
    answers = [[ALLOWED], [REFUSED]]
    asked = []

    async def rebinding(name: str) -> list[str]:
        asked.append(name)
        return answers[min(len(asked), len(answers)) - 1]

    (first, second), state = _fetch(tmp_path, ["http://rebind.test:{port}/a", "http://rebind.test:{port}/b"],
                                    lookup=rebinding, extra=["fetch.dns_ttl_s=0.05"])
    assert asked == ["rebind.test", "rebind.test"], "the second fetch did not look the name up again"
    assert first.status == 200 and first.ip == ALLOWED and state.ok_requests == 1
    assert second.error_class == "ssrf_blocked" and second.status is None and second.ip is None
    assert "resolves only to refused addresses" in second.error_message, second.error_message
    assert state.refused_connections == 0


def test_socket_factory_refuses_before_connecting(tmp_path, lax_resolver):
    (ok, evil), state = _fetch(tmp_path, ["http://site.test:{port}/", "http://evil.test:{port}/"])
    assert ok.status == 200 and state.ok_requests == 1  # the lax resolver still lets allowed names through
    assert evil.error_class == "ssrf_blocked" and evil.status is None and evil.ip is None
    assert f"refused to connect to {REFUSED}" in evil.error_message, evil.error_message
    assert state.refused_connections == 0, "a socket to the refused address was connected"


def test_connected_peer_is_checked_before_the_request_is_written(tmp_path, lax_resolver, plain_sockets):
    (ok, evil), state = _fetch(tmp_path, ["http://site.test:{port}/", "http://evil.test:{port}/"])
    assert ok.status == 200 and ok.ip == ALLOWED
    assert evil.error_class == "ssrf_blocked" and evil.status is None and evil.ip is None
    assert f"connected peer {REFUSED} is refused" in evil.error_message, evil.error_message
    assert state.refused_connections == 1, "the connection was never made: check (4) was not reached"
    assert state.refused_bytes == b"", f"request bytes reached the refused address: {state.refused_bytes[:80]!r}"
