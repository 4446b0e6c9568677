"""``deltacrawl status``: frontier size, due URLs, hosts, the last rounds."""

from __future__ import annotations

from crawl_udfs.config import Config
from jobs.common import now_utc, read
from schemas.status import ELIGIBLE


def report(spark, conf: Config, *, last_rounds: int = 5) -> str:
    from pyspark.sql import functions as F

    now = now_utc()
    crawldb = read(spark, conf, "crawldb")
    eligible = [s.value for s in ELIGIBLE]
    by_status = {r["status"]: r["n"] for r in crawldb.groupBy("status").agg(F.count("*").alias("n")).collect()}
    due = crawldb.where(F.col("status").isin(eligible) & (F.col("next_fetch_time") <= F.lit(now))).count()
    hosts = read(spark, conf, "hosts")
    h = hosts.agg(F.count("*").alias("hosts"),
                  F.sum(F.when(F.col("parked_until") > F.lit(now), 1).otherwise(0)).alias("parked")).collect()[0]
    budget = conf.budget.max_pages_per_host
    exhausted = hosts.where(F.col("pages_fetched") >= budget).select("host").limit(20).collect()
    parked = (hosts.where(F.col("parked_until") > F.lit(now)).select("host", "park_reason", "parked_until")
              .orderBy("host").limit(20).collect())
    rounds = read(spark, conf, "rounds").orderBy(F.col("round").desc()).limit(last_rounds).collect()
    out = [f"crawl DB: {sum(by_status.values())} URLs, {due} due now",
           "  by status: " + ", ".join(f"{k}={v}" for k, v in sorted(by_status.items())),
           f"hosts: {h['hosts']} known, {h['parked'] or 0} parked, {len(exhausted)} at the page budget ({budget})"]
    for r in parked:
        out.append(f"  parked {r['host']}: {r['park_reason']} until {r['parked_until']}")
    for r in exhausted:
        out.append(f"  budget exhausted: {r['host']}")
    out.append("last rounds:")
    for r in rounds:
        c = r["counts"] or {}
        out.append(f"  round {r['round']}: {r['state']}, generated {c.get('generated', 0)}, "
                   f"ok {c.get('fetched_ok', 0)}, new URLs {c.get('new_urls', 0)}, "
                   f"seconds {(r['seconds'] or {}).get('round', 0.0):.1f}")
    return "\n".join(out)
