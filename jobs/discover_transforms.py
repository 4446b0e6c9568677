"""Pure transforms of ``update`` for discovery: the crawl-DB rows of URLs first found this round.

One job: from the round's outlinks (:func:`jobs.update_transforms.edges`; every one admitted by the
fetch task) and redirect and canonical targets, the new URLs, each with the depth, score and source
the fetch task would give it (``crawl_udfs.admission``'s rules, built as Columns) and, behind a
permanent redirect, the history it moves (:data:`jobs.update_transforms.MOVED`). Used by
``jobs/update.py`` (what the MERGE inserts) and ``jobs/pending_round.py`` (what a round not updated
yet will insert). The rules in prose: ``docs/UPDATE.md``, "New URLs".
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from crawl_udfs.admission import SAME_DOC_KINDS, link_depth, link_score
from crawl_udfs.sitemaps import CHILD_KIND, SITEMAP
from jobs.update_transforms import CAT, KEEP, MOVED, edges, touching, ts
from schemas.status import Status


def followed(link: Column, follow_nofollow: bool) -> Column:
    """``crawl_udfs.admission.followed`` as a Column over an outlink struct ``link``."""
    same_doc = link.getField("kind").isin(*SAME_DOC_KINDS)
    if follow_nofollow:
        return F.lit(True) & link.isNotNull()
    return same_doc | ~F.coalesce(link.getField("nofollow"), F.lit(False))


def _shares_score(link: Column, follow_nofollow: bool) -> Column:
    """``crawl_udfs.admission.shares_score`` as a Column: followed, and not a redirect or canonical target."""
    return followed(link, follow_nofollow) & ~link.getField("kind").isin(*SAME_DOC_KINDS)


class ColumnOps:
    """``crawl_udfs.admission.PlainOps`` on Columns: the task's depth and score rules, built as Columns."""

    @staticmethod
    def when(cond: Column, then: Column, otherwise: Column) -> Column:
        return F.when(cond, then).otherwise(otherwise)

    @staticmethod
    def greatest(value: Column, floor: int) -> Column:
        return F.greatest(value, F.lit(floor))


COLUMN_OPS = ColumnOps()


def discover(prepared: DataFrame, crawldb: DataFrame, scope, *, duplicates: DataFrame | None, follow_nofollow: bool,
             default_interval_s: float, round_no: int, now: dt.datetime) -> DataFrame:
    """Crawl-DB rows for URLs first found this round (absent from ``crawldb``), one per url_fp.

    Every outlink was admitted by the fetch task (``crawl_udfs.admission``, with
    its page's host and depth), which also gave its ``host``: no rule is applied
    again here. ``scope`` is the ``[scope]`` section (``score_decay``, ``duplicate_score_factor``).
    Followed: links not marked nofollow (all when ``follow_nofollow``), and redirect and canonical
    targets always.
    depth and score: ``crawl_udfs.admission.link_depth`` / ``link_score``, the rules the fetch task
    gives a link it follows in the round (parent depth + 1, parent score * score_decay / the parent's
    followed links; redirect/canonical: the parent's depth and score); a redirect target's
    redirect_hops = the parent's + 1. ``duplicates``: the round's updated rows with every duplicate
    marked (exact and near: ``status``, ``_cat``); a page that became a duplicate this round passes
    only ``scope.duplicate_score_factor`` of its score to its links that share it (redirect and
    canonical targets keep the whole score). None: no page is a duplicate (the pipelined view of a
    round not updated yet, ``jobs/pending_round.py``, and the fetch task, which cannot know). Within
    the batch a URL keeps its smallest depth and largest score; its source is
    the parent of the shallowest path (then fewest hops, smallest src_fp).
    """
    e = edges(prepared)
    same_doc = F.col("l.kind").isin(*SAME_DOC_KINDS)
    src_score = F.col("src_score")
    if duplicates is not None:  # a kept row (deferred) has no edges: its old status is no decision of this round
        dup = (duplicates.where((F.col("status") == Status.DUPLICATE.value) & (F.col(CAT) != KEEP))
               .select(F.col("url_fp").alias("src_fp"), F.lit(True).alias("_src_dup")))
        e = e.join(dup, "src_fp", "left")
        src_score = F.when(F.col("_src_dup").isNotNull() & ~same_doc,
                           src_score * F.lit(float(scope.duplicate_score_factor))).otherwise(src_score)
    n_sharing = F.size(F.filter("outlinks", lambda x: _shares_score(x, follow_nofollow)))
    e = e.where(followed(F.col("l"), follow_nofollow) & F.col("l.url_fp").isNotNull())
    e = e.select(
        F.col("l.url_fp").alias("url_fp"), F.col("l.url").alias("url"), F.col("l.host").alias("host"),
        "src_fp", F.when(F.col("l.kind") == "redirect", F.col("_moved")).alias("_moved"),
        link_depth(F.col("src_depth"), same_doc, COLUMN_OPS).alias("depth"),
        F.when(F.col("l.kind") == "redirect", F.col("src_hops") + 1).otherwise(F.lit(0)).alias("redirect_hops"),
        link_score(src_score, same_doc, n_sharing, float(scope.score_decay), COLUMN_OPS).alias("score"),
        F.when(F.col("l.kind") == CHILD_KIND, F.lit(SITEMAP)).alias("fetch_kind"))
    best = F.min(F.struct("depth", "redirect_hops", "src_fp", "url", "host")).alias("b")
    moved = F.min_by("_moved", F.when(F.col("_moved").isNotNull(), F.col("src_fp"))).alias("_moved")
    d = e.groupBy("url_fp").agg(best, F.max("score").alias("score"), moved, F.max("fetch_kind").alias("fetch_kind"))
    d = d.join(touching(crawldb.select("url_fp"), d, "url_fp"), "url_fp", "left_anti")
    now_ts = ts(now)
    zero = F.lit(0)
    return d.select(
        "url_fp", F.col("b.host").alias("host"), F.lit(Status.UNFETCHED.value).alias("status"),
        now_ts.alias("next_fetch_time"), "score", F.col("b.depth").alias("depth"),
        F.col("b.redirect_hops").alias("redirect_hops"), zero.alias("retries"), zero.alias("fetch_count"),
        F.coalesce(F.col("_moved.change_count"), zero).alias("change_count"),
        F.coalesce(F.col("_moved.unchanged_count"), zero).alias("unchanged_count"),
        F.lit(float(default_interval_s)).alias("fetch_interval_s"), now_ts.alias("first_seen"),
        F.lit(int(round_no)).cast("long").alias("discovered_round"),
        F.lit(int(round_no)).cast("long").alias("updated_round"),
        F.col("b.src_fp").alias("source_fp"), F.col("b.url").alias("url"),
        *[F.col(f"_moved.{c}").alias(c) for c in MOVED[2:]], "fetch_kind")
