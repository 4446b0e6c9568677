"""The re-crawl schedule as Columns: each page's change history, change rate and interval (update).

The formulas are ``crawl_udfs.change_rate``'s, built as Columns by :data:`COLUMN_MATH` (one definition,
evaluated on floats in tests and on Columns here). What this module adds is the plumbing: which columns
of a page row and its crawl-DB row (``o_*``) feed them, the host prior from ``hosts``, and the round's
Lagrange multiplier (the one aggregate, collected on the driver).

Policies (``schedule.policy``), for rows with a stored copy (ok, 304):
- ``fixed``: ``default_interval_s`` (no clamping: the behaviour before the adaptive schedule);
- ``nutch``: Nutch's AdaptiveFetchSchedule on the previous interval;
- ``adaptive``: the SIGMOD 2000 optimum at the round's multiplier, from the estimated rate and the
  URL's ``score`` as importance. The budget: the stored pages together get as many re-fetches per
  second as ``fixed`` would give them (count / default_interval_s), spread to maximise their weighted
  freshness; the multiplier that spends exactly that is found by bisection on the driver over every
  stored page's (rate, weight) pair (the round's new ones, the crawl DB's others), bucketed (half a
  natural-log unit of rate and of weight each): one Spark job, a scan of the crawl DB.
The change history is kept under every policy, so switching policy starts from evidence; the rate
itself (40 bisection steps over the history per row) is computed only under ``adaptive``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from crawl_udfs import change_rate as R
from crawl_udfs import rate_prior as RP
from schemas.status import Status

#: Helper columns: seconds since the previous content visit, the new history, the estimated rate.
GAP, HIST, SPAN, RATE, PRIOR = "_gap", "_hist", "_span", "_rate", "_prior_rate"
#: Adaptive only: the host's mixture weights, the page's posterior over the grid (its log and log
#: normaliser on the way), the rate a give-up is decided on, and what a revisit adds to the host's mass.
PRIOR_W, LOG_POST, LOG_NORM, RESP, LOW, MASS = "_prior_w", "_log_post", "_log_norm", "_resp", "_rate_low", "_mass"
#: Rows whose interval the policy sets (a stored copy: 2xx or 304).
STORED_CATS = ("ok", "not_modified")


class ColumnMath:
    """``crawl_udfs.change_rate.PlainMath`` on Columns."""

    exp, log, expm1 = staticmethod(F.exp), staticmethod(F.log), staticmethod(F.expm1)

    @staticmethod
    def lit(x: float) -> Column:
        return F.lit(float(x))

    @staticmethod
    def when(cond: Column, then, otherwise) -> Column:
        return F.when(cond, then).otherwise(otherwise)

    @staticmethod
    def greatest(a, b) -> Column:
        return F.greatest(a, b)

    @staticmethod
    def least(a, b) -> Column:
        return F.least(a, b)

    sqrt = staticmethod(F.sqrt)

    @staticmethod
    def array_sum(values: Column, term) -> Column:
        return F.aggregate(values, F.lit(0.0), lambda acc, t: acc + term(t))

    @staticmethod
    def array_lit(values) -> Column:
        return F.array(*[F.lit(float(v)) for v in values])

    @staticmethod
    def array_map(values: Column, f) -> Column:
        return F.transform(values, f)

    @staticmethod
    def array_zip(a: Column, b: Column, f) -> Column:
        return F.zip_with(a, b, f)

    array_max = staticmethod(F.array_max)

    @staticmethod
    def bisect(lo: Column, hi: Column, steps: int, positive_at, **params: Column) -> Column:
        """PlainMath.bisect as one expression: the steps fold over a sequence; the accumulator holds
        (lo, hi) and the ``params``, so each input expression is evaluated once per row, not per step."""
        names = list(params)

        def step(acc: Column, _):
            lo_, hi_ = acc.getField("lo"), acc.getField("hi")
            mid = (lo_ + hi_) / 2
            up = positive_at(mid, **{n: acc.getField(n) for n in names})
            return F.struct(F.when(up, mid).otherwise(lo_).alias("lo"), F.when(up, hi_).otherwise(mid).alias("hi"),
                            *[acc.getField(n).alias(n) for n in names])
        start = F.struct(lo.cast("double").alias("lo"), hi.cast("double").alias("hi"),
                         *[(v if isinstance(v, Column) else F.lit(v)).alias(n) for n, v in params.items()])
        return F.aggregate(F.sequence(F.lit(1), F.lit(int(steps))), start, step,
                           lambda acc: (acc.getField("lo") + acc.getField("hi")) / 2)


COLUMN_MATH = ColumnMath()


def http_date_seconds(header: Column) -> Column:
    """Epoch seconds of an HTTP date (RFC 9110 IMF-fixdate, always GMT), null when it is not one."""
    body = F.regexp_extract(header, r"^\w{3}, (\d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2}) GMT$", 1)
    return F.unix_timestamp(F.try_to_timestamp(F.concat(body, F.lit(" +0000")),
                                               F.lit("dd MMM yyyy HH:mm:ss Z")))


def no_mass() -> Column:
    """A host's mass before any revisit: zeros on the grid."""
    return COLUMN_MATH.array_lit([0.0] * len(RP.LOG_GRID))


def host_priors(hosts: DataFrame, schedule) -> DataFrame:
    """``host``, ``_prior_rate``, ``_prior_w``: each host's pooled change rate from its revisits so far
    (``change_rate.host_rate``; hosts without any: 1 / default_interval_s) and its mixture prior
    (``rate_prior.mixture_weights`` of that rate and the host's ``rate_mass``)."""
    def z(c: str) -> Column:
        return F.coalesce(F.col(c).cast("double"), F.lit(0.0))
    rate = R.host_rate(z("revisits"), z("revisit_changes"), z("revisit_span_s"), schedule.default_interval_s,
                       COLUMN_MATH)
    return (hosts.select("host", rate.alias(PRIOR), F.coalesce(F.col("rate_mass"), no_mass()).alias("_m"))
            .select("host", PRIOR, RP.mixture_weights(F.col(PRIOR), F.col("_m"), schedule.prior_changes,
                                                      COLUMN_MATH).alias(PRIOR_W)))


def with_history(df: DataFrame, schedule, *, cat: Column, changed: Column) -> DataFrame:
    """``df`` (page rows + ``o_*`` + ``_prior_rate``; ``cat``: the transition-table row, ``changed``: the
    visit saw a change, null when there is no previous copy) with :data:`GAP`, :data:`HIST`, :data:`SPAN`
    (the history after this visit, ``change_rate.observe`` as Columns; a first copy's from its Last-Modified,
    ``change_rate.first_copy``, with ``schedule.first_copy_dated``) and :data:`RATE` (the estimate, with
    ``schedule.policy = "adaptive"`` only; null under the others: ``crawl_udfs.change_rate.change_rate`` of
    the stored history gives it whenever wanted)."""
    o = lambda c: F.col(f"o_{c}")  # noqa: E731
    fetched = F.col("fetch_time")
    stored = cat.isin(*STORED_CATS)
    prev = F.coalesce(o("last_visit_time"), o("warc_fetch_time"))
    gap = (F.unix_micros(fetched) - F.unix_micros(prev)) / F.lit(1e6)
    seen = stored & changed.isNotNull() & (gap > 0)
    since = F.unix_timestamp(fetched) - http_date_seconds(F.col("last_modified"))
    dated = changed & since.isNotNull() & (since > 0) & (since < gap)
    keep = int(schedule.change_history)
    arr0 = F.coalesce(o("change_intervals_s"), F.array().cast("array<double>"))
    span0 = F.coalesce(o("unchanged_span_s"), F.lit(0.0))
    grown = (F.when(~changed, arr0).when(dated, F.concat(arr0, F.array(F.lit(0.0))))
             .otherwise(F.concat(arr0, F.array(gap))))
    span1 = F.when(~changed, span0 + gap).when(dated, span0 + since.cast("double")).otherwise(span0)
    over = F.size(grown) > F.lit(keep)
    hist = F.when(over, F.slice(grown, -keep, keep)).otherwise(grown)
    span = F.when(over, span1 * F.lit(keep / (keep + 1))).otherwise(span1)
    # a first copy dated by Last-Modified (change_rate.first_copy): a dated change and the time since
    first = (F.lit(bool(schedule.first_copy_dated)) & stored & changed.isNull() & o("change_intervals_s").isNull()
             & since.isNotNull() & (since > 0))
    df = (df.withColumn(GAP, F.when(seen, gap))
          .withColumn(HIST, F.when(seen, hist).when(first, F.array(F.lit(0.0))).otherwise(o("change_intervals_s")))
          .withColumn(SPAN, F.when(seen, span).when(first, since.cast("double")).otherwise(o("unchanged_span_s"))))
    if schedule.policy != "adaptive":  # the rate only adaptive reads: no bisection per row under the others
        return (df.withColumn(RATE, F.when(stored, F.lit(None).cast("double")).otherwise(o("change_rate")))
                .withColumn(LOW, F.lit(None).cast("double")).withColumn(MASS, F.lit(None).cast("array<double>")))
    return with_rate(df, schedule, stored=stored)


def with_rate(df: DataFrame, schedule, *, stored: Column) -> DataFrame:
    """``df`` + :data:`RATE` (the MAP rate under a Gamma prior centred where the host's mixture and the
    page's own history put it), :data:`LOW` (``change_rate.decided_rate``'s lower rate) and :data:`MASS`
    (a revisit's ``rate_prior.revisit_mass``): the steps of ``crawl_udfs.rate_prior`` and ``change_rate``,
    one column each so no array is computed twice."""
    m = COLUMN_MATH
    prior = F.coalesce(F.col(PRIOR), F.lit(1.0 / float(schedule.default_interval_s)))
    hist = F.coalesce(F.col(HIST), F.array().cast("array<double>"))
    span = F.coalesce(F.col(SPAN), F.lit(0.0))
    base = RP.mixture_weights(prior, no_mass(), schedule.prior_changes, m)
    weights = F.coalesce(F.col(PRIOR_W), base) if PRIOR_W in df.columns else base
    df = df.withColumn(LOG_POST, F.when(stored, RP.log_posterior(hist, span, weights, m)))
    df = df.withColumn(LOG_NORM, RP.log_normaliser(F.col(LOG_POST), m))
    df = df.withColumn(RESP, RP.responsibilities(F.col(LOG_POST), F.col(LOG_NORM), m))
    df = df.withColumn("_log_mean", RP.log_mean(F.col(RESP), m))
    rate = R.change_rate(hist, span, F.exp(F.col("_log_mean")), schedule.prior_changes, m)
    df = df.withColumn(RATE, F.when(stored, rate).otherwise(F.col("o_change_rate")))
    low = RP.low_rate(F.col(RATE), F.col(RESP), F.col("_log_mean"), m)
    mass = RP.revisit_mass(F.col(RESP), F.col(GAP), schedule.default_interval_s, m)
    return (df.withColumn(LOW, F.when(stored, low)).withColumn(MASS, F.when(F.col(GAP).isNotNull() & stored, mass))
            .drop(LOG_POST, LOG_NORM, RESP, "_log_mean"))


def weight() -> Column:
    """A URL's importance for the adaptive policy: its score (crawl-DB, else the fetch list's)."""
    return F.coalesce(F.col("o_score"), F.col("_list_score"), F.lit(0.0))


def policy_interval(schedule, *, changed: Column, multiplier: float | None) -> Column:
    """The interval of a stored row under ``schedule.policy`` (reads :data:`RATE`, ``o_*``)."""
    default_iv = F.lit(float(schedule.default_interval_s))
    lo, hi = float(schedule.min_interval_s), float(schedule.max_interval_s)
    if schedule.policy == "fixed":
        return default_iv
    if schedule.policy == "nutch":
        old_iv = F.coalesce(F.col("o_fetch_interval_s"), default_iv)
        nutch = R.nutch_interval(old_iv, changed, schedule.nutch_inc_rate, schedule.nutch_dec_rate, lo, hi,
                                 COLUMN_MATH)
        return F.when(changed.isNull(), F.least(F.greatest(default_iv, F.lit(lo)), F.lit(hi))).otherwise(nutch)
    mu = 1.0 if multiplier is None else float(multiplier)
    rate = R.decided_rate(F.col(RATE), F.coalesce(F.col(LOW), F.col(RATE)), weight(), mu, COLUMN_MATH)
    recheck = R.recheck_interval(F.coalesce(F.col("o_fetch_interval_s"), default_iv), weight(), lo, hi, COLUMN_MATH)
    return R.adaptive_interval(rate, weight(), mu, lo, hi, COLUMN_MATH, given_up_s=recheck)


def round_multiplier(with_rates: DataFrame, schedule, *, cat: Column, crawldb: DataFrame) -> float:
    """The round's Lagrange multiplier (see the module docstring): one job, a bucketed collect.

    Solved over every page with a stored copy, not over the round's alone: the round's rows at their new
    rates, the crawl DB's other fetched / not-modified rows at their stored rates (1 / default_interval_s
    when they have none). A round's fetch list over-represents the pages fetched often (a page is in it
    with a probability ~ 1 / its interval), so a budget of count / default_interval_s for the round's
    pages alone pulls the fast pages' intervals toward the default and spends less than ``fixed`` does
    (74 % on the live pages of bench/schedule_bench.py: mean(1/I) = mean(1/I^2) / mean(1/I) there)."""
    round_rows = with_rates.where(cat.isin(*STORED_CATS)).select(
        "url_fp", F.col(RATE).alias("r"), weight().alias("w"), F.coalesce(F.col(LOW), F.col(RATE)).alias("l"))
    others = (crawldb.where(F.col("status").isin(Status.FETCHED.value, Status.NOT_MODIFIED.value))
              .join(with_rates.select("url_fp"), "url_fp", "left_anti")
              .select("url_fp", F.coalesce(F.col("change_rate"), F.lit(1.0 / float(schedule.default_interval_s))).alias("r"),
                      F.coalesce(F.col("score"), F.lit(0.0)).alias("w")))
    others = others.withColumn("l", F.col("r"))  # their low rates are not stored: the round's decided theirs
    rows = round_rows.unionByName(others).select("r", "l", F.greatest(F.col("w"), F.lit(R.MIN_WEIGHT)).alias("w"))
    buckets = (rows.groupBy(F.round(F.log("r") * 2).alias("br"), F.round(F.log("w") * 2).alias("bw"),
                            F.round(F.log(F.col("l") / F.col("r")) * 2).alias("bl"))
               .agg(F.avg("r").alias("r"), F.avg("w").alias("w"), F.avg("l").alias("l"),
                    F.count(F.lit(1)).alias("n")).collect())
    pages = [(b["r"], b["w"], b["n"], b["l"]) for b in buckets]
    budget = sum(p[2] for p in pages) / float(schedule.default_interval_s)
    return R.multiplier(pages, budget, float(schedule.min_interval_s), float(schedule.max_interval_s))


def gone_interval(checks: Column, schedule) -> Column:
    """The re-check interval after the ``checks``-th 404/410 in a row: gone_interval_s × gone_backoff^(checks-1)."""
    return F.lit(float(schedule.gone_interval_s)) * F.pow(F.lit(float(schedule.gone_backoff)),
                                                          (checks - 1).cast("double"))
