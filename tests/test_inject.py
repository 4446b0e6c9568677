"""inject: seed parsing on small DataFrames, and insert-if-absent / boost MERGEs against a real crawldb."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from crawl_udfs import config
from crawl_udfs.config import ConfigError
from crawl_udfs.url_normalize import fingerprint
from jobs import cli, common, inject
from schemas.tables import CRAWLDB, HOSTS, TABLES

pytestmark = pytest.mark.spark

NOW = dt.datetime(2026, 1, 1, 12, 0, 0)
LATER = NOW + dt.timedelta(hours=2)

SEED_FILE = """\
# seeds for the test crawl
http://a.test/
  HTTP://A.TEST/#top

http://b.test/page?utm_source=mail
http://c.test/x\tnutch.score=5
not a url
ftp://files.test/pub/
http://a.test/calendar/2024/01/
    # an indented comment
http://[::1
"""


@pytest.fixture(scope="module")
def conf(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("inject") / "crawl"
    c = config.load(overrides=[f'storage.root="{root}"', "spark.master=local[2]", "spark.shuffle_partitions=4"])
    common.ensure_tables(spark, c)
    return c


def _commits(c) -> int:
    return len(list(Path(common.table_path(c, "crawldb"), "_delta_log").glob("*.json")))


def _crawldb(spark, c) -> dict[str, dict]:
    return {r.url: r.asDict() for r in common.read(spark, c, "crawldb").collect()}


def test_parse_seeds_normalises_filters_and_reports(spark):
    lines = spark.createDataFrame([(line,) for line in SEED_FILE.splitlines()], "value string")
    rows = {r.raw: (r.url, r.url_fp, r.host, r.reason) for r in inject.parse_seeds(lines, config.defaults()).collect()}
    assert rows["http://a.test/"] == ("http://a.test/", fingerprint("http://a.test/"), "a.test", None)
    assert rows["HTTP://A.TEST/#top"][0] == "http://a.test/"
    assert rows["http://b.test/page?utm_source=mail"][0] == "http://b.test/page"
    assert rows["http://c.test/x"][:3] == ("http://c.test/x", fingerprint("http://c.test/x"), "c.test")
    assert {raw: reason for raw, (_, _, _, reason) in rows.items() if reason} == {
        "not a url": "invalid", "ftp://files.test/pub/": "invalid", "http://[::1": "invalid",
        "http://a.test/calendar/2024/01/": "deny_pattern"}
    assert len(rows) == 8  # comments and blank lines are not seeds
    unfiltered = inject.parse_seeds(lines, config.load(overrides=["inject.filter=false"])).collect()
    assert {r.raw for r in unfiltered if r.reason} == {"not a url", "ftp://files.test/pub/", "http://[::1"}


def test_new_rows_are_complete_and_deduplicated(spark):
    lines = spark.createDataFrame([("http://a.test/",), ("http://A.test/#x",), ("http://b.test/",)], "value string")
    seeds = inject.parse_seeds(lines, config.defaults())
    rows = inject.new_rows(seeds, now=NOW, score=3.0, fetch_interval_s=60.0).collect()
    assert sorted(r.url for r in rows) == ["http://a.test/", "http://b.test/"]
    r = rows[0]
    assert (r.status, r.depth, r.score, r.next_fetch_time, r.first_seen, r.fetch_interval_s) == \
        ("unfetched", 0, 3.0, NOW, NOW, 60.0)
    assert (r.discovered_round, r.updated_round, r.retries, r.fetch_count, r.redirect_hops) == (0, 0, 0, 0, 0)
    not_null = [f.name for f in CRAWLDB.fields if not f.nullable]
    assert all(r[name] is not None for r in rows for name in not_null)


def test_inject_file_twice_changes_nothing(spark, conf, tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text(SEED_FILE)
    got = inject.run(spark, conf, [str(seeds), "https://d.test/"], now=NOW)
    assert {k: got[k] for k in ("seeds_read", "invalid", "filtered", "inserted", "boosted")} == \
        {"seeds_read": 9, "invalid": 3, "filtered": 1, "inserted": 4, "boosted": 0}
    assert {e["line"] for e in got["examples"]} <= {"not a url", "ftp://files.test/pub/", "http://[::1",
                                                    "http://a.test/calendar/2024/01/"}
    assert len(got["examples"]) == 4
    db = _crawldb(spark, conf)
    assert set(db) == {"http://a.test/", "http://b.test/page", "http://c.test/x", "https://d.test/"}
    a = db["http://a.test/"]
    assert (a["status"], a["depth"], a["score"], a["next_fetch_time"], a["first_seen"]) == \
        ("unfetched", 0, conf.inject.score, NOW, NOW)
    assert a["fetch_interval_s"] == conf.schedule.default_interval_s and a["url_fp"] == fingerprint("http://a.test/")

    commits = _commits(conf)
    again = inject.run(spark, conf, [str(seeds), "https://d.test/"], now=LATER)
    assert (again["seeds_read"], again["inserted"], again["boosted"]) == (9, 0, 0)
    assert _commits(conf) == commits
    assert _crawldb(spark, conf) == db


def test_boost_raises_score_and_makes_due(spark, conf):
    old = {f.name: None for f in CRAWLDB.fields}
    old.update(status="fetched", depth=2, redirect_hops=0, retries=0, fetch_count=1, change_count=0,
               unchanged_count=0, fetch_interval_s=3600.0, first_seen=NOW, discovered_round=1, updated_round=3)
    rows = [dict(old, url=u, url_fp=fingerprint(u), host=u.split("/")[2], score=s, next_fetch_time=t)
            for u, s, t in [("http://e.test/low", 0.5, LATER + dt.timedelta(days=3)),
                            ("http://f.test/high", 9.0, NOW - dt.timedelta(days=1))]]
    (common.conform(spark.createDataFrame([tuple(r[f.name] for f in CRAWLDB.fields) for r in rows], CRAWLDB),
                    TABLES["crawldb"]).write.format("delta").mode("append").save(common.table_path(conf, "crawldb")))
    before = _crawldb(spark, conf)

    sources = ["http://e.test/low", "http://f.test/high", "http://g.test/new"]
    got = inject.run(spark, conf, sources, boost=2.0, now=LATER)
    assert (got["inserted"], got["boosted"]) == (1, 1)
    db = _crawldb(spark, conf)
    e, f, g = db["http://e.test/low"], db["http://f.test/high"], db["http://g.test/new"]
    assert (e["score"], e["next_fetch_time"], e["status"], e["depth"]) == (2.0, LATER, "fetched", 2)
    assert f == before["http://f.test/high"]               # already above the boost and due: untouched
    assert (g["score"], g["next_fetch_time"], g["status"]) == (2.0, LATER, "unfetched")

    commits = _commits(conf)
    again = inject.run(spark, conf, sources, boost=2.0, now=LATER + dt.timedelta(minutes=5))
    assert (again["inserted"], again["boosted"]) == (0, 0)
    assert _commits(conf) == commits and _crawldb(spark, conf) == db


def test_bad_sources_and_missing_tables_are_one_line_errors(spark, conf, tmp_path):
    with pytest.raises(ConfigError) as e:
        inject.run(spark, conf, [str(tmp_path / "no-such-seeds.txt")])
    assert "neither" in str(e.value) and "\n" not in str(e.value)
    empty = config.load(overrides=[f'storage.root="{tmp_path / "none"}"'])
    with pytest.raises(ConfigError) as e:
        inject.run(spark, empty, ["http://a.test/"])
    assert "init" in str(e.value) and "\n" not in str(e.value)
    assert cli.main(["--set", f'storage.root="{tmp_path / "none"}"', "inject", "http://a.test/"]) == 2


def test_due_now_hint_through_the_cli_puts_urls_ahead_of_the_schedule(spark, tmp_path):
    from jobs import generate, priority
    root = tmp_path / "crawl"
    overlay = tmp_path / "conf.toml"
    overlay.write_text(f'[storage]\nroot = "{root}"\n[spark]\nshuffle_partitions = 4\n')
    c = config.load([overlay])
    common.ensure_tables(spark, c)
    wall = common.now_utc()
    old = {f.name: None for f in CRAWLDB.fields}
    old.update(status="fetched", depth=1, redirect_hops=0, retries=0, fetch_count=1, change_count=0,
               unchanged_count=0, fetch_interval_s=604800.0, first_seen=wall, discovered_round=1, updated_round=1)
    # k.test/known is not due for a week; k.test/best, its host's best URL by far, is due since an hour
    rows = [dict(old, url=u, url_fp=fingerprint(u), host="k.test", score=s, next_fetch_time=t)
            for u, s, t in [("http://k.test/known", 0.001, wall + dt.timedelta(days=7)),
                            ("http://k.test/best", 1000.0, wall - dt.timedelta(hours=1))]]
    (common.conform(spark.createDataFrame([tuple(r[f.name] for f in CRAWLDB.fields) for r in rows], CRAWLDB),
                    TABLES["crawldb"]).write.format("delta").mode("append").save(common.table_path(c, "crawldb")))
    hint = tmp_path / "hint.txt"
    hint.write_text("http://k.test/known\nhttp://k.test/new\n")

    assert cli.main(["--conf", str(overlay), "inject", "--due-now", str(hint)]) == 0
    db = _crawldb(spark, c)
    ahead = wall - dt.timedelta(seconds=c.priority.due_now_s)
    for url in ("http://k.test/known", "http://k.test/new"):
        assert ahead <= db[url]["next_fetch_time"] <= ahead + dt.timedelta(minutes=10), url
    assert (db["http://k.test/known"]["status"], db["http://k.test/known"]["score"]) == ("fetched", 0.001)
    assert db["http://k.test/best"]["next_fetch_time"] == wall - dt.timedelta(hours=1)

    # one URL of k.test a round: the hinted ones go first, the best by score after them
    weights = priority.Weights.of(c.priority)
    listed: list[str] = []
    for _ in range(3):
        got = generate.select_due(common.read(spark, c, "crawldb").where(~F.col("url").isin(listed)),
                                  spark.createDataFrame([], HOSTS), now=common.now_utc(), max_per_host=1, top_n=10,
                                  discovery_share=0.5, n_partitions=1, max_pages_per_host=100,
                                  max_bytes_per_host=10**9, delay_window_s=None, weights=weights).collect()
        listed += [r.url for r in got]
    assert listed[2] == "http://k.test/best" and set(listed[:2]) == {"http://k.test/known", "http://k.test/new"}
