"""The DuckDB twins of the hosts rows (jobs/duck_hosts.py, jobs/duck_patterns.py) against their Spark twins
(jobs/hosts_transforms.py, jobs/pattern_transforms.py): the same inputs, the same columns, types and rows.

The inputs that come from the Spark pipeline (``updated``, ``near``, the crawl-DB slice) are made by
``update.plan`` itself on the rounds of tests/test_update.py (hosts counters, budgets, a self-copying
host) and on a synthetic round (``_realistic``); then every step of the hosts chain runs on both
engines, the DuckDB chain fed by its own results, and each step is compared."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from crawl_udfs import config
from crawl_udfs.url_normalize import fingerprint
from jobs import duck_hosts as DH
from jobs import duck_patterns as DP
from jobs import hosts_transforms as HT
from jobs import pattern_transforms as P
from jobs.duck_engine import connect
from jobs.generate import max_urls_per_host
from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT, HOSTS, NEAR_DUP_INDEX
from tests import test_update as TU
from tests.duck_diff import assert_same as _assert_same
from tests.duck_diff import duck_inputs

pytestmark = pytest.mark.spark

NOW, T0, FIRST, sec = TU.NOW, TU.T0, TU.FIRST, TU.sec


def _nullable(t):
    """``t`` with every nested field and element nullable (DuckDB's nested types have no NOT NULL)."""
    from pyspark.sql import types as T
    if isinstance(t, T.ArrayType):
        return T.ArrayType(_nullable(t.elementType), True)
    if isinstance(t, T.StructType):
        return T.StructType([T.StructField(f.name, _nullable(f.dataType), True) for f in t.fields])
    if isinstance(t, T.MapType):
        return T.MapType(_nullable(t.keyType), _nullable(t.valueType), True)
    return t


def assert_same(spark_df, rel, **kw):
    """tests/duck_diff.py's, the Spark side's nested NOT NULLs dropped first (``learn``'s rules are structs
    of non-null fields in Spark, nullable in DuckDB; the hosts table's column is nullable either way)."""
    from pyspark.sql import functions as F
    cols = [F.col(f"`{f.name}`").cast(_nullable(f.dataType)).alias(f.name) if _nullable(f.dataType) != f.dataType
            else F.col(f"`{f.name}`") for f in spark_df.schema.fields]
    _assert_same(spark_df.select(cols), rel, **kw)


# -- the Spark pipeline's inputs, from update.plan ---------------------------------------------------
def _plan_inputs(spark, tmp_path, conf, olds, hosts, rows, *, listed=(), round_no=1, index=None):
    """(inputs of the hosts chain as Spark DataFrames, the plan) for one round through ``update.plan``."""
    from jobs import crawldb_slice as S
    from jobs import update
    seen = {}

    def observe(name, df):
        seen[name] = df
        return df
    crawldb, hosts = TU.frame(spark, olds, CRAWLDB), TU.frame(spark, hosts, HOSTS)
    fetch_output = TU.frame(spark, rows, FETCH_OUTPUT)
    fetch_list = TU.frame(spark, list(listed), FETCH_LIST)
    p = update.plan(crawldb, hosts, fetch_output, fetch_list, conf,
                    round_no=round_no, now=NOW, near_dup_index=index, keep=TU._staged_in(spark, tmp_path),
                    observe=observe)
    ins = dict(updated=p.updated, known=S.round_slice(crawldb, fetch_output).localCheckpoint(), hosts=hosts,
               fetch_output=fetch_output, fetch_list=fetch_list, crawldb=crawldb)
    if "near_duplicates" in seen:
        ins["near"] = seen["near_duplicates"]
    return ins, p


def _compare_chain(spark, ins: dict, conf, *, round_no: int = 1) -> dict:
    """Every step of the hosts chain on both engines (as update.plan chains them), compared; Spark's results."""
    con = connect()
    d = duck_inputs(con, **ins)
    near_s, near_d = ins.get("near"), d.get("near")
    park = conf.politeness.failure_park_duration_s
    budgets = (conf.budget.max_pages_per_host, conf.budget.max_bytes_per_host)
    s, k = {}, {}

    def done(*dfs):
        """Each Spark step computed once (a local checkpoint), not again under every later step's lineage."""
        cps = tuple(df.localCheckpoint() for df in dfs)
        return cps if len(cps) > 1 else cps[0]
    s["signals"] = done(HT.trap_signals(ins["updated"], near_s, ins["known"]))
    k["signals"] = DH.trap_signals(d["updated"], near_d, d["known"])
    s["counts"], k["counts"] = done(HT.page_counts(ins["updated"])), DH.page_counts(d["updated"])
    s_counts = s["counts"].join(s["signals"], "host", "left")
    k_counts = DH.query("SELECT c.*, g.* EXCLUDE (host) FROM $c c LEFT JOIN $g g ON c.host = g.host",
                        c=k["counts"], g=k["signals"])
    s["hosts_new"] = done(HT.hosts_update(ins["hosts"], ins["fetch_output"], s_counts, park_duration_s=park,
                                          round_no=round_no, now=NOW))
    k["hosts_new"] = DH.hosts_update(d["hosts"], d["fetch_output"], k_counts, park_duration_s=park,
                                     round_no=round_no, now=NOW)
    cap = max_urls_per_host(conf)
    s["judged"] = done(HT.judge_traps(s["hosts_new"], conf.trap, base_cap=cap, now=NOW))
    k["judged"] = DH.judge_traps(k["hosts_new"], conf.trap, base_cap=cap, now=NOW)
    s["budgeted"], s["reached"], s["exhausted"] = done(*HT.exhausted_hosts(s["judged"], ins["hosts"], *budgets))
    k["budgeted"], k["reached"], k["exhausted"] = DH.exhausted_hosts(k["judged"], d["hosts"], *budgets)
    s["budget_rows"] = done(HT.budget_rows(ins["crawldb"], s["reached"], round_no=round_no))
    k["budget_rows"] = DH.budget_rows(d["crawldb"], k["reached"], round_no=round_no)
    if conf.dedup.learn_patterns:
        dd = conf.dedup
        sample = dd.pattern_sample_pages
        s["learning"] = done(P.learning_hosts(ins["fetch_output"], ins["fetch_list"], ins["hosts"],
                                              sample_pages=sample))
        k["learning"] = DP.learning_hosts(d["fetch_output"], d["fetch_list"], d["hosts"], sample_pages=sample)
        s["pages"] = done(P.stored_pages(ins["known"], ins["updated"], s["learning"]))
        k["pages"] = DP.stored_pages(d["known"], d["updated"], k["learning"])
        s["learnt"] = done(P.learn(s["pages"], min_pages=dd.pattern_min_pages, min_share=dd.pattern_min_share))
        k["learnt"] = DP.learn(con, k["pages"], min_pages=dd.pattern_min_pages, min_share=dd.pattern_min_share)
        s["with_patterns"] = done(P.with_patterns(s["budgeted"], s["learnt"], s["learning"]))
        k["with_patterns"] = DP.with_patterns(k["budgeted"], k["learnt"], k["learning"])
    for step in s:
        try:
            assert_same(s[step], k[step])
        except AssertionError as e:
            raise AssertionError(f"step {step}: {e}") from None
    return s


# -- trap signals and the trap judgement, on tests/test_update.py's tables ------------------------------
def test_trap_signals(spark):
    rows = [("a.test", 1, "duplicate", 100, True), ("a.test", 2, "duplicate", 100, True),
            ("a.test", 3, "duplicate", 4, True), ("a.test", 4, "fetched", None, True),
            ("a.test", 5, "duplicate", 102, True), ("a.test", 6, "duplicate", 100, False),
            ("m.test", 7, "duplicate", 102, True), ("m.test", 8, "duplicate", 103, True),
            ("m.test", 9, "fetched", None, True)] + [("f.test", i, "duplicate", 102, True) for i in (10, 11, 12, 13)] + [
           ("f.test", 14, "duplicate", 999, True), ("g.test", 15, "duplicate", 16, None),
           ("g.test", 16, "fetched", None, True), ("g.test", 17, "duplicate", 16, True)]
    updated = spark.createDataFrame(rows, TU.SIG_SCHEMA)
    near = spark.createDataFrame([(2, 100), (3, 4), (7, 102), (8, 103), (10, 102), (11, 102), (12, 102), (14, 999)],
                                 "url_fp long, _near_of long")
    crawldb = spark.createDataFrame([(100, "a.test"), (102, "c.test"), (103, "c.test"), (6, "a.test")],
                                    "url_fp long, host string")
    con = connect()
    d = duck_inputs(con, updated=updated, near=near, crawldb=crawldb)
    assert_same(HT.trap_signals(updated, near, crawldb), DH.trap_signals(d["updated"], d["near"], d["crawldb"]))
    assert_same(HT.trap_signals(updated, None, crawldb), DH.trap_signals(d["updated"], None, d["crawldb"]))


#: test_update.test_judge_traps's table of (name, row, want), read from its parametrisation.
JUDGE_CASES = next(m for m in TU.test_judge_traps.pytestmark if m.name == "parametrize").args[1]


def test_judge_traps_table(spark):
    """Every row of test_update's judgement table, and the table at other settings (throttle at once, a
    confidence whose bound prints on a half: Java's %.1f rounds it up)."""
    rows = [row for _, row, _ in JUDGE_CASES]
    extra = [("x", 60, 20, 1, 18, 0, None, 0, 0, 0, None, None, "failures"),
             ("y", 60, 7, 0, 0, None, None, None, None, None, 3, FIRST, None),
             ("z", None, 5, 0, 5, 1, 0.1, 5, 0, 5, None, None, None)]
    hosts_new = spark.createDataFrame(rows + extra, TU.JUDGE_SCHEMA)
    con = connect()
    h = duck_inputs(con, hosts_new=hosts_new)["hosts_new"]
    others = config.load(overrides=["trap.min_pages=1", "trap.max_new_share=0.3", "trap.throttle_after_rounds=1",
                                    "trap.park_after_rounds=9", "trap.park_confidence=0.9"]).trap
    for trap, cap in ((TU.TRAP, 16), (others, 7), (config.load().trap, 1)):
        assert_same(HT.judge_traps(hosts_new, trap, base_cap=cap, now=NOW),
                    DH.judge_traps(h, trap, base_cap=cap, now=NOW))


def test_java_fixed_rounds_the_shortest_decimal_half_up(spark):
    """DuckDB's printf('%.1f') of 28.45 says 28.4, Spark's format_string 28.5: java_fixed says Spark's."""
    from pyspark.sql import functions as F
    values = [28.45, 0.25, 0.05, 2.9e-05, 99.95, 100.0, 0.0, 56.5, 1 / 3]
    want = [r[0] for r in spark.createDataFrame([(v,) for v in values], "x double")
            .select(F.format_string("%.1f", "x")).collect()]
    con = connect()
    got = [con.execute(f"SELECT {DH.java_fixed(f'CAST({v!r} AS DOUBLE)', 1)}").fetchone()[0] for v in values]
    assert got == want


# -- whole rounds through update.plan -----------------------------------------------------------
def test_round_hosts_counters_and_page_budget(spark, tmp_path):
    """tests/test_update.py's counters-and-budget round: robots, park, delay, resolve_error, budget rows."""
    a, b = "http://a.test/", "http://b.test/"
    olds = [TU.old(a + "ok"), TU.old(a + "dup"), TU.old(a + "nm", status="fetched", digest="sha1:NM"),
            TU.old(a + "404"), TU.old(a + "err"), TU.old(a + "def"),
            TU.old(a + "orig", status="fetched", digest="sha1:O"), TU.old(a + "left1"),
            TU.old(a + "left2", status="error_retry"), TU.old(b + "left"), TU.old(b + "ok")]
    pages = [TU.page(a + "ok", "ok", status_code=200, digest="sha1:NEW", wire_bytes=100,
                     outlinks=[TU.link(a + "fresh"), TU.link(b + "fresh"), TU.link("http://c.test/fresh")]),
             TU.page(a + "dup", "ok", status_code=200, digest="sha1:O", wire_bytes=50, outlinks=[TU.link(b + "x")]),
             TU.page(a + "nm", "not_modified", status_code=304, digest="sha1:NM", wire_bytes=0),
             TU.page(a + "404", "http_error", status_code=404, wire_bytes=7),
             TU.page(a + "err", "error", error_class="timeout"),
             TU.page(a + "def", "deferred", error_class="parked"),
             TU.page(b + "ok", "ok", status_code=200, digest="sha1:B", wire_bytes=10)]
    host_rows = [dict(round=1, partition=0, kind="host", host="a.test", requests=5, robots_status=200,
                      robots_fetched_at=T0, robots_expires_at=T0 + sec(86400), crawl_delay_s=2.0,
                      sitemaps=["http://a.test/sm.xml"], ip="127.10.0.1", next_allowed_at=T0 + sec(60),
                      consecutive_failures=1, parked=True, park_reason="failures", robots_body=b"User-agent: *",
                      delay_s=2.5),
                 dict(round=1, partition=1, kind="host", host="b.test", requests=1, parked=False),
                 dict(round=1, partition=2, kind="host", host="b.test", requests=2, parked=None),
                 dict(round=1, partition=1, kind="host", host="d.test", requests=0, parked=False, delay_s=1.0)]
    hosts = [dict(host="a.test", consecutive_failures=0, pages_fetched=8, bytes_fetched=1000, requests=20,
                  duplicate_pages=1, new_content_pages=3, updated_round=0, robots_status=404, resolve_error="dns",
                  delay_s=9.0, revisits=2, revisit_changes=1, revisit_span_s=10.0),
             dict(host="b.test", ip="127.10.0.2", consecutive_failures=0, pages_fetched=0, bytes_fetched=0,
                  requests=0, duplicate_pages=0, new_content_pages=0, updated_round=0, robots_status=200,
                  robots_fetched_at=FIRST, parked_until=FIRST, park_reason="failures", delay_s=1.5),
             dict(host="d.test", consecutive_failures=0, pages_fetched=0, bytes_fetched=0, requests=0,
                  duplicate_pages=0, new_content_pages=0, updated_round=0, resolve_error="ssrf_blocked"),
             dict(host="c.test", consecutive_failures=0, pages_fetched=40, bytes_fetched=0, requests=40,
                  duplicate_pages=0, new_content_pages=0, updated_round=0)]
    ins, _ = _plan_inputs(spark, tmp_path, TU.CONF, olds, hosts, pages + host_rows)
    s = _compare_chain(spark, ins, TU.CONF)
    assert {r.host for r in s["reached"].collect()} == {"a.test"}          # the case is the one it was
    assert {r.host for r in s["exhausted"].collect()} == {"a.test", "c.test"}
    assert s["budget_rows"].count() == 6  # a.test's unfetched rows before the round (the MERGE prefers the round's)


def test_round_adds_its_revisits_to_the_hosts_mixture(spark, tmp_path):
    """Under ``adaptive``, each revisit adds its page's posterior over the grid, weighted by its gap, to its
    host's ``rate_mass`` (the host's mixture prior): both engines, and the sum is the pure one."""
    from crawl_udfs import change_rate as R
    from crawl_udfs import rate_prior as RP
    conf = config.load(overrides=['schedule.policy="adaptive"', "schedule.default_interval_s=3600.0"])
    s_ = conf.schedule
    m, n = "http://m.test/", "http://n.test/"
    old_mass = [0.5 * (i % 3) for i in range(len(RP.LOG_GRID))]
    visits = {m + "changed": (600.0, True, [600.0, 900.0], 1200.0), m + "same": (7200.0, False, [], 3600.0),
              n + "changed": (300.0, True, [0.0], 50.0)}
    olds = [TU.old(u, status="fetched", digest="sha1:OLD", last_visit_time=TU.T0 - TU.sec(gap),
                   change_intervals_s=hist, unchanged_span_s=span) for u, (gap, _, hist, span) in visits.items()]
    olds.append(TU.old(m + "new"))
    pages = [TU.page(u, "ok", status_code=200, digest="sha1:NEW" if changed else "sha1:OLD", wire_bytes=10)
             for u, (_, changed, _, _) in visits.items()]
    pages.append(TU.page(m + "new", "ok", status_code=200, digest="sha1:N", wire_bytes=10))  # no revisit: no mass
    hosts = [dict(host="m.test", consecutive_failures=0, pages_fetched=3, bytes_fetched=0, requests=3,
                  duplicate_pages=0, new_content_pages=0, updated_round=0, revisits=4, revisit_changes=1,
                  revisit_span_s=4 * 3600.0, rate_mass=old_mass),
             dict(host="n.test", consecutive_failures=0, pages_fetched=1, bytes_fetched=0, requests=1,
                  duplicate_pages=0, new_content_pages=0, updated_round=0)]
    ins, _ = _plan_inputs(spark, tmp_path, conf, olds, hosts, pages)
    got = {r.host: r.rate_mass for r in _compare_chain(spark, ins, conf)["hosts_new"].collect()}
    want = {"m.test": list(old_mass), "n.test": None}
    priors = {"m.test": (R.host_rate(4, 1, 4 * 3600.0, s_.default_interval_s), old_mass),
              "n.test": (1 / s_.default_interval_s, [0.0] * len(RP.LOG_GRID))}
    for u, (gap, changed, hist, span) in visits.items():
        host = u.split("/")[2]
        h, sp = R.observe(hist, span, gap, changed, None, s_.change_history)
        resp = RP.posterior(h, sp, RP.mixture_weights(*priors[host], s_.prior_changes))
        add = RP.revisit_mass(resp, gap, s_.default_interval_s)
        want[host] = add if want[host] is None else [a + b for a, b in zip(want[host], add)]
    for host in want:
        assert got[host] == pytest.approx(want[host], rel=1e-9, abs=1e-12), host
    assert sum(got["m.test"]) - sum(old_mass) == pytest.approx((600.0 + 7200.0) / 3600.0)  # the gaps, in intervals


def test_round_byte_budget(spark, tmp_path):
    conf = config.load(overrides=["budget.max_pages_per_host=10", "budget.max_bytes_per_host=1000"])
    big, many, calm = "http://big.test/", "http://many.test/", "http://calm.test/"
    olds = [TU.old(u) for u in (big + "p", big + "left", many + "p", many + "left", calm + "p", calm + "left")]
    pages = [TU.page(big + "p", "ok", status_code=200, digest="sha1:BIG", wire_bytes=900,
                     outlinks=[TU.link(big + "new")]),
             TU.page(many + "p", "ok", status_code=200, digest="sha1:MANY", wire_bytes=10),
             TU.page(calm + "p", "ok", status_code=200, digest="sha1:CALM", wire_bytes=10)]
    hosts = [dict(host=h, consecutive_failures=0, pages_fetched=n, bytes_fetched=b, requests=n, duplicate_pages=0,
                  new_content_pages=0, updated_round=0)
             for h, n, b in (("big.test", 1, 200), ("many.test", 9, 100), ("calm.test", 1, 100), ("old.test", 1, 5000))]
    ins, _ = _plan_inputs(spark, tmp_path, conf, olds, hosts, pages)
    s = _compare_chain(spark, ins, conf)
    assert {(r.host, r.budget_reason) for r in s["exhausted"].collect()} == {
        ("big.test", "bytes"), ("many.test", "pages"), ("old.test", "bytes")}


def test_round_parks_a_self_copying_host_not_its_mirror(spark, tmp_path):
    """tests/test_update.py's near-duplicate round: near copies of the host's own page park it."""
    from crawl_udfs import near_dup, simhash
    from tests.testweb.sites import prose
    conf = config.load(overrides=["trap.min_pages=5", "trap.max_new_share=0.5", "trap.throttle_after_rounds=1",
                                  "trap.park_after_rounds=2", "trap.park_duration_s=5000.0",
                                  "generate.max_urls_per_host=8", "budget.max_pages_per_host=100",
                                  "dedup.near_duplicates=true"])
    n, perm = conf.simhash.shingle_words, conf.dedup.minhash_permutations

    def ok(url: str, text: str, **kw) -> dict:
        sig = dict(simhash=simhash.simhash(text, n), minhash=near_dup.minhash(text, n, perm),
                   words=len(simhash.words(text)))
        return TU.page(url, "ok", status_code=200, digest=f"sha1:{url}", content_type="text/html", wire_bytes=10,
                       **sig, **kw)
    same = prose(random.Random("facet"), 80)
    texts = [prose(random.Random(f"calm/{i}"), 80) for i in range(6)]
    pages = [ok(f"http://trap.test/p{i}", same) for i in range(6)]
    pages += [ok(f"http://calm.test/p{i}", texts[i]) for i in range(6)]
    pages += [ok(f"http://mirror.test/m{i}", texts[i], fetch_time=T0 - sec(10)) for i in range(6)]
    olds = [TU.old(p["url"]) for p in pages]
    hosts = [dict(host=h, consecutive_failures=0, pages_fetched=4, bytes_fetched=40, requests=4, duplicate_pages=0,
                  new_content_pages=4, updated_round=0, trap_strikes=1, trap_streak_pages=4, trap_streak_exact=0,
                  trap_streak_near=3, round_cap=4) for h in ("trap.test", "calm.test", "mirror.test")]
    ins, _ = _plan_inputs(spark, tmp_path, conf, olds, hosts, pages, round_no=2,
                          index=TU.frame(spark, [], NEAR_DUP_INDEX))
    assert ins["near"].count() > 0
    s = _compare_chain(spark, ins, conf, round_no=2)
    parked = {r.host for r in s["budgeted"].collect() if r.park_reason}
    assert parked == {"trap.test"}


# -- URL patterns, on tests/test_url_patterns.py's crawl DB ------------------------------------------
def _pattern_rows():
    """tests/test_url_patterns.py's hand-made crawl DB: (rows before the round, the round's rows)."""
    from tests.test_generate import url_row

    def pg(url, status="fetched", dup_of=None):
        return url_row(url, status=status, dup_of=None if dup_of is None else fingerprint(dup_of))
    url = [f.name for f in CRAWLDB.fields].index("url")
    o, m, s, z = "http://o.test", "http://m.test", "http://s.test", "http://z.test"
    rows = []
    for k in range(10):
        art, prn = f"{o}/article/{k}.html", f"{o}/print/article/{k}.html"
        rows += [pg(art), pg(prn, "duplicate", art)] if k % 2 else [pg(prn), pg(art, "duplicate", prn)]
        rows.append(pg(f"{art}?ref=front", "duplicate", prn if k % 2 == 0 else art))
        rows.append(pg(f"{o}/brief/{k}.html"))
        rows += [pg(f"{m}/news/{k}/", "duplicate", art), pg(f"{m}/news/{k}/?page=1", "duplicate", art)]
        rows.append(pg(f"{m}/list?page={k + 2}"))
        rows += [pg(f"{s}/s/{k}.html"), pg(f"{s}/s/{k}.html?sess=x{k}", "duplicate", f"{s}/s/{k}.html")]
        rows += [pg(f"{z}/print/{k}/a.html", "duplicate", f"{z}/{k}/a.html"), pg(f"{z}/{k}/a.html")]
    rows.append(pg(f"{m}/list"))
    rows = [r if r[url] != f"{m}/news/9/" else pg(f"{m}/news/9/", "unfetched") for r in rows]
    last = f"{o}/print/article/9.html"
    before = [r if r[url] != last else pg(last, "unfetched") for r in rows]
    updated = [r for r in rows if r[url] in (last, f"{o}/brief/0.html", f"{m}/list", f"{s}/s/0.html")]
    return before, updated


def _learning(spark, hosts, sample: int):
    """``learning_hosts`` of a round that fetched ten pages of each of ``hosts`` (40 -> 50: each passes 42)."""
    from tests.test_update import page
    fo = spark.createDataFrame([page(f"http://{r.host}/z{i}", "ok", status_code=200)
                                for r in hosts.collect() for i in range(10)], FETCH_OUTPUT)
    unlisted = spark.createDataFrame([], FETCH_LIST)  # a list without pages_fetched: the hosts rows' count
    learning = P.learning_hosts(fo, unlisted, hosts, sample_pages=sample).localCheckpoint()
    assert learning.count() == hosts.count()
    return learning


def test_a_host_learns_again_when_its_fetched_pages_pass_a_count(spark):
    """``learning_hosts``: the round's hosts whose pages_fetched (before + the round's responses) pass one
    of RELEARN_AT (each count to 10, then ~10 % steps), in both engines, with their sample thresholds."""
    from tests.test_generate import host_row
    from tests.test_update import page
    before = {"new.test": None, "small.test": 7, "mid.test": 40, "big.test": 100_000, "bigger.test": 100_000,
              "quiet.test": 12}
    responses = {"new.test": 1, "small.test": 1, "mid.test": 1, "big.test": 500, "bigger.test": 10_000,
                 "quiet.test": 0}
    hosts = spark.createDataFrame([host_row(h, pages_fetched=n) for h, n in before.items() if n is not None], HOSTS)
    rows = [page(f"http://{h}/p{i}", "ok", status_code=200) for h, n in responses.items() for i in range(n)]
    rows += [page("http://quiet.test/x", "deferred"), dict(round=1, partition=0, kind="host", host="quiet.test")]
    fo = spark.createDataFrame(rows, FETCH_OUTPUT)
    unlisted = spark.createDataFrame([], FETCH_LIST)  # listed before fetch_list.pages_fetched: hosts' rows count
    got = P.learning_hosts(fo, unlisted, hosts, sample_pages=1000)
    con = connect()
    d = duck_inputs(con, fo=fo, fl=unlisted, hosts=hosts)
    assert_same(got, DP.learning_hosts(d["fo"], d["fl"], d["hosts"], sample_pages=1000))
    # 40 -> 41 passes no count (38, 42); 100,000 -> 100,500 none (~10 % steps); 12 -> 12 none
    assert {r.host: r.threshold for r in got.collect()} == {
        "new.test": P.SAMPLE_SPAN, "small.test": P.SAMPLE_SPAN, "bigger.test": P.SAMPLE_SPAN * 1000 // 100_000}
    # The fetch list's count wins over the hosts row's (generate listed the round with it; update reads no
    # hosts row for it): mid.test listed at 41 passes 42, big.test listed at 2,000 samples by it; a host the
    # list holds without a count (quiet.test, as an older round) falls back to its hosts row.
    as_listed = {"new.test": 0, "small.test": 7, "mid.test": 41, "big.test": 2_000, "bigger.test": 100_000,
                 "quiet.test": None}
    fl = TU.frame(spark, [dict(TU.listed(f"http://{h}/"), pages_fetched=n) for h, n in as_listed.items()], FETCH_LIST)
    by_list = P.learning_hosts(fo, fl, hosts, sample_pages=1000)
    d = duck_inputs(con, fo=fo, fl=fl, hosts=hosts)
    assert_same(by_list, DP.learning_hosts(d["fo"], d["fl"], d["hosts"], sample_pages=1000))
    assert {r.host: r.threshold for r in by_list.collect()} == {
        "new.test": P.SAMPLE_SPAN, "small.test": P.SAMPLE_SPAN, "mid.test": P.SAMPLE_SPAN,
        "big.test": P.SAMPLE_SPAN * 1000 // 2_000, "bigger.test": P.SAMPLE_SPAN * 1000 // 100_000}
    assert DP.unlisted_hosts(d["fo"], d["fl"]).fetchall() == [("quiet.test",)]
    # the driver reads only those hosts rows: the others' stand-ins change nothing
    d = duck_inputs(con, fo=fo, fl=fl, hosts=hosts.where("host = 'quiet.test'"))
    assert_same(by_list, DP.learning_hosts(d["fo"], d["fl"], d["hosts"], sample_pages=1000))
    # a host that learns nothing loses its rules; one that does not learn keeps them
    rule = [dict(pattern="/print/", kind="prefix", pages=9, dup_share=1.0)]
    hosts_new = spark.createDataFrame([host_row(h, dup_patterns=rule) for h in ("big.test", "bigger.test")], HOSTS)
    learnt = spark.createDataFrame([], "host string, dup_patterns " + HOSTS["dup_patterns"].dataType.simpleString())
    d = duck_inputs(con, hosts_new=hosts_new, learnt=learnt, learning=got)
    kept = P.with_patterns(hosts_new, learnt, got)
    assert_same(kept, DP.with_patterns(d["hosts_new"], d["learnt"], d["learning"]))
    assert {r.host: r.dup_patterns is not None for r in kept.collect()} == {"big.test": True, "bigger.test": False}


def _pattern_hosts(spark, fetched: int):
    """Pre-round ``hosts`` rows of _pattern_rows' hosts, each having fetched ``fetched`` pages."""
    from tests.test_generate import host_row
    return spark.createDataFrame([host_row(h, pages_fetched=fetched) for h in ("o.test", "m.test", "s.test")], HOSTS)


@pytest.mark.parametrize("min_pages, min_share, sample", [(8, 0.9, None), (10, 0.9, None), (3, 0.5, None),
                                                          (1, 0.0, None), (1, 0.0, 12), (3, 0.5, 12)])
def test_learn_patterns(spark, min_pages, min_share, sample):
    """Both engines learn the same rules; ``sample``: every host sampled down to ~``sample`` of 40 pages."""
    from tests.test_generate import host_row
    before, now = _pattern_rows()
    crawldb, updated = spark.createDataFrame(before, CRAWLDB), spark.createDataFrame(now, CRAWLDB)
    hosts = _pattern_hosts(spark, 40)
    hosts_new = spark.createDataFrame([host_row("o.test", dup_patterns=[dict(pattern="/x/", kind="prefix", pages=3,
                                                                               dup_share=1.0)]),
                                       host_row("m.test"), host_row("q.test")], HOSTS)
    con = connect()
    learning = _learning(spark, hosts, sample or 40)
    d = duck_inputs(con, crawldb=crawldb, updated=updated, hosts_new=hosts_new, hosts=hosts, learning=learning)
    pages = P.stored_pages(crawldb, updated, learning)
    assert_same(pages, DP.stored_pages(d["crawldb"], d["updated"], d["learning"]))
    learnt = P.learn(pages, min_pages=min_pages, min_share=min_share)
    k_learnt = DP.learn(con, DP.stored_pages(d["crawldb"], d["updated"], d["learning"]),
                        min_pages=min_pages, min_share=min_share)
    assert_same(learnt, k_learnt)
    assert_same(P.with_patterns(hosts_new, learnt, learning), DP.with_patterns(d["hosts_new"], k_learnt, d["learning"]))
    if (min_pages, min_share, sample) == (8, 0.9, None):  # the case test_url_patterns pins: not vacuous
        got = {r.host: {p.pattern for p in r.dup_patterns} for r in learnt.collect()}
        assert got == {"o.test": {"/print/", "?ref=front"}, "m.test": {"?page=1"}, "s.test": {"?sess"}}
    if sample:  # the sample is smaller than the host, and its rules are counted on it
        sampled = {r.host: r.n for r in pages.where("sampled").groupBy("host").count().withColumnRenamed("count", "n")
                   .collect()}
        stored = {r.host: r.n for r in pages.where("original IS NOT NULL").groupBy("host").count()
                  .withColumnRenamed("count", "n").collect()}
        assert all(0 < sampled[h] < stored[h] for h in ("o.test", "m.test", "s.test")), (sampled, stored)
        assert all(p.pages <= sampled[r.host] for r in learnt.collect() for p in r.dup_patterns)


def test_the_driver_engine_learns_from_the_sample_and_counterparts_it_reads_by_url(spark):
    """The driver's gather keeps a host's sampled stored pages only (``update_gather.crawldb_rows``, key 2);
    the counterparts they name come from one keyed read (``missing_counterparts``, ``counterpart_rows``).
    Learnt from those, the rules are the Spark plan's, which sees every row of the round's hosts."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    from jobs import update_gather as G
    from jobs.duck_engine import to_spark
    before, now = _pattern_rows()
    crawldb, updated = spark.createDataFrame(before, CRAWLDB), spark.createDataFrame(now, CRAWLDB)
    hosts = _pattern_hosts(spark, 40)
    con = connect()
    d = duck_inputs(con, updated=updated, hosts=hosts)
    for sample in (12, 40):
        key = lambda col: spark.createDataFrame([], f"{col} {'bigint' if col == 'url_fp' else 'string'}")
        keys = G.Keys(url_fps=key("url_fp"), digests=key("digest"), link_hosts=key("host"))
        learning = _learning(spark, hosts, sample)
        d["learning"] = duck_inputs(con, learning=learning)["learning"]
        gathered = duck_inputs(con, known=G.crawldb_rows(crawldb, keys, learning))["known"]
        pages = DP.stored_pages(gathered, d["updated"], d["learning"])
        missing = DP.missing_counterparts(con, pages)
        assert missing.aggregate("count(*)").fetchall()[0][0] > 0  # the gather alone lacks counterparts
        # what jobs.update.decide reads before the decisions holds them (the round's rows as fetched)
        fo = duck_inputs(con, fo=updated.select(F.lit("page").alias("kind"), "host", "url", "url_fp"))["fo"]
        likely = DP.likely_counterparts(con, gathered, fo, d["learning"])
        assert DP.query("SELECT url_fp FROM $m EXCEPT SELECT url_fp FROM $l", m=missing, l=likely).fetchall() == []
        more = G.counterpart_rows(crawldb, to_spark(spark, missing, StructType([StructField("url_fp", LongType())])))
        cols = "SELECT host, url, url_fp, status, dup_of FROM "
        seen = DP.query(cols + "$k UNION ALL " + cols + "$m", k=gathered, m=duck_inputs(con, more=more)["more"])
        got = DP.learn(con, DP.stored_pages(seen, d["updated"], d["learning"]), min_pages=1, min_share=0.0)
        want = P.learn(P.stored_pages(crawldb, updated, learning), min_pages=1, min_share=0.0)
        assert want.count() > 0
        assert_same(want, got)
        n_gathered = gathered.aggregate("count(*)").fetchall()[0][0]
        assert n_gathered == crawldb.join(updated.select("host").distinct(), "host", "left_semi").where(
            F.col("status").isin("fetched", "not_modified", "duplicate")
            & P.in_sample(F.col("url_fp"), P.sample_threshold(F.lit(40), sample))).count()


def test_skipped_is_url_patterns_matches(spark):
    from pyspark.sql import functions as F
    from tests.test_url_patterns import CASES
    rules_type = "array<struct<pattern:string,kind:string,pages:int,dup_share:double>>"
    df = spark.createDataFrame([(str(i), url, [dict(r, pages=1, dup_share=1.0) for r in rules] if rules else rules)
                                for i, (url, rules, _) in enumerate(CASES)] + [("n", None, [])],
                               f"i string, url string, rules {rules_type}")
    con = connect()
    DP.register(con)
    rel = duck_inputs(con, df=df)["df"]
    assert_same(df.select("i", P.skipped(F.col("url"), F.col("rules")).alias("hit")),
                rel.select(f"i, {DP.skipped('url', 'rules')} AS hit"))


# -- a realistic round ---------------------------------------------------------------------------
def _realistic(seed: int = 7):
    """A synthetic round like bench/verb_cost.py's synthetic_fetch, with what the hosts rows react to: ~300
    pages on 10 hosts, 3 outlinks each (known and new), revisits (changed or not), print copies of the
    host's own articles (exact duplicates, a /print/ pattern), one host serving one page under many URLs
    (a trap), errors, two hosts reaching their page or byte budget, robots fetched for some hosts."""
    rnd = random.Random(seed)
    olds, pages, host_rows, hosts = [], [], [], []
    for h in range(10):
        host = f"h{h}.test"
        base = f"http://{host}/"
        trap = h == 3
        for i in range(30):
            copy = i % 2 == 1 and h % 2 == 0  # a print version of the article before it
            url = base + (f"print/a{i - 1}.html" if copy else f"a{i}.html")
            fetched_before = rnd.random() < 0.3
            digest = "sha1:TRAP" if trap else f"sha1:{host}/a{i - 1 if copy else i}"
            olds.append(TU.old(url, status="fetched" if fetched_before else "unfetched",
                               digest=(digest if rnd.random() < 0.5 else "sha1:older") if fetched_before else None,
                               fetch_count=1 if fetched_before else 0,
                               last_fetch_time=T0 - sec(86400 * rnd.randint(1, 9)) if fetched_before else None))
            outcome = rnd.choices(["ok", "http_error", "error", "not_modified"], [0.85, 0.06, 0.04, 0.05])[0]
            kw = dict(status_code=200, digest=digest, wire_bytes=rnd.randint(500, 9000))
            if outcome == "http_error":
                kw = dict(status_code=rnd.choice([404, 503]), wire_bytes=200)
            elif outcome == "error":
                kw = dict(error_class="timeout")
            elif outcome == "not_modified":
                kw = dict(status_code=304, digest=digest, wire_bytes=0) if fetched_before else kw
                outcome = "not_modified" if fetched_before else "ok"
            links = [TU.link(base + f"a{rnd.randint(0, 40)}.html"), TU.link(base + f"new{h}-{i}.html"),
                     TU.link(f"http://h{rnd.randint(0, 12)}.test/x{i}.html")]
            pages.append(TU.page(url, outcome, outlinks=links, **kw))
        for i in range(5):  # URLs not in this round
            olds.append(TU.old(base + f"left{i}.html", status=rnd.choice(["unfetched", "unfetched", "error_retry"])))
        robots = h % 3 == 0
        host_rows.append(dict(round=2, partition=h % 2, kind="host", host=host, requests=31, parked=h == 5,
                              park_reason="failures" if h == 5 else None, consecutive_failures=h % 2,
                              robots_status=200 if robots else None, robots_fetched_at=T0 if robots else None,
                              robots_expires_at=T0 + sec(86400) if robots else None, delay_s=1.0 + h / 10,
                              ip=f"127.10.0.{h}" if h != 7 else None, next_allowed_at=T0 + sec(h)))
        hosts.append(dict(host=host, consecutive_failures=0, pages_fetched=(60 if h == 8 else 10 * h),
                          bytes_fetched=(10 ** 6 if h == 9 else 1000 * h), requests=10 * h, duplicate_pages=h,
                          new_content_pages=h, updated_round=1, robots_status=404, robots_fetched_at=FIRST,
                          trap_strikes=1 if h in (3, 4) else None, trap_streak_pages=20 if h in (3, 4) else None,
                          trap_streak_exact=15 if h in (3, 4) else None, trap_streak_near=0 if h in (3, 4) else None,
                          round_cap=8 if h == 4 else None, resolve_error="dns" if h == 7 else None,
                          revisits=h, revisit_changes=h // 2, revisit_span_s=100.0 * h))
    hosts.append(dict(host="gone.test", consecutive_failures=0, pages_fetched=500, bytes_fetched=0, requests=500,
                      duplicate_pages=0, new_content_pages=0, updated_round=1))
    return olds, hosts, pages + host_rows


def test_realistic_round(spark, tmp_path):
    conf = config.load(overrides=["budget.max_pages_per_host=80", "budget.max_bytes_per_host=1000000",
                                  "trap.min_pages=20", "trap.max_new_share=0.3", "trap.park_after_rounds=2",
                                  "dedup.pattern_min_pages=5"])
    olds, hosts, rows = _realistic()
    ins, _ = _plan_inputs(spark, tmp_path, conf, olds, hosts, rows, round_no=2)
    s = _compare_chain(spark, ins, conf, round_no=2)
    judged = {r.host: r for r in s["judged"].collect()}
    assert judged["h3.test"].trap_strikes == 2 and judged["h3.test"].park_reason.startswith("trap: ")
    assert {r.host for r in s["reached"].collect()} >= {"h8.test", "h9.test"} and s["budget_rows"].count() > 0
    assert any(r.dup_patterns for r in s["learnt"].collect())
