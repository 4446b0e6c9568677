"""Reproducible benchmark of the round on Spark + Delta (issue 3).

Two measurements, each a ratio taken inside one run (the machine is shared):

(1) **Scale**: the round's time split (generate / fetch / update) for crawl DBs
    of several sizes. Each size gets a fresh ``storage.root``: ``init``, then S
    synthetic crawl-DB rows (``fetched``, due 1–30 days from now, on S/50 hosts
    named ``h<i>.synthetic.invalid`` that are never contacted) plus their
    ``hosts`` rows, then the same test-web seeds injected, then two rounds run
    in-process (``jobs.rounds.crawl``) against the local test web, after one
    unreported warm-up at 2,000 rows (the first jobs of a JVM are slower). Round 1
    fetches the seeds, round 2 what they link to. Every size fetches the same
    URLs, so the verb times should stay flat as S grows if generate and update
    grow with the URLs they touch rather than with the crawl DB.

(2) **Duty cycle**: a multi-round crawl of the test web's ordinary sites with
    the default politeness (1 s per host) and ``fetch.task_budget_s = W``, every
    page of those sites injected first (a real crawl's frontier holds far more
    than a round can fetch; a crawl grown from home pages alone spends its
    first rounds with almost nothing due). Reported: time inside ``fetch`` over
    the wall time of the rounds (the ledger's per-verb seconds), and over the
    wall time of the whole ``crawl()`` call.

Nothing leaves loopback: the test web (tests/testweb) listens on 127.10.x.y,
and the synthetic hosts are never generated (they are not due).

    .venv/bin/python -m bench.round_bench                       # sizes 10k,100k,1M; duty W=60 s, 4 rounds
    .venv/bin/python -m bench.round_bench --sizes 10000 --duty-rounds 0     # a quick look
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.testweb import TestWeb  # noqa: E402


def _overlay(path: Path, root: Path, web, extra: str) -> Path:
    path.write_text(
        f'[storage]\nroot = "{root}"\n'
        f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
        "[spark]\nmaster = \"local[2]\"\nshuffle_partitions = 4\n" + extra)
    return path


def synthetic_rows(spark, conf, n_rows: int, *, now: dt.datetime) -> None:
    """Append ``n_rows`` not-due crawl-DB rows on n_rows/50 synthetic hosts, and their hosts rows."""
    from pyspark.sql import functions as F

    from jobs import common
    from schemas.tables import TABLES

    n_hosts = max(1, n_rows // 50)
    ids = spark.range(n_rows, numPartitions=max(1, n_rows // 250_000))
    host = F.concat(F.lit("h"), (F.col("id") % n_hosts).cast("string"), F.lit(".synthetic.invalid"))
    url = F.concat(F.lit("http://"), host, F.lit("/articles/"), F.col("id").cast("string"), F.lit(".html"))
    rnd = F.rand(seed=7)
    fetched_at = F.lit(now - dt.timedelta(days=3)).cast("timestamp")
    df = (ids.withColumn("host", host).withColumn("url", url)
          .withColumn("url_fp", F.xxhash64("url"))
          .withColumn("status", F.lit("fetched"))
          .withColumn("next_fetch_time", (F.lit(now).cast("timestamp")
                                          + F.make_interval(days=(F.lit(1) + (rnd * 29).cast("int")))))
          .withColumn("score", rnd).withColumn("depth", (F.col("id") % 7).cast("int"))
          .withColumn("redirect_hops", F.lit(0)).withColumn("retries", F.lit(0))
          .withColumn("fetch_count", F.lit(1)).withColumn("change_count", F.lit(0))
          .withColumn("unchanged_count", F.lit(0)).withColumn("fetch_interval_s", F.lit(2592000.0))
          .withColumn("first_seen", fetched_at).withColumn("last_fetch_time", fetched_at)
          .withColumn("http_status", F.lit(200)).withColumn("simhash", F.xxhash64("url", F.lit("s")))
          .withColumn("discovered_round", F.lit(0).cast("long")).withColumn("updated_round", F.lit(0).cast("long"))
          .withColumn("digest", F.concat(F.lit("sha1:"), F.upper(F.substring(F.sha1(F.col("url")), 1, 32))))
          .withColumn("content_type", F.lit("text/html"))
          .withColumn("warc_record_id", F.concat(F.lit("<urn:uuid:"), F.expr("uuid()"), F.lit(">")))
          .withColumn("warc_fetch_time", fetched_at))
    (common.conform(df, TABLES["crawldb"]).write.format("delta").mode("append")
     .save(common.table_path(conf, "crawldb")))
    hosts = (spark.range(n_hosts, numPartitions=1)
             .withColumn("host", F.concat(F.lit("h"), F.col("id").cast("string"), F.lit(".synthetic.invalid")))
             .withColumn("ip", F.lit(None).cast("string"))
             .withColumn("next_allowed_at", fetched_at).withColumn("consecutive_failures", F.lit(0))
             .withColumn("robots_status", F.lit(200)).withColumn("pages_fetched", F.lit(50).cast("long"))
             .withColumn("bytes_fetched", F.lit(500_000).cast("long")).withColumn("requests", F.lit(51).cast("long"))
             .withColumn("duplicate_pages", F.lit(0).cast("long"))
             .withColumn("new_content_pages", F.lit(50).cast("long"))
             .withColumn("updated_round", F.lit(0).cast("long")))
    (common.conform(hosts, TABLES["hosts"]).write.format("delta").mode("append")
     .save(common.table_path(conf, "hosts")))


def _rounds(spark, conf, n: int) -> list[dict]:
    from jobs import ledger
    rows = ledger.current(spark, conf).rows  # the ledger's records (in-process rounds do not mirror `rounds`)
    return [rows[k] for k in sorted(rows)][-n:]


def scale(spark, web, work: Path, sizes: list[int], seeds: list[str]) -> list[dict]:
    from crawl_udfs import config
    from jobs import common, inject, rounds

    out = []
    for size in sizes:
        root = work / f"scale-{size}"
        shutil.rmtree(root, ignore_errors=True)
        conf = config.load([_overlay(work / f"scale-{size}.toml", root, web,
                                     "[politeness]\nhost_delay_s = 0.25\n"
                                     "[fetch]\ntask_budget_s = 20.0\ntotal_timeout_s = 6.0\n"
                                     "[generate]\nmax_urls_per_host = 10\nfetch_partitions = 2\n")])
        t = time.perf_counter()
        common.ensure_tables(spark, conf)
        synthetic_rows(spark, conf, size - len(seeds), now=common.now_utc())
        inject.run(spark, conf, seeds)
        setup_s = time.perf_counter() - t
        print(f"[scale {size}] set up in {setup_s:.1f}s; crawling 2 rounds", file=sys.stderr, flush=True)
        rounds.crawl(spark, conf, 2, out=sys.stderr)
        for r in _rounds(spark, conf, 2):
            s, c = r["seconds"], r["counts"]
            out.append({"crawldb_rows": size, "round": r["round"], "generated": c.get("generated", 0),
                        "new_urls": c.get("new_urls", 0), "frontier": c.get("frontier_size", 0),
                        **{k: s.get(k) for k in ("generate", "fetch", "update")}, "total": s.get("round")})
        shutil.rmtree(root, ignore_errors=True)
    return out


def duty(spark, web, work: Path, n_rounds: int, window_s: float, recrawl_s: float | None = None) -> dict:
    from crawl_udfs import config
    from jobs import common, inject, rounds

    root = work / "duty"
    shutil.rmtree(root, ignore_errors=True)
    conf = config.load([_overlay(work / "duty.toml", root, web,
                                 f"[fetch]\ntask_budget_s = {window_s}\ntotal_timeout_s = 10.0\n"
                                 "[generate]\nfetch_partitions = 2\n"
                                 + (f'[schedule]\npolicy = "fixed"\ndefault_interval_s = {recrawl_s}\n' if recrawl_s else ""))])
    common.ensure_tables(spark, conf)
    urls = [h.url(path) for h in web.plan.by_kind("site") for path in h.pages]
    (work / "duty-seeds.txt").write_text("\n".join(urls) + "\n")
    inject.run(spark, conf, [str(work / "duty-seeds.txt")])
    t = time.perf_counter()
    rounds.crawl(spark, conf, n_rounds, out=sys.stderr)
    wall = time.perf_counter() - t
    rows = _rounds(spark, conf, n_rounds)
    per = [{"round": r["round"], **{k: r["seconds"].get(k) for k in ("generate", "fetch", "update")},
            "total": r["seconds"].get("round"),
            "pages": sum(v for k, v in r["counts"].items()
                         if k.startswith("fetched_") and k not in ("fetched_not_attempted", "fetched_deferred"))}
           for r in rows]
    fetch_s = sum(p["fetch"] or 0 for p in per)
    rounds_s = sum(p["total"] or 0 for p in per)
    return {"window_s": window_s, "recrawl_s": recrawl_s, "injected": len(urls), "rounds": per, "fetch_s": fetch_s, "rounds_s": rounds_s, "wall_s": wall,
            "duty_rounds": fetch_s / rounds_s if rounds_s else 0.0, "duty_wall": fetch_s / wall if wall else 0.0}


def report(scale_rows: list[dict], duty_res: dict | None, header: str) -> str:
    lines = [header, ""]
    if scale_rows:
        lines.append("(1) round time split by crawl DB size (seconds; same test-web URLs fetched at every size)")
        lines.append(f"{'crawldb rows':>12} {'round':>5} {'generated':>9} {'new urls':>8} {'generate':>8} "
                     f"{'fetch':>7} {'update':>7} {'round':>7} {'fetch share':>11}")
        for r in scale_rows:
            share = (r["fetch"] or 0) / r["total"] if r["total"] else 0
            lines.append(f"{r['crawldb_rows']:>12,} {r['round']:>5} {r['generated']:>9} {r['new_urls']:>8} "
                         f"{r['generate']:>8.1f} {r['fetch']:>7.1f} {r['update']:>7.1f} {r['total']:>7.1f} "
                         f"{share:>11.2f}")
        base = [r for r in scale_rows if r["crawldb_rows"] == scale_rows[0]["crawldb_rows"]]
        for r in scale_rows:
            b = next(x for x in base if x["round"] == r["round"])
            if r is not b:
                lines.append(f"  {r['crawldb_rows']:,} vs {b['crawldb_rows']:,} rows, round {r['round']}: "
                             f"generate x{r['generate'] / b['generate']:.2f}, update x{r['update'] / b['update']:.2f}"
                             f" (rows x{r['crawldb_rows'] / b['crawldb_rows']:.0f})")
    if duty_res:
        d = duty_res
        lines += ["", f"(2) duty cycle: {len(d['rounds'])} rounds, fetch.task_budget_s={d['window_s']}, "
                  f"politeness defaults (host_delay_s=1.0), {d['injected']} site pages injected"
                  + (f", re-crawl interval schedule.default_interval_s={d['recrawl_s']}" if d.get("recrawl_s") else ""),
                  f"{'round':>5} {'generate':>8} {'fetch':>7} {'update':>7} {'round':>7} {'pages':>6}"]
        for p in d["rounds"]:
            lines.append(f"{p['round']:>5} {p['generate'] or 0:>8.1f} {p['fetch'] or 0:>7.1f} "
                         f"{p['update'] or 0:>7.1f} {p['total'] or 0:>7.1f} {p['pages']:>6}")
        lines.append(f"  fetch / rounds' wall = {d['fetch_s']:.1f} / {d['rounds_s']:.1f} = {d['duty_rounds']:.3f}"
                     "  (pipelined rounds overlap: each round's wall includes the next one's fetch)")
        lines.append(f"  fetch / whole crawl() call = {d['fetch_s']:.1f} / {d['wall_s']:.1f} = {d['duty_wall']:.3f}"
                     f"  (goal >= 0.8: {'met' if d['duty_wall'] >= 0.8 else 'MISSED'}; fetches never overlap, so this"
                     " is the share of wall time with a fetch running)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000,1000000", help="crawl DB sizes, comma-separated")
    p.add_argument("--duty-rounds", type=int, default=4, help="rounds of the duty-cycle crawl (0: skip)")
    p.add_argument("--window", type=float, default=60.0, help="fetch.task_budget_s of the duty-cycle crawl")
    p.add_argument("--hosts", type=int, default=40, help="test-web hosts (ordinary sites)")
    p.add_argument("--recrawl-interval", type=float, default=None,
                   help="schedule.default_interval_s of the duty-cycle crawl (seconds): with a window longer "
                        "than the largest site's pages at 1 s each, a short one keeps later rounds' windows full")
    p.add_argument("--json", help="also write the raw figures here")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    from crawl_udfs import config
    from jobs.session import build_session

    work = Path(tempfile.mkdtemp(prefix="round-bench-"))
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    try:
        with TestWeb(work / "web", n_hosts=args.hosts, seed=11, kinds=["site"]) as web:
            seeds = web.seeds()
            spark = build_session(config.load([_overlay(work / "s.toml", work / "none", web, "")]))
            if sizes:  # warm-up (JVM JIT, Python workers, Delta's first snapshots), not reported
                scale(spark, web, work, [2000], seeds)
            scale_rows = scale(spark, web, work, sizes, seeds) if sizes else []
            duty_res = duty(spark, web, work, args.duty_rounds, args.window, args.recrawl_interval) if args.duty_rounds else None
            v = web.violations(host_delay_s=0.25, max_in_flight_per_addr=config.load().politeness.max_in_flight_per_ip)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = (f"round benchmark ({os.cpu_count()} CPUs; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; "
              f"total {time.perf_counter() - t0:.0f}s; load average {load0[0]:.1f} -> {os.getloadavg()[0]:.1f}; "
              f"{args.hosts} test-web hosts, ordinary sites; local[2])")
    text = report(scale_rows, duty_res, header)
    text += ("\n\nserver-side politeness over the whole run (0.25 s floor for the scale runs): "
             + v.summary().replace("\n", "; "))
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"scale": scale_rows, "duty": duty_res}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
