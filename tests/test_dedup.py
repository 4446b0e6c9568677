"""Near-duplicates in update (jobs/dedup_transforms.py, behind dedup.near_duplicates): small hand-made
tables, the job on Delta. A mirror on another host and a print version become duplicates of the
earliest fetched copy; a heavy-template page within k bits does not (the MinHash check); a page sharing
a block key but more than k bits away does not (the Hamming filter); a rerun changes nothing; with the
key off nothing is marked or indexed.
"""

from __future__ import annotations

import io
import random

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawl_udfs import config, near_dup, simhash
from crawl_udfs.url_normalize import fingerprint, host_of
from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT, NEAR_DUP_INDEX
from tests.test_update import FIRST, T0, frame, listed, old, page, sec
from tests.testweb.sites import prose

pytestmark = pytest.mark.spark

CONF0 = config.defaults()
K = CONF0.simhash.near_duplicate_bits
N = CONF0.simhash.shingle_words
PERM = CONF0.dedup.minhash_permutations
TABLE_NAMES = ("crawldb", "hosts", "fetch_log", "links", "near_dup_index")

ARTICLE = prose(random.Random("article/0"), 400)
PRINT = "Printer-friendly version\n" + ARTICLE + "\nPrinted from a.test"
STORY = prose(random.Random("article/3"), 400)
STORY_PRINT = "Printer-friendly version\n" + STORY + "\nPrinted from x.test"
NOTICE = prose(random.Random("template"), 400)                        # a heavy template: 400 shared words
BRIEF_OLD = prose(random.Random("own/40/8"), 40) + "\n" + NOTICE      # + 40 own words: distinct pages
BRIEF_NEW = prose(random.Random("own/40/32"), 40) + "\n" + NOTICE

A = "http://a.test/article/0"            # the original, indexed in round 1
T = "http://c.test/brief/8"              # a template page, indexed in round 1
M = "http://m.test/mirror/article/0"     # round 2: a mirror on another host
P = "http://a.test/print/article/0"      # round 2: the print version, same host
B = "http://c.test/brief/32"             # round 2: another brief of the template (no copy)
X = "http://x.test/story/3"              # round 2: a story fetched first ...
Y = "http://y.test/story/3?ref=home"     # ... and its print copy on another host, 10 s later
H = "http://h.test/odd"                  # round 2: A's text, but a SimHash 4 bits from A's sharing block 0
NEWS = prose(random.Random("article/6"), 400)
NEWS_PRINT = "Printer-friendly version\n" + NEWS + "\nPrinted from q.test"
Q1 = "http://q.test/print/6"             # round 1: a print copy naming Q as canonical, indexed
Q = "http://q.test/6"                    # round 2: Q, self-canonical: the original, Q1 its copy
G = "http://g.test/gone"                 # round 1: an original (G2 its copy); round 2: 404
G2 = "http://g2.test/copy"
HOSTS_OF_ROUND = sorted({host_of(u) for u in (M, P, B, X, Y, H, Q, G)})


def sig(text: str) -> dict:
    return dict(simhash=simhash.simhash(text, N), minhash=near_dup.minhash(text, N, PERM),
                words=len(simhash.words(text)))


def far_from(fp: int) -> int:
    """``fp`` with 4 bits flipped in blocks 1-3: block 0 shared, more than k = 3 bits away."""
    return fp ^ ((1 << 16) | (1 << 17) | (1 << 32) | (1 << 48))


def test_preconditions_the_cases_rest_on():
    a, p, b_old, b_new = (sig(t) for t in (ARTICLE, PRINT, BRIEF_OLD, BRIEF_NEW))
    assert simhash.hamming(a["simhash"], p["simhash"]) <= K
    assert simhash.hamming(b_old["simhash"], b_new["simhash"]) <= K               # SimHash alone: a copy
    assert near_dup.jaccard(b_old["minhash"], b_new["minhash"]) < CONF0.dedup.jaccard_threshold
    assert simhash.hamming(sig(STORY)["simhash"], sig(STORY_PRINT)["simhash"]) <= K
    h = far_from(a["simhash"])
    assert simhash.hamming(a["simhash"], h) == 4 and near_dup.block_keys(h, K)[0] == near_dup.block_keys(
        a["simhash"], K)[0]
    assert simhash.hamming(p["simhash"], h) > K  # H is a copy of nothing of the round either


def test_block_keys_column_is_near_dups_layout(spark):
    from pyspark.sql import functions as F

    from jobs import dedup_transforms as D
    rng = random.Random(5)
    fps = [0, -1, 2**63 - 1, -2**63, simhash.simhash(ARTICLE, N)] + [rng.randrange(-2**63, 2**63) for _ in range(50)]
    for k in (1, 3, 7):
        got = spark.createDataFrame([(f,) for f in fps], "fp long").select(
            "fp", D.block_keys(F.col("fp"), k).alias("keys")).collect()
        assert {r.fp: list(r.keys) for r in got} == {f: near_dup.block_keys(f, k) for f in fps}


def _index_rows(url: str, text: str, fetched, round_no: int = 1) -> list[dict]:
    s = sig(text)
    return [dict(block_key=key, url_fp=fingerprint(url), host=host_of(url), first_fetched=fetched,
                 round=round_no, **s) for key in near_dup.block_keys(s["simhash"], K)]


def _ok(url: str, text: str, digest: str, fetch_time=T0, **kw) -> dict:
    return page(url, "ok", 2, status_code=200, digest=digest, content_type="text/html", fetch_time=fetch_time,
                wire_bytes=10, **{**sig(text), **kw})


def _seed(spark, conf):
    """Round 1 left A and T in the crawl DB and the index; round 2 fetched M, P, B, X, Y, H."""
    from jobs import common, ledger
    common.ensure_tables(spark, conf)
    olds = [old(A, status="fetched", digest="sha1:A", fetch_count=1, simhash=sig(ARTICLE)["simhash"],
                last_fetch_time=FIRST, discovered_round=1, updated_round=1),
            old(T, status="fetched", digest="sha1:T", fetch_count=1, simhash=sig(BRIEF_OLD)["simhash"],
                last_fetch_time=FIRST, discovered_round=1, updated_round=1),
            old(Q1, status="fetched", digest="sha1:Q1", fetch_count=1, simhash=sig(NEWS_PRINT)["simhash"],
                last_fetch_time=FIRST, first_fetched=FIRST, canonical_fp=fingerprint(Q), discovered_round=1,
                updated_round=1),
            old(G, status="fetched", digest="sha1:G", fetch_count=1, first_fetched=FIRST, updated_round=1),
            old(G2, status="duplicate", dup_of=fingerprint(G), digest="sha1:G", fetch_count=1,
                first_fetched=FIRST + sec(5), http_status=200, updated_round=1),
            *[old(u, first_seen=FIRST + sec(1), discovered_round=1, updated_round=1) for u in (M, P, B, X, Y, H, Q)]]
    pages = [_ok(M, ARTICLE, "sha1:M"), _ok(P, PRINT, "sha1:P"), _ok(B, BRIEF_NEW, "sha1:B"),
             _ok(X, STORY, "sha1:X"), _ok(Y, STORY_PRINT, "sha1:Y", fetch_time=T0 + sec(10)),
             _ok(H, ARTICLE, "sha1:H", simhash=far_from(sig(ARTICLE)["simhash"])),
             _ok(Q, NEWS, "sha1:Q", canonical=Q), page(G, "http_error", 2, status_code=404, wire_bytes=10)]
    hosts = [dict(round=2, partition=0, kind="host", host=h, requests=1, ip="127.10.0.9", next_allowed_at=T0,
                  consecutive_failures=0, parked=False) for h in HOSTS_OF_ROUND]
    index = (_index_rows(A, ARTICLE, FIRST) + _index_rows(T, BRIEF_OLD, FIRST)
             + [dict(r, canonical_fp=fingerprint(Q)) for r in _index_rows(Q1, NEWS_PRINT, FIRST)])

    def append(rows, schema, name):
        common.conform(frame(spark, rows, schema), common.TABLES[name]).write.format("delta").mode("append") \
            .save(common.table_path(conf, name))
    append(olds, CRAWLDB, "crawldb")
    append(index, NEAR_DUP_INDEX, "near_dup_index")
    append(pages + hosts, FETCH_OUTPUT, "fetch_output")
    append([listed(p["url"], 2) for p in pages], FETCH_LIST, "fetch_list")
    ledger.set_state(spark, conf, 1, "updated")
    ledger.set_state(spark, conf, 2, "generated", n_partitions=1)
    ledger.set_state(spark, conf, 2, "fetched")


def _conf(tmp, on: bool):
    return config.load(overrides=[f'storage.root="{tmp / "crawl"}"', "spark.shuffle_partitions=4",
                                  "budget.max_pages_per_host=100", f"dedup.near_duplicates={str(on).lower()}"])


def _content(spark, conf) -> dict:
    from jobs import common
    return {t: sorted((tuple(r) for r in common.read(spark, conf, t).collect()), key=repr) for t in TABLE_NAMES}


@pytest.fixture(scope="module")
def near_on(spark, tmp_path_factory):
    from jobs import update
    conf = _conf(tmp_path_factory.mktemp("ndx_on"), True)
    _seed(spark, conf)
    return conf, update.run(spark, conf)


def test_mirror_and_print_version_become_duplicates_of_the_earliest_copy(spark, near_on):
    from jobs import common
    conf, result = near_on
    db = {r.url: r for r in common.read(spark, conf, "crawldb").collect()}
    want = {M: fingerprint(A), P: fingerprint(A), Y: fingerprint(X)}
    for url, orig in want.items():
        assert (db[url].status, db[url].dup_of) == ("duplicate", orig), url
        assert db[url].fetch_interval_s == conf.schedule.duplicate_interval_s
    for url in (B, X, H, Q):  # the template brief, the story's first copy, the page more than k bits away
        assert (db[url].status, db[url].dup_of) == ("fetched", None), url
    log = {r.url: r.dup_of for r in common.read(spark, conf, "fetch_log").collect()}
    assert log == {M: fingerprint(A), P: fingerprint(A), Y: fingerprint(X), B: None, X: None, H: None, Q: None,
                   G: None}
    index = common.read(spark, conf, "near_dup_index")
    added = {(r.url_fp, r.round) for r in index.where("round = 2").collect()}
    assert added == {(fingerprint(u), 2) for u in (B, X, H, Q)}                  # copies are not originals
    assert index.where("round = 2").count() == 4 * (K + 1)
    assert (result["near_duplicates"], result["near_dup_index"], result["duplicates"]) == (4, 4 * (K + 1), 3)
    hosts = {r.host: r.duplicate_pages for r in common.read(spark, conf, "hosts").collect()}
    assert hosts["m.test"] == hosts["y.test"] == 1 and hosts["c.test"] == 0


def test_the_canonical_target_wins_and_a_gone_originals_copy_is_promoted_in_the_change_feed(spark, near_on):
    from pyspark.sql import functions as F

    from jobs import common
    conf, result = near_on
    assert simhash.hamming(sig(NEWS)["simhash"], sig(NEWS_PRINT)["simhash"]) <= K
    db = {r.url: r for r in common.read(spark, conf, "crawldb").collect()}
    assert (db[Q1].status, db[Q1].dup_of) == ("duplicate", fingerprint(Q))   # fetched a round earlier, yet the copy
    assert (db[G].status, db[G2].status, db[G2].dup_of) == ("gone", "fetched", None)
    assert db[Q1].updated_round == db[G2].updated_round == 2 and result["repointed"] == 2
    feed = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0)
            .load(common.table_path(conf, "crawldb"))  # update replaces a row: its new version is an insert
            .where(F.col("_change_type").isin("insert", "update_postimage") & (F.col("updated_round") == 2)))
    seen = {r.url_fp: r.status for r in feed.where(F.col("url_fp").isin(fingerprint(Q1), fingerprint(G2))).collect()}
    assert seen == {fingerprint(Q1): "duplicate", fingerprint(G2): "fetched"}


def test_a_rerun_of_the_round_changes_nothing(spark, near_on):
    from jobs import ledger, update
    conf = near_on[0]
    before = _content(spark, conf)
    assert update.run(spark, conf)["skipped"] is True
    row = ledger.get_round(spark, conf, 2)
    ledger.set_state(spark, conf, 2, "fetched")  # a crash after every write, before the ledger
    again = update.run(spark, conf, round_no=2, now=row["fetched_at"])
    assert _content(spark, conf) == before
    assert {k: again[k] for k in row["counts"]} == row["counts"]


# With the key off (the default) update's plan never reads near_dup_index: every other update test runs
# that way, and test_update's job-count test pins its plan; test_counters sees both counters written as 0.


def test_init_on_an_existing_crawl_adds_the_index_and_the_signature_columns(spark, crawl_conf):
    from pyspark.sql.types import StructType

    from jobs import common
    # a table from before the signatures: the columns up to them (later ones came later still)
    old_output = StructType(FETCH_OUTPUT.fields[:FETCH_OUTPUT.names.index("minhash")])
    added = len(FETCH_OUTPUT.fields) - len(old_output.fields)
    path = common.table_path(crawl_conf, "fetch_output")
    spark.createDataFrame([], old_output).write.format("delta").partitionBy("round").save(path)
    changed = common.ensure_tables(spark, crawl_conf)
    assert "created near_dup_index" in changed and f"added {added} column(s) to fetch_output" in changed
    assert spark.read.format("delta").load(path).schema.names == FETCH_OUTPUT.names
    assert common.read(spark, crawl_conf, "near_dup_index").schema.names == NEAR_DUP_INDEX.names
    assert common.ensure_tables(spark, crawl_conf) == []


# -- end to end: the test web's labelled near-duplicates, fetched by the fetch task, merged by update ----
def _fetched_round(spark, tmp, conf):
    """Every labelled URL of the test web's dup hosts fetched by ``fetch_partition`` (round 1): the
    truth, and the round's fetch_output rows as the fetch job writes them (``jobs.fetch.output_columns``)."""
    import datetime as dt

    from crawl_udfs.partition import fetch_partition
    from crawl_udfs.rows import FetchItem, FetchResult
    from jobs.fetch import output_columns
    from tests.testweb import TestWeb

    with TestWeb(tmp / "web", n_hosts=3, seed=7, kinds=["dup"], knobs={"latency_s": 0.0}) as web:
        clusters = web.plan.dup_clusters()
        fconf = config.load(overrides=[
            f'net.hosts_file="{web.hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]',
            "politeness.host_delay_s=0.05", "fetch.task_budget_s=60",
            "dedup.near_duplicates=true"])  # the task computes the signatures only with the key on
        urls = sorted(u for us in clusters.values() for u in us)
        items = [FetchItem(url=u, url_fp=fingerprint(u), host=host_of(u)) for u in urls]
        out = list(fetch_partition(items, fconf, warc_dir=str(tmp / "w"), warc_name=lambda i: f"d-{i}.warc.gz"))
    pages = [r for r in out if isinstance(r, FetchResult)]
    cols = output_columns(out, 1, {r.host: 0 for r in out}, None)
    stamp = {f.name for f in FETCH_OUTPUT.fields if f.dataType.typeName() == "timestamp"}
    rows = [{k: (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=v) if k in stamp and v is not None else v)
             for k, v in zip(cols, values)} for values in zip(*cols.values())]
    return clusters, pages, rows


def test_the_test_webs_copies_become_duplicates_of_their_earliest_fetched_copy(spark, tmp_path):
    """Mirrors on other hosts, print versions and variant URLs of each labelled article, fetched in one
    round: one original per article, every other copy its duplicate (near or exact); no brief
    (distinct pages sharing a heavy template) is a duplicate. The fetch task's MinHash and length are
    near_dup's of the page's main text."""
    from crawl_udfs import parser
    from crawl_udfs.url_normalize import UrlNormalizer
    from jobs import common, ledger, update

    clusters, pages, rows = _fetched_round(spark, tmp_path, CONF0)
    ok = [r for r in pages if r.outcome == "ok"]
    assert len(ok) == len(pages) == sum(map(len, clusters.values()))
    sample = ok[0]
    with open(tmp_path / "w" / sample.warc_filename, "rb") as f:  # the fetch task's signatures, recomputed
        f.seek(sample.warc_offset)
        rec = next(iter(ArchiveIterator(io.BytesIO(f.read(sample.warc_length)))))
    ctype = rec.http_headers.get_header("Content-Type")
    text = parser.parse(rec.content_stream().read(), url=sample.url, content_type=ctype,
                        headers={"content-type": ctype}, normalizer=UrlNormalizer(CONF0.url), parse_conf=CONF0.parse,
                        agent_name=CONF0.crawler.agent_name).main_text
    assert (sample.minhash, sample.words) == (near_dup.minhash(text, N, PERM), len(simhash.words(text)))

    conf = _conf(tmp_path, True)
    common.ensure_tables(spark, conf)
    olds = [old(r.url, first_seen=FIRST) for r in pages]
    common.conform(frame(spark, olds, CRAWLDB), common.TABLES["crawldb"]).write.format("delta").mode("append") \
        .save(common.table_path(conf, "crawldb"))
    frame(spark, rows, FETCH_OUTPUT).write.format("delta").mode("append").save(common.table_path(conf, "fetch_output"))
    frame(spark, [listed(r.url, 1) for r in pages], FETCH_LIST).write.format("delta").mode("append") \
        .save(common.table_path(conf, "fetch_list"))
    ledger.set_state(spark, conf, 1, "generated", n_partitions=1)
    ledger.set_state(spark, conf, 1, "fetched")
    result = update.run(spark, conf)
    db = {r.url: r for r in common.read(spark, conf, "crawldb").collect()}
    wrong = {}
    for group, urls in clusters.items():
        kept = [u for u in urls if db[u].status == "fetched"]
        dup_of = {db[u].dup_of for u in urls if u not in kept}
        if len(kept) != 1 or dup_of - {fingerprint(kept[0])}:
            wrong[group] = sorted((u, db[u].status, db[u].dup_of, db[u].digest, fingerprint(u)) for u in urls)
    assert not wrong, wrong  # one original per article, every copy names it; each brief is its own
    log = {r.url: r.dup_of for r in common.read(spark, conf, "fetch_log").collect()}
    assert log == {u: db[u].dup_of for u in log} and len(log) == len(pages)
    copies = sum(len(u) - 1 for u in clusters.values())
    assert result["duplicates"] == copies and result["near_dup_index"] == len(clusters) * (K + 1)
