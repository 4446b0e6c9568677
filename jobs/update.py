"""``deltacrawl update``: merge one fetched round into ``crawldb`` and ``hosts``, append its log.

Only this verb changes ``crawldb`` (besides inject's insert-if-absent and link importance): it
replaces the rows of the round's URLs. Round N is updated when the ledger says ``fetched``; ``updated``
returns ``{"skipped": True}``; ``generated``/``fetching`` is refused.

Inputs: round N's ``fetch_output`` (one ``page`` row per fetch-list URL, one per
URL followed inside the round and tried, flagged ``in_round`` with its depth,
score and source, one ``host`` row per host) and ``fetch_list`` (the parents'
depth, score, hops). An ``in_round`` URL is absent from ``crawldb``: it goes
through the table below as a fetch-list URL would, inserted (first_seen,
discovered_round = N, source_fp = its parent) with its outcome's status; as an
outlink of its parent it is also a new URL, and the fetched row wins.
Transforms: ``jobs/update_transforms.py`` (crawl DB) and ``jobs/hosts_transforms.py`` (hosts, traps, budgets). Outputs
(1. then 2. in one thread, 3. beside them in another: each write is guarded on its own,
:func:`jobs.update_commit.commit`):

1. The round's ``crawldb`` rows replaced, in one commit (``update_commit.replace_crawldb``); source =
   updated rows ∪ new URLs ∪ budget rows ∪ re-pointed copies ∪ due URLs ∪ moved-to URLs, one row per
   url_fp (update > repoint > new > budget > due > moved), flag ``_kind``, each made the whole row
   written (``crawldb_rows.whole_rows``): an update or budget row as decided; a ``repoint`` row
   sets status, dup_of, updated_round; a ``due`` row next_fetch_time, updated_round (a sitemap's
   lastmod or a robots.txt refresh: ``jobs/sitemap_transforms.py``); a ``moved`` row score, the change
   history, updated_round (a 301/308 to a known URL: ``update_transforms.moved_to_known``); the rest of
   a known URL's row, and its ``importance`` always, as read. A new URL is inserted; a partial row of
   a URL the crawl DB lacks is dropped. ``txnAppId = deltacrawl-update-crawldb``, ``txnVersion = N``.
2. MERGE into ``hosts`` on ``host``, guarded by ``t.updated_round < N``.
3. Appends to ``fetch_log`` and ``links`` (and ``near_dup_index`` with ``dedup.near_duplicates``) with
   ``txnAppId = deltacrawl-update-<table>``, ``txnVersion = N``: a rerun of round N appends nothing.
4. Ledger N ``updated`` with its counters (``schemas/counters.py``, verb update) and ``seconds.update`` (and
   ``seconds.round`` when ``rounds.crawl`` passes the round's start).
5. When N is a multiple of ``importance.every_rounds``: link importance recomputed
   (``jobs/importance.py``, its own MERGE of ``crawldb.importance``, a column step 1 writes back as
   read). After the ledger write, so a crash there costs one refresh, not the round.

The state-transition table (which outcome moves a URL to which status, and when it is due
again), what "changed" means, the schedule, exact and near duplicates, originals that go, URL
patterns, new URLs, budgets, traps, idempotence and what update scans: ``docs/UPDATE.md``.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from typing import Any, Callable

from crawl_udfs.config import Config
from jobs import common, importance, ledger, update_commit
from jobs import crawldb_slice as S
from jobs import dedup_transforms as D
from jobs import exact_dup_transforms as X
from jobs import hosts_transforms as HT
from jobs import originals as O
from jobs import pattern_transforms as P
from jobs import schedule_transforms as SC
from jobs import sitemap_transforms as SM
from jobs import update_transforms as T
from jobs.crawldb_rows import whole_rows
from jobs.discover_transforms import discover
from jobs.generate import max_urls_per_host
from jobs.update_counters import Counters
from schemas import counters
from schemas.tables import CRAWLDB, NEAR_DUP_INDEX, TABLES

#: Adaptive execution off while update plans and writes (why: ``common.STATIC_PLANS``).
STATIC_PLANS = common.STATIC_PLANS


@dataclass(frozen=True)
class Plan:
    """What one round's update writes (lazy DataFrames)."""

    updated: Any          # updated crawl-DB rows of the fetch-list URLs (+ helper columns)
    crawldb_source: Any   # CRAWLDB columns + _kind, one row per url_fp
    hosts: Any            # HOSTS rows to merge
    fetch_log: Any
    links: Any
    near_dup_index: Any = None  # NEAR_DUP_INDEX rows to append (dedup.near_duplicates on), else None


def plan(crawldb, hosts, fetch_output, fetch_list, conf: Config, *, round_no: int, now: dt.datetime,
         near_dup_index=None, keep: Callable[[Any], Any] = lambda df: df,
         observe: Callable[[str, Any], Any] = lambda name, df: df) -> Plan:
    """The whole update of one round as DataFrames, from the inputs as they were before it.

    ``keep`` is applied to the intermediate results used more than once (``run``
    writes each to Parquet and reads it back, see :func:`_staged`; a test may
    pass ``DataFrame.persist``): without it every use recomputes its whole lineage.
    ``observe(name, df)`` is applied to the one full scan of the crawl DB that the
    first of them computes (name ``crawldb``, before the semi-join with the round's
    URLs) and to the new hosts rows before they are kept (``hosts``): ``run`` counts
    its counters there (:class:`jobs.update_counters.Counters`), so no count needs a job of its own.
    With ``dedup.near_duplicates`` on, ``near_dup_index`` (the table, read whole: only rows of earlier
    rounds are used) is where the round's first copies are looked up (``jobs/dedup_transforms.py``);
    the near-duplicates found (``near_duplicates``, observed) become duplicates like exact ones, and
    the round's other first copies are the index rows to append. Trap detection then reads the round
    with both kinds of duplicates marked and that same lookup (``hosts_transforms.trap_signals``).
    With ``schedule.policy = "adaptive"`` the round's Lagrange multiplier is computed here, eagerly (one
    job over the kept page rows and the crawl DB's stored rows: ``schedule_transforms.round_multiplier``).
    """
    from pyspark.sql import functions as F

    park = conf.politeness.failure_park_duration_s
    fetch_output = keep(fetch_output)  # the round's rows, read by four plans: one Delta read
    # the crawl DB's rows keyed by the round's URLs and hosts, in one read (jobs/crawldb_slice.py)
    known = keep(S.round_slice(observe("crawldb", crawldb), fetch_output))
    prepared = keep(T.prepare(fetch_output, T.with_followed(fetch_list, fetch_output), known))
    nxt = HT.host_next(hosts, fetch_output, park_duration_s=park, now=now)
    priors = SC.host_priors(hosts, conf.schedule)
    mu = None
    if conf.schedule.policy == "adaptive":  # the round's multiplier: one job (a bucketed collect)
        mu = SC.round_multiplier(T.with_rates(prepared, conf.schedule, priors), conf.schedule, cat=F.col(T.CAT),
                                 crawldb=crawldb)
    fresh = keep(T.transition(prepared, nxt, conf.schedule, round_no=round_no, now=now, priors=priors,
                              multiplier=mu))
    members = keep(X.exact_members(fresh, crawldb))
    dup_iv = conf.schedule.duplicate_interval_s
    updated = X.mark_duplicates(fresh, crawldb, duplicate_interval_s=dup_iv, members=members)
    demoted = X.exact_demotions(members)
    index_rows = near = None
    if conf.dedup.near_duplicates:
        k, d = conf.simhash.near_duplicate_bits, conf.dedup
        if near_dup_index is None:  # no index yet (a caller with no table): the round's pages among themselves
            near_dup_index = crawldb.sparkSession.createDataFrame([], NEAR_DUP_INDEX)
        cands = keep(D.candidates(updated, prepared))
        near = keep(observe("near_duplicates", D.near_duplicate_of(
            cands, near_dup_index, round_no=round_no, near_bits=k, jaccard_threshold=d.jaccard_threshold,
            length_ratio=d.length_ratio, max_bucket_rows=d.max_bucket_rows,
            left=O.left_pages(crawldb))))
        updated = D.mark_near_duplicates(updated, near, duplicate_interval_s=dup_iv)
        index_rows = D.index_rows(cands, near, round_no=round_no, near_bits=k)
        demoted = demoted.unionByName(D.demotions(updated, near))
    updated = keep(updated)  # both duplicate steps in one pass
    gone = O.leaving(updated, demoted, was=T.WAS, changed=T.CHANGED)
    repointed = None
    if not gone.isEmpty():  # one small job; most rounds no original leaves, and nothing is re-pointed
        decided = keep(O.repoint(updated, crawldb, gone))
        updated = keep(O.repointed(updated, decided))
        repointed = O.repointed_rows(decided, round_no=round_no, was=T.WAS)
    new = discover(prepared, known, conf.scope, duplicates=updated, follow_nofollow=conf.parse.follow_nofollow,
                   default_interval_s=conf.schedule.default_interval_s, round_no=round_no, now=now)
    # sitemaps: due again on a robots.txt refresh; a lastmod after a URL's last fetch makes it due now
    sitemaps, due = SM.robots_refresh(fetch_output, known, now=now, round_no=round_no, score=conf.inject.score,
                                      default_interval_s=conf.schedule.default_interval_s)
    new = new.unionByName(sitemaps, allowMissingColumns=True)
    due = due.unionByName(SM.lastmod_due(prepared, known, now=now, round_no=round_no))
    signals = HT.trap_signals(updated, near, known)  # the same lookup: copies of a host's own pages
    counts = HT.page_counts(updated).join(signals, "host", "left")
    hosts_new = HT.hosts_update(hosts, fetch_output, counts, park_duration_s=park, round_no=round_no, now=now)
    hosts_new = HT.judge_traps(hosts_new, conf.trap, base_cap=max_urls_per_host(conf), now=now)
    budgets = (hosts, conf.budget.max_pages_per_host, conf.budget.max_bytes_per_host)
    hosts_new = HT.exhausted_hosts(hosts_new, *budgets)[0]
    if conf.dedup.learn_patterns:  # the round's hosts' duplicate URL patterns, from their pages as left now
        learning = P.learning_hosts(fetch_output, fetch_list, hosts, sample_pages=conf.dedup.pattern_sample_pages)
        learnt = P.learn(P.stored_pages(known, updated, learning), min_pages=conf.dedup.pattern_min_pages,
                         min_share=conf.dedup.pattern_min_share)
        hosts_new = P.with_patterns(hosts_new, learnt, learning)
    hosts_new = keep(observe("hosts", common.conform(hosts_new, TABLES["hosts"])))
    _, reached, exhausted = HT.exhausted_hosts(hosts_new, *budgets)  # from the kept rows: nothing recomputed
    # the crawl DB is scanned for budget rows only in a round where a host reached its budget (one small
    # job to know); else the slice, where an empty set of hosts finds no row either
    budget = HT.budget_rows(known if reached.isEmpty() else crawldb, reached, round_no=round_no)
    moved = T.moved_to_known(prepared, known, round_no=round_no)  # a 301/308 to a known URL: score, history
    # computed once, by its staging write; whole rows from the crawl DB as read (one more scan, keyed)
    source = whole_rows(T.merge_source(updated, new, budget, exhausted, repointed, due, moved), crawldb)
    return Plan(updated=updated, crawldb_source=source, hosts=hosts_new,
                fetch_log=T.fetch_log_rows(prepared, updated, round_no=round_no),
                links=T.link_rows(prepared, round_no=round_no), near_dup_index=index_rows)


def run(spark, conf: Config, *, round_no: int | None = None, now: dt.datetime | None = None,
        round_started: float | None = None, row: dict | None = None) -> dict:
    """Update round ``round_no`` (default: the last). ``round_started`` (a ``time.perf_counter()``
    value, from ``rounds.crawl``) also records the round's wall time as ``seconds.round``; ``row`` is
    the round's ledger row when the caller has it. The ledger row written comes back under ``row``."""
    import time

    with common.Timer() as timer:
        st = ledger.step(spark, conf, "update", round_no=round_no, row=row)
        n, row = st.round, st.row
        if st.action == "skip":
            _remove(staging_dir(conf, n), conf)  # left by a crash between the ledger write and its removal
            return {"round": n, "skipped": True, "state": row["state"], "row": row}
        now = now or row.get("fetched_at") or common.now_utc()
        if row.get("crawldb_version") is None or row.get("hosts_version") is None:
            row = ledger.set_state(spark, conf, n, "fetched", old=row, crawldb_version=common.version(spark, conf, "crawldb"),
                                   hosts_version=common.version(spark, conf, "hosts"))
        with common.session_conf(spark, STATIC_PLANS):
            counts = _write(spark, conf, n, row, now)
    seconds = {"update": timer.seconds}
    if round_started is not None:
        seconds["round"] = time.perf_counter() - round_started
    row = ledger.set_state(spark, conf, n, "updated", counts=counters.checked("update", counts), seconds=seconds,
                           old=row)
    _remove(staging_dir(conf, n), conf)
    ranked = importance.run(spark, conf) if importance.due(conf, n) else {}  # after the round: a crash skips one
    return {"round": n, "skipped": False, **counts, **ranked, "row": row}


def _write(spark, conf: Config, n: int, row: dict, now: dt.datetime) -> dict[str, int]:
    """Round ``n``'s plan staged, its counters counted by the same writes, its MERGEs and appends committed."""
    from pyspark.sql import functions as F

    tag = f"deltacrawl update round {n}"
    crawldb = common.read_at(spark, conf, "crawldb", row["crawldb_version"])
    hosts = common.read_at(spark, conf, "hosts", row["hosts_version"])
    fetch_output = common.read(spark, conf, "fetch_output").where(F.col("round") == n)
    fetch_list = common.read(spark, conf, "fetch_list").where(F.col("round") == n)
    index = common.read(spark, conf, "near_dup_index") if conf.dedup.near_duplicates else None
    stage = staging_dir(conf, n)
    kept = itertools.count()

    def keep(df):  # intermediate results: written once, read back with a one-scan lineage
        return _staged(spark, df, f"{stage}/part-{next(kept)}")
    observed = Counters(now)
    if conf.update.engine == "driver":  # the decisions in DuckDB on the driver (jobs/update_decide.py)
        staged = _decided(spark, conf, n, now, crawldb, hosts, fetch_output, fetch_list, index, stage, observed)
    else:
        p = plan(crawldb, hosts, fetch_output, fetch_list, conf, round_no=n, now=now, near_dup_index=index, keep=keep,
                 observe=observed)
        # the plan is computed once, into Parquet, before any commit; the counters by the same writes
        staged = {name: _staged(spark, observed(name, df), f"{stage}/{name}") for name, df in _sources(p)}
        staged["hosts"] = p.hosts  # already staged by ``keep``
    counts = {"near_duplicates": 0, "near_dup_index": 0, **observed.counts()}  # declared: written, 0 with the key off
    update_commit.commit(spark, conf, staged, n, tag, pinned=row["crawldb_version"])
    return counts


def _sources(p: Plan) -> list[tuple[str, Any]]:
    """The plan's MERGE and append sources (besides ``hosts``), by table."""
    sources = [("crawldb_source", p.crawldb_source), ("fetch_log", p.fetch_log), ("links", p.links)]
    if p.near_dup_index is not None:
        sources.append(("near_dup_index", p.near_dup_index))
    return sources


def _decided(spark, conf: Config, n: int, now: dt.datetime, crawldb, hosts, fetch_output, fetch_list, index,
             stage: str, observed: Counters) -> dict[str, Any]:
    """The driver engine's sources (:func:`decide`), written to Parquet by pyarrow and read back by Spark."""
    tables = decide(spark, conf, n, now, crawldb, hosts, fetch_output, fetch_list, index, observed)
    return {name: _staged_arrow(spark, conf, table, _schema(name), f"{stage}/{name}") for name, table in tables.items()}


def decide(spark, conf: Config, n: int, now: dt.datetime, crawldb, hosts, fetch_output, fetch_list, index,
           observed: Counters) -> dict[str, Any]:
    """The driver engine: Spark gathers the keyed rows (``jobs/update_gather.py``, one crawl-DB scan), DuckDB
    decides (``jobs/update_decide.py``). The MERGE and append sources as Arrow tables of their schemas, by
    name (``crawldb_source``, ``fetch_log``, ``links``, ``hosts``, and ``near_dup_index`` when on), counted."""
    from jobs import duck_engine as E
    from jobs import duck_patterns as DP
    from jobs import update_decide
    from jobs import update_gather as G

    con = E.connect(conf.update.driver_threads)
    try:  # the round's rows collected first: the key sets are computed from them on the driver, and each
        # crawl-DB, hosts and index read is one scan joined with a broadcast of local rows
        first = {"fetch_output": fetch_output, "fetch_list": fetch_list}
        inputs = {**E.from_spark_all(con, first), "near_dup_index": None}
        fo = inputs["fetch_output"]
        index_fps = None
        if index is not None:
            bk = E.to_spark(spark, G.block_keys(con, fo, conf.simhash.near_duplicate_bits), _key_schema("block_key"))
            inputs["near_dup_index"] = E.from_spark(con, G.index_rows(index, bk, round_no=n), "near_dup_index")
            index_fps = inputs["near_dup_index"].project("url_fp")
        keys = G.Keys(**{name: E.to_spark(spark, rel, _key_schema(rel.columns[0]))
                         for name, rel in G.keys(con, fo, index_fps).items()})
        learning = None
        if conf.dedup.learn_patterns:  # which hosts relearn: by their pages_fetched as listed, else as stored
            unlisted = E.register(con, DP.unlisted_hosts(fo, inputs["fetch_list"]), "unlisted")
            stored = _unlisted_hosts_rows(spark, con, hosts, unlisted)
            inputs["learning"] = E.register(con, DP.learning_hosts(fo, inputs["fetch_list"], stored,
                                                                   sample_pages=conf.dedup.pattern_sample_pages),
                                            "learning")
            learning = E.to_spark(spark, inputs["learning"], _learning_schema())
        gathered = {"crawldb": G.crawldb_rows(crawldb, keys, learning, observe=observed),
                    "hosts": G.hosts_rows(hosts, keys, conf)}
        if conf.schedule.policy == "adaptive":  # the round's multiplier weighs the crawl DB's other stored pages
            gathered["stored_buckets"] = G.stored_buckets(crawldb, fetch_output, conf.schedule)
        inputs.update(E.from_spark_all(con, gathered))
        early = {}
        if learning is not None:  # pattern learning's counterparts, read while DuckDB decides the round
            likely = E.register(con, DP.likely_counterparts(con, inputs["crawldb"], fo, inputs["learning"]), "likely")
            if likely.aggregate("count(*)").fetchall()[0][0]:
                fps = E.to_spark(spark, likely, _key_schema("url_fp"))
                early["counterparts"] = (E.background(G.counterpart_rows(crawldb, fps).toArrow), likely)

        def read(kind: str, keys):
            rows = {"repoint": G.repoint_rows, "budget": G.budget_rows, "counterparts": G.counterpart_rows}[kind]
            return E.from_spark(con, rows(crawldb, E.to_spark(spark, keys, _key_schema(keys.columns[0]))),
                                f"more_{kind}")

        def more(kind: str, keys):
            if kind not in early:
                return read(kind, keys)
            future, asked = early.pop(kind)  # read already, for a superset of the keys the plan asks now
            con.register(f"early_{kind}", future.result())
            got = E.query(con, "SELECT * FROM {r} WHERE url_fp IN (SELECT url_fp FROM {k})",
                          r=con.view(f"early_{kind}"), k=keys)
            rest = E.query(con, "SELECT url_fp FROM {k} EXCEPT SELECT url_fp FROM {a}", k=keys, a=asked)
            if rest.aggregate("count(*)").fetchall()[0][0]:  # not foreseen (none expected): read them too
                got = E.query(con, "SELECT * FROM {g} UNION ALL SELECT * FROM {r}", g=got, r=read(kind, rest))
            return got
        try:
            p = update_decide.plan(con, inputs, conf, round_no=n, now=now, more=more, count=observed.count)
        finally:
            for future, _ in early.values():  # not asked for: wait (no Spark job outlives the update); its
                future.exception()              # error, if any, is moot: nothing read its rows
        tables = {}
        for name, rel in [*_sources(p), ("hosts", p.hosts)]:
            tables[name] = E.cast_to(rel, _schema(name)).to_arrow_table()  # computed once: counted, then written
            observed.count(name, con.from_arrow(tables[name]))
        return tables
    finally:
        con.close()


def _schema(name: str):
    """The schema of a source: its table's, and for the crawl-DB write's source CRAWLDB + ``_kind``, ``_was``."""
    from pyspark.sql.types import StringType, StructField, StructType
    if name != "crawldb_source":
        return TABLES[name].schema
    return StructType([*CRAWLDB.fields, StructField("_kind", StringType()), StructField(T.WAS, StringType())])


def _learning_schema():
    """``pattern_transforms.learning_hosts``' rows, as the gather's key 2 broadcasts them."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    return StructType([StructField("host", StringType()), StructField("threshold", LongType())])


def _unlisted_hosts_rows(spark, con, hosts, unlisted):
    """``host``, ``pages_fetched`` of the ``hosts`` rows of ``unlisted`` (``duck_patterns.unlisted_hosts``): read
    only for a round listed before the fetch list carried ``pages_fetched``; else no rows and no Spark job."""
    from pyspark.sql import functions as F

    from jobs import duck_engine as E
    if not unlisted.aggregate("count(*)").fetchall()[0][0]:
        return E.query(con, "SELECT host, NULL::BIGINT AS pages_fetched FROM {u} WHERE FALSE", u=unlisted)
    keys = F.broadcast(E.to_spark(spark, unlisted, _key_schema("host")))
    return E.from_spark(con, hosts.join(keys, "host", "left_semi").select("host", "pages_fetched"), "round_hosts")


def _key_schema(column: str):
    """The one-column schema of a key set: ``url_fp``/``block_key`` (long), ``host``/``digest`` (string)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType
    return StructType([StructField(column, LongType() if column in ("url_fp", "block_key") else StringType())])


def _staged_arrow(spark, conf: Config, table, schema, path: str):
    """An Arrow table written once as Parquet (pyarrow, any ``storage.root``) and read back by Spark with ``schema``."""
    import pyarrow.parquet as pq

    from jobs.warc_staging import filesystem
    fs, base = filesystem(path, conf)
    fs.create_dir(base, recursive=True)
    pq.write_table(table, f"{base}/part-0.parquet", filesystem=fs)
    return spark.read.schema(schema).parquet(path)


def staging_dir(conf: Config, n: int) -> str:
    """Where round N's MERGE sources and intermediate results are written (removed once it is ``updated``)."""
    return f"{common.root(conf)}/staging/update/round={int(n)}"


def _staged(spark, df, path: str):
    """``df`` written once as Parquet and read back: later steps scan a file.

    Used for the MERGE sources and for the plan's intermediate results (the
    ``keep`` of :func:`plan`). Measured (2 cores, UI job timings): handed the
    lazy plan, the crawl-DB MERGE of an 80-URL round took 34 s in ~270 Spark
    jobs, of which Delta's own MERGE was 3 s; the rest was Spark recomputing
    cached plans that read the table the commit had just changed. Staging the
    MERGE sources (caches dropped before the first commit) left update at
    35–49 s for rounds of 270–1,000 URLs on 40 hosts; staging the intermediate
    results instead of caching them brought it to 26–32 s: each later plan
    starts from a small file, so Spark analyses and plans much less (building
    the plan, staged writes aside, went from 10–12 s of driver time to ~2 s).
    A crash after these writes is harmless: the rerun rewrites the same rows
    from the same pre-round snapshots.
    """
    df.write.mode("overwrite").parquet(path)
    return spark.read.schema(df.schema).parquet(path)  # the schema known: no job to read it from a footer


def _remove(path: str, conf: Config) -> None:
    from jobs.warc_staging import filesystem
    fs, base = filesystem(path, conf)
    try:
        fs.delete_dir(base)
    except FileNotFoundError:
        pass
