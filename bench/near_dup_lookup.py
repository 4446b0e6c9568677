"""The near-duplicate lookup of update at 10k, 100k and 1M index rows, for one round (issue 14).

What is timed: the project's :func:`jobs.dedup_transforms.near_duplicate_of` (the function
``update`` calls, imported, not copied) on one round of candidates against a synthetic
``near_dup_index`` table, its result written once to Parquet as update's ``keep`` does
(``jobs.update._staged``), adaptive execution off as in update (``common.STATIC_PLANS``).
``--reps`` repetitions per size on a warm JVM; the median is reported (and min / max).

"Index rows" are rows of the ``near_dup_index`` table, as in the issue: one per SimHash block
key of an indexed page, so an index of R rows holds R / (k + 1) pages (k = 3: 1M rows, 250k
pages). ``--pages`` reads the sizes as pages instead.

The synthetic index (one fresh ``storage.root`` per size, the table created by
``common.ensure_tables`` as ``deltacrawl init`` does, then appended in ten rounds as update
appends it):

- 90 % of the pages are distinct: random SimHash, random MinHash (128 values), 300-1000 words.
- 10 % belong to one of 20 template families (one host each): SimHash = the family's base with
  0-4 random bits flipped, so a family's pages share most block keys (a bucket of that family's
  size); MinHash = the family's base with each of 16 chunks of 8 values its own with probability
  0.35 (Jaccard ~0.65 with the base, ~0.42 between members: distinct pages of one template, below
  ``dedup.jaccard_threshold``, ~1 % of them within it).
  Family sizes are log-uniform over the 20 families: the largest holds ~23 % of the family pages
  (~5,800 pages at 1M rows), the smallest ~1.6 %. So the buckets grow with the crawl, as a
  site's template does.

The round (the same 2,000 candidates at every size, first fetched after every index row):
100 near-copies of index pages 0..2,499 (present at every size: SimHash 1-2 bits away, 2 of the
128 MinHash values changed, same length: near-duplicates to find), 200 new members of the
families (10 per family: they hit the big buckets and are no copy), 1,700 distinct pages.

``--update`` also times a whole update of a ``--round``-URL round with ``dedup.near_duplicates``
on, in the same process, against the largest index: the crawl DB, fetch list and fetch of
``bench/verb_cost.py`` (synthetic, no request leaves the process) with MinHash and word counts
added to the fetched pages; the lookup's share of update = lookup median / update seconds.

    .venv/bin/python -m bench.near_dup_lookup                          # 10k, 100k, 1M rows; + update (~8 min)
    .venv/bin/python -m bench.near_dup_lookup --sizes 10000 --reps 1 --no-update   # a quick look
    .venv/bin/python -m bench.near_dup_lookup --set dedup.max_bucket_rows=0   # a setting (repeatable)
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

T0 = dt.datetime(2026, 1, 1)
FAMILIES = 20
FAMILY_SHARE = 0.10
ROUND = 2000
COPIES, MEMBERS = 100, 200   # of the round: near-copies of index pages, new family members
COPY_SOURCES = 2500          # the copies' originals are index pages 0..2,499 (present at every size)
INDEX_ROUNDS = 10            # the index's rows come from rounds -9..0: every round before the measured round 1
LOOKUP_ROUND = 1


def _h(*cols):
    from pyspark.sql import functions as F
    return F.xxhash64(*[c if not isinstance(c, (str, int)) else F.lit(c) for c in cols])


def _flips(seed: str, n_bits: str):
    """A long with ``n_bits`` (0..4) pseudo-random bits set (two may coincide); SQL expressions of a row."""
    from pyspark.sql import functions as F
    bits = " | ".join(f"IF(({n_bits}) > {j}, shiftleft(CAST(1 AS BIGINT), CAST(pmod(xxhash64({seed}, 'b{j}'), 64) AS INT)), "
                      f"CAST(0 AS BIGINT))" for j in range(4))
    return F.expr(bits)


def _minhash(own, base, own_share_pct, perm: int):
    """``perm`` 32-bit values as bytes, in 16 chunks of perm / 16 values (SHA-256 bytes: cheap to make):
    chunk j is ``own``'s with probability own_share_pct %, else ``base``'s."""
    from pyspark.sql import functions as F
    n = perm * 4 // 16

    def chunk(who, j):
        return F.substring(F.unhex(F.sha2(F.concat_ws("/", who.cast("string"), F.lit(j)), 256)), 1, n)
    return F.concat(*[F.when(F.pmod(_h(own, j, "m"), F.lit(100)) < own_share_pct, chunk(own, j))
                      .otherwise(chunk(base, j)) for j in range(16)])


def _page_columns(df, perm: int):
    """``df`` (id, family: -1 or 0..19) with url_fp, host, simhash, words, minhash of that page."""
    from pyspark.sql import functions as F
    fam = F.col("family")
    in_fam = fam >= 0
    base = _h(F.lit("family"), fam)
    simhash = F.when(in_fam, base.bitwiseXOR(_flips("id", "pmod(xxhash64(id, 'd'), 5)")))
    simhash = simhash.otherwise(_h(F.col("id"), "s"))
    return (df.withColumn("url_fp", _h(F.lit("page"), F.col("id")))
            .withColumn("host", F.when(in_fam, F.concat(F.lit("fam"), fam.cast("string"), F.lit(".test")))
                        .otherwise(F.concat(F.lit("h"), F.pmod(F.col("id"), F.lit(5000)).cast("string"), F.lit(".test"))))
            .withColumn("simhash", simhash)
            .withColumn("words", (F.lit(300) + F.pmod(_h(F.col("id"), "w"), F.lit(700))).cast("int"))
            .withColumn("minhash", F.when(in_fam, _minhash(F.col("id"), base, F.lit(35), perm))
                        .otherwise(_minhash(F.col("id"), F.col("id"), F.lit(100), perm))))


def _family():
    """Family of a page (-1: none): FAMILY_SHARE of the pages, log-uniform over FAMILIES families."""
    from pyspark.sql import functions as F
    u = F.pmod(_h(F.col("id"), "u"), F.lit(1_000_000)) / 1e6
    u2 = F.pmod(_h(F.col("id"), "u2"), F.lit(1_000_000)) / 1e6
    return F.when(u < FAMILY_SHARE, (F.floor(F.pow(F.lit(FAMILIES + 1.0), u2)) - 1).cast("int")).otherwise(F.lit(-1))


def build_index(spark, conf, pages: int, k: int, perm: int) -> None:
    """``pages`` synthetic pages appended to ``near_dup_index`` in INDEX_ROUNDS rounds, one row per block key."""
    from pyspark.sql import functions as F

    from jobs import common
    from jobs import dedup_transforms as D
    from schemas.tables import TABLES

    path = common.table_path(conf, "near_dup_index")
    per = -(-pages // INDEX_ROUNDS)
    for r in range(INDEX_ROUNDS):
        lo, hi = r * per, min(pages, (r + 1) * per)
        if lo >= hi:
            break
        df = _page_columns(spark.range(lo, hi, numPartitions=2).withColumn("family", _family()), perm)
        df = (df.withColumn("first_fetched", F.lit(T0).cast("timestamp") + F.make_interval(secs=F.col("id")))
              .withColumn("round", F.lit(r + 1 - INDEX_ROUNDS).cast("long"))
              .withColumn("block_key", F.explode(D.block_keys(F.col("simhash"), k))))
        common.conform(df, TABLES["near_dup_index"]).write.format("delta").mode("append").save(path)


def build_round(spark, k: int, perm: int):
    """The round's ROUND candidates (see the module), as :func:`jobs.dedup_transforms.candidates` returns them."""
    from pyspark.sql import functions as F

    c = spark.range(ROUND, numPartitions=2).withColumnRenamed("id", "c")
    is_copy, is_member = F.col("c") < COPIES, (F.col("c") >= COPIES) & (F.col("c") < COPIES + MEMBERS)
    # a copy: the index page it copies (same id: same signatures), then 1-2 bits and 3 % of the MinHash changed
    src = (c.where(is_copy).withColumn("id", F.pmod(F.col("c") * 13, F.lit(COPY_SOURCES)))
           .withColumn("family", _family()))
    src = _page_columns(src, perm)
    copies = (src.withColumn("simhash", F.col("simhash").bitwiseXOR(_flips("c + 7", "1 + c % 2")))
              .withColumn("minhash", F.concat(F.substring("minhash", 1, perm * 4 - 8),
                                              F.unhex(F.lpad(F.hex(_h(F.col("c"), "x")), 16, "0")))))
    members = c.where(is_member).withColumn("family", (F.col("c") % FAMILIES).cast("int"))
    distinct = c.where(~is_copy & ~is_member).withColumn("family", F.lit(-1))
    others = _page_columns(members.unionByName(distinct).withColumn("id", F.lit(10**12) + F.col("c")), perm)
    cols = ["url_fp", "host", "simhash", "canonical_fp", "minhash", "words", "first_fetched"]
    fetched = F.lit(T0 + dt.timedelta(days=30)).cast("timestamp") + F.make_interval(secs=F.col("c"))
    return (copies.withColumn("url_fp", _h(F.lit("cand"), F.col("c"))).unionByName(others)
            .withColumn("first_fetched", fetched).withColumn("canonical_fp", F.lit(None).cast("long")).select(*cols))


def table_facts(spark, conf, cands, k: int) -> dict:
    """Files and bytes of the index, its largest bucket, and the rows of the buckets the round hits."""
    from pyspark.sql import functions as F

    from jobs import common
    from jobs import dedup_transforms as D

    detail = common.table(spark, conf, "near_dup_index").detail().collect()[0]
    index = common.read(spark, conf, "near_dup_index")
    sizes = index.groupBy("block_key").count()
    keys = cands.select(F.explode(D.block_keys(F.col("simhash"), k)).alias("block_key")).distinct()
    hit = sizes.join(keys, "block_key")
    top = sizes.agg(F.max("count")).collect()[0][0]
    h = hit.agg(F.sum("count"), F.max("count")).collect()[0]
    return {"rows": index.count(), "files": detail["numFiles"], "bytes": detail["sizeInBytes"],
            "largest_bucket": top, "rows_in_hit_buckets": h[0] or 0, "largest_hit_bucket": h[1] or 0}


def time_lookup(spark, conf, cands, k: int, reps: int, caps: list[int], work: Path) -> dict:
    """Per cap (``dedup.max_bucket_rows``): median, min, max seconds and copies found; caps alternated per rep.
    Then the lookup's index scan alone, once with the columns it reads and once without the MinHash."""
    from pyspark.sql import functions as F

    from jobs import common, update
    from jobs import dedup_transforms as D

    d = conf.dedup
    secs: dict[int, list[float]] = {c: [] for c in caps}
    found: dict[int, int] = {}
    for i in range(reps):
        for cap in caps:
            index = common.read(spark, conf, "near_dup_index")  # as update reads it: the table, whole
            t = time.perf_counter()
            with common.session_conf(spark, common.STATIC_PLANS):
                near = D.near_duplicate_of(cands, index, round_no=LOOKUP_ROUND, near_bits=k,
                                           jaccard_threshold=d.jaccard_threshold, length_ratio=d.length_ratio,
                                           max_bucket_rows=cap)
                out = update._staged(spark, near, str(work / f"near-{i}-{cap}"))
            secs[cap].append(time.perf_counter() - t)
            found[cap] = out.count()
    out = {c: {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s), "found": found[c]}
           for c, s in secs.items()}
    keys = cands.select(F.explode(D.block_keys(F.col("simhash"), k)).alias("block_key")).distinct()
    scans = {}
    for name, cols in (("scan_s", ("block_key", "url_fp", "simhash", "minhash", "words", "first_fetched")),
                       ("narrow_scan_s", ("block_key", "url_fp", "simhash", "first_fetched"))):
        index = common.read(spark, conf, "near_dup_index").where(F.col("round") < LOOKUP_ROUND)
        t = time.perf_counter()
        with common.session_conf(spark, common.STATIC_PLANS):
            (index.join(F.broadcast(keys), "block_key", "left_semi").select(*cols)
             .write.format("noop").mode("overwrite").save())
        scans[name] = time.perf_counter() - t
    return {"caps": out, **scans}


def time_update(spark, conf, work: Path, round_size: int, hosts: int, rows: int, perm: int) -> dict:
    """A whole update of a ``round_size``-URL round with dedup.near_duplicates on, against the index in place."""
    from pyspark.sql import functions as F

    from bench import verb_cost
    from jobs import common, generate, update
    from schemas.tables import TABLES

    now = common.now_utc()
    verb_cost.synthetic_crawldb(spark, conf, rows=rows, due=round_size, hosts=hosts, now=now)
    g = generate.run(spark, conf, now=now)
    row = verb_cost.synthetic_fetch(spark, conf, g["round"], 4, g["row"], now)
    n = g["round"]
    assert n == LOOKUP_ROUND, n  # the index's rows are of earlier rounds
    # the fetched pages get a MinHash and a word count (verb_cost's fetch has none): distinct pages
    fo = common.read(spark, conf, "fetch_output").where(F.col("round") == n)
    sig = fo.withColumn("id", F.abs(F.col("url_fp")))
    sig = sig.withColumn("minhash", F.when(F.col("kind") == "page", _minhash(F.col("id"), F.col("id"), F.lit(100), perm)))
    sig = sig.withColumn("words", F.when(F.col("kind") == "page", F.lit(500)))
    staged = update._staged(spark, common.conform(sig, TABLES["fetch_output"]), str(work / "fo"))
    (staged.write.format("delta").mode("overwrite").option("replaceWhere", f"round = {n}")
     .save(common.table_path(conf, "fetch_output")))
    t = time.perf_counter()
    u = update.run(spark, conf, round_no=n, row=row, now=now)
    return {"seconds": time.perf_counter() - t, "round": n, "generated": g["generated"],
            "near_dup_index_rows": u.get("near_dup_index"), "near_duplicates": u.get("near_duplicates")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000,1000000", help="index sizes (rows of near_dup_index)")
    p.add_argument("--pages", action="store_true", help="read --sizes as pages (each k + 1 rows)")
    p.add_argument("--reps", type=int, default=3, help="timed lookups per size and cap (median reported)")
    p.add_argument("--caps", default="default,0",
                   help="dedup.max_bucket_rows values to time, alternated ('default': the configured one; 0: no cap)")
    p.add_argument("--no-update", action="store_true", help="skip the whole-update measurement")
    p.add_argument("--round", type=int, default=ROUND, help="URLs of the updated round (--update)")
    p.add_argument("--set", action="append", default=[], help="a configuration KEY=VALUE (repeatable)")
    args = p.parse_args(argv)

    from crawl_udfs import config

    sizes = [int(s) for s in args.sizes.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="near-dup-lookup-"))
    load0 = os.getloadavg()
    results, upd = [], None
    try:
        base = config.load([_overlay(work / "conf.toml", work / "root-0")], overrides=args.set)
        k, perm = base.simhash.near_duplicate_bits, base.dedup.minhash_permutations
        from jobs import common, update
        from jobs.session import build_session
        spark = build_session(base)
        cands = update._staged(spark, build_round(spark, k, perm), str(work / "cands"))
        for size in sizes:
            pages = size if args.pages else size // (k + 1)
            conf = config.load([_overlay(work / f"conf-{size}.toml", work / f"root-{size}")], overrides=args.set)
            common.ensure_tables(spark, conf)
            t = time.perf_counter()
            build_index(spark, conf, pages, k, perm)
            build_s = time.perf_counter() - t
            facts = table_facts(spark, conf, cands, k)
            print(f"built {size:,} ({pages:,} pages) in {build_s:.0f}s: {facts}", file=sys.stderr, flush=True)
            caps = [conf.dedup.max_bucket_rows if c == "default" else int(c) for c in args.caps.split(",")]
            r = time_lookup(spark, conf, cands, k, args.reps, caps, work / f"out-{size}")
            print(f"  lookup {r}", file=sys.stderr, flush=True)
            results.append({"size": size, "pages": pages, **facts, **r})
        if not args.no_update and sizes:
            conf = config.load([_overlay(work / f"conf-{sizes[-1]}.toml", work / f"root-{sizes[-1]}", args.round)],
                               overrides=args.set + ["dedup.near_duplicates=true"])
            upd = time_update(spark, conf, work, args.round, hosts=100, rows=5 * args.round, perm=perm)
            print(f"  update {upd}", file=sys.stderr, flush=True)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"near-duplicate lookup ({os.cpu_count()} CPUs; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; "
          f"load {load0[0]:.1f} -> {os.getloadavg()[0]:.1f}; local[2]; k = {k}, {perm} permutations; "
          f"round of {ROUND:,} candidates ({COPIES} near-copies, {MEMBERS} family members); {args.reps} reps; "
          f"settings {args.set or 'defaults'})")
    print(f"{'index rows':>10} {'pages':>8} {'files':>5} {'MB':>6} {'top bucket':>10} {'hit rows':>8} {'top hit':>7} "
          f"{'cap':>5} {'median s':>8} {'min':>6} {'max':>6} {'found':>5} {'scan s':>6} {'narrow':>6}")
    for r in results:
        for cap, c in r["caps"].items():
            print(f"{r['rows']:>10,} {r['pages']:>8,} {r['files']:>5} {r['bytes'] / 1e6:>6.1f} {r['largest_bucket']:>10,} "
                  f"{r['rows_in_hit_buckets']:>8,} {r['largest_hit_bucket']:>7,} {cap or 'none':>5} {c['median_s']:>8.2f} "
                  f"{c['min_s']:>6.2f} {c['max_s']:>6.2f} {c['found']:>5} {r['scan_s']:>6.2f} {r['narrow_scan_s']:>6.2f}")
    if len(results) > 1:
        for cap in results[0]["caps"]:
            ratio = results[-1]["caps"][cap]["median_s"] / results[0]["caps"][cap]["median_s"]
            print(f"cap {cap or 'none'}: median at {results[-1]['rows']:,} rows / at {results[0]['rows']:,} rows = "
                  f"{ratio:.2f}x (goal <= 1.5x)")
    if upd:
        first = next(iter(results[-1]["caps"].values()))
        print(f"update of a {upd['generated']:,}-URL round with dedup on, index of {results[-1]['rows']:,} rows: "
              f"{upd['seconds']:.1f}s; the lookup ({ROUND:,} candidates, first cap, largest index) = "
              f"{first['median_s'] / upd['seconds']:.0%} of it ({upd})")
    return 0


def _overlay(path: Path, root: Path, top_n: int = ROUND) -> Path:
    path.write_text(f'[storage]\nroot = "{root}"\n[spark]\nmaster = "local[2]"\n'
                    f"[generate]\ntop_n = {top_n}\nmax_urls_per_host = {top_n}\nfetch_partitions = 2\n")
    return path


if __name__ == "__main__":
    sys.exit(main())
