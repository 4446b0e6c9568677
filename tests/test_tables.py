"""The pinned pyspark + delta-spark pair works: tables are created, MERGEd and registered."""

import pytest

from jobs import common, ledger
from schemas.status import ELIGIBLE, Status
from schemas.tables import TABLES

pytestmark = pytest.mark.spark


def test_delta_merge_works(spark, tmp_path):
    path = str(tmp_path / "t")
    spark.createDataFrame([(1, "a"), (2, "b")], "k long, v string").write.format("delta").save(path)
    from delta.tables import DeltaTable
    src = spark.createDataFrame([(2, "B"), (3, "c")], "k long, v string")
    (DeltaTable.forPath(spark, path).alias("t").merge(src.alias("s"), "t.k = s.k")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    assert sorted(map(tuple, spark.read.format("delta").load(path).collect())) == [(1, "a"), (2, "B"), (3, "c")]


def test_xxhash64_matches_python_fingerprint(spark):
    from crawl_udfs.url_normalize import fingerprint
    urls = ["http://a.test/", "https://example.com/path?q=1", "http://xn--bcher-kva.example/ü"]
    got = dict(spark.createDataFrame([(u,) for u in urls], "url string")
               .selectExpr("url", "xxhash64(url) AS fp").collect())
    assert got == {u: fingerprint(u) for u in urls}


def test_init_is_idempotent_and_registers(spark, crawl_conf):
    first = common.ensure_tables(spark, crawl_conf)
    assert len(first) == len(TABLES)
    assert common.ensure_tables(spark, crawl_conf) == []
    assert spark.sql("SELECT count(*) AS n FROM crawldb").collect()[0].n == 0
    props = dict(spark.sql(f"DESCRIBE DETAIL delta.`{common.table_path(crawl_conf, 'crawldb')}`")
                 .collect()[0].properties)
    assert props.get("delta.enableChangeDataFeed") == "true"
    # deletion vectors only where a MERGE touches a few rows of big files; elsewhere they cost jobs
    assert props.get("delta.enableDeletionVectors") == "true"
    rounds_props = dict(spark.sql(f"DESCRIBE DETAIL delta.`{common.table_path(crawl_conf, 'rounds')}`")
                        .collect()[0].properties)
    assert rounds_props.get("delta.enableDeletionVectors") == "false"


def test_sql_command_names_the_tables_other_verbs_do_not(spark, crawl_conf, capsys):
    """Only ``deltacrawl sql`` registers the table names (the verbs read by path: registering
    seven tables cost ~2-7 s before every command's first job, bench/first_request.py)."""
    from jobs import cli

    common.ensure_tables(spark, crawl_conf)
    root = f'storage.root="{crawl_conf.storage.root}"'
    spark.sql("DROP TABLE IF EXISTS crawldb")  # names left by other tests' sessions in this one
    assert cli.main(["--set", root, "status"]) == 0
    assert not spark.catalog.tableExists("crawldb")
    assert cli.main(["--set", root, "sql", "SELECT count(*) AS n FROM crawldb", "--format", "json"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == '{"n": 0}'


def test_ledger_state_machine(spark, crawl_conf):
    common.ensure_tables(spark, crawl_conf)
    ledger.set_state(spark, crawl_conf, 1, "generated", counts={"generated": 5}, n_partitions=2)
    ledger.set_state(spark, crawl_conf, 1, "fetched", counts={"fetched": 4}, seconds={"fetch": 1.5})
    r = ledger.get_round(spark, crawl_conf, 1)
    assert r["state"] == "fetched" and r["counts"] == {"generated": 5, "fetched": 4}
    assert r["n_partitions"] == 2 and r["seconds"] == {"fetch": 1.5}
    assert ledger.last_round(spark, crawl_conf)["round"] == 1


def test_status_enum_documented():
    import inspect
    src = inspect.getsource(__import__("schemas.status", fromlist=["x"]))
    for s in Status:
        line = next(l for l in src.splitlines() if f'"{s.value}"' in l and "=" in l)
        assert "#" in line and len(line.split("#", 1)[1].strip()) > 10, s
    assert Status.UNFETCHED in ELIGIBLE and Status.ERROR_FINAL not in ELIGIBLE


def test_init_adds_a_field_new_inside_an_array_of_structs(spark, crawl_conf):
    """An old fetch_output without outlinks.host (a field of the structs in an array) gets it from init."""
    from pyspark.sql.types import ArrayType, StructField, StructType

    from schemas.tables import FETCH_OUTPUT, OUTLINK
    old_outlink = StructType(OUTLINK.fields[:OUTLINK.names.index("host")])  # before host (and lastmod, later)
    old = StructType([StructField(f.name, ArrayType(old_outlink, True), True) if f.name == "outlinks" else f
                      for f in FETCH_OUTPUT.fields])
    path = common.table_path(crawl_conf, "fetch_output")
    spark.createDataFrame([], old).write.format("delta").partitionBy("round").save(path)
    assert "host" not in spark.read.format("delta").load(path).schema["outlinks"].dataType.elementType.names
    changed = common.ensure_tables(spark, crawl_conf)
    assert f"added {len(OUTLINK.fields) - len(old_outlink.fields)} column(s) to fetch_output" in changed
    assert spark.read.format("delta").load(path).schema["outlinks"].dataType.elementType.names == OUTLINK.names
