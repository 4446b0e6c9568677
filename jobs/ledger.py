"""The round ledger (``rounds`` table): what makes rounds resumable and idempotent.

A round moves ``generated -> fetching -> fetched -> updated``. Each verb reads
the ledger first: it does nothing for a round already past its step, and
finishes a round stuck inside its step. Rows are written by MERGE on ``round``.

Every read and write of this tiny table is a Spark job plus a Delta snapshot
(about 0.5 s and 2.5 s on a quiet laptop), so a round does as few as it can:
each verb reads its round once and hands that row to :func:`set_state`
(``old=``), which returns the row it wrote. ``rounds.crawl`` adds one read
before the round (to resume an unfinished one) and one for its summary; it
does not yet hand rows to the verbs, so generate, fetch and update each read
the round again (about five reads and four writes a round). One writer at a time is assumed (the
Airflow DAG runs one round at a time).
"""

from __future__ import annotations

from typing import Any

from crawl_udfs.config import Config
from jobs.common import conform, now_utc, read, table
from schemas.tables import TABLES

STATES = ("generated", "fetching", "fetched", "updated")


def rank(state: str | None) -> int:
    return STATES.index(state) if state in STATES else -1


def last_round(spark, conf: Config) -> dict[str, Any] | None:
    rows = read(spark, conf, "rounds").orderBy("round", ascending=False).limit(1).collect()
    return rows[0].asDict() if rows else None


def get_round(spark, conf: Config, n: int) -> dict[str, Any] | None:
    rows = read(spark, conf, "rounds").where(f"round = {int(n)}").collect()
    return rows[0].asDict() if rows else None


def set_state(spark, conf: Config, n: int, state: str, *, counts: dict[str, int] | None = None,
              seconds: dict[str, float] | None = None, old: dict[str, Any] | None = None,
              **fields: Any) -> dict[str, Any]:
    """Upsert round ``n`` with ``state``; maps are merged into what the row already holds.

    ``old`` is round ``n``'s row as the caller last read or wrote it (``{}`` for a
    round not in the ledger yet); without it the row is read first. Returns the row written.
    """
    assert state in STATES, state
    if old is None:
        old = get_round(spark, conf, n) or {}
    elif old and int(old["round"]) != int(n):
        raise ValueError(f"old row is round {old['round']}, not {n}")
    row = {f.name: old.get(f.name) for f in TABLES["rounds"].schema.fields}
    row.update(fields)
    row["round"], row["state"] = int(n), state
    stamp = {"generated": "generated_at", "fetching": "fetch_started_at", "fetched": "fetched_at",
             "updated": "updated_at"}[state]
    if fields.get(stamp) is None:  # an explicit stamp wins; re-entering a state keeps its first stamp
        row[stamp] = old.get(stamp) if old.get("state") == state and old.get(stamp) else now_utc()
    row["counts"] = {**(old.get("counts") or {}), **(counts or {})}
    row["seconds"] = {**(old.get("seconds") or {}), **(seconds or {})}
    df = conform(spark.createDataFrame([row], TABLES["rounds"].schema), TABLES["rounds"])
    (table(spark, conf, "rounds").alias("t").merge(df.alias("s"), "t.round = s.round")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    return row
