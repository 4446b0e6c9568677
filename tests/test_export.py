"""``deltacrawl export``: WARC files, the Common Crawl-column Parquet index and CDXJ, read back independently.

A small crawl is written the way fetch + update leave it: real WARC files by
``crawl_udfs.warc`` under ``storage.root/warc`` and ``fetch_log`` rows pointing
into them. The export is then read with pyarrow, warcio, ``warcio check`` and a
plain CDXJ parser — never with the code that wrote it.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import surt
from warcio.archiveiterator import ArchiveIterator

from crawl_udfs import config, warc
from crawl_udfs.url_normalize import fingerprint
from jobs import cli, common, export, export_files, export_record, ledger, lookup, warc_staging
from schemas.tables import FETCH_LOG, FETCH_OUTPUT, ROUNDS
from tests.summary import note

pytestmark = pytest.mark.spark

BIN = Path(sys.executable).parent
T0 = 1_760_000_000.0  # epoch seconds of the first fetch

# (round, url, status, body, extra fetch_log fields); round 2 re-fetches the first URL (304), round 3 again
# (a 200 with the same payload: an identical-payload revisit); the ledger says rounds 1-2, then 1-4 are updated
PAGES = [
    (1, "http://a.b.example.co.uk/x?b=2&a=1", 200, b"<html>same words here</html>", {"simhash": 123}),
    # update marked it a duplicate of the first (fetch_log.dup_of), and the index says so
    (1, "http://www.example.com/", 200, b"<html>same words here</html>",
     {"simhash": 123, "dup_of": hash("http://a.b.example.co.uk/x?b=2&a=1") & 0x7FFFFFFF}),
    (1, "http://foo.blogspot.com/p", 200, b"<html>blog</html>" * 50, {"truncated": "length"}),
    (1, "http://127.10.0.5:8080/r", 301, b"", {"redirect_to": "http://127.10.0.5:8080/target"}),
    (1, "http://www.example.com/missing", 404, b"not found", {}),
    (2, "http://a.b.example.co.uk/x?b=2&a=1", 304, b"", {}),
    (2, "http://www.example.com/new", 200, b"<html>new</html>", {"charset": "utf-8"}),
    (3, "http://a.b.example.co.uk/x?b=2&a=1", 200, b"<html>same words here</html>", {"_identical": True}),
    # a copy of a page only round 1 fetched: its duplicate_of names a URL of a round exported before
    (4, "http://www.example.com/later", 200, b"<html>blog</html>" * 50,
     {"dup_of": hash("http://foo.blogspot.com/p") & 0x7FFFFFFF}),
]
DENIED = "http://www.example.com/private"  # robots_denied: a fetch_log row without a WARC record
ROBOTS = "http://www.example.com/robots.txt"
ROBOTS_BODY = b"User-agent: *\nDisallow: /private\n"


def _conf(root: Path, *extra: str) -> config.Config:
    return config.load(overrides=[f'storage.root="{root}"', "spark.master=local[2]", "spark.shuffle_partitions=4",
                                  *extra])


def _log_row(round_no: int, url: str, **kw) -> dict:
    row = {f.name: None for f in FETCH_LOG.fields}
    row.update(round=round_no, url=url, url_fp=hash(url) & 0x7FFFFFFF, host=url.split("/")[2].split(":")[0],
               outcome="ok")
    row.update(kw)
    return row


def _updated(spark, conf: config.Config, rounds) -> None:
    """The round ledger says ``rounds`` are updated (what export reads to pick its rounds)."""
    path = common.table_path(conf, "rounds")
    if not os.path.isdir(path):
        spark.createDataFrame([], ROUNDS).write.format("delta").save(path)
    for n in rounds:
        ledger.set_state(spark, conf, n, "updated")


def _write_crawl(spark, conf: config.Config, pages=None, *, unlogged_robots: bool = True,
                 updated: list[int] | None = None) -> list[dict]:
    """WARC files and fetch_log rows as a crawl of ``pages`` (default :data:`PAGES`, 2 rounds) leaves them,
    the ledger saying ``updated`` (default: every round) are updated; returns the rows. A page with
    ``_identical`` in its extra fields is stored as an identical-payload revisit of the URL's first copy."""
    pages = PAGES if pages is None else pages
    warc_dir = common.warc_root(conf)
    os.makedirs(warc_dir)
    rows, first, robots = [], {}, []
    for round_no in sorted({p[0] for p in pages}):
        name_fn = lambda i, r=round_no: warc_staging.warc_name(conf.warc.prefix, r, 0, i)  # noqa: E731
        with warc.RollingWarcWriter(warc_dir, conf.warc, name_fn=name_fn, now_fn=lambda: T0) as w:
            if round_no == 1:  # robots.txt first, as a fetch task fetches it: a response record, a `robots` row
                ex = warc.HttpExchange(url=ROBOTS, ip="127.0.0.9", fetch_time=T0 - 1, method="GET",
                                       request_target="/robots.txt", request_headers=[("Host", "www.example.com")],
                                       http_version="1.1", status=200, reason="OK",
                                       response_headers=[("Content-Type", "text/plain")], body=ROBOTS_BODY)
                ptr = w.write_exchange(ex)
                robots.append(_output_row(1, "robots", "www.example.com", url=ROBOTS, status_code=200,
                                          fetch_time=dt.datetime.fromtimestamp(T0 - 1, dt.timezone.utc)
                                          .replace(tzinfo=None), content_type="text/plain",
                                          content_length=len(ROBOTS_BODY), digest=warc.sha1_digest(ROBOTS_BODY),
                                          warc_filename=ptr.filename, warc_offset=ptr.offset,
                                          warc_length=ptr.length, warc_record_id=ptr.record_id))
            for i, (r, url, status, body, extra) in enumerate(pages):
                if r != round_no:
                    continue
                identical = extra.get("_identical", False)
                extra = {k: v for k, v in extra.items() if not k.startswith("_")}
                t = T0 + 60 * i
                target = url.split("/", 3)[3] if url.count("/") >= 3 else ""
                headers = [("Content-Type", "text/html; charset=utf-8")]
                if "redirect_to" in extra:
                    headers.append(("Location", extra["redirect_to"]))
                ex = warc.HttpExchange(url=url, ip="127.0.0.9", fetch_time=t, method="GET",
                                       request_target="/" + target, request_headers=[("Host", url.split("/")[2])],
                                       http_version="1.1", status=status, reason="X", response_headers=headers,
                                       body=body, truncated=extra.get("truncated"), fetch_duration_ms=5)
                if status == 304 or identical:
                    digest = first[url][2]
                    ptr = w.write_revisit(ex, refers_to=first[url][0], refers_to_uri=url, refers_to_date=first[url][1],
                                          payload_digest=digest if identical else None)
                    extra["warc_refers_to"] = first[url][0]
                else:
                    digest = warc.sha1_digest(body)
                    ptr = w.write_exchange(ex, payload_digest=digest)
                    first.setdefault(url, (ptr.record_id, t, digest))
                outcome = {200: "ok", 304: "not_modified", 301: "redirect"}.get(status, "http_error")
                rows.append(_log_row(round_no, url, outcome=outcome, status_code=status,
                                     fetch_time=dt.datetime.fromtimestamp(t, dt.timezone.utc).replace(tzinfo=None),
                                     content_type="text/html", digest=digest, content_length=len(body),
                                     warc_filename=ptr.filename, warc_offset=ptr.offset, warc_length=ptr.length,
                                     warc_record_id=ptr.record_id, **extra))
    rows.append(_log_row(1, DENIED, outcome="robots_denied", error_class="robots_denied"))
    # a WARC file no committed row names (an orphan): never exported
    Path(warc_dir, "deltacrawl-r000009-p00000-00000.warc.gz").write_bytes(b"junk")
    (spark.createDataFrame(rows, FETCH_LOG).write.format("delta").partitionBy("round")
     .save(common.table_path(conf, "fetch_log")))
    # fetch_output: a page row (never indexed from here) and a robots row of round 5, which update has not
    # logged yet (its WARC file is not even promoted): neither is exported
    robots.append(_output_row(1, "page", "www.example.com", url="http://www.example.com/", status_code=200,
                              warc_filename="deltacrawl-r000001-p00000-00000.warc.gz", warc_offset=0, warc_length=1))
    if unlogged_robots:
        robots.append(_output_row(5, "robots", "www.example.com", url=ROBOTS, status_code=200,
                                  warc_filename="deltacrawl-r000005-p00000-00000.warc.gz", warc_offset=0,
                                  warc_length=1))
    _write_fetch_output(spark, conf, robots)
    _updated(spark, conf, sorted({r["round"] for r in rows}) if updated is None else updated)
    return rows


def _output_row(round_no: int, kind: str, host: str, **kw) -> dict:
    row = {f.name: None for f in FETCH_OUTPUT.fields}
    row.update(round=round_no, partition=0, kind=kind, host=host, **kw)
    return row


def _write_fetch_output(spark, conf: config.Config, rows: list[dict]) -> None:
    (spark.createDataFrame(rows, FETCH_OUTPUT).write.format("delta").partitionBy("round")
     .save(common.table_path(conf, "fetch_output")))


@pytest.fixture(scope="module")
def exported(spark, tmp_path_factory):
    """The crawl exported incrementally to ``inc`` (after round 2, then after round 4, then once more), and
    at once to ``out`` (after round 4: what most tests read)."""
    d = tmp_path_factory.mktemp("export")
    conf = _conf(d / "crawl")
    rows = _write_crawl(spark, conf, updated=[1, 2])
    inc, out = d / "inc", d / "out"
    steps = [export.run(spark, conf, str(inc))]
    stamps = _stamps(inc)
    _updated(spark, conf, [3, 4])
    steps += [export.run(spark, conf, str(inc)), export.run(spark, conf, str(inc))]
    incremental = {"steps": steps, "stamps": stamps, "after": _stamps(inc), "files": _files(inc)}
    counts = export.run(spark, conf, str(out))
    first = _snapshot(out)
    inodes = {p.name: p.stat().st_ino for p in (out / "warc").iterdir()}
    yield {"conf": conf, "rows": rows, "out": out, "counts": counts, "first": first, "inodes": inodes, "dir": d,
           "files": _files(out), "incremental": incremental}


def _index_files(out: Path) -> list[Path]:
    return sorted((out / "index").rglob("*.parquet"))


def _index(out: Path) -> list[dict]:
    """All index rows, with the partition values read from the directory names."""
    result = []
    for f in _index_files(out):
        parts = dict(p.split("=", 1) for p in f.relative_to(out / "index").parts[:-1])
        for r in pq.read_table(f).to_pylist():
            result.append({**r, **parts})
    return result


def _cdxj_files(out: Path) -> list[Path]:
    return sorted((out / "cdxj").glob("*.cdxj"))


def _snapshot(out: Path) -> tuple:
    rows = sorted(json.dumps(r, default=str, sort_keys=True) for r in _index(out))
    warcs = sorted(p.name for p in (out / "warc").iterdir())
    return rows, warcs, [(p.name, p.read_text()) for p in _cdxj_files(out)]


def _stamps(out: Path) -> dict:
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.rglob("*")
            if p.is_file() and p.name != export_files.MANIFEST}


def _files(out: Path) -> dict[str, bytes]:
    """Every file of an export (what it owns in DIR), by path relative to DIR: bytes compared."""
    return {str(p.relative_to(out)): p.read_bytes() for part in export.PARTS for p in
            ([out / part] if (out / part).is_file() else sorted((out / part).rglob("*"))) if p.is_file()}


# -- pure: URL parts -------------------------------------------------------------------------------
@pytest.mark.parametrize("url, expect", [
    ("http://a.b.example.co.uk/x?b=2&a=1",
     dict(url_host_name="a.b.example.co.uk", url_host_tld="uk", url_host_2nd_last_part="co",
          url_host_3rd_last_part="example", url_host_4th_last_part="b", url_host_5th_last_part="a",
          url_host_registry_suffix="co.uk", url_host_registered_domain="example.co.uk",
          url_host_private_suffix="co.uk", url_host_private_domain="example.co.uk",
          url_host_name_reversed="uk.co.example.b.a", url_protocol="http", url_port=None, url_path="/x",
          url_query="b=2&a=1", url_surtkey="uk,co,example,b,a)/x?a=1&b=2")),
    ("https://foo.blogspot.com:8443/",
     dict(url_host_tld="com", url_host_3rd_last_part="foo", url_host_4th_last_part=None,
          url_host_registry_suffix="com", url_host_registered_domain="blogspot.com",
          url_host_private_suffix="blogspot.com", url_host_private_domain="foo.blogspot.com",
          url_protocol="https", url_port=8443, url_path="/", url_query=None)),
    ("http://127.10.0.5:8080/r",
     dict(url_host_name="127.10.0.5", url_host_tld=None, url_host_registered_domain=None,
          url_host_name_reversed=None, url_port=8080, url_surtkey="5,0,10,127:8080)/r")),  # surt reverses IPs too
    ("http://site-a.test/", dict(url_host_tld="test", url_host_registry_suffix=None,
                                 url_host_registered_domain=None)),
])
def test_url_parts(url, expect):
    parts = export.url_parts(url)
    assert set(parts) == set(export.URL_PART_COLUMNS)
    assert {k: parts[k] for k in expect} == expect
    assert parts["url_surtkey"] == surt.surt(url)  # the key cdxj-indexer sorts CDXJ lines by


def test_public_suffix_list_needs_no_network(monkeypatch):
    """The bundled PSL snapshot is used: with every socket connect refused, domains still resolve."""
    def refuse(*a, **kw):
        raise OSError("network disabled by test")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    export._psl.cache_clear()
    try:
        assert export.url_parts("http://a.b.example.co.uk/")["url_host_registered_domain"] == "example.co.uk"
        assert export.url_parts("http://x.github.io/")["url_host_private_domain"] == "x.github.io"
    finally:
        export._psl.cache_clear()


# -- the export -------------------------------------------------------------------------------------
def test_layout_and_counts(exported):
    out, counts = exported["out"], exported["counts"]
    assert sorted(p.name for p in out.iterdir()) == ["cdxj", "export.json", "index", "warc"]
    assert json.loads((out / "export.json").read_text()) == {"crawl_id": "deltacrawl", "rounds": [1, 2, 3, 4]}
    assert [p.name for p in _cdxj_files(out)] == [f"round-00000{n}.cdxj" for n in (1, 2, 3, 4)]
    assert {f.name for f in _index_files(out)} == {f"part-r00000{n}-00000.parquet" for n in (1, 2, 3, 4)}
    assert counts["rounds_exported"] == 4 and counts["full"] == 1
    assert sorted(p.name for p in (out / "warc").iterdir()) == [
        f"deltacrawl-r00000{n}-p00000-00000.warc.gz" for n in (1, 2, 3, 4)]
    parts = sorted(str(f.parent.relative_to(out / "index")) for f in _index_files(out))
    assert sorted(set(parts)) == ["crawl=deltacrawl/subset=crawldiagnostics", "crawl=deltacrawl/subset=robotstxt",
                                  "crawl=deltacrawl/subset=warc"]
    assert not [p for p in (out / "index").rglob("*") if p.is_file() and p.suffix != ".parquet"]
    assert counts["index_rows"] == len(PAGES) + 1 and counts["index_warc"] == 6
    assert counts["index_crawldiagnostics"] == 3 and counts["index_robotstxt"] == 1  # round 5's is not logged yet
    assert counts["warc_files"] == 4 and counts["warc_linked"] == 4
    assert counts["cdxj_lines"] == len(PAGES) + 1


def test_parquet_types_are_common_crawls(exported):
    expect = {"url_port": pa.int32(), "warc_record_offset": pa.int32(), "warc_record_length": pa.int32(),
              "fetch_status": pa.int16(), "simhash": pa.int64()}
    for f in _index_files(exported["out"]):
        schema = pq.read_schema(f)
        assert tuple(schema.names) == export.CC_COLUMNS + export.EXTRA_COLUMNS
        for name in schema.names:
            want = expect.get(name, pa.string())
            if name == "fetch_time":
                assert schema.field(name).type == pa.timestamp("ms", tz="UTC"), schema.field(name).type
            else:
                assert schema.field(name).type == want, (name, schema.field(name).type)
        col = pq.ParquetFile(f).metadata.schema.column(schema.get_field_index("fetch_time"))
        assert col.physical_type == "INT64" and "milliseconds" in str(col.logical_type).lower()


def test_rows_sorted_by_surt_key_in_every_file(exported):
    sizes = []
    for f in _index_files(exported["out"]):
        keys = pq.read_table(f, columns=["url_surtkey"]).column(0).to_pylist()
        assert keys == sorted(keys) and keys
        sizes.append(len(keys))
    assert max(sizes) == 3  # round 1's 2xx


def test_row_values(exported):
    rows = _index(exported["out"])
    by = {}
    for r in sorted(rows, key=lambda r: r["fetch_time"]):
        by.setdefault((r["url"], r["fetch_status"]), r)  # the first capture
    assert DENIED not in {r["url"] for r in rows}
    orig = by[("http://a.b.example.co.uk/x?b=2&a=1", 200)]
    assert orig["subset"] == "warc" and orig["crawl"] == "deltacrawl" and orig["warc_segment"] == "1"
    assert orig["url_host_registered_domain"] == "example.co.uk" and orig["simhash"] == 123
    assert orig["content_digest"] == warc.sha1_digest(PAGES[0][3])[len("sha1:"):]
    assert orig["fetch_time"] == dt.datetime.fromtimestamp(T0, dt.timezone.utc)
    assert orig["duplicate_of"] is None
    dup = by[("http://www.example.com/", 200)]
    assert dup["duplicate_of"] == orig["url"] and dup["url_host_registered_domain"] == "example.com"
    assert by[("http://foo.blogspot.com/p", 200)]["content_truncated"] == "length"
    assert by[("http://foo.blogspot.com/p", 200)]["url_host_private_domain"] == "foo.blogspot.com"
    redirect = by[("http://127.10.0.5:8080/r", 301)]
    assert redirect["subset"] == "crawldiagnostics" and redirect["fetch_redirect"] == "http://127.10.0.5:8080/target"
    assert redirect["url_port"] == 8080
    revisit = by[("http://a.b.example.co.uk/x?b=2&a=1", 304)]
    assert revisit["subset"] == "crawldiagnostics" and revisit["warc_segment"] == "2"
    assert revisit["duplicate_of"] is None and revisit["content_digest"] == orig["content_digest"]
    assert (revisit["content_mime_type"], orig["content_mime_type"]) == ("warc/revisit", "text/html")
    # round 3's 200 with the same payload: an identical-payload revisit, in the warc subset as a 2xx
    identical = next(r for r in rows if r["warc_segment"] == "3")
    assert (identical["url"], identical["fetch_status"], identical["subset"]) == (orig["url"], 200, "warc")
    assert (identical["content_mime_type"], identical["content_digest"]) == ("warc/revisit", orig["content_digest"])
    assert by[("http://www.example.com/new", 200)]["content_charset"] == "utf-8"
    assert by[("http://www.example.com/later", 200)]["duplicate_of"] == "http://foo.blogspot.com/p"  # round 1's
    assert all(r["warc_filename"].startswith("warc/") for r in rows)
    robots = by[(ROBOTS, 200)]
    assert (robots["subset"], robots["warc_segment"], robots["content_mime_type"]) == ("robotstxt", "1", "text/plain")
    assert robots["content_digest"] == warc.sha1_digest(ROBOTS_BODY)[len("sha1:"):] and robots["duplicate_of"] is None
    assert [r["subset"] for r in rows if r["url"].endswith("/robots.txt")] == ["robotstxt"]


def test_every_index_row_reads_back_from_the_exported_warc(exported):
    out = exported["out"]
    rows = _index(out)
    assert len(rows) == len(PAGES) + 1
    for r in rows:
        with open(out / r["warc_filename"], "rb") as f:
            f.seek(r["warc_record_offset"])
            blob = f.read(r["warc_record_length"])
        recs = list(ArchiveIterator(io.BytesIO(blob)))
        assert len(recs) == 1
        rec = recs[0]
        assert rec.rec_headers.get_header("WARC-Target-URI") == r["url"]
        assert rec.rec_type == ("revisit" if r["content_mime_type"] == export.REVISIT_MIME else "response")
        assert int(rec.http_headers.get_statuscode()) == r["fetch_status"]
        if r["fetch_status"] != 304:  # a response, or an identical-payload revisit: the payload's digest
            assert rec.rec_headers.get_header("WARC-Payload-Digest") == "sha1:" + r["content_digest"]


def test_warcio_check_passes_on_exported_files(exported):
    files = sorted(str(p) for p in (exported["out"] / "warc").iterdir())
    proc = subprocess.run([str(BIN / "warcio"), "check", "-v", *files], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "digest pass" in proc.stdout and "fail" not in proc.stdout.lower()


def test_cdxj_points_at_the_same_records(exported):
    out = exported["out"]
    pointers = set()
    for f in _cdxj_files(out):  # one per round, each sorted (pywb merges a collection's index files)
        keys = []
        for line in f.read_text().splitlines():
            key, ts, js = line.split(" ", 2)
            rec = json.loads(js)
            assert (out / rec["filename"]).is_file() and rec["filename"].startswith("warc/")
            assert rec["filename"].startswith(f"warc/deltacrawl-r{f.name[len('round-'):-len('.cdxj')]}-")
            assert key == surt.surt(rec["url"]) and len(ts) == 14
            keys.append((key, ts))
            pointers.add((rec["filename"], int(rec["offset"]), int(rec["length"])))
        assert keys and keys == sorted(keys)
    index = {(r["warc_filename"], r["warc_record_offset"], r["warc_record_length"]) for r in _index(out)}
    assert pointers == index


def test_rerun_replaces_output_cleanly(spark, exported):
    """A second export to the same DIR with ``--full`` (through the CLI, copying this time) gives the same
    output, drops what the first left that the second would not write, and leaves other files in DIR alone."""
    out, d = exported["out"], exported["dir"]
    (out / "index" / "crawl=deltacrawl" / "subset=warc" / "stale.parquet").write_bytes(b"old")
    (out / "warc" / "stale.warc.gz").write_bytes(b"old")
    (out / ".export-tmp").mkdir()  # a crashed run's leftovers
    (out / "README.txt").write_text("mine")
    overlay = d / "export.toml"
    overlay.write_text(f'[storage]\nroot = "{d / "crawl"}"\n[export]\nhard_link = false\nindex_files = 2\n')
    assert cli.main(["--conf", str(overlay), "export", "--out", str(out), "--full"]) == 0
    assert _snapshot(out) == exported["first"]
    files = sorted((out / "index" / "crawl=deltacrawl" / "subset=warc").glob("part-r000001-*.parquet"))
    assert [f.name for f in files] == [export_files.index_file_name(1, k) for k in range(len(files))]
    assert 1 <= len(files) <= 2
    # a round's files of a subset are consecutive url_surtkey ranges
    keys = [k for f in files for k in pq.read_table(f, columns=["url_surtkey"]).column(0).to_pylist()]
    assert keys == sorted(keys) and len(keys) == 3
    assert sorted(p.name for p in out.iterdir()) == ["README.txt", "cdxj", "export.json", "index", "warc"]
    for p in (out / "warc").iterdir():  # copies now, not links to storage.root's files
        assert p.stat().st_ino != exported["inodes"][p.name]
        assert p.read_bytes() == Path(common.warc_root(exported["conf"]), p.name).read_bytes()


def test_export_after_round_2_then_4_is_the_export_after_round_4(exported):
    """Incremental: the second export writes rounds 3 and 4 only (the files of rounds 1 and 2 untouched), a
    third writes nothing, and the result is one export after round 4 byte for byte: index files (rows),
    CDXJ (lines), WARC files (records) and manifest."""
    inc = exported["incremental"]
    first, second, third = inc["steps"]
    assert (first["rounds_exported"], first["full"], first["index_rows"]) == (2, 1, 8)  # 7 pages + robots.txt
    assert (second["rounds_exported"], second["full"], second["index_rows"], second["warc_files"]) == (2, 0, 2, 2)
    assert (third["rounds_exported"], third["index_rows"], third["warc_files"]) == (0, 0, 0)
    assert {p: v for p, v in inc["after"].items() if p in inc["stamps"]} == inc["stamps"]
    assert len(inc["after"]) > len(inc["stamps"])
    assert sorted(inc["files"]) == sorted(exported["files"])
    assert inc["files"] == exported["files"]


def test_missing_warc_file_is_an_error(spark, tmp_path):
    conf = _conf(tmp_path / "crawl")
    os.makedirs(common.warc_root(conf))
    row = _log_row(1, "http://www.example.com/", status_code=200, warc_filename="gone.warc.gz", warc_offset=0,
                   warc_length=10, fetch_time=dt.datetime(2025, 1, 1))
    spark.createDataFrame([row], FETCH_LOG).write.format("delta").save(common.table_path(conf, "fetch_log"))
    _write_fetch_output(spark, conf, [])
    _updated(spark, conf, [1])
    with pytest.raises(FileNotFoundError, match="gone.warc.gz"):
        export.run(spark, conf, str(tmp_path / "out"))


def test_nothing_stored_exports_empty_output(spark, tmp_path):
    conf = _conf(tmp_path / "crawl")
    os.makedirs(common.warc_root(conf))
    row = _log_row(1, DENIED, outcome="robots_denied", error_class="robots_denied")
    spark.createDataFrame([row], FETCH_LOG).write.format("delta").save(common.table_path(conf, "fetch_log"))
    _write_fetch_output(spark, conf, [])
    _updated(spark, conf, [1])
    counts = export.run(spark, conf, str(tmp_path / "out"))
    assert counts["index_rows"] == 0 and counts["warc_files"] == 0 and counts["cdxj_lines"] == 0
    assert list((tmp_path / "out" / "warc").iterdir()) == [] and _index_files(tmp_path / "out") == []
    assert [(p.name, p.read_text()) for p in _cdxj_files(tmp_path / "out")] == [("round-000001.cdxj", "")]


def test_index_and_crawl_db_agree_on_the_original(spark):
    """Where the old two rules disagreed: ``b`` was fetched first, ``a`` seen first. Update decides (``b``,
    the copy fetched first: jobs/originals.py); the index's duplicate_of names the same original as crawldb.dup_of."""
    from jobs import exact_dup_transforms as X
    from jobs import update_transforms as T
    from jobs import hosts_transforms as HT
    from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT
    from tests.test_update import FIRST, NOW, T0, CONF, by_url, frame, no_hosts, old, page, sec

    a, b, c = "http://a.test/seen-first", "http://b.test/fetched-first", "http://c.test/other"
    crawldb = frame(spark, [old(a, first_seen=FIRST), old(b, first_seen=FIRST + sec(86400)), old(c)], CRAWLDB)
    stored = dict(outcome="ok", status_code=200, digest="sha1:SAME", warc_filename="x.warc.gz", warc_offset=0,
                  warc_length=10)
    pages = [page(a, **{**stored, "fetch_time": T0 + sec(60)}), page(b, **{**stored, "fetch_time": T0}),
             page(c, **{**stored, "digest": "sha1:OTHER"})]
    prepared = T.prepare(frame(spark, pages, FETCH_OUTPUT), frame(spark, [], FETCH_LIST), crawldb)
    nxt = HT.host_next(no_hosts(spark), frame(spark, [], FETCH_OUTPUT), park_duration_s=1.0, now=NOW)
    updated = X.mark_duplicates(T.transition(prepared, nxt, CONF.schedule, round_no=1, now=NOW), crawldb,
                                duplicate_interval_s=CONF.schedule.duplicate_interval_s)
    url_of = {fingerprint(u): u for u in (a, b, c)}
    in_crawldb = {u: url_of.get(r["dup_of"]) for u, r in by_url(updated).items()}
    log = T.fetch_log_rows(prepared, updated, round_no=1)
    in_index = {r.url: r.duplicate_of for r in export.index_rows(log, crawl_id="t").collect()}
    assert in_crawldb == in_index == {a: b, b: None, c: None}


# -- deltacrawl lookup: one URL's captures from the export, without Spark ------------------------------
def _lookup(conf, url: str, **kw) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    rc = lookup.run(conf, url, out=out, err=err, **kw)
    return rc, out.getvalue(), err.getvalue()


def _row(exported, url: str, status: int, round_no: int = 1) -> dict:
    return next(r for r in exported["rows"] if r["url"] == url and r["status_code"] == status
                and r["round"] == round_no)


def test_export_records_where_it_wrote(exported):
    assert export_record.latest_dir(common.root(exported["conf"])) == str(exported["out"])


def test_lookup_normalises_and_lists_every_capture(exported):
    """The three captures of the first URL, asked for in a form the crawl DB would not key (case, default port,
    fragment), oldest first, each with the record's date, status, digest and WARC pointer."""
    url = PAGES[0][1]
    rc, out, err = _lookup(exported["conf"], "HTTP://A.B.Example.CO.UK:80/x?b=2&a=1#top")
    assert rc == 0 and err == ""
    lines = out.decode().splitlines()
    assert lines[0] == f"{url} (normalised from HTTP://A.B.Example.CO.UK:80/x?b=2&a=1#top): 3 capture(s) in " \
                       f"{exported['out']}"
    want = []
    for status, subset, rnd in ((200, "warc", 1), (304, "crawldiagnostics", 2), (200, "warc", 3)):
        r = _row(exported, url, status, rnd)
        when = warc.warc_date(r["fetch_time"].replace(tzinfo=dt.timezone.utc).timestamp())
        want.append(f"{when} {status} {r['digest']} warc/{r['warc_filename']} offset={r['warc_offset']} "
                    f"length={r['warc_length']} subset={subset} round={rnd}")
    assert lines[1:] == want


def test_lookup_shows_duplicate_of(exported):
    rc, out, _err = _lookup(exported["conf"], "http://www.example.com/")
    assert rc == 0 and out.decode().splitlines()[1].endswith(f" duplicate_of={PAGES[0][1]}")


def test_lookup_payload_of_a_response_and_of_a_revisit(exported):
    """--payload: a response's stored payload; a revisit (the 304 of round 2, the identical payload of round 3)
    stores none, so the original's it refers to (the crawl DB named it to both)."""
    url, body = PAGES[0][1], PAGES[0][3]
    rc, out, _err = _lookup(exported["conf"], url, with_payload=True)
    first = warc.warc_date(_row(exported, url, 200)["fetch_time"].replace(tzinfo=dt.timezone.utc).timestamp())
    text = out.decode()
    assert rc == 0
    assert text.count(f"--- payload: {len(body)} bytes ---\n{body.decode()}\n--- end of payload ---") == 1
    assert text.count(f"--- payload: {len(body)} bytes, of the record of {first} it refers to ---\n"
                      f"{body.decode()}\n--- end of payload ---") == 2


def test_lookup_of_an_unknown_url_is_one_line_and_exit_1(exported):
    rc, out, err = _lookup(exported["conf"], "http://www.example.com/never")
    assert (rc, out) == (1, b"")
    assert err == f"deltacrawl: lookup: no capture of http://www.example.com/never in {exported['out']}\n"
    rc, _out, err = _lookup(exported["conf"], DENIED)  # fetched, but robots_denied: nothing stored
    assert rc == 1 and err.count("\n") == 1


def test_lookup_errors_are_one_line_and_exit_2(exported, tmp_path, capsys):
    root = ["--set", f'storage.root="{tmp_path}"']
    assert cli.main(root + ["lookup", "http://www.example.com/"]) == 2  # nothing exported under this root
    assert "no export recorded" in capsys.readouterr().err
    assert cli.main(root + ["lookup", "--export", str(exported["out"]), "ftp://www.example.com/"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert cli.main(root + ["lookup", "--export", str(tmp_path), "http://www.example.com/"]) == 2
    assert "is not an export" in capsys.readouterr().err


def test_lookup_runs_without_spark(exported):
    """The CLI verb in a fresh interpreter: right answer, pyspark and py4j never imported, and fast."""
    code = ("import json, sys, time; t = time.perf_counter(); from jobs import cli; "
            f"rc = cli.main(['--set', 'storage.root=\"{exported['conf'].storage.root}\"', 'lookup', "
            "'http://www.example.com/new', '--payload']); "
            "spark = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')); "
            "print(json.dumps([rc, spark, time.perf_counter() - t]), file=sys.stderr)")
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    wall = time.perf_counter() - t
    rc, spark_modules, in_verb = json.loads(proc.stderr.decode().strip().splitlines()[-1])
    assert (rc, spark_modules) == (0, []), proc.stderr.decode()
    assert b"<html>new</html>" in proc.stdout and b" 200 sha1:" in proc.stdout
    note(f"lookup: one URL and its payload in {wall * 1000:.0f} ms from process start "
         f"({in_verb * 1000:.0f} ms after the interpreter started); pyspark never imported")
