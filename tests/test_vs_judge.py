"""The judge of bench/crawl_vs_scrapy.py on hand-made log lines (no server, no crawler: milliseconds)."""

from __future__ import annotations

import pytest

from bench import vs_judge
from tests.testweb.sites import build_plan

T0 = 1_000.0


@pytest.fixture(scope="module")
def plan():
    return build_plan(60, seed=7, port=8080)


def rec(host, path, start, end, status=200, **kw):
    return {"host": host, "addr": "127.10.0.1", "path": path, "start": start, "end": end, "status": status,
            "ua": "x", "bait": False, "aborted": False, "disallowed": False, "in_retry_after": False, **kw}


def html_pages(plan):
    h = next(h for h in plan.by_kind("site") if h.variant == "ordinary" and h.size >= 10)
    return h, [p for p, pg in h.pages.items() if pg.behaviour == "html" and p != "/"]


def test_content_pages_are_distinct_2xx_html_after_normalisation(plan):
    h, (path, other, third, *_) = html_pages(plan)
    file_path = next(p for p, pg in h.pages.items() if pg.behaviour == "file")
    sess = plan.host("trap-session.test")
    lines = [
        rec(h.name, "/", T0 + 1, T0 + 2),
        rec(h.name, "/", T0 + 3, T0 + 4),                              # the same URL again: counted once
        rec(h.name, path + "?utm_source=x", T0 + 5, T0 + 6),          # tracking parameter: same as path
        rec(h.name, path, T0 + 7, T0 + 8),
        rec(h.name, "/robots.txt", T0, T0 + 0.5),                     # not content
        rec(h.name, file_path, T0 + 9, T0 + 10),                      # a PDF / image / CSV: not HTML
        rec(h.name, other, T0 + 9, T0 + 10, status=503),             # an HTML page, but not 2xx
        rec(h.name, third, T0 + 9, T0 + 10, aborted=True),            # cut off: not a page fetched
        rec(sess.name, "/;jsessionid=AB12", T0 + 11, T0 + 12),
        rec(sess.name, "/?sid=CD34", T0 + 13, T0 + 14),               # the session trap's home again
    ]
    assert vs_judge.first_content_ends(plan, lines) == [T0 + 2, T0 + 6, T0 + 12]


def test_rate_at_t_counts_pages_ended_by_t0_plus_t():
    ends = [T0 + 1, T0 + 30, T0 + 60, T0 + 61]
    assert vs_judge.pages_per_s(ends, T0, 60) == pytest.approx(3 / 60)
    assert vs_judge.pages_per_s(ends, T0, 120) == pytest.approx(4 / 120)


def test_duty_cycle_is_the_union_of_requests_in_flight_clipped_to_the_window():
    lines = [rec("a", "/", T0 - 5, T0 + 10),     # clipped at t0: 10 s
             rec("b", "/", T0 + 5, T0 + 20),     # overlaps the first: adds 10 s
             rec("c", "/", T0 + 40, T0 + 50),    # alone: 10 s
             rec("d", "/", T0 + 95, T0 + 130)]   # clipped at t0 + 100: 5 s
    assert vs_judge.duty_cycle(lines, T0, 100) == pytest.approx(0.35)
    assert vs_judge.duty_cycle([], T0, 100) == 0.0


def test_fetch_duty_counts_a_host_waiting_its_delay_as_fetched_and_a_longer_gap_as_idle():
    polite = [rec("a", f"/{i}", T0 + i, T0 + i + 0.001) for i in range(30)]      # one page a second for 30 s
    later = [rec("a", f"/{i}", T0 + i, T0 + i + 0.001) for i in range(50, 60)]   # 20 s idle, then 10 s more
    lines = polite + later
    assert vs_judge.duty_cycle(lines, T0, 60) == pytest.approx(40 * 0.001 / 60)  # in flight: the server's speed
    assert vs_judge.duty_cycle(lines, T0, 60, slack_s=1.0) == pytest.approx(40 / 60, abs=1e-3)
    assert vs_judge.duty_cycle(lines, T0, 60, slack_s=0.5) == pytest.approx(40 * 0.501 / 60, abs=1e-3)


def test_judge_counts_only_requests_started_inside_the_window(plan):
    h, (path, *_) = html_pages(plan)
    lines = [rec(h.name, "/", T0 + 1, T0 + 2), rec(h.name, path, T0 + 2.2, T0 + 3),  # 0.2 s gap: too close
             rec(h.name, "/late.html", T0 + 100, T0 + 101)]
    v = vs_judge.judge("x", plan, lines, T0, 60, (60,), host_delay_s=1.0, max_in_flight_per_addr=2)
    assert (v.requests, v.pages, len(v.violations.too_close)) == (2, 2, 1)
    assert v.rates == (pytest.approx(2 / 60),)


def test_polite_bound_is_one_page_per_delay_up_to_each_hosts_reachable_pages(plan):
    pages = vs_judge.content_pages(plan)
    site = next(h for h in plan.by_kind("site") if h.size >= 10 and not h.crawl_delay)
    slow = next(h for h in plan.hosts.values() if (h.crawl_delay or 0) > 1 and pages[h.name])
    assert 1 <= pages[site.name] <= site.size                           # its HTML pages (not its PDFs, CSVs)
    assert pages["trap-calendar.test"] is None                          # no end: a page per delay
    assert pages["robots-disallow-all.test"] == pages["robots-5xx.test"] == 0   # not even the home page
    assert pages["robots-allow-all.test"] > 0
    one = {site.name: pages[site.name]}
    assert vs_judge.polite_bound(plan, one, 5.0, 1.0) == 5             # robots.txt at 0, pages at 1..5
    assert vs_judge.polite_bound(plan, one, 5.0, 2.0) == 2
    assert vs_judge.polite_bound(plan, one, 10_000.0, 1.0) == pages[site.name]
    delay = slow.crawl_delay                                           # Crawl-delay above the host delay wins
    assert vs_judge.polite_bound(plan, {slow.name: 10_000}, 10 * delay, 1.0) == 10
    assert vs_judge.polite_bound(plan, pages, 60.0, 0.0) is None       # delay 0: only the CPU bounds


def test_a_log_that_keeps_the_delay_never_beats_the_polite_bound(plan):
    pages = vs_judge.content_pages(plan)
    h = next(h for h in plan.by_kind("site") if h.size >= 20 and not h.crawl_delay)
    urls = [u for u in h.reachable() if vs_judge.content_url(plan, rec(h.name, u[len(h.base_url):], 0, 0))]
    polite = [rec(h.name, u[len(h.base_url):], T0 + 1.0 * (i + 1), T0 + 1.0 * (i + 1) + 0.01) for i, u in enumerate(urls)]
    bound = vs_judge.polite_bound(plan, {h.name: pages[h.name]}, 10.0, 1.0)
    ends = vs_judge.first_content_ends(plan, polite)
    assert vs_judge.pages_per_s(ends, T0, 10.0) * 10.0 <= bound
    hasty = [rec(h.name, u[len(h.base_url):], T0 + 0.3 * (i + 1), T0 + 0.3 * (i + 1) + 0.01) for i, u in enumerate(urls)]
    assert vs_judge.pages_per_s(vs_judge.first_content_ends(plan, hasty), T0, 10.0) * 10.0 > bound
