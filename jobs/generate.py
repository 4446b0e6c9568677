"""generate: pick round N's fetch list from the crawl DB (docs/ARCHITECTURE.md, "The round", step 1).

A URL is generated when it is *due* (``jobs/due.py``: status in ``schemas.status.ELIGIBLE``
and ``next_fetch_time`` at or before the round's horizon, ``now`` by default), its host is
not parked (``hosts.parked_until`` null or past) and its host has budget left (``hosts.pages_fetched <
budget.max_pages_per_host`` and ``hosts.bytes_fetched < budget.max_bytes_per_host``;
URLs of an exhausted host are simply skipped — ``update`` marks them). Among
those, first the smallest virtual due time (``next_fetch_time`` minus the URL's
head start for importance, depth and duplicates: ``jobs/priority.py``, the
``[priority]`` keys; a URL that waits passes better ones that came later, so none
starves), then ``score`` desc, ``next_fetch_time`` asc, ``url_fp`` (a total
order, so the list is deterministic): at most
``max_per_host`` per host (or the host's ``hosts.round_cap`` when trap
throttling lowered it) and never more than the host's remaining page budget,
and, when ``generate.max_urls_per_host`` is 0, never more than
floor(``fetch.task_budget_s`` / the host's delay): the larger of
``politeness.host_delay_s``, ``hosts.crawl_delay_s`` and ``hosts.delay_s`` (the
host's pace when its last fetch task ended: the delay with response times and
back-off, plus its longest recent request), so a host with Crawl-delay 10 is
given what it can be fetched in one task, not ten times that, and a slow-drip
host whose every request lasts the whole timeout a handful;
then at most ``top_n`` in all, ``discovery_share`` of it kept for never-fetched
URLs (status unfetched) and the rest for re-crawl; places one side cannot fill
go to the other. Each host, or each group of hosts sharing a
last-known IP, gets one fetch partition: ``pmod(xxhash64(coalesce(ip, host)), n)``,
a pure column (no DNS; STYLE.md rule 4). The addresses come from the fetch
tasks (via update) and, for listed hosts never fetched, from the resolve step
(``jobs/resolve.py``) that ``run`` calls between selecting the list and writing it.

Round logic (the protocol is ``jobs.ledger.step``): a new round N = last + 1 is opened only
when the last round is ``updated`` (or there is none), or, for a pipelined crawl
(``generate.pipeline``, :mod:`jobs.pending_round`), when it is ``fetched`` and every
round before it is updated; otherwise the unfinished round's number is returned and
nothing is written. The list is written with a
``replaceWhere round = N`` overwrite, then the ledger says ``generated``: a crash
in between leaves the ledger at N-1 ``updated``, and the rerun overwrites round
N's rows. When nothing is due no round is opened.

What it scans, and why. The crawl DB is read once, for the ~15 columns the list
needs (Parquet is columnar: the long ``url`` is the only wide one read). The
filter ``status IN (…) AND next_fetch_time <= now`` is pushed into the Delta scan,
where the per-file min/max statistics (collected on the first 32 columns;
``status`` and ``next_fetch_time`` are the 3rd and 4th) skip every file whose
earliest ``next_fetch_time`` is after ``now``. That skipping only pays when files
are clustered by time — new URLs are appended with ``next_fetch_time = now`` and
so come clustered already, and ``OPTIMIZE … ZORDER BY (next_fetch_time)`` (or
liquid clustering on it) keeps re-crawled rows so; without it every file holds a
few due URLs and the scan is whole-table, though still column-pruned. After the
filter, work grows with the *due* URLs, not the crawl DB: the ``hosts`` table
(one row per host, four columns) is joined in; the per-host cap is a
``row_number() <= k`` window that Spark turns into a map-side per-host top-k
(``WindowGroupLimit``, for k up to ``spark.sql.optimizer.windowGroupLimitThreshold``,
1000 by default) before the shuffle; the per-side cap is a distributed top-k
(``orderBy().limit(top_n)``: each task keeps its best top_n); only the
<= 2 x top_n survivors are ranked for the shares. ``run`` caches the <= top_n
selected rows, counts them once and writes them from the cache.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from crawl_udfs.config import Config, ConfigError
from jobs import common, faults, ledger, list_ahead, pending_round, priority, resolve
from jobs.due import due_horizon, due_urls
from schemas import counters
from schemas.status import ELIGIBLE, Status
from schemas.tables import FETCH_LIST, TABLES

#: Columns of the list (FETCH_LIST without ``round``) and the ``discovery`` flag ``run`` counts.
LIST_COLUMNS = tuple(f.name for f in FETCH_LIST.fields if f.name != "round")


def max_urls_per_host(conf: Config) -> int:
    """floor(task budget / host delay), or ``generate.max_urls_per_host`` when that is lower (0: not set).

    No host's queue outlasts a task at the configured delay, whatever the configured cap
    (a host that has no ``hosts`` row yet, with no delay of its own, gets no more); and
    :func:`select_due` also caps each host by :func:`delay_window_s` over the host's own
    pace (a configured 40 does not give a host with ``Crawl-delay: 10`` more than it can
    fetch in the window)."""
    configured = conf.generate.max_urls_per_host
    if configured < 0:
        raise ConfigError(f"generate.max_urls_per_host must be >= 0, got {configured}")
    by_delay = max(1, math.floor(delay_window_s(conf) / max(conf.politeness.host_delay_s, 0.001)))
    return min(configured, by_delay) if configured else by_delay


def delay_window_s(conf: Config) -> float:
    """The time a host's queue must fit in: ``fetch.task_budget_s``."""
    return float(conf.fetch.task_budget_s)


def fetch_partitions(spark, conf: Config) -> int:
    """``generate.fetch_partitions``, or when 0, Spark's defaultParallelism."""
    n = conf.generate.fetch_partitions
    if n < 0:
        raise ConfigError(f"generate.fetch_partitions must be >= 0, got {n}")
    return n or max(1, spark.sparkContext.defaultParallelism)


def host_cap(*, max_per_host: int, max_pages_per_host: int, delay_window_s: float | None):
    """A host's URLs in one round at most, as a Column over its ``hosts`` columns (see :func:`select_due`):
    its remaining page budget, ``max_per_host`` or its trap-throttled ``round_cap`` below it and, with a
    ``delay_window_s``, floor(window / its delay). The fetch task's in-round following keeps each
    host's fetch list plus followed URLs within it (``jobs/fetch.fetch_input``)."""
    from pyspark.sql import functions as F

    caps = [F.lit(int(max_pages_per_host)) - F.coalesce(F.col("pages_fetched"), F.lit(0)),
            F.least(F.col("round_cap"), F.lit(int(max_per_host)))]  # least skips a null round_cap
    if delay_window_s is not None:  # greatest/least skip nulls: a host with no known delay keeps max_per_host
        delay = F.greatest(F.col("delay_s"), F.col("crawl_delay_s"), F.lit(0.001))
        caps.append(F.greatest(F.floor(F.lit(float(delay_window_s)) / delay), F.lit(1)))
    return F.least(*caps)


def select_due(crawldb, hosts, *, now, max_per_host: int, top_n: int, discovery_share: float,
               n_partitions: int, max_pages_per_host: int, max_bytes_per_host: int,
               delay_window_s: float | None, weights: priority.Weights, pattern_action: str | None = None,
               pattern_score_factor: float = 1.0, due_by=None):
    """The fetch list (FETCH_LIST columns without ``round``, plus a boolean ``discovery``, and the host's
    ``ip`` and ``has_host_row`` for :mod:`jobs.resolve`) of ``crawldb`` at ``now``.

    ``crawldb`` and ``hosts`` are DataFrames with the CRAWLDB and HOSTS columns
    (only those read here are needed); ``now`` a naive UTC datetime; ``due_by`` (default ``now``)
    the due horizon (:func:`due_horizon`): rows due by then are listed. With a
    ``delay_window_s`` (see :func:`delay_window_s`), a host is also given no more
    than floor(delay_window_s / its delay) URLs, its delay being the larger of
    ``hosts.delay_s`` (the effective delay its last task ended with) and
    ``hosts.crawl_delay_s``: a host with Crawl-delay 10 gets a tenth of a 1 s host's. ``weights``:
    the ``[priority]`` head-start keys (:class:`jobs.priority.Weights`).

    A URL matching one of its host's learnt ``hosts.dup_patterns`` (``jobs/pattern_transforms.py``)
    is left out with ``pattern_action`` "skip", or has its score multiplied by
    ``pattern_score_factor`` with "lower" (``dedup.pattern_action``), and counts as a duplicate in its
    head start; None ignores the patterns.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not 0.0 <= discovery_share <= 1.0:
        raise ConfigError(f"generate.discovery_share must be within 0..1, got {discovery_share}")
    if n_partitions < 1:
        raise ValueError(f"n_partitions must be >= 1, got {n_partitions}")
    top_n, max_per_host = int(top_n), int(max_per_host)
    order = priority.order()
    now_lit = F.lit(now).cast("timestamp")

    due = (due_urls(crawldb, due_by or now)
           .select("url_fp", "host", "status", "next_fetch_time", "score", "depth", "redirect_hops", "etag",
                   "last_modified", F.col("digest").alias("prev_digest"),
                   F.col("warc_record_id").alias("prev_warc_record_id"),
                   F.col("warc_fetch_time").alias("prev_fetch_time"), "url", "importance", "fetch_kind"))
    host_info = hosts.select("host", "ip", "parked_until", "pages_fetched", "bytes_fetched", "round_cap",
                             "delay_s", "crawl_delay_s", "dup_patterns", F.lit(True).alias("has_host_row"))
    remaining = host_cap(max_per_host=max_per_host, max_pages_per_host=max_pages_per_host,
                         delay_window_s=delay_window_s)
    allowed = with_budget_left(due.join(host_info, "host", "left")
                               .where(F.col("parked_until").isNull() | (F.col("parked_until") <= now_lit)),
                               remaining, max_bytes_per_host)
    allowed = in_order(allowed, weights, pattern_action, pattern_score_factor)

    # Per-host cap. The literal bound lets Spark insert a map-side per-host top-k.
    per_host = (allowed.withColumn("host_rank", F.row_number().over(Window.partitionBy("host").orderBy(*order)))
                .where(F.col("host_rank") <= F.lit(max_per_host))
                .where(F.col("host_rank") <= F.col("remaining"))
                .withColumn("discovery", F.col("status") == F.lit(Status.UNFETCHED.value)))

    # Best top_n of each side (distributed top-k), then shares with spill-over:
    # the places within a side's share come first (tier 0), then the best of
    # what either side has left over (tier 1), top_n in all. A side short of its
    # share has nothing left over, so the other side fills its places.
    discovery_quota = math.floor(top_n * discovery_share)
    recrawl_quota = top_n - discovery_quota
    side = [per_host.where(F.col("discovery")).orderBy(*order).limit(top_n),
            per_host.where(~F.col("discovery")).orderBy(*order).limit(top_n)]
    candidates = side[0].unionByName(side[1])
    side_rank = F.row_number().over(Window.partitionBy("discovery").orderBy(*order))
    quota = F.when(F.col("discovery"), F.lit(discovery_quota)).otherwise(F.lit(recrawl_quota))
    chosen = (candidates.withColumn("tier", (side_rank > quota).cast("int"))
              .orderBy(F.col("tier").asc(), *order).limit(top_n))

    return (chosen.withColumn("partition", partition_of(F.coalesce(F.col("ip"), F.col("host")), n_partitions))
            .withColumn("has_host_row", F.col("has_host_row").isNotNull())
            .withColumn("pages_fetched", F.coalesce(F.col("pages_fetched"), F.lit(0).cast("long")))
            .select(*LIST_COLUMNS, "discovery", "ip", "has_host_row"))


def partition_of(key, n_partitions: int):
    """The fetch partition of a host whose address, or name when it has none, is the Column ``key``."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(key), F.lit(int(n_partitions))).cast("int")


def with_addresses(selected, addresses: dict[str, str], n_partitions: int):
    """``selected`` (:func:`select_due`'s rows) with the hosts of ``addresses`` (host -> ip, found by
    :func:`jobs.resolve.run`) moved to their address's partition."""
    from pyspark.sql import functions as F

    if not addresses:
        return selected
    found = selected.sparkSession.createDataFrame(sorted(addresses.items()), "host string, _ip string")
    return (selected.join(F.broadcast(found), "host", "left").withColumn("ip", F.coalesce(F.col("_ip"), F.col("ip")))
            .withColumn("partition", partition_of(F.coalesce(F.col("ip"), F.col("host")), n_partitions)).drop("_ip"))


def selection(crawldb, hosts, conf: Config, *, now, n_partitions: int, due_by=None):
    """:func:`select_due` with the configured keys (what :func:`run` lists)."""
    action, factor = pattern_args(conf)
    return select_due(crawldb, hosts, now=now, due_by=due_by, max_per_host=max_urls_per_host(conf),
                      top_n=conf.generate.top_n, discovery_share=conf.generate.discovery_share, n_partitions=n_partitions,
                      max_pages_per_host=conf.budget.max_pages_per_host,
                      max_bytes_per_host=conf.budget.max_bytes_per_host, delay_window_s=delay_window_s(conf),
                      weights=priority.Weights.of(conf.priority), pattern_action=action, pattern_score_factor=factor)


def next_due(crawldb, hosts, *, max_per_host: int, max_pages_per_host: int, max_bytes_per_host: int):
    """A one-row DataFrame ``at``: when the earliest URL that :func:`select_due` could list falls due
    (the later of its ``next_fetch_time`` and its host's ``parked_until``), null when no URL ever will
    (no eligible status, or only hosts out of budget). A URL a learnt pattern skips counts: its time
    may be now while no list holds it (``rounds.crawl`` then polls)."""
    from pyspark.sql import functions as F

    eligible = crawldb.where(F.col("status").isin([s.value for s in ELIGIBLE])).select("host", "next_fetch_time")
    host_info = hosts.select("host", "parked_until", "pages_fetched", "bytes_fetched", "round_cap")
    remaining = host_cap(max_per_host=max_per_host, max_pages_per_host=max_pages_per_host, delay_window_s=None)
    listable = with_budget_left(eligible.join(host_info, "host", "left"), remaining, max_bytes_per_host)
    return listable.agg(F.min(F.greatest("next_fetch_time", "parked_until")).alias("at"))


def with_budget_left(rows, remaining, max_bytes_per_host: int):
    """``rows`` (with their host's ``bytes_fetched``) whose host may still be given URLs: bytes under
    ``max_bytes_per_host`` and ``remaining`` (:func:`host_cap`) above 0, kept as column ``remaining``."""
    from pyspark.sql import functions as F

    return (rows.where(F.coalesce(F.col("bytes_fetched"), F.lit(0)) < F.lit(int(max_bytes_per_host)))
            .withColumn("remaining", remaining).where(F.col("remaining") > 0))


def next_due_epoch(spark, conf: Config) -> float | None:
    """:func:`next_due` on the tables as they are now, in seconds since the epoch (timestamps are UTC
    in the session, so no local time zone enters), or None. One job."""
    from pyspark.sql import functions as F

    at = next_due(common.read(spark, conf, "crawldb"), common.read(spark, conf, "hosts"),
                  max_per_host=max_urls_per_host(conf), max_pages_per_host=conf.budget.max_pages_per_host,
                  max_bytes_per_host=conf.budget.max_bytes_per_host)
    us = at.select(F.unix_micros("at").alias("us")).collect()[0]["us"]
    return None if us is None else us / 1e6


def pattern_args(conf: Config) -> tuple[str | None, float]:
    """(``pattern_action``, ``pattern_score_factor``) of :func:`select_due` from ``[dedup]``."""
    return (conf.dedup.pattern_action if conf.dedup.learn_patterns else None), conf.dedup.pattern_score_factor


def in_order(due, weights: priority.Weights, pattern_action: str | None, pattern_score_factor: float):
    """``due`` (with the host's ``dup_patterns``) as :func:`select_due` ranks it: the learnt patterns
    applied (:func:`by_patterns`; ``pattern_action`` None: ignored) and ``virtual_due`` added, so
    :func:`jobs.priority.order` is its order. Per row: no host state but ``dup_patterns`` is read."""
    from pyspark.sql import functions as F

    lowered = None
    if pattern_action is not None:
        due = by_patterns(due, pattern_action, pattern_score_factor)
        lowered = F.col(LOWERED) if LOWERED in due.columns else None
    return priority.with_virtual_due(due, weights, lowered=lowered)


#: Column :func:`by_patterns` adds under "lower": the URL matches a learnt pattern (a duplicate's head start).
LOWERED = "_lowered"


def by_patterns(due, action: str, score_factor: float):
    """``due`` (with ``url``, ``score`` and the host's ``dup_patterns``) without the URLs matching a learnt
    pattern (``action`` "skip"), or with their score x ``score_factor`` and :data:`LOWERED` set ("lower")."""
    from pyspark.sql import functions as F

    from jobs.pattern_transforms import skipped
    hit = skipped(F.col("url"), F.col("dup_patterns"))
    if action == "skip":
        return due.where(~hit)
    if action == "lower":
        return (due.withColumn(LOWERED, F.coalesce(hit, F.lit(False)))
                .withColumn("score", F.when(hit, F.col("score") * F.lit(float(score_factor))).otherwise(F.col("score"))))
    raise ConfigError(f"dedup.pattern_action must be skip or lower, got {action!r}")


def run(spark, conf: Config, *, now=None, row: dict | None = None, pipeline: bool = False,
        ahead=None) -> dict[str, Any]:
    """Open round N and write its fetch list, or report the unfinished round. Returns the counts
    (and under ``row`` the ledger row written). ``row`` is the last round's row when the caller has it.

    With ``pipeline`` (``rounds.crawl`` under ``generate.pipeline``) round N opens when round N-1 is
    ``fetched``, before its update: the crawl DB and hosts are read as update N-1 will leave them
    (:mod:`jobs.pending_round`), and ``pending`` in the result is round N-1's row. ``ahead``
    (:class:`jobs.list_ahead.Ahead`, staged while round N-1 was fetched) stands for the crawl DB
    when it still matches it (:func:`jobs.list_ahead.usable`)."""
    with common.Timer() as timer:
        st = ledger.step(spark, conf, "generate", row=row, pipeline=pipeline)
        if st.action == "skip":
            counts = st.row.get("counts") or {}
            return {"round": st.round, "resumed": True, "state": st.row["state"],
                    "generated": counts.get("generated", 0), "row": st.row}
        now, pending = now or common.now_utc(), st.pending
        n, n_partitions = st.round, fetch_partitions(spark, conf)
        with common.session_conf(spark, common.STATIC_PLANS):  # one job a stage, not one an exchange
            prev = pending or row or ledger.get_round(spark, conf, n - 1)  # pipelined: not updated, no horizon
            agg, listed_ahead = _write_list(spark, conf, n, now, pending, ahead, due_horizon(conf, now, prev))
        if agg.n == 0:
            return {"round": None, "generated": 0}
    counts = counters.checked("generate", {"generated": agg.n, "generated_discovery": agg.d,
                                           "generated_recrawl": agg.n - agg.d, "generated_hosts": agg.h,
                                           "generated_unresolved_hosts": agg.unresolved})
    written = ledger.set_state(spark, conf, n, "generated", counts=counts, seconds={"generate": timer.seconds},
                               old=st.row, n_partitions=n_partitions)
    return {"round": n, "resumed": False, "n_partitions": n_partitions, **counts, "row": written,
            "pending": pending, "listed_ahead": listed_ahead}


class Listed(NamedTuple):
    """What :func:`_write_list` listed: URLs, of them discovery, hosts, of them without an address."""

    n: int
    d: int
    h: int
    unresolved: int


def _write_list(spark, conf: Config, n: int, now, pending: dict | None, ahead=None, due_by=None):
    """Select round ``n``'s fetch list (beside round ``pending`` when pipelined, from ``ahead``'s
    staged rows when usable), write it unless it is empty; returns its counts (``n``, ``d``
    discovery, ``h`` hosts, ``unresolved`` of them listed without an address) and whether ``ahead`` was used."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    used = False
    if pending is None:
        crawldb = common.read(spark, conf, "crawldb")
        common.read(spark, conf, "fetch_list")  # fail early, with the one-line error, if it is missing
    else:  # the pending round's rows read once (each Delta read is a snapshot's jobs)
        fetch_list, fetch_output = (_round_rows(spark, conf, t, pending) for t in ("fetch_list", "fetch_output"))
        used = list_ahead.usable(spark, conf, ahead, pending)
        crawldb, known = list_ahead.read(spark, ahead) if used else (common.read(spark, conf, "crawldb"),) * 2
        crawldb = _pending_crawldb(spark, conf, crawldb, known, fetch_list, fetch_output, pending, due_by or now)
    hosts = common.read(spark, conf, "hosts")
    if pending is not None:
        hosts = pending_round.hosts_after(hosts, fetch_output, conf, round_no=int(pending["round"]),
                                          now=pending["fetched_at"])
    n_partitions = fetch_partitions(spark, conf)
    selected = selection(crawldb, hosts, conf, now=now, due_by=due_by, n_partitions=n_partitions).persist(
        StorageLevel.MEMORY_AND_DISK)
    try:
        agg = selected.agg(F.count(F.lit(1)).alias("n"),
                           F.coalesce(F.sum(F.col("discovery").cast("long")), F.lit(0)).alias("d"),
                           F.countDistinct("host").alias("h"), resolve.unknown_hosts().alias("unknown")).collect()[0]
        if agg.n:
            addresses = resolve.run(spark, conf, agg.unknown)["addresses"]
            listed = with_addresses(selected, addresses, n_partitions)
            out = common.conform(listed.withColumn("round", F.lit(n)), TABLES["fetch_list"])
            (out.write.format("delta").mode("overwrite").option("replaceWhere", f"round = {n}")
             .save(common.table_path(conf, "fetch_list")))
            faults.point("generate.after_write")
    finally:
        selected.unpersist()
    unresolved = len(agg.unknown) - len(addresses) if agg.n else 0
    return Listed(agg.n, agg.d, agg.h, unresolved), used


def _round_rows(spark, conf: Config, name: str, row: dict):
    from pyspark.sql import functions as F
    return common.read(spark, conf, name).where(F.col("round") == int(row["round"]))


def _pending_crawldb(spark, conf: Config, crawldb, known, fetch_list, fetch_output, pending: dict, now):
    """The due rows of the crawl DB as update of round ``pending`` (its ``fetch_list`` and ``fetch_output``
    rows) will leave it, computed once into a staged Parquet file (the selection reads it;
    the next round's generate overwrites it). ``crawldb``: its rows (or the candidates staged ahead,
    :mod:`jobs.list_ahead`), ``known``: its ``url_fp``s."""
    view = pending_round.generate_crawldb(crawldb, fetch_list, fetch_output, conf, round_no=int(pending["round"]),
                                          now=pending["fetched_at"], known=known)
    path = f"{common.root(conf)}/staging/generate/pending"
    due = due_urls(view, now)
    due.write.mode("overwrite").parquet(path)
    return spark.read.schema(due.schema).parquet(path)  # the schema known: no job reads a footer
