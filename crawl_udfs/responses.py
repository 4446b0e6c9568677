"""What the fetch task reads off one :class:`~crawl_udfs.fetcher.FetchResponse`: plain functions.

Guarantees: pure (no clock of their own: ``now`` is passed), no I/O. The server's
response time for the politeness delay is its time to first byte, and a time that
may be mostly the task's own stall is not learnt from; Retry-After is read as
RFC 9110 §10.2.3 defines it; header text is made safe for Arrow.
"""

from __future__ import annotations

import email.utils

from crawl_udfs.fetcher import FetchResponse

#: Failures that happen before a request reaches the server: not counted as requests sent.
NOT_SENT = frozenset({"connect", "dns", "ssrf_blocked", "timeout_connect", "bad_url", "unsupported_scheme"})

#: HTTP statuses whose Location is a redirect (RFC 9110 §15.4).
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

#: A response time whose possible share of the task's own stall (``FetchResponse.t_own_lag_ms``)
#: is over this many milliseconds and over half the time itself says more about us than about
#: the server: the delay does not learn from it. (A 100 ms garbage collection or a burst of 200
#: connection starts made 20 ms responses look 100-200 ms long; x10, delays of 1-2 s for every
#: host in flight.) Loop turns of a page or two never reach it.
_OWN_LAG_FLOOR_MS = 5.0


def response_time_s(resp: FetchResponse) -> float | None:
    """The server's response time for the politeness delay: time to first byte off the socket.

    None (nothing to learn) when that time may be mostly the task's own stall. Falls back to
    the time ``fetch()`` took to see the headers, then to the whole request, when the finer
    measure is missing (e.g. a failure before any response).
    """
    if resp.t_server_ms is not None:
        lag = resp.t_own_lag_ms or 0.0
        if lag > _OWN_LAG_FLOOR_MS and lag > resp.t_server_ms / 2:
            return None
        return resp.t_server_ms / 1000.0
    return (resp.t_first_byte_ms or resp.t_total_ms or 0.0) / 1000.0


def clean(value: str) -> str:
    """Header text safe for Arrow/Parquet: undecodable bytes (kept as surrogates) become U+FFFD."""
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def header(headers: list[tuple[str, str]], name: str) -> str | None:
    """The first value of header ``name`` (lower-case), or None."""
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def retry_after(value: str | None, now: float) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now)
