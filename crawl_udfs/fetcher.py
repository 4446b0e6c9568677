"""One polite, bounded HTTP GET: the network half of the in-task fetch loop.

Guarantees:
- Identified: refuses to start without a valid ``crawler.agent_name`` and a
  ``crawler.user_agent`` carrying an http(s) contact URL; every request sends
  that User-Agent. Headers are recorded exactly as sent (for the WARC request
  record): aiohttp adds nothing but ``Host`` because every other default header
  is set here, and the recorded list is the request's own header list.
- Bounded: ``fetch.connect_timeout_s`` for the TCP/TLS connect (per attempt
  over all addresses), ``fetch.first_byte_timeout_s`` from sending the request
  to the response headers, ``fetch.total_timeout_s`` for the whole request; on
  expiry mid-body what was read is kept (``truncated="time"``). The body is
  streamed and decoded incrementally (gzip incl. multi-member, deflate as zlib
  or raw, br, identity), never more than ``fetch.max_body_bytes`` decoded or
  wire bytes held (cut: ``truncated="length"``; the connection of a cut body
  is closed before ``fetch()`` returns), and a compressed body whose
  decoded/wire ratio exceeds ``fetch.max_compression_ratio`` once past
  ``fetch.compression_check_floor_bytes`` decoded is cut the same way with
  ``error_message`` starting "decompression bomb" (the response is still a
  response: ``error_class`` stays None). Decoders emit at most 64 KiB per step,
  so memory stays bounded however small the compressed input. A drop mid-body
  keeps what was read (``truncated="disconnect"``); a corrupt compressed stream
  keeps the decoded prefix (``truncated="unspecified"``, the WARC 1.1 value),
  or, when nothing decoded at all, the body as received (``decoded=False``),
  as does an unknown or stacked Content-Encoding. ``accept_robots=True`` sends
  ``fetch.accept_robots`` and caps the body at ``robots.max_body_bytes`` too.
- Safe (SSRF): four checks of :class:`crawl_udfs.dns.AddressGuard`, and no
  request ever leaves for a refused address: (1) IP-literal hosts are checked
  here before anything else (aiohttp skips the resolver for them); (2) names go
  through :class:`crawl_udfs.dns.CachingResolver`, which hands aiohttp only
  approved addresses, and aiohttp connects to exactly those, so DNS rebinding
  between check and connect is impossible by construction; (3) the connector's
  socket factory re-checks every socket address right before ``connect()``;
  (4) every connection handed out, new or reused, has its transport's peer
  address checked once more before the request is written (a refusal there,
  which (1)-(3) make impossible, is ``ssrf_blocked``); that peer is ``ip``.
- Timed: ``t_first_byte_ms`` and ``t_total_ms`` run from the start of
  ``fetch()`` as the caller's coroutine sees them (event-loop lag included);
  ``t_server_ms`` runs from the request's write to the first response bytes
  read off the socket, before any waiting coroutine resumes: the server's
  time to first byte, which the politeness delay multiplies. It is an upper
  bound: on a loop made by :func:`crawl_udfs.event_loop.new_event_loop`,
  ``t_own_lag_ms`` says how much of it may be the task's own stall (a burst
  of callbacks, a garbage collection) rather than the server (0 when the loop
  was polling when the bytes came, None on another loop). ``last_bytes_at``
  (a body read to its end only) is when the loop read the response's last
  bytes (the fetch task's ``politeness.end_margin_s`` counts from there).
- Nothing else: no redirects followed (the loop records Location), no cookies
  kept, no proxy or netrc from the environment, only http and https.
  ``fetch()`` never raises for network or HTTP trouble; it returns an
  ``error_class``. Cancellation (the task's budget) still propagates.
- Build the :class:`Fetcher` inside the task's event loop (``async with``); the
  session, connector and DNS cache are closed on exit whatever happened.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import aiohttp
from aiohttp import client_exceptions as cx
from aiohttp.http_exceptions import LineTooLong
from yarl import URL

from crawl_udfs.config import Config
from crawl_udfs.connection import PHASE, GuardedConnector
from crawl_udfs.decoding import ACCEPT_ENCODING, Body
from crawl_udfs.dns import (AddressBlocked, AddressGuard, CachingResolver, DnsCache, DnsError, SystemLookup,
                            parse_ip, system_lookup)

_AGENT_RE = re.compile(r"[A-Za-z_-]+")  # RFC 9309 §2.2.1 product token
_CONTACT_RE = re.compile(r"https?://[^\s()<>;,]+")


@dataclass
class FetchResponse:
    url: str
    status: int | None
    reason: str | None
    http_version: str | None                 # "1.1"
    headers: list[tuple[str, str]]           # raw response headers in order (UTF-8, surrogateescape)
    body: bytes                              # decoded body (unless decoded is False), capped
    wire_bytes: int                          # body bytes read from the wire (after de-chunking)
    truncated: str | None                    # "length" | "time" | "disconnect" | "unspecified" | None
    ip: str | None                           # address actually connected to
    request_target: str                      # e.g. "/a?b=1", as sent
    request_headers: list[tuple[str, str]]   # exactly as sent, in order, Host first
    started_at: float                        # epoch seconds, from the injected wall clock, whole milliseconds
    t_first_byte_ms: float | None            # fetch() start -> response headers, as the caller saw it
    t_total_ms: float | None
    error_class: str | None                  # None on any HTTP response, else see _classify
    error_message: str | None                # also carries notes on responses (bomb, encoding)
    decoded: bool = True                     # False: body kept as received (unknown/corrupt encoding)
    t_server_ms: float | None = None         # request written -> first response bytes read off the socket
    t_own_lag_ms: float | None = None        # how much of t_server_ms may be our loop's own stall (see module doc)
    last_bytes_at: float | None = None       # event-loop time (loop.time()) the last response bytes were read


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = getattr(exc, "os_error", None) or exc.__cause__ or exc.__context__


def _classify(exc: BaseException, phase: SimpleNamespace) -> str:
    """The error_class of an exception raised before any response arrived."""
    chain = list(_chain(exc))
    if any(isinstance(e, AddressBlocked) for e in chain):
        return "ssrf_blocked"
    if isinstance(exc, cx.ConnectionTimeoutError):
        return "timeout_connect"
    if isinstance(exc, TimeoutError):
        if not phase.sent:
            return "timeout_connect"
        return "timeout_first_byte" if phase.first_byte_binding else "timeout_total"
    if isinstance(exc, cx.ClientConnectorDNSError):
        return "dns"
    if isinstance(exc, (cx.ClientConnectorCertificateError, cx.ClientSSLError, cx.ClientConnectorSSLError)):
        return "tls"
    if any(isinstance(e, LineTooLong) for e in chain) or "too long" in str(exc).lower():
        return "too_large_headers"
    if isinstance(exc, cx.NonHttpUrlClientError):
        return "unsupported_scheme"
    if isinstance(exc, (cx.InvalidURL, ValueError)):
        return "bad_url"
    if isinstance(exc, cx.ClientResponseError):
        return "protocol"
    if isinstance(exc, (cx.ClientConnectionError, OSError)):
        # After the request went out, a dropped connection is the server's doing
        # (it saw the request): "disconnect". Before that, we never reached it.
        return "disconnect" if phase.sent else "connect"
    return "other"


def _message(exc: BaseException) -> str:
    for e in _chain(exc):
        if isinstance(e, (AddressBlocked, DnsError)):
            return f"{type(e).__name__}: {e}"
    return f"{type(exc).__name__}: {exc}"


def _header_str(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


class Fetcher:
    """Polite, bounded GETs over one aiohttp session; an async context manager."""

    def __init__(self, conf: Config, *, wall_clock: Callable[[], float] = time.time,
                 dns_lookup: SystemLookup = system_lookup):
        """``dns_lookup`` is the system resolver behind the hosts file; tests inject one."""
        agent, ua = conf.crawler.agent_name, conf.crawler.user_agent
        if not isinstance(agent, str) or not _AGENT_RE.fullmatch(agent):
            raise ValueError(f"crawler.agent_name must be a product token (letters, '-', '_'), got {agent!r}")
        if not ua or not _CONTACT_RE.search(ua) or any(ord(c) < 32 or ord(c) == 127 for c in ua):
            raise ValueError(f"crawler.user_agent must name the crawler and carry an http(s) contact URL, got {ua!r}")
        self._conf = conf
        self._f = conf.fetch
        self._wall = wall_clock
        self._dns_lookup = dns_lookup
        self._guard = AddressGuard(conf.net.allow_private_cidrs)
        self._session: aiohttp.ClientSession | None = None
        self._resolver: CachingResolver | None = None
        self._hosts: dict[str, tuple[Any, bool]] = {}  # host -> (IP literal or None, non-canonical IPv4)

    async def __aenter__(self) -> "Fetcher":
        cache = DnsCache(self._f, self._conf.net, lookup=self._dns_lookup)
        self._resolver = CachingResolver(cache, self._guard)
        # aiohttp silently resends an idempotent request once when a kept-alive
        # connection drops (RFC 9112 §9.3.1 allows it). For a crawler that is a
        # second request to the host with no delay: a politeness violation the
        # server counts. There is no public switch, so the private one is turned
        # off (aiohttp is pinned; tests/test_partition.py catches a change); a
        # future aiohttp without it gives up keep-alive rather than politeness.
        can_stop_resend = "_retry_connection" in getattr(aiohttp.ClientSession, "ATTRS", ())
        connector = GuardedConnector(
            self._guard, resolver=self._resolver, limit=self._f.max_concurrency, limit_per_host=0,
            ttl_dns_cache=None, use_dns_cache=False, enable_cleanup_closed=True, force_close=not can_stop_resend,
        )
        self._session = aiohttp.ClientSession(  # the task's one session
            connector=connector, auto_decompress=False, trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._f.connect_timeout_s),
        )
        if can_stop_resend:
            self._session._retry_connection = False
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            if self._session is not None:
                await self._session.close()
        finally:
            if self._resolver is not None:
                await self._resolver.close()
            self._session = self._resolver = None

    async def resolve(self, host: str) -> tuple[str | None, str | None]:
        """(first guard-approved address, None) or (None, "dns" | "ssrf_blocked").

        Used by the fetch loop to learn a host's IP before its first request, so
        the per-IP cap holds from the start; goes through the same cache and guard
        as the connections themselves.
        """
        assert self._resolver is not None, "use Fetcher as an async context manager"
        return await self._resolver.first_address(host)

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None,
                    accept_robots: bool = False, max_body_bytes: int | None = None) -> FetchResponse:
        """GET ``url`` once; never raises for network or HTTP trouble. ``max_body_bytes``: the body cap
        instead of ``fetch.max_body_bytes`` (a sitemap's: ``sitemaps.max_bytes``)."""
        assert self._session is not None, "use Fetcher inside 'async with'"
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        # Whole milliseconds: WARC-Date, fetch_log and the exported index then hold one same instant.
        r = FetchResponse(url, None, None, None, [], b"", 0, None, None, "", [], round(self._wall(), 3),
                          None, None, None, None)

        def fail(cls: str, msg: str) -> FetchResponse:
            r.error_class, r.error_message = cls, msg
            r.t_total_ms = (loop.time() - t0) * 1000
            return r

        try:
            u = URL(url)
            host = u.raw_host
        except (ValueError, TypeError) as e:
            return fail("bad_url", f"{url!r}: {e}")
        if u.scheme not in ("http", "https"):
            return fail("unsupported_scheme", f"scheme {u.scheme!r} is not fetched")
        if not host or not u.is_absolute():
            return fail("bad_url", f"{url!r}: no host")
        known = self._hosts.get(host)
        if known is None:
            literal = parse_ip(host)
            odd = literal is None and re.fullmatch(r"[0-9a-fA-FxX.]+", host) is not None and _inet_aton_ok(host)
            known = self._hosts[host] = (literal, odd)
        literal, odd = known
        if odd:
            return fail("bad_url", f"{host!r} is a non-canonical IPv4 address")
        if literal is not None and not self._guard.check(literal):
            return fail("ssrf_blocked", f"refused to connect to {literal}")

        headers = [("User-Agent", self._conf.crawler.user_agent),
                   ("Accept", self._f.accept_robots if accept_robots else self._f.accept),
                   ("Accept-Encoding", ACCEPT_ENCODING)]
        if self._f.accept_language:
            headers.append(("Accept-Language", self._f.accept_language))
        if etag and etag.isprintable():  # a stored value with CR/LF would be header injection
            headers.append(("If-None-Match", etag))
        if last_modified and last_modified.isprintable():
            headers.append(("If-Modified-Since", last_modified))
        r.request_target = u.raw_path_qs
        r.request_headers = [("Host", u.host_port_subcomponent or host)] + headers

        deadline = t0 + self._f.total_timeout_s
        phase = SimpleNamespace(sent=False, first_byte_binding=False, deadline=deadline, timeout=None, ip=None,
                                proto=None, sent_at=None, first_byte_s=self._f.first_byte_timeout_s)
        token = PHASE.set(phase)
        try:
            async with asyncio.timeout_at(deadline) as phase.timeout:
                resp = await self._session.get(u, headers=headers, allow_redirects=False)
        except Exception as e:  # network trouble: classified, never raised
            return fail(_classify(e, phase), _message(e))
        finally:
            PHASE.reset(token)
        phase.timeout = None

        r.t_first_byte_ms = (loop.time() - t0) * 1000
        first_data_at = getattr(phase.proto, "first_data_at", None)
        if first_data_at is not None and phase.sent_at is not None:
            r.t_server_ms = max(0.0, first_data_at - phase.sent_at) * 1000
            seen = phase.proto.first_data_poll
            if seen is not None:
                r.t_own_lag_ms = seen.own_lag_s(phase.sent_at, first_data_at) * 1000
        r.request_headers = [(k, v) for k, v in resp.request_info.headers.items()]
        r.ip = phase.ip
        r.status, r.reason = resp.status, resp.reason
        r.http_version = f"{resp.version.major}.{resp.version.minor}" if resp.version else None
        r.headers = [(_header_str(k), _header_str(v)) for k, v in resp.raw_headers]
        cap = max_body_bytes or self._f.max_body_bytes
        if accept_robots:
            cap = min(cap, self._conf.robots.max_body_bytes)
        try:
            await self._read_body(resp, r, cap, deadline)
        finally:
            if r.truncated is None:
                resp.release()
            else:
                resp.close()
        if r.truncated is not None:
            # asyncio closes the socket on the loop's next turn: return (and let the host's
            # delay start) only then, since until then the server may go on sending.
            await asyncio.sleep(0)
        r.t_total_ms = (loop.time() - t0) * 1000
        if r.truncated is None and phase.proto is not None:
            r.last_bytes_at = phase.proto.last_data_at
        return r

    async def _read_body(self, resp: aiohttp.ClientResponse, r: FetchResponse, cap: int, deadline: float) -> None:
        body = Body(resp.headers.getall("Content-Encoding", []), cap,
                     self._f.max_compression_ratio, self._f.compression_check_floor_bytes)
        note = None
        try:
            async with asyncio.timeout_at(deadline):
                while body.truncated is None:
                    chunk = await resp.content.readany()
                    if not chunk:
                        break
                    r.wire_bytes += len(chunk)
                    body.feed(chunk)
        except TimeoutError:
            body.truncated = "time"
        except (cx.ClientPayloadError, cx.ClientConnectionError, OSError) as e:
            body.truncated, note = "disconnect", f"{type(e).__name__}: {e}"
        except Exception as e:  # never raise for what a server sends
            body.truncated, note = "unspecified", f"{type(e).__name__}: {e}"
        if body.truncated is None and body.dec.encoding != "identity" and not body.dec.done:
            body.note = f"{body.dec.encoding} stream ended before its end marker; decoded part kept"
        r.body, r.truncated, r.decoded = bytes(body.buf), body.truncated, body.decoded
        r.error_message = "; ".join(n for n in (body.note, note) if n) or None


def _inet_aton_ok(host: str) -> bool:
    try:
        socket.inet_aton(host)
        return True
    except OSError:
        return False
