"""``jobs/duck_transition.py`` and ``jobs/duck_schedule.py`` against their Spark twins (``update_transforms``,
``schedule_transforms``, ``hosts_transforms.host_next``): the same inputs, the same output columns, types and rows.

Cases (``tests/duck_transition_cases.py``): every row of the transition table, the schedule's visits, gone URLs
retired, hosts parked and deferred, and a realistic round of 300 URLs; the steps that read ``schedule.policy``
under each of fixed, nutch and adaptive. The formulas of ``crawl_udfs.change_rate`` through ``SQL_MATH`` are also
pinned to the plain ones, as ``tests/test_schedule.py`` pins ``COLUMN_MATH``.
"""

from __future__ import annotations

import random

import pytest

from crawl_udfs import change_rate as R
from crawl_udfs import rate_prior as RP
from jobs import duck_engine as E
from jobs import duck_schedule as DS
from jobs import duck_transition as DT
from jobs import hosts_transforms as HT
from jobs import schedule_transforms as S
from jobs import update_transforms as T
from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT, HOSTS
from tests.duck_diff import assert_same, duck_inputs
from tests.duck_transition_cases import CASES, POLICIES
from tests.test_update import CONF, NOW, frame

pytestmark = pytest.mark.spark
PARK = 7200.0
ROUND = 3


class Case:
    """One case's inputs as Spark DataFrames and as relations of one DuckDB connection, and both twins' steps."""

    def __init__(self, spark, name: str):
        olds, hosts, fetch_output, fetch_list = CASES[name]()
        self.df = dict(crawldb=frame(spark, olds, CRAWLDB), hosts=frame(spark, hosts, HOSTS),
                       fetch_output=frame(spark, fetch_output, FETCH_OUTPUT),
                       fetch_list=frame(spark, fetch_list, FETCH_LIST))
        self.con = E.connect()
        self.rel = duck_inputs(self.con, **self.df)
        d, r = self.df, self.rel
        self.spark_followed = T.with_followed(d["fetch_list"], d["fetch_output"])
        self.duck_followed = DT.with_followed(self.con, r["fetch_list"], r["fetch_output"])
        self.spark_prepared = T.prepare(d["fetch_output"], self.spark_followed, d["crawldb"]).localCheckpoint()
        DT.prepare(self.con, r["fetch_output"], self.duck_followed, r["crawldb"]).create("prepared")
        self.duck_prepared = self.con.table("prepared")  # what duck_engine.register does (keep)
        self.spark_next = HT.host_next(d["hosts"], d["fetch_output"], park_duration_s=PARK, now=NOW)
        self.duck_next = DT.host_next(self.con, r["hosts"], r["fetch_output"], park_duration_s=PARK, now=NOW)

    def schedule(self, policy: str):
        return CONF.with_overrides(*POLICIES[policy]).schedule

    def priors(self, policy: str):
        sc = self.schedule(policy)
        return S.host_priors(self.df["hosts"], sc), DS.host_priors(self.con, self.rel["hosts"], sc)

    def with_rates(self, policy: str):
        sp, dp = self.priors(policy)
        sc = self.schedule(policy)
        return T.with_rates(self.spark_prepared, sc, sp), DT.with_rates(self.con, self.duck_prepared, sc, dp)

    def multipliers(self, policy: str) -> tuple[float, float]:
        from pyspark.sql import functions as F
        sc = self.schedule(policy)
        spark_rates, duck_rates = self.with_rates(policy)
        mu = S.round_multiplier(spark_rates, sc, cat=F.col(T.CAT), crawldb=self.df["crawldb"])
        urls = self.con.sql("SELECT url_fp FROM prepared")
        urls.create_view("round_urls", replace=True)
        stored = self.con.sql(DS.stored_buckets_sql(sc, crawldb="crawldb", round_urls="round_urls"))
        return mu, DS.round_multiplier(self.con, duck_rates, sc, cat=T.CAT, stored=stored)


_CASES: dict[str, Case] = {}


@pytest.fixture
def case(spark, request):
    name = request.param
    if name not in _CASES:
        _CASES[name] = Case(spark, name)
    return _CASES[name]


ALL = sorted(CASES)
BY_POLICY = [(c, p) for c in ALL for p in POLICIES]


@pytest.mark.parametrize("case", ALL, indirect=True)
def test_with_followed_prepare_and_host_next(case):
    assert_same(case.spark_followed, case.duck_followed)
    assert_same(case.spark_prepared, case.duck_prepared)
    assert_same(T.prepare(case.df["fetch_output"], case.spark_followed, None),  # the edges' use: no crawl-DB read
                DT.prepare(case.con, case.rel["fetch_output"], case.duck_followed, None))
    assert_same(case.spark_next, case.duck_next)


@pytest.mark.parametrize("case,policy", BY_POLICY, indirect=["case"])
def test_priors_and_with_rates(case, policy):
    for spark_df, duck_rel in (case.priors(policy), case.with_rates(policy)):
        assert_same(spark_df, duck_rel)


@pytest.mark.parametrize("case,policy", BY_POLICY, indirect=["case"])
def test_transition(case, policy):
    sc = case.schedule(policy)
    mu = case.multipliers(policy)[0] if policy == "adaptive" else None
    sp, dp = case.priors(policy)
    want = T.transition(case.spark_prepared, case.spark_next, sc, round_no=ROUND, now=NOW, priors=sp, multiplier=mu)
    got = DT.transition(case.con, case.duck_prepared, case.duck_next, sc, round_no=ROUND, now=NOW, priors=dp,
                        multiplier=mu)
    assert_same(want, got)


@pytest.mark.parametrize("case", ["table", "visits", "gone", "realistic"], indirect=True)
def test_round_multiplier(case):
    """The round's rows bucketed here, the crawl DB's others by the SQL the gather runs (buckets summed)."""
    spark_mu, duck_mu = case.multipliers("adaptive")
    assert duck_mu == pytest.approx(spark_mu, rel=1e-9)


def test_the_crawl_db_aggregate_is_the_same_sql_in_spark(spark):
    """``stored_buckets_sql`` runs as it is in Spark SQL (where the gather computes it) and in DuckDB."""
    olds, *_ = CASES["realistic"]()
    crawldb = frame(spark, olds, CRAWLDB)
    urls = spark.createDataFrame([(r["url_fp"],) for r in olds[::3]], "url_fp long")
    crawldb.createOrReplaceTempView("da_crawldb")
    urls.createOrReplaceTempView("da_round_urls")
    sql = DS.stored_buckets_sql(CONF.schedule, crawldb="da_crawldb", round_urls="da_round_urls")
    want = spark.sql(sql)
    con = E.connect()
    duck_inputs(con, da_crawldb=crawldb, da_round_urls=urls)
    got = con.sql(sql).select("br, bw, r_sum, w_sum, n")
    assert want.count() > 3
    assert_same(want, got)


def test_http_dates(spark):
    texts = ["Sun, 06 Nov 1994 08:49:37 GMT", "sun, 06 nov 1994 08:49:37 GMT", "Sun, 6 Nov 1994 08:49:37 GMT",
             "Mon, 31 Feb 2020 00:00:00 GMT", "Thu, 29 Feb 2024 23:59:59 GMT", "Thu, 00 Jan 2024 10:00:00 GMT",
             "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:49:37 UTC", "yesterday", "", None]
    from pyspark.sql import functions as F
    df = spark.createDataFrame([(t,) for t in texts], "h string")
    con = E.connect()
    rel = duck_inputs(con, h=df)["h"]
    assert_same(df.select("h", S.http_date_seconds(F.col("h")).alias("s")),
                rel.select(f"h, {DS.http_date_seconds('h')} AS s"))


def test_the_sql_mixture_formulas_are_the_pure_ones():
    import pyarrow as pa

    from tests.test_change_rate import check_mixture_case, mixture_cases
    cases = mixture_cases(5)
    con = E.connect()
    M, c = DS.SQL_MATH, DS.Sql
    names = ("hist", "span", "prior", "m", "gap", "w")
    con.register("t", pa.table({n: [r[i] for r in cases] for i, n in enumerate(names)}))
    got = con.sql(f"""
        WITH a AS (SELECT *, {RP.mixture_weights(c('prior'), c('m'), 1.0, M)} AS weights FROM t),
        b AS (SELECT *, {RP.log_posterior(c('hist'), c('span'), c('weights'), M)} AS lp FROM a),
        d AS (SELECT *, {RP.responsibilities(c('lp'), RP.log_normaliser(c('lp'), M), M)} AS resp FROM b),
        e AS (SELECT *, {RP.log_mean(c('resp'), M)} AS mean FROM d)
        SELECT weights, resp, mean, {RP.log_sd(c('resp'), c('mean'), M)} AS sd,
               {RP.revisit_mass(c('resp'), c('gap'), 400.0, M)} AS mass,
               {R.decided_rate(c('prior'), c('prior') / 10, c('w'), 50.0, M)} AS decided,
               {R.recheck_interval(c('gap'), c('w'), 60.0, 1e7, M)} AS recheck,
               {R.adaptive_interval(c('prior'), c('w'), 50.0, 60.0, 1e7, M,
                                    given_up_s=R.recheck_interval(c('gap'), c('w'), 60.0, 1e7, M))} AS given_up
        FROM e""")
    cols = got.columns
    for case, row in zip(cases, got.fetchall()):
        check_mixture_case(case, dict(zip(cols, row)))


def test_the_sql_formulas_are_the_pure_ones():
    """``SQL_MATH`` evaluates ``crawl_udfs.change_rate``'s formulas as the plain floats do (tests/test_schedule.py
    pins COLUMN_MATH to the same)."""
    rnd = random.Random(3)
    con = E.connect()
    M, c = DS.SQL_MATH, DS.Sql
    rows = []
    for _ in range(60):
        hist = [rnd.choice([0.0, 10 ** rnd.uniform(-4, 6)]) for _ in range(rnd.randint(0, 6))]
        visits = float(rnd.randint(0, 50))
        rows.append((hist, rnd.choice([0.0, 10 ** rnd.uniform(0, 7)]), 10 ** rnd.uniform(-8, -1),
                     10 ** rnd.uniform(-3, 2), 10 ** rnd.uniform(0, 6), rnd.random() < 0.5, visits,
                     float(rnd.randint(0, int(visits))), rnd.choice([0.0, 10 ** rnd.uniform(0, 7)])))
    import pyarrow as pa
    names = ("hist", "span", "prior", "w", "old_iv", "changed", "visits", "changes", "vspan")
    con.register("t", pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}))
    got = con.sql(f"""SELECT {R.change_rate(c('hist'), c('span'), c('prior'), 1.0, M)},
                             {R.host_rate(c('visits'), c('changes'), c('vspan'), 604800.0, M)},
                             {R.adaptive_interval(c('prior'), c('w'), 50.0, 60.0, 1e7, M)},
                             {R.nutch_interval(c('old_iv'), c('changed'), 0.4, 0.2, 60.0, 1e7, M)},
                             {M.expm1(c('prior * hist[1]'))} FROM t""").fetchall()
    for (hist, span, prior, w, old_iv, changed, visits, changes, vspan), g in zip(rows, got):
        assert g[0] == pytest.approx(R.change_rate(hist, span, prior, 1.0), rel=1e-9)
        assert g[1] == pytest.approx(R.host_rate(visits, changes, vspan, 604800.0), rel=1e-9)
        assert g[2] == pytest.approx(R.adaptive_interval(prior, w, 50.0, 60.0, 1e7), rel=1e-9)
        assert g[3] == pytest.approx(R.nutch_interval(old_iv, changed, 0.4, 0.2, 60.0, 1e7), rel=1e-9)
        if hist and prior * hist[0] < 700:  # PlainMath caps exp at 700 (Spark and DuckDB give inf past ~709)
            assert g[4] == pytest.approx(R.PLAIN.expm1(prior * hist[0]), rel=1e-12, abs=0)
