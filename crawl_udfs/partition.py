"""The fetch task: one partition of hosts, fetched politely by one asyncio loop.

:func:`fetch_partition` is the unit Spark runs (``jobs/fetch.py``). Guarantees:

- **One result per fetch-list URL**, whatever happens: fetched, denied, failed,
  deferred, or ``not_attempted`` when the task's wall-clock budget
  (``fetch.task_budget_s``) ran out or the task ended its round early because
  what was left was a thin tail (:class:`~crawl_udfs.tail.TailJudge`: a few slow
  hosts must not hold the round) — those come back untouched, to be fetched
  in a later round. No request starts after the end; one in flight finishes
  normally. Plus one per URL followed inside the round and tried
  (``in_round``, ``crawl_udfs.host_runs``), and one
  :class:`~crawl_udfs.rows.HostResult` per host.
- **Politeness** is the :class:`~crawl_udfs.scheduler.PolitenessScheduler`'s:
  never two requests in flight to one host, never a request sooner than the
  host's delay after the previous one ended, a per-IP cap, Retry-After and
  back-off honoured. The robots.txt fetch, and each hop of its redirect chain,
  is an item the scheduler leases like any other request, on the host the
  request goes to (``crawl_udfs.robots_fetch``). The first request to a host
  waits until the ``next_allowed_at`` the previous round persisted, and a
  *retried* task (``retried=True``) also waits one host delay first, so a
  retry never bursts.
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
  :func:`crawl_udfs.event_loop.new_event_loop`, which times its polls) is not
  learnt from.
- The event loop, HTTP session, DNS cache, page queue (or parse threads) and
  WARC writer are created here and closed in ``finally``; nothing survives
  into the next task run by the same (reused) Python worker. What the worker
  held before the task is kept out of the task's garbage collections, which
  are made rarer, and both given back after (:func:`~crawl_udfs.event_loop.quiet_gc`).

The pieces: this module drives the loop (leases, requests, releases, and the
round's end: the budget, or the cut ``crawl_udfs.tail`` judges once a second);
``crawl_udfs.host_runs`` admits pages behind robots.txt and records outcomes;
``crawl_udfs.host_addresses`` learns each host's address before its first request;
``crawl_udfs.robots_fetch`` decides each robots.txt hop; ``crawl_udfs.classify``
decides what a page response means (a pure function); ``crawl_udfs.pages``
applies that decision (WARC, parse, SimHash) off the politeness path.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Callable, Iterable, Iterator, Protocol

from crawl_udfs.classify import rules_for
from crawl_udfs.config import Config
from crawl_udfs.event_loop import new_event_loop, quiet_gc
from crawl_udfs.fetcher import Fetcher, FetchResponse
from crawl_udfs.host_addresses import learn_addresses
from crawl_udfs.host_runs import HostRun, TaskHosts
from crawl_udfs.pages import PageWork
from crawl_udfs.responses import NOT_SENT, header, response_time_s, retry_after
from crawl_udfs.robots import RobotsPolicy
from crawl_udfs.robots_fetch import RobotsDone, RobotsFetch, robots_step
from crawl_udfs.rows import FetchItem, FetchResult, HostResult, HostState, Outcome
from crawl_udfs.scheduler import PolitenessScheduler
from crawl_udfs.sitemaps import SITEMAP, robots_sitemaps
from crawl_udfs.tail import TAIL_CUT, TailJudge
from crawl_udfs.url_normalize import CachedNormalizer, UrlNormalizer, host_of
from crawl_udfs.warc import RollingWarcWriter

__all__ = ["NOT_SENT", "Clock", "RealClock", "fetch_partition"]


class Clock(Protocol):
    """Wall-clock time (epoch seconds) and a way to wait; injected for tests."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


def fetch_partition(rows: Iterable[FetchItem], conf: Config, *, hosts: Iterable[HostState] = (),
                    warc_dir: str, warc_name: Callable[[int], str], clock: Clock | None = None,
                    retried: bool = False, progress: Callable[[dict], None] | None = None,
                    addresses_elsewhere: frozenset[str] = frozenset(),
                    ) -> Iterator[FetchResult | HostResult]:
    """Fetch every row politely; yield a FetchResult per row, then a HostResult per host.

    ``progress`` gets a snapshot of the task (:meth:`_Task.snapshot`) every
    ``fetch.progress_every_s`` seconds of wall time, from a worker thread, and a last one
    with ``done`` true; it must not raise (the driver's live line, jobs/progress.py).
    ``addresses_elsewhere``: the addresses other tasks of the round fetch; a host found to
    resolve to one is deferred untouched (``crawl_udfs.host_addresses``), so the per-IP
    cap holds across tasks for hosts generate listed without an address."""
    task = _Task(conf, list(rows), list(hosts), warc_dir, warc_name, clock or RealClock(), retried)
    task.elsewhere = addresses_elsewhere
    task.progress = progress
    loop = new_event_loop()
    try:
        with quiet_gc():
            results, host_results = loop.run_until_complete(task.run())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    yield from results
    yield from host_results


class _Task:
    """One run of :func:`fetch_partition`: the drive loop and what one lease does."""

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
        self.sched = PolitenessScheduler(conf.politeness, clock=clock.now)
        self.hosts = TaskHosts(conf, self.sched)
        self.foreign: set[str] = set()              # hosts leased only for robots.txt redirect hops
        self.pages: PageWork | None = None
        self.failed: list[asyncio.Task] = []
        self.tail: TailJudge | None = None           # set by run, at the task's start
        self.wake_driver: Callable[[], None] = lambda: None  # set by _drive_loop
        self.progress: Callable[[dict], None] | None = None
        self.elsewhere: frozenset[str] = frozenset()  # addresses other tasks of the round fetch
        self.started = 0.0

    # -- the loop -------------------------------------------------------------------------
    async def run(self) -> tuple[list[FetchResult], list[HostResult]]:
        start = self.started = self.clock.now()
        deadline = start + self.conf.fetch.task_budget_s
        self.tail = TailJudge(self.conf.fetch, start=start)
        os.makedirs(self.warc_dir, exist_ok=True)
        warc = RollingWarcWriter(self.warc_dir, self.conf.warc, name_fn=self.warc_name)
        # Outlinks repeat from page to page of a site (menus, footers): normalise each once.
        links = CachedNormalizer(self.normalizer, self.conf.parse.link_cache_entries)
        self.pages = PageWork(self.conf, rules_for(self.conf, self.normalizer), links, warc, self.hosts.results)
        try:
            self.pages.start()
            async with Fetcher(self.conf, wall_clock=self.clock.now) as fetcher:
                self.fetcher = fetcher
                self.hosts.admit(self.items, self.seed_hosts, start, self.retried)
                reporter = (asyncio.ensure_future(self._report())
                            if self.progress and self.conf.fetch.progress_every_s > 0 else None)
                try:
                    await self._drive(deadline)
                finally:
                    if reporter is not None:
                        reporter.cancel()
        finally:
            try:
                await self.pages.close()  # every page handed over is finished and written
            finally:
                warc.close()
        self.hosts.finish_unattempted(TAIL_CUT if self.tail.cut() else "task_budget")
        if self.progress:
            self.progress(self.snapshot(done=True))
        ordered = [self.hosts.results[id(i)] for i in self.items] + self.hosts.followed_results()
        return ordered, [self.hosts.host_result(run) for run in self.hosts.runs.values()]

    async def _drive(self, deadline: float) -> None:
        running: set[asyncio.Task] = set()
        lookups = learn_addresses(self.hosts.runs.values(), self.sched, self.fetcher.resolve,
                                  concurrency=self.conf.net.dns_concurrency, elsewhere=self.elsewhere,
                                  wake=lambda: self.wake_driver())
        try:
            await self._drive_loop(deadline, running, lookups)
        finally:
            for t in running:
                t.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _drive_loop(self, deadline: float, running: set, lookups: asyncio.Future) -> None:
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
        running.add(lookups)  # the hosts' address lookups: a request slot, ended at the deadline
        lookups.add_done_callback(done)

        while True:
            if self.failed:
                self.failed[0].result()  # surface bugs: _handle catches every expected failure itself
            now = self.clock.now()
            if now >= deadline or self._tail_cut(now):
                deadline = min(deadline, now)  # the round is over: nothing more starts
                lookups.cancel()  # a host still unresolved has nothing started: its items drain untouched
            if now < deadline:
                while len(running) < cap and (lease := self.sched.lease()) is not None:
                    t = loop.create_task(self._handle(*lease))
                    running.add(t)
                    t.add_done_callback(done)
            self.hosts.collect_deferred()
            if not running and (now >= deadline or self.sched.pending() == 0):
                return
            wake_at = min((t for t in (self.sched.next_wakeup(), self.tail.next_sample_at()) if t is not None),
                          default=None)
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

    async def _report(self) -> None:
        """Hand a snapshot to ``progress`` every ``fetch.progress_every_s`` (wall time: the writer may
        touch object storage, so it runs on a thread and never holds the loop)."""
        every = float(self.conf.fetch.progress_every_s)
        while True:
            await asyncio.sleep(every)
            await asyncio.to_thread(self.progress, self.snapshot(done=False))

    def snapshot(self, *, done: bool) -> dict:
        """Pages finished (any outcome but not attempted), URLs known to the task (the list and those
        followed in-round), hosts and hosts still with work, seconds since the start. O(hosts)."""
        followed = len(self.hosts.followed)
        finished = sum(r.outcome != Outcome.NOT_ATTEMPTED.value for r in list(self.hosts.results.values()))
        return {"pages": finished, "urls": len(self.items) + followed, "followed": followed,
                "hosts": len(self.hosts.runs), "busy_hosts": 0 if done else self._busy_hosts(),
                "seconds": round(self.clock.now() - self.started, 1), "done": done}

    def _tail_cut(self, now: float) -> bool:
        """Sample the task for the tail judge when a sample is due; True once it says cut."""
        due = self.tail.next_sample_at()
        if due is None or now < due:
            return self.tail.cut()
        return self.tail.sample(now, self._busy_hosts())

    def _busy_hosts(self) -> int:
        """Hosts with work: items queued or in flight (robots.txt hops and in-round links
        included), or pages held behind a robots.txt chain under way on another host. O(hosts)."""
        busy = {name for name in self.sched.hosts()
                if (state := self.sched.host_state(name)).queued or state.in_flight}
        busy.update(run.name for run in self.hosts.runs.values() if run.waiting)
        return len(busy)

    # -- one lease ------------------------------------------------------------------------
    async def _handle(self, host: str, item) -> None:
        if isinstance(item, RobotsFetch):
            await self._robots_hop(host, item)
            return
        run = self.hosts.runs[host]
        if not run.policy.is_fresh(self.clock.now()):
            # The rules expired while the page waited: hold the page, re-check with this lease.
            run.waiting.append(item)
            if run.robots_pending:  # a chain is already under way (a hop on another host)
                self.sched.unlease(host)
                return
            run.robots_pending = True
            await self._robots_hop(host, RobotsFetch(host, run.robots_url))
            return
        if not run.policy.allowed(item.url):
            self.sched.unlease(host)
            self.hosts.finish(item, Outcome.ROBOTS_DENIED)
            return
        await self._fetch_page(run, item)

    async def _robots_hop(self, host: str, item: RobotsFetch) -> None:
        """One request of ``item.owner``'s robots.txt chain, under a lease of ``host`` (where it goes)."""
        run = self.hosts.runs[item.owner]
        resp = await self.fetcher.fetch(item.url, accept_robots=True)
        self.hosts.count(run, resp, robots=True, own_host=host == run.name)
        step = robots_step(item, resp, self.normalizer.normalize, self.conf.fetch.max_redirect_hops)
        end = isinstance(step, RobotsDone)
        status = resp.status if resp.status is not None and resp.status >= 500 else None
        self.sched.release(host, response_time_s=response_time_s(resp), ended_at=self._ended_at(resp),
                           status=status, error=resp.error_class is not None or (end and step.status is None))
        if resp.status is not None:  # an HTTP answer: kept in WARC, as Common Crawl keeps robots.txt
            run.result.robots_captures.append(self.pages.store_robots(item.owner, item.url, resp))
        if end:
            policy = RobotsPolicy.from_fetch(step.status, step.body, self.clock.now(), self.agent, self.conf.robots)
            self.hosts.robots_known(run, policy)
            if self.conf.sitemaps.enabled and not policy.unavailable:  # update makes them due (jobs/sitemap_transforms)
                named = robots_sitemaps(run.robots_url, policy.sitemaps, self.normalizer.normalize, run.name)
                run.result.sitemap_urls = [u for u in named if self.pages.rules.admission.reason(u) is None]
        else:
            await self._queue_hop(step)

    async def _queue_hop(self, hop: RobotsFetch) -> None:
        """Queue a redirect hop on the host it goes to.

        A host of this task: through its own entry (its delay, Crawl-delay and caps hold).
        Any other host: an entry of its own, with its address (the per-IP cap holds) and
        a first request no sooner than one configured delay from now. The task that holds
        that host may be fetching it at this moment and we cannot see its lease; waiting a
        delay first, as a retried task does, keeps a hop from landing right behind its request.
        """
        host = host_of(hop.url)
        if host not in self.hosts.runs and host not in self.foreign:
            self.foreign.add(host)
            ip, error = await self.fetcher.resolve(host)
            self.sched.set_host(host, ip=ip, not_before=self.clock.now() + self.conf.politeness.host_delay_s)
            if error is not None:
                self.sched.park(host, error)  # the owner's held pages share the fate (host_runs)
        self.sched.add_front(host, hop)
        self.wake_driver()

    async def _fetch_page(self, run: HostRun, item: FetchItem) -> None:
        now = self.clock.now()
        waited = (now - self.hosts.queued_at.get(id(item), now)) * 1000.0
        cap = self.conf.sitemaps.max_bytes if item.fetch_kind == SITEMAP else None  # the protocol's cap, not a page's
        resp = await self.fetcher.fetch(item.url, etag=item.etag, last_modified=item.last_modified, max_body_bytes=cap)
        self.hosts.count(run, resp)
        # Release the host the moment its response is in, before parsing and WARC
        # writing, so that CPU work in this task never lengthens a politeness gap
        # nor counts as the server's response time.
        status = resp.status
        wait = retry_after(header(resp.headers, "retry-after"), self.clock.now()) if status in (429, 503) else None
        self.sched.release(run.name, response_time_s=response_time_s(resp), ended_at=self._ended_at(resp),
                           status=status, error=resp.error_class is not None, retry_after_s=wait)
        if resp.error_class not in NOT_SENT:
            self.tail.page_ended(self.clock.now())
        self.wake_driver()  # this task lives on until its page is done; the host need not wait for that
        if status is not None and status >= 400 and run.policy is not None:
            age = self.clock.now() - run.policy.fetched_at
            if age >= self.conf.robots.recheck_after_error_s:
                self.hosts.request_robots(run)
        # The request's task waits for its page, so pages held in memory (fetched or
        # queued) stay within fetch.max_concurrency.
        await self.pages.hand_over(item, resp, waited, wait)
        if self.hosts.follow(item, self.hosts.results[id(item)], self.clock.now()):
            self.wake_driver()  # links followed inside the round (host_runs): new work for idle hosts

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
