"""A real crawl's export, read by the standard tools the README names: DuckDB and pywb.

A small crawl of the local test web (ordinary sites with PDF/PNG/CSV files and
pages in other charsets, the near-duplicate hosts, and the SSRF host whose
/to-* pages answer 301/302/307/308) runs through the CLI for two rounds and is
exported with ``deltacrawl export``. Then, never with the code that wrote it:

- DuckDB reads ``DIR/index/**/*.parquet`` with Hive partitioning: as many rows as
  Spark and pyarrow read, Common Crawl's columns with the DuckDB types they
  should have, the README's example query runs, and every row's
  (warc_filename, offset, length) is a WARC record (read with warcio) of the
  row's URL, status, payload digest and fetch time.
- pywb 2.10.0, in its own virtualenv (``.venv-pywb``: its pins conflict with
  ours), replays every index row from our exported WARC files and our exported
  CDXJ (not an index of its own): ``<timestamp>id_/<url>`` answers with the
  row's status, the record's exact payload and, for redirects, its Location.
  pywb listens on 127.0.0.1 only, in plain replay mode (no ``--live``, no
  ``--proxy``, no ``--record``), after the test web has stopped.

URLs are due again in the second round, so its conditional GETs of unchanged
pages get 304s: server-not-modified revisit records, whose index rows carry
the digest of the record they refer to. Half the pages forget their validators
before it, so their unchanged payloads come back as 200s: identical-payload
revisit records, which pywb replays with the payload of the copy they refer to. pywb replays such a revisit as the
304 it is, with no payload (its resolving loader answers any 3xx revisit from
the revisit's own headers); the original stays replayable at its own time.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import html
import http.client
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
import pyarrow.dataset as pads
import pytest
from warcio.archiveiterator import ArchiveIterator

from crawl_udfs import config
from crawl_udfs.signatures import sha1_digest
from jobs import cli, common, export, lookup
from tests.summary import note
from tests.net import free_loopback_port
from tests.testweb import TestWeb

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[1]
PYWB_VENV = REPO_ROOT / ".venv-pywb"
PYWB_REQUIREMENTS = Path(__file__).with_name("pywb-requirements.txt")
PYWB_STAMP = PYWB_VENV / "installed-requirements.txt"  # a copy of the file the venv was built from
COLLECTION = "corpus"
DELAY = 0.3
ROUNDS = 2

#: DuckDB's type of every column of the index, in file order, partition columns last.
DUCKDB_TYPES = {
    **{name: "VARCHAR" for name in export.CC_COLUMNS + export.EXTRA_COLUMNS + export.PARTITION_COLUMNS},
    "url_port": "INTEGER", "fetch_time": "TIMESTAMP WITH TIME ZONE", "fetch_status": "SMALLINT",
    "warc_record_offset": "INTEGER", "warc_record_length": "INTEGER", "simhash": "BIGINT",
}


@dataclass(frozen=True)
class StoredRecord:
    """One WARC record as warcio reads it from the exported files."""
    rec_type: str
    target_uri: str
    warc_date: str
    payload_digest: str | None
    status: int
    location: str | None
    content_type: str | None
    payload: bytes
    refers_to: str | None      # WARC-Refers-To of a revisit: the original's WARC-Record-ID


# -- the crawl and its export -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(spark, tmp_path_factory):
    """(export dir, config) of a 2-round crawl of ~24 hosts; the test web is stopped before export."""
    d = tmp_path_factory.mktemp("corpus")
    with TestWeb(d / "web", n_hosts=24, seed=5, kinds=["site", "dup", "ssrf"]) as web:
        overlay = d / "corpus.toml"
        overlay.write_text(
            f'[storage]\nroot = "{d / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
            f"[politeness]\nhost_delay_s = {DELAY}\n"
            "[fetch]\ntask_budget_s = 20.0\ntotal_timeout_s = 6.0\n"
            "[generate]\nmax_urls_per_host = 6\nfetch_partitions = 2\n"
            # due again in the next round (the fixed policy: every stored page 1 s on): its conditional GETs
            # of unchanged pages get 304s (revisit records)
            '[schedule]\npolicy = "fixed"\ndefault_interval_s = 1.0\n')
        seeds = d / "seeds.txt"
        seeds.write_text("\n".join(web.seeds()) + "\n")
        base = ["--conf", str(overlay)]
        assert cli.main(base + ["init"]) == 0
        assert cli.main(base + ["inject", str(seeds)]) == 0
        assert cli.main(base + ["crawl", "--rounds", "1"]) == 0
        # half the stored pages forget their validators: their round-2 GETs are unconditional, so an unchanged
        # one comes back 200 with the same payload (an identical-payload revisit); the other half get 304s
        from delta.tables import DeltaTable
        DeltaTable.forPath(spark, common.table_path(config.load([overlay]), "crawldb")).update(
            condition="pmod(url_fp, 2) = 0", set={"etag": "CAST(NULL AS STRING)",
                                                   "last_modified": "CAST(NULL AS STRING)"})
        assert cli.main(base + ["crawl", "--rounds", str(ROUNDS - 1)]) == 0
    out = d / "out"
    assert cli.main(base + ["export", "--out", str(out)]) == 0
    return out, config.load([overlay])


def _index_source(out: Path) -> str:
    return f"read_parquet('{out}/index/**/*.parquet', hive_partitioning=true)"


def _duckdb() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")  # TIMESTAMP WITH TIME ZONE values come back as UTC datetimes
    return con


def _read_record(out: Path, filename: str, offset: int, length: int) -> StoredRecord:
    """The one record at (filename, offset, length) of the export, read with warcio."""
    with open(out / filename, "rb") as f:
        f.seek(offset)
        blob = f.read(length)
    records = ArchiveIterator(io.BytesIO(blob))
    rec = next(records)
    payload = rec.content_stream().read()
    extra = list(records)
    assert not extra, f"{filename}@{offset}+{length} holds {1 + len(extra)} records, not one"
    http_headers = rec.http_headers
    return StoredRecord(rec_type=rec.rec_type, target_uri=rec.rec_headers.get_header("WARC-Target-URI"),
                        warc_date=rec.rec_headers.get_header("WARC-Date"),
                        payload_digest=rec.rec_headers.get_header("WARC-Payload-Digest"),
                        status=int(http_headers.get_statuscode()), location=http_headers.get_header("Location"),
                        content_type=http_headers.get_header("Content-Type"), payload=payload,
                        refers_to=rec.rec_headers.get_header("WARC-Refers-To"))


@pytest.fixture(scope="module")
def payload_digests(corpus) -> dict[str, tuple[str, str | None]]:
    """WARC-Record-ID -> (target URI, payload digest) of every response record in the exported files."""
    out, _conf = corpus
    found = {}
    for path in sorted((out / "warc").iterdir()):
        with open(path, "rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type == "response":
                    h = rec.rec_headers
                    found[h.get_header("WARC-Record-ID")] = (h.get_header("WARC-Target-URI"),
                                                             h.get_header("WARC-Payload-Digest"))
    return found


@pytest.fixture(scope="module")
def index(corpus):
    """Every index row as DuckDB reads it (a dict per row), with the WARC record it points at."""
    out, _conf = corpus
    con = _duckdb()
    cur = con.execute(f"SELECT * FROM {_index_source(out)} ORDER BY url_surtkey, fetch_time")
    names = [c[0] for c in cur.description]
    rows = [dict(zip(names, values)) for values in cur.fetchall()]
    for row in rows:
        row["fetch_time"] = row["fetch_time"].astimezone(dt.timezone.utc)
    return [(row, _read_record(out, row["warc_filename"], row["warc_record_offset"], row["warc_record_length"]))
            for row in rows]


# -- DuckDB -----------------------------------------------------------------------------------------
def test_duckdb_reads_the_rows_spark_and_pyarrow_read(spark, corpus):
    out, _conf = corpus
    columns = ["url", "warc_filename", "warc_record_offset", "warc_record_length", "crawl", "subset"]
    in_duckdb = Counter(_duckdb().execute(f"SELECT {', '.join(columns)} FROM {_index_source(out)}").fetchall())
    dataset = pads.dataset(out / "index", format="parquet", partitioning="hive")
    in_pyarrow = Counter(tuple(r.values()) for r in dataset.to_table(columns=columns).to_pylist())
    n_spark = spark.read.parquet(str(out / "index")).count()
    assert sum(in_duckdb.values()) > 50, "the crawl exported too few rows to prove anything"
    assert sum(in_duckdb.values()) == n_spark == dataset.count_rows()
    assert in_duckdb == in_pyarrow


def test_duckdb_column_types(corpus):
    out, _conf = corpus
    described = _duckdb().execute(f"DESCRIBE SELECT * FROM {_index_source(out)}").fetchall()
    assert [(name, typ) for name, typ, *_ in described] == list(DUCKDB_TYPES.items())


def test_readme_duckdb_query_runs(corpus):
    out, _conf = corpus
    readme = (REPO_ROOT / "README.md").read_text()
    found = re.search(r"DuckDB: `(SELECT [^`]+)`", readme)
    assert found, "README.md no longer shows a DuckDB query of the index"
    query = found.group(1).replace("DIR", str(out))
    con = _duckdb()
    cur = con.execute(query)
    rows = cur.fetchall()
    assert [c[0] for c in cur.description] == ["url", "fetch_status"]
    assert len(rows) == con.execute(f"SELECT count(*) FROM {_index_source(out)}").fetchone()[0]
    assert all(isinstance(url, str) and isinstance(status, int) for url, status in rows)


def test_every_row_points_at_its_record(corpus, index, payload_digests):
    """Each row's WARC pointer reads back, with warcio, as a record of the row's URL, status, payload
    digest and fetch time (a revisit's, mime ``warc/revisit``: a 304, or a 2xx whose payload is the stored
    copy's, referring to a stored response of that URL and digest); the partition values agree with the status."""
    _out, conf = corpus
    revisits = Counter()
    for row, rec in index:
        where = f"{row['url']} -> {row['warc_filename']}@{row['warc_record_offset']}"
        assert rec.target_uri == row["url"], where
        assert rec.status == row["fetch_status"], where
        if row["content_mime_type"] == export.REVISIT_MIME:
            revisits[row["fetch_status"]] += 1
            assert rec.rec_type == "revisit", where
            if row["fetch_status"] == 304:
                assert rec.payload_digest is None, where  # server-not-modified, as Heritrix writes them
            else:  # identical-payload-digest
                assert rec.payload_digest == "sha1:" + row["content_digest"], where
            assert payload_digests.get(rec.refers_to) == (row["url"], "sha1:" + row["content_digest"]), where
        else:
            assert rec.rec_type == "response", where
            assert rec.payload_digest == "sha1:" + row["content_digest"], where
        warc_date = dt.datetime.strptime(rec.warc_date, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
        assert row["fetch_time"] == warc_date, (where, rec.warc_date)  # fetch times are whole milliseconds
        assert row["crawl"] == conf.export.crawl_id
        robots = re.fullmatch(r"/robots[-\w]*\.txt", row["url_path"] or "")  # the test web's robots.txt and its hops
        assert row["subset"] == ("robotstxt" if robots else "warc" if 200 <= row["fetch_status"] < 300
                                 else "crawldiagnostics"), where
    assert revisits[304], "the second round's conditional GETs got no 304"
    assert revisits[200], "the second round got no unchanged payload without a 304 (no identical-payload revisit)"
    assert any(row["subset"] == "robotstxt" for row, _rec in index), "no robots.txt response in the corpus"


def test_the_crawl_db_keeps_the_stored_copy_of_a_304(spark, corpus, index):
    """update's row 3, end to end: a URL whose last fetch was a 304 is ``not_modified`` and still names
    the stored copy its revisit refers to (digest, record id), with the revisit's fetch time."""
    _out, conf = corpus
    revisits = {row["url"]: (row, rec) for row, rec in index if row["fetch_status"] == 304}
    crawldb = spark.read.format("delta").load(common.table_path(conf, "crawldb"))
    rows = crawldb.where(crawldb.url.isin(list(revisits))).collect()
    assert revisits and len(rows) == len(revisits)
    for db in rows:
        row, rec = revisits[db.url]
        assert (db.status, db.http_status) == ("not_modified", 304), db.url
        assert (db.digest, db.warc_record_id) == ("sha1:" + row["content_digest"], rec.refers_to), db.url
        # PySpark hands timestamps back as naive local times: compare instants
        assert db.last_fetch_time.timestamp() == row["fetch_time"].timestamp(), db.url
        assert db.fetch_count == 2 and db.unchanged_count == 1 and db.change_count == 0, db.url
    # a 200 stored as an identical-payload revisit: the crawl DB still names the full copy it refers to
    identical = {row["url"]: rec for row, rec in index if rec.rec_type == "revisit" and row["fetch_status"] != 304}
    rows = crawldb.where(crawldb.url.isin(list(identical))).collect()
    assert identical and len(rows) == len(identical)
    for db in rows:
        assert db.warc_record_id == identical[db.url].refers_to and db.http_status == 200, db.url


# -- deltacrawl lookup ------------------------------------------------------------------------------
def test_lookup_finds_every_capture_and_payload(corpus, index):
    """``lookup`` (no Spark) over the latest export, for every URL of the crawl: exactly the URL's index
    rows, and each capture's payload as warcio reads it (a 304 revisit's: the stored response it refers to)."""
    out, conf = corpus
    by_url: dict[str, list] = {}
    for row, rec in index:
        by_url.setdefault(row["url"], []).append((row, rec))
    export_dir = lookup.export_dir_of(conf, None)  # the one storage.root/exports/latest.json names
    assert export_dir == str(out)
    seconds = []
    for url, expected in by_url.items():
        t = time.perf_counter()
        found = lookup.captures(export_dir, lookup.normalized(conf, url))
        seconds.append(time.perf_counter() - t)
        pointers = [(c.warc_filename, c.offset, c.length, c.status) for c in found]
        assert pointers == [(r["warc_filename"], r["warc_record_offset"], r["warc_record_length"],
                             r["fetch_status"]) for r, _rec in expected], url
        for cap, (row, rec) in zip(found, expected):
            got = lookup.payload(export_dir, cap)
            if rec.rec_type == "response":
                assert got.source == cap and got.data == rec.payload, url
            else:
                original = next(r for r, o in expected if o.rec_type == "response"
                                and r["content_digest"] == row["content_digest"])
                assert got.source.fetch_ms == round(original["fetch_time"].timestamp() * 1000), url
                assert sha1_digest(got.data) == "sha1:" + row["content_digest"], url
    seconds.sort()
    note(f"lookup: {len(by_url)} URLs of the test crawl ({len(index)} captures), each with every payload; "
         f"index query median {seconds[len(seconds) // 2] * 1000:.0f} ms, max {seconds[-1] * 1000:.0f} ms")


# -- pywb -------------------------------------------------------------------------------------------
def _run(cmd: list[str], what: str, **kw) -> None:
    """Run ``cmd``; a failure is a test error with the command's output (never a skip)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        pytest.fail(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-4000:]}",
                    pytrace=False)


@pytest.fixture(scope="module")
def pywb_bin() -> Path:
    """The bin directory of ``.venv-pywb``, built from tests/pywb-requirements.txt once (the stamp file
    holds the requirements it was built from; a changed file rebuilds it)."""
    wanted = PYWB_REQUIREMENTS.read_text()
    if not (PYWB_STAMP.exists() and PYWB_STAMP.read_text() == wanted):
        _run([sys.executable, "-m", "venv", "--clear", str(PYWB_VENV)], "creating .venv-pywb", timeout=300)
        pip = [str(PYWB_VENV / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        _run(pip + ["install", "--no-deps", "-r", str(PYWB_REQUIREMENTS)], "installing pywb into .venv-pywb",
             timeout=900)
        _run(pip + ["check"], "pip check in .venv-pywb (a dependency missing from pywb-requirements.txt?)",
             timeout=120)
        PYWB_STAMP.write_text(wanted)
    return PYWB_VENV / "bin"


@pytest.fixture(scope="module")
def wayback(corpus, pywb_bin, tmp_path_factory):
    """A pywb ``wayback`` server on 127.0.0.1 serving a collection of our WARC files and our CDXJ.

    Our CDXJ names files relative to the export dir (``warc/<name>``) and pywb resolves
    them against the collection's archive dir, so the WARC files go to ``archive/warc/``.
    Listens on 127.0.0.1 only (pywb's in-process warcserver takes a second, ephemeral port on
    ``localhost``). Yields (port, log path); the server's process group is killed afterwards.
    """
    out, _conf = corpus
    root = tmp_path_factory.mktemp("pywb")
    _run([str(pywb_bin / "wb-manager"), "init", COLLECTION], "wb-manager init", cwd=root, timeout=120)
    coll = root / "collections" / COLLECTION
    (coll / "archive" / "warc").mkdir()
    for f in (out / "warc").iterdir():
        shutil.copyfile(f, coll / "archive" / "warc" / f.name)
    for f in (out / "cdxj").glob("*.cdxj"):  # one per round: pywb merges the index files of a collection
        shutil.copyfile(f, coll / "indexes" / f.name)

    port = free_loopback_port()
    log_path = root / "wayback.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(pywb_bin / "wayback"), "--port", str(port), "--bind", "127.0.0.1"],
                                cwd=root, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", f"/{COLLECTION}/")
                conn.getresponse().read()
                conn.close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"wayback did not answer on 127.0.0.1:{port} (exit {proc.poll()}):\n"
                                f"{log_path.read_text(errors='replace')[-3000:]}", pytrace=False)
                time.sleep(0.2)
        yield port, log_path
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass


def _pywb_error(body: bytes) -> str:
    """The 'Error Details' of a pywb error page, or the start of the body."""
    found = re.search(rb"<pre>(.*?)</pre>", body, re.S)
    return html.unescape(found.group(1).decode("utf-8", "replace")) if found else body[:300].decode("utf-8", "replace")


def test_pywb_replays_every_record_from_our_cdxj(wayback, index):
    """``<14-digit fetch_time>id_/<url>`` for every index row: the row's status, the WARC record's
    exact payload (none for a 304 revisit; an identical-payload revisit's: the stored copy's it refers to),
    Content-Type, Location and the capture of that second."""
    port, log_path = wayback
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    failures = []
    stored = {(r["url"], r["content_digest"]): o.payload for r, o in index if o.rec_type == "response"}
    for row, rec in index:
        if rec.rec_type == "revisit" and row["fetch_status"] != 304:
            rec = replace(rec, payload=stored[(row["url"], row["content_digest"])])
        timestamp = row["fetch_time"].strftime("%Y%m%d%H%M%S")
        conn.request("GET", f"/{COLLECTION}/{timestamp}id_/{row['url']}")
        resp = conn.getresponse()
        body = resp.read()
        got = (resp.status, resp.getheader("Location"), resp.getheader("Content-Type"),
               resp.getheader("Memento-Datetime"))
        want = (row["fetch_status"], rec.location, rec.content_type,
                email.utils.format_datetime(row["fetch_time"], usegmt=True))
        if got != want or body != rec.payload:
            detail = _pywb_error(body) if resp.status >= 400 else f"{len(body)} bytes, want {len(rec.payload)}"
            failures.append(f"{row['url']} @{timestamp}: got {got}, want {want}; {detail}")
    conn.close()
    assert not failures, (f"{len(failures)} of {len(index)} records not replayed as stored:\n"
                          + "\n".join(failures[:10]) + f"\n(pywb log: {log_path})")

    statuses = Counter(row["fetch_status"] // 100 * 100 for row, _rec in index if row["fetch_status"] != 304)
    kinds = {"redirect": statuses[300], "revisit": sum(row["fetch_status"] == 304 for row, _rec in index),
             "identical": sum(rec.rec_type == "revisit" and row["fetch_status"] != 304 for row, rec in index),
             "non-HTML": sum(not (rec.content_type or "").startswith("text/html") for _row, rec in index),
             "non-UTF-8": sum(row["content_charset"] not in (None, "utf-8") for row, _rec in index)}
    assert all(kinds.values()), f"the crawl lacks a kind of record this test claims to cover: {kinds}"
    note(f"corpus tools: DuckDB read {len(index)} index rows, each checked against its WARC record; "
         f"pywb replayed {len(index)} of {len(index)} from our CDXJ byte for byte "
         f"({statuses[200]} 2xx, {kinds['redirect']} redirects, {kinds['revisit']} 304 revisits, {kinds['identical']} identical-payload revisits, "
         f"{kinds['non-HTML']} non-HTML, "
         f"{kinds['non-UTF-8']} non-UTF-8)")
