"""Update's counters, counted by the writes that compute their rows (``DataFrame.observe``): see :class:`Counters`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from jobs import update_transforms as T
from jobs.crawldb_rows import INSERTED
from schemas.status import ELIGIBLE, Status


def _eligible(col: str) -> str:
    """1 for a status generate may select (``schemas.status.ELIGIBLE``), else 0 (null too)."""
    listed = ", ".join(f"'{s.value}'" for s in ELIGIBLE)
    return f"CAST(CASE WHEN {col} IN ({listed}) THEN 1 ELSE 0 END AS BIGINT)"


def metrics(name: str, now_sql: str) -> list[str]:
    """The aggregates counted over the rows of ``name`` (see :class:`Counters`), as SQL that Spark and
    DuckDB both read (``now_sql``: the round's time as a timestamp literal of the engine)."""
    def n(cond: str) -> str:
        return f"CAST(sum(CASE WHEN {cond} THEN 1 ELSE 0 END) AS BIGINT)"
    if name == "crawldb":  # every row of the pre-round snapshot
        return [f"sum({_eligible('status')}) AS frontier_before"]
    if name == "crawldb_source":
        # what the write changes: a row read (update, budget) goes from _was to status; an
        # inserted one (update or new, absent from the snapshot: _was null) from nothing to status.
        # An inserted update row is a URL followed inside the round (fetch_output in_round): new too.
        was = T.WAS
        inserted = INSERTED
        applied = f"((_kind IN ('update', 'budget', 'repoint') AND {was} IS NOT NULL) OR {inserted})"
        change = f"CASE WHEN {applied} THEN {_eligible('status')} - {_eligible(was)} ELSE 0 END"
        counted = {"new_urls": inserted, "updated_urls": f"_kind = 'update' AND {was} IS NOT NULL",
                   "repointed": "_kind = 'repoint'", "sitemap_due": "_kind = 'due'", "moved_to_known": "_kind = 'moved'",
                   "duplicates": f"_kind = 'update' AND status = '{Status.DUPLICATE.value}'",
                   "budget_exhausted": f"status = '{Status.BUDGET_EXHAUSTED.value}'",
                   **{f"status_{s.value}": f"status = '{s.value}'" for s in Status}}
        return [f"{n(cond)} AS {alias}" for alias, cond in counted.items()] + [f"sum({change}) AS frontier_change"]
    if name == "hosts":
        parked = f"(park_reason LIKE 'trap:%' AND parked_until > {now_sql})"
        return ["count(*) AS hosts_updated", f"{n('round_cap IS NOT NULL')} AS hosts_throttled",
                f"{n(parked)} AS hosts_trap_parked"]
    return [f"count(*) AS {'fetch_log_rows' if name == 'fetch_log' else name}"]


def spark_timestamp(now: dt.datetime) -> str:
    """``now`` as a Spark SQL timestamp literal (the session's zone is UTC)."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.timezone.utc)
    return f"TIMESTAMP '{now.astimezone(dt.timezone.utc).isoformat()}'"


class Counters:
    """The round's counters, computed by the writes that compute their rows anyway (``DataFrame.observe``:
    an aggregate over the rows flowing through, returned with the action), so none is a Spark job of
    its own: the crawl-DB scan of the plan's first staged write, the hosts rows, the three staged sources.

    ``frontier_size`` (URLs in an eligible status after the write) = the eligible rows of the pinned
    pre-round snapshot + the write's change (per source row: eligible(new status) - eligible(``_was``)).
    Exact because the write applies every source row the sum counts: the snapshot is the one the
    rows were computed from, no row of it has ``updated_round >= N``, and ``new`` rows are absent from
    it. A rerun after a crash reads the same snapshot (its versions are in the ledger row) and
    restages the same rows, so it counts the same numbers; the commits already made change nothing
    it counts. A count of the crawl DB after the write would include what a writer other than this
    round's update committed meanwhile (an inject between a crash and the rerun): this one does not.
    """

    def __init__(self, now: dt.datetime):
        self.now, self.seen, self.direct = now, {}, {}

    def __call__(self, name: str, df):
        from pyspark.sql import Observation
        from pyspark.sql import functions as F
        self.seen[name] = Observation(f"update_{name}")
        return df.observe(self.seen[name], *[F.expr(m) for m in metrics(name, spark_timestamp(self.now))])

    def count(self, name: str, rel) -> None:
        """The same aggregates over a DuckDB relation (the driver engine's outputs: ``jobs/update_decide.py``)."""
        from jobs.duck_engine import ts
        found = rel.aggregate(", ".join(metrics(name, ts(self.now))))
        self.direct.update(zip(found.columns, found.fetchall()[0]))

    def counts(self) -> dict[str, int]:
        """The counters (after every observed DataFrame ran its write); status_* only when not 0."""
        got = {k: int(v or 0) for o in self.seen.values() for k, v in o.get.items()}
        got.update({k: int(v or 0) for k, v in self.direct.items()})
        out = {k: v for k, v in got.items() if v or not k.startswith("status_")}
        out["frontier_size"] = out.pop("frontier_before") + out.pop("frontier_change")
        return out
