"""inject: add seed URLs to the crawl DB (docs/ARCHITECTURE.md, "External contract").

A source is a URL (it starts with ``http://`` or ``https://``) or a file Spark can
read (a local path or any URI: ``s3a://…``, ``hdfs://…``): one URL a line; blank
lines and lines starting with ``#`` are skipped; anything after a tab is ignored
(Nutch's seed files put metadata there). Files are read with ``spark.read.text``
and normalised on the executors (``mapInPandas``), so seed lists of any size work.

Each seed is normalised with ``crawl_udfs.url_normalize`` and, when
``inject.filter`` is on, admitted by ``crawl_udfs.admission`` as kind ``seed``
(the trap rules and the allow/deny host rules; Nutch's Injector applies its URL
filters too). Seeds that cannot be normalised are
counted as ``invalid``, seeds the filters reject as ``filtered``; a few examples
of each are returned; neither is fatal.

The survivors, deduplicated by ``url_fp``, are MERGEd into ``crawldb``
insert-if-absent: status ``unfetched``, depth 0, score ``inject.score``, due now,
``fetch_interval_s = schedule.default_interval_s``, rounds 0, counters 0. A URL
already in the crawl DB is left alone, unless ``boost`` is given: then its score
is raised to at least ``boost`` and it is made due now
(``next_fetch_time = least(next_fetch_time, now)``); its status is kept, so a
URL in a final state stays there. New URLs injected with a boost start at
``max(inject.score, boost)``, so every seed named ends with at least that score.
With ``due_now`` (``deltacrawl inject --due-now``, the operator's hint), every seed
named, new or known, is made due ``priority.due_now_s`` before now
(``next_fetch_time = least(next_fetch_time, now - due_now_s)``): generate's order
(``jobs/priority.py``) serves the smallest ``next_fetch_time`` minus head start
first, so the next round lists it ahead of every URL that has waited less, within
its host's cap, politeness and budget; its status is kept as with ``boost``. The
count ``boosted`` is the known URLs either hint changed.
A MERGE is committed only when it changes something: injecting the same seeds
twice leaves the table at the same version.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator

from crawl_udfs.config import Config, ConfigError
from jobs import common
from schemas.status import Status
from schemas.tables import TABLES

#: Examples of bad seeds returned (the count is always complete).
EXAMPLES = 5

SEED_SCHEMA = "raw string, url string, url_fp long, host string, reason string"


def _is_url(source: str) -> bool:
    return source[:8].lower().startswith(("http://", "https://"))


def _normalize_batches(conf: Config):
    """The mapInPandas function: ``raw`` lines in, SEED_SCHEMA rows out (``reason`` set when rejected)."""
    def normalize(batches: Iterator) -> Iterator:
        import pandas as pd

        from crawl_udfs.admission import Admission
        from crawl_udfs.url_normalize import UrlNormalizer, fingerprint, host_of

        normalizer = UrlNormalizer(conf.url)
        admission = Admission(conf) if conf.inject.filter else None
        for batch in batches:
            out = {"raw": [], "url": [], "url_fp": [], "host": [], "reason": []}
            for raw in batch["raw"]:
                url = normalizer.normalize(raw)
                reason = "invalid" if url is None else (admission.reason(url) if admission else None)
                ok = url is not None and reason is None
                out["raw"].append(raw)
                out["url"].append(url if ok else None)
                out["url_fp"].append(fingerprint(url) if ok else None)
                out["host"].append(host_of(url) if ok else None)
                out["reason"].append(reason)
            yield pd.DataFrame({**out, "url_fp": pd.array(out["url_fp"], dtype="Int64")})

    return normalize


def parse_seeds(lines, conf: Config):
    """Seed lines (a DataFrame with a string column ``value``) -> SEED_SCHEMA rows, one per non-comment line."""
    from pyspark.sql import functions as F

    raw = F.trim(F.split(F.col("value"), "\t").getItem(0))
    kept = lines.select(raw.alias("raw")).where((F.col("raw") != "") & ~F.col("raw").startswith("#"))
    return kept.mapInPandas(_normalize_batches(conf), SEED_SCHEMA)


def new_rows(seeds, *, now, score: float, fetch_interval_s: float, due=None):
    """Valid seeds -> CRAWLDB rows of never-seen URLs, one per ``url_fp`` (what the MERGE inserts), due at
    ``due`` (default ``now``)."""
    from pyspark.sql import functions as F

    ts = F.lit(now).cast("timestamp")
    due_ts = F.lit(due or now).cast("timestamp")
    zero = F.lit(0)
    rows = (seeds.where(F.col("reason").isNull()).select("url_fp", "host", "url").dropDuplicates(["url_fp"])
            .select("url_fp", "host", "url", F.lit(Status.UNFETCHED.value).alias("status"),
                    due_ts.alias("next_fetch_time"), F.lit(float(score)).alias("score"), zero.alias("depth"),
                    zero.alias("redirect_hops"), zero.alias("retries"), zero.alias("fetch_count"),
                    zero.alias("change_count"), zero.alias("unchanged_count"),
                    F.lit(float(fetch_interval_s)).alias("fetch_interval_s"), ts.alias("first_seen"),
                    zero.alias("discovered_round"), zero.alias("updated_round")))
    return common.conform(rows, TABLES["crawldb"])


def _read_sources(spark, sources: Iterable[str]):
    urls = [s for s in sources if _is_url(s)]
    paths = [s for s in sources if not _is_url(s)]
    frames = []
    if urls:
        frames.append(spark.createDataFrame([(u,) for u in urls], "value string"))
    for path in paths:
        if "://" not in path:
            if not os.path.exists(path):
                raise ConfigError(f"seed source {path!r} is neither an http(s) URL nor an existing file")
            path = os.path.abspath(path)
        try:
            frames.append(spark.read.text(path))
        except Exception as e:  # AnalysisException PATH_NOT_FOUND on remote file systems
            if "PATH_NOT_FOUND" in str(e) or "does not exist" in str(e):
                raise ConfigError(f"seed file not found: {path}") from None
            raise
    if not frames:
        raise ConfigError("inject needs at least one seed URL or file")
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def run(spark, conf: Config, sources: list[str], *, boost: float | None = None, due_now: bool = False,
        now=None) -> dict[str, Any]:
    """Inject ``sources`` (URLs and/or seed files) into crawldb. Returns the counts."""
    import datetime as dt

    from pyspark import StorageLevel

    crawldb = common.read(spark, conf, "crawldb")  # ConfigError when the tables are missing
    now = now or common.now_utc()
    due = now - dt.timedelta(seconds=float(conf.priority.due_now_s)) if due_now else None
    score = conf.inject.score if boost is None else max(conf.inject.score, float(boost))
    seeds = parse_seeds(_read_sources(spark, sources), conf).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = _count(seeds, crawldb, boost=boost, due=due, now=now)  # materialises the cache
        examples = [{"line": r.raw, "reason": r.reason}
                    for r in seeds.where("reason IS NOT NULL").limit(EXAMPLES).collect()]
        if counts["inserted"] or counts["boosted"]:
            source = new_rows(seeds, now=now, score=score, fetch_interval_s=conf.schedule.default_interval_s, due=due)
            _merge(spark, conf, source, boost=boost, due=due, now=now)
    finally:
        seeds.unpersist()
    return {**counts, "examples": examples}


def _hint_condition(boost: float | None, due, now):
    """Existing rows a boost or a due-now hint (``due``: the time they become due) changes (a Column over
    alias ``t``), or None without either."""
    from pyspark.sql import functions as F

    if boost is None and due is None:
        return None
    cond = F.col("t.next_fetch_time") > F.lit(due or now).cast("timestamp")
    return cond | (F.col("t.score") < F.lit(float(boost))) if boost is not None else cond


def _count(seeds, crawldb, *, boost: float | None, due, now) -> dict[str, int]:
    """Seed counts and what the MERGE would do (new URLs, URLs a boost changes), in one pass."""
    from pyspark.sql import functions as F

    target = crawldb.select("url_fp", "score", "next_fetch_time").alias("t")
    joined = seeds.alias("s").join(target, F.col("s.url_fp") == F.col("t.url_fp"), "left")
    valid = F.col("s.reason").isNull()
    cond = _hint_condition(boost, due, now)
    boosted = (F.countDistinct(F.when(valid & F.col("t.url_fp").isNotNull() & cond, F.col("s.url_fp")))
               if cond is not None else F.lit(0))
    row = joined.agg(
        F.count(F.lit(1)).alias("seeds_read"),
        F.count(F.when(F.col("s.reason") == "invalid", 1)).alias("invalid"),
        F.count(F.when(~valid & (F.col("s.reason") != "invalid"), 1)).alias("filtered"),
        F.countDistinct(F.when(valid & F.col("t.url_fp").isNull(), F.col("s.url_fp"))).alias("inserted"),
        boosted.alias("boosted"),
    ).collect()[0]
    return row.asDict()


def _merge(spark, conf: Config, source, *, boost: float | None, due, now) -> None:
    from pyspark.sql import functions as F

    merge = common.table(spark, conf, "crawldb").alias("t").merge(source.alias("s"), "t.url_fp = s.url_fp")
    cond = _hint_condition(boost, due, now)
    if cond is not None:
        score = F.col("t.score") if boost is None else F.greatest(F.col("t.score"), F.lit(float(boost)))
        merge = merge.whenMatchedUpdate(condition=cond, set={
            "score": score,
            "next_fetch_time": F.least(F.col("t.next_fetch_time"), F.lit(due or now).cast("timestamp")),
        })
    merge.whenNotMatchedInsertAll().execute()
