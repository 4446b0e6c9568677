"""Which crawl-DB rows a new round may list: eligible and due by the round's horizon.

A row is due when its status is eligible (``schemas.status.ELIGIBLE``) and its ``next_fetch_time`` is at
or before the horizon: ``now``, or with ``generate.due_ahead_share`` a little later (:func:`due_horizon`).
Generate (and, pipelined, the pending round's view and the list staged ahead) select through
:func:`due_urls` only, so the rule lives here.
"""

from __future__ import annotations

import datetime as dt

from crawl_udfs.config import Config
from schemas.status import ELIGIBLE


def due_horizon(conf: Config, now: dt.datetime, prev: dict | None) -> dt.datetime:
    """The due horizon of a new round: ``now`` plus ``generate.due_ahead_share`` of the previous round's
    cycle (its generate seconds, then generated → updated in the ledger ``prev``).

    A URL that falls due between two rounds waits for the next one, half a cycle late on average;
    listing what falls due within half a cycle fetches each URL in the round nearest its due time.
    Measured under the adaptive policy (bench/RESULTS.md, session 23) it bought more re-fetches, not a
    better use of them, so it is off by default. ``now`` when the share is 0, and for a first round or a
    previous round not yet updated (pipelined)."""
    share = float(conf.generate.due_ahead_share)
    if share <= 0 or not prev or not prev.get("generated_at") or not prev.get("updated_at"):
        return now

    def at(v):
        return v if isinstance(v, dt.datetime) else dt.datetime.fromisoformat(str(v))
    cycle = (at(prev["updated_at"]) - at(prev["generated_at"])).total_seconds()
    cycle += float((prev.get("seconds") or {}).get("generate") or 0.0)
    return now + dt.timedelta(seconds=share * max(0.0, cycle))


def due_urls(crawldb, now):
    """The crawl DB rows due at ``now`` (a naive UTC datetime): eligible status, ``next_fetch_time <= now``."""
    from pyspark.sql import functions as F

    return crawldb.where(F.col("status").isin([s.value for s in ELIGIBLE])
                         & (F.col("next_fetch_time") <= F.lit(now).cast("timestamp")))
