"""Per-host politeness inside one fetch task: who may be fetched now, and when next.

Guarantees (with the default ``politeness.max_in_flight_per_host = 1``):

- **Never two requests in flight to one host.** :meth:`PolitenessScheduler.lease`
  hands out an item of a host only while that host has fewer than
  ``max_in_flight_per_host`` leases not yet released (with a cap k > 1, up to k
  requests may start together; the delay below then runs from each end).
- **Never a request to a host earlier than delay after the end of the previous
  one.** A lease is granted only when ``clock() >= next_allowed_at``, and each
  :meth:`~PolitenessScheduler.release` (at ``end = clock()``, or the
  ``ended_at`` the caller passes: when it saw the request end) sets
  ``next_allowed_at = max(next_allowed_at, end + delay)`` where::

      delay = max(host_delay_s, robots Crawl-delay,
                  min(response_time_factor * recent, max_response_time_delay_s))
              + back-off
      recent   = the largest of the host's last ``response_time_window`` response times
      back-off = min(backoff_base_s * 2**(n-1), backoff_max_s) after the n-th
                 consecutive failure (error, any 5xx, 429), else 0

  A success (any other status) resets n. A 429 or 503 carrying Retry-After
  also moves ``next_allowed_at`` to at least ``end + retry_after_s``. A Crawl-delay
  learnt while the host waits applies from the last end at once. ``not_before``
  (e.g. ``next_allowed_at`` persisted by the previous round) is a floor too.
  Times are in the injected clock's timebase: persist them only with a wall clock.
- **Never more than ``max_in_flight_per_ip`` in flight to one IP** over the hosts
  that :meth:`~PolitenessScheduler.set_host` gave that ip (a host without ip has
  no per-IP cap; moving a host to another ip moves its in-flight count along).
- **Parking** (reasons ``crawl_delay_too_long``, ``retry_after``, ``failures`` or the
  caller's own via :meth:`~PolitenessScheduler.park`): the host's queued items move to
  :meth:`~PolitenessScheduler.take_deferred` with the reason, and so does any item added
  to it later; nothing of it is leased again in this task. It parks when Crawl-delay
  exceeds ``max_crawl_delay_s``, Retry-After exceeds ``max_retry_after_s``, or the
  failure count reaches ``max_consecutive_failures``.
- **Holding**: a host :meth:`~PolitenessScheduler.hold` was called on keeps its items queued
  but is never leased until :meth:`~PolitenessScheduler.unhold` (the fetch task holds each
  host until its address is known, so the per-IP cap holds from its first request while the
  other hosts are fetched meanwhile).
- **Every item added comes out exactly once**: by lease, take_deferred or drain.
- **Fair and cheap.** Ready hosts are leased in order of ``next_allowed_at`` (ties:
  the host queued first), each host's items FIFO. A host blocked only by its IP's cap
  waits in a per-IP heap, keeping its key, and goes back to the front when a slot of
  that IP frees, so it neither blocks other hosts nor starves. Waiting hosts are never
  scanned: every operation is amortized O(log hosts) (plus one heap move per freed IP slot).

Design: Mercator's back queues with a heap of next-allowed times (Heydon & Najork,
"Mercator: a scalable, extensible web crawler", 1999), the per-host/per-IP queues of
Nutch's ``FetchItemQueues``, Scrapy's download ``Slot``, and Heritrix's delay factor
(delay grows with the last fetch's duration). Unlike those, the clock is injected, so
the rules above are tested exactly and without sleeping. Heap entries are invalidated
lazily by a per-host generation number. Pure, synchronous, no I/O; the caller owns
the event loop and the global concurrency cap.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Iterable

from crawl_udfs.host_queue import HostPoliteness, HostQueue

__all__ = ["HostPoliteness", "PolitenessScheduler"]

_READY, _WAIT = 1, 2  # where a host's live heap entry is: the ready heap or its IP's wait heap


class PolitenessScheduler:
    """Back queues per host plus a min-heap of next-allowed times; see the module docstring."""

    def __init__(self, politeness: Any, *, clock: Callable[[], float]):
        p = politeness
        self._clock = clock
        self._host_delay = float(p.host_delay_s)
        self._host_cap = int(p.max_in_flight_per_host)
        self._ip_cap = int(p.max_in_flight_per_ip)
        self._rt_factor = float(p.response_time_factor)
        self._rt_window = int(p.response_time_window)
        self._rt_max = float(p.max_response_time_delay_s)
        self._max_crawl_delay = float(p.max_crawl_delay_s)
        self._backoff_base = float(p.backoff_base_s)
        self._backoff_max = float(p.backoff_max_s)
        self._max_failures = int(p.max_consecutive_failures)
        self._max_retry_after = float(p.max_retry_after_s)
        if self._host_cap < 1 or self._ip_cap < 1 or self._rt_window < 1:
            raise ValueError("politeness caps and response_time_window must be at least 1")
        self._hosts: dict[str, HostQueue] = {}
        self._ready: list = []                  # (next_allowed, seq, gen, HostQueue)
        self._ip_wait: dict[str, list] = {}     # ip -> heap of the same entries
        self._ip_in_flight: dict[str, int] = {}
        self._deferred: list[tuple[Any, str]] = []
        self._seq = 0
        self._pending = 0
        self._in_flight = 0

    # -- feeding ------------------------------------------------------------------
    def add(self, host: str, item: Any) -> None:
        """Append ``item`` to ``host``'s FIFO (or defer it at once if the host is parked)."""
        self._enqueue(host, item, front=False)

    def add_front(self, host: str, item: Any) -> None:
        """Put ``item`` at the head of ``host``'s FIFO (a robots.txt request, ahead of the pages)."""
        self._enqueue(host, item, front=True)

    def set_host(self, host: str, *, ip: str | None = None, crawl_delay: float | None = None,
                 not_before: float | None = None, consecutive_failures: int | None = None) -> None:
        """Tell what is known of ``host``; None leaves a field as it is."""
        h = self._host(host)
        if consecutive_failures is not None:
            h.failures = int(consecutive_failures)
        if ip is not None and ip != h.ip:
            old, h.ip = h.ip, ip
            if h.in_flight:
                if old is not None:
                    self._ip_add(old, -h.in_flight)
                self._ip_add(ip, h.in_flight)
            if h.where == _WAIT:
                self._schedule(h)
            if old is not None:
                self._refill(old)
        if not_before is not None:
            self._push_back(h, float(not_before))
        if crawl_delay is not None:
            h.crawl_delay = float(crawl_delay)
            if h.crawl_delay > self._max_crawl_delay:
                self.park(host, "crawl_delay_too_long")
            elif h.last_end is not None:
                self._push_back(h, h.last_end + h.crawl_delay)

    def park(self, host: str, reason: str) -> None:
        """Stop fetching ``host`` in this task: its queued and future items go to deferred."""
        h = self._host(host)
        if not h.parked:
            h.parked, h.park_reason = True, reason
        self._deferred.extend((item, h.park_reason) for item in h.queue)
        self._pending -= len(h.queue)
        h.queue.clear()
        self._schedule(h)  # unschedules: a parked host is never eligible

    def hold(self, host: str) -> None:
        """Lease nothing of ``host`` until :meth:`unhold`; its items stay queued (and count as pending)."""
        h = self._host(host)
        if not h.held:
            h.held = True
            self._schedule(h)

    def unhold(self, host: str) -> None:
        """Make ``host`` leasable again (under every other rule) after :meth:`hold`."""
        h = self._host(host)
        if h.held:
            h.held = False
            self._schedule(h)

    # -- the loop -----------------------------------------------------------------
    def lease(self) -> tuple[str, Any] | None:
        """An item of a host allowed now, marked in flight; None if no host is allowed now."""
        now = self._clock()
        ready = self._ready
        while ready and ready[0][0] <= now:
            entry = heapq.heappop(ready)
            h = entry[3]
            if entry[2] != h.gen:
                continue
            h.where = 0
            if h.ip is not None and self._ip_in_flight.get(h.ip, 0) >= self._ip_cap:
                heapq.heappush(self._ip_wait.setdefault(h.ip, []), entry)
                h.where = _WAIT
                continue
            item = h.queue.popleft()
            self._pending -= 1
            h.in_flight += 1
            h.requests += 1
            self._in_flight += 1
            if h.ip is not None:
                self._ip_add(h.ip, 1)
            self._schedule(h)
            return h.name, item
        return None

    def release(self, host: str, *, response_time_s: float | None, status: int | None = None,
                error: bool = False, retry_after_s: float | None = None, ended_at: float | None = None) -> None:
        """End one in-flight request to ``host`` and set when the next may start.

        ``response_time_s`` is the caller's measured time of the request (None when there was
        no response: nothing is remembered); ``error`` means timeout/connect/DNS failure.
        ``ended_at`` is when the request counts as ended, default now: the caller may pass
        when it read the response's last bytes, if that was before this call, plus a margin
        (so it may lie in the future). It must never be before the request really ended.
        Each lease must be released exactly once.
        """
        h = self._hosts.get(host)
        if h is None or h.in_flight == 0:
            raise ValueError(f"release of {host!r} without a lease in flight")
        end = self._clock() if ended_at is None else ended_at
        h.in_flight -= 1
        self._in_flight -= 1
        if h.ip is not None:
            self._ip_add(h.ip, -1)
        h.last_end = end
        if response_time_s is not None:
            h.recent.append(float(response_time_s))
        if error or (status is not None and (status >= 500 or status == 429)):
            h.failures += 1
        else:
            h.failures = 0
        delay = self.delay_s(host) + self.backoff_s(host)
        next_at = end + delay
        if retry_after_s is not None and status in (429, 503):
            next_at = max(next_at, end + retry_after_s)
            if retry_after_s > self._max_retry_after:
                self.park(host, "retry_after")
        if h.failures >= self._max_failures:
            self.park(host, "failures")
        h.next_allowed = max(h.next_allowed, next_at)
        self._schedule(h)

    def unlease(self, host: str) -> None:
        """End a lease that sent no request (robots.txt denies the URL, say).

        The host's next_allowed_at, failure count and request count stay as if the lease
        had never been granted; the item stays the caller's.
        """
        h = self._hosts.get(host)
        if h is None or h.in_flight == 0:
            raise ValueError(f"unlease of {host!r} without a lease in flight")
        h.in_flight -= 1
        h.requests -= 1
        self._in_flight -= 1
        if h.ip is not None:
            self._ip_add(h.ip, -1)
        self._schedule(h)

    def next_wakeup(self) -> float | None:
        """Earliest time (never before now) at which :meth:`lease` could return an item.

        None when nothing is queued, or every queued host waits on a request in flight
        (its own cap or its IP's) or is held: then only a release or an unhold can make progress.
        """
        now = self._clock()
        ready = self._ready
        while ready:
            entry = ready[0]
            h = entry[3]
            if entry[2] != h.gen:
                heapq.heappop(ready)
            elif entry[0] <= now and h.ip is not None and self._ip_in_flight.get(h.ip, 0) >= self._ip_cap:
                heapq.heappush(self._ip_wait.setdefault(h.ip, []), heapq.heappop(ready))
                h.where = _WAIT
            else:
                return max(entry[0], now)
        return None

    def take_deferred(self) -> list[tuple[Any, str]]:
        """Items removed by parking, each with its park reason; cleared on read."""
        out, self._deferred = self._deferred, []
        return out

    def drain(self) -> list[Any]:
        """Remove and return every queued item (not those in flight): the budget ran out."""
        out: list[Any] = []
        for h in self._hosts.values():
            out.extend(h.queue)
            h.queue.clear()
            h.gen += 1
            h.where = 0
        self._ready.clear()
        self._ip_wait.clear()
        self._pending = 0
        return out

    # -- inspection ---------------------------------------------------------------
    def pending(self) -> int:
        return self._pending

    def in_flight(self) -> int:
        return self._in_flight

    def hosts(self) -> Iterable[str]:
        return list(self._hosts)

    def delay_s(self, host: str) -> float:
        """The politeness delay of ``host`` now, before any back-off or Retry-After."""
        h = self._hosts[host]
        rt = min(self._rt_factor * max(h.recent), self._rt_max) if h.recent else 0.0
        return max(self._host_delay, h.crawl_delay or 0.0, rt)

    def backoff_s(self, host: str) -> float:
        """The back-off of ``host`` now: what its n consecutive failures add to the delay (0 if none)."""
        n = self._hosts[host].failures
        return min(self._backoff_base * 2.0 ** min(n - 1, 64), self._backoff_max) if n else 0.0

    def host_state(self, host: str) -> HostPoliteness:
        return self._hosts[host].snapshot()

    # -- internals ----------------------------------------------------------------
    def _host(self, name: str) -> HostQueue:
        h = self._hosts.get(name)
        if h is None:
            h = self._hosts[name] = HostQueue(name, self._rt_window)
        return h

    def _enqueue(self, host: str, item: Any, front: bool) -> None:
        h = self._host(host)
        if h.parked:
            self._deferred.append((item, h.park_reason))
            return
        (h.queue.appendleft if front else h.queue.append)(item)
        self._pending += 1
        if not h.where:
            self._schedule(h)

    def _schedule(self, h: HostQueue) -> None:
        """Invalidate ``h``'s heap entry; push a fresh one if the host may be leased some time.

        ``h`` may have been holding a free slot of its IP for a waiting host (see ``_refill``):
        after any change to it, free slots of that IP are handed on again.
        """
        h.gen += 1
        if h.parked or h.held or not h.queue or h.in_flight >= self._host_cap:
            h.where = 0
        else:
            self._seq += 1
            heapq.heappush(self._ready, (h.next_allowed, self._seq, h.gen, h))
            h.where = _READY
        if h.ip is not None and h.ip in self._ip_wait:
            self._refill(h.ip)

    def _push_back(self, h: HostQueue, at: float) -> None:
        if at > h.next_allowed:
            h.next_allowed = at
            if h.where:
                self._schedule(h)

    def _ip_add(self, ip: str, n: int) -> None:
        left = self._ip_in_flight.get(ip, 0) + n
        if left > 0:
            self._ip_in_flight[ip] = left
        else:
            self._ip_in_flight.pop(ip, None)

    def _refill(self, ip: str) -> None:
        """Move up to one waiting host per free slot of ``ip`` back to the ready heap, keys kept.

        Called whenever a slot may have freed or a host moved back may have been re-keyed,
        parked or moved, so a waiting host is never left behind while its IP has room.
        Moving more than will fit costs only a heap push; lease() sends extras back.
        """
        wait = self._ip_wait.get(ip)
        if not wait:
            return
        free = self._ip_cap - self._ip_in_flight.get(ip, 0)
        while free > 0 and wait:
            entry = heapq.heappop(wait)
            if entry[2] != entry[3].gen:
                continue
            heapq.heappush(self._ready, entry)
            entry[3].where = _READY
            free -= 1
        if not wait:
            del self._ip_wait[ip]
