"""Retry-After judged server-side, with the test web asking longer than the crawler's own back-off.

After a 429 the scheduler waits ``host_delay_s`` plus its failure back-off
(``backoff_base_s`` doubled per consecutive failure) anyway. A Retry-After
shorter than that is obeyed by a crawler that ignores the header, so the
check could not fail; the test web's default ``retry_after_s`` is longer than
the pause after each of the 429s this test draws, and the test says so first.
"""

from __future__ import annotations

import pytest

from crawl_udfs import config
from crawl_udfs.partition import fetch_partition
from crawl_udfs.rows import FetchItem
from crawl_udfs.url_normalize import fingerprint, host_of
from tests.urls import normalize
from tests.testweb import Knobs, TestWeb

DELAY = 1.0
THROTTLES = 2                      # 429 windows per host (the knob's default is 3; 2 keeps this under a minute)
HOSTS = ("hostile-throttle-seconds.test", "hostile-throttle-date.test")

pytestmark = pytest.mark.slow


def test_retry_after_longer_than_the_back_off_is_obeyed(tmp_path):
    knobs = Knobs(throttle_count=THROTTLES)
    with TestWeb(tmp_path / "web", n_hosts=15, seed=3, kinds=["hostile"], knobs=knobs) as web:
        conf = config.load(overrides=[f'net.hosts_file="{web.hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]',
                                      f"politeness.host_delay_s={DELAY}", "fetch.task_budget_s=60"])
        p = conf.politeness
        backoffs = [DELAY + min(p.backoff_base_s * 2 ** n, p.backoff_max_s) for n in range(THROTTLES)]
        assert knobs.retry_after_s > max(backoffs), "Retry-After within the back-off: this test could not fail"
        urls = [normalize(web.url(h, path)) for h in HOSTS for path in sorted(web.plan.host(h).pages)]
        items = [FetchItem(url=u, url_fp=fingerprint(u), host=host_of(u)) for u in urls]
        results = [r for r in fetch_partition(items, conf, warc_dir=str(tmp_path / "w"),
                                              warc_name=lambda i: f"t-{i}.warc.gz") if hasattr(r, "url")]
        log = web.log()
        v = web.violations(host_delay_s=DELAY, max_in_flight_per_addr=p.max_in_flight_per_ip)
    assert v.retry_after == [], v.summary()
    for host in HOSTS:
        pages = sorted((r for r in log if r["host"] == host and r["path"] != "/robots.txt"), key=lambda r: r["start"])
        statuses = [r["status"] for r in pages]
        assert statuses[:THROTTLES] == [429] * THROTTLES, (host, statuses)  # the windows were opened
        assert statuses[THROTTLES:] and set(statuses[THROTTLES:]) == {200}, (host, statuses)  # and waited out
        for before, after in zip(pages, pages[1:THROTTLES + 1]):
            # the wait the server asked for, which is longer than the back-off would have been
            assert after["start"] - before["end"] >= knobs.retry_after_s - 1, (host, before, after)
    # the URLs answered 429 come back as such (for update to retry); every other one was fetched
    throttled = [r for r in results if r.status_code == 429]
    assert len(throttled) == THROTTLES * len(HOSTS)
    assert {r.url for r in results if r.outcome == "ok"} == set(urls) - {r.url for r in throttled}
