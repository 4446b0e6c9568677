"""One host's state inside a fetch task's :class:`~crawl_udfs.scheduler.PolitenessScheduler`:
its FIFO of items, when it may next be leased, its failures, address and response times, and
where its heap entry lives. The rules that change it are the scheduler's; this module only
holds the record and the read-only snapshot callers see (:class:`HostPoliteness`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HostPoliteness:
    """A snapshot of one host's politeness state (``next_allowed_at`` None = unconstrained)."""

    host: str
    next_allowed_at: float | None
    consecutive_failures: int
    parked: bool
    park_reason: str | None
    crawl_delay: float | None
    ip: str | None
    in_flight: int
    requests: int                      # leases granted in this task
    last_response_time_s: float | None
    queued: int


class HostQueue:
    """One host's queue and politeness state in a fetch task (the scheduler's record; fields
    are the scheduler's to change)."""

    __slots__ = ("name", "queue", "next_allowed", "failures", "parked", "park_reason", "crawl_delay",
                 "ip", "in_flight", "requests", "recent", "last_end", "gen", "where", "held")

    def __init__(self, name: str, window: int):
        self.name = name
        self.queue: deque = deque()
        self.next_allowed = -math.inf
        self.failures = 0
        self.parked = False
        self.park_reason: str | None = None
        self.crawl_delay: float | None = None
        self.ip: str | None = None
        self.in_flight = 0
        self.requests = 0
        self.recent: deque = deque(maxlen=window)
        self.last_end: float | None = None
        self.gen = 0
        self.where = 0
        self.held = False

    def snapshot(self) -> HostPoliteness:
        return HostPoliteness(
            host=self.name, next_allowed_at=None if self.next_allowed == -math.inf else self.next_allowed,
            consecutive_failures=self.failures, parked=self.parked, park_reason=self.park_reason,
            crawl_delay=self.crawl_delay, ip=self.ip, in_flight=self.in_flight, requests=self.requests,
            last_response_time_s=self.recent[-1] if self.recent else None, queued=len(self.queue))
