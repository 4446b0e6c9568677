"""A host's prior over change rates: a mixture on a grid, learnt from its pages (empirical Bayes).

A host holds pages of different paces (the hubs that change hourly, the articles that never do), so one
prior around the host's mean pulls both toward the middle (measured: the slow pages of the two-class
staleness bench estimated at 1.7-1.8x their rate, bench/RESULTS.md session 26). Each host keeps weights
over a grid of rates (:data:`LOG_GRID`, ``hosts.rate_mass``): a base measure at its pooled rate λ_host
(``change_rate.host_rate``; the Gamma prior a page had before the mixture, :func:`mixture_weights`) plus,
for every revisit of one of its pages, that page's posterior over the grid weighted by the time it
covered (:func:`revisit_mass`): one step of EM a revisit (online EM, Cappé & Moulines 2009), the
nonparametric maximum likelihood prior of Laird (1978) in the limit.

The page's estimate under it is ``crawl_udfs.change_rate``'s (step 2 of that module's docstring): the MAP
under a Gamma centred at exp(E[ln λ]) of the page's posterior here (:func:`estimate`). Every formula takes
an ``ops`` (``change_rate.PlainMath`` and its Column and SQL twins), as in ``change_rate``.
"""

from __future__ import annotations

import math

from crawl_udfs.change_rate import PLAIN, change_rate

#: The grid a host's prior lives on: ln λ (per second) from 1e-10 to 100, three a decade. Wider than any
#: rate a crawl sees (once in ~3 years .. once a second), so the base measure is not cut short at either end
#: and a new page starts at its host's pooled rate (within 1 %).
LOG_GRID = tuple(math.log(10.0) * (-10 + i / 3) for i in range(37))
#: The base measure's weight, in revisits one ``default_interval_s`` apart, against the host's accumulated mass.
BASE_WEIGHT = 1.0
#: A give-up is decided on the estimate scaled down by this many posterior sds of ln λ (10 % one-sided).
GIVE_UP_Z = 1.2816
#: What a zero weight or probability counts as under a logarithm.
TINY = 1e-300
GRID_STEP = LOG_GRID[1] - LOG_GRID[0]


def digamma(x: float) -> float:
    """ψ(x) for x > 0 (recurrence up to 6, then the asymptotic series: error < 1e-10)."""
    out = 0.0
    while x < 6.0:
        out, x = out - 1.0 / x, x + 1.0
    f = 1.0 / (x * x)
    return out + math.log(x) - 0.5 / x - f * (1 / 12 - f * (1 / 120 - f / 252))


def mixture_weights(prior_rate, mass, prior_changes: float, ops=PLAIN):
    """A host's prior over :data:`LOG_GRID`, as relative weights (only their ratios count): the base
    measure plus its accumulated ``mass`` (one value per grid point, :func:`revisit_mass` summed over its
    pages' revisits; zeros when none).

    The base is the Gamma prior a page had before the mixture, λ ~ Gamma(1 + k, b) with k =
    ``prior_changes``, placed so that E[ln λ] = ln ``prior_rate`` (b = exp(ψ(1 + k)) / λ_host): a new
    page of a host without revisits starts at the host's pooled rate, and one early observation of a
    page (a first copy changed a second ago) moves it no further than the Gamma let it. Sampled on the
    grid (its density in ln λ, b^a/Γ(a) exp(a u - b e^u), times the step) it weighs :data:`BASE_WEIGHT`.
    One pass over the grid, no array inside another's loop (DuckDB runs those ~50x slower)."""
    a = 1.0 + float(prior_changes)
    e_psi = math.exp(digamma(a))
    const = math.log(BASE_WEIGHT * GRID_STEP) - math.lgamma(a) + a * digamma(a)
    log_prior = ops.log(prior_rate)

    def at(g, m):
        return ops.exp(const + a * (g - log_prior) - ops.exp(g - log_prior) * e_psi) + m
    return ops.array_zip(ops.array_lit(LOG_GRID), mass, at)


def log_likelihood(hist, span, rate, ops=PLAIN):
    """ln P(history | λ): Σ ln(1 - exp(-λ t_i)) over the changed intervals (ln λ for a dated one, t = 0)
    - λ U (the function :func:`change_rate` maximises with the prior's terms added)."""
    return ops.array_sum(hist, lambda t: ops.when(t > 0, ops.log(ops.greatest(-ops.expm1(-rate * t), ops.lit(TINY))),
                                                  ops.log(rate))) - rate * span


def log_posterior(hist, span, weights, ops=PLAIN):
    """Per grid point, ln(prior weight × likelihood of the history): the posterior, unnormalised."""
    def at(g, w):
        return ops.log(ops.greatest(w, ops.lit(TINY))) + log_likelihood(hist, span, ops.exp(g), ops)
    return ops.array_zip(ops.array_lit(LOG_GRID), weights, at)


def log_normaliser(log_post, ops=PLAIN):
    """ln Σ exp(:func:`log_posterior`), without overflow (a scalar the engines keep in a column)."""
    top = ops.array_max(log_post)
    return top + ops.log(ops.array_sum(log_post, lambda x: ops.exp(x - top)))


def responsibilities(log_post, log_norm, ops=PLAIN):
    """The posterior over the grid (sums to 1): how much each grid rate explains the page."""
    return ops.array_map(log_post, lambda x: ops.exp(x - log_norm))


def log_mean(resp, ops=PLAIN):
    """E[ln λ] under the posterior ``resp``: exp of it is the centre of the page's Gamma prior."""
    return ops.array_sum(ops.array_zip(resp, ops.array_lit(LOG_GRID), lambda p, g: p * g), lambda x: x)


def log_sd(resp, mean, ops=PLAIN):
    """The posterior's sd of ln λ (``mean``: :func:`log_mean`): how well the page's rate is known."""
    second = ops.array_sum(ops.array_zip(resp, ops.array_lit(LOG_GRID), lambda p, g: p * g * g), lambda x: x)
    return ops.sqrt(ops.greatest(second - mean * mean, ops.lit(0.0)))


def low_rate(rate, resp, mean, ops=PLAIN):
    """The rate a give-up is decided on (``change_rate.decided_rate``): ``rate`` scaled down by :data:`GIVE_UP_Z`
    posterior sds of ln λ (``resp``, its :func:`log_mean` ``mean``)."""
    return rate * ops.exp(-GIVE_UP_Z * log_sd(resp, mean, ops))


def posterior(hist, span, weights) -> list[float]:
    """:func:`responsibilities` of a history on floats (tests, benchmarks)."""
    lp = log_posterior(hist, span, weights)
    return responsibilities(lp, log_normaliser(lp))


def estimate(hist, span, weights, prior_changes: float) -> tuple[float, float, list[float]]:
    """A page's rate, the rate a give-up is decided on (``change_rate.decided_rate``) and its posterior, on floats:
    the steps update takes (``jobs.schedule_transforms.with_rate``), for tests and benchmarks."""
    resp = posterior(hist, span, weights)
    mean = log_mean(resp)
    rate = change_rate(hist, span, math.exp(mean), prior_changes)
    return rate, low_rate(rate, resp, mean), resp


def revisit_mass(resp, gap, default_interval_s: float, ops=PLAIN):
    """What one revisit adds to its host's mass: its page's responsibilities × ``gap`` / default_interval_s.
    Weighted by time, a page revisited often counts no more than one revisited seldom (each counts by
    the time it was watched): the mass is the host's pages' mixture, not its fetches'."""
    return ops.array_map(resp, lambda p: p * gap * (1.0 / float(default_interval_s)))
