"""``deltacrawl update``: merge one fetched round into ``crawldb`` and ``hosts``, append its log.

Only this verb changes ``crawldb`` (besides inject's insert-if-absent), and only
by MERGE. Round N is updated when the ledger says ``fetched``; ``updated``
returns ``{"skipped": True}``; ``generated``/``fetching`` is refused.

Inputs: round N's ``fetch_output`` (one ``page`` row per fetch-list URL, one per
URL followed inside the round and tried, flagged ``in_round`` with its depth,
score and source, one ``host`` row per host) and ``fetch_list`` (the parents'
depth, score, hops). An ``in_round`` URL is absent from ``crawldb``: it goes
through the table below as a fetch-list URL would, inserted (first_seen,
discovered_round = N, source_fp = its parent) with its outcome's status; as an
outlink of its parent it is also a new URL, and the fetched row wins.
Transforms: ``jobs/update_transforms.py`` (crawl DB) and ``jobs/hosts_transforms.py`` (hosts, traps, budgets). Outputs, in this order:

1. ONE MERGE into ``crawldb`` on ``url_fp``; source = updated rows ∪ new URLs ∪
   budget rows, one row per url_fp (updated > new > budget), flag ``_kind``:
   whenMatched(``_kind`` in update/budget AND ``t.updated_round < N``) → update
   all; whenMatched(``_kind`` = repoint AND the same guard) → status, dup_of,
   updated_round; whenNotMatched(``_kind`` in update/new) → insert.
2. MERGE into ``hosts`` on ``host``, guarded by ``t.updated_round < N``.
3. Appends to ``fetch_log`` and ``links`` (and ``near_dup_index`` with ``dedup.near_duplicates``) with
   ``txnAppId = deltacrawl-update-<table>``, ``txnVersion = N``: a rerun of round N appends nothing.
4. Ledger N ``updated`` with its counters (``schemas/counters.py``, verb update) and ``seconds.update`` (and
   ``seconds.round`` when ``rounds.crawl`` passes the round's start).
5. When N is a multiple of ``importance.every_rounds``: link importance recomputed
   (``jobs/importance.py``, its own MERGE of ``crawldb.importance``, a column the MERGE of step 1
   never rewrites). After the ledger write, so a crash there costs one refresh, not the round.

State-transition table: one row per (outcome / status code); base = the page
row's fetch_time, or the update's ``now`` when nothing was sent; intervals are
``[schedule]`` keys; "+1 fetch" = ``fetch_count + 1`` when there was a response.
Every row gets ``updated_round = N``, ``error_class`` = the page row's, and, when
attempted, ``http_status`` = its code and ``last_fetch_time`` = its fetch_time.
``fetch_interval_s`` becomes the interval named in the row.

===  =================================  ==============  ==========  ===================================
 #   outcome / status code              new status      retries     next_fetch_time
===  =================================  ==============  ==========  ===================================
 1   ok (2xx)                           fetched         0           base + the policy's interval
     +1 fetch; digest, simhash, content_type, etag, last_modified, warc_record_id, warc_fetch_time :=
     this copy; redirect_to, dup_of := null. Changed (see "Changed" below): change_count + 1,
     last_change_time = fetch_time; unchanged: unchanged_count + 1; no previous copy: neither.
     The change history (see "Schedule" below) grows by this visit; last_visit_time = fetch_time.
 2   ok, digest = another URL's copy    duplicate       0           base + duplicate_interval_s
     as 1, and dup_of = the original's url_fp (see "Exact duplicates").
 3   not_modified (304)                 not_modified    0           base + the policy's interval
     +1 fetch; unchanged_count + 1 (and the history, as 1); digest, simhash, content_type, warc_record_id, warc_fetch_time
     kept (they name the stored copy, not the revisit); etag/last_modified replaced only when the
     304 sends them. A 304 whose digest is another URL's copy becomes duplicate, as 2.
 4   redirect 301, 308                  redirect_perm   0           base + redirect_perm_interval_s
     +1 fetch; redirect_to; the target is inserted (parent's depth and score, redirect_hops + 1)
     and, when new, takes the URL's history (``update_transforms.MOVED``: change counts,
     last_change_time, change_intervals_s, unchanged_span_s, change_rate): the page moved.
 5   redirect 302, 303, 307, other 3xx  redirect_temp   0           base + default_interval_s
     as 4, but no history moves (the URL keeps it: it may come back).
 6   redirect without a usable target   error_final     retries+1   base + gone_interval_s
     (fetch's error_class bad_redirect, redirect_loop, too_many_redirects, redirect_filtered:…):
     +1 fetch; redirect_to kept; nothing inserted.
 7   http_error 404, 410                gone            0           base + gone_interval_s ·
                                                                    gone_backoff^(gone_checks - 1)
     +1 fetch; gone_checks + 1 (any other attempted outcome sets it null).
 7b  as 7, the gone_checks-th in a row  retired         0           as 7; never generated again
 8   http_error 408, 429, 5xx; error    error_retry     retries+1   base + max(min(retry_base_s ·
     (timeout, connect, dns, …);                                    2^old retries, retry_max_s),
     robots_unavailable                                             Retry-After)
     +1 fetch if a response; fetch_interval_s kept (back-off moves next_fetch_time only).
 9   as 8, retries+1 ≥ max_retries      error_final     retries+1   base + gone_interval_s
10   http_error, any other 4xx          error_final     retries+1   base + gone_interval_s
     +1 fetch.
11   robots_denied                      robots_denied   0           base + robots_denied_interval_s
12   deferred, not_attempted            unchanged       unchanged   max(old, host's next_allowed_at,
                                                                    host's parked_until)
     nothing else but error_class (why) and updated_round: "come back untouched".
===  =================================  ==============  ==========  ===================================

Changed (row 1; ``fetch_log.changed``, what the re-crawl schedule reads): the
payload digest differs from the previous copy's and the main text moved: both
copies' SimHashes usable (not null, not ``crawl_udfs.simhash.EMPTY``) and more
than ``schedule.unchanged_simhash_bits`` (1) apart, or the digest alone when
either has none (:func:`jobs.update_transforms.same_main_text`). Boilerplate
changes on every response (a timestamp, a rotating ad, session ids in links)
are outside the main text (``crawl_udfs/main_text.py`` drops header, footer,
``<time>``, ``.advert``/``.date``-like blocks; SimHash reads digits as ``#``
and anchor text, not hrefs). Measured on the test web (``tests/testweb``,
pages re-rendered with another session id and time, fetch's parser and
SimHash): the digest of 72 of its 97 dup-host pages changes, their SimHash 0
bits; edits of 1,645 texts (median 163 words) move it ≤ 1 bit for 22 % of
one-word replacements, 3 % of inserted sentences (12 words), 0.06 % of
inserted paragraphs (60 words), 0.1 % of 10 % of the words replaced; medians
3, 6, 11 and 12 bits; on the 84 dup-host articles (420 words) ≤ 1 bit for 47 % of
one-word edits, 13 % of sentences, 0.5 % of paragraphs. An ad that leaked into the main text (8 words) would
move it 1-8 bits: the threshold holds because main_text drops it. Each copy is
compared with the previous one, so a page edited by one word every visit can
stay "unchanged"; the stored digest and SimHash are always the new copy's.

Schedule (``[schedule]``, ``jobs/schedule_transforms.py``, formulas in ``crawl_udfs/change_rate.py``):
a visit of rows 1 and 3 with a previous copy tells "changed" or "unchanged" over the ``gap`` since
the previous content visit (``last_visit_time``, else ``warc_fetch_time``). Changed: ``gap`` is
appended to ``change_intervals_s``, or 0 when this response's Last-Modified falls inside the gap
(a dated change; the time since it is added to ``unchanged_span_s``); unchanged: ``gap`` is added
to ``unchanged_span_s``. Only the last ``schedule.change_history`` changed intervals are kept (the
unchanged span shrinks with each one dropped). The round's revisits also add to their host's
``hosts.revisits``, ``revisit_changes``, ``revisit_span_s``: the host's pooled rate, the prior of
its pages. The interval of rows 1 and 3 is the policy's (``schedule.policy``): ``fixed``,
``default_interval_s``; ``nutch``, the previous interval × (1 - nutch_dec_rate) after a change, ×
(1 + nutch_inc_rate) after none (default_interval_s with no previous copy); ``adaptive``, the
estimated rate (``change_rate``, stored) and the URL's score give the interval that maximises
freshness at the round's multiplier (computed first, one job: the round's pages get as many
re-fetches per second as ``fixed`` would give them). Both adaptive policies are clamped to
``[min_interval_s, max_interval_s]``. A duplicate (row 2) still gets ``duplicate_interval_s``.

Exact duplicates: among this batch's ok/304 rows and the crawl DB's
fetched/not_modified rows not re-decided by the batch, the original of a digest
is ``jobs/originals.py``'s: a consistent same-site ``rel=canonical`` wins, else
the earliest fetched (``first_fetched``), ties by the smallest url_fp; every
other ok/304 row of the batch with that digest is ``duplicate``, and a crawl-DB
original that lost becomes one too (below).

Originals that go (``jobs/originals.py``): a crawl-DB original that a
canonical target beat, or a row of the round that was an original and is now
gone or a duplicate, leaves copies (``dup_of`` = it). They are re-pointed in
the same MERGE, as ``_kind = repoint`` rows that set only ``status``,
``dup_of`` and ``updated_round`` (guarded like the others by ``t.updated_round
< N``): to the new original when the page still holds the content they copied,
else the earliest copy is promoted (``fetched``, or ``not_modified`` after a
304; ``dup_of`` null) and the others name it. ``first_fetched`` (the first
stored copy's fetch time) and ``canonical_fp`` (xxhash64 of the page's
normalised ``rel=canonical``) are set by row 1 and kept otherwise.

Near-duplicates (``dedup.near_duplicates``, on by default): the round's other
first copies are looked up in ``near_dup_index`` and among themselves, across
hosts (SimHash block keys, within ``simhash.near_duplicate_bits``, then the
MinHash and length checks of ``[dedup]``); a copy (the original: as for exact
duplicates) becomes ``duplicate`` as in row 2, with ``dup_of`` in
``crawldb`` and ``fetch_log``, and is not indexed; the others are appended to
the index. Rules: ``jobs/dedup_transforms.py``. Trap detection comes after
this step and reads its result ("Traps" below): one lookup, two uses.

Duplicate URL patterns (``dedup.learn_patterns``): after the duplicates are marked, each host
of the round relearns ``hosts.dup_patterns`` from its stored pages as this round leaves them: a
first path segment (``/print/``) or query parameter (``?sid``, ``?ref=front``) whose pages mostly
have the content of the same URL without it (``dedup.pattern_min_pages``,
``dedup.pattern_min_share``). Generate and the fetch task's in-round following then skip (or
lower, ``dedup.pattern_action``) the URLs matching them. Rules: ``jobs/pattern_transforms.py``,
``crawl_udfs/url_patterns.py``.

New URLs: the outlinks of the round's pages (kinds a, area, frame, iframe,
canonical, redirect). Dropped: nofollow links unless ``parse.follow_nofollow``
(redirect and canonical targets are never dropped for nofollow: they name the
same document, and a canonical target is the copy the site wants crawled, so it
IS inserted). The fetch task already dropped every URL the admission rules
reject (``crawl_udfs/admission.py``: ``[filter]`` and ``[scope]``), so update
applies none of them again. depth = parent's + 1 (redirect/canonical: parent's); score =
parent's × ``scope.score_decay`` / the parent's followed links (redirect and
canonical: parent's score), the parent's score first × ``scope.duplicate_score_factor`` when
update marked the parent a duplicate this round, exact or near (a redirect or canonical target
keeps the whole score; the fetch task, following links inside the round, cannot know a page is a
duplicate, and does not lower them); status unfetched, due at ``now``; one row per url_fp
(smallest depth, largest score); inserted only when absent — a known URL is
not touched by discovery.

Budgets, row 13 of the table (applied last, to every row of the merge source):
a row whose status is still ``unfetched`` on a host out of budget after this
round becomes ``budget_exhausted`` with ``error_class`` "budget:pages" or
"budget:bytes" (the same word as ``hosts.budget_reason``); all else unchanged.

A host is out of budget when ``hosts.pages_fetched >= budget.max_pages_per_host``
(pages with a response) or ``hosts.bytes_fetched >= budget.max_bytes_per_host``
(wire bytes), pages checked first; the reason is recomputed from the counters
every round. Its unfetched URLs are marked: the round's own, a broadcast
semi-join of crawldb with the hosts that ran out this round, and new URLs of
any host out of budget (inserted so). Other statuses are left alone
(re-crawls stop because generate skips the host). Not "failed": nothing was tried.

Traps (``[trap]``, :func:`jobs.hosts_transforms.trap_signals` and
``judge_traps``), decided after both duplicate steps: per host, the round's
first copies (URLs fetched with content for the first time) are split into
copies of the host's own pages (exact duplicates, row 2, and near-duplicates
of the lookup above: ``dup_of`` on the same host, or several first copies of
the round copying one page of another host) and the rest, new content; a
mirror's copies of another host's pages are no trap evidence. With
``dedup.near_duplicates`` off only exact duplicates count. After
``trap.min_pages`` pages, a round whose new-content share is under
``trap.max_new_share`` is a strike (``hosts.trap_strikes``). The streak's
evidence decides: when the upper Wilson bound of its new-content share at
``trap.park_confidence`` is under ``trap.max_new_share`` (hundreds of copies,
not five) the host is parked at once; otherwise, from
``trap.throttle_after_rounds`` strikes each strike halves ``hosts.round_cap``
(generate's per-host cap for that host) and at ``trap.park_after_rounds``
strikes the host is parked. Parked: ``hosts.parked_until = now +
trap.park_duration_s``, ``hosts.park_reason = "trap: 99% duplicates (…) over 1
round; new-content share at most 2.9% at 99% confidence"``. A judged round
with enough new content clears strikes and cap. A parked trap's URLs keep
their status (the park is reversible); generate skips the host until
``parked_until``. Reruns decide the same: every input is the pinned snapshot
and the lookup reads index rows of earlier rounds only.

``fetch_log`` gets every page row except deferred and not_attempted (never
tried; robots_denied rows are kept, the log says why nothing was fetched);
``changed`` is null when there was no previous copy. ``links`` gets every
outlink edge (followed or not) once per (src, dst, kind).

Idempotence: every input is read at one pinned version. ``now`` defaults to the
round's ``fetched_at``, and the crawl DB and hosts are read as they were before
this round's first MERGE: before it, update records their versions in the
round's ledger row (``crawldb_version``, ``hosts_version``) and reads them
``versionAsOf`` those, however many commits came since, so a rerun
after a crash computes the same rows; the guards and txn versions make the
writes that already happened no-ops.

What update scans, and how it grows:

- the crawl-DB rows of the round's URLs, the known-or-not test of the
  discovered URLs, and the rows of the round's hosts (pattern learning, an
  original's host for trap detection): ONE scan, broadcast joins on url_fp and
  host (crawldb never shuffled), staged as the slice the later steps read
  (``jobs/crawldb_slice.py``; each plan reading the Delta table costs its
  snapshot and file-listing jobs, so the fewer plans read it the better). url_fp is a hash, so
  Delta's min/max data skipping prunes no file: every file's ``url_fp`` column
  is read, O(crawl DB) bytes of one column (plus the matching rows). The
  MERGE repeats that join to find the files it touches. Deletion vectors (on
  for the crawl DB) keep it from rewriting those files: it writes small DVs
  plus the changed rows, so the WRITE grows with the touched URLs.
- the digest lookup (``status``, ``digest``, and for the original's rule
  ``host``, ``canonical_fp``, ``first_fetched``, ``warc_fetch_time``,
  ``first_seen`` of stored rows, semi-joined with the batch's broadcast
  digests): O(crawl DB) in those columns.
- re-pointing (``jobs/originals.repoint``), only in a round where an original
  went (one small job on staged rows to know), reads ``url_fp``, ``dup_of`` and
  seven small columns of all rows, semi-joined on ``url_fp`` or ``dup_of`` with
  the broadcast url_fps of the originals that went: O(crawl DB) in those
  columns (a separate ``original`` → copies table clustered by original would
  make it grow with the copies touched).
- budget marking reads ``status``/``host`` of all rows, but only in a round
  where some host reached its budget. ``frontier_size`` costs no scan of its
  own: the eligible rows of the pinned snapshot are counted on the full scan
  the first semi-join makes anyway, plus the MERGE source's status changes
  (``jobs.update_counters.Counters``); every other counter is counted by the staged write that
  computes its rows.
- ``hosts`` is read the same way, semi-joined with the round's hosts.
- trap detection reads an original's host from the slice (an original absent
  from it is on a host not of the round, which counts as another host's); it
  does no near-duplicate join of its own.

To make the reads grow with the touched URLs too: cluster ``crawldb`` by
``url_fp`` (liquid clustering / OPTIMIZE ZORDER) so file ranges of url_fp become
narrow, then prune with the round's url_fp ranges (a literal range predicate
per bucket, or dynamic file pruning, which open-source Delta lacks; low shuffle
merge, which keeps unmodified rows' layout, is Databricks-only too); keep a
separate digest → original table clustered by digest for the duplicate lookup.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from typing import Any, Callable

from crawl_udfs.config import Config
from jobs import common, faults, importance, ledger
from jobs import crawldb_slice as S
from jobs import dedup_transforms as D
from jobs import hosts_transforms as HT
from jobs import originals as O
from jobs import pattern_transforms as P
from jobs import schedule_transforms as SC
from jobs import update_transforms as T
from jobs.generate import max_urls_per_host
from jobs.update_counters import Counters
from schemas import counters
from schemas.tables import CRAWLDB, HOSTS, NEAR_DUP_INDEX, TABLES

_META = "spark.databricks.delta.commitInfo.userMetadata"
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
    job over the kept page rows: ``schedule_transforms.round_multiplier``).
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
        mu = SC.round_multiplier(T.with_rates(prepared, conf.schedule, priors), conf.schedule, cat=F.col(T.CAT))
    fresh = keep(T.transition(prepared, nxt, conf.schedule, round_no=round_no, now=now, priors=priors,
                              multiplier=mu))
    members = keep(T.exact_members(fresh, crawldb))
    dup_iv = conf.schedule.duplicate_interval_s
    updated = T.mark_duplicates(fresh, crawldb, duplicate_interval_s=dup_iv, members=members)
    demoted = T.exact_demotions(members)
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
    new = T.discover(prepared, known, conf.scope, duplicates=updated, follow_nofollow=conf.parse.follow_nofollow,
                     default_interval_s=conf.schedule.default_interval_s, round_no=round_no, now=now)
    signals = HT.trap_signals(updated, near, known)  # the same lookup: copies of a host's own pages
    counts = HT.page_counts(updated).join(signals, "host", "left")
    hosts_new = HT.hosts_update(hosts, fetch_output, counts, park_duration_s=park, round_no=round_no, now=now)
    hosts_new = HT.judge_traps(hosts_new, conf.trap, base_cap=max_urls_per_host(conf), now=now)
    budgets = (hosts, conf.budget.max_pages_per_host, conf.budget.max_bytes_per_host)
    hosts_new = HT.exhausted_hosts(hosts_new, *budgets)[0]
    if conf.dedup.learn_patterns:  # the round's hosts' duplicate URL patterns, from their pages as left now
        learnt = P.learn(P.stored_pages(known, updated), min_pages=conf.dedup.pattern_min_pages,
                         min_share=conf.dedup.pattern_min_share)
        hosts_new = P.with_patterns(hosts_new, learnt)
    hosts_new = keep(observe("hosts", common.conform(hosts_new, TABLES["hosts"])))
    _, reached, exhausted = HT.exhausted_hosts(hosts_new, *budgets)  # from the kept rows: nothing recomputed
    # the crawl DB is scanned for budget rows only in a round where a host reached its budget (one small
    # job to know); else the slice, where an empty set of hosts finds no row either
    budget = HT.budget_rows(known if reached.isEmpty() else crawldb, reached, round_no=round_no)
    source = T.merge_source(updated, new, budget, exhausted, repointed)  # computed once, by its staging write
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
            _remove(staging_dir(conf, n))  # left by a crash between the ledger write and its removal
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
    _remove(staging_dir(conf, n))
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
    p = plan(crawldb, hosts, fetch_output, fetch_list, conf, round_no=n, now=now, near_dup_index=index, keep=keep,
             observe=observed)
    # the plan is computed once, into Parquet, before any commit; the counters by the same writes
    sources = [("crawldb_source", p.crawldb_source), ("fetch_log", p.fetch_log), ("links", p.links)]
    if p.near_dup_index is not None:
        sources.append(("near_dup_index", p.near_dup_index))
    staged = {name: _staged(spark, observed(name, df), f"{stage}/{name}") for name, df in sources}
    staged["hosts"] = p.hosts  # already staged by ``keep``
    counts = {"near_duplicates": 0, "near_dup_index": 0, **observed.counts()}  # declared: written, 0 with the key off
    _merge_crawldb(spark, conf, staged["crawldb_source"], n, tag)
    _merge_hosts(spark, conf, staged["hosts"], n, tag)
    _append(conf, staged["fetch_log"], "fetch_log", n, tag)
    faults.point("update.after_fetch_log")
    _append(conf, staged["links"], "links", n, tag)
    faults.point("update.after_links")
    if "near_dup_index" in staged:
        _append(conf, staged["near_dup_index"], "near_dup_index", n, tag)
    return counts


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


def _remove(path: str) -> None:
    from jobs.warc_staging import filesystem
    fs, base = filesystem(path)
    try:
        fs.delete_dir(base)
    except FileNotFoundError:
        pass


def _tagged(spark, tag: str):
    """The MERGE commits carry ``tag``; their sources are staged files (:func:`_staged`), never copied again."""
    return common.session_conf(spark, {_META: tag, **common.STABLE_MERGE_SOURCE})


#: Crawl-DB columns update never rewrites on a known URL (another step owns them; a new URL starts null).
NOT_UPDATED = ("importance",)  # jobs/importance.py


def _merge_crawldb(spark, conf: Config, source, n: int, tag: str) -> None:
    cols = {f.name: f"s.`{f.name}`" for f in CRAWLDB.fields}
    owned = {c: v for c, v in cols.items() if c not in NOT_UPDATED}
    with _tagged(spark, tag):
        (common.table(spark, conf, "crawldb").alias("t").merge(source.alias("s"), "t.url_fp = s.url_fp")
         .whenMatchedUpdate(condition=f"s._kind IN ('update', 'budget') AND t.updated_round < {n}", set=owned)
         .whenMatchedUpdate(condition=f"s._kind = 'repoint' AND t.updated_round < {n}",
                            set={c: f"s.`{c}`" for c in ("status", "dup_of", "updated_round")})
         .whenNotMatchedInsert(condition="s._kind IN ('update', 'new')", values=cols)
         .execute())


def _merge_hosts(spark, conf: Config, source, n: int, tag: str) -> None:
    cols = {f.name: f"s.`{f.name}`" for f in HOSTS.fields}
    with _tagged(spark, tag):
        (common.table(spark, conf, "hosts").alias("t").merge(source.alias("s"), "t.host = s.host")
         .whenMatchedUpdate(condition=f"t.updated_round < {n}", set=cols)
         .whenNotMatchedInsert(values=cols)
         .execute())


def _append(conf: Config, df, name: str, n: int, tag: str) -> None:
    """Append once per round: Delta skips a write whose (txnAppId, txnVersion) it has committed."""
    (common.conform(df, TABLES[name]).write.format("delta").mode("append")
     .option("txnAppId", f"deltacrawl-update-{name}").option("txnVersion", n).option("userMetadata", tag)
     .save(common.table_path(conf, name)))
