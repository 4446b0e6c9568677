"""Which copy is the original, decided once: for exact and near-duplicates, and when an original goes.

Pure transforms of ``update`` (STYLE.md rule 2): DataFrames in, DataFrames out.
:func:`jobs.exact_dup_transforms.mark_duplicates` (exact copies, a cluster = one
payload digest) and :func:`jobs.dedup_transforms.near_duplicate_of` (a cluster
= a first copy and the pages within ``simhash.near_duplicate_bits`` of it that
pass the MinHash check) both call :func:`with_original`; :func:`repoint` applies
the same rule to the copies of an original that went.

**The rule** (:func:`order`; the smallest is the original):

1. A *consistent same-site* ``rel=canonical`` wins: a member T wins when another
   member of the cluster names T as its canonical (``canonical_fp``: the
   fetch task's normalised ``canonical``, hashed like ``url_fp``), T names
   itself (self-canonical: an absent canonical or one pointing elsewhere is not
   a claim to the content, and a chain proves nothing), and both are on one
   site (:func:`crawl_udfs.sites.site`: the registered domain, PSL private
   section included, so ``www.a.com`` speaks for ``a.com`` but ``x.github.io``
   not for ``y.github.io``; a mirror that copied the original's canonical
   names a page on another site and is ignored: anyone can claim anyone's
   page). T wins even when it was fetched later than the others.
2. Else the earliest fetched: :func:`first_copy_time` (``crawldb.first_fetched``,
   the first stored copy's fetch time; for rows older than that column the
   last stored copy's, else ``first_seen``). Index rows carry their
   ``first_fetched``.
3. Ties: the smallest ``url_fp``.

**When an original goes** (:func:`leaving`, :func:`repoint`): an original of
the crawl DB (status fetched or not_modified) that is gone this round (404/410)
or becomes a duplicate (its new content is another page's, or a canonical
target beat it) leaves its copies (rows with ``dup_of`` = it) pointing at it.
They are re-pointed in the same MERGE as the round (the change feed shows it):

- when the page that went still holds the content its copies copied (it was
  demoted by a canonical target, or re-fetched unchanged and now a
  duplicate), its copies follow it to its new original;
- otherwise (gone, or its content changed) one copy is promoted by the rule
  above among the copies (consistent canonical, earliest fetched, smallest
  url_fp): status back to ``fetched`` (``not_modified`` when its last response
  was a 304), ``dup_of`` null; the others point at it.

Only status and ``dup_of`` change (and ``updated_round``): a copy keeps its
schedule, WARC record and fetch-log rows. Cost: one read of the crawl DB's
``url_fp``/``dup_of`` semi-joined with the broadcast url_fps of the originals
that went (small), nothing when none went.

Index rows of an original that went stay in ``near_dup_index`` but are skipped by
the lookup (:func:`left_pages`), so a later near copy never names it. Not here:
a promoted copy is not added to ``near_dup_index`` (its MinHash is not kept in
the crawl DB).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType

from crawl_udfs import sites
from schemas.status import Status

#: Statuses whose stored copy can be the original of a duplicate.
ORIGINAL_STATUSES = (Status.FETCHED.value, Status.NOT_MODIFIED.value)
#: Statuses of an original that went (its copies are re-pointed).
LEAVING_STATUSES = (Status.GONE.value, Status.RETIRED.value, Status.DUPLICATE.value)


def left_pages(crawldb: DataFrame) -> DataFrame:
    """``url_fp`` of the crawl DB's pages that left (:data:`LEAVING_STATUSES`): an index row of one is no
    original any more (``jobs.dedup_transforms.near_duplicate_of`` skips it)."""
    return crawldb.where(F.col("status").isin(*LEAVING_STATUSES)).select("url_fp")


#: Columns :func:`with_original` reads from each member (beside the cluster's column).
MEMBER_COLUMNS = ("url_fp", "host", "canonical_fp", "first_fetched")
#: Columns :func:`with_original` adds: the original's url_fp, and whether a canonical made it so.
ORIG, BY_CANONICAL = "_orig", "_orig_by_canonical"


def first_copy_time(prefix: str = "") -> Column:
    """When a crawl-DB row's first stored copy was fetched (rule 2): ``first_fetched``, else (rows from
    before that column) the last stored copy's fetch time, else ``first_seen``."""
    return F.coalesce(F.col(f"{prefix}first_fetched"), F.col(f"{prefix}warc_fetch_time"),
                      F.col(f"{prefix}first_seen"))


def order(by_canonical: Column, fetched: Column, url_fp: Column) -> Column:
    """The rule as one sortable Column: the member with the smallest value is the original."""
    return F.struct((~F.coalesce(by_canonical, F.lit(False))).alias("not_canonical"), fetched.alias("fetched"),
                    url_fp.alias("url_fp"))


_names_on_site = F.udf(lambda host, hosts: any(sites.same_site(host, h) for h in hosts or ()), BooleanType())


def with_original(members: DataFrame, cluster: str) -> DataFrame:
    """``members`` (one row per member of each ``cluster``: :data:`MEMBER_COLUMNS`, ``first_fetched`` as
    :func:`first_copy_time` gives it) with ``_orig``, the url_fp of its cluster's original, and
    ``_orig_by_canonical``, whether rule 1 made it so. Windows, no join: the plans stay small.

    A member is a consistent canonical when it names itself and another member of one of its clusters
    names it from its site; where clusters overlap (near-duplicates: each candidate's own cluster) that
    holds for the page in all of them, so every cluster ranks the pages alike."""
    from pyspark.sql import Window

    names = F.collect_list(F.when(F.col("canonical_fp").isNotNull() & (F.col("canonical_fp") != F.col("url_fp")),
                                  F.struct(F.col("canonical_fp").alias("fp"), F.col("host").alias("host"))))
    named_by = F.transform(F.filter(names.over(Window.partitionBy(cluster)), lambda x: x["fp"] == F.col("url_fp")),
                           lambda x: x["host"])
    self_named = F.col("canonical_fp") == F.col("url_fp")
    local = F.when(self_named & (F.size(named_by) > 0), _names_on_site(F.col("host"), named_by)).otherwise(False)
    best = F.min(order(F.col("_canonical"), F.col("first_fetched"), F.col("url_fp"))).over(Window.partitionBy(cluster))
    return (members.withColumn("_canonical", local)
            .withColumn("_canonical", F.max("_canonical").over(Window.partitionBy("url_fp")))
            .withColumn("_best", best)
            .withColumn(ORIG, F.col("_best.url_fp")).withColumn(BY_CANONICAL, ~F.col("_best.not_canonical"))
            .drop("_canonical", "_best"))


# -- when an original goes -------------------------------------------------------------------------
def leaving(updated: DataFrame, demoted: DataFrame, *, was: str = "_was", changed: str = "_changed") -> DataFrame:
    """``url_fp``, ``_to``: the originals that go this round. Rows of the round that were an original (``was``)
    and are now gone or a duplicate; and ``demoted`` (``url_fp``, ``_to``): crawl-DB originals not of the
    round that a canonical target beat. ``_to``: where their copies go (see the module), null: promote one."""
    up = updated.where(F.col(was).isin(*ORIGINAL_STATUSES) & F.col("status").isin(*LEAVING_STATUSES))
    same = (F.col("status") == Status.DUPLICATE.value) & ~F.coalesce(F.col(changed), F.lit(False))
    both = up.select("url_fp", F.when(same, F.col("dup_of")).alias("_to")).unionByName(demoted.select("url_fp", "_to"))
    return both.groupBy("url_fp").agg(F.min("_to").alias("_to"))  # demoted by both an exact and a near copy


def restored_status(http_status: Column) -> Column:
    """The status a promoted copy gets back: its stored copy is current (a 304 last: ``not_modified``)."""
    return F.when(http_status == 304, Status.NOT_MODIFIED.value).otherwise(Status.FETCHED.value)


#: The crawl-DB columns :func:`repoint` reads (and the only ones its rows change: status, dup_of, updated_round).
REPOINT_COLUMNS = ("url_fp", "host", "status", "dup_of", "canonical_fp", "http_status", "first_fetched",
                   "warc_fetch_time", "first_seen")


def stored_rows(crawldb: DataFrame, gone: DataFrame, columns=REPOINT_COLUMNS) -> DataFrame:
    """The crawl-DB rows :func:`repoint` reads: those whose ``url_fp`` or ``dup_of`` is a ``url_fp`` of ``gone``,
    in ``columns`` (:data:`REPOINT_COLUMNS` at least; the driver engine gathers every column, the re-pointed
    rows being written whole: ``jobs/update_gather.py``)."""
    keys = F.broadcast(gone.select(F.col("url_fp").alias("_k")).distinct())
    return (crawldb.select(*columns, F.explode(F.array("url_fp", "dup_of")).alias("_k"))
            .join(keys, "_k", "left_semi").drop("_k").dropDuplicates(["url_fp"]))


def repoint(updated: DataFrame, crawldb: DataFrame, gone: DataFrame) -> DataFrame:
    """The re-pointing decisions for the copies of ``gone`` (:func:`leaving`; see the module for the rule): one
    row per URL whose status or ``dup_of`` may change, ``url_fp``, ``_status``, ``_dup_of``, and for a crawl-DB
    row not of the round (``_db``) its ``host``, ``_was`` and ``_was_dup_of``. The crawl DB is read in
    :data:`REPOINT_COLUMNS` only, semi-joined on ``url_fp`` or ``dup_of`` with the broadcast url_fps of ``gone``.
    Apply them with :func:`repointed` (the round's rows) and :func:`repointed_rows` (the others)."""
    stored = (stored_rows(crawldb, gone)
              .join(updated.select("url_fp"), "url_fp", "left_anti").withColumn("_db", F.lit(True)))
    rows = stored.unionByName(updated.select(*REPOINT_COLUMNS, F.lit(False).alias("_db")))
    rows = rows.join(F.broadcast(gone.select(F.col("url_fp").alias("_gone"), "_to")),
                     (F.col("url_fp") == F.col("_gone")) | (F.col("dup_of") == F.col("_gone")))
    dup, was = Status.DUPLICATE.value, F.col("status")
    demoted = rows.where(F.col("_db") & (F.col("url_fp") == F.col("_gone")) & was.isin(*ORIGINAL_STATUSES))
    demoted = demoted.select("*", F.lit(dup).alias("_status"), F.col("_to").alias("_dup_of"))
    copies = rows.where((was == dup) & (F.col("dup_of") == F.col("_gone")))
    follow = copies.where(F.col("_to").isNotNull()).select("*", F.lit(dup).alias("_status"),
                                                            F.col("_to").alias("_dup_of"))
    ranked = with_original(copies.where(F.col("_to").isNull()).withColumn("first_fetched", first_copy_time()), "_gone")
    promoted = ranked.select(
        *rows.columns, F.when(F.col("url_fp") == F.col(ORIG), restored_status(F.col("http_status")))
        .otherwise(F.lit(dup)).alias("_status"),
        F.when(F.col("url_fp") != F.col(ORIG), F.col(ORIG)).alias("_dup_of"))
    out = demoted.unionByName(follow).unionByName(promoted.select(*demoted.columns)).select(
        "url_fp", F.struct("_status", "_dup_of", "_db", "host", was.alias("_was"),
                           F.col("dup_of").alias("_was_dup_of")).alias("d"))
    return out.groupBy("url_fp").agg(F.min("d").alias("d")).select("url_fp", "d.*")  # one decision per URL


def repointed(updated: DataFrame, decided: DataFrame) -> DataFrame:
    """``updated`` with :func:`repoint`'s decisions for the round's own rows applied (status, ``dup_of``)."""
    d = decided.where(~F.col("_db")).select("url_fp", "_status", "_dup_of")
    hit = F.col("_status").isNotNull()
    return (updated.join(d, "url_fp", "left")
            .withColumn("status", F.when(hit, F.col("_status")).otherwise(F.col("status")))
            .withColumn("dup_of", F.when(hit, F.col("_dup_of")).otherwise(F.col("dup_of")))
            .drop("_status", "_dup_of"))


def repointed_rows(decided: DataFrame, *, round_no: int, was: str = "_was") -> DataFrame:
    """The crawl-DB rows not of the round that :func:`repoint` changes: ``url_fp``, ``host``, ``status``,
    ``dup_of``, ``updated_round`` (all a ``repoint`` row of the MERGE sets) and ``was`` (the status before)."""
    d = decided.where(F.col("_db") & (~F.col("_status").eqNullSafe(F.col("_was"))
                                      | ~F.col("_dup_of").eqNullSafe(F.col("_was_dup_of"))))
    return d.select("url_fp", "host", F.col("_status").alias("status"), F.col("_dup_of").alias("dup_of"),
                    F.col("_was").alias(was), F.lit(int(round_no)).cast("long").alias("updated_round"))
