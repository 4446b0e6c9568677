"""Link importance: a host-damped PageRank over the ``links`` table, stored in ``crawldb.importance``.

What it guarantees: a host cannot raise its own pages by linking to them. Whatever a host's pages
and their links among themselves, their importance together is at most
``(T_h + I_h) / (1 - damping * intra_host_share)``, ``T_h`` being the host's part of the spread
(below) and ``I_h`` what pages of other hosts pass to it (1.27x at the defaults 0.85 and 0.25); a
link farm on one host, or a host whose every page links to one of its pages, gains nothing more.

Why PageRank and not OPIC. OPIC (Abiteboul, Preda, Cobena, "Adaptive on-line page importance
computation", WWW 2003; Nutch's ``OPICScoringFilter``) moves a fetched page's cash to its outlinks
at each fetch. Batched here, that rewrites every link target's crawl-DB row each round (update's
MERGE touches only the round's URLs and new ones; OPIC would touch every URL they link to) and its
estimate is only as good as the re-fetches so far (a page fetched once passes its cash once). The
discovery score already is OPIC's first step (``scope.score_decay``: the parent's cash split among
its links). PageRank (Page, Brin, Motwani, Winograd 1999) is computed from the link graph alone,
without re-fetching, by a fixed number of DataFrame iterations every ``importance.every_rounds``
rounds, warm-started from the stored values so successive refreshes keep converging: its cost is
a fixed set of Spark jobs per refresh, none in the other rounds.

The rule (Page et al.'s random surfer, with the host as the unit of trust):

- the graph: every ``links`` edge of every round, once per (src_fp, dst_fp), not nofollow, both ends
  in the crawl DB, no self-link (redirect and canonical edges count like links);
- a page passes ``damping`` of its importance on: at most ``intra_host_share`` of it to pages of its
  own host (equally among its links there), the rest to pages of other hosts (equally among its
  links there; all of it when it has no link to its own host); a page with only links to its own
  host passes just ``intra_host_share`` of ``damping`` and the rest leaks, as the whole of a page
  with no links does (the leak form of PageRank, whose order is that of the form which spreads
  the dangling pages' importance: Langville and Meyer, "Deeper inside PageRank", 2004);
- the spread: ``1 - damping`` is given to the hosts in proportion to their URLs capped at
  ``importance.spread_host_pages`` (C) and, within a host, to its pages equally: (1 - damping) x
  the number of URLs in all, so that without leaks importance sums to the number of URLs (a mean
  importance <= 1). So a page of a host with at most C
  URLs gets the same part as any other such page, and a host of a million generated pages gets
  C pages' part. Capping, not spreading over hosts equally: a host known by one URL, never
  fetched, would otherwise give that URL a whole host's part (on a 3-round crawl of the test web,
  7 such hosts held 13.5 % of the importance for 0.4 % of the URLs; bench/RESULTS.md).

What it does not stop: many hosts of one owner linking to each other (each is a host with its own
part of the spread; catching them needs the owner, e.g. the address or the registered domain).

Cost per refresh: one job counting URLs and hosts; the iterations (two shuffles each: the edges
joined to the importance by source, then summed by target) computed by the write that stages the
result, with adaptive execution off (about 4 jobs an iteration, its broadcast exchanges, instead of
one per shuffle stage); one MERGE into ``crawldb`` that rewrites only the rows whose importance moved
by more than ``importance.min_change`` of its new value. Measured: 34 jobs with 3 iterations on a
67-URL table (tests/test_importance.py pins it), 117 with 20 on a 1,600-URL crawl (bench/RESULTS.md).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from crawl_udfs.config import Config


def edges(links: DataFrame, nodes: DataFrame, *, damping: float, intra_host_share: float) -> DataFrame:
    """``src_fp``, ``dst_fp``, ``w``: each followed link between two URLs of ``nodes`` (``url_fp``,
    ``host``) once, with the share ``w`` of its source's importance it carries (see the module docstring)."""
    from pyspark.sql import Window

    pairs = (links.where(~F.coalesce(F.col("nofollow"), F.lit(False)) & (F.col("src_fp") != F.col("dst_fp")))
             .select("src_fp", "dst_fp").distinct())
    src = nodes.select(F.col("url_fp").alias("src_fp"), F.col("host").alias("src_host"))
    dst = nodes.select(F.col("url_fp").alias("dst_fp"), F.col("host").alias("dst_host"))
    e = pairs.join(src, "src_fp").join(dst, "dst_fp").withColumn("intra", F.col("src_host") == F.col("dst_host"))
    by_kind, has_intra = Window.partitionBy("src_fp", "intra"), F.max("intra").over(Window.partitionBy("src_fp"))
    s = F.lit(float(intra_host_share))
    share = F.when(F.col("intra"), s).when(has_intra, F.lit(1.0) - s).otherwise(F.lit(1.0))
    return e.select("src_fp", "dst_fp", (F.lit(float(damping)) * share / F.count(F.lit(1)).over(by_kind)).alias("w"))


class Sizes(NamedTuple):
    """What the spread is scaled by: the URLs and hosts of the nodes, and ``weight``, the sum over hosts
    of their URLs capped at ``host_pages``."""

    urls: int
    hosts: int
    weight: int
    host_pages: int


def spread(nodes: DataFrame, *, damping: float, sizes: Sizes) -> DataFrame:
    """``url_fp``, ``t``: each URL's part of the spread, (1 - damping) x urls x min(n, C) / weight / n for a
    host of n URLs (C = ``sizes.host_pages``), and ``start``: its stored ``importance``, else t (where the
    iterations start from: from t, each step is one more term of the Neumann series of the fixed point,
    so no step overshoots it)."""
    from pyspark.sql import Window

    per_host = F.count(F.lit(1)).over(Window.partitionBy("host"))
    scale = F.lit((1.0 - float(damping)) * float(sizes.urls) / max(int(sizes.weight), 1))
    t = scale * F.least(per_host, F.lit(int(sizes.host_pages))) / per_host
    return nodes.select("url_fp", t.alias("t"), F.coalesce(F.col("importance"), t).alias("start"))


def iterate(e: DataFrame, teleport: DataFrame, *, iterations: int) -> DataFrame:
    """``url_fp``, ``importance`` after ``iterations`` steps r <- t + sum over in-links of w x r, from ``start``.

    Each step reads the previous one once, so the plan grows by one join and one aggregation a step."""
    rank = teleport.select("url_fp", F.col("start").alias("importance"))
    spread_rows = teleport.select("url_fp", F.col("t").alias("c"))
    for _ in range(int(iterations)):
        flow = (e.join(rank.withColumnRenamed("url_fp", "src_fp"), "src_fp")
                .select(F.col("dst_fp").alias("url_fp"), (F.col("w") * F.col("importance")).alias("c")))
        rank = spread_rows.unionByName(flow).groupBy("url_fp").agg(F.sum("c").alias("importance"))
    return rank


def importance(links: DataFrame, nodes: DataFrame, *, damping: float, intra_host_share: float, iterations: int,
               sizes: Sizes) -> DataFrame:
    """``url_fp``, ``importance`` of every URL of ``nodes`` (``url_fp``, ``host``, ``importance``: the stored
    value or null); ``sizes`` is theirs (:func:`sizes`)."""
    e = edges(links, nodes, damping=damping, intra_host_share=intra_host_share)
    return iterate(e, spread(nodes, damping=damping, sizes=sizes), iterations=iterations)


def sizes(nodes: DataFrame, *, host_pages: int) -> Sizes:
    """The :class:`Sizes` of ``nodes``, each host's URLs capped at ``host_pages``: one job."""
    per_host = nodes.groupBy("host").agg(F.count(F.lit(1)).alias("n"))
    row = per_host.agg(F.sum("n").alias("u"), F.count(F.lit(1)).alias("h"),
                       F.sum(F.least(F.col("n"), F.lit(int(host_pages)))).alias("w")).collect()[0]
    return Sizes(int(row.u or 0), int(row.h or 0), int(row.w or 0), int(host_pages))


def due(conf: Config, round_no: int) -> bool:
    """Whether the update of round ``round_no`` refreshes importance (``importance.every_rounds``)."""
    every = int(conf.importance.every_rounds)
    return every > 0 and int(round_no) % every == 0


def run(spark, conf: Config) -> dict[str, Any]:
    """Recompute importance from the ``links`` table and MERGE it into ``crawldb``; returns the counts.

    The caller holds the crawl lease (``deltacrawl rank``, or update's own run). The result is staged
    once as Parquet (the iterations are computed by that one write), then merged: only rows whose value
    moved by more than ``importance.min_change`` of the new one are rewritten. Running it twice on the
    same tables converges further; it never changes anything but ``crawldb.importance``."""
    from jobs import common

    c = conf.importance
    nodes = common.read(spark, conf, "crawldb").select("url_fp", "host", "importance")
    size = sizes(nodes, host_pages=c.spread_host_pages)
    if size.urls == 0:
        return {"ranked_urls": 0, "ranked_hosts": 0}
    ranked = importance(common.read(spark, conf, "links"), nodes, damping=c.damping,
                        intra_host_share=c.intra_host_share, iterations=c.iterations, sizes=size)
    path = f"{common.root(conf)}/staging/importance"
    with common.session_conf(spark, common.STATIC_PLANS):  # small steps: one job a stage, not one per AQE stage
        ranked.write.mode("overwrite").parquet(path)
    source = spark.read.parquet(path)
    moved = (F.col("t.importance").isNull()
             | (F.abs(F.col("t.importance") - F.col("s.importance")) > F.lit(float(c.min_change)) * F.col("s.importance")))
    with common.session_conf(spark, common.STABLE_MERGE_SOURCE):
        (common.table(spark, conf, "crawldb").alias("t").merge(source.alias("s"), "t.url_fp = s.url_fp")
         .whenMatchedUpdate(condition=moved, set={"importance": F.col("s.importance")})
         .execute())
    return {"ranked_urls": size.urls, "ranked_hosts": size.hosts}
