"""Pure transforms of ``update``: DataFrames in, DataFrames out, plain values as parameters.

No table is read or written here (STYLE.md rule 2); ``jobs/update.py`` pins the
inputs to one table version each and writes the outputs. The state-transition
table these functions implement is in the docstring of ``jobs/update.py``.

Pipeline (each step a function, each tested on small DataFrames):

    prepare(pages, fetch_list, crawldb)         page rows + the URL's crawl-DB row (``o_*``)
    transition(prepared, host_next, ...)        one new crawl-DB row per page row
    mark_duplicates(updated, crawldb, ...)      exact duplicates by payload digest
    discover(prepared, crawldb, ...)            new URLs from (admitted) outlinks and redirect targets
    trap_signals(updated, crawldb, ...)         per host: first copies, exact and near duplicates
    hosts_update(hosts, host_rows, updated,...) the ``hosts`` rows of the round's hosts
    judge_traps(hosts_new, ...)                 trap strikes, throttle (round_cap), trap park
    exhausted_hosts(hosts_new, hosts, ...)      hosts out of their page or byte budget, and why
    budget_rows(crawldb, exhausted, ...)        unfetched URLs of those hosts
    merge_source(updated, new, budget, ...)     one row per url_fp, flagged ``_kind``
    fetch_log_rows / link_rows                  the round's appends
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from crawl_udfs.admission import SAME_DOC_KINDS
from crawl_udfs.rows import Outcome
from crawl_udfs.simhash import EMPTY as EMPTY_SIMHASH
from schemas.status import Status
from schemas.tables import CRAWLDB, FETCH_LOG, HOSTS, LINKS

#: Helper columns carried beside the crawl-DB columns of updated rows.
_CAT, _BASE, _CHANGED, _WIRE = "_cat", "_base", "_changed", "_wire"
#: Helper column: the row is the URL's first copy (ok, with a digest, and no previous copy).
_FIRST = "_first"
#: Outcome categories (one per row of the transition table).
KEEP = "keep"
#: Statuses whose stored copy can be the original of a duplicate.
ORIGINAL_STATUSES = (Status.FETCHED.value, Status.NOT_MODIFIED.value)


def _plus_seconds(ts: Column, seconds: Column) -> Column:
    """``ts + seconds`` exactly to the microsecond (no double round trip of the epoch)."""
    return F.timestamp_micros(F.unix_micros(ts) + (seconds * F.lit(1e6)).cast("long"))


def _ts(value: dt.datetime) -> Column:
    """A timestamp literal from a naive-UTC (or aware) datetime, independent of the driver's local zone."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return F.lit(value).cast("timestamp")


def _touching(big: DataFrame, small: DataFrame, key: str) -> DataFrame:
    """The rows of ``big`` whose ``key`` occurs in ``small``: a broadcast semi-join, so a
    left join of the small side against it never shuffles the big table."""
    return big.join(F.broadcast(small.select(key).distinct()), key, "left_semi")


# -- 1. the URL's page row beside its crawl-DB row ----------------------------------------
def prepare(pages: DataFrame, fetch_list: DataFrame, crawldb: DataFrame) -> DataFrame:
    """Page rows of one round, with ``_list_depth``/``_list_score``/``_list_hops`` from the
    fetch list and the URL's crawl-DB row as ``o_<column>`` (null when absent), and ``_cat``."""
    fl = fetch_list.select("url_fp", F.col("depth").alias("_list_depth"), F.col("score").alias("_list_score"),
                           F.col("redirect_hops").alias("_list_hops"))
    p = pages.where(F.col("kind") == "page").dropDuplicates(["url_fp"])
    old = _touching(crawldb, p, "url_fp").select([F.col(f.name).alias(f"o_{f.name}") for f in CRAWLDB.fields])
    p = p.join(fl, "url_fp", "left").join(old, F.col("url_fp") == F.col("o_url_fp"), "left")
    return p.withColumn(_CAT, category(F.col("outcome"), F.col("status_code")))


def category(outcome: Column, code: Column) -> Column:
    """The transition-table row of a page row (see ``jobs/update.py``).

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
def transition(prepared: DataFrame, host_next: DataFrame, schedule, *, round_no: int,
               now: dt.datetime) -> DataFrame:
    """One updated crawl-DB row per page row (CRAWLDB columns + helper columns).

    ``host_next`` has ``host``, ``next_allowed_at``, ``parked_until`` (after this
    round): deferred and not-attempted URLs are pushed to them, nothing else changes.
    ``schedule`` is the ``[schedule]`` config section.
    """
    cat, o = F.col(_CAT), (lambda c: F.col(f"o_{c}"))
    keep = cat == KEEP
    attempted = ~keep
    has_response = F.col("status_code").isNotNull() & attempted
    stored = cat.isin("ok", "not_modified")
    now_ts = _ts(now)
    base = F.coalesce(F.col("fetch_time"), now_ts)
    old_retries = F.coalesce(o("retries"), F.lit(0))
    failed = cat.isin("retry", "final", "bad_redirect")
    retries = F.when(failed, old_retries + 1).when(keep, old_retries).otherwise(F.lit(0))
    exhausted = (cat == "retry") & (retries >= F.lit(int(schedule.max_retries)))
    old_status = F.coalesce(o("status"), F.lit(Status.UNFETCHED.value))
    status = (F.when(cat == "ok", Status.FETCHED.value)
              .when(cat == "not_modified", Status.NOT_MODIFIED.value)
              .when(cat == "redirect_perm", Status.REDIRECT_PERM.value)
              .when(cat == "redirect_temp", Status.REDIRECT_TEMP.value)
              .when(cat == "gone", Status.GONE.value)
              .when(cat == "robots_denied", Status.ROBOTS_DENIED.value)
              .when(cat.isin("final", "bad_redirect") | exhausted, Status.ERROR_FINAL.value)
              .when(cat == "retry", Status.ERROR_RETRY.value)
              .otherwise(old_status))
    default_iv = F.lit(float(schedule.default_interval_s))
    old_iv = F.coalesce(o("fetch_interval_s"), default_iv)
    interval = (F.when(cat.isin("ok", "not_modified", "redirect_temp"), default_iv)
                .when(cat == "redirect_perm", F.lit(float(schedule.redirect_perm_interval_s)))
                .when(cat.isin("gone", "final", "bad_redirect") | exhausted,
                      F.lit(float(schedule.gone_interval_s)))
                .when(cat == "robots_denied", F.lit(float(schedule.robots_denied_interval_s)))
                .otherwise(old_iv))  # retry keeps its regular interval: back-off moves next_fetch_time only
    backoff = F.greatest(F.least(F.lit(float(schedule.retry_base_s)) * F.pow(F.lit(2.0), old_retries.cast("double")),
                                 F.lit(float(schedule.retry_max_s))),
                         F.coalesce(F.col("retry_after_s"), F.lit(0.0)))
    wait = F.when((cat == "retry") & ~exhausted, backoff).otherwise(interval)
    old_next = F.coalesce(o("next_fetch_time"), now_ts)
    next_time = F.when(keep, F.greatest(old_next, F.col("_h_next"), F.col("_h_parked"))).otherwise(
        _plus_seconds(base, wait))
    changed = (F.when(cat == "not_modified", F.lit(False))
               .when((cat == "ok") & o("digest").isNotNull() & F.col("digest").isNotNull(),
                     F.col("digest") != o("digest")))
    ok = cat == "ok"
    redirect = cat.isin("redirect_perm", "redirect_temp", "bad_redirect")
    first_seen = F.coalesce(o("first_seen"), now_ts)

    def on(cond: Column, new: Column, column: str) -> Column:
        return F.when(cond, new).otherwise(o(column))

    h = host_next.select("host", F.col("next_allowed_at").alias("_h_next"), F.col("parked_until").alias("_h_parked"))
    df = prepared.join(h, "host", "left")
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
        "source_fp": o("source_fp"),
        "digest": on(ok, F.col("digest"), "digest"),
        "content_type": on(ok, F.col("content_type"), "content_type"),
        "etag": F.when(ok, F.col("etag")).when(cat == "not_modified", F.coalesce(F.col("etag"), o("etag")))
                 .otherwise(o("etag")),
        "last_modified": F.when(ok, F.col("last_modified"))
                          .when(cat == "not_modified", F.coalesce(F.col("last_modified"), o("last_modified")))
                          .otherwise(o("last_modified")),
        "warc_record_id": on(ok, F.col("warc_record_id"), "warc_record_id"),
        "warc_fetch_time": on(ok, F.col("fetch_time"), "warc_fetch_time"),
        "redirect_to": F.when(redirect, F.col("redirect_to")).when(keep | ~has_response, o("redirect_to")),
        "url": F.col("url"),
        _CAT: cat,
        _BASE: base,
        _CHANGED: changed,
        _WIRE: F.when(has_response, F.coalesce(F.col("wire_bytes"), F.lit(0))).otherwise(0).cast("long"),
        "_stored": stored,
        _FIRST: ok & F.col("digest").isNotNull() & o("digest").isNull(),
    }
    return df.select([c.alias(k) for k, c in cols.items()])


def mark_duplicates(updated: DataFrame, crawldb: DataFrame, *, duplicate_interval_s: float) -> DataFrame:
    """Mark ok/304 rows whose digest is another URL's stored copy as ``duplicate``.

    Candidates for a digest: this batch's ok/304 rows, and crawl-DB rows with
    status fetched/not_modified not re-decided by this batch. The original is the
    earliest ``first_seen``, ties by the smallest ``url_fp``; every other candidate
    among the batch's rows becomes ``duplicate`` with ``dup_of`` = the original.
    """
    batch = updated.where(F.col("_stored") & F.col("digest").isNotNull()).select("url_fp", "digest", "first_seen")
    touched = updated.where(F.col(_CAT) != KEEP).select("url_fp")
    digests = batch.select("digest").distinct()
    stored = (crawldb.where(F.col("status").isin(*ORIGINAL_STATUSES) & F.col("digest").isNotNull())
              .select("url_fp", "digest", "first_seen")
              .join(F.broadcast(digests), "digest", "left_semi")
              .join(touched, "url_fp", "left_anti"))
    originals = (batch.unionByName(stored).groupBy("digest")
                 .agg(F.min(F.struct("first_seen", "url_fp")).getField("url_fp").alias("_orig")))
    df = updated.join(originals, "digest", "left")
    dup = F.col("_stored") & F.col("_orig").isNotNull() & (F.col("_orig") != F.col("url_fp"))
    iv = F.lit(float(duplicate_interval_s))
    return (df.withColumn("status", F.when(dup, Status.DUPLICATE.value).otherwise(F.col("status")))
            .withColumn("dup_of", F.when(dup, F.col("_orig")).otherwise(F.col("dup_of")))
            .withColumn("fetch_interval_s", F.when(dup, iv).otherwise(F.col("fetch_interval_s")))
            .withColumn("next_fetch_time", F.when(dup, _plus_seconds(F.col(_BASE), iv))
                        .otherwise(F.col("next_fetch_time")))
            .drop("_orig"))


# -- 3. discovery ------------------------------------------------------------------------------
def _edges(prepared: DataFrame) -> DataFrame:
    src = prepared.where(F.col("outlinks").isNotNull() & (F.col(_CAT) != KEEP))
    return src.select(F.col("url_fp").alias("src_fp"),
                      F.coalesce(F.col("_list_depth"), F.col("o_depth"), F.lit(0)).alias("src_depth"),
                      F.coalesce(F.col("_list_score"), F.col("o_score"), F.lit(0.0)).alias("src_score"),
                      F.coalesce(F.col("_list_hops"), F.col("redirect_hops"), F.lit(0)).alias("src_hops"),
                      "outlinks", F.explode("outlinks").alias("l"))


def _followed(link: Column, follow_nofollow: bool) -> Column:
    same_doc = link.getField("kind").isin(*SAME_DOC_KINDS)
    if follow_nofollow:
        return F.lit(True) & link.isNotNull()
    return same_doc | ~F.coalesce(link.getField("nofollow"), F.lit(False))


def discover(prepared: DataFrame, crawldb: DataFrame, scope, *, follow_nofollow: bool, default_interval_s: float,
             round_no: int, now: dt.datetime) -> DataFrame:
    """Crawl-DB rows for URLs first found this round (absent from ``crawldb``), one per url_fp.

    Every outlink was admitted by the fetch task (``crawl_udfs.admission``, with
    its page's host and depth), which also gave its ``host``: no rule is applied
    again here. ``scope`` is the ``[scope]`` section (``score_decay``). Followed: links not marked nofollow
    (all when ``follow_nofollow``), and redirect and canonical targets always.
    depth = parent depth + 1 (redirect/canonical: parent depth; redirect:
    redirect_hops = parent's + 1); score = parent score * score_decay / the
    parent's followed links (redirect/canonical: the parent's score). Within
    the batch a URL keeps its smallest depth and largest score; its source is
    the parent of the shallowest path (then fewest hops, smallest src_fp).
    """
    e = _edges(prepared)
    same_doc = F.col("l.kind").isin(*SAME_DOC_KINDS)
    n_links = F.size(F.filter("outlinks", lambda x: _followed(x, follow_nofollow)
                                                      & ~x.getField("kind").isin(*SAME_DOC_KINDS)))
    e = e.where(_followed(F.col("l"), follow_nofollow) & F.col("l.url_fp").isNotNull())
    e = e.select(
        F.col("l.url_fp").alias("url_fp"), F.col("l.url").alias("url"), F.col("l.host").alias("host"),
        "src_fp",
        F.when(same_doc, F.col("src_depth")).otherwise(F.col("src_depth") + 1).alias("depth"),
        F.when(F.col("l.kind") == "redirect", F.col("src_hops") + 1).otherwise(F.lit(0)).alias("redirect_hops"),
        F.when(same_doc, F.col("src_score"))
         .otherwise(F.col("src_score") * F.lit(float(scope.score_decay)) / F.greatest(n_links, F.lit(1)))
         .alias("score"))
    best = F.min(F.struct("depth", "redirect_hops", "src_fp", "url", "host")).alias("b")
    d = e.groupBy("url_fp").agg(best, F.max("score").alias("score"))
    d = d.join(_touching(crawldb.select("url_fp"), d, "url_fp"), "url_fp", "left_anti")
    now_ts = _ts(now)
    zero = F.lit(0)
    return d.select(
        "url_fp", F.col("b.host").alias("host"), F.lit(Status.UNFETCHED.value).alias("status"),
        now_ts.alias("next_fetch_time"), "score", F.col("b.depth").alias("depth"),
        F.col("b.redirect_hops").alias("redirect_hops"), zero.alias("retries"), zero.alias("fetch_count"),
        zero.alias("change_count"), zero.alias("unchanged_count"),
        F.lit(float(default_interval_s)).alias("fetch_interval_s"), now_ts.alias("first_seen"),
        F.lit(int(round_no)).cast("long").alias("discovered_round"),
        F.lit(int(round_no)).cast("long").alias("updated_round"),
        F.col("b.src_fp").alias("source_fp"), F.col("b.url").alias("url"))


# -- 4. trap signals ----------------------------------------------------------------------------
def _blocks(simhash: Column, near_bits: int) -> Column:
    """``near_bits + 1`` disjoint bit blocks of a 64-bit SimHash, as an array of (i, value) structs."""
    n = int(near_bits) + 1
    out = []
    for i in range(n):
        lo, hi = i * 64 // n, (i + 1) * 64 // n
        v = F.shiftrightunsigned(simhash, lo)
        if hi - lo < 64:
            v = v.bitwiseAND(F.lit((1 << (hi - lo)) - 1).cast("long"))
        out.append(F.struct(F.lit(i).alias("i"), v.alias("v")))
    return F.array(*out)


def trap_signals(updated: DataFrame, crawldb: DataFrame, *, near_bits: int) -> DataFrame:
    """Per host of the round: ``t_pages`` first copies, ``t_exact`` exact and ``t_near`` near duplicates.

    A first copy is an ok row with a digest for a URL that had no stored copy
    (``_first``); re-fetches are not judged (an unchanged page is no trap). It
    is an exact duplicate when ``mark_duplicates`` made it ``duplicate``
    (another URL's digest, any host). Otherwise it is a near-duplicate when its
    SimHash (not null, not :data:`crawl_udfs.simhash.EMPTY`) is within
    ``near_bits`` bits of a stored SimHash of another URL of the same host in
    ``crawldb``, or of the SimHash of a first copy of the round with a smaller
    url_fp (so of n identical first copies, n - 1 are near-duplicates).

    Cheap and exact by the pigeonhole banding of Manku, Jain and Das Sarma
    (WWW 2007): two 64-bit values within k bits agree on at least one of k + 1
    disjoint blocks, so candidates are found by an equi-join on (host, block
    index, block value) and checked with ``bit_count(a ^ b) <= k``. The crawl-DB
    side is reduced to distinct (host, simhash) of the round's hosts and the
    round side to (host, simhash, smallest url_fp), so identical pages cost one
    row each. Reads ``host``/``simhash`` of the crawl DB (O(crawl DB) in those
    two columns, semi-joined with the round's broadcast hosts).
    """
    k = int(near_bits)
    if not 0 <= k <= 15:
        raise ValueError(f"simhash.near_duplicate_bits must be within 0..15, got {k}")
    first = updated.where(F.col(_FIRST))
    exact = F.col("status") == Status.DUPLICATE.value
    cand = first.where(~exact & F.col("simhash").isNotNull() & (F.col("simhash") != F.lit(EMPTY_SIMHASH))).select(
        "host", "url_fp", "simhash")
    hosts = cand.select("host").distinct()
    stored = (crawldb.where(F.col("simhash").isNotNull() & (F.col("simhash") != F.lit(EMPTY_SIMHASH))).select("host", "simhash")
              .join(F.broadcast(hosts), "host", "left_semi").distinct()
              .select("host", F.col("simhash").alias("k_sim"), F.lit(None).cast("long").alias("k_fp")))
    peers = cand.groupBy("host", F.col("simhash").alias("k_sim")).agg(F.min("url_fp").alias("k_fp"))
    known = stored.unionByName(peers)
    kb = known.select("host", "k_sim", "k_fp", F.explode(_blocks(F.col("k_sim"), k)).alias("b"))
    cb = cand.select("host", "url_fp", "simhash", F.explode(_blocks(F.col("simhash"), k)).alias("b"))
    close = F.bit_count(F.col("simhash").bitwiseXOR(F.col("k_sim"))) <= F.lit(k)
    earlier = F.col("k_fp").isNull() | (F.col("k_fp") < F.col("url_fp"))
    near = (cb.join(kb, ["host", "b"]).where(close & earlier).select("url_fp").distinct()
            .withColumn("_near", F.lit(True)))
    j = first.select("host", "url_fp", exact.alias("_exact")).join(near, "url_fp", "left")
    return j.groupBy("host").agg(
        F.count(F.lit(1)).cast("long").alias("t_pages"),
        F.sum(F.col("_exact").cast("long")).cast("long").alias("t_exact"),
        F.sum((~F.col("_exact") & F.coalesce(F.col("_near"), F.lit(False))).cast("long")).cast("long")
         .alias("t_near"))


# -- 5. hosts ---------------------------------------------------------------------------------
def host_next(hosts: DataFrame, host_rows: DataFrame, *, park_duration_s: float, now: dt.datetime) -> DataFrame:
    """``host``, ``next_allowed_at``, ``parked_until`` after this round (for deferred URLs)."""
    h = _host_rows(host_rows)
    old = _touching(hosts, host_rows, "host").select("host", F.col("next_allowed_at").alias("o_next"),
                                                     F.col("parked_until").alias("o_parked"))
    return h.join(old, "host", "full").select(
        "host", F.coalesce(F.col("next_allowed_at"), F.col("o_next")).alias("next_allowed_at"),
        _parked_until(park_duration_s, now).alias("parked_until"))


def _parked_until(park_duration_s: float, now: dt.datetime) -> Column:
    until = _plus_seconds(_ts(now), F.lit(float(park_duration_s)))
    return F.when(F.coalesce(F.col("parked"), F.lit(False)), until).otherwise(F.col("o_parked"))


def _host_rows(host_rows: DataFrame) -> DataFrame:
    """One row per host (the contract gives one; a second one, if any, only adds its requests)."""
    from pyspark.sql import Window
    h = host_rows.where(F.col("kind") == "host")
    w = Window.partitionBy("host")
    first = F.row_number().over(w.orderBy("partition", F.col("robots_fetched_at").desc_nulls_last()))
    return (h.withColumn("requests", F.sum(F.coalesce(F.col("requests"), F.lit(0))).over(w))
            .withColumn("_n", first).where(F.col("_n") == 1).drop("_n"))


def page_counts(updated: DataFrame) -> DataFrame:
    """Per host: pages with a response, their wire bytes, duplicates, pages with new content."""
    attempted = F.col(_CAT) != KEEP
    return updated.groupBy("host").agg(
        F.sum(F.when(attempted & F.col("http_status").isNotNull(), 1).otherwise(0)).cast("long").alias("p_pages"),
        F.sum(F.col(_WIRE)).cast("long").alias("p_bytes"),
        F.sum(F.when(attempted & (F.col("status") == Status.DUPLICATE.value), 1).otherwise(0))
         .cast("long").alias("p_dups"),
        F.sum(F.when((F.col(_CAT) == "ok") & (F.col("status") != Status.DUPLICATE.value)
                     & F.coalesce(F.col(_CHANGED), F.lit(True)), 1).otherwise(0)).cast("long").alias("p_new"))


#: hosts columns of the trap state, carried by hosts_update and changed by judge_traps.
_TRAP_STATE = ("budget_reason", "round_cap", "trap_strikes", "trap_new_share", "trap_streak_pages",
               "trap_streak_exact", "trap_streak_near")


def hosts_update(hosts: DataFrame, host_rows: DataFrame, counts: DataFrame, *, park_duration_s: float,
                 round_no: int, now: dt.datetime) -> DataFrame:
    """New ``hosts`` rows (HOSTS columns) for every host of the round: old row + what the task learnt.

    ``counts`` is :func:`page_counts`, optionally joined with :func:`trap_signals`
    (``t_pages``/``t_exact``/``t_near``, 0 when absent); those three are passed on
    beside the HOSTS columns for :func:`judge_traps`, and the trap state is the old row's.
    ``delay_s`` is the task's (the old row's when the host had no task); ``resolve_error``
    is kept only while the host still has no address.
    """
    if "t_pages" not in counts.columns:
        counts = counts.select("*", *[F.lit(0).cast("long").alias(c) for c in ("t_pages", "t_exact", "t_near")])
    h = _host_rows(host_rows)
    old = _touching(hosts, host_rows.select("host").unionByName(counts.select("host")), "host")
    old = old.select([F.col(f.name).alias(f"o_{f.name}") for f in HOSTS.fields])
    df = (h.join(counts, "host", "full").join(old, F.col("host") == F.col("o_host"), "left")
          .withColumn("o_parked", F.col("o_parked_until")))
    robots = F.col("robots_fetched_at").isNotNull()

    def r(c: str) -> Column:
        return F.when(robots, F.col(c)).otherwise(F.col(f"o_{c}"))

    def add(old_c: str, new: Column) -> Column:
        return (F.coalesce(F.col(f"o_{old_c}"), F.lit(0)) + F.coalesce(new, F.lit(0))).cast("long")

    return df.select(
        "host", F.coalesce(F.col("ip"), F.col("o_ip")).alias("ip"),
        F.coalesce(F.col("next_allowed_at"), F.col("o_next_allowed_at")).alias("next_allowed_at"),
        F.coalesce(F.col("consecutive_failures"), F.col("o_consecutive_failures"), F.lit(0))
         .alias("consecutive_failures"),
        _parked_until(park_duration_s, now).alias("parked_until"),
        F.when(F.coalesce(F.col("parked"), F.lit(False)), F.col("park_reason"))
         .otherwise(F.col("o_park_reason")).alias("park_reason"),
        r("robots_status").alias("robots_status"), r("robots_fetched_at").alias("robots_fetched_at"),
        r("robots_expires_at").alias("robots_expires_at"), r("crawl_delay_s").alias("crawl_delay_s"),
        add("pages_fetched", F.col("p_pages")).alias("pages_fetched"),
        add("bytes_fetched", F.col("p_bytes")).alias("bytes_fetched"),
        add("requests", F.col("requests")).alias("requests"),
        add("duplicate_pages", F.col("p_dups")).alias("duplicate_pages"),
        add("new_content_pages", F.col("p_new")).alias("new_content_pages"),
        F.lit(int(round_no)).cast("long").alias("updated_round"),
        r("sitemaps").alias("sitemaps"), r("robots_body").alias("robots_body"),
        *[F.col(f"o_{c}").alias(c) for c in _TRAP_STATE],
        add("near_duplicate_pages", F.col("t_near")).alias("near_duplicate_pages"),
        F.coalesce(F.col("delay_s"), F.col("o_delay_s")).alias("delay_s"),
        F.when(F.coalesce(F.col("ip"), F.col("o_ip")).isNull(), F.col("o_resolve_error")).alias("resolve_error"),
        *[F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c) for c in ("t_pages", "t_exact", "t_near")])


def judge_traps(hosts_new: DataFrame, trap, *, base_cap: int, now: dt.datetime) -> DataFrame:
    """The trap rule on :func:`hosts_update` rows (``trap`` is the ``[trap]`` section).

    A round is judged when ``pages_fetched >= trap.min_pages`` and ``t_pages > 0``;
    its new-content share is ``(t_pages - t_exact - t_near) / t_pages``. A judged
    round under ``trap.max_new_share`` is a strike: ``trap_strikes`` + 1 and the
    streak counters grow; any other judged round sets them to 0 and lifts the
    throttle (``round_cap`` null). From ``trap.throttle_after_rounds`` strikes on,
    each strike halves ``round_cap`` (from ``base_cap``, generate's cap; at least
    1). At ``trap.park_after_rounds`` strikes the host is parked:
    ``parked_until = now + trap.park_duration_s``, ``park_reason = "trap: …"``
    (the streak's duplicate share, exact and near counts, and its rounds).
    Unjudged rounds change nothing. Returns the same columns.
    """
    z = F.lit(0)
    pages, ex, near = F.col("t_pages"), F.col("t_exact"), F.col("t_near")
    judged = (F.col("pages_fetched") >= F.lit(int(trap.min_pages))) & (pages > 0)
    share = (pages - ex - near).cast("double") / F.greatest(pages, F.lit(1)).cast("double")
    low = judged & (share < F.lit(float(trap.max_new_share)))

    def streak(col: str, add: Column) -> Column:
        old = F.coalesce(F.col(col), z)
        return F.when(low, old + add).when(judged, z).otherwise(F.col(col)).cast("long")

    strikes = F.when(low, F.coalesce(F.col("trap_strikes"), z) + 1).when(judged, z).otherwise(F.col("trap_strikes"))
    df = (hosts_new.withColumn("trap_strikes", strikes.cast("int"))
          .withColumn("trap_new_share", F.when(judged, share).otherwise(F.col("trap_new_share")))
          .withColumn("trap_streak_pages", streak("trap_streak_pages", pages))
          .withColumn("trap_streak_exact", streak("trap_streak_exact", ex))
          .withColumn("trap_streak_near", streak("trap_streak_near", near)))
    throttle = low & (F.col("trap_strikes") >= F.lit(int(trap.throttle_after_rounds)))
    cap = F.coalesce(F.col("round_cap"), F.lit(int(base_cap)))
    df = df.withColumn("round_cap", F.when(throttle, F.greatest(F.floor(cap / 2), F.lit(1)).cast("int"))
                       .when(judged & ~low, F.lit(None).cast("int")).otherwise(F.col("round_cap")))
    park = low & (F.col("trap_strikes") >= F.lit(int(trap.park_after_rounds)))
    dups = F.col("trap_streak_exact") + F.col("trap_streak_near")
    pct = F.round(F.lit(100.0) * dups / F.greatest(F.col("trap_streak_pages"), F.lit(1))).cast("int")
    reason = F.format_string("trap: %d%% duplicates (%d exact, %d near-duplicates of %d new pages) over %d rounds",
                             pct,
                             F.col("trap_streak_exact"), F.col("trap_streak_near"), F.col("trap_streak_pages"),
                             F.col("trap_strikes"))
    until = _plus_seconds(_ts(now), F.lit(float(trap.park_duration_s)))
    return (df.withColumn("parked_until", F.when(park, until).otherwise(F.col("parked_until")))
            .withColumn("park_reason", F.when(park, reason).otherwise(F.col("park_reason"))))


# -- 6. budget and the merge source -----------------------------------------------------------
#: ``crawldb.error_class`` of a URL marked budget_exhausted: this prefix + ``hosts.budget_reason``.
BUDGET_ERROR_PREFIX = "budget:"


def budget_reason(max_pages_per_host: int, max_bytes_per_host: int) -> Column:
    """Which budget a ``hosts`` row has used up: "pages", "bytes", or null (pages checked first)."""
    return (F.when(F.col("pages_fetched") >= F.lit(int(max_pages_per_host)), F.lit("pages"))
            .when(F.col("bytes_fetched") >= F.lit(int(max_bytes_per_host)), F.lit("bytes")))


def exhausted_hosts(hosts_new: DataFrame, hosts: DataFrame, max_pages_per_host: int,
                    max_bytes_per_host: int) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(``hosts_new`` with ``budget_reason`` set, hosts of this round now out of budget, every host out
    of budget after this round); the last two have ``host`` and ``budget_reason``.

    The reason is recomputed from the counters and the current budgets every
    round, so raising a budget frees a host for the URLs it discovers later.
    """
    why = budget_reason(max_pages_per_host, max_bytes_per_host)
    hosts_new = hosts_new.withColumn("budget_reason", why)
    now_at = hosts_new.where(F.col("budget_reason").isNotNull()).select("host", "budget_reason")
    earlier = (hosts.withColumn("budget_reason", why).where(F.col("budget_reason").isNotNull())
               .select("host", "budget_reason").join(hosts_new.select("host"), "host", "left_anti"))
    return hosts_new, now_at, now_at.unionByName(earlier)


def budget_rows(crawldb: DataFrame, exhausted: DataFrame, *, round_no: int) -> DataFrame:
    """Unfetched crawl-DB rows of exhausted hosts, as ``budget_exhausted`` rows (CRAWLDB columns) with
    ``error_class`` = "budget:" + the host's ``budget_reason``."""
    ex = F.broadcast(exhausted.select("host", "budget_reason"))
    rows = crawldb.where(F.col("status") == Status.UNFETCHED.value).join(ex, "host", "inner")
    return (rows.withColumn("status", F.lit(Status.BUDGET_EXHAUSTED.value))
            .withColumn("error_class", F.concat(F.lit(BUDGET_ERROR_PREFIX), F.col("budget_reason")))
            .withColumn("updated_round", F.lit(int(round_no)).cast("long")).drop("budget_reason"))


def merge_source(updated: DataFrame, new: DataFrame, budget: DataFrame, exhausted: DataFrame) -> DataFrame:
    """One row per url_fp (update > new > budget), CRAWLDB columns + ``_kind``.

    Rows still ``unfetched`` on an exhausted host (``exhausted``: ``host``,
    ``budget_reason``) become ``budget_exhausted``, error_class "budget:<reason>".
    """
    from pyspark.sql import Window

    def shape(df: DataFrame, kind: str, rank: int) -> DataFrame:
        cols = [F.col(f.name).cast(f.dataType).alias(f.name) if f.name in df.columns
                else F.lit(None).cast(f.dataType).alias(f.name) for f in CRAWLDB.fields]
        return df.select(*cols, F.lit(kind).alias("_kind"), F.lit(rank).alias("_rank"))

    allrows = shape(updated, "update", 0).unionByName(shape(new, "new", 1)).unionByName(shape(budget, "budget", 2))
    w = Window.partitionBy("url_fp").orderBy("_rank")
    one = allrows.withColumn("_n", F.row_number().over(w)).where(F.col("_n") == 1).drop("_n", "_rank")
    ex = exhausted.select("host", F.col("budget_reason").alias("_ex"))
    one = one.join(F.broadcast(ex), "host", "left")
    hit = F.col("_ex").isNotNull() & (F.col("status") == Status.UNFETCHED.value)
    return (one.withColumn("error_class", F.when(hit, F.concat(F.lit(BUDGET_ERROR_PREFIX), F.col("_ex")))
                           .otherwise(F.col("error_class")))
            .withColumn("status", F.when(hit, F.lit(Status.BUDGET_EXHAUSTED.value)).otherwise(F.col("status")))
            .select([f.name for f in CRAWLDB.fields] + ["_kind"]))


# -- 7. appends ---------------------------------------------------------------------------------
def fetch_log_rows(prepared: DataFrame, updated: DataFrame, *, round_no: int) -> DataFrame:
    """One FETCH_LOG row per page row except deferred and not_attempted ones (never tried).

    ``updated`` is :func:`mark_duplicates`' result: ``dup_of`` is the decision that
    sets ``crawldb.dup_of``, kept per capture, so the export's ``duplicate_of`` of
    every capture is update's decision (the crawl DB keeps only the latest)."""
    ch = updated.select("url_fp", F.col(_CHANGED).alias("changed"), "dup_of")
    p = prepared.where(F.col(_CAT) != KEEP).join(ch, "url_fp", "left")
    p = (p.withColumn("round", F.lit(int(round_no)).cast("long"))
         .withColumn("n_outlinks", F.when(F.col("outlinks").isNull(), 0).otherwise(F.size("outlinks"))))
    return p.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in FETCH_LOG.fields])


def link_rows(prepared: DataFrame, *, round_no: int) -> DataFrame:
    """Every outlink edge of the round's pages (followed or not), once per (src, dst, kind)."""
    e = _edges(prepared).where(F.col("l.url_fp").isNotNull())
    e = (e.groupBy("src_fp", F.col("l.url_fp").alias("dst_fp"), F.col("l.kind").alias("kind"))
         .agg(F.min(F.coalesce(F.col("l.nofollow"), F.lit(False))).alias("nofollow"),
              F.min(F.col("l.url")).alias("dst_url")))
    e = e.withColumn("round", F.lit(int(round_no)).cast("long"))
    return e.select([F.col(f.name).cast(f.dataType).alias(f.name) for f in LINKS.fields])
