"""The two update engines write the same rows: ``update.engine = "driver"`` (DuckDB) against ``"spark"``.

On every round of the suite's shared crawl of the test web (``tests/e2e_crawl.py``: 56 hosts with
traps, duplicates, robots.txt rules, sitemaps and per-host budgets reached), each round's update is
recomputed from the snapshots its ledger row pinned, by both engines: the MERGE and append sources
(crawl-DB rows with their ``_kind``, hosts rows, fetch-log, links and near-duplicate index rows) and
the round's counters must be the same. The rules themselves are checked per function by
``tests/test_duck_*.py``; this checks the gather (``jobs/update_gather.py``: the rows the decisions
read) and the chain (``jobs/update_decide.py``) on a real crawl.
"""

from __future__ import annotations

import pytest

from tests.duck_diff import assert_same

pytestmark = pytest.mark.spark


def _inputs(spark, conf, n):
    from pyspark.sql import functions as F

    from jobs import common, ledger
    row = ledger.get_round(spark, conf, n)
    return (row["fetched_at"], common.read_at(spark, conf, "crawldb", row["crawldb_version"]),
            common.read_at(spark, conf, "hosts", row["hosts_version"]),
            common.read(spark, conf, "fetch_output").where(F.col("round") == n),
            common.read(spark, conf, "fetch_list").where(F.col("round") == n),
            common.read(spark, conf, "near_dup_index"))


@pytest.mark.parametrize("n, sample", [(1, None), (2, 3), (3, None)])
def test_the_driver_engine_writes_what_the_spark_plan_writes(spark, e2e_crawl, n, sample):
    """``sample``: ``dedup.pattern_sample_pages`` lowered so that pattern learning samples the hosts
    (the driver's gather then holds a host's sampled pages only, and reads their counterparts by URL).
    Every round once, round 2 sampled (~25 s a case: each round in both ways cost a minute more)."""
    from jobs import common, duck_engine, update
    from jobs.update_counters import Counters
    from schemas.tables import TABLES

    _, conf, *_ = e2e_crawl
    if sample is not None:
        conf = conf.with_overrides(f"dedup.pattern_sample_pages={sample}")
    _both_engines(spark, conf, n, *_inputs(spark, conf, n))


def _both_engines(spark, conf, n, now, crawldb, hosts, fetch_output, fetch_list, index) -> dict:
    """Round ``n``'s update by both engines; every source row and counter compared. The driver's tables."""
    from jobs import common, duck_engine, update
    from jobs.update_counters import Counters
    from schemas.tables import TABLES

    by_spark = Counters(now)
    p = update.plan(crawldb, hosts, fetch_output, fetch_list, conf, round_no=n, now=now, near_dup_index=index,
                    keep=lambda df: df.localCheckpoint(), observe=by_spark)
    spark_out = {"crawldb_source": by_spark("crawldb_source", p.crawldb_source), "hosts": p.hosts,
                 **{name: by_spark(name, common.conform(getattr(p, name), TABLES[name]))
                    for name in ("fetch_log", "links", "near_dup_index")}}
    by_driver = Counters(now)
    tables = update.decide(spark, conf, n, now, crawldb, hosts, fetch_output, fetch_list, index, by_driver)
    con = duck_engine.connect()
    assert set(tables) == set(spark_out)
    for name, df in spark_out.items():
        assert_same(df, con.from_arrow(tables[name]))
    assert by_driver.counts() == by_spark.counts()
    return tables


def test_a_first_copy_never_names_a_page_leaving_in_its_round_in_both_engines(spark):
    """The driver's gather holds a first copy's original by key (its digest, or an index row), not among
    every row of its host: that is enough because an original is chosen among the round's pages as it
    leaves them. Here a page fetched first copies the old content of test_originals' L2, an original
    whose content becomes another page's this round (its copy C3 promoted): the page is no copy of L2,
    which leaves, and the engines agree."""
    from crawl_udfs.url_normalize import fingerprint as fp
    from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT, HOSTS, NEAR_DUP_INDEX
    from tests import test_originals as TO
    from tests.duck_dup_cases import NOW
    from tests.test_duck_originals import originals_round
    from tests.test_update import CONF, frame

    olds, pages = originals_round()
    n4 = "http://o.test/b-copy2"
    olds.append(TO.old(n4))
    pages.append(TO._ok(n4, "sha1:L2"))
    tables = _both_engines(spark, CONF, 1, NOW, frame(spark, olds, CRAWLDB).localCheckpoint(),
                           frame(spark, [], HOSTS), frame(spark, pages, FETCH_OUTPUT), frame(spark, [], FETCH_LIST),
                           frame(spark, [], NEAR_DUP_INDEX))
    rows = {r["url_fp"]: r for r in tables["crawldb_source"].to_pylist()}
    assert (rows[fp(TO.L2)]["status"], rows[fp(TO.L2)]["dup_of"]) == ("duplicate", fp(TO.O))  # L2 leaves
    assert (rows[fp(TO.C3)]["status"], rows[fp(TO.C3)]["_kind"]) == ("fetched", "repoint")  # C3 promoted
    assert (rows[fp(n4)]["status"], rows[fp(n4)]["dup_of"]) == ("fetched", None)  # not a copy of L2
