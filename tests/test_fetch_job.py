"""``jobs/fetch.py`` on Spark + Delta: one round fetched once, politely, with only committed WARC files kept.

Requests are counted on the server's side (the test web's log), never from
what the crawler says about itself.
"""

from __future__ import annotations

import datetime as dt
import io
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pytest
from warcio.archiveiterator import ArchiveIterator

from crawl_udfs import config
from crawl_udfs.partition import NOT_SENT
from crawl_udfs.rows import FetchResult, HostResult, Outlink, RobotsCapture
from crawl_udfs.url_normalize import fingerprint, host_of
from tests.urls import normalize
from jobs import common, fetch, ledger, warc_staging
from schemas.tables import FETCH_LIST, HOSTS
from tests.testweb import TestWeb

pytestmark = pytest.mark.spark

DELAY = 0.5
N_PARTITIONS = 3


def _conf(root: Path, web: TestWeb | None = None, *extra: str) -> config.Config:
    net = [f'net.hosts_file="{web.hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]'] if web else []
    return config.load(overrides=[f'storage.root="{root}"', "spark.master=local[2]", "spark.shuffle_partitions=4",
                                  f"politeness.host_delay_s={DELAY}", "fetch.task_budget_s=60",
                                  "fetch.total_timeout_s=10", *net, *extra])


def _host_row(host: str, **kw) -> dict:
    row = {f.name: None for f in HOSTS.fields}
    row.update(host=host, consecutive_failures=0, pages_fetched=0, bytes_fetched=0, requests=0, duplicate_pages=0,
               new_content_pages=0, updated_round=0)
    row.update(kw)
    return row


def _list_rows(urls: list[str], round_no: int) -> list[dict]:
    rows = []
    for u in urls:
        url = normalize(u)
        rows.append({"round": round_no, "partition": 0, "url_fp": fingerprint(url), "host": host_of(url), "depth": 0,
                     "score": 1.0, "redirect_hops": 0, "etag": None, "last_modified": None, "prev_digest": None,
                     "prev_warc_record_id": None, "prev_fetch_time": None, "url": url})
    return rows


def _with_contract_partition(spark, list_rows: list[dict], hosts_df, n: int):
    """The contract's partition column: pmod(xxhash64(coalesce(hosts.ip, host)), n)."""
    from pyspark.sql import functions as F
    fl = spark.createDataFrame(list_rows, FETCH_LIST).drop("partition")
    return (fl.join(hosts_df.select("host", "ip"), "host", "left")
            .withColumn("partition", F.pmod(F.xxhash64(F.coalesce("ip", "host")), F.lit(n)).cast("int"))
            .select(*[f.name for f in FETCH_LIST.fields]))


def _read_record(warc_dir: Path, filename: str, offset: int, length: int):
    with open(warc_dir / filename, "rb") as f:
        f.seek(offset)
        blob = f.read(length)
    assert len(blob) == length
    return next(iter(ArchiveIterator(io.BytesIO(blob))))


def _sent(page_rows) -> int:
    return sum(1 for r in page_rows if r.fetch_time is not None and r.error_class not in NOT_SENT)


# -- the round end to end --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fetched(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("fetchjob")
    with TestWeb(d / "web", n_hosts=20, seed=21, kinds=["site"]) as web:
        # one row per fetch-list URL is what this round pins: links are not followed inside it (tests/test_follow.py)
        conf = _conf(d / "crawl", web, "fetch.follow_in_round=false")
        common.ensure_tables(spark, conf)
        sites = web.plan.by_kind("site")
        urls = [h.url("/") for h in sites]
        for h in sites[:3]:  # a few hosts with several URLs
            urls += [h.url(p) for p in sorted(h.pages) if p != "/" and h.allowed(p)][:2]
        # one host whose robots.txt the crawl DB already holds, fresh: the task must not fetch it again
        cached = sites[-1].name
        now = common.now_utc()
        fresh = _host_row(cached, robots_status=404, robots_body=b"", robots_fetched_at=now,
                          robots_expires_at=now + dt.timedelta(hours=1))
        hosts_df = spark.createDataFrame([fresh], HOSTS)
        hosts_df.write.format("delta").mode("append").save(common.table_path(conf, "hosts"))
        fl = _with_contract_partition(spark, _list_rows(urls, 1), hosts_df, N_PARTITIONS)
        fl.write.format("delta").mode("append").save(common.table_path(conf, "fetch_list"))
        ledger.set_state(spark, conf, 1, "generated", n_partitions=N_PARTITIONS)
        expected = {r.url_fp: r.partition for r in common.read(spark, conf, "fetch_list").collect()}
        version0 = common.table(spark, conf, "fetch_output").history(1).collect()[0].version
        result = fetch.run(spark, conf)
        rows = common.read(spark, conf, "fetch_output").where("round = 1").collect()
        yield {"web": web, "conf": conf, "result": result, "rows": rows, "expected": expected, "cached": cached,
               "log": web.log(), "version0": version0, "root": d / "crawl"}


def test_one_page_row_per_list_url_and_one_host_row_per_host(fetched):
    rows, expected = fetched["rows"], fetched["expected"]
    pages = [r for r in rows if r.kind == "page"]
    hosts = [r for r in rows if r.kind == "host"]
    assert sorted(r.url_fp for r in pages) == sorted(expected)
    assert {r.url_fp: r.partition for r in pages} == expected
    assert sorted(r.host for r in hosts) == sorted({r.host for r in pages})
    assert sum(r.outcome == "ok" for r in pages) >= len(pages) - 2, [(r.url, r.outcome, r.error_class) for r in pages]
    ok = [r for r in pages if r.outcome == "ok"]
    assert all(isinstance(r.fetch_time, dt.datetime) and r.fetch_time.year >= 2024 for r in ok)
    assert any(r.outlinks for r in ok) and all(o.url_fp == fingerprint(o.url) for r in ok for o in r.outlinks)
    by_host = {r.host: r for r in hosts}
    assert by_host[fetched["cached"]].robots_requests == 0, "a fresh cached robots.txt is not fetched again"
    assert all(h.robots_requests == 1 for name, h in by_host.items() if name != fetched["cached"])
    assert all(h.next_allowed_at is not None and h.robots_expires_at > h.robots_fetched_at for h in hosts)


def test_each_task_fetches_exactly_its_fetch_partition(fetched):
    for r in fetched["rows"]:
        if r.warc_filename:
            assert r.warc_filename.startswith(f"deltacrawl-r000001-p{r.partition:05d}-"), r.warc_filename
            assert r.warc_staging.endswith(f"-p{r.partition}-a0")


def test_warc_pointers_read_back_and_only_committed_files_remain(fetched):
    warc_dir = fetched["root"] / "warc"
    pages = [r for r in fetched["rows"] if r.kind == "page" and r.warc_filename]
    assert len(pages) >= len(fetched["expected"]) - 2
    stored = [r for r in fetched["rows"] if r.kind in ("page", "robots") and r.warc_filename]
    for r in stored:
        rec = _read_record(warc_dir, r.warc_filename, r.warc_offset, r.warc_length)
        assert rec.rec_headers.get_header("WARC-Target-URI") == r.url
        assert rec.rec_headers.get_header("WARC-Record-ID") == r.warc_record_id
    assert sorted(os.listdir(warc_dir)) == sorted({r.warc_filename for r in stored})  # no _staging left


def test_robots_txt_responses_are_stored_in_warc(fetched):
    """Every answered robots.txt request is a ``robots`` row whose pointer reads back as a response record
    of that robots.txt, with the host row's status and body; a fresh cached robots.txt is not fetched again."""
    from crawl_udfs.signatures import sha1_digest

    hosts = {r.host: r for r in fetched["rows"] if r.kind == "host"}
    robots = [r for r in fetched["rows"] if r.kind == "robots"]
    answered = [h for h, r in hosts.items() if h != fetched["cached"] and r.robots_status is not None]
    assert answered and sorted(r.host for r in robots) == sorted(answered)
    for r in robots:
        rec = _read_record(fetched["root"] / "warc", r.warc_filename, r.warc_offset, r.warc_length)
        assert rec.rec_type == "response" and rec.rec_headers.get_header("WARC-Target-URI") == r.url
        assert r.url.split("/")[2].split(":")[0] == r.host and r.url.endswith("/robots.txt")
        assert int(rec.http_headers.get_statuscode()) == r.status_code == hosts[r.host].robots_status
        payload = rec.content_stream().read()
        assert sha1_digest(payload) == r.digest == rec.rec_headers.get_header("WARC-Payload-Digest")
        assert r.content_length == len(payload) and r.warc_staging.endswith(f"-p{r.partition}-a0")
        if r.status_code == 200:
            assert payload == hosts[r.host].robots_body


def test_server_saw_exactly_the_requests_of_the_committed_rows(fetched):
    """The lineage ran once: every request the server got is accounted for by one committed row."""
    rows, log = fetched["rows"], fetched["log"]
    pages = [r for r in rows if r.kind == "page"]
    robots = sum(r.robots_requests for r in rows if r.kind == "host")
    assert len(log) == _sent(pages) + robots
    assert len(log) == sum(r.requests for r in rows if r.kind == "host")
    v = fetched["web"].violations(host_delay_s=DELAY,
                                  max_in_flight_per_addr=(  # the list is partitioned here by host name, bypassing
                                      # generate's resolve step: hosts of one address may sit in every task
                                      fetched["conf"].politeness.max_in_flight_per_ip * N_PARTITIONS))
    assert v.clean, v.summary()
    assert v.max_in_flight_host <= 1


def test_ledger_counts(spark, fetched):
    conf, rows = fetched["conf"], fetched["rows"]
    r = ledger.get_round(spark, conf, 1)
    assert r["state"] == "fetched" and r["seconds"]["fetch"] > 0
    c = r["counts"]
    pages = [x for x in rows if x.kind == "page"]
    assert c["fetched_ok"] == c["pages_ok"] == sum(x.outcome == "ok" for x in pages)
    assert sum(v for k, v in c.items() if k.startswith("fetched_")) == len(pages)
    assert c["requests"] == len(fetched["log"]) and c["not_attempted"] == 0
    assert c["robots_requests"] == len(fetched["web"].seeds()) - 1
    assert c["bytes"] > 0 and c["politeness_wait_ms"] > 0
    assert fetched["result"]["skipped"] is False and fetched["result"]["pages_ok"] == c["pages_ok"]


def test_running_again_changes_nothing(spark, fetched):
    conf = fetched["conf"]
    version = common.table(spark, conf, "fetch_output").history(1).collect()[0].version
    assert version == fetched["version0"] + 1, "fetch_output was written by exactly one commit"
    again = fetch.run(spark, conf, round_no=1)
    assert again["skipped"] is True and again["pages_ok"] == fetched["result"]["pages_ok"]
    assert common.table(spark, conf, "fetch_output").history(1).collect()[0].version == version
    assert len(fetched["web"].log()) == len(fetched["log"])


def test_committed_but_unrecorded_round_is_closed_without_fetching(spark, fetched):
    """A run that committed fetch_output and died before promotion + ledger: finish, fetch nothing."""
    conf, root = fetched["conf"], fetched["root"]
    page = next(r for r in fetched["rows"] if r.warc_filename)
    staged = Path(page.warc_staging)
    staged.mkdir(parents=True)
    os.replace(root / "warc" / page.warc_filename, staged / page.warc_filename)   # not promoted yet
    orphan = Path(warc_staging.attempt_dir(str(root / "warc"), 1, 99, 0, 0))
    orphan.mkdir(parents=True)
    (orphan / page.warc_filename).write_bytes(b"a failed attempt's copy")
    ledger.set_state(spark, conf, 1, "fetching")
    version = common.table(spark, conf, "fetch_output").history(1).collect()[0].version
    out = fetch.run(spark, conf)
    assert out["skipped"] is False and out["refetched"] is False
    assert out["warc"]["promoted"] == 1 and out["warc"]["orphans_removed"] == 1
    assert ledger.get_round(spark, conf, 1)["state"] == "fetched"
    assert common.table(spark, conf, "fetch_output").history(1).collect()[0].version == version
    assert len(fetched["web"].log()) == len(fetched["log"])
    assert not (root / "warc" / "_staging").exists()
    rec = _read_record(root / "warc", page.warc_filename, page.warc_offset, page.warc_length)
    assert rec.rec_headers.get_header("WARC-Target-URI") == page.url


def test_round_counts_say_how_many_urls_the_tail_cut_left(spark, tmp_path):
    """Of the not_attempted pages, ``tail_cut`` counts those a thin-tail cut left queued (crawl_udfs/tail.py),
    not those the window's end left (task_budget)."""
    from schemas.tables import FETCH_OUTPUT
    conf = _conf(tmp_path / "crawl")
    why = ["tail_cut", "tail_cut", "task_budget", None, "tail_cut"]
    outcome = ["not_attempted", "not_attempted", "not_attempted", "ok", "not_attempted"]
    rows = [{f.name: None for f in FETCH_OUTPUT.fields} | dict(
        round=1 if i < 4 else 2, partition=0, kind="page", host="a.test", url_fp=i, outcome=o, error_class=e)
        for i, (o, e) in enumerate(zip(outcome, why))]
    spark.createDataFrame(rows, FETCH_OUTPUT).write.format("delta").save(common.table_path(conf, "fetch_output"))
    c = fetch.round_counts(spark, conf, 1)
    assert (c["not_attempted"], c["tail_cut"], c["pages_ok"]) == (3, 2, 1)


# -- the pure parts --------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 8, 17])
def test_partition_keys_land_on_their_own_index(spark, n):
    from pyspark.sql import functions as F
    keys = fetch.partition_keys(spark, n).withColumn("lands", F.pmod(F.hash("_key"), F.lit(n))).collect()
    assert sorted(r.partition for r in keys) == list(range(n))
    assert all(r.lands == r.partition for r in keys)


def test_fetch_input_unions_items_and_their_hosts_one_partition_per_task(spark):
    n = 4
    t0 = dt.datetime(2025, 1, 2, 3, 4, 5, 250000)
    urls = [f"http://h{i}.test/p{j}" for i in range(8) for j in range(3)]
    rows = _list_rows(urls, 5)
    for r in rows:
        r["partition"] = int(r["host"][1:].split(".")[0]) % n
        r["prev_fetch_time"] = t0
    fl = spark.createDataFrame(rows, FETCH_LIST)
    hosts = spark.createDataFrame([_host_row("h1.test", next_allowed_at=t0, consecutive_failures=2, ip="127.10.0.9"),
                                   _host_row("elsewhere.test")], HOSTS)
    got = (fetch.fetch_input(fl, hosts, n).rdd.mapPartitionsWithIndex(lambda i, it: [(i, r) for r in it])
           .collect())
    assert all(i == r.partition for i, r in got), "task index == fetch partition"
    items = [r for _, r in got if r.kind == "item"]
    host_rows = [r for _, r in got if r.kind == "host"]
    assert sorted(r.url for r in items) == sorted(normalize(u) for u in urls)
    assert [(h.host, h.partition, h.consecutive_failures, h.ip) for h in host_rows] == [("h1.test", 1, 2, "127.10.0.9")]
    epoch = t0.replace(tzinfo=dt.timezone.utc).timestamp()
    assert host_rows[0].next_allowed_at == pytest.approx(epoch) and host_rows[0].url is None
    assert all(r.prev_fetch_time == pytest.approx(epoch) and r.robots_status is None for r in items)


def test_fetch_input_gives_each_host_its_known_set_and_its_cap_for_the_round(spark):
    from jobs import generate
    from schemas.tables import CRAWLDB

    listed = [f"http://h{i}.test/p0" for i in range(3)]
    known = {"h0.test": [f"http://h0.test/k{j}" for j in range(4)] + listed[:1], "h1.test": listed[1:2],
             "other.test": ["http://other.test/x"]}
    crawldb = spark.createDataFrame([(fingerprint(u), h) for h, us in known.items() for u in us],
                                    "url_fp long, host string")
    fl = spark.createDataFrame(_list_rows(listed, 2), FETCH_LIST)
    rule = {"pattern": "/print/", "kind": "prefix", "pages": 12, "dup_share": 1.0}
    hosts = spark.createDataFrame([_host_row("h0.test", pages_fetched=7),
                                   _host_row("h1.test", round_cap=3, dup_patterns=[rule]), _host_row("h2.test")], HOSTS)
    cap = generate.host_cap(max_per_host=40, max_pages_per_host=10, delay_window_s=None)
    batches = fetch.fetch_input(fl, hosts, 2, crawldb=crawldb, follow_cap=cap).toArrow().to_batches()
    items, states, _ = fetch.read_batches(batches)
    by_host = {h.host: h for h in states}
    assert (by_host["h0.test"].follow_cap, by_host["h1.test"].follow_cap, by_host["h2.test"].follow_cap) == (3, 3, 10)
    assert all(fingerprint(u) in by_host["h0.test"].known for u in known["h0.test"])
    assert len(by_host["h0.test"].known) == 5 and fingerprint("http://other.test/x") not in by_host["h0.test"].known
    assert len(by_host["h2.test"].known) == 0 and all(not i.in_round for i in items)
    assert by_host["h1.test"].dup_patterns == [rule] and by_host["h0.test"].dup_patterns is None  # learnt patterns
    # without a crawl DB (fetch.follow_in_round = false) no host can be followed
    _, plain, _ = fetch.read_batches(fetch.fetch_input(fl, hosts, 2).toArrow().to_batches())
    assert all(h.known is None and h.follow_cap is None for h in plain)
    # a host that knows more URLs than max_known ships none and follows none; the others are as before
    for max_known, h0 in ((5, (3, 5)), (4, (0, 0))):
        _, capped, _ = fetch.read_batches(fetch.fetch_input(fl, hosts, 2, crawldb=crawldb, follow_cap=cap,
                                                            max_known=max_known).toArrow().to_batches())
        by_host = {h.host: h for h in capped}
        assert (by_host["h0.test"].follow_cap, len(by_host["h0.test"].known)) == h0
        assert (by_host["h1.test"].follow_cap, len(by_host["h1.test"].known)) == (3, 1)


def test_output_batch_matches_the_table_schema(spark):
    page = FetchResult(url="http://a.test/", url_fp=fingerprint("http://a.test/"), host="a.test", outcome="ok",
                       fetch_time=1_700_000_000.123456, status_code=200, content_length=10, warc_filename="x.warc.gz",
                       warc_offset=5, warc_length=7, outlinks=[Outlink("http://b.test/", fingerprint("http://b.test/"),
                                                                       "a", True)])
    host = HostResult(host="a.test", robots_status=200, robots_body=b"User-agent: *",
                      robots_fetched_at=1_700_000_000.0, robots_expires_at=1_700_086_400.0, sitemaps=["http://a.test/s.xml"], requests=2, robots_requests=1)
    host.robots_captures.append(RobotsCapture(
        host="a.test", url="http://a.test/robots.txt", fetch_time=1_699_999_999.5, status_code=200, ip="127.0.0.1",
        content_type="text/plain", content_length=13, truncated=None, digest="sha1:X", warc_filename="x.warc.gz",
        warc_offset=1, warc_length=2, warc_record_id="<urn:uuid:r>"))
    batch = fetch.output_batch([page, host], 7, {"a.test": 3}, "/stage/s1-p3-a0")
    assert batch.schema == fetch.arrow_schema() and batch.num_rows == 3
    p, h, r = batch.to_pylist()
    assert (p["round"], p["partition"], p["kind"], h["kind"]) == (7, 3, "page", "host")
    assert (r["kind"], r["partition"], r["url"], r["warc_offset"], r["digest"]) == (
        "robots", 3, "http://a.test/robots.txt", 1, "sha1:X")
    assert r["warc_staging"] == "/stage/s1-p3-a0" and r["outcome"] is None
    assert p["fetch_time"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.timezone.utc)
    assert p["warc_staging"] == "/stage/s1-p3-a0" and h["warc_staging"] is None
    assert p["outlinks"] == [{"url": "http://b.test/", "url_fp": fingerprint("http://b.test/"), "kind": "a",
                              "nofollow": True, "host": "b.test", "lastmod": None}]
    assert h["outlinks"] is None and h["robots_body"] == b"User-agent: *" and h["sitemaps"] == ["http://a.test/s.xml"]
    back = spark.createDataFrame(pa.Table.from_batches([batch])).collect()
    assert back[0].fetch_time == dt.datetime(2023, 11, 14, 22, 13, 20, 123456)  # naive UTC, as the tables hold
    assert back[0].outlinks[0].nofollow is True and back[1].robots_expires_at == dt.datetime(2023, 11, 15, 22, 13, 20)


# -- WARC staging: a failed attempt's files never reach warc/ -------------------------------------
def test_promote_keeps_committed_files_and_removes_orphans(tmp_path):
    root = str(tmp_path / "warc")
    a0 = Path(warc_staging.attempt_dir(root, 4, 2, 1, 0))
    a1 = Path(warc_staging.attempt_dir(root, 4, 2, 1, 1))
    name = warc_staging.warc_name("deltacrawl", 4, 1, 0)
    assert name == "deltacrawl-r000004-p00001-00000.warc.gz"
    for d, body in ((a0, b"attempt 0"), (a1, b"attempt 1")):
        d.mkdir(parents=True)
        (d / name).write_bytes(body)
    (a0 / warc_staging.warc_name("deltacrawl", 4, 1, 1)).write_bytes(b"attempt 0, second file")
    other_round = Path(warc_staging.attempt_dir(root, 5, 9, 0, 0))
    other_round.mkdir(parents=True)
    committed = [(str(a1), name)]
    assert warc_staging.promote(root, 4, committed) == {"promoted": 1, "present": 0, "orphans_removed": 2}
    assert (tmp_path / "warc" / name).read_bytes() == b"attempt 1"
    assert not Path(warc_staging.round_staging_dir(root, 4)).exists() and other_round.exists()
    assert warc_staging.promote(root, 4, committed) == {"promoted": 0, "present": 1, "orphans_removed": 0}
    with pytest.raises(FileNotFoundError):
        warc_staging.promote(root, 4, [(str(a1), warc_staging.warc_name("deltacrawl", 4, 1, 7))])


class _Ctx:
    """What FetchTask reads of pyspark's TaskContext."""

    def __init__(self, partition: int, attempt: int, stage: int = 3):
        self.p, self.a, self.s = partition, attempt, stage

    def partitionId(self) -> int:
        return self.p

    def attemptNumber(self) -> int:
        return self.a

    def stageId(self) -> int:
        return self.s


def test_a_task_defers_a_host_whose_address_the_round_gave_another_task(spark, tmp_path):
    """A host listed by name (no address within generate.resolve_wait_s) that resolves to an address
    generate put in another partition is deferred untouched: two tasks would each allow it the per-IP cap."""
    from tests.test_generate import host_row

    with TestWeb(tmp_path / "web", n_hosts=8, seed=4, kinds=["site"]) as web:
        conf = _conf(tmp_path / "crawl", web)
        urls = web.seeds()[:2]
        rows = _list_rows(urls, 2)
        taken = rows[0]["host"]
        addr = web.plan.hosts[taken].address
        other = dict(rows[0], host="other.test", url="http://other.test/", url_fp=1, partition=1)  # same address
        claimed = fetch.addresses(spark.createDataFrame(rows + [other], FETCH_LIST),
                                  spark.createDataFrame([host_row("other.test", ip=addr)], HOSTS))
        assert claimed == {addr: 1}
        batches = fetch.fetch_input(spark.createDataFrame(rows, FETCH_LIST), spark.createDataFrame([], HOSTS),
                                    1).toArrow().to_batches()
        task = fetch.FetchTask(conf, 2, common.warc_root(conf), addresses=claimed)
        out = pa.Table.from_batches(list(task.run(iter(batches), _Ctx(0, 0)))).to_pylist()
        asked = {line["host"] for line in web.log()}
        only = [b.filter(pa.compute.equal(b.column("host"), taken)) for b in batches]
        owner = pa.Table.from_batches(list(task.run(iter(only), _Ctx(1, 0)))).to_pylist()  # the address's task
    pages = {r["host"]: r for r in out if r["kind"] == "page"}
    assert (pages[taken]["outcome"], pages[taken]["error_class"]) == ("deferred", "address_elsewhere")
    assert pages[rows[1]["host"]]["outcome"] == "ok" and asked == {rows[1]["host"]}
    assert [r["outcome"] for r in owner if r["kind"] == "page"] == ["ok"]


def test_retried_attempt_waits_and_only_its_files_are_promoted(spark, tmp_path):
    """Attempt 0 fetches and stages its WARC files, then "fails" (its rows are never committed);
    attempt 1 runs at once: it must not burst, and only its files end up in warc/."""
    with TestWeb(tmp_path / "web", n_hosts=8, seed=4, kinds=["site"]) as web:
        conf = _conf(tmp_path / "crawl", web)
        urls = web.seeds()[:6]
        fl = spark.createDataFrame(_list_rows(urls, 2), FETCH_LIST)
        batches = fetch.fetch_input(fl, spark.createDataFrame([], HOSTS), 1).toArrow().to_batches()
        task = fetch.FetchTask(conf, 2, common.warc_root(conf))
        first = pa.Table.from_batches(list(task.run(iter(batches), _Ctx(0, 0)))).to_pylist()
        n_first = len(web.log())
        second = pa.Table.from_batches(list(task.run(iter(batches), _Ctx(0, 1)))).to_pylist()
        log = web.log()
    assert {r["url"] for r in first if r["kind"] == "page"} == {normalize(u) for u in urls}
    assert 0 < n_first < len(log)
    for rows in (first, second):
        pages = [r for r in rows if r["kind"] == "page"]
        assert all(r["outcome"] == "ok" for r in pages), [(r["url"], r["error_class"]) for r in pages]
    assert {r["warc_filename"] for r in first if r["warc_filename"]} == \
           {r["warc_filename"] for r in second if r["warc_filename"]}, "final names do not depend on the attempt"
    assert all(r["warc_staging"].endswith("s3-p0-a1") for r in second if r["warc_filename"])
    v = web.violations(host_delay_s=DELAY, max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)  # one task
    assert v.clean, v.summary()
    assert len(log) == 2 * len(urls) * 2, "robots.txt + home page per host, per attempt"
    root = common.warc_root(conf)
    committed = {(r["warc_staging"], r["warc_filename"]) for r in second if r["warc_filename"]}
    stats = warc_staging.promote(root, 2, committed)
    assert stats["promoted"] == len(committed) and stats["orphans_removed"] == len(committed)
    assert sorted(os.listdir(root)) == sorted(n for _, n in committed)
    for r in second:
        if r["warc_filename"]:
            rec = _read_record(Path(root), r["warc_filename"], r["warc_offset"], r["warc_length"])
            assert rec.rec_headers.get_header("WARC-Target-URI") == r["url"]
            assert rec.rec_headers.get_header("WARC-Record-ID") == r["warc_record_id"]


def test_a_round_found_fetching_is_resumed_with_every_task_retried(spark, fetched, monkeypatch):
    """State ``fetching`` with nothing committed = a crash mid-fetch: refetch, each task waiting a host delay."""
    conf, calls = fetched["conf"], []
    ledger.set_state(spark, conf, 2, "fetching", n_partitions=2)
    monkeypatch.setattr(fetch, "_fetch", lambda spark, conf, n, k, *, retried, row: calls.append((n, k, retried)))
    out = fetch.run(spark, conf)
    assert calls == [(2, 2, True)] and out["resumed"] is True and out["refetched"] is True
    assert ledger.get_round(spark, conf, 2)["state"] == "fetched"
