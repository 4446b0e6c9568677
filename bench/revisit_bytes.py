"""WARC bytes of a re-crawl round of unchanged pages, with and without identical-payload revisits (issue 16).

One run crawls the local test web twice, each time in a fresh ``storage.root``
on a fresh copy of the web (same seed): round 1, then round 2 re-fetching every
page fetched in round 1 (``schedule.default_interval_s`` = 1 s). Before round 2
the crawl DB's validators (``etag``, ``last_modified``) are cleared, so round 2's
requests are unconditional: the test web answers 200 with the same body where it
would have answered 304 — what a server without validators does, the case
identical-payload revisits are for. The first crawl keeps
``warc.revisit_identical_payload = true`` (the default), the second sets it
false. Reported per crawl: round 2's WARC files (bytes on disk, gzip members
included), its revisit and response records (warcio), and round 2's 200s.

Nothing leaves loopback (tests/testweb listens on 127.10.x.y).

    .venv/bin/python -m bench.revisit_bytes               # ~3 min
    .venv/bin/python -m bench.revisit_bytes --hosts 12
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.testweb import TestWeb  # noqa: E402


def crawl(work: Path, *, hosts: int, identical: bool) -> dict:
    """Round 1, validators cleared, round 2; returns round 2's WARC bytes and records."""
    from warcio.archiveiterator import ArchiveIterator

    from jobs import cli, common
    from crawl_udfs import config

    work.mkdir(parents=True)
    with TestWeb(work / "web", n_hosts=hosts, seed=16, kinds=["site"]) as web:
        overlay = work / "crawl.toml"
        overlay.write_text(
            f'[storage]\nroot = "{work / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
            "[politeness]\nhost_delay_s = 0.2\n[fetch]\ntask_budget_s = 30.0\n"
            '[generate]\nmax_urls_per_host = 20\n[schedule]\npolicy = "fixed"\ndefault_interval_s = 1.0\n'
            f"[warc]\nrevisit_identical_payload = {'true' if identical else 'false'}\n")
        seeds = work / "seeds.txt"
        seeds.write_text("\n".join(web.seeds()) + "\n")
        base = ["--conf", str(overlay)]
        for argv in (["init"], ["inject", str(seeds)], ["crawl", "--rounds", "1"]):
            if cli.main(base + argv) != 0:
                raise SystemExit(f"deltacrawl {' '.join(argv)} failed")
        conf = config.load([overlay])
        _clear_validators(conf)
        if cli.main(base + ["crawl", "--rounds", "1"]) != 0:
            raise SystemExit("deltacrawl crawl (round 2) failed")
    files = sorted(Path(common.warc_root(conf)).glob("*-r000002-*.warc.gz"))
    kinds: collections.Counter = collections.Counter()
    for path in files:
        with open(path, "rb") as f:
            for rec in ArchiveIterator(f):
                if rec.rec_type in ("response", "revisit"):
                    status = rec.http_headers.get_statuscode() if rec.http_headers else "-"
                    kinds[f"{rec.rec_type} {status}"] += 1
    return {"identical": identical, "bytes": sum(p.stat().st_size for p in files), "files": len(files),
            "records": dict(sorted(kinds.items()))}


def _clear_validators(conf) -> None:
    """Every stored page's ETag and Last-Modified forgotten: round 2's GETs are unconditional."""
    from delta.tables import DeltaTable
    from pyspark.sql import SparkSession

    from jobs import common

    spark = SparkSession.getActiveSession()
    DeltaTable.forPath(spark, common.table_path(conf, "crawldb")).update(
        set={"etag": "CAST(NULL AS STRING)", "last_modified": "CAST(NULL AS STRING)"})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="revisit-bytes-"))
    try:
        results = [crawl(work / name, hosts=args.hosts, identical=on)
                   for name, on in (("revisits", True), ("full-copies", False))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| warc.revisit_identical_payload | round 2 WARC bytes | files | response/revisit records |")
    print("|---|---|---|---|")
    for r in results:
        records = ", ".join(f"{k}: {n}" for k, n in r["records"].items())
        print(f"| {str(r['identical']).lower()} | {r['bytes']:,} | {r['files']} | {records} |")
    on, off = results
    if off["bytes"]:
        print(f"\nsaved: {off['bytes'] - on['bytes']:,} bytes of {off['bytes']:,} "
              f"({(off['bytes'] - on['bytes']) / off['bytes']:.1%}) of round 2's WARC")
    return 0


if __name__ == "__main__":
    sys.exit(main())
