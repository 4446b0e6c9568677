"""Generate and update on a big crawl DB with a skewed host distribution: 1 M and 10 M rows (issue 17).

The pieces are ``bench/verb_cost.py``'s (its synthetic crawl DB and fetch, its per-step meter of
seconds and Spark jobs); this adds what a big crawl DB needs:

- **Host skew.** Row ``id``'s host is ``h<k>`` with ``k = floor(H ** (u ** 2)) - 1``, ``u`` a hash of
  ``id`` uniform in [0, 1), ``H`` = ``--hosts`` (default rows / 5): a log-uniform index squared, so
  host 0 holds ~22 % of all rows (sqrt(ln 2 / ln H)), host 1 ~5.5 %, host 2 ~3.4 %, and the hosts
  near H have 0-2 rows each (the expected count of host j is ~ rows / (2 j ln H)). The round's
  ``--round`` due URLs are spread evenly over the ids (so over every file, as in a crawl DB that
  MERGEs wrote), and fall on the hosts in the same proportions: ~2,200 of 10,000 on host 0.
- **Layouts** of the crawl DB, applied to a copy of one built table (``--layout``, several allowed):
  ``as-written`` (the project's: no clustering, deletion vectors on, statistics on the first four
  columns), ``zorder-nft`` (``OPTIMIZE ZORDER BY (next_fetch_time)``), ``cluster-host``,
  ``cluster-nft``, ``cluster-host-nft`` (liquid clustering, ``ALTER TABLE CLUSTER BY`` then
  ``OPTIMIZE``), ``no-dv`` (deletion vectors off). ``--optimize-each-round`` runs ``OPTIMIZE`` after
  every update (timed on its own: the cadence's cost).
- **Driver memory** per step: the JVM's heap (peak used, summed over the heap pools, and the old
  generation's peak: what survives collections; ``MemoryPoolMXBean`` peaks, reset at every step's
  start and end) and the peak RSS of the JVM and Python processes (``VmHWM``, reset through
  ``/proc/<pid>/clear_refs``). A step's peak is the largest of its own and its nested steps'.
  Embedded (``local[2]``) the driver JVM runs the tasks too: its heap is the driver's and the
  executors'. Python's RSS is the driver engine's (the Arrow tables and DuckDB live there).
- **What crosses to the driver**: every ``DataFrame.toArrow`` (rows, Arrow bytes), by step; the
  update gather's key sets (rows of each broadcast) and the crawl-DB rows it collects.
- **URL-seen for in-round following** (step ``URL-SEEN``): ``jobs.fetch.fetch_input`` as fetch
  builds it for the round, its host rows' ``known_fps`` (each host's url_fps, shipped in its row to
  the fetch task) computed and measured: the hosts, the url_fps shipped, the largest host's.

Run (one JVM per layout run; build once per size, reused by copying)::

    nice -n 19 .venv/bin/python -m bench.bigdb build --rows 1000000 --dir /tmp/bigdb-1m
    nice -n 19 .venv/bin/python -m bench.bigdb run --dir /tmp/bigdb-1m --layout as-written --json out.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import verb_cost as V  # noqa: E402

MIB = 1 << 20
#: Settings of every run: a host may take the whole round (the per-host cap is the round, see ``bench_conf``).
#: ``hosts.pages_fetched`` counts each host's fetched rows (build), so no budget may stop a host of millions.
DEFAULT_SETS = ("politeness.host_delay_s=0.05", "budget.max_pages_per_host=1000000000")
LAYOUTS = ("as-written", "zorder-nft", "cluster-host", "cluster-nft", "cluster-host-nft", "no-dv")


# -- the skewed host of a row ------------------------------------------------------------------
def host_index(hosts: int):
    """Row ``id``'s host number in [0, hosts): ``floor(hosts ** (u ** 2)) - 1``, ``u`` uniform from a hash."""
    from pyspark.sql import functions as F
    u = F.pmod(F.xxhash64(F.col("id"), F.lit("host")), F.lit(1 << 30)).cast("double") / float(1 << 30)
    return F.least(F.floor(F.pow(F.lit(float(hosts)), u * u)) - 1, F.lit(hosts - 1)).cast("long")


# -- memory ------------------------------------------------------------------------------------
def _status_kib(pid: int | str, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _clear_peak(pid: int | str) -> None:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError:
        pass


class Probe:
    """Peak memory of the driver since the last :meth:`reset`: JVM heap (MXBeans), JVM and Python RSS."""

    def __init__(self, spark):
        jvm = spark.sparkContext._jvm
        mf = jvm.java.lang.management.ManagementFactory
        self.pools = [p for p in mf.getMemoryPoolMXBeans() if str(p.getType()) == "Heap memory"]
        self.old = [p for p in self.pools if "Old" in str(p.getName()) or "Tenured" in str(p.getName())]
        self.max_heap = int(jvm.java.lang.Runtime.getRuntime().maxMemory())
        proc = getattr(spark.sparkContext._gateway, "proc", None)
        self.jvm_pid = proc.pid if proc is not None else None

    def reset(self) -> None:
        for p in self.pools:
            p.resetPeakUsage()
        _clear_peak("self")
        if self.jvm_pid:
            _clear_peak(self.jvm_pid)

    def read(self) -> dict[str, float]:
        return {"heap_peak_mib": sum(int(p.getPeakUsage().getUsed()) for p in self.pools) / MIB,
                "old_gen_peak_mib": sum(int(p.getPeakUsage().getUsed()) for p in self.old) / MIB,
                "jvm_rss_peak_mib": (_status_kib(self.jvm_pid, "VmHWM") / 1024) if self.jvm_pid else 0.0,
                "py_rss_peak_mib": _status_kib("self", "VmHWM") / 1024}


class MemMeter(V.Meter):
    """:class:`bench.verb_cost.Meter` with each step's driver memory peaks (its own and its nested steps')
    and what it collected to Python as Arrow (``toArrow``: rows, MiB)."""

    def __init__(self, spark, names: bool = False):
        super().__init__(spark, names)
        self.probe, self.open, self.label = Probe(spark), [], None

    def _fold(self) -> None:
        got = self.probe.read()
        for row in self.open:
            for k, v in got.items():
                row[k] = max(row.get(k, 0.0), v)
        self.probe.reset()

    @contextmanager
    def step(self, name: str):
        self._fold()
        with super().step(name):
            row = self.rows[-1]
            self.open.append(row)
            try:
                yield
            finally:
                self._fold()
                self.open.pop()

    def collected(self, what: str, rows: int, nbytes: int) -> None:
        """Record an Arrow collection in every open step."""
        for row in self.open:
            row.setdefault("to_arrow", []).append((what, rows, round(nbytes / MIB, 1)))


def watch_collections(meter: MemMeter) -> None:
    """Record every ``DataFrame.toArrow`` (the driver engine's collections) and the update gather's key sets."""
    from pyspark.sql.classic.dataframe import DataFrame  # the class of a Spark 4 session's DataFrames

    from jobs import duck_engine as E
    from jobs import update_gather as G
    to_arrow = DataFrame.toArrow

    def recorded(self):
        t = to_arrow(self)
        meter.collected(meter.label or f"{len(t.columns)} cols", t.num_rows, t.nbytes)
        return t
    DataFrame.toArrow = recorded
    from_spark = E.from_spark

    def labelled(con, df, name):
        meter.label = name
        try:
            return from_spark(con, df, name)
        finally:
            meter.label = None
    E.from_spark = labelled
    keys = G.keys

    def counted_keys(con, fetch_output, index_fps=None):
        out = keys(con, fetch_output, index_fps)
        for name, rel in out.items():
            meter.collected(f"key set {name} (broadcast)", rel.aggregate("count(*)").fetchall()[0][0], 0)
        return out
    G.keys = counted_keys


def without_host_slice() -> None:
    """The update gather without its by-host rows (key 2 of ``jobs/update_gather.py``: every crawl-DB row of
    the round's hosts, for pattern learning, trap signals and robots refresh): with ``dedup.learn_patterns``
    off, what update costs when what it reads of the crawl DB is keyed by the round alone (the synthetic
    round has no duplicates and no sitemaps, so its decisions do not change)."""
    from jobs import update_gather as G
    rows = G.crawldb_rows

    def keyed_only(crawldb, keys, learning, **kw):
        return rows(crawldb, keys, None, **kw)
    G.crawldb_rows = keyed_only


# -- layouts -------------------------------------------------------------------------------------
def apply_layout(spark, path: str, layout: str) -> None:
    """Re-lay the crawl DB at ``path`` (see the module docstring)."""
    t = f"delta.`{path}`"
    if layout == "as-written":
        return
    if layout == "no-dv":
        spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")
        return
    if layout == "zorder-nft":
        spark.sql(f"OPTIMIZE {t} ZORDER BY (next_fetch_time)")
        return
    cols = {"cluster-host": "host", "cluster-nft": "next_fetch_time",
            "cluster-host-nft": "host, next_fetch_time"}[layout]
    spark.sql(f"ALTER TABLE {t} CLUSTER BY ({cols})")
    spark.sql(f"OPTIMIZE {t} FULL")  # every file re-clustered, not only those written since


def optimize(spark, path: str, layout: str) -> None:
    """The cadence's OPTIMIZE after an update: incremental clustering, or the ZORDER again."""
    t = f"delta.`{path}`"
    spark.sql(f"OPTIMIZE {t} ZORDER BY (next_fetch_time)" if layout == "zorder-nft" else f"OPTIMIZE {t}")


def files_of(spark, path: str) -> dict:
    d = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]
    return {"files": int(d["numFiles"]), "mib": round(int(d["sizeInBytes"]) / MIB, 1),
            "clustering": list(d["clusteringColumns"] or [])}


# -- URL-seen of in-round following ------------------------------------------------------------
def url_seen(spark, conf, round_no: int) -> dict:
    """``fetch_input``'s host rows for round ``round_no`` as ``jobs.fetch._fetch`` builds them, their
    ``known_fps`` computed: hosts, url_fps shipped in all, the largest host's."""
    from pyspark.sql import functions as F

    from jobs import common, fetch, generate
    fetch_list = common.read(spark, conf, "fetch_list").where(F.col("round") == round_no)
    cap = generate.host_cap(max_per_host=generate.max_urls_per_host(conf),
                            max_pages_per_host=conf.budget.max_pages_per_host,
                            delay_window_s=generate.delay_window_s(conf))
    rows = fetch.fetch_input(fetch_list, common.read(spark, conf, "hosts"), 2,
                             crawldb=common.read(spark, conf, "crawldb"), follow_cap=cap,
                             max_known=conf.fetch.follow_max_known_urls)
    got = (rows.where(F.col("kind") == "host").select(F.size("known_fps").alias("n"), "follow_cap")
           .agg(F.count(F.lit(1)).alias("hosts"), F.sum("n").alias("fps"), F.max("n").alias("largest"),
                F.sum(F.when(F.col("follow_cap") == 0, 1).otherwise(0)).alias("not_following"))
           .collect()[0])
    fps = int(got["fps"] or 0)
    return {"hosts": int(got["hosts"]), "known_fps": fps, "largest_host_fps": int(got["largest"] or 0),
            "mib_shipped": round(8 * fps / MIB, 1), "hosts_follow_cap_0": int(got["not_following"] or 0)}


# -- build / run ---------------------------------------------------------------------------------
def build(args) -> int:
    """The synthetic tables under ``--dir``/root, once per size."""
    from jobs import common
    from jobs.session import build_session
    hosts = args.hosts or max(1, args.rows // 5)
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    conf = V.bench_conf(work, round_size=args.round, max_per_host=args.round, sets=args.set)
    spark = build_session(conf)
    t = time.perf_counter()
    common.ensure_tables(spark, conf)
    now = common.now_utc()
    V.synthetic_crawldb(spark, conf, rows=args.rows, due=args.round, hosts=hosts, now=now,
                        host_index=host_index(hosts), scatter_due=True, files=max(2, args.rows // 250_000),
                        count_pages=True)
    crawldb = common.read(spark, conf, "crawldb")
    top = crawldb.groupBy("host").count().orderBy("count", ascending=False)
    shape = {"rows": args.rows, "host_space": hosts, "hosts_with_rows": top.count(),
             "top_hosts": [(r["host"], r["count"]) for r in top.limit(5).collect()],
             "hosts_of_1_to_5_rows": top.where("count <= 5").count(),
             "round_hosts": crawldb.where("status = 'unfetched'").select("host").distinct().count(),
             "build_s": round(time.perf_counter() - t, 1), "now": now.isoformat(),
             **files_of(spark, common.table_path(conf, "crawldb"))}
    spark.stop()
    (work / "shape.json").write_text(json.dumps(shape, indent=1))
    print(json.dumps(shape, indent=1))
    return 0


def run(args) -> int:
    from jobs import common, generate, update
    from jobs.session import build_session
    src = Path(args.dir)
    shape = json.loads((src / "shape.json").read_text())
    work = Path(args.work or f"{src}-run")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copytree(src / "root", work / "root")  # each layout run starts from the same built tables
    sets = args.set + (["dedup.learn_patterns=false"] if args.no_host_slice else [])
    conf = V.bench_conf(work, round_size=args.round, max_per_host=args.round, sets=sets)
    load0 = os.getloadavg()
    spark = build_session(conf)
    common.ensure_tables(spark, conf)  # what `deltacrawl init` does: tables built by older code upgraded
    path = common.table_path(conf, "crawldb")
    meter = MemMeter(spark, names=args.job_names)
    watch_collections(meter)
    if args.no_host_slice:
        without_host_slice()
    out = {"shape": shape, "layout": args.layout + (" (no host slice)" if args.no_host_slice else "")
           + (", hosts with DVs" if args.hosts_dv else ""),
           "settings": args.set, "rounds": []}
    try:
        with meter.step(f"LAYOUT {args.layout}"):
            apply_layout(spark, path, args.layout)
            if args.hosts_dv:  # schemas/tables.py keeps them off for hosts (a small table, it assumed)
                spark.sql(f"ALTER TABLE delta.`{common.table_path(conf, 'hosts')}` "
                          "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
        out["files"] = files_of(spark, path)
        V.instrument(meter)
        now, row = dt.datetime.fromisoformat(shape["now"]), None
        for i in range(args.repeat):
            with meter.step("GENERATE"):
                g = generate.run(spark, conf, now=now, row=row)
            with meter.step("URL-SEEN (fetch_input known_fps)"):
                seen = url_seen(spark, conf, g["round"])
            with meter.step(f"synthetic fetch ({g['generated']:,} URLs)"):
                row = V.synthetic_fetch(spark, conf, g["round"], args.links, g["row"], now)
            with meter.step("UPDATE"):
                u = update.run(spark, conf, round_no=g["round"], row=row, now=now)
            row = u["row"]
            if args.optimize_each_round:
                with meter.step("OPTIMIZE (cadence: every round)"):
                    optimize(spark, path, args.layout)
            out["rounds"].append({"round": g["round"], "generated": g["generated"], "new_urls": u["new_urls"],
                                  "url_seen": seen, "files_after": files_of(spark, path)})
            now = now + dt.timedelta(seconds=1)
    except Exception as e:  # noqa: BLE001 - a run that dies (driver memory) is a result: its steps so far are kept
        out["error"] = f"{type(e).__name__}: {str(e)[:400]}"
    finally:
        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - the JVM is gone
            pass
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    out["load"] = [round(load0[0], 1), round(os.getloadavg()[0], 1)]
    out["steps"] = meter.rows
    print(f"bigdb {out['layout']}: {shape['rows']:,} rows, {shape['hosts_with_rows']:,} hosts (top {shape['top_hosts'][:3]}); "
          f"load {out['load'][0]} -> {out['load'][1]}; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(report(meter.rows))
    for r in out["rounds"]:
        print(r)
    if "error" in out:
        print("DIED:", out["error"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return 1 if "error" in out else 0


def report(rows: list[dict]) -> str:
    lines = [f"{'step':<48} {'s':>7} {'cpu s':>6} {'jobs':>5} {'heap':>6} {'old':>6} {'jvmRSS':>6} {'pyRSS':>6}  (MiB peaks)"]
    for r in rows:
        if r["depth"] > 1:
            continue
        lines.append(f"{'  ' * r['depth'] + r['step']:<48} {r['seconds']:>7.1f} {r.get('cpu_s', 0):>6.1f} {r['jobs']:>5} "
                     f"{r.get('heap_peak_mib', 0):>6.0f} {r.get('old_gen_peak_mib', 0):>6.0f} "
                     f"{r.get('jvm_rss_peak_mib', 0):>6.0f} {r.get('py_rss_peak_mib', 0):>6.0f}")
        if r["depth"] == 0 and r.get("to_arrow"):
            lines += [f"      to driver: {w}: {n:,} rows, {m} MiB" for w, n, m in r["to_arrow"]]
    return "\n".join(lines)


def summary(paths: list[str]) -> str:
    """A Markdown table of ``run --json`` files: per layout and round, the verbs' figures (wall s, CPU s
    of the process tree, Spark jobs; update's crawl-DB gather, decisions and MERGEs in CPU s)."""
    head = ("| rows | layout | round | generate s (cpu) / jobs | update s (cpu) / jobs | gather scan cpu "
            "| decide cpu (gather incl.) | crawl-DB write / hosts MERGE cpu | JVM heap / old gen / RSS peak MiB | Python RSS peak MiB "
            "| gathered crawl-DB rows (MiB) | URL-SEEN s (cpu) / jobs | known_fps: hosts, fps, largest host, MiB |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for path in paths:
        d = json.loads(Path(path).read_text())
        steps = d["steps"]
        tops = [r for r in steps if r["depth"] == 0]
        extra = [x for x in d["settings"] if x not in DEFAULT_SETS and "learn_patterns" not in x]
        layout = d["layout"] + "".join(f", `{x}`" for x in extra)
        for k, rnd in enumerate(d["rounds"]):
            g, u, s = ([r for r in tops if r["step"].startswith(name)][k] for name in ("GENERATE", "UPDATE", "URL-SEEN"))
            at = steps.index(u)
            end = next((i for i in range(at + 1, len(steps)) if steps[i]["depth"] == 0), len(steps))
            inside = steps[at:end]  # the update's own steps

            def cpu(name: str, pick=lambda rows: rows[0]) -> str:
                rows = [r for r in inside if r["step"] == name]
                return f"{pick(rows)['cpu_s']:.1f}" if rows else "-"  # the spark engine has no gather
            scan = cpu("duck_engine.from_spark_all", lambda rows: rows[-1])  # the crawl DB's, hosts' side by side
            if scan == "-":  # runs before the gather's collects went side by side
                scan = cpu("duck_engine.from_spark", lambda rows: max(rows[:4], key=lambda r: r["cpu_s"]))
            def write(*names: str) -> str:  # the step's name in the run's code (the crawl DB's was a MERGE before)
                return next((c for n in names for c in (cpu(f"update_commit.{n}"), cpu(f"update._{n}")) if c != "-"), "-")
            merges = f"{write('replace_crawldb', 'merge_crawldb')} / {write('merge_hosts')}"
            gathered = next((x for x in u.get("to_arrow", []) if x[0] in ("crawldb", "39 cols")),  # the crawl DB's width
                            ("-", 0, "-"))
            seen, peak = rnd["url_seen"], {key: max(g[key], u[key]) for key in
                                          ("heap_peak_mib", "old_gen_peak_mib", "jvm_rss_peak_mib", "py_rss_peak_mib")}
            lines.append(
                f"| {d['shape']['rows']:,} | {layout} | {rnd['round']} "
                f"| {g['seconds']:.1f} ({g['cpu_s']:.1f}) / {g['jobs']} | {u['seconds']:.1f} ({u['cpu_s']:.1f}) / {u['jobs']} "
                f"| {scan} | {cpu('update.decide')} | {merges} "
                f"| {peak['heap_peak_mib']:.0f} / {peak['old_gen_peak_mib']:.0f} / {peak['jvm_rss_peak_mib']:.0f} "
                f"| {peak['py_rss_peak_mib']:.0f} | {gathered[1]:,} ({gathered[2]}) "
                f"| {s['seconds']:.1f} ({s['cpu_s']:.1f}) / {s['jobs']} | {seen['hosts']:,}, {seen['known_fps']:,}, "
                f"{seen['largest_host_fps']:,}, {seen['mib_shipped']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("build", "run"):
        s = sub.add_parser(name)
        s.add_argument("--dir", required=True, help="where the built tables are (build: written; run: copied from)")
        s.add_argument("--round", type=int, default=10_000, help="URLs due now: the round's size (top_n, and the per-host cap)")
        s.add_argument("--set", action="append", default=list(DEFAULT_SETS),
                       help="a configuration KEY=VALUE (repeatable; the default lets a host take the whole round)")
    b = sub.choices["build"]
    b.add_argument("--rows", type=int, default=1_000_000, help="crawl DB rows")
    b.add_argument("--hosts", type=int, default=0, help="host space H (0: rows / 5)")
    r = sub.choices["run"]
    r.add_argument("--layout", choices=LAYOUTS, default="as-written")
    r.add_argument("--work", help="the run's copy (default <dir>-run; removed after unless --keep)")
    r.add_argument("--keep", action="store_true")
    r.add_argument("--links", type=int, default=4, help="outlinks per fetched page")
    r.add_argument("--repeat", type=int, default=2, help="rounds (the first pays the JVM's first jobs)")
    r.add_argument("--optimize-each-round", action="store_true", help="OPTIMIZE after every update, timed")
    r.add_argument("--no-host-slice", action="store_true",
                   help="dedup.learn_patterns off, the gather's key 2 (learning hosts' sampled pages) empty (see without_host_slice)")
    r.add_argument("--hosts-dv", action="store_true", help="deletion vectors on for the hosts table too")
    r.add_argument("--job-names", action="store_true")
    r.add_argument("--json", help="also write the raw figures here")
    sm = sub.add_parser("summary", help="a Markdown table of run --json files")
    sm.add_argument("json", nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "summary":
        print(summary(args.json))
        return 0
    return build(args) if args.cmd == "build" else run(args)


if __name__ == "__main__":
    sys.exit(main())
