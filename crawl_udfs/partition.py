"""The fetch task: one partition of hosts, fetched politely by one asyncio loop.

:func:`fetch_partition` is the unit Spark runs (``jobs/fetch.py``). Guarantees:

- **One result per fetch-list URL**, whatever happens: fetched, denied, failed,
  deferred, or ``not_attempted`` when the task's wall-clock budget
  (``fetch.task_budget_s``) ran out — those come back untouched, to be fetched
  in a later round. Plus one :class:`~crawl_udfs.rows.HostResult` per host.
- **Politeness** is the :class:`~crawl_udfs.scheduler.PolitenessScheduler`'s:
  never two requests in flight to one host, never a request sooner than the
  host's delay after the previous one ended, a per-IP cap, Retry-After and
  back-off honoured. The robots.txt fetch is a request like any other and
  goes through the same gate. The first request to a host waits until the
  ``next_allowed_at`` the previous round persisted, and a *retried* task
  (``retried=True``) also waits one host delay first, so a retry never bursts.
- **robots.txt before pages** (RFC 9309): a host's pages are admitted to the
  scheduler only once its rules are known (seeded from ``hosts`` when fresh,
  else fetched first); a 5xx/unreachable robots.txt defers the whole host; the
  rules are re-checked when they expire during the task, and after a 4xx/5xx
  page response once ``robots.recheck_after_error_s`` has passed since the
  last robots fetch, so a site that starts disallowing is obeyed at once.
- **Redirects are not followed inline**: the target is normalised and returned
  in ``redirect_to``; ``update`` inserts it into the frontier (kind
  "redirect", ``redirect_hops + 1``), where it is scheduled politely like any
  URL, possibly in another task if it is on another host. A self-redirect is
  reported as ``redirect_loop``; longer loops end because a target already in
  the crawl DB is not re-inserted, and chains end at ``fetch.max_redirect_hops``.
- **CPU work stays off the politeness path.** A host is released the moment
  its response body is in. What follows (parsing, SimHash, digests, WARC) is
  queued: with ``fetch.parse_threads = 0`` (the default) one coroutine works
  the queue on the event loop, one page at a time, and yields to the loop
  after each, so every loop turn that reads responses, releases hosts and
  starts requests carries at most one page's work (~1 ms); with N > 0 it runs
  on N threads instead (the GIL makes that slower for the Python part;
  measured, ``bench/RESULTS.md``). Either way a request's task ends only when
  its page is done, so at most ``fetch.max_concurrency`` pages are held in
  memory. WARC records are written one exchange at a time (a lock), an
  exchange's records together. The host's response time
  (``politeness.response_time_factor``) is the server's time to first byte
  (request written to first bytes read), so this task's own CPU backlog never
  lengthens its delays; a time that may be mostly the task's own stall (a
  garbage collection, a burst of connection starts: the loop runs on
  :func:`crawl_udfs.fetcher.new_event_loop`, which times its polls) is not
  learnt from.
- The event loop, HTTP session, DNS cache, page queue (or parse threads) and
  WARC writer are created here and closed in ``finally``; nothing survives
  into the next task run by the same (reused) Python worker.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import logging
import math
import os
import threading
import time
from collections import defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol

from crawl_udfs.config import Config
from crawl_udfs.fetcher import Fetcher, FetchResponse, new_event_loop
from crawl_udfs.parser import parse
from crawl_udfs.robots import RobotsPolicy, robots_url
from crawl_udfs.rows import FetchItem, FetchResult, HostResult, HostState, Outcome, Outlink
from crawl_udfs.scheduler import PolitenessScheduler
from crawl_udfs.signatures import payload_digest
from crawl_udfs.simhash import simhash
from crawl_udfs.url_filter import UrlFilter
from crawl_udfs.url_normalize import CachedNormalizer, UrlNormalizer, fingerprint
from crawl_udfs.warc import HttpExchange, RollingWarcWriter


log = logging.getLogger(__name__)


class Clock(Protocol):
    """Wall-clock time (epoch seconds) and a way to wait; injected for tests."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class _RobotsFetch:
    """The scheduler item that stands for "fetch this host's robots.txt"."""

    __slots__ = ("host",)

    def __init__(self, host: str):
        self.host = host


#: Failures that happen before a request reaches the server: not counted as requests sent.
NOT_SENT = frozenset({"connect", "dns", "ssrf_blocked", "timeout_connect", "bad_url", "unsupported_scheme"})

#: Park reasons that mean the host cannot be reached at all: its URLs fail, not wait.
_UNREACHABLE = ("dns", "ssrf_blocked")


@dataclass
class _HostRun:
    """What the task knows of one host while it runs."""

    name: str
    scheme_port: str | None = None        # "http://host:port" of its first URL, for robots.txt
    policy: RobotsPolicy | None = None
    robots_pending: bool = False
    waiting: list[FetchItem] = field(default_factory=list)  # pages held until robots is known
    result: HostResult = None             # type: ignore[assignment]


def fetch_partition(rows: Iterable[FetchItem], conf: Config, *, hosts: Iterable[HostState] = (),
                    warc_dir: str, warc_name: Callable[[int], str], clock: Clock | None = None,
                    retried: bool = False) -> Iterator[FetchResult | HostResult]:
    """Fetch every row politely; yield a FetchResult per row, then a HostResult per host."""
    task = _Task(conf, list(rows), list(hosts), warc_dir, warc_name, clock or RealClock(), retried)
    loop = new_event_loop()
    try:
        results, host_results = loop.run_until_complete(task.run())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    yield from results
    yield from host_results


class _Task:
    def __init__(self, conf: Config, items: list[FetchItem], hosts: list[HostState], warc_dir: str,
                 warc_name: Callable[[int], str], clock: Clock, retried: bool):
        self.conf = conf
        self.items = items
        self.seed_hosts = {h.host: h for h in hosts}
        self.clock = clock
        self.retried = retried
        self.warc_dir = warc_dir
        self.warc_name = warc_name
        self.agent = conf.crawler.agent_name
        self.normalizer = UrlNormalizer(conf.url)
        # Outlinks repeat from page to page of a site (menus, footers): normalise and filter each once.
        self.link_normalizer = CachedNormalizer(self.normalizer, conf.parse.link_cache_entries)
        self.url_filter = UrlFilter(conf.filter)
        # Outlinks repeat too: UrlFilter.reason remembered per URL, bounded like the link cache.
        self._filter_reason = functools.lru_cache(conf.parse.link_cache_entries)(self.url_filter.reason)
        self.sched = PolitenessScheduler(conf.politeness, clock=clock.now)
        self.results: dict[int, FetchResult] = {}   # id(item) -> result (written by parse threads too)
        self.pool: ThreadPoolExecutor | None = None
        self.pages: deque = deque()                 # (done future, (item, resp, waited, retry_after)) for _page_done
        self.pages_ready: asyncio.Event | None = None
        self.warc_lock = threading.Lock()
        self.failed: list[asyncio.Task] = []
        self.wake_driver: Callable[[], None] = lambda: None  # set by _drive_loop
        self.hosts: dict[str, _HostRun] = {}
        self.queued_at: dict[int, float] = {}

    # -- the loop -------------------------------------------------------------------------
    async def run(self) -> tuple[list[FetchResult], list[HostResult]]:
        start = self.clock.now()
        deadline = start + self.conf.fetch.task_budget_s
        os.makedirs(self.warc_dir, exist_ok=True)
        warc = RollingWarcWriter(self.warc_dir, self.conf.warc, name_fn=self.warc_name)
        threads = self.conf.fetch.parse_threads
        worker = None
        try:
            if threads > 0:
                self.pool = ThreadPoolExecutor(threads, thread_name_prefix="deltacrawl-parse")
            else:
                self.pages_ready = asyncio.Event()
                worker = asyncio.get_running_loop().create_task(self._work_pages())
            async with Fetcher(self.conf, wall_clock=self.clock.now) as fetcher:
                self.fetcher, self.warc = fetcher, warc
                self._admit_all(start)
                await self._resolve_all()
                await self._drive(deadline)
        finally:
            try:
                if self.pool is not None:
                    self.pool.shutdown(wait=True)  # every page handed over is finished and written
                if worker is not None:
                    worker.cancel()  # it stops at an await, between pages; what is left is done here
                    await asyncio.gather(worker, return_exceptions=True)
                    while self.pages:
                        self._page_done(*self.pages.popleft()[1])
            finally:
                warc.close()
        for item in self.sched.drain():
            self._finish_unattempted(item)
        for run in self.hosts.values():
            for item in run.waiting:
                self._finish_unattempted(item)
            run.waiting.clear()
        ordered = [self.results[id(i)] for i in self.items]
        return ordered, [self._host_result(run) for run in self.hosts.values()]

    async def _drive(self, deadline: float) -> None:
        running: set[asyncio.Task] = set()
        try:
            await self._drive_loop(deadline, running)
        finally:
            for t in running:
                t.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _drive_loop(self, deadline: float, running: set) -> None:
        """Lease what the scheduler allows, then sleep until a request ends or a host falls due.

        Each request task wakes the loop through a done-callback (O(1) per request,
        where ``asyncio.wait`` would hook every running task on every wake-up), and
        again when it releases its host, before its page is worked.
        """
        loop = asyncio.get_running_loop()
        cap = self.conf.fetch.max_concurrency
        wake: list[asyncio.Future | None] = [None]

        def poke(_: object = None) -> None:
            fut = wake[0]
            if fut is not None and not fut.done():
                fut.set_result(None)

        def done(t: asyncio.Task) -> None:
            running.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self.failed.append(t)
            poke()

        self.wake_driver = poke  # a release may make its host due at once (no delay)

        while True:
            if self.failed:
                self.failed[0].result()  # surface bugs: _handle catches every expected failure itself
            now = self.clock.now()
            if now < deadline:
                while len(running) < cap and (lease := self.sched.lease()) is not None:
                    t = loop.create_task(self._handle(*lease))
                    running.add(t)
                    t.add_done_callback(done)
            self._collect_deferred()
            if not running and (now >= deadline or self.sched.pending() == 0):
                return
            wake_at = self.sched.next_wakeup()
            timeout = deadline - now if wake_at is None else min(wake_at, deadline) - now
            if running:
                wake[0] = loop.create_future()
                # At the cap, or past the deadline, only a request ending can change anything.
                timer = loop.call_later(max(0.0, timeout), poke) if now < deadline and len(running) < cap else None
                try:
                    await wake[0]
                finally:
                    wake[0] = None
                    if timer is not None:
                        timer.cancel()
            elif timeout > 0:
                await self.clock.sleep(timeout)

    async def _work_pages(self) -> None:
        """Work the page queue on the loop: one page, then yield, so I/O and timers run in between."""
        pages, ready = self.pages, self.pages_ready
        while True:
            while pages:
                done, args = pages.popleft()
                try:
                    self._page_done(*args)
                except Exception as e:  # a bug: fail the page's request task, which surfaces it
                    if not done.done():
                        done.set_exception(e)
                    raise
                if not done.done():
                    done.set_result(None)
                await asyncio.sleep(0)
            ready.clear()
            await ready.wait()

    # -- admission ------------------------------------------------------------------------
    def _admit_all(self, start: float) -> None:
        by_host: dict[str, list[FetchItem]] = defaultdict(list)
        for item in self.items:
            by_host[item.host].append(item)
        delay = self.conf.politeness.host_delay_s
        for host, items in by_host.items():
            seed = self.seed_hosts.get(host)
            run = _HostRun(host, result=HostResult(host=host))
            self.hosts[host] = run
            run.scheme_port = robots_url(items[0].url)
            not_before = seed.next_allowed_at if seed and seed.next_allowed_at else None
            if self.retried:
                not_before = max(not_before or 0.0, start + delay)
            self.sched.set_host(host, not_before=not_before,
                                consecutive_failures=seed.consecutive_failures if seed else None)
            if seed and seed.robots_fetched_at is not None:
                policy = RobotsPolicy.from_fetch(seed.robots_status, seed.robots_body, seed.robots_fetched_at,
                                                 self.agent, self.conf.robots)
                if policy.is_fresh(start):
                    self._set_policy(run, policy)
            run.waiting.extend(items)
            for item in items:
                self.queued_at[id(item)] = start
            if run.policy is None:
                self._request_robots(run)
            else:
                self._release_waiting(run)

    async def _resolve_all(self) -> None:
        """Learn each host's address first, so the per-IP cap holds from the first request."""
        sem = asyncio.Semaphore(64)

        async def one(run: _HostRun) -> None:
            async with sem:
                ip, error = await self.fetcher.resolve(run.name)
            if ip is not None:
                self.sched.set_host(run.name, ip=ip)
                run.result.ip = ip
            elif error is not None:
                self.sched.park(run.name, error)

        await asyncio.gather(*(one(run) for run in self.hosts.values()))

    def _request_robots(self, run: _HostRun) -> None:
        if not run.robots_pending:
            run.robots_pending = True
            self.sched.add_front(run.name, _RobotsFetch(run.name))

    def _set_policy(self, run: _HostRun, policy: RobotsPolicy) -> None:
        run.policy = policy
        r = run.result
        r.robots_status, r.robots_body = policy.status, policy.body
        r.robots_fetched_at, r.robots_expires_at = policy.fetched_at, policy.expires_at
        r.crawl_delay_s, r.sitemaps = policy.crawl_delay, list(policy.sitemaps)
        if policy.crawl_delay is not None:
            self.sched.set_host(run.name, crawl_delay=policy.crawl_delay)

    def _release_waiting(self, run: _HostRun) -> None:
        """Move pages held for robots.txt into the scheduler, or finish them per the rules."""
        items, run.waiting = run.waiting, []
        policy = run.policy
        for item in items:
            if policy.unavailable:
                self._finish(item, Outcome.ROBOTS_UNAVAILABLE, error_class="robots_unavailable",
                             error_message=f"robots.txt status {policy.status}")
            elif not policy.allowed(item.url):
                self._finish(item, Outcome.ROBOTS_DENIED)
            else:
                self.sched.add(run.name, item)

    # -- one lease ------------------------------------------------------------------------
    async def _handle(self, host: str, item) -> None:
        run = self.hosts[host]
        if isinstance(item, _RobotsFetch):
            await self._fetch_robots(run)
            return
        if run.policy is None or not run.policy.is_fresh(self.clock.now()):
            # The rules expired while the page waited: re-check with this lease, then retry the page.
            self.sched.add_front(host, item)
            await self._fetch_robots(run)
            return
        if not run.policy.allowed(item.url):
            self.sched.unlease(host)
            self._finish(item, Outcome.ROBOTS_DENIED)
            return
        await self._fetch_page(run, item)

    async def _fetch_robots(self, run: _HostRun) -> None:
        url = run.scheme_port
        status, body, ip = None, None, None
        response_time: float | None = None
        resp = None
        hops = 0
        delay = self.conf.politeness.host_delay_s
        while True:
            resp = await self.fetcher.fetch(url, accept_robots=True)
            rt = _response_time_s(resp)
            if rt is not None:
                response_time = rt if response_time is None else max(response_time, rt)
            if resp.error_class not in NOT_SENT:
                run.result.requests += 1
                run.result.robots_requests += 1
            run.result.bytes_received += resp.wire_bytes
            ip = resp.ip or ip
            if resp.error_class is not None:
                status = None
                break
            status, body = resp.status, resp.body
            location = _header(resp.headers, "location")
            if status in (301, 302, 303, 307, 308) and location and hops < self.conf.robots.max_redirects:
                target = self.normalizer.normalize(location, url)
                if target is None or target == url:
                    status, body = None, None
                    break
                hops += 1
                url = target
                await self.clock.sleep(delay)  # the next hop is another request, likely to the same host
                continue
            if 300 <= status < 400:
                status, body = None, None  # too many redirects: unreachable (RFC 9309 §2.3.1.2)
            break
        run.robots_pending = False
        policy = RobotsPolicy.from_fetch(status, body, self.clock.now(), self.agent, self.conf.robots)
        self._set_policy(run, policy)
        if ip:
            run.result.ip = ip
        self.sched.release(run.name, response_time_s=response_time,
                           ended_at=self._ended_at(resp) if resp is not None else None,
                           status=status if status is not None and status >= 500 else None,
                           error=status is None)
        if policy.unavailable:
            self.sched.park(run.name, "robots_unavailable")
        self._release_waiting(run)

    async def _fetch_page(self, run: _HostRun, item: FetchItem) -> None:
        now = self.clock.now()
        waited = (now - self.queued_at.get(id(item), now)) * 1000.0
        resp = await self.fetcher.fetch(item.url, etag=item.etag, last_modified=item.last_modified)
        if resp.error_class not in NOT_SENT:
            run.result.requests += 1
        run.result.bytes_received += resp.wire_bytes
        if resp.ip:
            run.result.ip = resp.ip
        # Release the host the moment its response is in, before parsing and WARC
        # writing, so that CPU work in this task never lengthens a politeness gap
        # nor counts as the server's response time.
        status = resp.status
        retry_after = None
        if status in (429, 503):
            retry_after = _retry_after(_header(resp.headers, "retry-after"), self.clock.now())
        self.sched.release(run.name, response_time_s=_response_time_s(resp), ended_at=self._ended_at(resp),
                           status=status, error=resp.error_class is not None, retry_after_s=retry_after)
        self.wake_driver()  # this task lives on until its page is done; the host need not wait for that
        if status is not None and status >= 400 and run.policy is not None:
            age = self.clock.now() - run.policy.fetched_at
            if age >= self.conf.robots.recheck_after_error_s:
                self._request_robots(run)
        if self.pool is None:
            # The request's task waits for its page, so pages held in memory (fetched or
            # queued) stay within fetch.max_concurrency, as with threads. Cancelled (the
            # budget), the page still gets done: it stays queued for the worker or run().
            done = asyncio.get_running_loop().create_future()
            self.pages.append((done, (item, resp, waited, retry_after)))
            self.pages_ready.set()
            await done
        else:
            # Shielded: a page handed over is finished (result and WARC) even if this task is cancelled.
            await asyncio.shield(asyncio.get_running_loop().run_in_executor(
                self.pool, self._page_done, item, resp, waited, retry_after))

    def _ended_at(self, resp: FetchResponse) -> float | None:
        """When the host's request counts as ended, in the task clock's timebase (None: now).

        When the loop read the response's last bytes (a body read to its end), plus
        ``politeness.end_margin_s``: not when this coroutine got round to it, which on a busy
        loop is a few milliseconds later (measured, bench/RESULTS.md). The server sent those
        bytes before they were read, so its own log shows at least the whole delay.
        """
        if resp.last_bytes_at is None:
            return None
        since_read = asyncio.get_running_loop().time() - resp.last_bytes_at
        return self.clock.now() + self.conf.politeness.end_margin_s - max(0.0, since_read)

    # -- results --------------------------------------------------------------------------
    def _page_done(self, item: FetchItem, resp: FetchResponse, waited: float, retry_after: float | None) -> None:
        """Everything after the body, from the page queue or on a parse thread: the page's FetchResult."""
        try:
            result = self._classify(item, resp)
        except Exception as e:  # a bug in parsing one page must not sink the task
            log.exception("internal error on %s", item.url)
            result = FetchResult(url=item.url, url_fp=item.url_fp, host=item.host, outcome=Outcome.ERROR.value,
                                 fetch_time=resp.started_at, status_code=resp.status, error_class="internal",
                                 error_message=f"{type(e).__name__}: {e}"[:500], redirect_hops=item.redirect_hops)
        result.politeness_wait_ms = waited
        result.retry_after_s = retry_after
        self.results[id(item)] = result

    def _classify(self, item: FetchItem, resp: FetchResponse) -> FetchResult:
        keep = self.conf.fetch.keep_headers
        headers = {k.lower(): _clean(v) for k, v in resp.headers if k.lower() in keep}
        r = FetchResult(url=item.url, url_fp=item.url_fp, host=item.host, outcome=Outcome.ERROR.value,
                        fetch_time=resp.started_at, status_code=resp.status, ip=resp.ip,
                        redirect_hops=item.redirect_hops, headers=headers,
                        t_first_byte_ms=resp.t_first_byte_ms, t_total_ms=resp.t_total_ms,
                        wire_bytes=resp.wire_bytes, truncated=resp.truncated)
        if resp.error_class is not None or resp.status is None:
            r.error_class = resp.error_class or "other"
            r.error_message = resp.error_message
            return r
        status = resp.status
        r.etag = headers.get("etag")
        r.last_modified = headers.get("last-modified")
        ctype = headers.get("content-type") or ""
        r.content_type = ctype.split(";")[0].strip().lower() or None
        exchange = HttpExchange(url=item.url, ip=resp.ip, fetch_time=resp.started_at, method="GET",
                                request_target=resp.request_target, request_headers=resp.request_headers,
                                http_version=resp.http_version or "1.1", status=status,
                                reason=resp.reason or "", response_headers=resp.headers, body=resp.body,
                                truncated=resp.truncated)
        if status == 304:
            r.outcome = Outcome.NOT_MODIFIED.value
            r.digest = item.prev_digest
            with self.warc_lock:
                ptr = self.warc.write_revisit(exchange, refers_to=item.prev_warc_record_id,
                                              refers_to_uri=item.url, refers_to_date=item.prev_fetch_time)
            self._point(r, ptr)
            return r
        digest = payload_digest(resp.body)
        with self.warc_lock:
            ptr = self.warc.write_exchange(exchange, payload_digest=digest)
        self._point(r, ptr)
        r.digest = digest
        r.content_length = len(resp.body)
        if 300 <= status < 400:
            location = _header(resp.headers, "location")
            target = self.normalizer.normalize(location, item.url) if location else None
            r.outcome = Outcome.REDIRECT.value
            r.redirect_to = target
            if target is None:
                r.error_class = "bad_redirect"
            elif target == item.url:
                r.error_class = "redirect_loop"
            elif item.redirect_hops + 1 > self.conf.fetch.max_redirect_hops:
                r.error_class = "too_many_redirects"
            elif (why := self.url_filter.reason(target)) is not None:
                r.error_class = f"redirect_filtered:{why}"
            else:
                r.outlinks = [Outlink(url=target, url_fp=fingerprint(target), kind="redirect")]
            return r
        if status >= 400:
            r.outcome = Outcome.HTTP_ERROR.value
            return r
        r.outcome = Outcome.OK.value
        parsed = parse(resp.body, url=item.url, content_type=ctype or None, headers=headers,
                       normalizer=self.link_normalizer, parse_conf=self.conf.parse, agent_name=self.agent)
        r.charset = parsed.charset
        r.title = parsed.title
        r.canonical = parsed.canonical
        r.noindex, r.nofollow = parsed.noindex, parsed.nofollow
        r.outlinks = [o for o in parsed.outlinks if o.kind == "canonical" or self._filter_reason(o.url) is None]
        r.outlinks_filtered = len(parsed.outlinks) - len(r.outlinks)
        if parsed.is_html and parsed.main_text.strip():
            r.simhash = simhash(parsed.main_text, self.conf.simhash.shingle_words)
        return r

    @staticmethod
    def _point(r: FetchResult, ptr) -> None:
        r.warc_filename, r.warc_offset, r.warc_length, r.warc_record_id = (
            ptr.filename, ptr.offset, ptr.length, ptr.record_id)

    def _finish(self, item: FetchItem, outcome: Outcome, **extra) -> None:
        self.results[id(item)] = FetchResult(url=item.url, url_fp=item.url_fp, host=item.host,
                                             outcome=outcome.value, redirect_hops=item.redirect_hops, **extra)

    def _finish_unattempted(self, item) -> None:
        if not isinstance(item, _RobotsFetch) and id(item) not in self.results:
            self._finish(item, Outcome.NOT_ATTEMPTED, error_class="task_budget")

    def _collect_deferred(self) -> None:
        for item, reason in self.sched.take_deferred():
            if isinstance(item, _RobotsFetch):
                # Parked before its rules were known: the pages held for them share the fate.
                run = self.hosts[item.host]
                run.robots_pending = False
                for page in run.waiting:
                    self._finish_parked(page, reason)
                run.waiting = []
            else:
                self._finish_parked(item, reason)

    def _finish_parked(self, item: FetchItem, reason: str) -> None:
        if reason in _UNREACHABLE:
            self._finish(item, Outcome.ERROR, error_class=reason)
        elif reason == "robots_unavailable":
            self._finish(item, Outcome.ROBOTS_UNAVAILABLE, error_class=reason)
        else:
            self._finish(item, Outcome.DEFERRED, error_class=reason)

    def _host_result(self, run: _HostRun) -> HostResult:
        state = self.sched.host_state(run.name)
        r = run.result
        r.next_allowed_at = state.next_allowed_at if state.next_allowed_at not in (None, -math.inf) else None
        r.consecutive_failures = state.consecutive_failures
        r.parked, r.park_reason = state.parked, state.park_reason
        r.ip = r.ip or state.ip
        r.delay_s = self.sched.delay_s(run.name)
        return r


#: A response time whose possible share of the task's own stall (``FetchResponse.t_own_lag_ms``)
#: is over this many milliseconds and over half the time itself says more about us than about
#: the server: the delay does not learn from it. (A 100 ms garbage collection or a burst of 200
#: connection starts made 20 ms responses look 100-200 ms long; x10, delays of 1-2 s for every
#: host in flight.) Loop turns of a page or two never reach it.
_OWN_LAG_FLOOR_MS = 5.0


def _response_time_s(resp: FetchResponse) -> float | None:
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


def _clean(value: str) -> str:
    """Header text safe for Arrow/Parquet: undecodable bytes (kept as surrogates) become U+FFFD."""
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _retry_after(value: str | None, now: float) -> float | None:
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
