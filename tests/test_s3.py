"""deltacrawl with ``storage.root = s3a://<bucket>/crawl`` on a real S3 API server (moto, on loopback).

One crawl, all through the CLI in subprocesses (each its own driver JVM with Hadoop's S3A, as in
production; the suite's in-process Spark session has no S3A JAR and never touches the bucket):
``init``, ``inject``, ``crawl --rounds 2`` SIGKILLed right after round 1's fetch committed (the fault
``fetch.after_write``, as tests/test_crash.py's chain does on a local disk), ``crawl --rounds 2`` again
(the resume), ``status``, ``sql``, ``export`` against the test web. On the bucket, where nothing is
renamed: the killed run left its committed WARC files in staging and promoted none; the resume promoted
exactly those, fetched none of round 1's pages again, and left no staging. Then the corpus is read back
from the bucket by the tests' own client (pyarrow's S3 filesystem, not the crawler's code): warcio over
ranges of the WARC objects that ``fetch_log`` and the exported Parquet index point to. Only committed
attempts' WARC files are in the bucket (every object named by a committed ``fetch_output`` row and every
such name an object), and the test web's own log shows no politeness violation across both runs.

The first S3 start on a machine fetches hadoop-aws 3.4.1 and the AWS SDK v2 bundle (558 MB) into
Ivy's cache; the test notes how long that start took and how long the cached ones did.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from warcio.archiveiterator import ArchiveIterator

from jobs import faults, object_store, spark_log, warc_staging
from tests.cli_jvm import SPARK_LINE
from tests.summary import note
from tests.test_crash import run_cli, seed_urls
from tests.testweb import TestWeb

pytestmark = [pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(1800)]

DELAY = 0.5
ROUNDS = 2
PREFIX = "crawl"


def _overlay(path: Path, server, bucket: str, web: TestWeb) -> Path:
    path.write_text(
        server.storage_toml(bucket, PREFIX)
        + f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
        f"[politeness]\nhost_delay_s = {DELAY}\n"
        "[fetch]\ntask_budget_s = 15.0\ntotal_timeout_s = 5.0\n"
        "[generate]\nmax_urls_per_host = 4\nfetch_partitions = 2\n"
        '[spark]\nmaster = "local[2,4]"\ndriver_memory = "1g"\nshuffle_partitions = 2\n' + SPARK_LINE)
    return path


@pytest.fixture(scope="module")
def crawled(s3_server, tmp_path_factory):
    """(server, bucket, web, {verb: (status, output, seconds)}, export dir, request log, violations,
    (the bucket's WARC objects, the request log) when the killed run had died)."""
    d = tmp_path_factory.mktemp("s3crawl")
    bucket = s3_server.bucket("test-s3-crawl")
    with TestWeb(d / "web", n_hosts=6, seed=7, kinds=["site"]) as web:
        overlay = _overlay(d / "s3.toml", s3_server, bucket, web)
        (d / "seeds.txt").write_text("\n".join(seed_urls(web)) + "\n")
        missing = spark_log.missing_packages(object_store.HADOOP_AWS, [])
        export_dir = d / "export"
        sql = ("SELECT 'log' AS t, url, warc_filename, warc_offset, warc_length FROM fetch_log "
               "WHERE warc_filename IS NOT NULL UNION ALL SELECT DISTINCT 'committed' AS t, NULL, warc_filename, "
               "NULL, NULL FROM fetch_output WHERE warc_filename IS NOT NULL")
        runs, crawl = {}, ["crawl", "--rounds", str(ROUNDS)]
        for verb, args, fault, want in [
                ("init", ["init"], None, 0), ("inject", ["inject", str(d / "seeds.txt")], None, 0),
                ("killed", crawl, "fetch.after_write", -9), ("crawl", crawl, None, 0), ("status", ["status"], None, 0),
                ("sql", ["sql", sql, "--format", "json"], None, 0),
                ("export", ["export", "--out", str(export_dir)], None, 0)]:
            if verb == "crawl":  # what the killed run left: the bucket's WARC objects, its requests
                at_kill = (s3_server.objects(f"{bucket}/{PREFIX}/warc"), web.log())
            t0 = time.monotonic()
            env = {**s3_server.env, **({faults.ENV: fault} if fault else {})}
            rc = run_cli(["--conf", str(overlay), *args], env_extra=env, log=d / f"{verb}.log")
            runs[verb] = (rc, (d / f"{verb}.log").read_text(errors="replace"), time.monotonic() - t0)
            assert rc == want, f"deltacrawl {verb} on s3a:// exited {rc}, not {want}:\n{runs[verb][1][-4000:]}"
        first = (f"first start fetched {', '.join(missing)} (init: {runs['init'][2]:.0f} s)" if missing
                 else "JARs cached")
        note(f"s3: {first}; cached starts: " + ", ".join(f"{v} {runs[v][2]:.0f} s" for v in runs if v != "init")
             + (f", init {runs['init'][2]:.0f} s" if not missing else ""))
        from crawl_udfs import config
        per_ip = config.load([overlay]).politeness.max_in_flight_per_ip
        yield (s3_server, bucket, web, runs, export_dir, web.log(),
               web.violations(host_delay_s=DELAY, max_in_flight_per_addr=per_ip), at_kill)


def _sql_rows(runs) -> list[dict]:
    return [json.loads(line) for line in runs["sql"][1].splitlines() if line.startswith("{")]


def _record(fs, path: str, offset: int, length: int):
    with fs.open_input_file(path) as f:
        data = f.read_at(length, offset)
    return next(iter(ArchiveIterator(io.BytesIO(data))))


def test_tables_and_warc_files_are_in_the_bucket(crawled):
    server, bucket, web, runs, export_dir, log, v, at_kill = crawled
    objects = server.objects(f"{bucket}/{PREFIX}")
    for table in ("crawldb", "hosts", "fetch_list", "fetch_output", "fetch_log", "links", "rounds"):
        assert any(k.startswith(f"tables/{table}/_delta_log/") for k in objects), f"no Delta log of {table}"
    assert any(k.startswith("lease/") for k in objects) and any(k.startswith("ledger/") for k in objects)
    assert f"{ROUNDS} round(s) completed" in runs["crawl"][1]
    assert "writer: none" in runs["status"][1], runs["status"][1][-2000:]


def test_only_committed_warc_files_are_kept_and_every_pointer_reads_back(crawled):
    server, bucket, web, runs, export_dir, log, v, at_kill = crawled
    rows = _sql_rows(runs)
    committed = {r["warc_filename"] for r in rows if r["t"] == "committed"}
    pointers = [r for r in rows if r["t"] == "log"]
    assert len(pointers) > 20, runs["sql"][1][-2000:]
    warc = {k[len("warc/"):]: size for k, size in server.objects(f"{bucket}/{PREFIX}").items()
            if k.startswith("warc/")}
    assert not [k for k in warc if "/" in k], f"staging left in the bucket: {sorted(warc)[:5]}"
    assert set(warc) == committed, (sorted(set(warc) ^ committed)[:5])
    assert not server.objects(f"{bucket}/{PREFIX}/_progress"), "progress snapshots left behind"
    fs = server.filesystem()
    for r in pointers:
        rec = _record(fs, f"{bucket}/{PREFIX}/warc/{r['warc_filename']}", r["warc_offset"], r["warc_length"])
        assert rec.rec_headers.get_header("WARC-Target-URI") == r["url"]
    note(f"s3: {len(pointers)} fetch_log pointers read back from {len(warc)} WARC objects "
         f"({sum(warc.values()):,} bytes)")


def test_the_resume_promotes_what_the_killed_run_committed_without_refetching(crawled):
    """Killed after round 1's fetch committed: its WARC files wait in the bucket's staging and none is
    promoted; the resume promotes exactly round 1's committed files and requests none of its pages again."""
    server, bucket, web, runs, export_dir, log, v, at_kill = crawled
    objects, killed_log = at_kill
    committed = {r["warc_filename"] for r in _sql_rows(runs)
                 if r["t"] == "committed" and "-r000001-" in r["warc_filename"]}
    staging = f"{warc_staging.STAGING}/r000001/"
    staged = {k.rsplit("/", 1)[1] for k in objects if k.startswith(staging) and k.endswith(".warc.gz")}
    assert committed and staged >= committed, (sorted(committed)[:3], sorted(staged)[:3])
    assert not committed & set(objects), "a file was promoted before the kill"
    fetched = {(x["host"], x["path"]) for x in killed_log if x["path"] != "/robots.txt"}
    again = [(x["host"], x["path"]) for x in log[len(killed_log):] if (x["host"], x["path"]) in fetched]
    assert fetched and again == [], f"a committed fetch was fetched again: {again[:5]}"
    round1 = {k for k in server.objects(f"{bucket}/{PREFIX}/warc") if "-r000001-" in k}
    assert round1 == committed, f"kept {sorted(round1 ^ committed)[:5]} (only committed files are)"
    note(f"s3 kill after fetch commit: {len(committed)} committed WARC files promoted, none refetched")


def test_the_export_index_points_into_the_bucket_copies(crawled):
    server, bucket, web, runs, export_dir, log, v, at_kill = crawled
    index = pq.read_table(export_dir / "index").to_pylist()
    assert index and {str(r["warc_segment"]) for r in index} <= {str(n) for n in range(1, ROUNDS + 1)}
    fs = server.filesystem()
    for r in index:
        name = r["warc_filename"].removeprefix("warc/")
        from_bucket = _record(fs, f"{bucket}/{PREFIX}/warc/{name}", r["warc_record_offset"], r["warc_record_length"])
        assert from_bucket.rec_headers.get_header("WARC-Target-URI") == r["url"]
        assert (export_dir / "warc" / name).stat().st_size == fs.get_file_info(f"{bucket}/{PREFIX}/warc/{name}").size
    record = json.loads(fs.open_input_stream(f"{bucket}/{PREFIX}/exports/latest.json").read())
    assert record["dir"] == str(export_dir)


def test_politeness_holds_on_the_bucket(crawled):
    server, bucket, web, runs, export_dir, log, v, at_kill = crawled
    note("s3 crawl (server-side): " + v.summary().replace("\n", "; "))
    assert len(log) > 20
    assert v.clean, v.summary()


def test_records_put_if_absent_is_the_servers_conditional_write(s3_server, tmp_path):
    """The lease's and ledger's records on S3 (jobs/records.py): a second put of a name is refused by the
    server itself (a PUT answered 412 in the server's log, not an existence check that a driver in another
    JVM could pass at the same moment), so of two drivers taking the lease at once only one wins."""
    bucket = s3_server.bucket("records")
    overlay = tmp_path / "probe.toml"
    overlay.write_text(s3_server.storage_toml(bucket, PREFIX)
                       + '[spark]\nmaster = "local[1]"\ndriver_memory = "1g"\n' + SPARK_LINE)
    proc = subprocess.run([sys.executable, "-m", "tests.s3_records_probe", str(overlay)], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **s3_server.env},
                          cwd=Path(__file__).resolve().parents[1])
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-4000:]
    got = json.loads(lines[-1])
    assert got == {"puts": [True, False, False], "text": '{"writer": "a"}'}, got
    key = f"/{bucket}/{PREFIX}/probe/00000000000000000001.json"
    log = re.sub(r"\x1b\[[0-9;]*m", "", s3_server.log.read_text(errors="replace"))  # werkzeug colours errors
    refused = [ln for ln in log.splitlines() if f'"PUT {key} ' in ln and '" 412 ' in ln]
    assert len(refused) == 2, f"the server refused {len(refused)} of the 2 later puts of {key}"
