"""The hosts of one fetch task: pages admitted behind robots.txt, and every URL's outcome.

Guarantees:
- **robots.txt before pages** (RFC 9309): a host's pages enter the scheduler only
  once its rules are known: seeded from ``hosts`` when fresh, else fetched first
  (a :class:`~crawl_udfs.robots_fetch.RobotsFetch` at the head of its queue).
  Pages then go to the scheduler, or end ``robots_denied`` / ``robots_unavailable``.
- **The first request to a host** waits until the ``next_allowed_at`` the
  previous round persisted; in a retried task also one host delay after the start.
- **One result per fetch-list URL**: pages finished here (denied, deferred, parked,
  not attempted) or by the page work (``crawl_udfs.pages``), never twice.
- **Links followed inside the round** (:meth:`TaskHosts.follow`): a fetched page's
  admitted links to a host of this task are queued on that host like fetch-list
  URLs (same scheduler, same robots.txt rules), when the host's input row gave a
  known set and a cap (``jobs/fetch.fetch_input``; none: nothing is followed), and
  never a URL the crawl DB knows (:class:`~crawl_udfs.known_urls.KnownUrls`) nor one
  this task already holds or followed (the seen set): no URL is fetched twice in a
  round, no known URL again. A host's fetch list plus its followed URLs stay within
  its ``follow_cap`` (generate's per-host cap: budget, trap throttle, window / delay);
  links are followed only as update would follow them (not nofollow, not redirect or
  canonical targets), at depth parent + 1 (admission already applied ``scope.max_depth``
  with the page's depth) and score parent x ``scope.score_decay`` / followed links: the rules
  update gives the same link as a new URL, defined once (``admission.link_depth`` / ``link_score``).
  A link matching one of its host's learnt duplicate URL patterns (``hosts.dup_patterns``,
  ``crawl_udfs.url_patterns.matches``, generate's rule) is not followed (``dedup.pattern_action``
  "skip") or followed with its score x ``dedup.pattern_score_factor`` ("lower").
  A followed URL that was tried comes back as a result with ``in_round`` set
  (:meth:`TaskHosts.followed_results`); one never tried (deferred, not attempted)
  leaves no row: it is still its parent's outlink, and update inserts it unfetched.
- What the task learnt of each host comes back as one :class:`HostResult`
  (:meth:`TaskHosts.host_result`), for ``hosts``.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field

from crawl_udfs.admission import depth_of, link_score, shares_score
from crawl_udfs.config import Config
from crawl_udfs.fetcher import FetchResponse
from crawl_udfs.known_urls import KnownUrls
from crawl_udfs.responses import NOT_SENT
from crawl_udfs.robots import RobotsPolicy, robots_url
from crawl_udfs.robots_fetch import RobotsFetch
from crawl_udfs.rows import FetchItem, FetchResult, HostResult, HostState, Outcome
from crawl_udfs.scheduler import PolitenessScheduler
from crawl_udfs.sitemaps import CHILD_KIND
from crawl_udfs.url_patterns import matches
from crawl_udfs.url_normalize import host_of

#: Park reasons that mean the host cannot be reached at all: its URLs fail, not wait.
_UNREACHABLE = ("dns", "ssrf_blocked")
#: Why a task defers a host whose address another task of the round holds (jobs/resolve.py): its
#: URLs come back untouched and the host is not parked in ``hosts`` (a later round lists it by address).
ADDRESS_ELSEWHERE = "address_elsewhere"


@dataclass
class HostRun:
    """What the task knows of one of its hosts while it runs."""

    name: str
    robots_url: str                       # "http://host:port/robots.txt" of its first URL
    result: HostResult
    policy: RobotsPolicy | None = None
    robots_pending: bool = False          # a robots.txt chain is queued or under way
    waiting: list[FetchItem] = field(default_factory=list)  # pages held until robots is known
    known: KnownUrls | None = None        # url_fps the crawl DB knows on the host (None: follow nothing)
    follow_left: int = 0                  # URLs the host may still be given in this round by following
    dup_patterns: list | None = None      # its URL patterns learnt as duplicates (crawl_udfs.url_patterns)
    durations: deque = field(default_factory=deque)  # seconds of its last requests (politeness.response_time_window)


class TaskHosts:
    """The task's hosts and results; feeds ``sched`` with pages and robots.txt requests."""

    def __init__(self, conf: Config, sched: PolitenessScheduler):
        self.conf, self.sched = conf, sched
        self.agent = conf.crawler.agent_name
        self.runs: dict[str, HostRun] = {}
        self.results: dict[int, FetchResult] = {}   # id(item) -> result (written by parse threads too)
        self.queued_at: dict[int, float] = {}       # id(item) -> when it was admitted
        self.seen: set[int] = set()                 # url_fps of the fetch list and of every URL followed
        self.followed: list[FetchItem] = []         # URLs followed inside the round, in the order queued

    # -- admission ------------------------------------------------------------------------
    def admit(self, items: list[FetchItem], seeds: dict[str, HostState], start: float, retried: bool) -> None:
        by_host: dict[str, list[FetchItem]] = defaultdict(list)
        for item in items:
            by_host[item.host].append(item)
        delay = self.conf.politeness.host_delay_s
        for host, host_items in by_host.items():
            seed = seeds.get(host)
            run = HostRun(host, robots_url(host_items[0].url), HostResult(host=host),
                          durations=deque(maxlen=self.conf.politeness.response_time_window))
            self.runs[host] = run
            not_before = seed.next_allowed_at if seed and seed.next_allowed_at else None
            if retried:
                not_before = max(not_before or 0.0, start + delay)
            self.sched.set_host(host, not_before=not_before,
                                consecutive_failures=seed.consecutive_failures if seed else None)
            if seed and seed.robots_fetched_at is not None:
                policy = RobotsPolicy.from_fetch(seed.robots_status, seed.robots_body, seed.robots_fetched_at,
                                                 self.agent, self.conf.robots)
                if policy.is_fresh(start):
                    self.set_policy(run, policy)
            run.waiting.extend(host_items)
            for item in host_items:
                self.queued_at[id(item)] = start
                self.seen.add(item.url_fp)
            if seed and seed.known is not None and seed.follow_cap is not None:
                run.known, run.follow_left = seed.known, seed.follow_cap - len(host_items)
                run.dup_patterns = seed.dup_patterns if self.conf.dedup.learn_patterns else None
            if run.policy is None:
                self.request_robots(run)
            else:
                self.release_waiting(run)

    def request_robots(self, run: HostRun) -> None:
        if not run.robots_pending:
            run.robots_pending = True
            self.sched.add_front(run.name, RobotsFetch(run.name, run.robots_url))

    def robots_known(self, run: HostRun, policy: RobotsPolicy) -> None:
        """The chain of ``run``'s robots.txt ended: apply the rules to the pages held for them."""
        run.robots_pending = False
        self.set_policy(run, policy)
        if policy.unavailable:
            self.sched.park(run.name, "robots_unavailable")
        self.release_waiting(run)

    def set_policy(self, run: HostRun, policy: RobotsPolicy) -> None:
        run.policy = policy
        r = run.result
        r.robots_status, r.robots_body = policy.status, policy.body
        r.robots_fetched_at, r.robots_expires_at = policy.fetched_at, policy.expires_at
        r.crawl_delay_s, r.sitemaps = policy.crawl_delay, list(policy.sitemaps)
        if policy.crawl_delay is not None:
            self.sched.set_host(run.name, crawl_delay=policy.crawl_delay)

    def release_waiting(self, run: HostRun) -> None:
        """Move pages held for robots.txt into the scheduler, or finish them per the rules."""
        items, run.waiting = run.waiting, []
        policy = run.policy
        for item in items:
            if policy.unavailable:
                self.finish(item, Outcome.ROBOTS_UNAVAILABLE, error_class="robots_unavailable",
                            error_message=f"robots.txt status {policy.status}")
            elif not policy.allowed(item.url):
                self.finish(item, Outcome.ROBOTS_DENIED)
            else:
                self.sched.add(run.name, item)

    # -- links followed inside the round -------------------------------------------------------
    def follow(self, parent: FetchItem, result: FetchResult, now: float) -> int:
        """Queue the links of ``parent``'s page that this task may fetch in the round; how many were queued."""
        if not result.outlinks:
            return 0
        follow_nofollow = self.conf.parse.follow_nofollow
        # redirect and canonical targets are not followed here (they wait for update): the links that share
        # the page's score; the score and depth rules are update's (crawl_udfs.admission.link_score/link_depth)
        links = [o for o in result.outlinks if shares_score(o.kind, o.nofollow, follow_nofollow=follow_nofollow)]
        score = link_score(parent.score, False, len(links), self.conf.scope.score_decay)
        queued = 0
        for link in links:
            if link.kind == CHILD_KIND:  # a sitemap, read as one only from its crawl-DB row (update inserts it)
                continue
            run = self.runs.get(link.host or host_of(link.url))
            if (run is None or run.follow_left <= 0 or link.url_fp in self.seen or link.url_fp in run.known
                    or self.sched.host_state(run.name).parked
                    or (run.policy is not None and not run.policy.allowed(link.url))):
                continue
            item_score = score
            if matches(link.url, run.dup_patterns) is not None:  # a copy of another URL of the host
                if self.conf.dedup.pattern_action == "skip":
                    continue
                item_score = score * self.conf.dedup.pattern_score_factor
            item = FetchItem(url=link.url, url_fp=link.url_fp, host=run.name, depth=depth_of(parent.depth, link.kind),
                             score=item_score, in_round=True, source_fp=parent.url_fp)
            self.seen.add(item.url_fp)
            run.follow_left -= 1
            self.followed.append(item)
            self.queued_at[id(item)] = now
            if run.policy is None:
                run.waiting.append(item)  # released with the rest once the rules are known
            else:
                self.sched.add(run.name, item)
            queued += 1
        return queued

    def followed_results(self) -> list[FetchResult]:
        """The results of the followed URLs that were tried, marked ``in_round`` with their depth, score, source."""
        out = []
        for item in self.followed:
            r = self.results.get(id(item))
            if r is None or r.outcome in (Outcome.DEFERRED.value, Outcome.NOT_ATTEMPTED.value):
                continue
            r.in_round, r.depth, r.score, r.source_fp = True, item.depth, item.score, item.source_fp
            out.append(r)
        return out

    def count(self, run: HostRun, resp: FetchResponse, *, robots: bool = False, own_host: bool = True) -> None:
        """Count one request of ``run`` (``own_host``: it went to ``run``'s host, not a redirect target)."""
        if resp.error_class not in NOT_SENT:
            run.result.requests += 1
            run.result.robots_requests += robots
            if own_host and resp.t_total_ms is not None:
                run.durations.append(resp.t_total_ms / 1000.0)
        run.result.bytes_received += resp.wire_bytes
        if resp.ip and own_host:
            run.result.ip = resp.ip

    # -- outcomes -------------------------------------------------------------------------
    def finish(self, item: FetchItem, outcome: Outcome, **extra) -> None:
        self.results[id(item)] = FetchResult(url=item.url, url_fp=item.url_fp, host=item.host,
                                             outcome=outcome.value, redirect_hops=item.redirect_hops, **extra)

    def finish_unattempted(self, why: str) -> None:
        """The round ended (``why``: "task_budget" ran out, or "tail_cut"): every URL still
        queued or held comes back untouched."""
        for item in self.sched.drain():
            self._unattempted(item, why)
        for run in self.runs.values():
            for item in run.waiting:
                self._unattempted(item, why)
            run.waiting.clear()

    def _unattempted(self, item, why: str) -> None:
        if not isinstance(item, RobotsFetch) and id(item) not in self.results:
            self.finish(item, Outcome.NOT_ATTEMPTED, error_class=why)

    def collect_deferred(self) -> None:
        for item, reason in self.sched.take_deferred():
            if isinstance(item, RobotsFetch):
                # Parked before its rules were known: the pages held for them share the fate.
                run = self.runs[item.owner]
                run.robots_pending = False
                for page in run.waiting:
                    self._finish_parked(page, reason)
                run.waiting = []
            else:
                self._finish_parked(item, reason)

    def _finish_parked(self, item: FetchItem, reason: str) -> None:
        if reason in _UNREACHABLE:
            self.finish(item, Outcome.ERROR, error_class=reason)
        elif reason == "robots_unavailable":
            self.finish(item, Outcome.ROBOTS_UNAVAILABLE, error_class=reason)
        else:
            self.finish(item, Outcome.DEFERRED, error_class=reason)

    def host_result(self, run: HostRun) -> HostResult:
        """What the task learnt of ``run``'s host, for ``hosts`` (its politeness state at the end).

        ``delay_s`` is the host's pace: the seconds one more request would take, as the
        scheduler would space it: its delay (the largest of the configured one, Crawl-delay
        and the one learnt from response times) plus the back-off in force, plus the longest
        of the host's last requests (a slow-drip host's request lasts the whole timeout,
        which no delay counts). Generate divides the window by it (jobs/generate.py).
        """
        state = self.sched.host_state(run.name)
        r = run.result
        r.next_allowed_at = state.next_allowed_at if state.next_allowed_at not in (None, -math.inf) else None
        r.consecutive_failures = state.consecutive_failures
        parked = state.parked and state.park_reason != ADDRESS_ELSEWHERE  # this task's, not the host's
        r.parked, r.park_reason = parked, state.park_reason if parked else None
        r.ip = r.ip or state.ip
        r.delay_s = (self.sched.delay_s(run.name) + self.sched.backoff_s(run.name)
                     + max(run.durations, default=0.0))
        return r
