"""The duplicate steps of ``update.plan`` run twice, by the Spark transforms and by their DuckDB twins
(``jobs/duck_duplicates.py``, ``jobs/duck_originals.py``), on one round's inputs built by the Spark pipeline.

:func:`round_inputs` builds ``fresh`` and ``prepared`` from page and crawl-DB rows with ``T.prepare`` and
``T.transition``, as ``update.plan`` does; :func:`both_plans` runs ``plan``'s middle, from ``fresh`` to
``updated``/``gone``/``repointed``/``near``/``index_rows``/``demoted``, once per engine (the DuckDB chain
fed by its own results, as the engine will be), and returns every step's pair for ``assert_same``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT, HOSTS, NEAR_DUP_INDEX
from tests.test_update import NOW, frame


@dataclass
class Inputs:
    fresh: Any
    prepared: Any
    crawldb: Any
    index: Any


def round_inputs(spark, olds: list[dict], pages: list[dict], *, round_no: int, conf, index: list[dict] = (),
                 hosts: list[dict] = (), now: dt.datetime = NOW) -> Inputs:
    """``fresh`` and ``prepared`` of one round as ``update.plan`` computes them (kept: both engines read the
    same rows), the crawl DB and the near-duplicate index as DataFrames."""
    from jobs import crawldb_slice as S
    from jobs import hosts_transforms as HT
    from jobs import update_transforms as T

    crawldb = frame(spark, olds, CRAWLDB).localCheckpoint()
    fetch_output = frame(spark, pages, FETCH_OUTPUT)
    known = S.round_slice(crawldb, fetch_output)
    prepared = T.prepare(fetch_output, T.with_followed(frame(spark, [], FETCH_LIST), fetch_output), known)
    prepared = prepared.localCheckpoint()
    nxt = HT.host_next(frame(spark, list(hosts), HOSTS), fetch_output,
                       park_duration_s=conf.politeness.failure_park_duration_s, now=now)
    fresh = T.transition(prepared, nxt, conf.schedule, round_no=round_no, now=now).localCheckpoint()
    return Inputs(fresh, prepared, crawldb, frame(spark, list(index), NEAR_DUP_INDEX).localCheckpoint())


#: The steps of :func:`spark_plan` and :func:`duck_plan`, in ``update.plan``'s order.
STEPS = ("exact_members", "with_original", "mark_duplicates", "mark_duplicates_alone", "exact_demotions",
         "candidates", "left_pages", "near_duplicate_of", "mark_near_duplicates", "index_rows", "demotions",
         "leaving", "repoint", "repointed", "repointed_rows")


def spark_plan(inp: Inputs, conf, *, round_no: int) -> dict[str, Any]:
    """Each step of ``update.plan`` from ``fresh`` to the re-pointed rows, by the Spark transforms (the
    results ``plan`` keeps are checkpointed); ``dedup.near_duplicates`` on."""
    from jobs import dedup_transforms as D
    from jobs import exact_dup_transforms as X
    from jobs import originals as O
    from jobs import update_transforms as T

    iv, k, dd = conf.schedule.duplicate_interval_s, conf.simhash.near_duplicate_bits, conf.dedup
    fresh, crawldb = inp.fresh, inp.crawldb
    out = {}

    def keep(name, df):
        out[name] = df.localCheckpoint()
        return out[name]
    members = keep("exact_members", X.exact_members(fresh, crawldb))
    out["with_original"] = O.with_original(members, "digest")
    updated = keep("mark_duplicates", X.mark_duplicates(fresh, crawldb, duplicate_interval_s=iv, members=members))
    out["mark_duplicates_alone"] = X.mark_duplicates(fresh, crawldb, duplicate_interval_s=iv)
    demoted = keep("exact_demotions", X.exact_demotions(members))
    cands = keep("candidates", D.candidates(updated, inp.prepared))
    left = keep("left_pages", O.left_pages(crawldb))
    near = keep("near_duplicate_of", D.near_duplicate_of(cands, inp.index, left=left, **lookup(conf, round_no)))
    updated = keep("mark_near_duplicates", D.mark_near_duplicates(updated, near, duplicate_interval_s=iv))
    out["index_rows"] = D.index_rows(cands, near, round_no=round_no, near_bits=k)
    demoted = demoted.unionByName(keep("demotions", D.demotions(updated, near)))
    gone = keep("leaving", O.leaving(updated, demoted, was=T.WAS, changed=T.CHANGED))
    decided = keep("repoint", O.repoint(updated, crawldb, gone))
    out["repointed"] = O.repointed(updated, decided)
    out["repointed_rows"] = O.repointed_rows(decided, round_no=round_no, was=T.WAS)
    return out


def duck_plan(con, fresh, prepared, crawldb, index, conf, *, round_no: int) -> dict[str, Any]:
    """:func:`spark_plan` by the DuckDB twins, on relations, each step fed by the twins' own results (the
    results ``plan`` keeps are materialised, as the engine will)."""
    from jobs import duck_duplicates as DD
    from jobs import duck_originals as DO
    from jobs import update_transforms as T

    iv, k = conf.schedule.duplicate_interval_s, conf.simhash.near_duplicate_bits
    out = {}

    def keep(name, rel):
        rel.create(f"kept_{name}")  # what duck_engine.register does (its own check leaves a result open)
        out[name] = con.table(f"kept_{name}")
        return out[name]
    members = keep("exact_members", DD.exact_members(con, fresh, crawldb))
    out["with_original"] = DO.with_original(con, members, "digest")
    updated = keep("mark_duplicates", DD.mark_duplicates(con, fresh, crawldb, duplicate_interval_s=iv,
                                                         members=members))
    out["mark_duplicates_alone"] = DD.mark_duplicates(con, fresh, crawldb, duplicate_interval_s=iv)
    demoted = keep("exact_demotions", DD.exact_demotions(con, members))
    cands = keep("candidates", DD.candidates(con, updated, prepared))
    left = keep("left_pages", DO.left_pages(con, crawldb))
    near = keep("near_duplicate_of", DD.near_duplicate_of(con, cands, index, left=left, **lookup(conf, round_no)))
    updated = keep("mark_near_duplicates", DD.mark_near_duplicates(con, updated, near, duplicate_interval_s=iv))
    out["index_rows"] = DD.index_rows(con, cands, near, round_no=round_no, near_bits=k)
    demoted = DO.query(con, "SELECT * FROM {a} UNION ALL BY NAME SELECT * FROM {b}", a=demoted,
                       b=keep("demotions", DD.demotions(con, updated, near)))
    gone = keep("leaving", DO.leaving(con, updated, demoted, was=T.WAS, changed=T.CHANGED))
    decided = keep("repoint", DO.repoint(con, updated, crawldb, gone))
    out["repointed"] = DO.repointed(con, updated, decided)
    out["repointed_rows"] = DO.repointed_rows(con, decided, round_no=round_no, was=T.WAS)
    return out


def lookup(conf, round_no: int) -> dict:
    """``near_duplicate_of``'s parameters as ``update.plan`` passes them."""
    dd = conf.dedup
    return dict(round_no=round_no, near_bits=conf.simhash.near_duplicate_bits, jaccard_threshold=dd.jaccard_threshold,
                length_ratio=dd.length_ratio, max_bucket_rows=dd.max_bucket_rows)


def both_plans(con, inp: Inputs, conf, *, round_no: int) -> list[tuple[str, Any, Any]]:
    """(step, Spark DataFrame, DuckDB relation) of each step, the same ``fresh`` fed to both engines."""
    from tests.duck_diff import duck_inputs
    d = duck_inputs(con, fresh=inp.fresh, prepared=inp.prepared, crawldb=inp.crawldb, index=inp.index)
    s_out = spark_plan(inp, conf, round_no=round_no)
    d_out = duck_plan(con, d["fresh"], d["prepared"], d["crawldb"], d["index"], conf, round_no=round_no)
    return [(name, s_out[name], d_out[name]) for name in STEPS]


def assert_steps(steps) -> dict[str, int]:
    """Every step's DuckDB relation has the Spark DataFrame's columns, types and rows; the row count of each."""
    from tests.duck_diff import assert_same
    counts = {}
    for name, sdf, rel in steps:
        try:
            assert_same(sdf, rel)
        except AssertionError as e:
            raise AssertionError(f"step {name}: {e}") from None
        counts[name] = len(rel.fetchall())
    return counts
