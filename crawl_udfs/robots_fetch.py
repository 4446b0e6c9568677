"""robots.txt requests as scheduler items: every request of a robots.txt chain is leased like a page.

Guarantees:
- A host's robots.txt request, and each hop of its redirect chain, is a :class:`RobotsFetch`
  item that the :class:`~crawl_udfs.scheduler.PolitenessScheduler` leases **on the host the
  request goes to**, so that host's delay, Crawl-delay, in-flight cap and per-IP cap hold for
  it exactly as for its pages. A hop to a host the task also crawls goes through that host's
  own scheduler entry (``crawl_udfs.partition`` puts it there); a hop to any other host gets
  an entry of its own with the configured delay.
- Hops are bounded by ``fetch.max_redirect_hops`` (RFC 9309 §2.3.1.2: follow at least five).
  Past it, or on a Location that does not normalise or points at the URL itself, or on any
  other 3xx, robots.txt counts as unreachable (status None): the host is disallowed for now.
- :func:`robots_step` is pure: from one hop's response, the next hop or the chain's end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from crawl_udfs.fetcher import FetchResponse
from crawl_udfs.responses import REDIRECT_STATUSES, header


class RobotsFetch:
    """The scheduler item "request ``url``, hop ``hops`` of host ``owner``'s robots.txt"."""

    __slots__ = ("owner", "url", "hops")

    def __init__(self, owner: str, url: str, hops: int = 0):
        self.owner, self.url, self.hops = owner, url, hops

    def __repr__(self) -> str:
        return f"RobotsFetch({self.owner!r}, {self.url!r}, hops={self.hops})"


@dataclass(frozen=True, slots=True)
class RobotsDone:
    """The end of a chain: what robots.txt answered (status None: unreachable)."""

    status: int | None
    body: bytes | None


def robots_step(item: RobotsFetch, resp: FetchResponse, normalize: Callable[[str, str], str | None],
                max_hops: int) -> RobotsFetch | RobotsDone:
    """The next hop of ``item``'s chain, or its end, from the response to ``item``."""
    if resp.error_class is not None or resp.status is None:
        return RobotsDone(None, None)
    status = resp.status
    if not 300 <= status < 400:
        return RobotsDone(status, resp.body)
    location = header(resp.headers, "location")
    if status in REDIRECT_STATUSES and location and item.hops < max_hops:
        target = normalize(location, item.url)
        if target is not None and target != item.url:
            return RobotsFetch(item.owner, target, item.hops + 1)
    return RobotsDone(None, None)
