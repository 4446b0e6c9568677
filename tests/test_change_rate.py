"""Pure tests of crawl_udfs.change_rate: the estimator on simulated Poisson pages, the interval policies."""

from __future__ import annotations

import math
import random

import pytest

from crawl_udfs import change_rate as R

MEAN_VISIT = 1000.0  # seconds between visits, on average


def simulate(rate: float, n_visits: int, seed: int, *, dated: bool = False, keep: int = 100_000):
    """A page changing as a Poisson process of ``rate``, visited at irregular intervals (uniform in
    0.2..1.8 × MEAN_VISIT); returns (history, unchanged span, visits seen changed, time observed).
    ``dated``: the server sends Last-Modified (the time of the last change before each visit)."""
    rnd = random.Random(seed)
    hist, span, n_changed, total = [], 0.0, 0, 0.0
    for _ in range(n_visits):
        gap = rnd.uniform(0.2, 1.8) * MEAN_VISIT
        t, last = 0.0, None
        while True:  # the change times inside the gap
            t += rnd.expovariate(rate)
            if t > gap:
                break
            last = t
        changed = last is not None
        since = (gap - last) if (changed and dated) else None
        hist, span = R.observe(hist, span, gap, changed, since, keep)
        n_changed += changed
        total += gap
    return hist, span, n_changed, total


def estimate(hist, span, prior_rate=1.0 / MEAN_VISIT, k=0.01):
    return R.change_rate(hist, span, prior_rate, k)


# rate × mean visit interval: from pages visited 10× faster than they change to 3× slower
@pytest.mark.parametrize("changes_per_visit", [0.1, 0.5, 1.0, 2.0, 3.0])
def test_the_estimator_finds_the_true_rate_from_irregular_visits(changes_per_visit):
    rate = changes_per_visit / MEAN_VISIT
    errors, naive_errors = [], []
    for seed in range(3):
        hist, span, x, total = simulate(rate, 1500, seed)
        errors.append(abs(estimate(hist, span) / rate - 1))
        naive_errors.append(abs(R.naive_rate(x, total) / rate - 1))
    assert max(errors) < 0.2, errors  # stated tolerance: 20 % on 1,500 visits (measured: at most 16 %)
    if changes_per_visit >= 1.0:  # the naive estimator counts one change per visit: far below
        assert max(errors) < min(naive_errors) / 2, (errors, naive_errors)


def test_last_modified_dates_find_rates_the_visits_cannot_resolve():
    """5 changes per visit: nearly every visit sees a change, the visits alone say "fast" and no more;
    the Last-Modified dates (the time since the last change) still give the rate."""
    rate = 5.0 / MEAN_VISIT
    hist, span, _, _ = simulate(rate, 300, 7, dated=True)
    assert abs(estimate(hist, span) / rate - 1) < 0.15
    assert hist.count(0.0) > 250  # dated changes are kept as 0-length changed intervals


def test_a_first_copys_last_modified_places_a_page_among_its_hosts_pages():
    """Pages of one host whose rates span 1/100 .. 1/100,000 s, each seen once: the time since each one's
    last change (exponential at its rate) moves its estimate from the host's rate toward its own."""
    assert R.first_copy(None) is None and R.first_copy(0.0) is None and R.first_copy(-5.0) is None
    assert R.first_copy(3600.0) == ([0.0], 3600.0)
    rng = random.Random(7)
    rates = [10 ** rng.uniform(-5, -2) for _ in range(2000)]
    host = sum(rates) / len(rates)
    err_prior = err_first = 0.0
    for rate in rates:
        hist, span = R.first_copy(rng.expovariate(rate))
        err_prior += abs(math.log(host / rate))
        err_first += abs(math.log(R.change_rate(hist, span, host, 1.0) / rate))
    assert err_first < 0.7 * err_prior, (err_first / len(rates), err_prior / len(rates))


def test_a_new_page_starts_at_its_hosts_rate_and_evidence_moves_it():
    fast_host = 1 / 60.0
    assert math.isclose(R.change_rate([], 0.0, fast_host, 1.0), fast_host, rel_tol=1e-6)
    slow_host = 1 / 10_000.0
    assert R.change_rate([], 0.0, slow_host, 1.0) < R.change_rate([], 0.0, fast_host, 1.0)
    hist, span, _, _ = simulate(2 / MEAN_VISIT, 400, 3)  # a lot of evidence beats the prior
    assert abs(R.change_rate(hist, span, slow_host, 1.0) * MEAN_VISIT / 2 - 1) < 0.2


def test_the_host_rate_pools_revisits_with_the_bias_reduced_estimator():
    rnd, rate, interval = random.Random(5), 2.0 / MEAN_VISIT, MEAN_VISIT
    n = 2000
    x = sum(rnd.random() < -math.expm1(-rate * interval) for _ in range(n))
    assert abs(R.host_rate(n, x, n * interval, 604800.0) / rate - 1) < 0.1
    assert R.host_rate(0, 0, 0.0, 604800.0) == 1 / 604800.0
    assert 0 < R.host_rate(50, 0, 50 * 3600.0, 604800.0) < 1 / (50 * 3600.0)  # no change seen: slow, never 0
    assert R.host_rate(n, x, n * interval, 604800.0) > 1.5 * x / (n * interval)  # not changes / time


def test_history_keeps_the_last_intervals_and_the_unchanged_share():
    hist, span = [], 0.0
    for i in range(10):
        hist, span = R.observe(hist, span, 100.0, i % 2 == 0, None, keep=4)
        hist, span = R.observe(hist, span, 100.0, False, None, keep=4)
    assert len(hist) == 4
    assert 100.0 * 4 < span < 100.0 * 15  # about the unchanged time of the kept visits, not all 15 of them
    rate = R.change_rate(hist, span, 1e-3, 0.01)  # the ratio survives the cut
    full_h, full_s = [100.0] * 5, 100.0 * 15
    assert abs(rate / R.change_rate(full_h, full_s, 1e-3, 0.01) - 1) < 0.15


# -- the interval -----------------------------------------------------------------------------------
MIN, MAX = 60.0, 1e7


def test_adaptive_interval_is_not_proportional_and_fast_changers_get_less():
    mu, w = 300.0, 1.0
    rates = [10 ** (e / 4) for e in range(-28, 0)]  # 1e-7 .. 0.56 per second
    iv = [R.adaptive_interval(r, w, mu, MIN, MAX) for r in rates]
    # slow pages: more changes -> more visits, but less than in proportion
    assert iv[0] > iv[4] and (1 / iv[4]) / (1 / iv[0]) < rates[4] / rates[0]
    best = iv.index(min(iv))
    assert 0 < best < len(iv) - 1 and iv[-1] > iv[best]  # past the optimum, faster changers get LESS
    assert iv[-1] == MAX  # mu*rate/w >= 1: not worth its fetches


def test_adaptive_interval_grows_with_the_multiplier_and_shrinks_with_the_weight_and_is_clamped():
    r = 1e-4
    assert R.adaptive_interval(r, 1.0, 10.0, MIN, MAX) < R.adaptive_interval(r, 1.0, 100.0, MIN, MAX)
    assert R.adaptive_interval(r, 4.0, 100.0, MIN, MAX) < R.adaptive_interval(r, 1.0, 100.0, MIN, MAX)
    assert R.adaptive_interval(r, 1.0, 1e-12, MIN, MAX) == MIN
    assert R.adaptive_interval(r, 0.0, 100.0, MIN, MAX) == MAX
    assert R.adaptive_interval(1e-6, 1.0, 1e5, MIN, 3600.0) == 3600.0  # unclamped: ~6e5 s


def test_the_multiplier_spends_the_budget_and_beats_uniform_and_proportional():
    rnd = random.Random(1)
    pages = [(10 ** rnd.uniform(-6, -2), 1.0, 1) for _ in range(100)]
    budget = len(pages) / 3600.0  # an hour each, on average
    mu = R.multiplier(pages, budget, 1.0, 1e9)
    ivs = [R.adaptive_interval(r, w, mu, 1.0, 1e9) for r, w, _ in pages]
    assert abs(sum(1 / i for i in ivs) / budget - 1) < 0.01
    total = sum(r for r, _, _ in pages)

    def fresh(intervals):
        return sum(R.freshness(r, i) for (r, _, _), i in zip(pages, intervals)) / len(pages)
    uniform = fresh([3600.0] * len(pages))
    proportional = fresh([total / (r * budget) for r, _, _ in pages])
    assert fresh(ivs) > uniform + 0.02 and uniform > proportional


def test_nutch_policy_shrinks_on_change_grows_otherwise_and_clamps():
    assert R.nutch_interval(1000.0, True, 0.4, 0.2, MIN, MAX) == pytest.approx(800.0)
    assert R.nutch_interval(1000.0, False, 0.4, 0.2, MIN, MAX) == pytest.approx(1400.0)
    assert R.nutch_interval(70.0, True, 0.4, 0.2, MIN, MAX) == MIN
    assert R.nutch_interval(9e6, False, 0.4, 0.2, MIN, MAX) == MAX
