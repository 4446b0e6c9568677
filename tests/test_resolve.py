"""The resolve step before generate (jobs/resolve.py): small DataFrames, then real Delta tables.

No DNS traffic: every name is in the test's hosts file or an IP literal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import xxhash

from crawl_udfs import config
from jobs import common, generate, ledger, resolve
from schemas.tables import CRAWLDB, HOSTS, TABLES
from tests.test_generate import FUTURE, NOW, WEIGHTS, host_row, url_row

pytestmark = pytest.mark.spark

SHARED = ("alpha.test", "bravo.test", "charlie.test", "delta.test")  # one address, names in different partitions
N_PARTITIONS = 4


def _hosts(spark, rows):
    return spark.createDataFrame(list(rows), HOSTS)


def test_unknown_hosts_are_the_listed_hosts_without_an_address(spark):
    urls = [url_row("http://new.test/1"), url_row("http://new.test/2"), url_row("http://noip.test/"),
            url_row("http://known.test/"), url_row("http://later.test/", due=FUTURE),
            url_row("http://final.test/", status="error_final"), url_row("http://parked.test/")]
    crawldb = spark.createDataFrame(urls, CRAWLDB)
    hosts = _hosts(spark, [host_row("noip.test"), host_row("known.test", ip="192.0.2.1"), host_row("idle.test"),
                           host_row("parked.test", parked_until=FUTURE)])
    selected = generate.select_due(crawldb, hosts, now=NOW, max_per_host=10, top_n=10, discovery_share=0.5,
                                   n_partitions=2, max_pages_per_host=100, max_bytes_per_host=10**9,
                                   delay_window_s=None, weights=WEIGHTS)
    got = selected.agg(resolve.unknown_hosts().alias("u")).collect()[0].u
    assert sorted((r.host, r.has_host_row) for r in got) == [("new.test", False), ("noip.test", True)]


def test_new_host_rows_fill_every_not_null_column(spark):
    resolved = spark.createDataFrame([("a.test", "192.0.2.1", None), ("b.test", None, "dns")],
                                     "host string, ip string, resolve_error string")
    rows = common.conform(resolve.new_host_rows(resolved), TABLES["hosts"]).collect()
    for r in rows:
        assert all(r[f.name] is not None for f in HOSTS.fields if not f.nullable)
        assert (r.pages_fetched, r.requests, r.updated_round) == (0, 0, 0)
    assert {(r.host, r.ip, r.resolve_error) for r in rows} == {("a.test", "192.0.2.1", None), ("b.test", None, "dns")}


def _pmod_hash(key: str, n: int) -> int:
    v = xxhash.xxh64_intdigest(key.encode(), seed=42)
    return (v - (1 << 64) if v >= 1 << 63 else v) % n


@pytest.fixture
def conf(spark, tmp_path):
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("127.10.0.7 " + " ".join(SHARED) + "\n127.10.0.8 known.test\n127.66.0.1 bait.test\n")
    c = config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"', "spark.shuffle_partitions=4",
                               f"generate.fetch_partitions={N_PARTITIONS}", f'net.hosts_file="{hosts_file}"',
                               'net.allow_private_cidrs=["127.10.0.0/16"]'])
    common.ensure_tables(spark, c)
    return c


def _append(spark, c, name, rows, schema):
    common.conform(spark.createDataFrame(rows, schema), TABLES[name]).write.format("delta").mode("append") \
        .save(common.table_path(c, name))


def _run(spark, conf, lookup=None):
    """resolve.run on the hosts generate would list now without an address, as generate calls it."""
    listed = generate.selection(common.read(spark, conf, "crawldb"), common.read(spark, conf, "hosts"), conf,
                                now=NOW, n_partitions=N_PARTITIONS)
    got = resolve.run(spark, conf, listed.agg(resolve.unknown_hosts().alias("u")).collect()[0].u, lookup=lookup)
    return {k: v for k, v in got.items() if k != "addresses"}


def test_run_writes_addresses_once(spark, conf):
    urls = [url_row(f"http://{h}/{i}") for h in SHARED for i in range(2)]
    urls += [url_row("http://known.test/"), url_row("http://bait.test/"), url_row("http://192.0.2.5/")]
    _append(spark, conf, "crawldb", urls, CRAWLDB)
    # charlie.test has a row without an address (e.g. from an older round); known.test's stays as it is
    _append(spark, conf, "hosts", [host_row("charlie.test", pages_fetched=3),
                                   host_row("known.test", ip="127.10.9.9")], HOSTS)

    assert _run(spark, conf) == {"resolved_hosts": 4, "unresolved_hosts": 2, "pending_hosts": 0}
    hosts = {r.host: r for r in common.read(spark, conf, "hosts").collect()}
    assert {h: hosts[h].ip for h in SHARED} == dict.fromkeys(SHARED, "127.10.0.7")
    assert hosts["charlie.test"].pages_fetched == 3                        # the old row kept, ip added
    assert hosts["known.test"].ip == "127.10.9.9"                          # known: not looked up again
    assert (hosts["bait.test"].ip, hosts["bait.test"].resolve_error) == (None, "ssrf_blocked")
    assert (hosts["192.0.2.5"].ip, hosts["192.0.2.5"].resolve_error) == (None, "ssrf_blocked")
    assert all(hosts[h].resolve_error is None for h in SHARED)

    # idempotent: only the hosts that found no address are tried again, to the same answer
    assert _run(spark, conf) == {"resolved_hosts": 0, "unresolved_hosts": 2, "pending_hosts": 0}
    assert {r.host: (r.ip, r.resolve_error) for r in common.read(spark, conf, "hosts").collect()} == \
        {h: (r.ip, r.resolve_error) for h, r in hosts.items()}



def test_generate_resolves_first_so_shared_addresses_share_a_task(spark, conf):
    # Partitioned by name these four would sit in different tasks: the test could not fail otherwise.
    assert len({_pmod_hash(h, N_PARTITIONS) for h in SHARED}) > 1
    _append(spark, conf, "crawldb", [url_row(f"http://{h}/{i}") for h in SHARED for i in range(2)], CRAWLDB)
    assert generate.run(spark, conf, now=NOW)["round"] == 1
    parts = {r.host: r.partition for r in common.read(spark, conf, "fetch_list").where("round = 1").collect()}
    assert {parts[h] for h in SHARED} == {_pmod_hash("127.10.0.7", N_PARTITIONS)}
    assert ledger.get_round(spark, conf, 1)["state"] == "generated"


async def slow_resolver(name: str) -> list[str]:
    """A system resolver that takes 3 s over names starting with "slow" (run in the resolve tasks)."""
    import asyncio
    await asyncio.sleep(3.0 if name.startswith("slow") else 0.0)
    return ["127.10.0.9"]


def test_names_unanswered_within_the_wait_are_written_nowhere(spark, conf):
    """``generate.resolve_wait_s`` bounds the step: a name not answered by then keeps no row and no
    error (its fetch task looks it up), and the next round tries it again."""
    _append(spark, conf, "crawldb", [url_row(f"http://{h}/") for h in ("slow1.test", "slow2.test", "quick.test")],
            CRAWLDB)
    hurried = conf.with_overrides(generate__resolve_wait_s=0.5)
    assert _run(spark, hurried, slow_resolver) == {"resolved_hosts": 1, "unresolved_hosts": 0, "pending_hosts": 2}
    assert {r.host: r.ip for r in common.read(spark, conf, "hosts").collect()} == {"quick.test": "127.10.0.9"}
    patient = conf.with_overrides(generate__resolve_wait_s=30.0)
    assert _run(spark, patient, slow_resolver) == {"resolved_hosts": 2, "unresolved_hosts": 0, "pending_hosts": 0}


def test_nothing_unknown_writes_nothing(spark, conf):
    _append(spark, conf, "crawldb", [url_row("http://known.test/")], CRAWLDB)
    _append(spark, conf, "hosts", [host_row("known.test", ip="127.10.0.8")], HOSTS)
    commits = sorted(Path(common.table_path(conf, "hosts"), "_delta_log").glob("*.json"))
    assert _run(spark, conf) == {"resolved_hosts": 0, "unresolved_hosts": 0, "pending_hosts": 0}
    assert sorted(Path(common.table_path(conf, "hosts"), "_delta_log").glob("*.json")) == commits


def test_hosts_never_seen_are_appended_without_a_merge(spark, conf):
    """A first round (no hosts row yet) writes its addresses in one append: a MERGE costs a join and
    a dozen Spark jobs more before the first request (bench/first_request.py)."""
    _append(spark, conf, "crawldb", [url_row(f"http://{h}/") for h in SHARED], CRAWLDB)
    before = common.table(spark, conf, "hosts").history().count()
    assert _run(spark, conf) == {"resolved_hosts": 4, "unresolved_hosts": 0, "pending_hosts": 0}
    ops = [r.operation for r in common.table(spark, conf, "hosts").history().orderBy("version").collect()]
    assert ops[before:] == ["WRITE"]
    assert {r.host: r.ip for r in common.read(spark, conf, "hosts").collect()} == dict.fromkeys(SHARED, "127.10.0.7")


def test_resolved_hosts_move_to_their_addresses_partition(spark):
    """Generate moves the hosts resolve found to their address's partition (the write of ``hosts`` also
    makes Delta recompute a cached selection, so the test above alone would not catch a missing move)."""
    urls = [url_row(f"http://{h}/") for h in SHARED] + [url_row("http://known.test/")]
    hosts = _hosts(spark, [host_row("known.test", ip="127.10.0.8")])
    selected = generate.select_due(spark.createDataFrame(urls, CRAWLDB), hosts, now=NOW, max_per_host=10, top_n=10,
                                   discovery_share=0.5, n_partitions=N_PARTITIONS, max_pages_per_host=100,
                                   max_bytes_per_host=10**9, delay_window_s=None, weights=WEIGHTS)
    before = {r.host: r.partition for r in selected.collect()}
    assert before == {h: _pmod_hash(h, N_PARTITIONS) for h in (*SHARED, "known.test")} | \
        {"known.test": _pmod_hash("127.10.0.8", N_PARTITIONS)}
    moved = generate.with_addresses(selected, {h: "127.10.0.7" for h in SHARED[:3]}, N_PARTITIONS).collect()
    assert {r.host: (r.partition, r.ip) for r in moved} == \
        {**{h: (_pmod_hash("127.10.0.7", N_PARTITIONS), "127.10.0.7") for h in SHARED[:3]},
         SHARED[3]: (_pmod_hash(SHARED[3], N_PARTITIONS), None),
         "known.test": (_pmod_hash("127.10.0.8", N_PARTITIONS), "127.10.0.8")}
