"""The order generate lists due URLs in: a head start in seconds, and the virtual due time it gives.

Guarantee: no due URL starves. Each URL gets a *head start* ``h`` (seconds, bounded: within
``[-duplicate_s, importance_s + depth_s]``) and generate serves the smallest *virtual due time*
``next_fetch_time - h`` first (an earliest-deadline-first order). A URL U that became due at ``t``
is preceded only by URLs whose virtual due time is at most U's, so by URLs that became due before
``t + W``, ``W = importance_s + depth_s + duplicate_s`` (the widest gap of head starts). However
many better URLs its host keeps producing, those that arrive more than ``W`` after U come after
it: with a host given ``k`` URLs a round, rounds every ``R`` seconds, ``B`` of its URLs due before
U and ``m`` new ones a round, U is listed within ``ceil((B + m * (floor(W / R) + 1)) / k)`` rounds
(``tests/test_priority.py`` checks it over successive generate calls). This is the ageing term of
issue 15: waiting counts one for one against the head start, so a low-priority URL drains slowly
instead of never. Score order alone (what generate did before) starves it: a host that produces
as many better URLs a round as it is given never reaches it.

The head start (``[priority]`` keys, ``conf/defaults.toml``)::

    h = importance_s * w + depth_s / (1 + depth) - duplicate_s * [duplicate]
    w = (clamp(log10(worth), -D, D) + D) / (2 D),   D = importance_decades

``worth`` is ``crawldb.importance`` (``jobs/importance.py``: mean <= 1 over the crawl DB) and,
until the first refresh computed it, the discovery score (``scope.score_decay``'s cash split,
1 for a seed). A duplicate is a URL whose status is ``duplicate`` or that matches a learnt duplicate
pattern of its host under ``dedup.pattern_action = "lower"``. The freshness need is the time a URL
is overdue: it enters through the virtual due time, one second of waiting for one second of head
start (the unit every key is in). ``inject --due-now`` moves a URL's ``next_fetch_time`` back by
``due_now_s``: the same order, no second mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

from schemas.status import Status


@dataclass(frozen=True)
class Weights:
    """The ``[priority]`` keys that shape the head start, as plain values."""
    importance_s: float
    importance_decades: float
    depth_s: float
    duplicate_s: float

    @classmethod
    def of(cls, section) -> "Weights":
        """From the ``[priority]`` config section."""
        return cls(float(section.importance_s), float(section.importance_decades), float(section.depth_s),
                   float(section.duplicate_s))

    @property
    def widest_gap_s(self) -> float:
        """W: the largest difference of two URLs' head starts (the bound of the module docstring)."""
        return self.importance_s + self.depth_s + self.duplicate_s


def importance_weight(worth: Column, decades: float) -> Column:
    """w in 0..1: log10(worth) placed within -decades..+decades (a worth <= 0 or null: 0)."""
    d = F.lit(float(decades))
    log = F.log10(F.when(worth > 0, worth))
    return F.coalesce((F.least(F.greatest(log, -d), d) + d) / (d * 2), F.lit(0.0))


def head_start_s(worth: Column, depth: Column, duplicate: Column, weights: Weights) -> Column:
    """The head start in seconds (see the module docstring); ``duplicate`` a boolean Column (null: no)."""
    depth_term = F.lit(weights.depth_s) / (F.greatest(F.coalesce(depth, F.lit(0)), F.lit(0)) + 1)
    penalty = F.when(F.coalesce(duplicate, F.lit(False)), F.lit(weights.duplicate_s)).otherwise(F.lit(0.0))
    return F.lit(weights.importance_s) * importance_weight(worth, weights.importance_decades) + depth_term - penalty


def virtual_due_us(next_fetch_time: Column, head_s: Column) -> Column:
    """``next_fetch_time - head_s`` in microseconds since the epoch (smaller: served first)."""
    return F.unix_micros(next_fetch_time) - (head_s * F.lit(1e6)).cast("long")


def with_virtual_due(due, weights: Weights, *, lowered: Column | None = None):
    """``due`` (``next_fetch_time``, ``importance``, ``score``, ``depth``, ``status``) with ``virtual_due``
    (microseconds) added; ``lowered``: the URLs a learnt pattern lowers (``generate.by_patterns``)."""
    duplicate = F.col("status") == F.lit(Status.DUPLICATE.value)
    if lowered is not None:
        duplicate = duplicate | lowered
    worth = F.coalesce(F.col("importance"), F.col("score"))
    return due.withColumn("virtual_due", virtual_due_us(F.col("next_fetch_time"),
                                                        head_start_s(worth, F.col("depth"), duplicate, weights)))


def order() -> tuple[Column, ...]:
    """The total order generate lists URLs in: virtual due time, then score, due time and url_fp."""
    return (F.col("virtual_due").asc(), F.col("score").desc(), F.col("next_fetch_time").asc(), F.col("url_fp").asc())
