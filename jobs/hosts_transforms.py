"""Pure transforms of ``update`` for the ``hosts`` table: trap signals, host rows, trap judgement, budgets.

DataFrames in, DataFrames out, plain values as parameters; no table is read or
written here (STYLE.md rule 2). The crawl-DB transforms and the column helpers
they share are in :mod:`jobs.update_transforms`; ``jobs/update.py`` runs both.

Pipeline:

    trap_signals(updated, near, crawldb)        per host: first copies, copies of the host's own pages
    host_next(hosts, host_rows, ...)            each host's next allowed time and park, for transition
    page_counts(updated)                        per host: pages, bytes, statuses of the round
    hosts_update(hosts, host_rows, counts,...)  the ``hosts`` rows of the round's hosts
    judge_traps(hosts_new, ...)                 trap strikes, throttle (round_cap), trap park by evidence
    exhausted_hosts(hosts_new, hosts, ...)      hosts out of their page or byte budget, and why
    budget_rows(crawldb, exhausted, ...)        unfetched URLs of those hosts
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from crawl_udfs import rate_prior as RP
from crawl_udfs.trap_evidence import new_share_bound, proves_trap, z_score
from jobs.schedule_transforms import GAP, MASS
from jobs.update_transforms import (BUDGET_ERROR_PREFIX, CAT, CHANGED, FIRST, KEEP, WAS, WIRE, plus_seconds,
                                    touching, ts)
from schemas.status import Status
from schemas.tables import HOSTS


# -- trap signals ----------------------------------------------------------------------------
def trap_signals(updated: DataFrame, near: DataFrame | None, crawldb: DataFrame) -> DataFrame:
    """Per host of the round: ``t_pages`` first copies, of which ``t_exact`` exact and ``t_near`` near
    duplicates of the host's own pages: the evidence :func:`judge_traps` weighs.

    ``updated`` is the round after both duplicate steps (``status``, ``dup_of``):
    :func:`jobs.exact_dup_transforms.mark_duplicates` (exact, any host) and, with
    ``dedup.near_duplicates`` on, :func:`jobs.dedup_transforms.mark_near_duplicates`;
    ``near`` is that step's lookup, :func:`jobs.dedup_transforms.near_duplicate_of`
    (``url_fp``, ``_near_of``), read here only to tell a near copy from an exact one.
    With the key off ``near`` is None: no page is a near-duplicate (fetch computed
    no MinHash to look up), so traps are judged on exact duplicates only. There is
    no second lookup here: the index and its rules are the duplicate step's.

    A first copy is an ok row with a digest for a URL that had no stored copy
    (``_first``); re-fetches are not judged (an unchanged page is no trap). A
    first copy that is a duplicate counts against its host when
    - its original (``dup_of``) is a page of the same host: the host copies itself; or
    - another first copy of the host in this round names the same original on
      another host: of n such copies, n - 1 count (smallest url_fp spared), since
      they copy one page and so each other (a trap on a mirror still repeats itself).
    A copy of a page of another host alone does not count: a mirror is no trap,
    and which of two hosts was fetched first must not decide which one is parked.
    The original's host is read from the round's rows and from ``crawldb``'s
    ``url_fp``/``host`` (one scan, semi-joined with the round's broadcast originals:
    O(crawl DB) in two columns); an original found in neither is taken as another host's.
    """
    first = updated.where(F.col(FIRST))
    copies = first.where(F.col("status") == Status.DUPLICATE.value).select("host", "url_fp", "dup_of")
    if near is not None:
        copies = copies.join(near.select("url_fp", F.lit(True).alias("_near")), "url_fp", "left")
    else:
        copies = copies.withColumn("_near", F.lit(None).cast("boolean"))
    originals = F.broadcast(copies.select(F.col("dup_of").alias("url_fp")).distinct())
    of_host = (crawldb.select("url_fp", "host").join(originals, "url_fp", "left_semi")
               .unionByName(updated.select("url_fp", "host").join(originals, "url_fp", "left_semi"))
               .dropDuplicates(["url_fp"]).select(F.col("url_fp").alias("dup_of"), F.col("host").alias("_of_host")))
    rank = F.row_number().over(Window.partitionBy("host", "dup_of").orderBy("url_fp"))
    own = F.coalesce(F.col("_of_host") == F.col("host"), F.lit(False)) | (rank > 1)
    near_copy = F.coalesce(F.col("_near"), F.lit(False))
    evidence = copies.join(of_host, "dup_of", "left").select(
        "url_fp", (own & ~near_copy).alias("_exact"), (own & near_copy).alias("_nearly"))
    j = first.select("host", "url_fp").join(evidence, "url_fp", "left")

    def total(flag: str) -> Column:
        return F.coalesce(F.sum(F.col(flag).cast("long")), F.lit(0)).cast("long")
    return j.groupBy("host").agg(F.count(F.lit(1)).cast("long").alias("t_pages"), total("_exact").alias("t_exact"),
                                 total("_nearly").alias("t_near"))


# -- hosts ---------------------------------------------------------------------------------
def host_next(hosts: DataFrame, host_rows: DataFrame, *, park_duration_s: float, now: dt.datetime) -> DataFrame:
    """``host``, ``next_allowed_at``, ``parked_until`` after this round (for deferred URLs)."""
    h = _host_rows(host_rows)
    old = touching(hosts, host_rows, "host").select("host", F.col("next_allowed_at").alias("o_next"),
                                                     F.col("parked_until").alias("o_parked"))
    return h.join(old, "host", "full").select(
        "host", F.coalesce(F.col("next_allowed_at"), F.col("o_next")).alias("next_allowed_at"),
        _parked_until(park_duration_s, now).alias("parked_until"))


def _parked_until(park_duration_s: float, now: dt.datetime) -> Column:
    until = plus_seconds(ts(now), F.lit(float(park_duration_s)))
    return F.when(F.coalesce(F.col("parked"), F.lit(False)), until).otherwise(F.col("o_parked"))


def _host_rows(host_rows: DataFrame) -> DataFrame:
    """One row per host (the contract gives one; a second one, if any, only adds its requests)."""
    h = host_rows.where(F.col("kind") == "host")
    w = Window.partitionBy("host")
    first = F.row_number().over(w.orderBy("partition", F.col("robots_fetched_at").desc_nulls_last()))
    return (h.withColumn("requests", F.sum(F.coalesce(F.col("requests"), F.lit(0))).over(w))
            .withColumn("_n", first).where(F.col("_n") == 1).drop("_n"))


def page_counts(updated: DataFrame) -> DataFrame:
    """Per host: pages with a response, their wire bytes, duplicates, pages with new content, and the
    revisits that told changed from unchanged (count, changed, seconds since the visit before)."""
    attempted = F.col(CAT) != KEEP
    revisit = F.col(GAP).isNotNull() if GAP in updated.columns else F.lit(False)
    mass = []
    if MASS in updated.columns:  # the revisits' mass, summed per grid point (null: no revisit measured one)
        mass = [F.when(F.count(F.col(MASS)) > 0, F.array(*[F.sum(F.col(MASS)[i]) for i in range(len(RP.LOG_GRID))]))
                .alias("p_rate_mass")]
    return updated.groupBy("host").agg(*mass,
        F.sum(F.when(revisit, 1).otherwise(0)).cast("long").alias("p_revisits"),
        F.sum(F.when(revisit & F.col(CHANGED), 1).otherwise(0)).cast("long").alias("p_revisit_changes"),
        F.sum(F.when(revisit, F.col(GAP) if GAP in updated.columns else None).otherwise(0.0)).alias("p_revisit_span"),
        F.sum(F.when(attempted & F.col("http_status").isNotNull(), 1).otherwise(0)).cast("long").alias("p_pages"),
        F.sum(F.col(WIRE)).cast("long").alias("p_bytes"),
        F.sum(F.when(attempted & (F.col("status") == Status.DUPLICATE.value), 1).otherwise(0))
         .cast("long").alias("p_dups"),
        F.sum(F.when((F.col(CAT) == "ok") & (F.col("status") != Status.DUPLICATE.value)
                     & F.coalesce(F.col(CHANGED), F.lit(True)), 1).otherwise(0)).cast("long").alias("p_new"))


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
    old = touching(hosts, host_rows.select("host").unionByName(counts.select("host")), "host")
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
        F.col("o_dup_patterns").alias("dup_patterns"),  # the old row's: update relearns them (pattern_transforms)
        add("revisits", F.col("p_revisits")).alias("revisits"),
        add("revisit_changes", F.col("p_revisit_changes")).alias("revisit_changes"),
        (F.coalesce(F.col("o_revisit_span_s"), F.lit(0.0)) + F.coalesce(F.col("p_revisit_span"), F.lit(0.0)))
         .alias("revisit_span_s"),
        _rate_mass(counts).alias("rate_mass"),
        *[F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c) for c in ("t_pages", "t_exact", "t_near")])


def _rate_mass(counts: DataFrame) -> Column:
    """The host's mass after the round: the old row's plus its revisits' (``page_counts``), per grid point."""
    if "p_rate_mass" not in counts.columns:
        return F.col("o_rate_mass")
    new = F.col("p_rate_mass")
    return (F.when(new.isNull(), F.col("o_rate_mass")).when(F.col("o_rate_mass").isNull(), new)
            .otherwise(F.zip_with(F.col("o_rate_mass"), new, lambda a, b: a + b)))


def judge_traps(hosts_new: DataFrame, trap, *, base_cap: int, now: dt.datetime) -> DataFrame:
    """The trap rule on :func:`hosts_update` rows (``trap`` is the ``[trap]`` section).

    A round is judged when ``pages_fetched >= trap.min_pages`` and ``t_pages > 0``;
    its new-content share is ``(t_pages - t_exact - t_near) / t_pages``. A judged
    round under ``trap.max_new_share`` is a strike: ``trap_strikes`` + 1 and the
    streak counters grow by the round's; any other judged round sets them to 0 and
    lifts the throttle (``round_cap`` null). Unjudged rounds change nothing.

    What a strike does depends on how much the streak proves (its pages, not its rounds):
    - strong evidence, the host is parked at once: the upper bound of the streak's
      new-content share at ``trap.park_confidence``
      (:func:`crawl_udfs.trap_evidence.new_share_bound`, Wilson) is under
      ``trap.max_new_share``. With the defaults (0.1, 0.99), a streak of 49 first
      copies with none new parks, 300 with 2 new park, 5 with none never do: a
      round of hundreds of copies ends the trap in that round instead of halving
      the cap round after round (issue 14: a faceted trap reached 823 requests
      under a per-round cap of 400);
    - weak evidence, the throttle: from ``trap.throttle_after_rounds`` strikes
      on, each strike halves ``round_cap`` (from ``base_cap``, generate's cap; at
      least 1), and at ``trap.park_after_rounds`` strikes the host is parked all the same.
    Parked: ``parked_until = now + trap.park_duration_s`` and ``park_reason`` says the
    numbers, e.g. "trap: 99% duplicates (2 exact, 296 near-duplicates of 300 new pages)
    over 1 round; new-content share at most 2.9% at 99% confidence". Returns the same columns.
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
    n = F.greatest(F.col("trap_streak_pages"), F.lit(1)).cast("double")  # > 0 on a strike; never divide by 0
    dups = F.col("trap_streak_exact") + F.col("trap_streak_near")
    zq, most = z_score(float(trap.park_confidence)), float(trap.max_new_share)
    bound = new_share_bound(n - dups, n, zq, F.sqrt)
    proven = proves_trap(n - dups, n, most, zq, F.sqrt)
    park = low & ((F.col("trap_strikes") >= F.lit(int(trap.park_after_rounds))) | proven)
    pct = F.round(F.lit(100.0) * dups / n).cast("int")
    rounds = F.when(F.col("trap_strikes") == 1, F.lit("round")).otherwise(F.lit("rounds"))
    reason = F.format_string(
        "trap: %d%% duplicates (%d exact, %d near-duplicates of %d new pages) over %d %s; "
        "new-content share at most %.1f%% at %s%% confidence",
        pct, F.col("trap_streak_exact"), F.col("trap_streak_near"), F.col("trap_streak_pages"),
        F.col("trap_strikes"), rounds, F.lit(100.0) * bound, F.lit(f"{100 * float(trap.park_confidence):g}"))
    until = plus_seconds(ts(now), F.lit(float(trap.park_duration_s)))
    return (df.withColumn("parked_until", F.when(park, until).otherwise(F.col("parked_until")))
            .withColumn("park_reason", F.when(park, reason).otherwise(F.col("park_reason"))))


# -- budgets -----------------------------------------------------------------------------------


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
    ``error_class`` = "budget:" + the host's ``budget_reason``, and ``_was`` (their old status)."""
    ex = F.broadcast(exhausted.select("host", "budget_reason"))
    rows = crawldb.where(F.col("status") == Status.UNFETCHED.value).join(ex, "host", "inner")
    return (rows.withColumn(WAS, F.col("status")).withColumn("status", F.lit(Status.BUDGET_EXHAUSTED.value))
            .withColumn("error_class", F.concat(F.lit(BUDGET_ERROR_PREFIX), F.col("budget_reason")))
            .withColumn("updated_round", F.lit(int(round_no)).cast("long")).drop("budget_reason"))
