"""``deltacrawl status``: frontier size, due URLs, hosts, the last rounds.

``status --hosts`` (:func:`hosts_report`) lists every host that generate holds
back or slows down, one line each with the reason: out of budget (pages or
bytes, by update's rule ``hosts_transforms.budget_reason`` recomputed against
the current budgets, with the counters), throttled by trap detection (``hosts.round_cap``), or parked until a
time in the future (``hosts.park_reason``: fetch failures, Retry-After, a long
Crawl-delay, robots.txt unavailable, or ``trap: …``), and then every host with URL patterns learnt
as duplicates (:func:`pattern_hosts`, ``hosts.dup_patterns``), each with its evidence and what
generate does with their URLs (``dedup.pattern_action``).
"""

from __future__ import annotations

from crawl_udfs.config import Config
from jobs import ledger
from jobs.common import now_utc, read
from schemas import counters
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
                  F.sum(F.when(F.col("parked_until") > F.lit(now), 1).otherwise(0)).alias("parked"),
                  F.sum(F.when(_budget_reason(conf).isNotNull(), 1).otherwise(0)).alias("exhausted"),
                  F.sum(F.when(F.col("round_cap").isNotNull(), 1).otherwise(0)).alias("throttled")).collect()[0]
    exhausted = hosts.where(_budget_reason(conf).isNotNull()).select("host").orderBy("host").limit(20).collect()
    parked = (hosts.where(F.col("parked_until") > F.lit(now)).select("host", "park_reason", "parked_until")
              .orderBy("host").limit(20).collect())
    rows = ledger.current(spark, conf).rows  # the ledger's records: the rounds table may lag a running crawl
    rounds = [rows[n] for n in sorted(rows, reverse=True)[:last_rounds]]
    b = conf.budget
    out = [f"crawl DB: {sum(by_status.values())} URLs, {due} due now",
           "  by status: " + ", ".join(f"{k}={v}" for k, v in sorted(by_status.items())),
           f"hosts: {h['hosts']} known, {h['parked'] or 0} parked, {h['throttled'] or 0} throttled, "
           f"{h['exhausted'] or 0} out of budget ({b.max_pages_per_host} pages, {b.max_bytes_per_host} bytes); "
           "`status --hosts` lists them"]
    for r in parked:
        out.append(f"  parked {r['host']}: {r['park_reason']} until {r['parked_until']}")
    for r in exhausted:
        out.append(f"  budget exhausted: {r['host']}")
    out.append("last rounds:")
    for r in rounds:
        c = r["counts"]
        out.append(f"  round {r['round']}: {r['state']}, generated {counters.value(c, 'generated')}, "
                   f"ok {counters.value(c, 'fetched_ok')}, new URLs {counters.value(c, 'new_urls')}, "
                   f"seconds {(r['seconds'] or {}).get('round', 0.0):.1f}")
    return "\n".join(out)


def _budget_reason(conf: Config):
    """update's rule (pages checked first): "pages", "bytes" or null, against the current budgets."""
    from jobs.hosts_transforms import budget_reason
    return budget_reason(conf.budget.max_pages_per_host, conf.budget.max_bytes_per_host)


def held_hosts(spark, conf: Config, *, now=None) -> list[dict]:
    """Hosts out of budget, throttled or parked (after ``now``), sorted by host, each a dict with
    ``host``, ``state`` (a comma-separated subset of budget_exhausted, throttled, parked) and ``reason``."""
    from pyspark.sql import functions as F

    now = now or now_utc()
    b = conf.budget
    parked = F.col("parked_until") > F.lit(now)
    why_budget = _budget_reason(conf)
    rows = (read(spark, conf, "hosts").where(why_budget.isNotNull() | F.col("round_cap").isNotNull() | parked)
            .select("host", "pages_fetched", "bytes_fetched", "round_cap", "trap_strikes", "trap_new_share",
                    "parked_until", "park_reason", parked.alias("_parked"), why_budget.alias("_budget"))
            .orderBy("host").collect())
    out = []
    for r in rows:
        states, why = [], []
        if r["_budget"]:
            states.append("budget_exhausted")
            why.append(f"budget {r['_budget']}: {r['pages_fetched']}/{b.max_pages_per_host} pages, "
                       f"{r['bytes_fetched']}/{b.max_bytes_per_host} bytes")
        if r["round_cap"] is not None:
            states.append("throttled")
            share = r["trap_new_share"]
            why.append(f"throttled to {r['round_cap']} URLs a round after {r['trap_strikes']} low-content "
                       f"round(s) (last new-content share {share if share is None else round(share, 2)})")
        if r["_parked"]:
            states.append("parked")
            why.append(f"parked until {r['parked_until']}: {r['park_reason']}")
        out.append({"host": r["host"], "state": ",".join(states), "reason": "; ".join(why)})
    return out


def pattern_hosts(spark, conf: Config) -> list[dict]:
    """Hosts with learnt duplicate URL patterns, sorted by host: ``host`` and ``reasons`` (one line of
    evidence per pattern, ``jobs.pattern_transforms.reason``)."""
    from pyspark.sql import functions as F

    from jobs.pattern_transforms import reason
    rows = (read(spark, conf, "hosts").where(F.size(F.coalesce("dup_patterns", F.array())) > 0)
            .select("host", "dup_patterns").orderBy("host").collect())
    return [{"host": r["host"], "reasons": [reason(p.asDict()) for p in r["dup_patterns"]]} for r in rows]


def hosts_report(spark, conf: Config) -> str:
    """``status --hosts``: one line per held host, ``host  state  reason``; then one line per host with
    learnt duplicate URL patterns."""
    held = held_hosts(spark, conf)
    lines = [f"{len(held)} host(s) out of budget, throttled or parked"]
    lines += [f"  {h['host']}  [{h['state']}]  {h['reason']}" for h in held]
    learnt = pattern_hosts(spark, conf)
    d = conf.dedup
    action = ("skipped" if d.pattern_action == "skip" else f"score x {d.pattern_score_factor}") \
        if d.learn_patterns else "not acted on (dedup.learn_patterns = false)"
    lines.append(f"{len(learnt)} host(s) with URL patterns learnt as duplicates (their URLs: {action})")
    lines += [f"  patterns of {h['host']}: " + "; ".join(h["reasons"]) for h in learnt]
    return "\n".join(lines)
