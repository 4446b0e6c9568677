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


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_driver_engine_writes_what_the_spark_plan_writes(spark, e2e_crawl, n):
    from jobs import common, duck_engine, update
    from jobs.update_counters import Counters
    from schemas.tables import TABLES

    _, conf, *_ = e2e_crawl
    now, crawldb, hosts, fetch_output, fetch_list, index = _inputs(spark, conf, n)
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
