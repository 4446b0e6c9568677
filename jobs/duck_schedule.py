"""The re-crawl schedule in DuckDB SQL: ``jobs/schedule_transforms.py`` on the driver (``jobs/duck_engine.py``).

Same functions, same contracts as the Spark twins (see their docstrings); a Column there is SQL text
here, a DataFrame a ``DuckDBPyRelation``. The formulas are ``crawl_udfs.change_rate``'s, built as SQL
text by :data:`SQL_MATH` (the rule stays there, as for ``schedule_transforms.COLUMN_MATH``).

Crawl-DB rows read: none directly. :func:`with_history` reads the ``o_*`` columns :func:`jobs.duck_transition.prepare`
joined (the rows of the round's page URLs). :func:`round_multiplier` needs, besides the round's rows, one
aggregate of the whole crawl DB that the gather supplies as a small input (:func:`stored_buckets_sql`, SQL
text Spark SQL runs as it is: fetched / not_modified rows whose url_fp is none of the round's page rows, by
(rate, weight) bucket: ``br``, ``bw``, ``r_sum``, ``w_sum``, ``n``; from the crawl DB's ``url_fp``,
``status``, ``change_rate``, ``score``: one aggregate over the whole table, a few hundred rows at most).

Spark-vs-DuckDB differences kept in mind here: DuckDB's ``log`` is base 10 (``ln`` is Spark's ``log``),
and ``ln`` of 0 or less is -inf / NaN where Spark's is NULL; DuckDB has no ``expm1``; a literal ``0.5``
is a DECIMAL in DuckDB (every literal here is cast to DOUBLE).
"""

from __future__ import annotations

import itertools

import duckdb

from crawl_udfs import change_rate as R
from crawl_udfs import rate_prior as RP
from jobs.duck_engine import Sql, literal, query
from jobs.schedule_transforms import GAP, HIST, LOW, MASS, PRIOR, PRIOR_W, RATE, SPAN, STORED_CATS
from schemas.status import Status

_ids = itertools.count()


class SqlMath:
    """``crawl_udfs.change_rate.PlainMath`` as DuckDB SQL text (Spark semantics: ``ColumnMath``)."""

    @staticmethod
    def exp(x) -> Sql:
        return Sql(f"exp({Sql(x)})")

    @staticmethod
    def log(x) -> Sql:  # Spark's log: natural, NULL at or below 0
        x = Sql(x)
        return Sql(f"(CASE WHEN {x} > 0 THEN ln({x}) END)")

    @staticmethod
    def expm1(x) -> Sql:
        """exp(x) - 1 without the cancellation near 0 (DuckDB has no expm1): Taylor to x^5 below |x| = 1e-3
        (relative error < 1e-18), exp(x) - 1 above (relative error < 3e-13)."""
        x = Sql(x)
        return Sql(f"(CASE WHEN abs({x}) < 1e-3 THEN {x} * (1 + {x} * (0.5::DOUBLE + {x} * ((1.0 / 6)::DOUBLE"
                   f" + {x} * ((1.0 / 24)::DOUBLE + {x} * (1.0 / 120)::DOUBLE)))) ELSE exp({x}) - 1 END)")

    lit = staticmethod(Sql)

    @staticmethod
    def when(cond, then, otherwise) -> Sql:
        return Sql(f"(CASE WHEN {Sql(cond)} THEN {Sql(then)} ELSE {Sql(otherwise)} END)")

    @staticmethod
    def greatest(a, b) -> Sql:
        return Sql(f"greatest({Sql(a)}, {Sql(b)})")

    @staticmethod
    def least(a, b) -> Sql:
        return Sql(f"least({Sql(a)}, {Sql(b)})")

    @staticmethod
    def sqrt(x) -> Sql:
        return Sql(f"sqrt({Sql(x)})")

    @staticmethod
    def array_lit(values) -> Sql:
        return Sql("[" + ", ".join(str(Sql(float(v))) for v in values) + "]")

    @staticmethod
    def array_map(values, f) -> Sql:
        n = next(_ids)
        return Sql(f"list_transform({Sql(values)}, lambda _m{n}: {Sql(f(Sql(f'_m{n}')))})")

    @staticmethod
    def array_zip(a, b, f) -> Sql:
        """Spark's ``zip_with`` (both lists of one length here)."""
        n = next(_ids)
        z = f"_z{n}"
        body = Sql(f(Sql(f"{z}[1]"), Sql(f"{z}[2]")))
        return Sql(f"list_transform(list_zip({Sql(a)}, {Sql(b)}), lambda {z}: {body})")

    @staticmethod
    def array_max(values) -> Sql:
        return Sql(f"list_max({Sql(values)})")

    @staticmethod
    def array_sum(values, term) -> Sql:
        """Spark's ``aggregate(values, 0.0, acc + term)``: left to right, 0.0 for an empty list."""
        n = next(_ids)
        return Sql(f"list_reduce(list_transform({Sql(values)}, lambda _t{n}: {term(Sql(f'_t{n}'))}), "
                   f"lambda _a{n}, _b{n}: _a{n} + _b{n}, 0.0::DOUBLE)")

    @staticmethod
    def bisect(lo, hi, steps: int, positive_at, **params) -> Sql:
        """``ColumnMath.bisect``: the steps reduce over ``range(steps)``; the accumulator holds (lo, hi) and the
        ``params``, so each input expression is evaluated once per row."""
        n = next(_ids)
        acc = f"_acc{n}"
        mid = Sql(f"(({acc}.lo + {acc}.hi) / 2)")
        up = positive_at(mid, **{k: Sql(f"{acc}.{k}") for k in params})
        kept = "".join(f", '{k}': {acc}.{k}" for k in params)
        step = (f"CASE WHEN {up} THEN {{'lo': {mid}, 'hi': {acc}.hi{kept}}} "
                f"ELSE {{'lo': {acc}.lo, 'hi': {mid}{kept}}} END")
        start = ("{'lo': CAST(" + str(Sql(lo)) + " AS DOUBLE), 'hi': CAST(" + str(Sql(hi)) + " AS DOUBLE)"
                 + "".join(f", '{k}': {Sql(v)}" for k, v in params.items()) + "}")
        return Sql(f"list_transform([list_reduce(range({int(steps)}), lambda {acc}, _i{n}: {step}, {start})], "
                   f"lambda _r{n}: (_r{n}.lo + _r{n}.hi) / 2)[1]")


SQL_MATH = SqlMath()


def col(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def http_date_seconds(header: str) -> str:
    """As ``schedule_transforms.http_date_seconds`` (BIGINT epoch seconds, NULL when not an IMF-fixdate)."""
    body = rf"regexp_extract({header}, '^\w{{3}}, (\d{{2}} \w{{3}} \d{{4}} \d{{2}}:\d{{2}}:\d{{2}}) GMT$', 1)"
    return f"CAST(epoch(try_strptime({body}, '%d %b %Y %H:%M:%S')) AS BIGINT)"


def no_mass() -> Sql:
    """As ``schedule_transforms.no_mass``."""
    return SQL_MATH.array_lit([0.0] * len(RP.LOG_GRID))


def host_priors(con: duckdb.DuckDBPyConnection, hosts: duckdb.DuckDBPyRelation, schedule) -> duckdb.DuckDBPyRelation:
    """As ``schedule_transforms.host_priors``: ``host``, ``_prior_rate``, ``_prior_w``."""
    def z(c: str) -> Sql:
        return Sql(f"coalesce(CAST({col(c)} AS DOUBLE), 0.0::DOUBLE)")
    rate = R.host_rate(z("revisits"), z("revisit_changes"), z("revisit_span_s"), schedule.default_interval_s, SQL_MATH)
    mass = f"coalesce(CAST(rate_mass AS DOUBLE[]), {no_mass()})" if "rate_mass" in hosts.columns else str(no_mass())
    weights = RP.mixture_weights(Sql(PRIOR), Sql("__m"), schedule.prior_changes, SQL_MATH)
    return query(con, f"""SELECT host, {PRIOR}, {weights} AS {PRIOR_W}
                          FROM (SELECT host, {rate} AS {PRIOR}, {mass} AS __m FROM $hosts)""", hosts=hosts)


def with_history(con: duckdb.DuckDBPyConnection, df: duckdb.DuckDBPyRelation, schedule, *, cat: str,
                 changed: str) -> duckdb.DuckDBPyRelation:
    """As ``schedule_transforms.with_history``: ``df`` + :data:`GAP`, :data:`HIST`, :data:`SPAN`, :data:`RATE`."""
    keep = int(schedule.change_history)
    stored = f"({cat}) IN ({', '.join(literal(c) for c in STORED_CATS)})"
    empty = "CAST([] AS DOUBLE[])"
    own = ", ".join(col(c) for c in df.columns if c not in (GAP, HIST, SPAN, RATE, LOW, MASS))
    sql = f"""
    WITH base AS (
      SELECT *, {stored} AS __stored, ({changed}) AS __changed,
             (epoch_us(fetch_time) - epoch_us(coalesce(o_last_visit_time, o_warc_fetch_time))) / 1000000.0::DOUBLE
               AS __gap,
             CAST(floor(epoch_us(fetch_time) / 1000000) AS BIGINT) - {http_date_seconds('last_modified')} AS __since,
             coalesce(o_change_intervals_s, {empty}) AS __arr0, coalesce(o_unchanged_span_s, 0.0::DOUBLE) AS __span0
      FROM $df),
    seen AS (
      SELECT *, __stored AND __changed IS NOT NULL AND __gap > 0 AS __seen,
             __changed AND __since IS NOT NULL AND __since > 0 AND __since < __gap AS __dated,
             {literal(bool(schedule.first_copy_dated))} AND __stored AND __changed IS NULL
               AND o_change_intervals_s IS NULL AND __since IS NOT NULL AND __since > 0 AS __first
      FROM base),
    grown AS (
      SELECT *,
             CASE WHEN NOT __changed THEN __arr0 WHEN __dated THEN list_concat(__arr0, [0.0::DOUBLE])
                  ELSE list_concat(__arr0, [__gap]) END AS __grown,
             CASE WHEN NOT __changed THEN __span0 + __gap WHEN __dated THEN __span0 + CAST(__since AS DOUBLE)
                  ELSE __span0 END AS __span1
      FROM seen),
    history AS (
      SELECT *, CASE WHEN __seen THEN __gap END AS {GAP},
             CASE WHEN __seen THEN (CASE WHEN len(__grown) > {keep}
                                         THEN list_slice(__grown, len(__grown) - {keep} + 1, len(__grown))
                                         ELSE __grown END)
                  WHEN __first THEN [0.0::DOUBLE]
                  ELSE o_change_intervals_s END AS {HIST},
             CASE WHEN __seen THEN (CASE WHEN len(__grown) > {keep} THEN __span1 * {literal(keep / (keep + 1))}
                                         ELSE __span1 END)
                  WHEN __first THEN CAST(__since AS DOUBLE)
                  ELSE o_unchanged_span_s END AS {SPAN}
      FROM grown)
    {_rated(schedule, df.columns)}
    SELECT {own}, {GAP}, {HIST}, {SPAN}, {RATE}, {LOW}, {MASS} FROM rated"""
    return query(con, sql, df=df)


def _rated(schedule, columns) -> str:
    """The CTEs from ``history`` to ``rated``: ``schedule_transforms.with_rate``'s steps, one CTE each."""
    if schedule.policy != "adaptive":  # the rate only adaptive reads: no bisection per row under the others
        return f""", rated AS (
      SELECT *, CASE WHEN __stored THEN CAST(NULL AS DOUBLE) ELSE o_change_rate END AS {RATE},
             CAST(NULL AS DOUBLE) AS {LOW}, CAST(NULL AS DOUBLE[]) AS {MASS} FROM history)"""
    m = SQL_MATH
    prior = Sql(f"coalesce({PRIOR}, {literal(1.0 / float(schedule.default_interval_s))})")
    hist, span = Sql(f"coalesce({HIST}, CAST([] AS DOUBLE[]))"), Sql(f"coalesce({SPAN}, 0.0::DOUBLE)")
    base = RP.mixture_weights(prior, no_mass(), schedule.prior_changes, m)
    weights = Sql(f"coalesce({PRIOR_W}, {base})") if PRIOR_W in columns else base
    rate = R.change_rate(hist, span, Sql("exp(__lm)"), schedule.prior_changes, m)
    low = RP.low_rate(Sql(RATE), Sql("__resp"), Sql("__lm"), m)
    mass = RP.revisit_mass(Sql("__resp"), Sql(GAP), schedule.default_interval_s, m)
    return f""", post AS (
      SELECT *, CASE WHEN __stored THEN {RP.log_posterior(hist, span, weights, m)} END AS __lp FROM history),
    norm AS (SELECT *, {RP.log_normaliser(Sql('__lp'), m)} AS __ln FROM post),
    resp AS (SELECT *, {RP.responsibilities(Sql('__lp'), Sql('__ln'), m)} AS __resp FROM norm),
    mean AS (SELECT *, {RP.log_mean(Sql('__resp'), m)} AS __lm FROM resp),
    rate AS (SELECT *, CASE WHEN __stored THEN {rate} ELSE o_change_rate END AS {RATE} FROM mean),
    rated AS (
      SELECT *, CASE WHEN __stored THEN {low} END AS {LOW},
             CASE WHEN __stored AND {GAP} IS NOT NULL THEN {mass} END AS {MASS} FROM rate)"""


def weight() -> str:
    """As ``schedule_transforms.weight``."""
    return "coalesce(o_score, _list_score, 0.0::DOUBLE)"


def policy_interval(schedule, *, changed: str, multiplier: float | None) -> str:
    """As ``schedule_transforms.policy_interval`` (reads :data:`RATE`, ``o_*``)."""
    default_iv = literal(float(schedule.default_interval_s))
    lo, hi = float(schedule.min_interval_s), float(schedule.max_interval_s)
    if schedule.policy == "fixed":
        return default_iv
    if schedule.policy == "nutch":
        old_iv = Sql(f"coalesce(o_fetch_interval_s, {default_iv})")
        nutch = R.nutch_interval(old_iv, Sql(changed), schedule.nutch_inc_rate, schedule.nutch_dec_rate, lo, hi,
                                 SQL_MATH)
        first = f"least(greatest({default_iv}, {literal(lo)}), {literal(hi)})"
        return f"(CASE WHEN ({changed}) IS NULL THEN {first} ELSE {nutch} END)"
    mu = 1.0 if multiplier is None else float(multiplier)
    rate = R.decided_rate(Sql(RATE), Sql(f"coalesce({LOW}, {RATE})"), Sql(weight()), mu, SQL_MATH)
    recheck = R.recheck_interval(Sql(f"coalesce(o_fetch_interval_s, {default_iv})"), Sql(weight()), lo, hi, SQL_MATH)
    return str(R.adaptive_interval(rate, Sql(weight()), mu, lo, hi, SQL_MATH, given_up_s=recheck))


def gone_interval(checks: str, schedule) -> str:
    """As ``schedule_transforms.gone_interval``."""
    return (f"({literal(float(schedule.gone_interval_s))} * pow({literal(float(schedule.gone_backoff))}, "
            f"CAST(({checks}) - 1 AS DOUBLE)))")


def stored_buckets_sql(schedule, crawldb: str = "crawldb", round_urls: str = "round_urls") -> str:
    """The crawl-DB aggregate :func:`round_multiplier` needs, as SQL text that Spark SQL and DuckDB both run
    (``crawldb``: the table; ``round_urls``: a relation of the round's page ``url_fp``s): per (rate, weight)
    bucket of the fetched / not_modified rows outside the round, ``br``, ``bw``, ``r_sum``, ``w_sum``, ``n``
    (``schedule_transforms.round_multiplier``'s ``others``, summed rather than averaged so the round's rows
    can join their buckets). Rates are never NULL here (coalesced); a rate of 0 is no bucket either engine
    can average (the Spark twin fails on it too)."""
    r = f"coalesce(change_rate, CAST({1.0 / float(schedule.default_interval_s)!r} AS DOUBLE))"
    w = f"greatest(coalesce(score, CAST(0.0 AS DOUBLE)), CAST({R.MIN_WEIGHT!r} AS DOUBLE))"
    return f"""
    SELECT round(ln(r) * 2) AS br, round(ln(w) * 2) AS bw, sum(r) AS r_sum, sum(w) AS w_sum, count(1) AS n
    FROM (SELECT {r} AS r, {w} AS w FROM {crawldb}
          WHERE status IN ('{Status.FETCHED.value}', '{Status.NOT_MODIFIED.value}')
            AND url_fp NOT IN (SELECT url_fp FROM {round_urls} WHERE url_fp IS NOT NULL)) o
    GROUP BY round(ln(r) * 2), round(ln(w) * 2)"""


def round_multiplier(con: duckdb.DuckDBPyConnection, with_rates: duckdb.DuckDBPyRelation, schedule, *, cat: str,
                     stored: duckdb.DuckDBPyRelation | None) -> float:
    """As ``schedule_transforms.round_multiplier``; the crawl DB's other stored pages come as ``stored``, the
    bucket sums of :func:`stored_buckets_sql` (None: none)."""
    cats = ", ".join(literal(c) for c in STORED_CATS)
    round_rows = (f"SELECT {RATE} AS r, greatest({weight()}, {literal(R.MIN_WEIGHT)}) AS w, "
                  f"coalesce({LOW}, {RATE}) AS l FROM $rates WHERE ({cat}) IN ({cats})")
    rels = {"rates": with_rates}
    others = ("SELECT NULL::DOUBLE AS br, NULL::DOUBLE AS bw, 0.0::DOUBLE AS bl, 0.0::DOUBLE AS r_sum, "
              "0.0::DOUBLE AS w_sum, 0.0::DOUBLE AS l_sum, 0::BIGINT AS n WHERE FALSE")
    if stored is not None:  # their low rates are not stored: the round's decided theirs
        others = "SELECT br, bw, 0.0::DOUBLE AS bl, r_sum, w_sum, r_sum AS l_sum, n FROM $stored"
        rels["stored"] = stored
    sql = f"""
    WITH sums AS (
      SELECT round(ln(r) * 2) AS br, round(ln(w) * 2) AS bw, round(ln(l / r) * 2) AS bl, sum(r) AS r_sum,
             sum(w) AS w_sum, sum(l) AS l_sum, count(1) AS n
      FROM ({round_rows}) GROUP BY ALL
      UNION ALL {others})
    SELECT sum(r_sum) / sum(n) AS r, sum(w_sum) / sum(n) AS w, sum(n) AS n, sum(l_sum) / sum(n) AS l
    FROM sums GROUP BY br, bw, bl"""
    pages = [(r, w, n, low) for r, w, n, low in query(con, sql, **rels).fetchall()]
    budget = sum(p[2] for p in pages) / float(schedule.default_interval_s)
    return R.multiplier(pages, budget, float(schedule.min_interval_s), float(schedule.max_interval_s))
