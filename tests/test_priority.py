"""Generate's order (jobs/priority.py): the head start's terms, and no starvation over successive rounds."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from jobs import priority
from tests.test_generate import NOW, select, url_row

pytestmark = pytest.mark.spark


def test_head_start_terms(spark):
    w = priority.Weights(importance_s=600.0, importance_decades=2.0, depth_s=100.0, duplicate_s=1000.0)
    rows = [(1.0, None, 0, "unfetched"), (100.0, None, 0, "unfetched"), (1e-9, None, 0, "unfetched"),
            (1.0, 10.0, 3, "unfetched"), (1.0, None, 0, "duplicate")]
    df = spark.createDataFrame([(NOW, s, imp, d, st) for s, imp, d, st in rows],
                               "next_fetch_time timestamp, score double, importance double, depth int, status string")
    got = [r.virtual_due for r in priority.with_virtual_due(df, w).collect()]
    micros = int(NOW.replace(tzinfo=dt.timezone.utc).timestamp() * 1e6)
    heads = [(micros - v) / 1e6 for v in got]
    # score 1 (w = 0.5) at depth 0; 100 = two decades up (w = 1); 1e-9 clamped to w = 0; importance 10 wins over
    # the score (w = 0.75) at depth 3 (100 / 4); a duplicate loses duplicate_s
    assert heads == [400.0, 700.0, 100.0, 475.0, -600.0]
    assert w.widest_gap_s == 1700.0


def simulate(spark, weights: priority.Weights, *, rounds: int, per_round: int, new_per_round: int,
             round_s: float) -> int | None:
    """Rounds of generate on one host: a low URL (score 1e-6, depth 5) due at round 0, and ``new_per_round``
    better URLs (score 1, depth 1) due at each round; listed URLs leave. The round listing the low URL, or None."""
    low = "http://a.test/low"
    waiting = [url_row(low, score=1e-6, depth=5, due=NOW)]
    for r in range(rounds):
        now = NOW + dt.timedelta(seconds=r * round_s)
        waiting += [url_row(f"http://a.test/r{r}-{i}", score=1.0, depth=1, due=now) for i in range(new_per_round)]
        listed = {row.url for row in select(spark, waiting, now=now, max_per_host=per_round, weights=weights)}
        assert len(listed) == per_round
        if low in listed:
            return r
        waiting = [u for u in waiting if _url(u) not in listed]
    return None


def _url(row: tuple) -> str:
    from tests.test_generate import URL
    return row[URL]


def test_the_lowest_url_of_a_busy_host_is_listed_within_the_bound(spark):
    # the host gets k = 2 URLs a round and produces m = 2 better ones a round: score order never reaches the
    # low URL. With the head start, U is preceded only by URLs due before t + W (jobs/priority.py), so it is
    # listed within ceil((B + m (floor(W / R) + 1)) / k) rounds, B = 0 URLs due before it.
    w = priority.Weights(importance_s=300.0, importance_decades=3.0, depth_s=60.0, duplicate_s=0.0)
    k, m, round_s = 2, 2, 120.0
    bound = math.ceil(m * (math.floor(w.widest_gap_s / round_s) + 1) / k)
    got = simulate(spark, w, rounds=bound, per_round=k, new_per_round=m, round_s=round_s)
    assert got is not None and got < bound, (got, bound)
    # exactly: the new URLs' head start (150 + 30) passes the low one's (0 + 10) by 170 s, so those of
    # rounds 0 and 1 (r x 120 <= 170) come first, two a round: the low URL goes in round 2
    assert got == 2
    # score order (a head start far wider than any wait): still waiting in that round
    starved = priority.Weights(importance_s=1e9, importance_decades=3.0, depth_s=60.0, duplicate_s=0.0)
    assert simulate(spark, starved, rounds=got + 1, per_round=k, new_per_round=m, round_s=round_s) is None
