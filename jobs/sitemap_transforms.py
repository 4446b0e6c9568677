"""Update's sitemap rules (pure transforms): sitemaps due on a robots.txt refresh, URLs due by ``lastmod``.

A sitemap is a crawl-DB row marked ``fetch_kind = 'sitemap'`` (``crawl_udfs/sitemaps.py``): the
fetch task reads it and returns what it lists as outlinks (kind ``sitemap`` with their ``lastmod``,
kind ``sitemap_child`` for an index's children), which ``discover_transforms.discover`` inserts like
any outlink (a child as a sitemap row). Two rules are the sitemaps' own, here:

- :func:`robots_refresh`: a host whose robots.txt was fetched in the round (its host row carries
  ``sitemap_urls``, only with ``sitemaps.enabled``) gets its sitemaps as rows due now: inserted when
  new, made due again when stored (fetched or not modified). A sitemap that failed or is gone keeps
  its schedule (its re-checks back off as a page's do).
- :func:`lastmod_due`: a URL a sitemap lists with a ``lastmod`` later than the URL's last fetch is
  due now, ahead of the schedule, when its copy is stored (fetched or not modified).

Both give "due" rows (``url_fp``, ``host``, ``next_fetch_time`` = now, ``updated_round``): the crawl-DB
MERGE sets only those two columns of a known row (``_kind = 'due'``, after every other kind).
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from crawl_udfs.sitemaps import SITEMAP, URL_KIND
from jobs.update_transforms import ts
from schemas.status import Status

#: Statuses whose row a sitemap may make due before its schedule: a stored copy.
REFRESHED = (Status.FETCHED.value, Status.NOT_MODIFIED.value)


def _due(df: DataFrame, now: dt.datetime, round_no: int) -> DataFrame:
    return df.select("url_fp", "host", ts(now).alias("next_fetch_time"),
                     F.lit(int(round_no)).cast("long").alias("updated_round")).dropDuplicates(["url_fp"])


def robots_refresh(fetch_output: DataFrame, known: DataFrame, *, now: dt.datetime, round_no: int, score: float,
                   default_interval_s: float) -> tuple[DataFrame, DataFrame]:
    """(new sitemap rows, due rows) of the hosts whose robots.txt the round fetched.

    ``known``: the crawl DB, or update's slice of it (it holds every row of the round's hosts with
    ``url_fp`` and ``status``: ``jobs/crawldb_slice.py``; the driver engine's gather keys the sitemap
    URLs by ``url_fp`` instead, ``jobs/update_gather.py``). A new sitemap row is a seed of its host:
    depth 0 (its index level), score ``score`` (``inject.score``), due now."""
    s = (fetch_output.where((F.col("kind") == "host") & F.col("sitemap_urls").isNotNull())
         .select("host", F.explode("sitemap_urls").alias("url"))
         .withColumn("url_fp", F.xxhash64("url")).dropDuplicates(["url_fp"]))
    k = known.select("url_fp", F.col("status").alias("_status"))
    due = _due(s.join(k, "url_fp").where(F.col("_status").isin(*REFRESHED)), now, round_no)
    now_ts, zero = ts(now), F.lit(0)
    new = s.join(k, "url_fp", "left_anti").select(
        "url_fp", "host", F.lit(Status.UNFETCHED.value).alias("status"), now_ts.alias("next_fetch_time"),
        F.lit(float(score)).alias("score"), zero.alias("depth"), zero.alias("redirect_hops"), zero.alias("retries"),
        zero.alias("fetch_count"), zero.alias("change_count"), zero.alias("unchanged_count"),
        F.lit(float(default_interval_s)).alias("fetch_interval_s"), now_ts.alias("first_seen"),
        F.lit(int(round_no)).cast("long").alias("discovered_round"),
        F.lit(int(round_no)).cast("long").alias("updated_round"), "url", F.lit(SITEMAP).alias("fetch_kind"))
    return new, due


def lastmod_due(prepared: DataFrame, known: DataFrame, *, now: dt.datetime, round_no: int) -> DataFrame:
    """Due rows of the URLs the round's sitemaps list with a ``lastmod`` after their last fetch.

    ``prepared``: ``update_transforms.prepare``'s page rows (their ``outlinks``); ``known``: the crawl
    DB or update's slice (every column of the outlink targets)."""
    e = (prepared.where(F.col("outlinks").isNotNull())
         .select(F.explode("outlinks").alias("l"))
         .where((F.col("l.kind") == URL_KIND) & F.col("l.lastmod").isNotNull())
         .groupBy(F.col("l.url_fp").alias("url_fp")).agg(F.max("l.lastmod").alias("_lastmod")))
    k = known.select("url_fp", "host", "status", "last_fetch_time", "next_fetch_time")
    hit = (F.col("status").isin(*REFRESHED) & (F.col("_lastmod") > F.col("last_fetch_time"))
           & (F.col("next_fetch_time") > ts(now)))
    return _due(e.join(k, "url_fp").where(hit), now, round_no)
