"""The connection layer under the fetcher: SSRF-checked sockets and a timed protocol.

Guarantees:
- :class:`GuardedConnector` re-checks every socket address against the
  :class:`~crawl_udfs.dns.AddressGuard` right before ``connect()`` (its socket
  factory), and the peer of every connection handed out, new or reused, before
  the request is written (refused: :class:`~crawl_udfs.dns.AddressBlocked`, which
  the fetcher reports as ``ssrf_blocked``). Checks (1) and (2) of the fetcher's
  four are the fetcher's and the resolver's.
- :class:`TimedHandler` notes when a request is written and when its response's
  first and last bytes are read off the socket, before any coroutine resumes:
  the server's time to first byte. The fetch in progress is told through the
  :data:`PHASE` context variable that ``Fetcher.fetch`` sets.
"""

from __future__ import annotations

import contextvars
import functools
import socket
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

from crawl_udfs.dns import AddressBlocked, AddressGuard

if TYPE_CHECKING:
    from crawl_udfs.event_loop import Poll

#: The fetch in progress in this coroutine (``Fetcher.fetch`` sets it; the connector and protocol read it).
PHASE: contextvars.ContextVar[SimpleNamespace] = contextvars.ContextVar("deltacrawl_fetch_phase")


class GuardedConnector(aiohttp.TCPConnector):
    """A TCPConnector whose sockets and connections are checked against the SSRF guard."""

    def __init__(self, guard: AddressGuard, **kwargs: Any):
        self._guard = guard
        super().__init__(socket_factory=self._socket, **kwargs)
        # aiohttp's protocol factory (private, like the fetcher's _retry_connection; aiohttp is pinned and
        # tests/test_fetcher.py::test_server_time_excludes_event_loop_lag catches a change)
        self._factory = functools.partial(TimedHandler, loop=self._loop)

    def _socket(self, addr_info: tuple) -> socket.socket:
        family, type_, proto, _, address = addr_info
        if not self._guard.check(address[0]):
            raise AddressBlocked(f"refused to connect to {address[0]}")
        return socket.socket(family=family, type=type_, proto=proto)

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:
        conn = await super().connect(req, traces, timeout)
        peer = conn.transport.get_extra_info("peername") if conn.transport is not None else None
        ip = peer[0] if peer else None
        if ip is not None and not self._guard.check(ip):
            conn.close()
            raise AddressBlocked(f"connected peer {ip} is refused")
        phase = PHASE.get(None)
        if phase is not None:
            phase.ip = ip
            phase.proto = conn.protocol
            if phase.proto is not None:
                phase.proto.first_data_at = phase.proto.first_data_poll = None
        return conn


class TimedHandler(ResponseHandler):
    """aiohttp's protocol, noting when bytes first arrive after a request is written.

    ``data_received`` runs as soon as the event loop reads the socket, before any
    coroutine waiting for the response is resumed, so ``first_data_at -
    phase.sent_at`` is the server's time to first byte without the time the
    task's own coroutines take to get round to the response (the politeness
    scheduler's ``response_time_factor`` must react to the server, not to us).
    """

    first_data_at: float | None = None
    first_data_poll: "Poll | None" = None  # the poll that saw the first bytes (loops from new_event_loop)
    last_data_at: float | None = None

    def set_response_params(self, *args: Any, **kwargs: Any) -> None:
        """aiohttp calls this on the connection right before it writes the request: the request is sent.

        From here the first-byte timeout runs (not the connect one) and ``t_server_ms``
        is counted. (aiohttp's request trace hooks would tell the same a few microseconds later,
        at ~10 % of the fetch path's CPU for the signal machinery; measured.)
        """
        super().set_response_params(*args, **kwargs)
        phase = PHASE.get(None)
        if phase is not None and phase.timeout is not None:
            phase.sent_at = now = self._loop.time()
            self.first_data_at = self.first_data_poll = None  # a kept-alive connection carries no unsolicited bytes
            first_byte = now + phase.first_byte_s
            phase.sent, phase.first_byte_binding = True, first_byte < phase.deadline
            phase.timeout.reschedule(min(first_byte, phase.deadline))

    def data_received(self, data: bytes) -> None:
        if data:
            self.last_data_at = now = self._loop.time()
            if self.first_data_at is None:
                self.first_data_at = now
                polls = getattr(self._loop, "polls", None)
                self.first_data_poll = polls.last() if polls is not None else None
        super().data_received(data)
