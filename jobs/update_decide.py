"""The decisions of one round's update, on the driver: :func:`jobs.update.plan`'s chain over DuckDB relations.

Same steps, same order, same rules as :func:`jobs.update.plan` (its docstring says what each does); each
step is the DuckDB twin of the Spark transform of the same name (``jobs/duck_*.py``, checked against it
by ``tests/test_duck_*.py``). Inputs are what :func:`jobs.update_gather.gather` collected; the two reads
that depend on decisions (copies of originals that left, URLs of hosts out of budget) are asked of
Spark through ``more`` only in a round that needs them. Outputs are relations of the MERGE and append
sources, which :mod:`jobs.update` hands to Spark as Arrow.
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any, Callable

from crawl_udfs.config import Config
from jobs import duck_engine as E
from jobs.update import Plan
from schemas.tables import TABLES


def plan(con, inputs: dict[str, Any], conf: Config, *, round_no: int, now: dt.datetime,
         more: Callable[[str, Any], Any], count: Callable[[str, Any], None] = lambda name, rel: None) -> Plan:
    """The round's MERGE and append sources as relations. ``inputs``: relations ``fetch_output``,
    ``fetch_list``, ``crawldb`` (the gathered rows), ``hosts``, ``near_dup_index`` (or None).
    ``more(kind, keys)``: ``"repoint"`` with a relation of ``url_fp`` → the crawl-DB rows
    :func:`jobs.update_gather.repoint_rows` gives; ``"budget"`` with a relation of ``host`` → those of
    :func:`jobs.update_gather.budget_rows`; ``"counterparts"`` with a relation of ``url_fp`` → those of
    :func:`jobs.update_gather.counterpart_rows`; each as a relation. ``count(name, rel)``: the counters of the
    near-duplicates found (``near_duplicates``), as ``observe`` in the Spark plan."""
    from jobs import duck_discover as DD
    from jobs import duck_duplicates as DX
    from jobs import duck_hosts as DH
    from jobs import duck_originals as DO
    from jobs import duck_outputs as DOUT
    from jobs import duck_patterns as DP
    from jobs import duck_schedule as DS
    from jobs import duck_transition as DT
    from jobs.generate import max_urls_per_host

    n = itertools.count()

    def keep(rel):
        return E.register(con, rel, f"_kept{next(n)}")

    def rows(rel) -> int:
        return rel.aggregate("count(*)").fetchall()[0][0]

    fetch_output, fetch_list, known = inputs["fetch_output"], inputs["fetch_list"], inputs["crawldb"]
    hosts, index = inputs["hosts"], inputs.get("near_dup_index")
    park = conf.politeness.failure_park_duration_s
    prepared = keep(DT.prepare(con, fetch_output, DT.with_followed(con, fetch_list, fetch_output), known))
    nxt = DT.host_next(con, hosts, fetch_output, park_duration_s=park, now=now)
    priors = DS.host_priors(con, hosts, conf.schedule)
    mu = None
    if conf.schedule.policy == "adaptive":
        mu = DS.round_multiplier(con, DT.with_rates(con, prepared, conf.schedule, priors), conf.schedule,
                                 cat=DT.CAT, stored=inputs.get("stored_buckets"))
    fresh = keep(DT.transition(con, prepared, nxt, conf.schedule, round_no=round_no, now=now, priors=priors,
                               multiplier=mu))
    members = keep(DX.exact_members(con, fresh, known))
    dup_iv = conf.schedule.duplicate_interval_s
    updated = DX.mark_duplicates(con, fresh, known, duplicate_interval_s=dup_iv, members=members)
    demoted = DX.exact_demotions(con, members)
    index_rows = near = None
    if conf.dedup.near_duplicates:
        k, d = conf.simhash.near_duplicate_bits, conf.dedup
        cands = keep(DX.candidates(con, updated, prepared))
        near = keep(DX.near_duplicate_of(con, cands, index, round_no=round_no, near_bits=k,
                                         jaccard_threshold=d.jaccard_threshold, length_ratio=d.length_ratio,
                                         max_bucket_rows=d.max_bucket_rows, left=DO.left_pages(con, known)))
        count("near_duplicates", near)
        updated = DX.mark_near_duplicates(con, updated, near, duplicate_interval_s=dup_iv)
        index_rows = DX.index_rows(con, cands, near, round_no=round_no, near_bits=k)
        demoted = E.union_by_name(con, demoted, DX.demotions(con, updated, near))
    updated = keep(updated)
    gone = keep(DO.leaving(con, updated, demoted))
    repointed, whole = None, known  # whole: the crawl-DB rows read whole (the re-pointed copies' too)
    if rows(gone):  # most rounds no original leaves, and nothing is re-pointed
        stored = keep(more("repoint", gone.project("url_fp")))
        whole = E.union_by_name(con, known, stored)
        decided = keep(DO.repoint(con, updated, stored, gone))
        updated = keep(DO.repointed(con, updated, decided))
        repointed = DO.repointed_rows(con, decided, round_no=round_no)
    new = DD.discover(con, prepared, known, conf.scope, duplicates=updated, follow_nofollow=conf.parse.follow_nofollow,
                      default_interval_s=conf.schedule.default_interval_s, round_no=round_no, now=now)
    sitemaps, due = DOUT.robots_refresh(con, fetch_output, known, now=now, round_no=round_no, score=conf.inject.score,
                                        default_interval_s=conf.schedule.default_interval_s)
    new = E.union_by_name(con, new, sitemaps)
    due = E.union_by_name(con, due, DOUT.lastmod_due(con, prepared, known, now=now, round_no=round_no))
    signals = DH.trap_signals(updated, near, known)
    counts = E.query(con, "SELECT * FROM {c} LEFT JOIN {s} USING (host)", c=DH.page_counts(updated), s=signals)
    hosts_new = DH.hosts_update(hosts, fetch_output, counts, park_duration_s=park, round_no=round_no, now=now)
    hosts_new = DH.judge_traps(hosts_new, conf.trap, base_cap=max_urls_per_host(conf), now=now)
    budgets = (hosts, conf.budget.max_pages_per_host, conf.budget.max_bytes_per_host)
    hosts_new = DH.exhausted_hosts(hosts_new, *budgets)[0]
    if conf.dedup.learn_patterns:  # the round's hosts' duplicate URL patterns, from their pages as left now
        learning = inputs.get("learning")  # what the gather read by (jobs.update.decide), else from ``hosts``
        if learning is None:
            learning = keep(DP.learning_hosts(fetch_output, fetch_list, hosts,
                                              sample_pages=conf.dedup.pattern_sample_pages))
        pages = keep(DP.stored_pages(known, updated, learning))
        missing = keep(DP.missing_counterparts(con, pages))
        if rows(missing):  # the gather holds the sampled pages; their counterparts by URL, once
            cols = "SELECT host, url, url_fp, status, dup_of FROM "
            seen = E.query(con, cols + "{k} UNION ALL " + cols + "{c}", k=known, c=more("counterparts", missing))
            pages = DP.stored_pages(seen, updated, learning)
        learnt = DP.learn(con, pages, min_pages=conf.dedup.pattern_min_pages, min_share=conf.dedup.pattern_min_share)
        hosts_new = DP.with_patterns(hosts_new, learnt, learning)
    hosts_new = keep(E.cast_to(hosts_new, TABLES["hosts"].schema))
    _, reached, exhausted = DH.exhausted_hosts(hosts_new, *budgets)
    reached = keep(reached)
    budget_src = more("budget", reached.project("host")) if rows(reached) else known  # none reached: no row
    budget = DH.budget_rows(budget_src, reached, round_no=round_no)
    moved = DD.moved_to_known(con, prepared, known, round_no=round_no)
    source = DOUT.whole_rows(con, DOUT.merge_source(con, updated, new, budget, exhausted, repointed, due, moved),
                             whole)
    return Plan(updated=updated, crawldb_source=source, hosts=hosts_new,
                fetch_log=DOUT.fetch_log_rows(con, prepared, updated, round_no=round_no),
                links=DOUT.link_rows(con, prepared, round_no=round_no), near_dup_index=index_rows)
