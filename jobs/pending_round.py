"""A fetched round whose update has not committed yet, as the next round must see it (pipelined rounds).

``deltacrawl crawl`` with ``generate.pipeline`` runs update N beside fetch N+1
(``jobs/rounds.py``), so generate N+1 and fetch N+1 read ``crawldb`` and
``hosts`` before update N's MERGEs. These functions give them what update N
will have written, for the columns they read, from round N's ``fetch_list``
and ``fetch_output`` (both committed when the round is ``fetched``):

- **generate N+1** (:func:`generate_crawldb`, :func:`hosts_after`):
  round N's URLs are left out (update N reschedules every one of them; the few
  it returns untouched, ``deferred``/``not_attempted``, come back a round later),
  and the URLs round N discovered are added as the ``unfetched`` rows update N
  will insert: the same :func:`jobs.discover_transforms.discover`, so depth, score
  and source are the ones update writes. A host's page and byte counters get
  round N's pages (budgets stay exact), and its next allowed time, park,
  robots.txt, Crawl-delay, pace and address are what its fetch task ended with.
  Not anticipated: trap judgement (a trap's strike of round N applies from round
  N+2, one round of its cap later) and duplicates (a copy found in round N
  is re-crawled on its regular interval until update N marks it; the links it
  found get their full score here, ``scope.duplicate_score_factor`` of it in
  update N, whose rows are what generate N+2 reads).
- **fetch N+1** (:func:`known_urls`, :func:`hosts_after`): the url_fps a task
  must not follow are the crawl DB's plus round N's pages (URLs followed inside
  round N are not in the crawl DB before update N) and the links round N found
  (update N inserts them: they are generated, never followed, so no later
  generate lists a URL already fetched), and each host starts from the state its
  round-N task left (``next_allowed_at``: no burst at the boundary).

Every function is exact whether or not update N has committed meanwhile: a
``hosts`` row whose ``updated_round`` is N or later is already update N's and
is taken as it is, and the crawl DB's view holds either way
(:func:`generate_crawldb`). Pure transforms (STYLE.md rule 2): DataFrames in,
DataFrames out.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs import hosts_transforms as HT
from jobs import update_transforms as T
from jobs.discover_transforms import discover
from schemas.tables import CRAWLDB, HOSTS


def _pages(fetch_output: DataFrame) -> DataFrame:
    return fetch_output.where(F.col("kind") == "page")


def leaves_nothing_due(conf, pending: dict, now: dt.datetime) -> bool:
    """Whether every URL round ``pending`` attempted is sure not to be due at ``now`` after its update,
    so :func:`generate_crawldb` may leave them all out: the round's fetch began less than the shortest
    interval the transition table can give ago (``[schedule]``: the intervals, and ``retry_base_s``,
    the first back-off). A re-crawl interval shorter than that (a test's 1 s) makes them due again at
    once: the round is then merged before the next is generated, one round after the other."""
    s = conf.schedule
    shortest = min(s.default_interval_s, s.gone_interval_s, s.redirect_perm_interval_s, s.duplicate_interval_s,
                   s.robots_denied_interval_s, s.retry_base_s)
    began = pending.get("fetch_started_at") or pending.get("fetched_at")
    return began is not None and began + dt.timedelta(seconds=float(shortest)) > now


def generate_crawldb(crawldb: DataFrame, fetch_list: DataFrame, fetch_output: DataFrame, conf, *,
                     round_no: int, now: dt.datetime, known: DataFrame | None = None) -> DataFrame:
    """``crawldb`` (CRAWLDB columns) as generate N+1 must see it while round ``round_no`` is not merged.

    Its rows minus round N's URLs (its fetch list and the URLs its tasks followed), plus round N's
    new URLs (unfetched, due at ``now``). Exact whether or not update N committed meanwhile: it
    reschedules every URL of round N (none is due after it but the few it returns untouched, a round
    later here), and a URL it inserted is in ``crawldb``, so not new. A URL round N followed is
    fetched, never new, and never listed again here, even when it was inserted unfetched by the
    update of the round before, which discovered it. ``known`` (default ``crawldb``): the crawl DB's
    ``url_fp``s, when ``crawldb`` holds only some of its rows (:mod:`jobs.list_ahead`).
    """
    urls = F.broadcast(fetch_list.select("url_fp").unionByName(_pages(fetch_output).select("url_fp")).distinct())
    kept = crawldb.join(urls, "url_fp", "left_anti")
    prepared = T.prepare(fetch_output, T.with_followed(fetch_list, fetch_output), None)  # the edges need no o_ row
    new = discover(prepared, crawldb if known is None else known, conf.scope, duplicates=None,
                   follow_nofollow=conf.parse.follow_nofollow, default_interval_s=conf.schedule.default_interval_s, round_no=round_no, now=now)
    new = new.join(urls, "url_fp", "left_anti")
    cols = [F.col(f.name).cast(f.dataType) if f.name in new.columns else F.lit(None).cast(f.dataType).alias(f.name)
            for f in CRAWLDB.fields]
    return kept.select([f.name for f in CRAWLDB.fields]).unionByName(new.select(*cols))


def hosts_after(hosts: DataFrame, fetch_output: DataFrame, conf, *, round_no: int, now: dt.datetime) -> DataFrame:
    """``hosts`` (HOSTS columns) with round N's hosts as their tasks left them and their pages counted.

    :func:`jobs.hosts_transforms.hosts_update` over round N's host rows, with per-host counts of
    its page rows (pages with a response, their wire bytes); the trap state is the old row's.
    """
    pages = _pages(fetch_output)
    tried = ~F.col("outcome").isin("deferred", "not_attempted")
    answered = tried & F.col("status_code").isNotNull()
    counts = pages.groupBy("host").agg(
        F.sum(F.when(answered, 1).otherwise(0)).cast("long").alias("p_pages"),
        F.sum(F.when(answered, F.coalesce(F.col("wire_bytes"), F.lit(0))).otherwise(0)).cast("long").alias("p_bytes"),
        F.lit(0).cast("long").alias("p_dups"), F.lit(0).cast("long").alias("p_new"),
        # the change history of revisits is update N's to add (the schedule's host prior); the view keeps the old
        F.lit(0).cast("long").alias("p_revisits"), F.lit(0).cast("long").alias("p_revisit_changes"),
        F.lit(0.0).alias("p_revisit_span"))
    merged = F.col("updated_round") >= F.lit(int(round_no))
    pending = fetch_output.where(F.col("kind") == "host").join(hosts.where(merged).select("host"), "host", "left_anti")
    counts = counts.join(pending.select("host").distinct(), "host", "left_semi")
    new = HT.hosts_update(hosts, pending, counts, park_duration_s=conf.politeness.failure_park_duration_s,
                          round_no=round_no, now=now).select([f.name for f in HOSTS.fields])
    untouched = hosts.join(new.select("host"), "host", "left_anti").select([f.name for f in HOSTS.fields])
    return untouched.unionByName(new)


def known_urls(crawldb: DataFrame, fetch_output: DataFrame) -> DataFrame:
    """``host``, ``url_fp`` of the URLs a fetch task of round N+1 must not follow: the crawl DB's, round N's
    pages, and the links round N found (update N inserts them unfetched; generate N+1 listed those its
    caps allowed, and the rest wait for a later generate, which must not find them fetched already)."""
    found = (_pages(fetch_output).select(F.explode("outlinks").alias("l"))
             .select(F.col("l.host").alias("host"), F.col("l.url_fp").alias("url_fp")).where(F.col("url_fp").isNotNull()))
    return (crawldb.select("host", "url_fp").unionByName(_pages(fetch_output).select("host", "url_fp"))
            .unionByName(found))
