"""Update's counters, counted by the writes that compute their rows (``DataFrame.observe``): see :class:`Counters`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from jobs import update_transforms as T
from schemas.status import ELIGIBLE, Status


def _eligible(col) -> Any:
    """1 for a status generate may select (``schemas.status.ELIGIBLE``), else 0 (null too)."""
    from pyspark.sql import functions as F
    return F.when(col.isin([s.value for s in ELIGIBLE]), 1).otherwise(0).cast("long")


def _metrics(name: str, now: dt.datetime) -> list:
    """The aggregate Columns counted over the rows of ``name`` (see :class:`Counters`)."""
    from pyspark.sql import functions as F

    def n(cond):
        return F.sum(F.when(cond, 1).otherwise(0).cast("long"))
    kind, status = F.col("_kind"), F.col("status")
    if name == "crawldb":  # every row of the pre-round snapshot
        return [F.sum(_eligible(status)).alias("frontier_before")]
    if name == "crawldb_source":
        # what the MERGE changes: a matched row (update, budget) goes from _was to status; an
        # inserted one (update or new, absent from the snapshot: _was null) from nothing to status.
        # An inserted update row is a URL followed inside the round (fetch_output in_round): new too.
        was = F.col(T.WAS)
        inserted = kind.isin("update", "new") & was.isNull()
        applied = (kind.isin("update", "budget", "repoint") & was.isNotNull()) | inserted
        return [n(inserted).alias("new_urls"), n((kind == "update") & was.isNotNull()).alias("updated_urls"),
                n(kind == "repoint").alias("repointed"), n(kind == "due").alias("sitemap_due"),
                n(kind == "moved").alias("moved_to_known"),
                n((kind == "update") & (status == Status.DUPLICATE.value)).alias("duplicates"),
                n(status == Status.BUDGET_EXHAUSTED.value).alias("budget_exhausted"),
                F.sum(F.when(applied, _eligible(status) - _eligible(was)).otherwise(0)).alias("frontier_change"),
                *[n(status == s.value).alias(f"status_{s.value}") for s in Status]]
    if name == "hosts":
        parked = F.col("park_reason").startswith("trap:") & (F.col("parked_until") > T.ts(now))
        return [F.count(F.lit(1)).alias("hosts_updated"), n(F.col("round_cap").isNotNull()).alias("hosts_throttled"),
                n(parked).alias("hosts_trap_parked")]
    return [F.count(F.lit(1)).alias("fetch_log_rows" if name == "fetch_log" else name)]


class Counters:
    """The round's counters, computed by the writes that compute their rows anyway (``DataFrame.observe``:
    an aggregate over the rows flowing through, returned with the action), so none is a Spark job of
    its own: the crawl-DB scan of the plan's first staged write, the hosts rows, the three staged sources.

    ``frontier_size`` (URLs in an eligible status after the MERGE) = the eligible rows of the pinned
    pre-round snapshot + the MERGE's change (per source row: eligible(new status) - eligible(``_was``)).
    Exact because the MERGE applies every source row the sum counts: the snapshot is the one the
    rows were computed from, no row of it has ``updated_round >= N``, and ``new`` rows are absent from
    it. A rerun after a crash reads the same snapshot (its versions are in the ledger row) and
    restages the same rows, so it counts the same numbers; the commits already made change nothing
    it counts. A count of the crawl DB after the MERGE would include what a writer other than this
    round's update committed meanwhile (an inject between a crash and the rerun): this one does not.
    """

    def __init__(self, now: dt.datetime):
        self.now, self.seen = now, {}

    def __call__(self, name: str, df):
        from pyspark.sql import Observation
        self.seen[name] = Observation(f"update_{name}")
        return df.observe(self.seen[name], *_metrics(name, self.now))

    def counts(self) -> dict[str, int]:
        """The counters (after every observed DataFrame ran its write); status_* only when not 0."""
        got = {k: int(v or 0) for o in self.seen.values() for k, v in o.get.items()}
        out = {k: v for k, v in got.items() if v or not k.startswith("status_")}
        out["frontier_size"] = out.pop("frontier_before") + out.pop("frontier_change")
        return out
