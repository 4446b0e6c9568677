"""Pure transforms of ``update``: DataFrames in, DataFrames out, plain values as parameters.

No table is read or written here (STYLE.md rule 2); ``jobs/update.py`` pins the
inputs to one table version each and writes the outputs. The state-transition
table these functions implement is in ``docs/UPDATE.md``.

Pipeline (each step a function, each tested on small DataFrames):

    with_followed(fetch_list, pages)            the fetch list + the URLs followed inside the round
    prepare(pages, fetch_list, crawldb)         page rows + the URL's crawl-DB row (``o_*``)
    transition(prepared, host_next, ...)        one new crawl-DB row per page row (changed: same_main_text)
    (jobs/exact_dup_transforms.py: exact duplicates by payload digest; the original: jobs/originals.py)
    (jobs/dedup_transforms.py: near-duplicates, with dedup.near_duplicates)
    edges(prepared)                             one row per outlink of the round's pages
    (jobs/discover_transforms.py: discover, new URLs from (admitted) outlinks and redirect targets)
    (jobs/hosts_transforms.py: trap signals, the hosts rows, trap judgement, budgets)
    merge_source(updated, new, budget, ...)     one row per url_fp, flagged ``_kind``
    (jobs/crawldb_rows.py: whole_rows, each as the whole row update writes in its place)
    fetch_log_rows / link_rows                  the round's appends
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from crawl_udfs.rows import Outcome
from crawl_udfs.simhash import EMPTY as EMPTY_SIMHASH
from jobs import schedule_transforms as S
from schemas.status import Status
from schemas.tables import CRAWLDB, FETCH_LOG, LINKS

#: Helper columns carried beside the crawl-DB columns of updated rows.
CAT, BASE, CHANGED, WIRE = "_cat", "_base", "_changed", "_wire"
#: Helper column: the row is the URL's first copy (ok, with a digest, and no previous copy).
FIRST = "_first"
#: Helper column of the merge source: the row's status in the crawl DB read (null when absent).
WAS = "_was"
#: Outcome categories (one per row of the transition table).
KEEP = "keep"
#: ``crawldb.error_class`` of a URL marked budget_exhausted: this prefix + ``hosts.budget_reason``.
BUDGET_ERROR_PREFIX = "budget:"


def plus_seconds(ts: Column, seconds: Column) -> Column:
    """``ts + seconds`` exactly to the microsecond (no double round trip of the epoch)."""
    return F.timestamp_micros(F.unix_micros(ts) + (seconds * F.lit(1e6)).cast("long"))


def ts(value: dt.datetime) -> Column:
    """A timestamp literal from a naive-UTC (or aware) datetime, independent of the driver's local zone."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return F.lit(value).cast("timestamp")


def touching(big: DataFrame, small: DataFrame, key: str) -> DataFrame:
    """The rows of ``big`` whose ``key`` occurs in ``small``: a broadcast semi-join, so a
    left join of the small side against it never shuffles the big table."""
    return big.join(F.broadcast(small.select(key).distinct()), key, "left_semi")


# -- 1. the URL's page row beside its crawl-DB row ----------------------------------------
def with_followed(fetch_list: DataFrame, pages: DataFrame) -> DataFrame:
    """The fetch list's ``url_fp``/``depth``/``score``/``redirect_hops``, plus one such row per URL a
    fetch task followed inside the round (an ``in_round`` page row: the depth and score the task gave
    it, as :func:`jobs.discover_transforms.discover` would, no redirect hops), so :func:`prepare` and
    :func:`transition` make it the crawl-DB row a generated URL with that outcome would get, and its
    links inherit from it."""
    cols = ("url_fp", "depth", "score", "redirect_hops")
    followed = (pages.where((F.col("kind") == "page") & F.coalesce(F.col("in_round"), F.lit(False)))
                .select("url_fp", "depth", "score", F.lit(0).alias("redirect_hops")))
    listed = fetch_list.select(*cols)
    return listed.unionByName(followed.select([F.col(c).cast(listed.schema[c].dataType) for c in cols]))


def prepare(pages: DataFrame, fetch_list: DataFrame, crawldb: DataFrame | None) -> DataFrame:
    """Page rows of one round, with ``_list_depth``/``_list_score``/``_list_hops`` from the
    fetch list and the URL's crawl-DB row as ``o_<column>`` (null when absent), and ``_cat``.

    ``crawldb`` None: every ``o_`` column null, no crawl-DB read (what the edges of
    :func:`jobs.discover_transforms.discover` need: a page's depth and score come from the fetch
    list, in-round pages' included)."""
    fl = fetch_list.select("url_fp", F.col("depth").alias("_list_depth"), F.col("score").alias("_list_score"),
                           F.col("redirect_hops").alias("_list_hops"))
    p = pages.where(F.col("kind") == "page").dropDuplicates(["url_fp"]).join(fl, "url_fp", "left")
    if crawldb is None:
        p = p.select("*", *[F.lit(None).cast(f.dataType).alias(f"o_{f.name}") for f in CRAWLDB.fields])
    else:
        old = touching(crawldb, p, "url_fp").select([F.col(f.name).alias(f"o_{f.name}") for f in CRAWLDB.fields])
        p = p.join(old, F.col("url_fp") == F.col("o_url_fp"), "left")
    return p.withColumn(CAT, category(F.col("outcome"), F.col("status_code")))


def category(outcome: Column, code: Column) -> Column:
    """The transition-table row of a page row (see ``docs/UPDATE.md``).

    Whether a redirect is followed is the fetch task's decision (``crawl_udfs.classify``):
    it arrives as the outcome, never inferred here from ``error_class``.
    """
    return (F.when(outcome == "ok", "ok")
            .when(outcome == "not_modified", "not_modified")
            .when(outcome == Outcome.BAD_REDIRECT.value, "bad_redirect")
            .when((outcome == "redirect") & code.isin(301, 308), "redirect_perm")
            .when(outcome == "redirect", "redirect_temp")
            .when((outcome == "http_error") & code.isin(404, 410), "gone")
            .when((outcome == "http_error") & (code.isin(408, 429) | (code >= 500)), "retry")
            .when(outcome == "http_error", "final")
            .when(outcome == "robots_denied", "robots_denied")
            .when(outcome.isin("deferred", "not_attempted"), KEEP)
            .otherwise("retry"))  # error, robots_unavailable (and any unknown outcome: retried, never lost)


# -- 2. the transition ---------------------------------------------------------------------
def same_main_text(simhash: Column, stored: Column, bits: int) -> Column:
    """Two copies of a page have the same main text (never null): both SimHashes usable (not null, not
    :data:`crawl_udfs.simhash.EMPTY`) and at most ``bits`` apart (``schedule.unchanged_simhash_bits``;
    -1: never). A boilerplate-only change moves the digest, not this (``jobs/update.py``, "Changed")."""
    def usable(c: Column) -> Column:
        return c.isNotNull() & (c != F.lit(EMPTY_SIMHASH))
    return usable(simhash) & usable(stored) & (F.bit_count(simhash.bitwiseXOR(stored)) <= F.lit(int(bits)))


def changed_column(schedule) -> Column:
    """The visit saw a change (``jobs/update.py``, "Changed"); null when there is no previous copy."""
    cat, o = F.col(CAT), (lambda c: F.col(f"o_{c}"))
    return (F.when(cat == "not_modified", F.lit(False))
            .when((cat == "ok") & o("digest").isNotNull() & F.col("digest").isNotNull(),
                  (F.col("digest") != o("digest"))
                  & ~same_main_text(F.col("simhash"), o("simhash"), int(schedule.unchanged_simhash_bits))))


def with_rates(prepared: DataFrame, schedule, priors: DataFrame | None) -> DataFrame:
    """``prepared`` with the host prior (``priors``: :func:`jobs.schedule_transforms.host_priors`; None:
    1 / default_interval_s for every host) and the history and change rate after this visit."""
    if priors is None or schedule.policy != "adaptive":
        df = prepared.withColumn(S.PRIOR, F.lit(None).cast("double"))
    else:
        df = prepared.join(touching(priors, prepared, "host"), "host", "left")
    return S.with_history(df, schedule, cat=F.col(CAT), changed=changed_column(schedule))


def transition(prepared: DataFrame, host_next: DataFrame, schedule, *, round_no: int,
               now: dt.datetime, priors: DataFrame | None = None, multiplier: float | None = None) -> DataFrame:
    """One updated crawl-DB row per page row (CRAWLDB columns + helper columns).

    ``host_next`` has ``host``, ``next_allowed_at``, ``parked_until`` (after this
    round): deferred and not-attempted URLs are pushed to them, nothing else changes.
    ``schedule`` is the ``[schedule]`` config section; ``priors`` and ``multiplier`` feed its policy
    (:func:`with_rates`, :func:`jobs.schedule_transforms.round_multiplier`; None: the defaults).
    """
    cat, o = F.col(CAT), (lambda c: F.col(f"o_{c}"))
    keep = cat == KEEP
    attempted = ~keep
    has_response = F.col("status_code").isNotNull() & attempted
    stored = cat.isin("ok", "not_modified")
    now_ts = ts(now)
    base = F.coalesce(F.col("fetch_time"), now_ts)
    old_retries = F.coalesce(o("retries"), F.lit(0))
    failed = cat.isin("retry", "final", "bad_redirect")
    retries = F.when(failed, old_retries + 1).when(keep, old_retries).otherwise(F.lit(0))
    exhausted = (cat == "retry") & (retries >= F.lit(int(schedule.max_retries)))
    old_status = F.coalesce(o("status"), F.lit(Status.UNFETCHED.value))
    gone_checks = F.when(cat == "gone", F.coalesce(o("gone_checks"), F.lit(0)) + 1).when(keep, o("gone_checks"))
    retired = (cat == "gone") & (gone_checks >= F.lit(int(schedule.gone_checks)))
    status = (F.when(cat == "ok", Status.FETCHED.value)
              .when(cat == "not_modified", Status.NOT_MODIFIED.value)
              .when(cat == "redirect_perm", Status.REDIRECT_PERM.value)
              .when(cat == "redirect_temp", Status.REDIRECT_TEMP.value)
              .when(retired, Status.RETIRED.value)
              .when(cat == "gone", Status.GONE.value)
              .when(cat == "robots_denied", Status.ROBOTS_DENIED.value)
              .when(cat.isin("final", "bad_redirect") | exhausted, Status.ERROR_FINAL.value)
              .when(cat == "retry", Status.ERROR_RETRY.value)
              .otherwise(old_status))
    default_iv = F.lit(float(schedule.default_interval_s))
    old_iv = F.coalesce(o("fetch_interval_s"), default_iv)
    interval = (F.when(cat.isin(*S.STORED_CATS), S.policy_interval(schedule, changed=F.col(CHANGED),
                                                                    multiplier=multiplier))
                .when(cat == "redirect_temp", default_iv)
                .when(cat == "redirect_perm", F.lit(float(schedule.redirect_perm_interval_s)))
                .when(cat == "gone", S.gone_interval(gone_checks, schedule))
                .when(cat.isin("final", "bad_redirect") | exhausted,
                      F.lit(float(schedule.gone_interval_s)))
                .when(cat == "robots_denied", F.lit(float(schedule.robots_denied_interval_s)))
                .otherwise(old_iv))  # retry keeps its regular interval: back-off moves next_fetch_time only
    backoff = F.greatest(F.least(F.lit(float(schedule.retry_base_s)) * F.pow(F.lit(2.0), old_retries.cast("double")),
                                 F.lit(float(schedule.retry_max_s))),
                         F.coalesce(F.col("retry_after_s"), F.lit(0.0)))
    wait = F.when((cat == "retry") & ~exhausted, backoff).otherwise(interval)
    old_next = F.coalesce(o("next_fetch_time"), now_ts)
    next_time = F.when(keep, F.greatest(old_next, F.col("_h_next"), F.col("_h_parked"))).otherwise(
        plus_seconds(base, wait))
    changed = F.col(CHANGED)
    ok = cat == "ok"
    full_copy = ok & F.col("warc_refers_to").isNull()
    redirect = cat.isin("redirect_perm", "redirect_temp", "bad_redirect")
    first_seen = F.coalesce(o("first_seen"), now_ts)

    def on(cond: Column, new: Column, column: str) -> Column:
        return F.when(cond, new).otherwise(o(column))

    h = host_next.select("host", F.col("next_allowed_at").alias("_h_next"), F.col("parked_until").alias("_h_parked"))
    df = with_rates(prepared.join(h, "host", "left"), schedule, priors).withColumn(CHANGED, changed_column(schedule))
    cols = {
        "url_fp": F.col("url_fp"),
        "host": F.col("host"),
        "status": status,
        "next_fetch_time": next_time,
        "score": F.coalesce(o("score"), F.col("_list_score"), F.lit(0.0)),
        "depth": F.coalesce(o("depth"), F.col("_list_depth"), F.lit(0)),
        "redirect_hops": F.coalesce(o("redirect_hops"), F.col("_list_hops"), F.col("redirect_hops"), F.lit(0)),
        "retries": retries,
        "fetch_count": F.coalesce(o("fetch_count"), F.lit(0)) + F.when(has_response, 1).otherwise(0),
        "change_count": F.coalesce(o("change_count"), F.lit(0)) + F.when(changed, 1).otherwise(0),
        "unchanged_count": F.coalesce(o("unchanged_count"), F.lit(0)) + F.when(~changed, 1).otherwise(0),
        "fetch_interval_s": interval,
        "first_seen": first_seen,
        "last_fetch_time": F.coalesce(F.when(attempted, F.col("fetch_time")), o("last_fetch_time")),
        "last_change_time": F.when(changed, F.col("fetch_time")).otherwise(o("last_change_time")),
        "http_status": on(attempted, F.col("status_code"), "http_status"),
        "error_class": F.col("error_class"),
        "simhash": on(ok, F.col("simhash"), "simhash"),
        "dup_of": F.when(keep, o("dup_of")),
        "discovered_round": F.coalesce(o("discovered_round"), F.lit(int(round_no))),
        "updated_round": F.lit(int(round_no)),
        "source_fp": F.coalesce(o("source_fp"), F.col("source_fp")),  # the page row's: set when in_round
        "digest": on(ok, F.col("digest"), "digest"),
        "content_type": on(ok, F.col("content_type"), "content_type"),
        "etag": F.when(ok, F.col("etag")).when(cat == "not_modified", F.coalesce(F.col("etag"), o("etag")))
                 .otherwise(o("etag")),
        "last_modified": F.when(ok, F.col("last_modified"))
                          .when(cat == "not_modified", F.coalesce(F.col("last_modified"), o("last_modified")))
                          .otherwise(o("last_modified")),
        # a revisit (a 304, or an ok row stored as an identical-payload revisit) keeps naming the full copy
        "warc_record_id": on(full_copy, F.col("warc_record_id"), "warc_record_id"),
        "warc_fetch_time": on(full_copy, F.col("fetch_time"), "warc_fetch_time"),
        "redirect_to": F.when(redirect, F.col("redirect_to")).when(keep | ~has_response, o("redirect_to")),
        "url": F.col("url"),
        "first_fetched": F.coalesce(o("first_fetched"), o("warc_fetch_time"), F.when(stored, F.col("fetch_time"))),
        "canonical_fp": on(ok, F.when(F.col("canonical").isNotNull(), F.xxhash64(F.col("canonical"))), "canonical_fp"),
        "last_visit_time": on(stored, F.col("fetch_time"), "last_visit_time"),
        "change_intervals_s": F.col(S.HIST),
        "unchanged_span_s": F.col(S.SPAN),
        "change_rate": F.col(S.RATE),
        "gone_checks": gone_checks,
        "fetch_kind": o("fetch_kind"),
        S.GAP: F.col(S.GAP),
        S.MASS: F.col(S.MASS),
        CAT: cat,
        BASE: base,
        CHANGED: changed,
        WIRE: F.when(has_response, F.coalesce(F.col("wire_bytes"), F.lit(0))).otherwise(0).cast("long"),
        "_stored": stored,
        WAS: o("status"),
        FIRST: ok & F.col("digest").isNotNull() & o("digest").isNull(),
    }
    return df.select([c.alias(k) for k, c in cols.items()])


# -- 3. the edges of the round's pages (discovery: jobs/discover_transforms.py) ---------------
#: The crawl-DB columns a permanent redirect moves to its target (with the score, which every redirect passes).
MOVED = ("change_count", "unchanged_count", "last_change_time", "change_intervals_s", "unchanged_span_s",
         "change_rate")


def edges(prepared: DataFrame) -> DataFrame:
    """One row per outlink of a page row that has outlinks and was not kept (deferred or not attempted):
    ``src_fp``, the page's ``src_depth``/``src_score``/``src_hops``, ``_moved`` (a permanent redirect's
    :data:`MOVED` columns), its ``outlinks`` and the link ``l``. For
    :func:`jobs.discover_transforms.discover`, :func:`link_rows` and :func:`moved_to_known`."""
    src = prepared.where(F.col("outlinks").isNotNull() & (F.col(CAT) != KEEP))
    moved = F.when(F.col(CAT) == "redirect_perm", F.struct(*[F.col(f"o_{c}").alias(c) for c in MOVED]))
    return src.select(F.col("url_fp").alias("src_fp"), moved.alias("_moved"),
                      F.coalesce(F.col("_list_depth"), F.col("o_depth"), F.lit(0)).alias("src_depth"),
                      F.coalesce(F.col("_list_score"), F.col("o_score"), F.lit(0.0)).alias("src_score"),
                      F.coalesce(F.col("_list_hops"), F.col("redirect_hops"), F.lit(0)).alias("src_hops"),
                      "outlinks", F.explode("outlinks").alias("l"))


# -- 6. the merge source ---------------------------------------------------------------------
def merge_source(updated: DataFrame, new: DataFrame, budget: DataFrame, exhausted: DataFrame,
                 repointed: DataFrame | None = None, due: DataFrame | None = None,
                 moved: DataFrame | None = None) -> DataFrame:
    """One row per url_fp (update > repoint > new > budget > due > moved), CRAWLDB columns + ``_kind`` +
    ``_was`` (the status the row had in the crawl DB read, null for a URL absent from it: what the MERGE
    changes).
    ``repointed``: :func:`jobs.originals.repoint`'s crawl-DB rows (status, dup_of, updated_round: all the
    MERGE sets of a ``repoint`` row). ``due``: known URLs a sitemap makes due now (``jobs/sitemap_transforms.py``:
    ``next_fetch_time``, ``updated_round``, all the MERGE sets of a ``due`` row). ``moved``: :func:`moved_to_known`'s
    rows (``score``, :data:`MOVED`, ``updated_round``: what the MERGE sets of a ``moved`` row).

    Rows still ``unfetched`` on an exhausted host (``exhausted``: ``host``,
    ``budget_reason``) become ``budget_exhausted``, error_class "budget:<reason>".
    """
    from pyspark.sql import Window

    def shape(df: DataFrame, kind: str, rank: int) -> DataFrame:
        cols = [F.col(f.name).cast(f.dataType).alias(f.name) if f.name in df.columns
                else F.lit(None).cast(f.dataType).alias(f.name) for f in CRAWLDB.fields]
        was = F.col(WAS) if WAS in df.columns else F.lit(None).cast("string")
        return df.select(*cols, F.lit(kind).alias("_kind"), was.alias(WAS), F.lit(rank).alias("_rank"))

    allrows = shape(updated, "update", 0).unionByName(shape(new, "new", 2)).unionByName(shape(budget, "budget", 3))
    if repointed is not None:
        allrows = allrows.unionByName(shape(repointed, "repoint", 1))
    if due is not None:
        allrows = allrows.unionByName(shape(due, "due", 4))
    if moved is not None:
        allrows = allrows.unionByName(shape(moved, "moved", 5))
    w = Window.partitionBy("url_fp").orderBy("_rank")
    one = allrows.withColumn("_n", F.row_number().over(w)).where(F.col("_n") == 1).drop("_n", "_rank")
    ex = exhausted.select("host", F.col("budget_reason").alias("_ex"))
    one = one.join(F.broadcast(ex), "host", "left")
    hit = F.col("_ex").isNotNull() & (F.col("status") == Status.UNFETCHED.value)
    return (one.withColumn("error_class", F.when(hit, F.concat(F.lit(BUDGET_ERROR_PREFIX), F.col("_ex")))
                           .otherwise(F.col("error_class")))
            .withColumn("status", F.when(hit, F.lit(Status.BUDGET_EXHAUSTED.value)).otherwise(F.col("status")))
            .select([f.name for f in CRAWLDB.fields] + ["_kind", WAS]))




# -- 7. appends ---------------------------------------------------------------------------------
def fetch_log_rows(prepared: DataFrame, updated: DataFrame, *, round_no: int) -> DataFrame:
    """One FETCH_LOG row per page row except deferred and not_attempted ones (never tried).

    ``updated`` is :func:`mark_duplicates`' result: ``dup_of`` is the decision that
    sets ``crawldb.dup_of``, kept per capture, so the export's ``duplicate_of`` of
    every capture is update's decision (the crawl DB keeps only the latest)."""
    ch = updated.select("url_fp", F.col(CHANGED).alias("changed"), "dup_of")
    p = prepared.where(F.col(CAT) != KEEP).join(ch, "url_fp", "left")
    p = (p.withColumn("round", F.lit(int(round_no)).cast("long"))
         .withColumn("n_outlinks", F.when(F.col("outlinks").isNull(), 0).otherwise(F.size("outlinks"))))
    return p.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in FETCH_LOG.fields])


def link_rows(prepared: DataFrame, *, round_no: int) -> DataFrame:
    """Every outlink edge of the round's pages (followed or not), once per (src, dst, kind)."""
    e = edges(prepared).where(F.col("l.url_fp").isNotNull())
    e = (e.groupBy("src_fp", F.col("l.url_fp").alias("dst_fp"), F.col("l.kind").alias("kind"))
         .agg(F.min(F.coalesce(F.col("l.nofollow"), F.lit(False))).alias("nofollow"),
              F.min(F.col("l.url")).alias("dst_url")))
    e = e.withColumn("round", F.lit(int(round_no)).cast("long"))
    return e.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in LINKS.fields])


# -- 8. a permanent redirect to a known URL -------------------------------------------------------
def moved_to_known(prepared: DataFrame, known: DataFrame, *, round_no: int) -> DataFrame:
    """Rows ``_kind = moved`` for the known targets of the round's permanent redirects (301, 308).

    A new target is inserted by :func:`jobs.discover_transforms.discover` with its source's score and
    history; a target the crawl DB knows gets here the larger of its score and the source's and, when
    it was never fetched, the source's change history (:data:`MOVED`): what it knows of the page that
    moved. A fetched target keeps its own history (evidence about the URL as it is served now).
    Several sources: the highest score's (then the smallest ``url_fp``); their edges are :func:`edges`'.
    ``known``: the crawl-DB rows keyed by the round's URLs and outlink targets (``jobs/crawldb_slice.py``),
    every column."""
    link = F.col("l")
    src = (edges(prepared).where(F.col("_moved").isNotNull() & (link.getField("kind") == "redirect")
                                 & link.getField("url_fp").isNotNull())
           .select(link.getField("url_fp").alias("url_fp"), "src_fp", "src_score", F.col("_moved").alias("src_hist")))
    best = F.max_by(F.struct("src_score", "src_hist"), F.struct("src_score", -F.col("src_fp"))).alias("b")
    by_target = src.groupBy("url_fp").agg(best)
    t = known.where(F.col("fetch_count").isNotNull()).join(by_target, "url_fp")  # by-URL rows of the slice
    never = F.col("fetch_count") == 0
    moved = {c: F.when(never, F.col(f"b.src_hist.{c}")).otherwise(F.col(c)) for c in MOVED}
    return t.select("url_fp", "host", "url", "status",
                    F.greatest(F.col("score"), F.col("b.src_score")).alias("score"),
                    *[v.alias(c) for c, v in moved.items()],
                    F.lit(int(round_no)).cast("long").alias("updated_round"))
