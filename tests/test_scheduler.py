"""The politeness scheduler, against a fake clock that the tests advance by hand (no sleeping)."""

from __future__ import annotations

import pickle
import time
from collections import Counter, deque
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawl_udfs import config
from crawl_udfs.scheduler import HostPoliteness, PolitenessScheduler

T0 = 1000.0


class FakeClock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


def make(**overrides):
    conf = config.defaults().with_overrides(**{f"politeness__{k}": v for k, v in overrides.items()})
    clock = FakeClock()
    return PolitenessScheduler(conf.politeness, clock=clock), clock


def first_allowed_at(sched, clock, step=0.001, limit=10_000.0):
    """Probe: the first clock tick (on a 1 ms grid) at which lease() succeeds; leaves it leased."""
    start = clock.t
    while clock.t - start < limit:
        got = sched.lease()
        if got is not None:
            return got
        clock.t = round(clock.t + step, 6)
    raise AssertionError("never allowed")


def gap_after(sched, clock, host, **release_kw):
    """Lease one item of host, release it with release_kw; return the time until the next lease is allowed."""
    assert sched.lease()[0] == host
    sched.release(host, **release_kw)
    end = clock.t
    wake = sched.next_wakeup()
    if wake > end:
        assert sched.lease() is None                      # nothing before the wake-up time
        clock.t = wake - 1e-6
        assert sched.lease() is None                      # not a microsecond early
    clock.t = wake
    return wake - end


# -- delay between requests, response-time factor ----------------------------------------------
@pytest.mark.parametrize("host_delay, factor, rt, expected", [
    (1.0, 10.0, None, 1.0),     # no response time known: host delay
    (1.0, 10.0, 0.05, 1.0),     # fast host: host delay wins
    (1.0, 10.0, 0.5, 5.0),      # slow host: 10 × 0.5 s
    (2.0, 4.0, 1.0, 4.0),
    (1.0, 10.0, 30.0, 60.0),    # capped by max_response_time_delay_s
    (0.0, 0.0, 3.0, 0.0),       # politeness off: no wait at all
])
def test_delay_between_requests(host_delay, factor, rt, expected):
    sched, clock = make(host_delay_s=host_delay, response_time_factor=factor)
    for i in range(3):
        sched.add("a.example", i)
    assert gap_after(sched, clock, "a.example", response_time_s=rt, status=200) == pytest.approx(expected)
    assert sched.lease() == ("a.example", 1)
    assert sched.host_state("a.example").next_allowed_at == pytest.approx(clock.t)


def test_delay_runs_from_the_end_of_the_request():
    sched, clock = make(host_delay_s=2.0)
    sched.add("a", 1), sched.add("a", 2)
    assert sched.lease() == ("a", 1)
    clock.advance(7.0)                                 # a long request
    sched.release("a", response_time_s=0.01, status=200)
    assert sched.next_wakeup() == T0 + 9.0
    clock.advance(1.999)
    assert sched.lease() is None
    clock.advance(0.001)
    assert sched.lease() == ("a", 2)


def test_ended_at_is_where_the_delay_starts():
    sched, clock = make(host_delay_s=2.0)
    for i in range(3):
        sched.add("a", i)
    assert sched.lease() == ("a", 0)
    clock.advance(1.0)
    sched.release("a", response_time_s=0.01, status=200, ended_at=T0 + 0.6)  # read at 0.6, released at 1.0
    assert sched.next_wakeup() == T0 + 2.6
    clock.t = T0 + 2.6 - 1e-6
    assert sched.lease() is None
    clock.t = T0 + 2.6
    assert sched.lease() == ("a", 1)
    clock.advance(0.5)
    sched.release("a", response_time_s=0.01, status=200, ended_at=clock.t + 0.01)  # read now, plus a margin
    assert sched.next_wakeup() == T0 + 3.1 + 2.01


def test_recent_response_time_is_the_max_of_the_window():
    sched, clock = make(host_delay_s=1.0, response_time_factor=10.0, response_time_window=3)
    for i in range(6):
        sched.add("a", i)
    gaps = [gap_after(sched, clock, "a", response_time_s=rt, status=200) for rt in (0.4, 0.01, 0.01, 0.01, 0.2)]
    assert gaps == pytest.approx([4.0, 4.0, 4.0, 1.0, 2.0])  # 0.4 s is remembered for three responses
    assert sched.host_state("a").last_response_time_s == 0.2


# -- in-flight caps ---------------------------------------------------------------------------
def test_one_in_flight_per_host():
    sched, clock = make(host_delay_s=1.0)
    for i in range(3):
        sched.add("a", i)
    assert sched.lease() == ("a", 0)
    clock.advance(1000.0)                              # however long it takes
    assert sched.lease() is None
    assert sched.next_wakeup() is None                 # waits on the request in flight
    assert sched.host_state("a").in_flight == 1 and sched.in_flight() == 1 and sched.pending() == 2
    sched.release("a", response_time_s=0.0, status=200)
    assert sched.lease() is None
    clock.advance(1.0)
    assert sched.lease() == ("a", 1)


def test_per_host_cap_above_one():
    sched, clock = make(max_in_flight_per_host=2, max_in_flight_per_ip=10)
    for i in range(4):
        sched.add("a", i)
    assert [sched.lease(), sched.lease(), sched.lease()] == [("a", 0), ("a", 1), None]
    sched.release("a", response_time_s=0.0, status=200)
    assert sched.lease() is None                        # a slot is free but the delay runs
    clock.advance(1.0)
    assert sched.lease() == ("a", 2)


def test_release_without_lease_is_an_error():
    sched, _ = make()
    sched.add("a", 1)
    for end in (lambda h: sched.release(h, response_time_s=0.1), sched.unlease):
        with pytest.raises(ValueError):
            end("a")
        with pytest.raises(ValueError):
            end("nowhere")


def test_unlease_sends_nothing_and_changes_no_timing():
    sched, clock = make(host_delay_s=1.0, max_in_flight_per_ip=1)
    for h in ("a", "b"):
        sched.set_host(h, ip="10.3.3.3")
    sched.add("a", 1), sched.add("a", 2), sched.add("a", 3)
    assert sched.lease() == ("a", 1)
    sched.release("a", response_time_s=0.0, status=500)
    clock.t = sched.next_wakeup()                                  # T0 + 1 + 5 s back-off
    sched.add("b", 1)
    sched.set_host("b", not_before=clock.t)                        # due with a, queued after it
    before = sched.host_state("a")
    assert sched.lease() == ("a", 2) and sched.lease() is None     # b waits on the IP
    sched.unlease("a")                                             # robots.txt denies a's page 2
    assert sched.host_state("a") == replace(before, queued=1)      # timing, failures, requests as they were
    assert sched.in_flight() == 0
    assert sched.lease() == ("b", 1)                               # the IP slot is handed on
    sched.unlease("b")
    assert sched.lease() == ("a", 3)                               # no delay: nothing was sent


def test_per_ip_cap_with_shared_ip_hosts():
    sched, clock = make(max_in_flight_per_ip=2)
    for h in ("a", "b", "c", "d"):
        sched.add(h, h + "1"), sched.add(h, h + "2")
    for h in ("a", "b", "c"):
        sched.set_host(h, ip="10.0.0.1")
    sched.set_host("d", ip="10.0.0.2")
    # c is blocked by its IP's cap only: it must not block d
    assert [sched.lease(), sched.lease(), sched.lease(), sched.lease()] == [
        ("a", "a1"), ("b", "b1"), ("d", "d1"), None]
    assert sched.next_wakeup() is None                 # c waits on a or b
    clock.advance(0.5)
    sched.release("a", response_time_s=0.01, status=200)
    # the freed slot goes to c at once (a must wait its delay anyway)
    assert sched.next_wakeup() == clock.t
    assert sched.lease() == ("c", "c1")
    assert sched.lease() is None
    clock.advance(1.0)                                 # a's delay is over, but the IP is full again
    assert sched.lease() is None and sched.next_wakeup() is None
    sched.release("d", response_time_s=0.01, status=200)
    assert sched.lease() is None                       # d's IP is free, d's delay is not over
    sched.release("b", response_time_s=0.01, status=200)
    assert sched.lease() == ("a", "a2")


def test_ip_blocked_hosts_are_served_in_turn():
    """Five hosts on one IP with a cap of 1: round robin, none starved."""
    sched, clock = make(max_in_flight_per_ip=1, host_delay_s=1.0)
    hosts = [f"h{i}" for i in range(5)]
    for h in hosts:
        sched.set_host(h, ip="192.0.2.7")
        for j in range(3):
            sched.add(h, j)
    order = []
    while sched.pending():
        got = sched.lease()
        if got is None:
            clock.t = sched.next_wakeup()
            continue
        order.append(got)
        clock.advance(0.1)
        sched.release(got[0], response_time_s=0.01, status=200)
    assert order == [(h, j) for j in range(3) for h in hosts]


def test_parking_a_host_waiting_on_its_ip_passes_the_slot_on():
    sched, _ = make(max_in_flight_per_ip=1)
    for h in ("a", "b", "c"):
        sched.set_host(h, ip="10.9.9.9")
        sched.add(h, 1)
    assert sched.lease() == ("a", 1) and sched.lease() is None   # b and c wait on a's IP
    sched.release("a", response_time_s=0.0, status=200)            # the slot is b's ...
    sched.park("b", "caller")                                      # ... but b goes away
    assert sched.lease() == ("c", 1)


def test_rekeying_a_host_waiting_on_its_ip_passes_the_slot_on():
    sched, clock = make(max_in_flight_per_ip=1)
    for h in ("a", "b", "c"):
        sched.set_host(h, ip="10.9.9.9")
        sched.add(h, 1)
    sched.add("b", 2)
    assert sched.lease() == ("a", 1) and sched.lease() is None
    clock.advance(1.0)
    sched.release("a", response_time_s=0.0, status=200)            # the slot is b's ...
    sched.set_host("b", not_before=clock.t + 100.0)                # ... but b must wait now
    assert sched.lease() == ("c", 1)


def test_ip_learnt_while_in_flight_counts_against_the_ip():
    sched, _ = make(max_in_flight_per_ip=1)
    sched.add("a", 1)
    sched.add("b", 1)
    assert sched.lease() == ("a", 1)                   # robots.txt fetch, before DNS
    sched.set_host("a", ip="10.1.1.1")
    sched.set_host("b", ip="10.1.1.1")
    assert sched.lease() is None
    sched.set_host("b", ip="10.2.2.2")                 # b moves away: no longer blocked
    assert sched.lease() == ("b", 1)


# -- robots Crawl-delay -----------------------------------------------------------------------
@pytest.mark.parametrize("crawl_delay, expected_gap, parked", [
    (0.5, 1.0, False),          # below host_delay_s: host delay wins
    (5.0, 5.0, False),
    (60.0, 60.0, False),        # exactly max_crawl_delay_s is obeyed
    (60.5, None, True),         # longer: the host is deferred, never crawled faster
])
def test_crawl_delay(crawl_delay, expected_gap, parked):
    sched, clock = make(host_delay_s=1.0, max_crawl_delay_s=60.0)
    sched.add_front("a", "robots")
    sched.add("a", "p1"), sched.add("a", "p2")
    assert sched.lease() == ("a", "robots")
    sched.release("a", response_time_s=0.01, status=200)
    sched.set_host("a", crawl_delay=crawl_delay)       # learnt after the robots fetch ended
    st_ = sched.host_state("a")
    assert st_.parked is parked and st_.crawl_delay == crawl_delay
    if parked:
        assert st_.park_reason == "crawl_delay_too_long"
        assert sched.take_deferred() == [("p1", "crawl_delay_too_long"), ("p2", "crawl_delay_too_long")]
        sched.add("a", "p3")                           # a later item is deferred too
        assert sched.take_deferred() == [("p3", "crawl_delay_too_long")]
        clock.advance(1e6)
        assert sched.lease() is None and sched.next_wakeup() is None and sched.pending() == 0
        return
    assert sched.next_wakeup() == pytest.approx(T0 + expected_gap)
    clock.t = sched.next_wakeup()
    assert gap_after(sched, clock, "a", response_time_s=0.01, status=200) == pytest.approx(expected_gap)


def test_add_front_puts_robots_first():
    sched, _ = make()
    sched.add("a", "p1")
    sched.add_front("a", "robots")
    assert sched.lease() == ("a", "robots")


# -- failures, back-off, parking ---------------------------------------------------------------
OK, ERR, E500, E404 = dict(status=200), dict(error=True), dict(status=500), dict(status=404)


@pytest.mark.parametrize("outcomes, gaps", [
    ([ERR, E500, ERR, ERR], [6.0, 11.0, 21.0, 41.0]),      # 1 s delay + 5, 10, 20, 40
    ([ERR, ERR, OK, ERR], [6.0, 11.0, 1.0, 6.0]),          # success resets the count
    ([E500, E404, E500], [6.0, 1.0, 6.0]),                 # a 4xx is an answer, not a failure
    ([dict(status=429)], [6.0]),                            # 429 without Retry-After backs off too
])
def test_backoff_doubles_and_resets(outcomes, gaps):
    sched, clock = make(host_delay_s=1.0, backoff_base_s=5.0, backoff_max_s=600.0, max_consecutive_failures=99)
    for i in range(len(outcomes) + 1):
        sched.add("a", i)
    got = [gap_after(sched, clock, "a", response_time_s=None, **o) for o in outcomes]
    assert got == pytest.approx(gaps)
    # what the task reports as the host's pace (host_runs) is the gap the scheduler applied last
    assert sched.delay_s("a") + sched.backoff_s("a") == pytest.approx(gaps[-1])


def test_backoff_is_capped():
    sched, clock = make(host_delay_s=1.0, backoff_base_s=5.0, backoff_max_s=12.0, max_consecutive_failures=999)
    for i in range(200):
        sched.add("a", i)
    got = [gap_after(sched, clock, "a", response_time_s=None, error=True) for _ in range(150)]
    assert got[:4] == pytest.approx([6.0, 11.0, 13.0, 13.0]) and got[-1] == pytest.approx(13.0)


@pytest.mark.parametrize("seeded, outcomes, parked", [
    (0, [ERR, ERR, ERR], True),
    (0, [ERR, E500, OK, ERR, ERR], False),
    (2, [ERR], True),           # a count carried over from the last round
    (2, [OK, ERR, ERR], False),
])
def test_parking_after_consecutive_failures(seeded, outcomes, parked):
    sched, clock = make(max_consecutive_failures=3, backoff_base_s=1.0)
    items = list(range(len(outcomes) + 2))
    for i in items:
        sched.add("a", i)
    sched.set_host("a", consecutive_failures=seeded)
    for o in outcomes:
        got = first_allowed_at(sched, clock)
        assert got[0] == "a"
        sched.release("a", response_time_s=None, **o)
    s = sched.host_state("a")
    assert s.parked is parked
    if parked:
        assert s.park_reason == "failures"
        assert sched.take_deferred() == [(i, "failures") for i in items[len(outcomes):]]
        assert sched.take_deferred() == []             # cleared on read
        assert sched.pending() == 0 and sched.next_wakeup() is None
    else:
        assert sched.take_deferred() == [] and sched.pending() == 2


@pytest.mark.parametrize("status, retry_after, gap, parked", [
    (429, 30.0, 30.0, False),   # honoured: more than the 1 + 5 s back-off
    (503, 30.0, 30.0, False),
    (503, 2.0, 6.0, False),     # shorter than the back-off: back-off wins
    (429, 300.0, 300.0, False),  # exactly max_retry_after_s
    (429, 301.0, 301.0, True),  # too long: defer the host's URLs to a later round
    (503, 9999.0, 9999.0, True),
    (500, 30.0, 6.0, False),    # Retry-After counts only with 429 and 503
    (200, 30.0, 1.0, False),
])
def test_retry_after(status, retry_after, gap, parked):
    sched, clock = make(host_delay_s=1.0, backoff_base_s=5.0, max_retry_after_s=300.0)
    sched.add("a", 1), sched.add("a", 2)
    assert sched.lease() == ("a", 1)
    sched.release("a", response_time_s=0.1, status=status, retry_after_s=retry_after)
    s = sched.host_state("a")
    assert s.next_allowed_at == pytest.approx(T0 + gap)   # kept for the hosts table either way
    assert s.parked is parked
    if parked:
        assert s.park_reason == "retry_after" and sched.take_deferred() == [(2, "retry_after")]
        assert sched.next_wakeup() is None
    else:
        assert sched.next_wakeup() == pytest.approx(T0 + gap)


def test_caller_park():
    sched, _ = make()
    sched.add("a", 1), sched.add("a", 2), sched.add("b", 1)
    assert sched.lease() == ("a", 1)
    sched.park("a", "budget")
    sched.release("a", response_time_s=0.1, status=200)  # the request in flight still ends
    assert sched.take_deferred() == [(2, "budget")]
    assert sched.lease() == ("b", 1) and sched.lease() is None


def test_a_held_host_keeps_its_items_and_is_leased_only_once_unheld():
    sched, clock = make(host_delay_s=1.0, max_in_flight_per_ip=1)
    sched.add("a", 1), sched.add("a", 2), sched.add("b", 1)
    sched.hold("a")                                    # its address is being looked up
    assert sched.lease() == ("b", 1) and sched.lease() is None
    assert sched.pending() == 2 and sched.host_state("a").queued == 2
    sched.release("b", response_time_s=0.0, status=200)
    assert sched.next_wakeup() is None                 # only the unhold can make progress
    sched.set_host("a", ip="10.0.0.1")
    sched.add("c", 1), sched.set_host("c", ip="10.0.0.1")
    sched.hold("c")
    sched.unhold("a")
    assert sched.lease() == ("a", 1)                   # its per-IP cap holds from its first request
    sched.unhold("c")
    assert sched.lease() is None                       # c shares a's address, whose one slot is taken
    sched.hold("a"), sched.release("a", response_time_s=0.0, status=200)
    assert sched.lease() == ("c", 1)                   # the slot passed on; a stays held
    clock.advance(5.0)
    assert sched.lease() is None and sched.pending() == 1
    sched.park("a", "dns")                             # a lookup that failed: the items go to deferred
    assert sched.take_deferred() == [(2, "dns")] and sched.pending() == 0


# -- not_before ---------------------------------------------------------------------------------
def test_not_before():
    sched, clock = make(host_delay_s=1.0)
    sched.add("a", 1), sched.add("b", 1)
    sched.set_host("a", not_before=T0 + 50.0)          # next_allowed_at from the last round
    sched.set_host("b", not_before=T0 - 50.0)          # in the past: no effect
    assert sched.lease() == ("b", 1) and sched.lease() is None
    sched.release("b", response_time_s=0.0, status=200)
    assert sched.next_wakeup() == T0 + 50.0
    clock.t = T0 + 49.999
    assert sched.lease() is None
    clock.t = T0 + 50.0
    assert sched.lease() == ("a", 1)
    sched.add("b", 2)
    sched.set_host("b", not_before=T0 + 60.0)          # raises a running delay, never lowers it
    sched.set_host("b", not_before=T0 + 55.0)
    assert sched.host_state("b").next_allowed_at == T0 + 60.0
    assert sched.next_wakeup() == T0 + 60.0


# -- next_wakeup in every state ---------------------------------------------------------------
def test_next_wakeup_in_every_state():
    sched, clock = make(host_delay_s=2.0, max_in_flight_per_ip=1)
    assert sched.next_wakeup() is None                 # empty
    sched.add("a", 1)
    assert sched.next_wakeup() == T0                   # ready now
    sched.add("a", 2)
    assert sched.lease() == ("a", 1)
    assert sched.next_wakeup() is None                 # only waits on a's request in flight
    clock.advance(1.0)
    sched.release("a", response_time_s=0.0, status=200)
    assert sched.next_wakeup() == T0 + 3.0             # waits for the delay
    clock.advance(5.0)
    assert sched.next_wakeup() == T0 + 6.0             # overdue: now, never in the past
    sched.set_host("a", ip="10.0.0.9")
    assert sched.lease() == ("a", 2)
    sched.set_host("b", ip="10.0.0.9")
    sched.add("b", 1)
    assert sched.next_wakeup() is None                 # b waits only on a's IP slot
    sched.add("c", 1)
    sched.set_host("c", not_before=T0 + 20.0)
    assert sched.next_wakeup() == T0 + 20.0            # c waits for its time
    sched.park("c", "test")
    assert sched.next_wakeup() is None                 # parked: nothing to wait for
    sched.release("a", response_time_s=0.0, status=200)
    assert sched.next_wakeup() == clock.t              # b got the IP slot
    assert sched.drain() == [1]
    assert sched.next_wakeup() is None                 # drained


# -- drain --------------------------------------------------------------------------------------
def test_drain():
    sched, clock = make()
    for h in ("a", "b"):
        for i in range(3):
            sched.add(h, (h, i))
    assert sched.lease() == ("a", ("a", 0))
    assert sorted(sched.drain()) == [("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]
    assert sched.pending() == 0 and sched.in_flight() == 1 and sched.drain() == []
    assert sched.lease() is None
    sched.release("a", response_time_s=0.0, status=200)  # the in-flight one still ends
    assert sched.in_flight() == 0 and sched.lease() is None and sched.next_wakeup() is None
    sched.add("b", ("b", 9))                            # and the scheduler stays usable
    assert sched.lease() == ("b", ("b", 9))


# -- fairness -----------------------------------------------------------------------------------
def test_many_hosts_fifo_fair():
    """1000 hosts × 3 items: every host's first item goes before any second one, in the order added."""
    sched, clock = make(host_delay_s=1.0)
    hosts = [f"h{i:04d}.example" for i in range(1000)]
    for j in range(3):
        for h in hosts:
            sched.add(h, j)
    order = []
    while sched.pending():
        got = sched.lease()
        if got is None:
            clock.t = sched.next_wakeup()
            continue
        order.append(got)
        clock.advance(0.0001)
        sched.release(got[0], response_time_s=0.0, status=200)
    assert order == [(h, j) for j in range(3) for h in hosts]
    assert {sched.host_state(h).requests for h in sched.hosts()} == {3}


def test_host_state_snapshot_and_pickle():
    sched, _ = make()
    sched.add("a", 1)
    s = sched.host_state("a")
    assert isinstance(s, HostPoliteness) and s.next_allowed_at is None and s.queued == 1
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(KeyError):
        sched.host_state("unknown")


# -- randomized simulation of a fetch loop --------------------------------------------------------
OUTCOMES = [  # (status, error, retry_after_s), weighted towards success
    (200, False, None), (200, False, None), (200, False, None), (304, False, None), (404, False, None),
    (500, False, None), (None, True, None), (429, False, 3.0), (503, False, 0.5), (429, False, 400.0),
]


class Model:
    """What the delays must be, recomputed independently from the documented rule."""

    def __init__(self, p):
        self.p = p
        self.recent: dict[str, deque] = {}
        self.failures: Counter = Counter()
        self.crawl_delay: dict[str, float] = {}
        self.next_allowed: dict[str, float] = {}
        self.last_end: dict[str, float] = {}

    def delay(self, host):
        p, rec = self.p, self.recent.get(host)
        rt = min(p.response_time_factor * max(rec), p.max_response_time_delay_s) if rec else 0.0
        return max(p.host_delay_s, self.crawl_delay.get(host, 0.0), rt)

    def end(self, host, t, rt, status, error, retry_after):
        p = self.p
        self.last_end[host] = t
        if rt is not None:
            self.recent.setdefault(host, deque(maxlen=p.response_time_window)).append(rt)
        d = self.delay(host)
        if error or (status is not None and (status >= 500 or status == 429)):
            self.failures[host] += 1
            d += min(p.backoff_base_s * 2.0 ** (self.failures[host] - 1), p.backoff_max_s)
        else:
            self.failures[host] = 0
        nxt = t + d
        if retry_after is not None and status in (429, 503):
            nxt = max(nxt, t + retry_after)
        self.next_allowed[host] = max(self.next_allowed.get(host, -1e18), nxt)
        return (retry_after is not None and status in (429, 503) and retry_after > p.max_retry_after_s) \
            or self.failures[host] >= p.max_consecutive_failures


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_hosts=st.integers(1, 10), n_ips=st.integers(1, 4), host_cap=st.integers(1, 2), ip_cap=st.integers(1, 3),
    concurrency=st.integers(1, 8), host_delay=st.sampled_from([0.0, 0.5, 1.0]),
    budget=st.sampled_from([15.0, 60.0, 1e9]), rnd=st.randoms(use_true_random=False),
)
def test_simulated_fetch_loop_keeps_every_invariant(n_hosts, n_ips, host_cap, ip_cap, concurrency, host_delay,
                                                    budget, rnd):
    sched, clock = make(max_in_flight_per_host=host_cap, max_in_flight_per_ip=ip_cap, host_delay_s=host_delay,
                        backoff_base_s=0.5, backoff_max_s=4.0, max_consecutive_failures=3, max_crawl_delay_s=10.0)
    p = config.defaults().with_overrides(
        politeness__host_delay_s=host_delay, politeness__backoff_base_s=0.5, politeness__backoff_max_s=4.0,
        politeness__max_consecutive_failures=3, politeness__max_crawl_delay_s=10.0).politeness
    model = Model(p)
    hosts = [f"h{i}" for i in range(n_hosts)]
    ip_of = {h: (None if rnd.random() < 0.2 else f"10.0.0.{rnd.randrange(n_ips)}") for h in hosts}
    queue = {h: deque() for h in hosts}      # the model's view of each host's FIFO
    parked: set[str] = set()
    added, leased, deferred, drained = [], [], [], []
    for h in hosts:
        if ip_of[h]:
            sched.set_host(h, ip=ip_of[h])
        if rnd.random() < 0.2:
            nb = T0 + rnd.uniform(0, 5)
            sched.set_host(h, not_before=nb)
            model.next_allowed[h] = nb
        for j in range(rnd.randrange(0, 6)):
            sched.add(h, (h, j))
            queue[h].append((h, j))
            added.append((h, j))
    running: list[tuple[float, str, tuple]] = []  # (end time, host, item)
    fl_host, fl_ip = Counter(), Counter()

    def take_deferred():
        for item, reason in sched.take_deferred():
            assert item[0] in parked and reason
            queue[item[0]].remove(item)
            deferred.append(item)

    while True:
        now = clock.t
        if now >= T0 + budget:
            for item in sched.drain():
                queue[item[0]].remove(item)
                drained.append(item)
        while len(running) < concurrency and (got := sched.lease()) is not None:
            h, item = got
            # FIFO per host; start >= the delay that applied after the previous end; caps
            assert queue[h].popleft() == item and h not in parked
            assert now >= model.next_allowed.get(h, -1e18) - 1e-9
            fl_host[h] += 1
            assert fl_host[h] <= host_cap
            if ip_of[h]:
                fl_ip[ip_of[h]] += 1
                assert fl_ip[ip_of[h]] <= ip_cap
            leased.append(item)
            running.append((now + rnd.choice([0.0, 0.01, 0.05, 0.3, 2.0]), h, item))
        if len(running) < concurrency:
            # work-conserving: no host the rules allow now was left waiting, and next_wakeup is exact
            def eligible(h):
                return queue[h] and h not in parked and fl_host[h] < host_cap
            ip_free = {h: not ip_of[h] or fl_ip[ip_of[h]] < ip_cap for h in hosts}
            times = [max(model.next_allowed.get(h, -1e18), now) for h in hosts if eligible(h)
                     and (ip_free[h] or model.next_allowed.get(h, -1e18) > now)]
            assert all(t > now for t in times)
            wake = sched.next_wakeup()
            assert (wake is None) == (not times)
            if times:
                assert wake == pytest.approx(min(times), abs=1e-9)
        else:
            wake = sched.next_wakeup()
        if not running and wake is None:
            assert sched.pending() == 0
            break
        ends = [e for e, _, _ in running]
        t_next = min(ends if len(running) >= concurrency or wake is None else ends + [wake])
        clock.t = max(clock.t, t_next)
        running.sort(key=lambda r: r[0])
        while running and running[0][0] <= clock.t:
            end, h, item = running.pop(0)
            fl_host[h] -= 1
            if ip_of[h]:
                fl_ip[ip_of[h]] -= 1
            if rnd.random() < 0.1:                       # nothing sent (robots.txt denied it)
                sched.unlease(h)
                continue
            status, error, ra = rnd.choice(OUTCOMES)
            rt = None if error else rnd.choice([0.01, 0.05, 0.2])
            sched.release(h, response_time_s=rt, status=status, error=error, retry_after_s=ra)
            if model.end(h, clock.t, rt, status, error, ra):
                parked.add(h)
            o = rnd.choice([h, rnd.choice(hosts)])       # this host or any other (maybe waiting on its IP)
            if o not in parked and rnd.random() < 0.1:   # a robots Crawl-delay learnt mid-way
                cd = rnd.choice([0.2, 2.0, 30.0])
                sched.set_host(o, crawl_delay=cd)
                model.crawl_delay[o] = cd
                if cd > p.max_crawl_delay_s:
                    parked.add(o)
                elif o in model.last_end:
                    model.next_allowed[o] = max(model.next_allowed[o], model.last_end[o] + cd)
            if o not in parked and rnd.random() < 0.05:
                sched.park(o, "caller")
                parked.add(o)
            assert sched.host_state(h).parked == (h in parked)
            assert o not in sched.hosts() or sched.host_state(o).parked == (o in parked)
        take_deferred()
    take_deferred()
    assert sorted(leased + deferred + drained) == sorted(added)   # every item exactly once
    assert sched.in_flight() == 0 and sched.pending() == 0


# -- scale ----------------------------------------------------------------------------------------
def test_100k_hosts_ops_per_second(capsys):
    sched, clock = make(host_delay_s=1.0, max_in_flight_per_ip=2)
    n_hosts, per_host = 100_000, 3
    t = time.perf_counter()
    for j in range(per_host):
        for i in range(n_hosts):
            sched.add(f"h{i}", j)
    for i in range(n_hosts):                           # ten hosts to an IP, at most two of them in flight
        sched.set_host(f"h{i}", ip=f"10.0.{i // 2560}.{i // 10 % 256}")
    ops, running = 0, []
    while sched.pending() or running:
        while len(running) < 256 and (got := sched.lease()) is not None:
            running.append(got[0])
            ops += 1
        for h in running:
            sched.release(h, response_time_s=0.05, status=200)
            ops += 1
        running.clear()
        clock.advance(0.05)
        wake = sched.next_wakeup()
        if wake is not None and wake > clock.t:
            clock.t = wake
    elapsed = time.perf_counter() - t
    assert ops >= 2 * n_hosts * per_host
    with capsys.disabled():
        print(f"\nscheduler: {n_hosts} hosts x {per_host} items, {ops} lease+release ops "
              f"in {elapsed:.2f} s = {ops / elapsed:,.0f} ops/s")
    assert elapsed < 60.0                              # generous: 2 shared cores; typically a few s
