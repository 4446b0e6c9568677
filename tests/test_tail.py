"""The tail judge (crawl_udfs/tail.py) driven by an injected clock: no sleeping, no network."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from crawl_udfs import config
from crawl_udfs.tail import SAMPLE_S, TailJudge


def fetch_conf(**kw):
    base = dict(tail_check_after_s=30.0, tail_busy_host_share=0.1, tail_rate_share=0.1, tail_rate_window_s=5.0,
                tail_patience_s=10.0)
    base.update(kw)
    return SimpleNamespace(**base)


def run(judge: TailJudge, until: float, busy, pages_per_s, t: float = 0.0) -> float | None:
    """Drive ``judge`` from ``t`` to ``until``: ``busy(t)`` hosts with work, ``pages_per_s(t)`` pages ending.

    Returns when it said cut (None: never)."""
    step = 0.1
    owed = 0.0
    while t < until:
        owed += pages_per_s(t) * step
        while owed >= 1.0:
            judge.page_ended(t)
            owed -= 1.0
        if judge.sample(t, busy(t)):
            return t
        t = round(t + step, 6)
    return None


def test_defaults_load_and_a_busy_task_is_never_cut():
    judge = TailJudge(config.load().fetch, start=0.0)
    assert judge.enabled
    assert run(judge, 900.0, busy=lambda t: 100, pages_per_s=lambda t: 100.0) is None


def test_a_thin_tail_of_hosts_is_cut_after_the_patience():
    judge = TailJudge(fetch_conf(tail_rate_share=0.0), start=0.0)
    # 100 hosts busy for 40 s, then 5 (fewer than 10 % of the peak): thin from 40 s, cut 10 s later
    cut = run(judge, 200.0, busy=lambda t: 100 if t < 40 else 5, pages_per_s=lambda t: 100.0)
    assert cut == pytest.approx(50.0, abs=SAMPLE_S + 0.11) and judge.reason == "hosts"


def test_no_cut_in_the_first_seconds():
    judge = TailJudge(fetch_conf(tail_rate_share=0.0), start=100.0)
    # thin from the task's 2nd second on: no cut before check_after (30 s)
    cut = run(judge, 300.0, busy=lambda t: 100 if t < 102 else 1, pages_per_s=lambda t: 50.0, t=100.0)
    assert cut == pytest.approx(130.0, abs=SAMPLE_S + 0.11)


def test_the_rate_test_follows_the_tasks_own_peak():
    judge = TailJudge(fetch_conf(tail_busy_host_share=0.0), start=0.0)
    # 200 pages/s for 60 s, then 15 pages/s (7.5 % of the peak) with every host still busy
    cut = run(judge, 300.0, busy=lambda t: 50, pages_per_s=lambda t: 200.0 if t < 60 else 15.0)
    # thin once the 5 s window holds only the slow pages (~64 s), cut patience later
    assert 70.0 <= cut <= 76.0 and judge.reason == "rate"
    # a steady slow task (never more than 15 pages/s) is not a tail
    steady = TailJudge(fetch_conf(tail_busy_host_share=0.0), start=0.0)
    assert run(steady, 300.0, busy=lambda t: 50, pages_per_s=lambda t: 15.0) is None


def test_a_tail_that_recovers_restarts_the_patience():
    judge = TailJudge(fetch_conf(tail_rate_share=0.0), start=0.0)
    # thin 40-48 s (8 s < patience), busy again 48-60 s (in-round links gave hosts new work), thin from 60 s
    cut = run(judge, 200.0, busy=lambda t: 5 if 40 <= t < 48 or t >= 60 else 100, pages_per_s=lambda t: 50.0)
    assert cut == pytest.approx(70.0, abs=SAMPLE_S + 0.11)


def test_shares_of_zero_turn_the_cut_off():
    judge = TailJudge(fetch_conf(tail_busy_host_share=0.0, tail_rate_share=0.0), start=0.0)
    assert not judge.enabled and judge.next_sample_at() is None
    assert run(judge, 900.0, busy=lambda t: 100 if t < 10 else 1, pages_per_s=lambda t: 0.0) is None


def test_a_sample_is_taken_once_a_second_and_the_cut_sticks():
    judge = TailJudge(fetch_conf(tail_check_after_s=0.0, tail_patience_s=0.0, tail_rate_share=0.0), start=0.0)
    assert judge.next_sample_at() == 0.0
    assert not judge.sample(0.0, 10)
    assert judge.next_sample_at() == SAMPLE_S
    assert not judge.sample(0.5, 0)       # between samples: not looked at
    assert judge.sample(1.0, 0) and judge.cut() and judge.cut_at == 1.0
    assert judge.next_sample_at() is None and judge.sample(2.0, 10)


# -- the cut in a fetch task, against the test web's slow hosts --------------------------------

DELAY = 0.3
BUDGET = 60.0
FACTOR = 2.0        # politeness.response_time_factor (a loaded machine must not make the sites slow hosts)
DRIP_TIMEOUT = 8.0   # fetch.total_timeout_s: a drip request lasts this long, so one is in flight at the cut
SLOW = ("hostile-drip.test", "robots-slow.test")


def test_slow_hosts_do_not_hold_the_round(tmp_path):
    """Eight ordinary sites finish in a few seconds; a slow-drip host (every request runs to the
    timeout) and a host learnt slow (robots.txt answered after 2.5 s: 5 s between requests) hold
    the rest. The task ends soon after the sites (the drip request in flight at the cut runs to its
    end), far before its 60 s budget; the slow hosts' leftovers come back not_attempted and untouched,
    and their pace says generate will give them short lists."""
    import time

    from crawl_udfs.partition import fetch_partition
    from crawl_udfs.rows import FetchItem, FetchResult, HostResult
    from crawl_udfs.url_normalize import fingerprint, host_of
    from tests.testweb import TestWeb
    from tests.testweb.model import Knobs
    from tests.urls import normalize

    knobs = Knobs(robots_slow_s=2.5, drip_interval_s=0.5, drip_total_s=60.0)
    with TestWeb(tmp_path / "web", n_hosts=50, seed=5, kinds=["site", "robots", "hostile"], knobs=knobs) as web:
        conf = config.load(overrides=[
            f'net.hosts_file="{web.hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]',
            f"politeness.host_delay_s={DELAY}", f"fetch.task_budget_s={BUDGET}",
            f"politeness.response_time_factor={FACTOR}", f"fetch.total_timeout_s={DRIP_TIMEOUT}",
            # thin once only the two slow hosts of the ten have work (the rate test: tests above)
            "fetch.tail_check_after_s=3", "fetch.tail_patience_s=2", "fetch.tail_busy_host_share=0.25",
            "fetch.tail_rate_share=0"])
        sites = [h for h in web.plan.by_kind("site") if len(h.pages) >= 6 and h.robots_variant != "disallow-all"][:8]
        assert len(sites) == 8
        urls = [normalize(h.url(p)) for h in sites for p in sorted(h.pages)[:6]]
        urls += [normalize(web.url("hostile-drip.test", f"/?n={i}")) for i in range(10)]
        urls += [normalize(web.url("robots-slow.test", p)) for p in sorted(web.plan.host("robots-slow.test").pages)]
        items = [FetchItem(url=u, url_fp=fingerprint(u), host=host_of(u)) for u in urls]
        t0 = time.time()
        out = list(fetch_partition(items, conf, warc_dir=str(tmp_path / "w"), warc_name=lambda i: f"t-{i}.warc.gz"))
        elapsed = time.time() - t0
        log = [r for r in web.log() if r["ua"] == conf.crawler.user_agent]
        v = web.violations(host_delay_s=DELAY, max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)
    results = [r for r in out if isinstance(r, FetchResult)]
    hosts = {h.host: h for h in out if isinstance(h, HostResult)}
    assert v.clean, v.summary()
    ordinary = [r for r in results if r.host not in SLOW]
    sites_done = max(r["end"] for r in log if r["host"] not in SLOW) - t0
    assert all(r.outcome != "not_attempted" for r in ordinary)
    # Near when the sites finished: check_after / patience / the drip request in flight, not the budget.
    assert elapsed < sites_done + DRIP_TIMEOUT + 4.0 < BUDGET / 2, (elapsed, sites_done)
    left = [r for r in results if r.outcome == "not_attempted"]
    assert {r.host for r in left} == set(SLOW), {r.host for r in left}
    assert all(r.error_class == "tail_cut" and r.fetch_time is None and r.warc_filename is None for r in left)
    requested = {(r["host"], r["path"]) for r in log}
    assert not [r.url for r in left if (r.host, r.url.split(str(web.port), 1)[1]) in requested]
    # The drip request in flight at the cut ran to its end (the timeout), and came back as such.
    drip = [r for r in results if r.host == "hostile-drip.test" and r.outcome != "not_attempted"]
    assert len(drip) >= 1 and drip[-1].t_total_ms >= DRIP_TIMEOUT * 1000 - 50, drip
    assert elapsed >= drip[-1].t_total_ms / 1000  # the task waited for it
    print(f"\ntask {elapsed:.1f}s (budget {BUDGET:.0f}s), sites done at {sites_done:.1f}s; "
          f"{len(left)} slow-host URLs not attempted; drip request: {drip[-1].outcome} {drip[-1].error_class} "
          f"after {drip[-1].t_total_ms / 1000:.1f}s; paces: "
          + ", ".join(f"{h} {hosts[h].delay_s:.2f}s" for h in SLOW))
    # Their pace: the drip host's request lasts the timeout (plus delay and back-off), the other's
    # delay was learnt from a 1 s answer (x 10): next round's lists are a few URLs, not BUDGET / DELAY.
    assert hosts["hostile-drip.test"].delay_s >= DRIP_TIMEOUT + DELAY
    assert hosts["robots-slow.test"].delay_s >= FACTOR * knobs.robots_slow_s
    assert all(DELAY <= hosts[h.name].delay_s < 2.0 for h in sites)
