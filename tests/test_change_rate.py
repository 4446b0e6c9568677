"""Pure tests of crawl_udfs.change_rate: the estimator on simulated Poisson pages, the interval policies."""

from __future__ import annotations

import math
import random

import pytest

from crawl_udfs import change_rate as R
from crawl_udfs import rate_prior as RP

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


# -- the host's mixture prior ----------------------------------------------------------------------
NO_MASS = [0.0] * len(RP.LOG_GRID)


def two_class_host(seed: int, *, mixture: bool, horizon: float = 2300.0, step: float = 20.0, default: float = 400.0):
    """A host of 24 pages, 7 changing every 120 s and 17 every 12,000 s (the staleness bench's two-class web),
    each first seen with a dated copy, then re-visited every 160 s (fast) or 1,100 s (slow) for ``horizon``
    seconds as update would: the host's pooled revisits and, with ``mixture``, its mass grow each step.
    Returns (true rate, estimate) per page at the end, and the host's weights."""
    rnd = random.Random(seed)
    rates = [1 / 120.0] * 7 + [1 / 12000.0] * 17
    pages = []
    for rate in rates:
        hist, span = R.first_copy(rnd.expovariate(rate))
        changes, t = [], 0.0
        while t < horizon:
            t += rnd.expovariate(rate)
            changes.append(t)
        pages.append(dict(rate=rate, hist=hist, span=span, changes=changes, last=0.0, next=rnd.uniform(0, 200),
                          every=160.0 if rate > 1e-3 else 1100.0))
    mass, visits, changed_n, spent, now = list(NO_MASS), 0, 0, 0.0, 0.0
    while now < horizon:
        now += step
        prior = R.host_rate(visits, changed_n, spent, default)
        weights = RP.mixture_weights(prior, mass, 1.0)
        for p in (p for p in pages if p["next"] <= now):
            gap, changed = now - p["last"], any(p["last"] < c <= now for c in p["changes"])
            p["hist"], p["span"] = R.observe(p["hist"], p["span"], gap, changed, None, 32)
            visits, changed_n, spent = visits + 1, changed_n + changed, spent + gap
            if mixture:
                resp = RP.posterior(p["hist"], p["span"], weights)
                mass = [m + x for m, x in zip(mass, RP.revisit_mass(resp, gap, default))]
            p["last"], p["next"] = now, now + p["every"]
    prior = R.host_rate(visits, changed_n, spent, default)
    weights = RP.mixture_weights(prior, mass, 1.0)
    if mixture:
        return [(p["rate"], RP.estimate(p["hist"], p["span"], weights, 1.0)[0]) for p in pages], weights
    return [(p["rate"], R.change_rate(p["hist"], p["span"], prior, 1.0)) for p in pages], weights


def mixture_cases(seed: int, n: int = 30) -> list[tuple]:
    """(history, unchanged span, host rate, host mass, gap, weight) rows for pinning the engines' evaluations
    of the mixture's formulas to the plain ones (tests/test_schedule.py, tests/test_duck_transition.py)."""
    rnd = random.Random(seed)
    rows = []
    for _ in range(n):
        hist = [rnd.choice([0.0, 10 ** rnd.uniform(0, 6)]) for _ in range(rnd.randint(0, 6))]
        mass = rnd.choice([list(NO_MASS), [rnd.random() * 10 ** rnd.uniform(-3, 2) for _ in NO_MASS]])
        rows.append((hist, rnd.choice([0.0, 10 ** rnd.uniform(0, 7)]), 10 ** rnd.uniform(-8, -1), mass,
                     10 ** rnd.uniform(0, 5), 10 ** rnd.uniform(-3, 2)))
    return rows


def check_mixture_case(case: tuple, got: dict) -> None:
    """``got``: the engine's ``weights``, ``resp``, ``mean``, ``sd``, ``mass``, ``decided``, ``recheck``,
    ``given_up`` of ``case`` (``decided``: decided_rate(host rate, host rate / 10, weight, 50); ``recheck``:
    recheck_interval(gap, weight, 60, 1e7); ``given_up``: adaptive_interval(host rate, weight, 50, 60, 1e7,
    given_up_s=recheck))."""
    hist, span, prior, mass, gap, w = case
    weights = RP.mixture_weights(prior, mass, 1.0)
    resp = RP.posterior(hist, span, weights)
    mean = RP.log_mean(resp)
    assert got["weights"] == pytest.approx(weights, rel=1e-9, abs=1e-12)
    assert got["resp"] == pytest.approx(resp, rel=1e-9, abs=1e-12)
    assert got["mean"] == pytest.approx(mean, rel=1e-9)
    assert got["sd"] == pytest.approx(RP.log_sd(resp, mean), rel=1e-6, abs=1e-9)
    assert got["mass"] == pytest.approx(RP.revisit_mass(resp, gap, 400.0), rel=1e-9, abs=1e-12)
    assert got["decided"] == pytest.approx(R.decided_rate(prior, prior / 10, w, 50.0), rel=1e-12)
    recheck = R.recheck_interval(gap, w, 60.0, 1e7)
    assert got["recheck"] == pytest.approx(recheck, rel=1e-12)
    assert got["given_up"] == pytest.approx(R.adaptive_interval(prior, w, 50.0, 60.0, 1e7, given_up_s=recheck),
                                            rel=1e-9)


def test_a_hosts_mixture_prior_learns_its_two_classes_and_estimates_each_page_in_its_own():
    """One Gamma around the host's pooled rate pulls both classes toward the middle (a slow page seen
    unchanged for a while still gets the fast pages' pull: about 2x its rate); the mixture, fitted from the
    host's own revisits, lets each page's prior be its class's (session 26 measured 1.7-1.8x on the
    staleness bench's crawls, and the nonparametric prior re-estimated from them ~1.0)."""
    def log_errors(mixture: bool, slow: bool) -> list[float]:
        out = []
        for seed in range(4):
            pages, _ = two_class_host(seed, mixture=mixture)
            out += [abs(math.log(est / rate)) for rate, est in pages if (rate < 1e-3) == slow]
        return sorted(out)
    med = {}
    for slow in (True, False):
        for mixture in (False, True):
            errors = log_errors(mixture, slow)
            med[slow, mixture] = errors[len(errors) // 2]
    assert med[True, True] < 0.5 * med[True, False], med  # the slow pages: measured 0.44 against 0.96
    assert med[False, True] < 1.1 * med[False, False], med  # the fast ones, well observed: no worse
    _, weights = two_class_host(0, mixture=True)
    def near(rate: float) -> float:  # the weight within half a decade of ``rate``
        return sum(w for g, w in zip(RP.LOG_GRID, weights) if abs(g - math.log(rate)) < math.log(10) / 2)
    weights = [w / sum(weights) for w in weights]
    assert near(1 / 120.0) > 0.15 and near(1 / 12000.0) > 0.4, weights  # both classes, each about its share
    assert sum(RP.mixture_weights(1e-4, NO_MASS, 1.0)) == pytest.approx(RP.BASE_WEIGHT, rel=1e-3)  # the base's weight


def test_a_new_page_on_a_host_without_revisits_still_starts_at_its_hosts_rate():
    for prior in (1 / 60.0, 1 / 86400.0, 1 / (90 * 86400.0)):
        rate, low, resp = RP.estimate([], 0.0, RP.mixture_weights(prior, NO_MASS, 1.0), 1.0)
        assert rate == pytest.approx(prior, rel=0.02)
        assert low < rate / 2  # nothing is known of the page itself: its posterior is the base's spread
        assert sum(resp) == pytest.approx(1.0)


def test_a_page_is_given_up_only_when_its_history_shows_it_changes_too_fast():
    """SIGMOD 2000 gives a page changing faster than the budget can follow the longest interval, and a page
    given up is not observed again. A first copy whose Last-Modified is a second old (a fast page of the
    staleness bench was lost that way in session 27, on a host of 1/400 s) says little: at a multiplier that
    puts its estimate just past the give-up line, the decision is taken on the low end of what its history
    allows, and the page is kept. Thirty changes dated ~30 s apart prove a page too fast: given up."""
    weights = RP.mixture_weights(1 / 400.0, NO_MASS, 1.0)
    w = 1.0
    early, early_low, _ = RP.estimate([0.0], 1.0, weights, 1.0)
    mu = 1.2 * w / early  # the give-up line w / mu just under the estimate
    assert early * mu / w >= 1.0 and R.adaptive_interval(early, w, mu, MIN, MAX) == MAX  # the estimate alone
    kept = R.decided_rate(early, early_low, w, mu)
    assert kept == early_low and R.adaptive_interval(kept, w, mu, MIN, MAX) < MAX
    known, known_low, _ = RP.estimate([0.0] * 30, 30 * 30.0, weights, 1.0)
    assert R.adaptive_interval(R.decided_rate(known, known_low, w, mu), w, mu, MIN, MAX) == MAX
    slow, slow_low, _ = RP.estimate([], 40_000.0, weights, 1.0)  # never past the line: the estimate itself
    assert R.decided_rate(slow, slow_low, w, mu) == slow


# -- the interval -----------------------------------------------------------------------------------
MIN, MAX = 60.0, 1e7


def test_a_page_given_up_on_is_rechecked_at_doubling_intervals_and_one_of_no_weight_never():
    mu, w, fast = 100.0, 1.0, 0.5  # mu * fast / w = 50: not worth its fetches
    interval, seen = 120.0, []
    while interval < MAX:
        interval = R.adaptive_interval(fast, w, mu, MIN, MAX, given_up_s=R.recheck_interval(interval, w, MIN, MAX))
        seen.append(interval)
    assert seen[:3] == [240.0, 480.0, 960.0] and seen[-1] == MAX and len(seen) == 17  # 120 s to 1e7 s: 17 re-checks
    assert R.adaptive_interval(fast, w, mu, MIN, MAX) == MAX  # what the budget counts it at
    assert R.adaptive_interval(fast, 0.0, mu, MIN, MAX, given_up_s=R.recheck_interval(120.0, 0.0, MIN, MAX)) == MAX
    kept = R.adaptive_interval(1e-4, w, mu, MIN, MAX, given_up_s=R.recheck_interval(120.0, w, MIN, MAX))
    assert kept == R.adaptive_interval(1e-4, w, mu, MIN, MAX) < MAX  # a page worth its fetches: unchanged
    assert R.recheck_interval(10.0, w, MIN, MAX) == MIN


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
