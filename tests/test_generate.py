"""generate: select_due on small DataFrames, and the round logic against real Delta tables."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import xxhash
from pyspark.sql import functions as F

from crawl_udfs import config
from crawl_udfs.config import ConfigError
from crawl_udfs.url_normalize import fingerprint, host_of
from jobs import cli, common, generate, ledger, priority
from schemas.tables import CRAWLDB, HOSTS, TABLES

pytestmark = pytest.mark.spark

NOW = dt.datetime(2026, 1, 1, 12, 0, 0)
PAST = NOW - dt.timedelta(hours=1)
FUTURE = NOW + dt.timedelta(hours=1)
WEIGHTS = priority.Weights.of(config.defaults().priority)


URL = [f.name for f in CRAWLDB.fields].index("url")  # a url_row tuple's URL
FP = [f.name for f in CRAWLDB.fields].index("url_fp")


def url_row(url: str, *, status: str = "unfetched", due: dt.datetime = PAST, score: float = 1.0, **kw) -> tuple:
    row = {f.name: None for f in CRAWLDB.fields}
    row.update(url=url, url_fp=fingerprint(url), host=host_of(url), status=status, next_fetch_time=due,
               score=score, depth=1, redirect_hops=0, retries=0, fetch_count=0, change_count=0,
               unchanged_count=0, fetch_interval_s=86400.0, first_seen=PAST - dt.timedelta(days=1),
               discovered_round=0, updated_round=0)
    row.update(kw)
    return tuple(row[f.name] for f in CRAWLDB.fields)


def host_row(host: str, *, ip=None, parked_until=None, pages_fetched: int = 0, bytes_fetched: int = 0,
             round_cap: int | None = None, delay_s: float | None = None, crawl_delay_s: float | None = None,
             dup_patterns: list | None = None) -> tuple:
    row = {f.name: None for f in HOSTS.fields}
    row.update(host=host, ip=ip, parked_until=parked_until, pages_fetched=pages_fetched, consecutive_failures=0,
               bytes_fetched=bytes_fetched, requests=0, duplicate_pages=0, new_content_pages=0, updated_round=1,
               round_cap=round_cap, delay_s=delay_s, crawl_delay_s=crawl_delay_s, dup_patterns=dup_patterns)
    return tuple(row[f.name] for f in HOSTS.fields)


def select(spark, urls, hosts=(), **kw):
    args = dict(now=NOW, max_per_host=100, top_n=100, discovery_share=0.5, n_partitions=4, max_pages_per_host=1000,
                max_bytes_per_host=10**9, delay_window_s=None, weights=WEIGHTS)
    args.update(kw)
    df = generate.select_due(spark.createDataFrame(list(urls), CRAWLDB), spark.createDataFrame(list(hosts), HOSTS),
                             **args)
    return df.collect()


def urls_of(rows) -> set[str]:
    return {r.url for r in rows}


def test_due_eligible_only(spark):
    rows = select(spark, [
        url_row("http://a.test/due"),
        url_row("http://a.test/exactly-now", due=NOW),
        url_row("http://a.test/later", due=FUTURE),
        url_row("http://a.test/refetch", status="fetched"),
        url_row("http://a.test/retry", status="error_retry"),
        url_row("http://a.test/final", status="error_final"),
        url_row("http://a.test/budget", status="budget_exhausted"),
    ])
    assert urls_of(rows) == {"http://a.test/due", "http://a.test/exactly-now", "http://a.test/refetch",
                             "http://a.test/retry"}
    assert set(rows[0].asDict()) == set(generate.LIST_COLUMNS) | {"discovery", "ip", "has_host_row"}
    assert {r.url: r.discovery for r in rows}["http://a.test/refetch"] is False


def test_parked_hosts_are_skipped(spark):
    rows = select(spark, [url_row("http://parked.test/"), url_row("http://unparked.test/"),
                          url_row("http://unknown.test/")],
                  [host_row("parked.test", parked_until=FUTURE), host_row("unparked.test", parked_until=PAST)])
    assert urls_of(rows) == {"http://unparked.test/", "http://unknown.test/"}


def test_per_host_cap_keeps_the_best(spark):
    urls = [url_row("http://a.test/low", score=0.1), url_row("http://a.test/high", score=5.0),
            url_row("http://a.test/tie-late", score=2.0, due=PAST),
            url_row("http://a.test/tie-early", score=2.0, due=PAST - dt.timedelta(minutes=5)),
            url_row("http://b.test/1"), url_row("http://b.test/2")]
    rows = select(spark, urls, max_per_host=2)
    assert urls_of(rows) == {"http://a.test/high", "http://a.test/tie-early", "http://b.test/1", "http://b.test/2"}
    # equal score and due time: the smaller url_fp first
    same = [url_row(f"http://c.test/{i}") for i in range(6)]
    got = urls_of(select(spark, same, max_per_host=3))
    assert got == {r[URL] for r in sorted(same, key=lambda r: r[FP])[:3]}


def test_budget_caps_and_exhausts_hosts(spark):
    urls = [url_row(f"http://{h}.test/{i}") for h in ("left", "spent", "over", "fresh") for i in range(5)]
    hosts = [host_row("left.test", pages_fetched=98), host_row("spent.test", pages_fetched=100),
             host_row("over.test", pages_fetched=150)]
    rows = select(spark, urls, hosts, max_pages_per_host=100, max_per_host=4)
    per_host: dict[str, int] = {}
    for r in rows:
        per_host[r.host] = per_host.get(r.host, 0) + 1
    assert per_host == {"left.test": 2, "fresh.test": 4}


def test_byte_budget_skips_hosts(spark):
    urls = [url_row(f"http://{h}.test/{i}") for h in ("light", "heavy", "exact") for i in range(3)]
    hosts = [host_row("light.test", pages_fetched=5, bytes_fetched=999_999),
             host_row("heavy.test", pages_fetched=5, bytes_fetched=2_000_000),
             host_row("exact.test", pages_fetched=5, bytes_fetched=1_000_000)]
    rows = select(spark, urls, hosts, max_bytes_per_host=1_000_000)
    assert {r.host for r in rows} == {"light.test"}
    assert len(rows) == 3


def test_trap_throttle_round_cap_lowers_the_per_host_cap(spark):
    urls = [url_row(f"http://{h}.test/{i}") for h in ("trap", "calm", "loose") for i in range(6)]
    hosts = [host_row("trap.test", round_cap=2), host_row("calm.test"), host_row("loose.test", round_cap=50)]
    per_host: dict[str, int] = {}
    for r in select(spark, urls, hosts, max_per_host=4):
        per_host[r.host] = per_host.get(r.host, 0) + 1
    # round_cap only ever lowers the cap: 2 for the throttled host, the configured 4 elsewhere
    assert per_host == {"trap.test": 2, "calm.test": 4, "loose.test": 4}


def _per_host(rows) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r.host] = out.get(r.host, 0) + 1
    return out


@pytest.mark.parametrize("host, want", [
    ("slow.test", 2),       # hosts.delay_s = 10: a 20 s window holds 2 requests
    ("robots.test", 4),     # no learnt delay yet, robots Crawl-delay 5: 4
    ("both.test", 3),       # the larger of the two (6.5 s) counts: floor(20 / 6.5) = 3
    ("quick.test", 8),      # delay_s 0.5 would allow 40: max_per_host (window / host_delay_s) caps it
    ("new.test", 8),        # no hosts row: max_per_host
    ("thrott.test", 1),     # a lower round_cap still wins
    ("budget.test", 2),     # so does the remaining page budget (48 of 50 fetched)
])
def test_per_host_cap_follows_the_effective_delay(spark, host, want):
    urls = [url_row(f"http://{h}/{i}") for h in ("slow.test", "robots.test", "both.test", "quick.test", "new.test",
                                               "thrott.test", "budget.test") for i in range(12)]
    hosts = [host_row("slow.test", delay_s=10.0), host_row("robots.test", crawl_delay_s=5.0),
             host_row("both.test", delay_s=6.5, crawl_delay_s=2.0), host_row("quick.test", delay_s=0.5),
             host_row("thrott.test", delay_s=10.0, round_cap=1), host_row("budget.test", pages_fetched=48)]
    got = _per_host(select(spark, urls, hosts, max_per_host=8, delay_window_s=20.0, max_pages_per_host=50))
    assert got[host] == want


def test_a_fixed_max_urls_per_host_is_an_upper_bound_the_delay_still_caps(spark):
    conf = config.load(overrides=["generate.max_urls_per_host=5", "fetch.task_budget_s=20"])
    urls = [url_row(f"http://{h}/{i}") for h in ("slow.test", "quick.test") for i in range(6)]
    hosts = [host_row("slow.test", delay_s=10.0, crawl_delay_s=10.0), host_row("quick.test", delay_s=1.0)]
    got = _per_host(select(spark, urls, hosts, max_per_host=generate.max_urls_per_host(conf),
                           delay_window_s=generate.delay_window_s(conf)))
    assert got == {"slow.test": 2, "quick.test": 5}


@pytest.mark.parametrize("overrides, want", [
    ([], 900.0),
    (["fetch.task_budget_s=30"], 30.0),
    (["generate.max_urls_per_host=7"], 900.0),
])
def test_delay_window(overrides, want):
    assert generate.delay_window_s(config.load(overrides=overrides)) == want


def _mixed(n_disc: int, n_re: int, disc_score: float = 1.0, re_score: float = 1.0):
    disc = [url_row(f"http://d{i}.test/", score=disc_score + i) for i in range(n_disc)]
    recrawl = [url_row(f"http://r{i}.test/", status="fetched", score=re_score + i) for i in range(n_re)]
    return disc + recrawl


def _split(rows) -> tuple[set[str], set[str]]:
    return {r.url for r in rows if r.discovery}, {r.url for r in rows if not r.discovery}


@pytest.mark.parametrize("n_disc, n_re, top_n, share, want_disc, want_re", [
    (6, 6, 4, 0.5, 2, 2),    # both sides full: the shares hold
    (6, 6, 5, 0.5, 2, 3),    # floor(5 * 0.5) = 2 for discovery, 3 for re-crawl
    (1, 6, 4, 0.5, 1, 3),    # discovery short: re-crawl takes its place
    (6, 1, 4, 0.5, 3, 1),    # re-crawl short: discovery takes its place
    (6, 6, 4, 1.0, 4, 0),
    (2, 1, 10, 0.5, 2, 1),   # fewer due than top_n: all of them
])
def test_top_n_shares_and_spill_over(spark, n_disc, n_re, top_n, share, want_disc, want_re):
    # re-crawl scores far above discovery's: the shares must hold against score order anyway
    rows = select(spark, _mixed(n_disc, n_re, disc_score=1.0, re_score=100.0), top_n=top_n, discovery_share=share)
    disc, recrawl = _split(rows)
    assert (len(disc), len(recrawl)) == (want_disc, want_re)
    # each side keeps its best (highest score = highest index)
    assert disc == {f"http://d{i}.test/" for i in range(n_disc - want_disc, n_disc)}
    assert recrawl == {f"http://r{i}.test/" for i in range(n_re - want_re, n_re)}


def test_bad_share_is_a_config_error(spark):
    with pytest.raises(ConfigError):
        select(spark, [url_row("http://a.test/")], discovery_share=1.5)


def _pmod_hash(key: str, n: int) -> int:
    v = xxhash.xxh64_intdigest(key.encode(), seed=42)
    return (v - (1 << 64) if v >= 1 << 63 else v) % n


def test_partition_is_a_pure_column_shared_by_ip(spark):
    urls = [url_row(f"http://{h}/{i}") for h in ("a.test", "b.test", "c.test", "d.test", "e.test") for i in range(2)]
    hosts = [host_row("a.test", ip="10.0.0.1"), host_row("b.test", ip="10.0.0.1"), host_row("c.test", ip="10.0.0.2"),
             host_row("d.test")]
    first = {r.url: r.partition for r in select(spark, urls, hosts, n_partitions=7)}
    again = {r.url: r.partition for r in select(spark, urls, hosts, n_partitions=7)}
    assert first == again
    by_host = {host_of(u): p for u, p in first.items()}
    assert by_host == {"a.test": _pmod_hash("10.0.0.1", 7), "b.test": _pmod_hash("10.0.0.1", 7),
                       "c.test": _pmod_hash("10.0.0.2", 7), "d.test": _pmod_hash("d.test", 7),
                       "e.test": _pmod_hash("e.test", 7)}
    # one host, one partition
    assert all(first[f"http://{h}/0"] == first[f"http://{h}/1"] for h in ("a.test", "e.test"))


def test_previous_copy_is_carried_for_conditional_get(spark):
    t = PAST - dt.timedelta(days=2)
    [row] = select(spark, [url_row("http://a.test/p", status="fetched", etag='"v1"', last_modified="Mon, 01 Jan 2024",
                                   digest="sha1:ABC", warc_record_id="<urn:uuid:1>", warc_fetch_time=t,
                                   depth=3, redirect_hops=1, score=2.5)])
    assert (row.etag, row.last_modified, row.prev_digest, row.prev_warc_record_id, row.prev_fetch_time) == \
        ('"v1"', "Mon, 01 Jan 2024", "sha1:ABC", "<urn:uuid:1>", t)
    assert (row.depth, row.redirect_hops, row.score, row.url_fp) == (3, 1, 2.5, fingerprint("http://a.test/p"))


def test_per_host_cap_is_a_map_side_top_k(spark):
    df = generate.select_due(spark.createDataFrame([url_row("http://a.test/")], CRAWLDB),
                             spark.createDataFrame([], HOSTS), now=NOW, max_per_host=50, top_n=1000,
                             discovery_share=0.5, n_partitions=2, max_pages_per_host=10,
                             max_bytes_per_host=10**9, delay_window_s=900.0, weights=WEIGHTS)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "WindowGroupLimit" in plan and "TakeOrderedAndProject" in plan


@pytest.mark.parametrize("overrides, want", [
    ([], 900),                                            # 900 s budget / 1 s delay
    (["politeness.host_delay_s=2.5"], 360),
    (["politeness.host_delay_s=0.0", "fetch.task_budget_s=1.0"], 1000),
    (["generate.max_urls_per_host=7"], 7),
    (["generate.max_urls_per_host=1000", "fetch.task_budget_s=20"], 20),  # a configured cap never outlasts the window
])
def test_derived_max_urls_per_host(overrides, want):
    assert generate.max_urls_per_host(config.load(overrides=overrides)) == want


# --- run(): the round logic against real tables ---------------------------------------------------

@pytest.fixture(scope="module")
def conf(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("generate")
    root, hosts_file = d / "crawl", d / "hosts"
    hosts_file.write_text("".join(f"127.10.0.{h + 1} h{h}.test\n" for h in range(3)))  # generate's resolve step: no DNS
    c = config.load(overrides=[f'storage.root="{root}"', "spark.master=local[2]", "spark.shuffle_partitions=4",
                               "generate.fetch_partitions=3", "generate.top_n=10", "generate.max_urls_per_host=4",
                               f'net.hosts_file="{hosts_file}"'])
    common.ensure_tables(spark, c)
    return c


def _commits(c, name: str) -> int:
    """Commits in a table's Delta log (cheaper than DESCRIBE HISTORY, and exact)."""
    return len(list(Path(common.table_path(c, name), "_delta_log").glob("*.json")))


def _list(spark, c, n: int) -> list[tuple]:
    return sorted((r.url, r.partition) for r in common.read(spark, c, "fetch_list").where(f"round = {n}").collect())


def _append(spark, c, name: str, df) -> None:
    common.conform(df, TABLES[name]).write.format("delta").mode("append").save(common.table_path(c, name))


def test_run_round_logic(spark, conf):
    assert generate.run(spark, conf, now=NOW) == {"round": None, "generated": 0}
    assert ledger.last_round(spark, conf) is None

    urls = [url_row(f"http://h{h}.test/{i}") for h in range(3) for i in range(6)]
    urls += [url_row("http://h0.test/old", status="fetched", score=9.0)]
    _append(spark, conf, "crawldb", spark.createDataFrame(urls, CRAWLDB))

    got = generate.run(spark, conf, now=NOW)
    assert got["round"] == 1 and got["resumed"] is False
    assert (got["generated"], got["generated_hosts"], got["n_partitions"]) == (10, 3, 3)
    assert got["generated_recrawl"] == 1 and got["generated_discovery"] == 9
    first = _list(spark, conf, 1)
    assert len(first) == 10 and any(u == "http://h0.test/old" for u, _ in first)
    r1 = ledger.get_round(spark, conf, 1)
    assert r1["state"] == "generated" and r1["n_partitions"] == 3 and r1["counts"]["generated"] == 10

    # generate again before the round is updated: the same round, nothing written
    commits = (_commits(conf, "fetch_list"), _commits(conf, "rounds"))
    again = generate.run(spark, conf, now=NOW)
    assert (again["round"], again["resumed"], again["state"], again["generated"]) == (1, True, "generated", 10)
    assert (_commits(conf, "fetch_list"), _commits(conf, "rounds")) == commits

    # a crash after writing round 2's list but before the ledger: the rerun replaces those rows
    ledger.set_state(spark, conf, 1, "updated")
    _append(spark, conf, "fetch_list", spark.createDataFrame([url_row("http://stray.test/")], CRAWLDB)
            .withColumn("round", F.lit(2)).withColumn("partition", F.lit(0)))
    second = generate.run(spark, conf, now=NOW)
    assert second["round"] == 2 and second["generated"] == 10
    assert _list(spark, conf, 2) == first          # crawldb unchanged, so the same selection, stray gone
    assert _list(spark, conf, 1) == first          # round 1's segment untouched


def test_missing_tables_is_a_one_line_error(spark, tmp_path):
    c = config.load(overrides=[f'storage.root="{tmp_path / "none"}"'])
    with pytest.raises(ConfigError) as e:
        generate.run(spark, c, now=NOW)
    assert "init" in str(e.value) and "\n" not in str(e.value)
    assert cli.main(["--set", f'storage.root="{tmp_path / "none"}"', "generate"]) == 2


def next_due_at(spark, urls, hosts=()):
    df = generate.next_due(spark.createDataFrame(list(urls), CRAWLDB), spark.createDataFrame(list(hosts), HOSTS),
                           max_per_host=100, max_pages_per_host=10, max_bytes_per_host=10**6)
    return df.collect()[0]["at"]


def test_next_due_is_the_earliest_url_a_list_could_hold(spark):
    soon, later = NOW + dt.timedelta(minutes=5), NOW + dt.timedelta(minutes=30)
    # the earliest eligible URL of a host that may be listed; statuses never listed do not count
    assert next_due_at(spark, [url_row("http://a.test/1", due=later), url_row("http://a.test/2", due=soon),
                               url_row("http://a.test/gone", status="error_final", due=PAST),
                               url_row("http://a.test/cut", status="budget_exhausted", due=PAST)]) == soon
    # a parked host's URL falls due when the park ends, a host out of budget's never
    assert next_due_at(spark, [url_row("http://parked.test/", due=PAST), url_row("http://spent.test/", due=PAST),
                               url_row("http://a.test/", due=later)],
                       [host_row("parked.test", parked_until=soon), host_row("spent.test", pages_fetched=10)]) == soon
    assert next_due_at(spark, [url_row("http://spent.test/", due=PAST)], [host_row("spent.test", bytes_fetched=10**6)]) is None
    assert next_due_at(spark, []) is None


def test_a_round_lists_what_falls_due_within_its_horizon(spark, tmp_path):
    """With generate.due_ahead_share, a URL due before the next round could list it, within that share
    of the previous round's cycle, is listed now; one due later, and any with the share at 0, is not."""
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("127.10.0.1 h0.test\n")

    def at_share(share: float, root: Path) -> set[str]:
        c = config.load(overrides=[f'storage.root="{root}"', "spark.master=local[2]", "spark.shuffle_partitions=2",
                                   "generate.fetch_partitions=1", f'net.hosts_file="{hosts_file}"',
                                   f"generate.due_ahead_share={share}"])
        common.ensure_tables(spark, c)
        # round 1: generated at NOW - 120 s, updated at NOW - 20 s (100 s), its generate took 20 s: a cycle of 120 s
        ledger.set_state(spark, c, 1, "generated", seconds={"generate": 20.0},
                         generated_at=NOW - dt.timedelta(seconds=120))
        row = ledger.set_state(spark, c, 1, "updated", updated_at=NOW - dt.timedelta(seconds=20))
        _append(spark, c, "crawldb", spark.createDataFrame([
            url_row("http://h0.test/now", status="fetched"),
            url_row("http://h0.test/in-50s", status="fetched", due=NOW + dt.timedelta(seconds=50)),
            url_row("http://h0.test/in-70s", status="fetched", due=NOW + dt.timedelta(seconds=70))], CRAWLDB))
        got = generate.run(spark, c, now=NOW, row=row)
        assert got["round"] == 2
        return {u for u, _ in _list(spark, c, 2)}

    assert at_share(0.5, tmp_path / "half") == {"http://h0.test/now", "http://h0.test/in-50s"}  # horizon NOW + 60 s
    assert at_share(0.0, tmp_path / "off") == {"http://h0.test/now"}
