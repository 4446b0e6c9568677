"""What generate and update cost on Spark, step by step: Spark jobs, seconds, time outside jobs (issue 13.3).

One run, one process, ``local[2]`` (the embedded default on this machine):

1. **start**: the SparkSession built (JVM start, Delta's JARs) and the tables
   created: what a ``deltacrawl crawl`` pays once before its first request.
2. A synthetic crawl DB of ``--rows`` rows: ``--round`` of them due now
   (unfetched, on ``--hosts`` hosts named ``h<i>.synthetic.invalid`` with a
   known address, so resolve has nothing to look up) and the rest fetched and
   due in 1-30 days, plus every host's ``hosts`` row.
3. **generate** of round 1 (its fetch list: ``--round`` URLs).
4. A synthetic fetch of that list: every URL ``ok`` (200) with its own
   digest and SimHash and ``--links`` outlinks (half to other listed URLs of
   its host, half new), and one host row per host; written as round 1's
   ``fetch_output`` and the ledger moved to ``fetched`` as fetch does. No
   request leaves the process: the hosts are never contacted.
5. **update** of round 1, then (``--repeat``) the same again for round 2
   (generate picks the new URLs round 1 discovered), so the second figures
   are those of a warm JVM.
   With ``--pipeline``, round N+1 is generated beside round N as ``deltacrawl crawl`` does under
   ``generate.pipeline``: the step between two fetches; ``AHEAD`` is what ``generate.list_ahead``
   stages beside fetch N for it (``jobs/list_ahead.py``).
6. **ledger mirror flush**: the ``rounds`` table brought up to the ledger's
   records (one MERGE of the round's row), what a writing command pays once
   before it exits (``jobs/ledger_mirror.py``); outside generate and update.

Per verb and per step of it (the functions ``generate.run`` and ``update.run``
call, wrapped here and nowhere else): wall seconds, Spark jobs started (the
DAG scheduler's job counter, read before and after), and the seconds the
driver spent with no job of the step running ("outside jobs": analysis,
planning, Delta log replay, Python), from the jobs' submission and completion
times in Spark's status store.

    .venv/bin/python -m bench.verb_cost                      # 100k rows, 10k-URL rounds, 2 rounds
    .venv/bin/python -m bench.verb_cost --rows 20000 --round 2000 --repeat 1   # a quick look
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
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children") if Path(f"/proc/{p}").exists() else ():
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                pass
    return out


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, with reaped children's) of ``pid``'s process tree."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for p in process_tree(pid):
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in f[11:15])  # utime stime cutime cstime
    return total / tick


class Meter:
    """Seconds, CPU seconds of the process tree (driver JVM, Python driver, Python workers), Spark jobs and
    time outside jobs of named steps (nested steps are counted in their parent too; a step beside another
    in a worker thread shares its CPU seconds).

    Steps nest per thread: a step a worker thread opens (update's MERGEs and appends run side by side)
    sits under the step its spawning thread has open, not under a sibling that happens to be open in
    another thread. Its jobs are the jobs started while it ran, whichever thread started them."""

    def __init__(self, spark, names: bool = False):
        import threading

        self.sc, self.names = spark.sparkContext, names
        self.rows: list[dict] = []
        self._local, self._main = threading.local(), threading.main_thread()
        self._main_depth = 0

    def _enter(self) -> int:
        """The depth of the step this thread opens now: under its own open step, else (a worker thread's
        first) under the main thread's."""
        import threading

        loc = self._local
        if not getattr(loc, "open", 0):
            loc.base, loc.open = self._main_depth, 0
        loc.open += 1
        depth = loc.base + loc.open - 1
        if threading.current_thread() is self._main:
            self._main_depth = depth + 1
        return depth

    def _leave(self) -> None:
        import threading

        loc = self._local
        loc.open -= 1
        if threading.current_thread() is self._main:
            self._main_depth = loc.base + loc.open

    def _next_job(self) -> int:
        return int(self.sc._jsc.sc().dagScheduler().numTotalJobs())

    def _busy_s(self, first: int, last: int, t0_ms: float) -> float:
        """Union of the jobs' [submission, completion] intervals, in seconds."""
        store = self.sc._jsc.sc().statusStore()
        spans = []
        for j in range(first, last):
            try:
                d = store.job(j)
            except Exception:  # noqa: BLE001 - a job evicted from the store (spark.ui.retainedJobs)
                continue
            sub, end = d.submissionTime(), d.completionTime()
            if sub.isDefined() and end.isDefined():
                spans.append((max(sub.get().getTime(), t0_ms), end.get().getTime()))
        busy, cur = 0.0, None
        for a, b in sorted(spans):
            if cur is None or a > cur[1]:
                if cur:
                    busy += cur[1] - cur[0]
                cur = [a, b]
            else:
                cur[1] = max(cur[1], b)
        if cur:
            busy += cur[1] - cur[0]
        return busy / 1000

    @contextmanager
    def step(self, name: str):
        first, t0, wall0, cpu0 = self._next_job(), time.perf_counter(), time.time() * 1000, cpu_s(os.getpid())
        row = {"step": name, "depth": self._enter()}
        self.rows.append(row)
        try:
            yield
        finally:
            self._leave()
            last = self._next_job()
            row.update(seconds=time.perf_counter() - t0, jobs=last - first, cpu_s=cpu_s(os.getpid()) - cpu0)
            row["outside_jobs_s"] = row["seconds"] - self._busy_s(first, last, wall0)
            if self.names:
                row["job_names"] = self._names(first, last)

    def _names(self, first: int, last: int) -> dict[str, int]:
        """How many of the jobs each call site started (Spark's job name: the first user-facing frame)."""
        store, out = self.sc._jsc.sc().statusStore(), {}
        for j in range(first, last):
            try:
                name = str(store.job(j).name())
            except Exception:  # noqa: BLE001 - evicted
                continue
            out[name] = out.get(name, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def wrap(self, module, name: str, label: str | None = None) -> None:
        fn = getattr(module, name)
        meter = self

        def wrapped(*a, **kw):
            with meter.step(label or name):
                return fn(*a, **kw)
        setattr(module, name, wrapped)


def instrument(meter: Meter) -> None:
    """Wrap the steps of generate.run and update.run (module attributes they look up at call time)."""
    from jobs import common, duck_engine, generate, ledger, resolve, update, update_commit, update_decide

    for mod, names in ((ledger, ("step", "set_state")), (resolve, ("run",)), (common, ("version",)),
                       (update, ("plan", "_staged", "_remove", "decide", "_staged_arrow")),
                       (update_commit, ("replace_crawldb", "merge_hosts", "append")),
                       (duck_engine, ("from_spark", "from_spark_all", "to_spark")),  # the driver engine's Arrow crossings
                       (update_decide, ("plan",))):
        for n in names:
            meter.wrap(mod, n, f"{mod.__name__.split('.')[-1]}.{n}")
    # the rest of generate.run: its select + count + write, between resolve and the ledger write
    meter.wrap(generate, "select_due", "generate.select_due (lazy)")
    # pipelined: the view of the crawl DB and hosts as the pending round's update will leave them
    from jobs import list_ahead, pending_round
    meter.wrap(generate, "_pending_crawldb", "generate: pending view (staged)")
    meter.wrap(pending_round, "hosts_after", "generate: pending hosts (lazy)")
    meter.wrap(list_ahead, "usable", "generate: list_ahead.usable")


def synthetic_crawldb(spark, conf, *, rows: int, due: int, hosts: int, now: dt.datetime, host_index=None,
                      scatter_due: bool = False, files: int = 2, count_pages: bool = False) -> None:
    """``host_index``: a Column over ``id`` giving the row's host number in [0, hosts) (default ``id % hosts``:
    every host the same size); ``scatter_due``: the ``due`` rows spread evenly over the ids, so over every
    file (default the first ``due`` ids, all in the first file); ``files``: the Parquet files written;
    ``count_pages``: each ``hosts`` row's ``pages_fetched`` is its host's fetched rows, as a crawl leaves
    it (default 0)."""
    from pyspark.sql import functions as F

    from jobs import common
    from schemas.tables import TABLES

    ids = spark.range(rows, numPartitions=files)
    index = F.col("id") % hosts if host_index is None else host_index
    host = F.concat(F.lit("h"), index.cast("string"), F.lit(".synthetic.invalid"))
    url = F.concat(F.lit("http://"), host, F.lit("/p/"), F.col("id").cast("string"), F.lit(".html"))
    step = max(1, rows // max(due, 1))
    is_due = (((F.col("id") % step) == 0) & (F.col("id") < step * due)) if scatter_due else F.col("id") < due
    rnd = F.rand(seed=7)
    seen = F.lit(now - dt.timedelta(days=3)).cast("timestamp")
    later = F.lit(now).cast("timestamp") + F.make_interval(days=(F.lit(1) + (rnd * 29).cast("int")))
    df = (ids.withColumn("host", host).withColumn("url", url).withColumn("url_fp", F.xxhash64("url"))
          .withColumn("status", F.when(is_due, "unfetched").otherwise("fetched"))
          .withColumn("next_fetch_time", F.when(is_due, seen).otherwise(later))
          .withColumn("score", rnd).withColumn("depth", (F.col("id") % 7).cast("int"))
          .withColumn("redirect_hops", F.lit(0)).withColumn("retries", F.lit(0))
          .withColumn("fetch_count", F.when(is_due, 0).otherwise(1)).withColumn("change_count", F.lit(0))
          .withColumn("unchanged_count", F.lit(0)).withColumn("fetch_interval_s", F.lit(2592000.0))
          .withColumn("first_seen", seen).withColumn("discovered_round", F.lit(0).cast("long"))
          .withColumn("updated_round", F.lit(0).cast("long")))
    fetched = ~is_due
    for c, v in (("last_fetch_time", seen), ("http_status", F.lit(200)), ("simhash", F.xxhash64("url", F.lit("s"))),
                 ("digest", F.concat(F.lit("sha1:"), F.upper(F.substring(F.sha1(F.col("url")), 1, 32)))),
                 ("content_type", F.lit("text/html")), ("warc_fetch_time", seen),
                 ("warc_record_id", F.concat(F.lit("<urn:uuid:"), F.expr("uuid()"), F.lit(">")))):
        df = df.withColumn(c, F.when(fetched, v))
    (common.conform(df, TABLES["crawldb"]).write.format("delta").mode("append")
     .save(common.table_path(conf, "crawldb")))
    h = (spark.range(hosts, numPartitions=1)
         .withColumn("host", F.concat(F.lit("h"), F.col("id").cast("string"), F.lit(".synthetic.invalid")))
         .withColumn("ip", F.concat(F.lit("192.0.2."), (F.col("id") % 250 + 1).cast("string")))
         .withColumn("next_allowed_at", seen).withColumn("consecutive_failures", F.lit(0))
         .withColumn("robots_status", F.lit(200)).withColumn("pages_fetched", F.lit(0).cast("long"))
         .withColumn("bytes_fetched", F.lit(0).cast("long")).withColumn("requests", F.lit(0).cast("long"))
         .withColumn("duplicate_pages", F.lit(0).cast("long")).withColumn("new_content_pages", F.lit(0).cast("long"))
         .withColumn("delay_s", F.lit(0.01)).withColumn("updated_round", F.lit(0).cast("long")))
    if count_pages:
        counted = (spark.read.format("delta").load(common.table_path(conf, "crawldb")).where(F.col("status") == "fetched")
                   .groupBy("host").agg(F.count(F.lit(1)).alias("_fetched")))
        h = (h.join(counted, "host", "left")
             .withColumn("pages_fetched", F.coalesce(F.col("_fetched"), F.lit(0)).cast("long")).drop("_fetched"))
    (common.conform(h, TABLES["hosts"]).write.format("delta").mode("append").save(common.table_path(conf, "hosts")))


def synthetic_fetch(spark, conf, n: int, links: int, row: dict, now: dt.datetime) -> dict:
    """Round n's fetch_output as a fetch of its whole list would write it (every page ok), ledger to fetched."""
    from pyspark.sql import functions as F

    from jobs import common, ledger
    from schemas.tables import TABLES

    row = ledger.set_state(spark, conf, n, "fetching", old=row)
    fl = common.read(spark, conf, "fetch_list").where(F.col("round") == n)
    t = F.lit(now).cast("timestamp")
    # outlinks: i even -> a URL of the same host that is in the crawl DB (id-ish neighbour), odd -> a new one
    link = F.transform(F.sequence(F.lit(1), F.lit(links)), lambda i: F.struct(
        F.concat(F.lit("http://"), F.col("host"), F.lit("/p/"),
                 F.when(i % 2 == 0, F.abs(F.col("url_fp") % 1000).cast("string"))
                 .otherwise(F.concat(F.lit("r"), F.lit(n), F.lit("-"), F.abs(F.col("url_fp")).cast("string"),
                                     F.lit("-"), i.cast("string"))), F.lit(".html")).alias("url"),
        F.lit(None).cast("long").alias("url_fp"), F.lit("a").alias("kind"), F.lit(False).alias("nofollow"),
        F.col("host").alias("host"), F.lit(None).cast("timestamp").alias("lastmod")))
    pages = (fl.withColumn("kind", F.lit("page")).withColumn("outcome", F.lit("ok")).withColumn("fetch_time", t)
             .withColumn("status_code", F.lit(200)).withColumn("content_type", F.lit("text/html"))
             .withColumn("content_length", F.lit(5000).cast("long")).withColumn("wire_bytes", F.lit(5200).cast("long"))
             .withColumn("digest", F.concat(F.lit("sha1:R"), F.lit(n), F.col("url_fp").cast("string")))
             .withColumn("simhash", F.xxhash64("url", F.lit(n)))
             .withColumn("noindex", F.lit(False)).withColumn("nofollow", F.lit(False))
             .withColumn("warc_filename", F.concat(F.lit("r"), F.lit(n), F.lit("-p"), F.col("partition"), F.lit(".warc.gz")))
             .withColumn("warc_offset", F.col("url_fp") % 100000).withColumn("warc_length", F.lit(3000).cast("long"))
             .withColumn("warc_record_id", F.concat(F.lit("<urn:uuid:"), F.expr("uuid()"), F.lit(">")))
             .withColumn("t_first_byte_ms", F.lit(5.0)).withColumn("t_total_ms", F.lit(8.0))
             .withColumn("outlinks", link))
    pages = pages.withColumn("outlinks", F.transform("outlinks", lambda o: o.withField("url_fp", F.xxhash64(o["url"]))))
    host_rows = (fl.groupBy("host", "partition").agg(F.count(F.lit(1)).alias("requests"))
                 .withColumn("kind", F.lit("host")).withColumn("robots_status", F.lit(200))
                 .withColumn("robots_fetched_at", t).withColumn("robots_expires_at", t + F.expr("INTERVAL 1 DAY"))
                 .withColumn("next_allowed_at", t).withColumn("consecutive_failures", F.lit(0))
                 .withColumn("parked", F.lit(False)).withColumn("robots_requests", F.lit(1).cast("long"))
                 .withColumn("bytes_received", F.col("requests") * 5200).withColumn("delay_s", F.lit(0.01)))
    out = common.conform(pages.unionByName(host_rows, allowMissingColumns=True).withColumn("round", F.lit(n)),
                         TABLES["fetch_output"])
    (out.write.format("delta").mode("overwrite").option("replaceWhere", f"round = {n}")
     .save(common.table_path(conf, "fetch_output")))
    return ledger.set_state(spark, conf, n, "fetched", old=row, fetched_at=now)


PIPELINED = "GENERATE (pipelined: round N fetched, not merged)"
AHEAD = "AHEAD (next list's inputs staged, beside fetch N)"


def pipelined(meter: Meter, spark, conf, args, now: dt.datetime) -> list[dict]:
    """``--pipeline``: round 1 generated and fetched, then per repeat round N+1 generated beside
    round N (``generate.pipeline``: the step between two fetches) and round N updated, as
    ``jobs.rounds.crawl`` runs them; update is measured alone here, not beside a fetch. With
    ``generate.list_ahead`` the next round's inputs are staged after each update (or the first
    generate), where ``jobs.rounds.crawl`` stages them beside the fetch: step AHEAD."""
    from jobs import generate, list_ahead, update

    def staged_ahead(g: dict):
        if not conf.generate.list_ahead:
            return None
        with meter.step(AHEAD):
            return list_ahead.prepare(spark, conf, g["row"], now=now)

    with meter.step("GENERATE"):
        g = generate.run(spark, conf, now=now)
    ahead = staged_ahead(g)
    with meter.step(f"synthetic fetch ({g['generated']:,} URLs)"):
        row = synthetic_fetch(spark, conf, g["round"], args.links, g["row"], now)
    results, fetched_at = [], now
    for i in range(args.repeat):
        now = now + dt.timedelta(seconds=1)
        with meter.step(PIPELINED):
            g = generate.run(spark, conf, now=now, row=row, pipeline=True, ahead=ahead)
        with meter.step("UPDATE"):
            u = update.run(spark, conf, round_no=row["round"], row=row, now=fetched_at)
        results.append({"round": row["round"], "new_urls": u["new_urls"], "next_generated": g["generated"],
                        "listed_ahead": g.get("listed_ahead")})
        ahead = staged_ahead(g) if i + 1 < args.repeat else None
        with meter.step(f"synthetic fetch ({g['generated']:,} URLs)"):
            row, fetched_at = synthetic_fetch(spark, conf, g["round"], args.links, g["row"], now), now
    with meter.step("UPDATE"):
        update.run(spark, conf, round_no=row["round"], row=row, now=fetched_at)
    return results


def report(rows: list[dict]) -> str:
    lines = [f"{'step':<44} {'seconds':>8} {'cpu s':>6} {'jobs':>5} {'outside jobs s':>14}"]
    for r in rows:
        lines.append(f"{'  ' * r['depth'] + r['step']:<44} {r['seconds']:>8.2f} {r['cpu_s']:>6.2f} {r['jobs']:>5} "
                     f"{r['outside_jobs_s']:>14.2f}")
        if r.get("job_names") and r["jobs"] >= 3:
            lines += [f"{'  ' * r['depth']}    {n:>3} x {name}" for name, n in list(r["job_names"].items())[:4]]
    return "\n".join(lines)


def bench_conf(work: Path, *, round_size: int, max_per_host: int, sets: list[str]):
    """The benchmark's configuration: storage under ``work``, ``local[2]``, rounds of ``round_size`` URLs at
    most ``max_per_host`` per host in 2 fetch partitions, then ``sets`` (KEY=VALUE overrides)."""
    from crawl_udfs import config

    overlay = work / "conf.toml"
    overlay.write_text(f'[storage]\nroot = "{work / "root"}"\n[spark]\nmaster = "local[2]"\n'
                       f"[generate]\ntop_n = {round_size}\nmax_urls_per_host = {max_per_host}\n"
                       "fetch_partitions = 2\n")
    return config.load([overlay], overrides=sets) if sets else config.load([overlay])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000, help="crawl DB rows")
    p.add_argument("--round", type=int, default=10_000, help="URLs due now: the round's size (top_n)")
    p.add_argument("--hosts", type=int, default=500, help="hosts of the synthetic crawl DB")
    p.add_argument("--links", type=int, default=4, help="outlinks per fetched page")
    p.add_argument("--repeat", type=int, default=2, help="rounds (the first pays the JVM's first jobs)")
    p.add_argument("--set", action="append", default=[], help="a configuration KEY=VALUE (repeatable)")
    p.add_argument("--job-names", action="store_true", help="also print the commonest job names of each step")
    p.add_argument("--pipeline", action="store_true",
                   help="generate each next round beside the last one's update (generate.pipeline), and time that")
    p.add_argument("--json", help="also write the raw figures here")
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="verb-cost-"))
    conf = bench_conf(work, round_size=args.round, max_per_host=max(1, 2 * args.round // args.hosts), sets=args.set)
    load0 = os.getloadavg()
    results = []
    try:
        t = time.perf_counter()
        from jobs.session import build_session
        spark = build_session(conf)
        start_s = time.perf_counter() - t
        from jobs import common, generate, ledger_mirror, update
        meter = Meter(spark, names=args.job_names)
        with meter.step("init (ensure_tables)"):
            common.ensure_tables(spark, conf)
        with meter.step("register_tables (the CLI, every command)"):
            common.register_tables(spark, conf)
        now = common.now_utc()
        with meter.step(f"synthetic crawl DB ({args.rows:,} rows)"):
            synthetic_crawldb(spark, conf, rows=args.rows, due=args.round, hosts=args.hosts, now=now)
        instrument(meter)
        row = None
        if args.pipeline:
            results = pipelined(meter, spark, conf, args, now)
        for _ in range(0 if args.pipeline else args.repeat):
            with meter.step("GENERATE"):
                g = generate.run(spark, conf, now=now, row=row)
            with meter.step(f"synthetic fetch ({g['generated']:,} URLs)"):
                row = synthetic_fetch(spark, conf, g["round"], args.links, g["row"], now)
            with meter.step("UPDATE"):
                u = update.run(spark, conf, round_no=g["round"], row=row, now=now)
            row = u["row"]
            with meter.step("ledger mirror flush (rounds table)"):
                ledger_mirror.flush(spark, conf)
            results.append({"round": g["round"], "generated": g["generated"], "new_urls": u["new_urls"]})
            now = now + dt.timedelta(seconds=1)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    head = (f"verb cost ({os.cpu_count()} CPUs; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; load "
            f"{load0[0]:.1f} -> {os.getloadavg()[0]:.1f}; local[2]; {args.rows:,} crawl-DB rows, {args.hosts} hosts; "
            f"rounds {results}; settings {args.set or 'defaults'})")
    print(head)
    print(f"session start (JVM + Delta, build_session): {start_s:.2f}s")
    print(report(meter.rows))
    top = [r for r in meter.rows if r["step"] in ("GENERATE", "UPDATE")]
    for r in meter.rows:
        if r["step"] == PIPELINED:
            print(f"pipelined: between round N fetched and round N+1 listed = {r['seconds']:.1f}s ({r['jobs']} jobs); "
                  "update N runs beside fetch N+1")
    for i in range(len(top) if args.pipeline else 0, len(top) - 1, 2):
        print(f"round {i // 2 + 1}: generate + update = {top[i]['seconds']:.1f} + {top[i + 1]['seconds']:.1f} = "
              f"{top[i]['seconds'] + top[i + 1]['seconds']:.1f}s ({top[i]['jobs'] + top[i + 1]['jobs']} jobs; "
              f"CPU s of the process tree {top[i]['cpu_s']:.1f} + {top[i + 1]['cpu_s']:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"start_s": start_s, "steps": meter.rows, "rounds": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
