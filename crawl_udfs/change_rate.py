"""How often a page changes, and how often to re-fetch it: pure functions, written once over an ``ops``.

Guarantees:
- The change rate is estimated from what a crawler can see: at each re-visit, only whether the page
  changed since the previous visit (never how many times), at irregular intervals, with a short
  history; a new page starts from its host's rate (empirical Bayes), never from nothing.
- Every formula here takes an ``ops`` argument: :data:`PLAIN` evaluates it on floats and lists (the
  tests, the driver), ``jobs.schedule_transforms.COLUMN_MATH`` builds the same formula as Spark
  Columns for update. One definition, two evaluations (as ``crawl_udfs.admission`` does for depth and
  score); loops are a fixed number of bisection steps, so both evaluations take the same steps.

The estimator (Cho & Garcia-Molina, "Estimating frequency of change", ACM TOIT 3(3), 2003, section 5,
irregular access): a page changing as a Poisson process of rate λ, visited after an interval t, is seen
changed with probability 1 - exp(-λt). Over the visits that saw a change (intervals t_i) and those that
did not (intervals summing to U), the log-likelihood is Σ log(1 - exp(-λ t_i)) - λU and the maximum
likelihood λ solves Σ t_i / (exp(λ t_i) - 1) = U. It is not changes / time (which counts at most one
change per visit and so is biased toward the visit rate when pages change faster than they are
visited). A change dated by Last-Modified (their section 6: the last change at time L in the interval
is known) is the limit t_i -> 0 of a changed interval, term 1/λ, with the time since L added to U; so
the Last-Modified estimator is the same equation with those terms.

The prior (empirical Bayes), in two steps:
1. The host's mixture over a grid of rates (``crawl_udfs/rate_prior.py``): a host holds pages of different
   paces, so each page's posterior under it (:func:`crawl_udfs.rate_prior.posterior`) says which of the
   host's paces it has: λ_c = exp(E[ln λ]). Its base is centred at the host's pooled rate λ_host
   (:func:`host_rate`): the host's pooled revisits (n visits, X of them changed, mean interval T/n)
   through the bias-reduced estimator for regular access of the same paper (section 4):
   λ = -log((n - X + 0.5) / (n + 1)) / (T / n) (n + 1 where the paper has n + 0.5: never 0); with no
   revisits on the host, 1 / default_interval_s.
2. The page's estimate. λ ~ Gamma(1 + k, k / λ_c), k =
   ``schedule.prior_changes`` ("k changes seen over k / λ_c seconds"), and the posterior mode (MAP) solves
       Σ t_i / (exp(λ t_i) - 1) + k / λ = U + k / λ_c,
   a decreasing function of λ, so it has one root, found by bisection on log λ. The grid places the page;
   the MAP gives its rate without the grid's steps. With no history λ_c is the host's weights' centre (on a
   host without revisits: λ_host). The page's history counts in both steps; with k = 1 against the dozens
   of intervals a page keeps, the second count is small.

The interval (Cho & Garcia-Molina, "Synchronizing a database to improve freshness", SIGMOD 2000): a page
re-fetched every I = 1/f is fresh a share F(λ, f) = (f/λ)(1 - exp(-λ/f)) of the time. Maximising
Σ w_i F(λ_i, f_i) under Σ f_i = B (the re-fetch budget) gives, with multiplier μ, for every page kept
w/λ · g(λ/f) = μ, g(r) = 1 - (1 + r) exp(-r): r = g⁻¹(μλ/w), I = r/λ; when μλ/w >= 1 the page is not
worth its fetches (I = the maximum). Small λ: I ≈ sqrt(2μ/(wλ)), shorter as λ grows but far from
proportional; large λ: I grows again (pages changing faster than they can be kept fresh get less). The rule
is for known rates; with estimated ones a page given up at the maximum interval is not seen again, so its
estimate is never corrected: the give-up is decided on the low end of the page's posterior
(:func:`decided_rate`), and a page given up is re-checked at doubling intervals up to the maximum
(:func:`recheck_interval`).
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

#: Bisection range of the change rate, per second (once in ~300 years .. 10 a second), and steps.
RATE_LO, RATE_HI, RATE_STEPS = 1e-10, 10.0, 40
#: Bisection range of r = λ·I (changes per interval) in the interval rule, and steps.
R_LO, R_HI, R_STEPS = 1e-7, 60.0, 40
#: Smallest importance weight (a score of 0 still gets the maximum interval, not a division by 0).
MIN_WEIGHT = 1e-12


class PlainMath:
    """The operations the formulas need, on floats and lists."""

    log = staticmethod(math.log)

    @staticmethod
    def exp(x: float) -> float:  # Spark's exp is inf past ~709; a float's cap keeps the same quotients
        return math.exp(min(x, 700.0))

    @staticmethod
    def expm1(x: float) -> float:
        return math.expm1(min(x, 700.0))

    @staticmethod
    def lit(x: float) -> float:
        return float(x)

    @staticmethod
    def when(cond, then, otherwise):
        return then if cond else otherwise

    @staticmethod
    def greatest(a, b):
        return max(a, b)

    @staticmethod
    def least(a, b):
        return min(a, b)

    sqrt = staticmethod(math.sqrt)

    @staticmethod
    def array_sum(values: Iterable[float], term):
        return sum((term(v) for v in values), 0.0)

    @staticmethod
    def array_lit(values: Iterable[float]) -> list[float]:
        return [float(v) for v in values]

    @staticmethod
    def array_map(values: Iterable[float], f) -> list:
        return [f(v) for v in values]

    @staticmethod
    def array_zip(a: Iterable[float], b: Iterable[float], f) -> list:
        return [f(x, y) for x, y in zip(a, b, strict=True)]

    @staticmethod
    def array_max(values: Iterable[float]) -> float:
        return max(values)

    @staticmethod
    def bisect(lo, hi, steps: int, positive_at, **params):
        """The root of a decreasing function of x in [lo, hi] (``positive_at(x, **params)``: it is > 0 at
        x). The function reads its inputs from ``params`` only (the Column version evaluates each once)."""
        for _ in range(steps):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if positive_at(mid, **params) else (lo, mid)
        return (lo + hi) / 2


PLAIN = PlainMath()


# -- the change rate --------------------------------------------------------------------------------
def changed_term(t, rate, ops=PLAIN):
    """t / (exp(λt) - 1), and its limit 1/λ at t = 0 (a change dated by Last-Modified)."""
    return ops.when(t > 0, t / ops.greatest(ops.expm1(rate * t), ops.lit(1e-300)), 1.0 / rate)


def change_rate(changed_intervals, unchanged_span, prior_rate, prior_changes: float, ops=PLAIN):
    """The MAP change rate (per second) of a page: ``changed_intervals`` (seconds; 0 = a change dated by
    Last-Modified), ``unchanged_span`` (seconds without a change), the host's ``prior_rate`` and the
    prior's weight ``prior_changes`` (see the module docstring)."""
    k = float(prior_changes)

    def positive_at(log_rate, hist, rhs):
        rate = ops.exp(log_rate)
        return ops.array_sum(hist, lambda t: changed_term(t, rate, ops)) + k / rate - rhs > 0
    return ops.exp(ops.bisect(ops.lit(math.log(RATE_LO)), ops.lit(math.log(RATE_HI)), RATE_STEPS, positive_at,
                              hist=changed_intervals, rhs=unchanged_span + k / prior_rate))


def host_rate(visits, changes, span, default_interval_s: float, ops=PLAIN):
    """The host's pooled change rate (per second): the bias-reduced estimator for regular access over its
    revisits (``visits`` of them, ``changes`` seen changed, ``span`` seconds between them in all), at the
    mean interval; 1 / ``default_interval_s`` when it has none. The denominator is n + 1 where the paper
    has n + 0.5: a host whose revisits never saw a change still gets about half a change over the time
    observed, never 0 (the prior k / λ_host must stay finite)."""
    n = ops.greatest(visits, ops.lit(1.0))
    mean = ops.greatest(span, ops.lit(1e-9)) / n
    reduced = -ops.log((n - changes + 0.5) / (n + 1.0)) / mean
    return ops.when((visits > 0) & (span > 0), reduced, ops.lit(1.0 / float(default_interval_s)))


def naive_rate(n_changed: int, span: float) -> float:
    """Changes seen / time observed: what the estimator must beat (biased toward the visit rate)."""
    return n_changed / span


# -- the history a page keeps -----------------------------------------------------------------------
def observe(intervals: Sequence[float], unchanged_span: float, gap: float, changed: bool,
            since_modified: float | None, keep: int) -> tuple[list[float], float]:
    """The history after one re-visit ``gap`` seconds after the previous one (pure; update's Column
    version is ``jobs.schedule_transforms.history_columns``, pinned to this by a test).

    Changed, with a Last-Modified ``since_modified`` seconds before the visit and inside the gap: a
    dated change (0) and ``since_modified`` unchanged seconds; changed otherwise: ``gap``; unchanged:
    ``gap`` more unchanged seconds. At most ``keep`` changed intervals are kept: dropping the oldest
    also scales the unchanged span by keep/(keep+1), so both sides cover about the same recent visits.
    """
    intervals = list(intervals)
    if changed and since_modified is not None and 0 < since_modified < gap:
        intervals.append(0.0)
        unchanged_span += since_modified
    elif changed:
        intervals.append(gap)
    else:
        unchanged_span += gap
    if len(intervals) > keep:
        intervals = intervals[-keep:]
        unchanged_span *= keep / (keep + 1)
    return intervals, unchanged_span


def first_copy(since_modified: float | None) -> tuple[list[float], float] | None:
    """The history a page's first copy starts (pure; update's Column version is in
    ``jobs.schedule_transforms.with_history``), with ``schedule.first_copy_dated``: None without a
    Last-Modified ``since_modified`` seconds before the fetch (or with one not in the past).

    A page changing as a Poisson process and first seen at a time that has nothing to do with its
    changes was last changed an exponentially distributed time before (the backward recurrence time of
    a Poisson process is Exp(λ)): its likelihood λ·exp(-λs), the same terms as a dated change: a
    changed interval of 0 and ``since_modified`` unchanged seconds. So a page untouched for a year
    starts slow and one changed a minute ago fast, before any re-visit. A page created at its
    Last-Modified and never changed is counted as changed then: its rate starts higher than it is, and
    the re-visits that find it unchanged bring it down."""
    if since_modified is None or since_modified <= 0:
        return None
    return [0.0], float(since_modified)


# -- the interval -----------------------------------------------------------------------------------
def freshness_gain(r, ops=PLAIN):
    """g(r) = 1 - (1 + r) exp(-r): λ/w times the marginal freshness of one more fetch per second."""
    return -ops.expm1(-r) - r * ops.exp(-r)


def decided_rate(rate, low, weight, multiplier: float, ops=PLAIN):
    """The rate a page's interval is decided on: its estimate, unless that says the page is not worth its
    fetches (μλ/w >= 1, :func:`adaptive_interval` gives it up: :func:`recheck_interval`), then ``low`` (the
    estimate scaled down by ``rate_prior.GIVE_UP_Z`` posterior sds). A page given up on is seen again only
    after long, doubling intervals, so its estimate is slow to correct: it is given up on only when even the
    low end of what its history allows says so; a page whose early estimate overshoots is kept."""
    w = ops.greatest(weight, ops.lit(MIN_WEIGHT))
    return ops.when(rate * multiplier / w >= 1.0, low, rate)


def adaptive_interval(rate, weight, multiplier: float, min_s: float, max_s: float, ops=PLAIN, given_up_s=None):
    """The interval (seconds) maximising weighted freshness at Lagrange ``multiplier`` (see the module
    docstring), clamped to [min_s, max_s]; when the page is not worth its fetches, ``given_up_s``
    (:func:`recheck_interval`; None: the maximum, what the budget counts such a page at)."""
    w = ops.greatest(weight, ops.lit(MIN_WEIGHT))
    y = rate * multiplier / w
    log_r = ops.bisect(ops.lit(math.log(R_LO)), ops.lit(math.log(R_HI)), R_STEPS,
                       lambda x, y: freshness_gain(ops.exp(x), ops) < y, y=y)
    interval = ops.exp(log_r) / rate
    return ops.when(y >= 1.0, ops.lit(float(max_s)) if given_up_s is None else given_up_s,
                    ops.least(ops.greatest(interval, ops.lit(float(min_s))), ops.lit(float(max_s))))


def recheck_interval(old_interval, weight, min_s: float, max_s: float, ops=PLAIN):
    """The interval of a page given up on (:func:`adaptive_interval`): twice its previous one, within
    [min_s, max_s]. A give-up rests on an estimate, and only a re-visit can correct one (session 27: fast
    pages whose first Last-Modified dates were seconds old were given up in the first minutes and never
    fetched again); re-checked at doubling intervals, a page truly too fast costs ~log2(max / first)
    fetches in all, a page misjudged is seen again while its host's mixture has learnt its class. A page
    of no weight gets the maximum at once."""
    doubled = ops.least(ops.greatest(old_interval * 2.0, ops.lit(float(min_s))), ops.lit(float(max_s)))
    return ops.when(weight > MIN_WEIGHT, doubled, ops.lit(float(max_s)))


def nutch_interval(old_interval, changed, inc_rate: float, dec_rate: float, min_s: float, max_s: float,
                   ops=PLAIN):
    """Nutch's AdaptiveFetchSchedule: × (1 - dec_rate) after a change, × (1 + inc_rate) after none,
    clamped to [min_s, max_s]. ``changed`` is a bool (PLAIN) or a boolean Column."""
    grown = ops.when(changed, old_interval * (1.0 - dec_rate), old_interval * (1.0 + inc_rate))
    return ops.least(ops.greatest(grown, ops.lit(float(min_s))), ops.lit(float(max_s)))


def multiplier(pages: Sequence[tuple[float, float, int]], budget_per_s: float, min_s: float,
               max_s: float) -> float:
    """The Lagrange multiplier μ at which the pages' re-fetch rates sum to ``budget_per_s``.

    ``pages``: (rate, weight, count[, low]) rows (update collects them bucketed; ``low``: the rate a
    give-up is decided on, :func:`decided_rate`; the rate itself when absent). Σ count / interval
    decreases with μ but for the pages a give-up would be decided on their low rate; bisection on log μ
    over a range that goes from every page at ``min_s`` to every page at ``max_s``. Driver-side, plain
    floats only.
    """
    if not pages:
        return 1.0
    rows = [(p[0], p[1], p[2], p[3] if len(p) > 3 else p[0]) for p in pages]
    ratios = [max(w, MIN_WEIGHT) / min(r, low) for r, w, _, low in rows]
    lo, hi = math.log(min(ratios) * 1e-12), math.log(max(ratios) * 1.0001)

    def spends_more(log_mu: float) -> bool:
        mu = math.exp(log_mu)
        return sum(n / adaptive_interval(decided_rate(r, low, w, mu), w, mu, min_s, max_s)
                   for r, w, n, low in rows) > budget_per_s
    return math.exp(PLAIN.bisect(lo, hi, 36, spends_more))


# -- freshness, for tests and benchmarks ------------------------------------------------------------
def freshness(rate: float, interval: float) -> float:
    """Expected share of time a page of Poisson ``rate`` re-fetched every ``interval`` is fresh."""
    x = rate * interval
    return 1.0 if x == 0 else -math.expm1(-x) / x
