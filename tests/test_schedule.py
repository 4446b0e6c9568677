"""The re-crawl schedule in update, on small DataFrames: the Column formulas pinned to the pure ones,
the history and intervals of transition under each policy, gone URLs retired, permanent redirects moving
their history."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from crawl_udfs import change_rate as R
from crawl_udfs import rate_prior as RP
from jobs import hosts_transforms as HT
from jobs import schedule_transforms as S
from jobs import update_transforms as T
from jobs.discover_transforms import discover
from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT, HOSTS
from tests.test_update import CONF, FIRST, NOW, T0, by_url, frame, link, listed, old, page, sec

pytestmark = pytest.mark.spark
DAY = 86400.0


def test_the_column_formulas_are_the_pure_ones(spark):
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BooleanType, DoubleType, StructField, StructType

    rnd = random.Random(3)
    rows = []
    for _ in range(40):
        hist = [rnd.choice([0.0, 10 ** rnd.uniform(0, 6)]) for _ in range(rnd.randint(0, 6))]
        rows.append((hist, rnd.choice([0.0, 10 ** rnd.uniform(0, 7)]), 10 ** rnd.uniform(-8, -1),
                     10 ** rnd.uniform(-3, 2), 10 ** rnd.uniform(0, 6), rnd.random() < 0.5,
                     float(rnd.randint(0, 50)), float(rnd.randint(0, 50)), 10 ** rnd.uniform(0, 7)))
    rows = [r[:6] + (r[6], min(r[6], r[7]) if r[6] else 0.0, r[8]) for r in rows]
    schema = StructType([StructField("hist", ArrayType(DoubleType())), *[
        StructField(n, BooleanType() if n == "changed" else DoubleType())
        for n in ("span", "prior", "w", "old_iv", "changed", "visits", "changes", "vspan")]])
    df = spark.createDataFrame(rows, schema)
    M, c = S.COLUMN_MATH, F.col
    got = df.select(R.change_rate(c("hist"), c("span"), c("prior"), 1.0, M).alias("rate"),
                    R.host_rate(c("visits"), c("changes"), c("vspan"), 604800.0, M).alias("host"),
                    R.adaptive_interval(c("prior"), c("w"), 50.0, 60.0, 1e7, M).alias("adaptive"),
                    R.nutch_interval(c("old_iv"), c("changed"), 0.4, 0.2, 60.0, 1e7, M).alias("nutch")).collect()
    for (hist, span, prior, w, old_iv, changed, visits, changes, vspan), g in zip(rows, got):
        assert g["rate"] == pytest.approx(R.change_rate(hist, span, prior, 1.0), rel=1e-9)
        assert g["host"] == pytest.approx(R.host_rate(visits, changes, vspan, 604800.0), rel=1e-9)
        assert g["adaptive"] == pytest.approx(R.adaptive_interval(prior, w, 50.0, 60.0, 1e7), rel=1e-9)
        assert g["nutch"] == pytest.approx(R.nutch_interval(old_iv, changed, 0.4, 0.2, 60.0, 1e7), rel=1e-9)


def test_the_mixture_formulas_are_the_pure_ones(spark):
    from pyspark.sql import functions as F

    from tests.test_change_rate import check_mixture_case, mixture_cases
    cases = mixture_cases(5)
    df = spark.createDataFrame(cases, "hist array<double>, span double, prior double, m array<double>, gap double, "
                                      "w double")
    M, c = S.COLUMN_MATH, F.col
    df = (df.withColumn("weights", RP.mixture_weights(c("prior"), c("m"), 1.0, M))
          .withColumn("lp", RP.log_posterior(c("hist"), c("span"), c("weights"), M))
          .withColumn("resp", RP.responsibilities(c("lp"), RP.log_normaliser(c("lp"), M), M))
          .withColumn("mean", RP.log_mean(c("resp"), M)))
    got = df.select("weights", "resp", "mean", RP.log_sd(c("resp"), c("mean"), M).alias("sd"),
                    RP.revisit_mass(c("resp"), c("gap"), 400.0, M).alias("mass"),
                    R.decided_rate(c("prior"), c("prior") / 10, c("w"), 50.0, M).alias("decided"),
                    R.recheck_interval(c("gap"), c("w"), 60.0, 1e7, M).alias("recheck"),
                    R.adaptive_interval(c("prior"), c("w"), 50.0, 60.0, 1e7, M,
                                        given_up_s=R.recheck_interval(c("gap"), c("w"), 60.0, 1e7, M)).alias("given_up")
                    ).collect()
    for case, g in zip(cases, got):
        check_mixture_case(case, g.asDict())


def test_http_dates(spark):
    from pyspark.sql import functions as F
    df = spark.createDataFrame([("Sun, 06 Nov 1994 08:49:37 GMT",), ("yesterday",), (None,)], "h string")
    got = [r[0] for r in df.select(S.http_date_seconds(F.col("h"))).collect()]
    assert got == [784111777, None, None]


# -- transition under each policy --------------------------------------------------------------------
U = "http://s.test/"
HIST = [3600.0] * 6


def _http_date(t: dt.datetime) -> str:
    return t.strftime("%a, %d %b %Y %H:%M:%S GMT")


# name -> (page fields, old crawl-DB fields, (gap, changed, seconds since Last-Modified) of the visit)
VISITS = {
    "slow_unchanged": (dict(outcome="ok", status_code=200, digest="sha1:A"),
                       dict(status="fetched", digest="sha1:A", last_visit_time=T0 - sec(DAY),
                            unchanged_span_s=30 * DAY, change_intervals_s=[]), (DAY, False, None)),
    "fast_changed": (dict(outcome="ok", status_code=200, digest="sha1:B"),
                     dict(status="fetched", digest="sha1:A", last_visit_time=T0 - sec(3600),
                          change_intervals_s=HIST, unchanged_span_s=0.0), (3600.0, True, None)),
    "dated_change": (dict(outcome="ok", status_code=200, digest="sha1:B", last_modified=_http_date(T0 - sec(600))),
                     dict(status="fetched", digest="sha1:A", warc_fetch_time=T0 - sec(DAY)), (DAY, True, 600.0)),
    "revisit_304": (dict(outcome="not_modified", status_code=304),
                    dict(status="fetched", digest="sha1:A", last_visit_time=T0 - sec(2 * DAY), fetch_interval_s=DAY),
                    (2 * DAY, False, None)),
    # a first copy dated by Last-Modified (schedule.first_copy_dated): its history starts [0], 30 days
    "first_dated": (dict(outcome="ok", status_code=200, digest="sha1:J", last_modified=_http_date(T0 - sec(30 * DAY))),
                    dict(), ("first", 30 * DAY)),
    "first_on_fast_host": (dict(outcome="ok", status_code=200, digest="sha1:F", host="fast.test"),
                           dict(host="fast.test"), None),
    "first_on_slow_host": (dict(outcome="ok", status_code=200, digest="sha1:G", host="slow.test"),
                           dict(host="slow.test"), None),
    "first_on_flood_host": (dict(outcome="ok", status_code=200, digest="sha1:H", host="flood.test"),
                            dict(host="flood.test"), None),
    # a page of the flood host seen changed at each of 30 visits, each change dated ~30 s before the visit
    "flood_known": (dict(outcome="ok", status_code=200, digest="sha1:K", host="flood.test",
                         last_modified=_http_date(T0 - sec(30))),
                    dict(host="flood.test", status="fetched", digest="sha1:A", last_visit_time=T0 - sec(60),
                         change_intervals_s=[0.0] * 30, unchanged_span_s=30 * 30.0), (60.0, True, 30.0)),
}
# pooled revisits (visits, changed, seconds): changes every ~9.5 h, every ~2 years, every ~30 s
HOST_REVISITS = {"fast.test": (100, 10, 100 * 3600.0), "slow.test": (100, 1, 100 * 7 * DAY),
                 "flood.test": (100, 99, 100 * 60.0)}


def _transition(spark, policy: str, multiplier=None, stored: list[dict] = ()):
    conf = CONF.with_overrides(f'schedule.policy="{policy}"', "schedule.min_interval_s=600.0",
                               "schedule.max_interval_s=5000000.0")
    pages, olds = [], []
    for name, (p, o, _) in VISITS.items():
        url = (U if "host" not in p else f"http://{p['host']}/") + name
        pages.append(page(url, p["outcome"], **{k: v for k, v in p.items() if k != "outcome"}))
        olds.append(old(url, **{**o, "host": pages[-1]["host"]}))
    hosts = frame(spark, [dict(host=h, consecutive_failures=0, pages_fetched=0, bytes_fetched=0, requests=0,
                               duplicate_pages=0, new_content_pages=0, updated_round=0, revisits=n, revisit_changes=x,
                               revisit_span_s=t) for h, (n, x, t) in HOST_REVISITS.items()], HOSTS)
    fetch_output = frame(spark, pages, FETCH_OUTPUT)
    crawldb = frame(spark, olds + list(stored), CRAWLDB)
    prepared = T.prepare(fetch_output, frame(spark, [], FETCH_LIST), crawldb)
    priors = S.host_priors(hosts, conf.schedule)
    if policy == "adaptive" and multiplier is None:
        from pyspark.sql import functions as F
        multiplier = S.round_multiplier(T.with_rates(prepared, conf.schedule, priors), conf.schedule,
                                        cat=F.col(T.CAT), crawldb=crawldb)
    nxt = HT.host_next(hosts, fetch_output, park_duration_s=60.0, now=NOW)
    rows = T.transition(prepared, nxt, conf.schedule, round_no=1, now=NOW, priors=priors, multiplier=multiplier)
    return {u.rsplit("/", 1)[1]: r for u, r in by_url(rows).items()}, multiplier, conf


@pytest.fixture(scope="module")
def policies(spark):
    return {p: _transition(spark, p) for p in ("fixed", "nutch", "adaptive")}


def _prior(host: str) -> float:
    n, x, t = HOST_REVISITS.get(host, (0, 0, 0.0))
    return R.host_rate(n, x, t, CONF.schedule.default_interval_s)


def _history(name: str):
    """The history (changed intervals, unchanged span) update must leave for VISITS[name]."""
    _, o, visit = VISITS[name]
    hist, span = o.get("change_intervals_s"), o.get("unchanged_span_s")
    if visit is not None and visit[0] == "first":
        return R.first_copy(visit[1])
    if visit is not None:
        return R.observe(hist or [], span or 0.0, *visit, keep=CONF.schedule.change_history)
    return hist, span


def _estimate(name: str) -> tuple[float, float]:
    """(rate, the rate a give-up is decided on) of VISITS[name]: its host's prior has no mass yet."""
    hist, span = _history(name)
    weights = RP.mixture_weights(_prior(VISITS[name][0].get("host", "s.test")), [0.0] * len(RP.LOG_GRID),
                                CONF.schedule.prior_changes)
    rate, low, _ = RP.estimate(hist or [], span or 0.0, weights, CONF.schedule.prior_changes)
    return rate, low


def test_history_and_rate_are_kept_alike_under_every_policy_and_are_the_pure_ones(policies):
    rows = {p: got for p, (got, _, _) in policies.items()}
    for name in VISITS:
        hist, span = _history(name)
        want_rate = _estimate(name)[0]
        for policy, got in rows.items():
            r = got[name]
            assert r["change_intervals_s"] == hist and r["unchanged_span_s"] == pytest.approx(span), (policy, name)
            if policy == "adaptive":  # the only policy that estimates the rate
                assert r["change_rate"] == pytest.approx(want_rate, rel=1e-9), (policy, name)
            else:
                assert r["change_rate"] is None
            assert r["last_visit_time"] == T0
    assert rows["fixed"]["dated_change"]["change_intervals_s"] == [0.0]  # Last-Modified dated the change
    assert rows["fixed"]["first_dated"]["change_intervals_s"] == [0.0]  # and the first copy's last change
    assert rows["fixed"]["first_on_fast_host"]["change_intervals_s"] is None  # no Last-Modified: no history
    # a page untouched for 30 days starts slower than its host's rate (the prior, ~1/7 days in this conf)
    assert rows["adaptive"]["first_dated"]["change_rate"] < 0.5 * _prior("s.test")


def test_fixed_policy_is_the_default_interval(policies):
    got, _, _ = policies["fixed"]
    assert {r["fetch_interval_s"] for r in got.values()} == {DAY}


def test_nutch_policy(policies):
    got, _, _ = policies["nutch"]
    assert got["slow_unchanged"]["fetch_interval_s"] == pytest.approx(DAY * 1.4)
    assert got["fast_changed"]["fetch_interval_s"] == pytest.approx(DAY * 0.8)
    assert got["revisit_304"]["fetch_interval_s"] == pytest.approx(DAY * 1.4)
    assert got["first_on_fast_host"]["fetch_interval_s"] == DAY  # no previous copy: the default


def test_adaptive_policy_spends_the_budget_and_new_pages_start_from_their_hosts_rate(policies):
    got, mu, conf = policies["adaptive"]
    s = conf.schedule
    counted = {}  # the intervals the budget counts: a page given up at the maximum, not at its re-check
    for name, r in got.items():
        decided = R.decided_rate(r["change_rate"], _estimate(name)[1], r["score"], mu)
        counted[name] = R.adaptive_interval(decided, r["score"], mu, s.min_interval_s, s.max_interval_s)
        recheck = R.recheck_interval(VISITS[name][1].get("fetch_interval_s", DAY), r["score"], s.min_interval_s,
                                     s.max_interval_s)
        assert r["fetch_interval_s"] == pytest.approx(
            R.adaptive_interval(decided, r["score"], mu, s.min_interval_s, s.max_interval_s, given_up_s=recheck),
            rel=1e-9)
        assert s.min_interval_s <= r["fetch_interval_s"] <= s.max_interval_s
        assert r["next_fetch_time"] == T0 + sec(r["fetch_interval_s"]) or \
            abs((r["next_fetch_time"] - T0).total_seconds() - r["fetch_interval_s"]) < 1e-3
    spent = sum(1 / iv for iv in counted.values())
    assert spent == pytest.approx(len(got) / s.default_interval_s, rel=0.15)  # bucketed rates: near the budget
    assert got["first_on_fast_host"]["fetch_interval_s"] < got["first_on_slow_host"]["fetch_interval_s"] / 3
    # a page shown by its own visits to change faster than it can be kept fresh gets less: given up, re-checked
    # at twice its previous interval (whether a new page of that host is given up on is decided on its low
    # rate: the loop above checks it, and tests/test_change_rate.py that an overshooting estimate is kept)
    assert got["flood_known"]["fetch_interval_s"] == 2 * DAY
    assert got["first_on_flood_host"]["fetch_interval_s"] > got["first_on_fast_host"]["fetch_interval_s"]


def test_adaptive_budget_is_spent_over_every_stored_page_not_the_rounds_alone(spark, policies):
    """The crawl DB's stored pages outside the round share the budget (count / default_interval_s for all):
    20 pages changing about once a year (bench/schedule_bench.py found the round-only multiplier spent a
    quarter less than fixed: a round over-represents the pages fetched often)."""
    stored = [old(f"http://quiet.test/{k}", status="fetched" if k % 2 else "not_modified", change_rate=3e-8,
                  score=1.0) for k in range(20)]
    stored.append(old("http://quiet.test/never", status="unfetched", change_rate=1.0))  # no copy: no share
    got, mu, conf = _transition(spark, "adaptive", stored=stored)
    s = conf.schedule
    spent = (sum(1 / r["fetch_interval_s"] for r in got.values())
             + 20 / R.adaptive_interval(3e-8, 1.0, mu, s.min_interval_s, s.max_interval_s))
    assert spent == pytest.approx((len(got) + 20) / s.default_interval_s, rel=0.15)
    # the quiet pages free budget for the round's: every interval of the round at most the round-only one's
    alone, _, _ = policies["adaptive"]
    assert all(got[k]["fetch_interval_s"] <= alone[k]["fetch_interval_s"] + 1e-6 for k in got)
    assert mu < policies["adaptive"][1]


# -- gone and moved ------------------------------------------------------------------------------------
def test_gone_is_rechecked_at_growing_intervals_then_retired(spark):
    conf = CONF.with_overrides("schedule.gone_checks=3", "schedule.gone_backoff=2.0")
    olds = [old(U + f"g{k}", status="gone" if k else "fetched", gone_checks=k or None) for k in range(3)]
    olds.append(old(U + "back", status="gone", gone_checks=2))
    pages = [page(U + f"g{k}", "http_error", status_code=404 if k != 1 else 410) for k in range(3)]
    pages.append(page(U + "back", "ok", status_code=200, digest="sha1:Z"))
    fetch_output = frame(spark, pages, FETCH_OUTPUT)
    prepared = T.prepare(fetch_output, frame(spark, [], FETCH_LIST), frame(spark, olds, CRAWLDB))
    nxt = HT.host_next(frame(spark, [], HOSTS), fetch_output, park_duration_s=60.0, now=NOW)
    got = {u.rsplit("/", 1)[1]: r for u, r in by_url(T.transition(prepared, nxt, conf.schedule, round_no=1,
                                                                   now=NOW)).items()}
    g = conf.schedule.gone_interval_s
    assert [(got[f"g{k}"]["status"], got[f"g{k}"]["gone_checks"], got[f"g{k}"]["fetch_interval_s"])
            for k in range(3)] == [("gone", 1, g), ("gone", 2, 2 * g), ("retired", 3, 4 * g)]
    assert got["back"]["status"] == "fetched" and got["back"]["gone_checks"] is None


def test_retired_is_never_generated():
    from schemas.status import ELIGIBLE, Status
    assert Status.RETIRED not in ELIGIBLE


def test_a_permanent_redirect_moves_history_and_score_to_its_new_target(spark):
    a = "http://m.test/"
    moved = dict(status="fetched", change_count=4, unchanged_count=9, last_change_time=FIRST,
                 change_intervals_s=[3600.0, 0.0], unchanged_span_s=5 * DAY, change_rate=2e-5, score=3.0)
    pages = [page(a + "old", "redirect", status_code=301, redirect_to=a + "new", outlinks=[link(a + "new", "redirect")]),
             page(a + "tmp", "redirect", status_code=302, redirect_to=a + "t2", outlinks=[link(a + "t2", "redirect")])]
    crawldb = frame(spark, [old(a + "old", **moved), old(a + "tmp", **moved)], CRAWLDB)
    flist = [listed(a + "old", score=3.0), listed(a + "tmp", score=3.0)]
    prepared = T.prepare(frame(spark, pages, FETCH_OUTPUT), frame(spark, flist, FETCH_LIST), crawldb)
    got = by_url(discover(prepared, crawldb, CONF.scope, duplicates=None, follow_nofollow=False,
                          default_interval_s=DAY, round_no=2, now=NOW))
    new, t2 = got[a + "new"], got[a + "t2"]
    assert {k: new[k] for k in (*T.MOVED, "score")} == {k: moved[k] for k in (*T.MOVED, "score")}
    assert t2["score"] == 3.0 and t2["change_count"] == 0 and t2["change_intervals_s"] is None  # 302: no move


def test_a_permanent_redirect_to_a_known_url_moves_the_score_and_the_history_if_never_fetched(spark):
    a = "http://m.test/"
    hist = dict(change_count=4, unchanged_count=9, last_change_time=FIRST, change_intervals_s=[3600.0, 0.0],
                unchanged_span_s=5 * DAY, change_rate=2e-5)
    own = dict(change_count=1, unchanged_count=2, last_change_time=NOW, change_intervals_s=[60.0],
               unchanged_span_s=DAY, change_rate=1e-3)
    olds = [old(a + "old", status="fetched", score=3.0, **hist), old(a + "o2", status="fetched", score=2.0, **hist),
            old(a + "tmp", status="fetched", score=3.0, **hist),
            old(a + "known", score=0.5),                                          # never fetched: takes it all
            old(a + "seen", status="fetched", fetch_count=3, score=9.0, **own),   # fetched: keeps its history
            old(a + "t2", score=0.5)]
    pages = [page(a + "old", "redirect", status_code=301, redirect_to=a + "known", outlinks=[link(a + "known", "redirect")]),
             page(a + "o2", "redirect", status_code=308, redirect_to=a + "seen", outlinks=[link(a + "seen", "redirect")]),
             page(a + "tmp", "redirect", status_code=302, redirect_to=a + "t2", outlinks=[link(a + "t2", "redirect")])]
    crawldb = frame(spark, olds, CRAWLDB)
    flist = [listed(a + "old", score=3.0), listed(a + "o2", score=2.0), listed(a + "tmp", score=3.0)]
    prepared = T.prepare(frame(spark, pages, FETCH_OUTPUT), frame(spark, flist, FETCH_LIST), crawldb)
    got = by_url(T.moved_to_known(prepared, crawldb, round_no=2))
    assert set(got) == {a + "known", a + "seen"}                                # a 302 moves nothing
    known, seen = got[a + "known"], got[a + "seen"]
    assert {k: known[k] for k in (*T.MOVED, "score")} == {**hist, "score": 3.0}
    assert {k: seen[k] for k in (*T.MOVED, "score")} == {**own, "score": 9.0}   # the larger score: its own
    assert known["updated_round"] == 2 and known["status"] == "unfetched"
    assert discover(prepared, crawldb, CONF.scope, duplicates=None, follow_nofollow=False,
                    default_interval_s=DAY, round_no=2, now=NOW).count() == 0  # nothing new to insert
