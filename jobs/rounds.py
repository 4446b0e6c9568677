"""``deltacrawl round`` / ``crawl --rounds N``: the verbs in order, resumable.

Each round: generate -> fetch -> update, each verb deciding from the ledger
row (``jobs.ledger.step``) whether it runs, resumes or skips, so a round a
crash left open is finished first. The ledger is read once; each verb hands
the row it wrote to the next. Stops early
when nothing is due. Prints one readable summary per round; the same counts
are in the ``rounds`` table (each verb writes its own into the ledger).

**Pipelined rounds** (``generate.pipeline``, off by default): once round N is
fetched, round N+1 is generated at once from the crawl DB as update N will
leave it (:mod:`jobs.pending_round`), and update N runs in a driver thread,
in a session of its own, while fetch N+1 runs; the next generate waits for it.
The hosts go from their last request of round N to their first of round N+1
in the seconds generate takes, instead of generate plus update (bench/RESULTS.md,
"Pipelined rounds"). At most one round is fetched and not merged; rounds are
merged in order (``jobs.ledger.step``), and a crawl that stopped with two rounds
open merges the older one before it resumes the newer. Embedded, the update's
jobs run on ``spark.local_spare_slots`` task slots beside the fetch tasks. With
``generate.list_ahead`` the same thread then stages, from the crawl DB as that update left it,
the part of the next round's list that does not depend on the round being fetched
(:mod:`jobs.list_ahead`), so the generate between two fetches reads files of the round's size
instead of the crawl DB.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TextIO

from crawl_udfs.config import Config
from jobs import common, ledger, pending_round
from schemas import counters


def crawl(spark, conf: Config, rounds: int, *, out: TextIO = sys.stdout, wait_s: float = 0.0) -> int:
    """Run up to ``rounds`` rounds (generate, fetch, update each); returns how many were completed.

    When nothing is due it stops, or with ``wait_s`` > 0 (``crawl --wait``) it sleeps until the next
    URL falls due (:func:`jobs.generate.next_due_epoch`) if that is at most ``wait_s`` seconds of idle
    time away, and goes on; each idle spell has its own ``wait_s``. A URL due now that no list holds
    (its host throttled below one URL, a learnt pattern skipping it) is polled every
    :data:`POLL_S` seconds within the same bound."""
    from jobs import fetch, generate, update

    pipeline = bool(conf.generate.pipeline)
    listing_ahead = pipeline and bool(conf.generate.list_ahead)
    _merge_older(spark, conf, out)
    row = ledger.last_round(spark, conf)  # the one ledger read; each verb hands on the row it wrote
    # pipelined, a round a crash left fetched is one of the N (it is merged beside the next, or alone
    # when N = 1); one by one, generate hands it back and the loop finishes it as its first round
    done, started = 0, int(pipeline and row is not None and row["state"] == "fetched")
    t0: dict[int, float] = {}
    merging: Future | None = None  # beside this round's fetch: the previous round's update, the next list's inputs
    ahead = None  # the next round's inputs staged beside this round's fetch (jobs/list_ahead.py)
    side = spark.newSession() if pipeline else None  # its own SQL settings: update's are not fetch's
    idle = 0.0  # seconds waited since the last round listed
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="deltacrawl-update") as pool:
        try:
            while started < rounds:
                start = time.perf_counter()
                if (pipeline and row is not None and row["state"] == "fetched"
                        and not pending_round.leaves_nothing_due(conf, row, common.now_utc())):
                    # its URLs can be due again at once (a re-crawl interval shorter than the round): merge first
                    row = _updated(update.run(spark, conf, row=row, round_started=t0.get(row["round"])), out)
                    done, ahead = done + 1, None
                    continue
                g, ahead = generate.run(spark, conf, row=row, pipeline=pipeline, ahead=ahead), None
                if g["round"] is None:
                    if row is not None and row["state"] == "fetched":  # nothing due even with its links:
                        row = _updated(update.run(spark, conf, row=row, round_started=t0.get(row["round"])), out)
                        done += 1
                        continue  # generate again from the merged crawl DB
                    nap = _idle_wait(spark, conf, wait_s - idle, out)
                    if nap is None:
                        break
                    time.sleep(nap)
                    idle += nap
                    continue
                idle = 0.0
                p = g.get("pending")
                if p:
                    print(f"round {p['round']}: updating beside the fetch of round {g['round']}", file=out)
                fetching = g["row"] if listing_ahead and started + 1 < rounds else None  # a next generate follows
                if p or fetching:
                    merging = pool.submit(_beside, side, conf, p, t0.get(p["round"]) if p else None, fetching)
                row = g["row"]
                t0.setdefault(row["round"], start)
                if g.get("listed_ahead"):
                    print(f"round {g['round']}: listed from the inputs staged beside the last fetch", file=out)
                if g["resumed"]:
                    print(f"round {g['round']}: resuming from state {row['state']}", file=out)
                row = fetch.run(spark, conf, row=row)["row"]
                started += 1
                if merging is not None:
                    merged, ahead = merging.result()
                    merging = None
                    if merged is not None:
                        _updated(merged, out)
                        done += 1
                if not pipeline or started >= rounds:
                    row = _updated(update.run(spark, conf, row=row, round_started=t0.get(row["round"])), out)
                    done += 1
        except BaseException:
            if merging is not None:  # never leave an update half-way behind, nor hide the first error
                try:
                    merging.result()
                except Exception as e:  # noqa: BLE001 - reported, the first error is the one raised
                    print(f"deltacrawl: the update beside the failed step also failed: {e}", file=sys.stderr)
            raise
    if row is not None and row["state"] == "fetched":  # the round a crash left fetched, with N = 1
        row = _updated(update.run(spark, conf, row=row, round_started=t0.get(row["round"])), out)
        done += 1
    return done


#: Seconds between two generates while a URL is due but no list can hold it (see :func:`crawl`).
POLL_S = 10.0


def _idle_wait(spark, conf: Config, left_s: float, out: TextIO) -> float | None:
    """Nothing is due: the seconds to sleep before generating again, or None to stop (said on ``out``)."""
    from jobs import generate

    if left_s <= 0:
        print("nothing is due: stopping", file=out)
        return None
    at = generate.next_due_epoch(spark, conf)
    if at is None:
        print("nothing is due, and no URL will fall due: stopping", file=out)
        return None
    gap = at - time.time()
    nap = gap if gap > 0 else POLL_S  # due, but no list holds it (a throttled host, a skipped pattern): poll
    what = f"the next URL falls due in {gap:.0f} s" if gap > 0 else "a URL is due that no list holds"
    if nap > left_s:
        print(f"nothing is due; {what}, beyond the wait: stopping", file=out)
        return None
    print(f"nothing is due ({what}): waiting {nap:.0f} s", file=out)
    return nap + 0.5  # past its due time, not at it


def _beside(spark, conf: Config, pending: dict | None, started: float | None, fetching: dict | None):
    """What runs beside a fetch, one after the other: update of round ``pending``, then the next
    round's inputs staged ahead from the round ``fetching`` (:func:`jobs.list_ahead.prepare`).
    Returns (update's result or None, the :class:`jobs.list_ahead.Ahead` or None)."""
    from jobs import list_ahead, update

    merged = update.run(spark, conf, row=pending, round_started=started) if pending is not None else None
    ahead = None
    if fetching is not None:
        try:
            ahead = list_ahead.prepare(spark, conf, fetching)
        except Exception as e:  # noqa: BLE001 - an optimisation: the next generate reads the crawl DB instead
            print(f"deltacrawl: staging round {fetching['round'] + 1}'s list ahead failed ({e}); "
                  "it is listed from the crawl DB", file=sys.stderr)
    return merged, ahead


def _updated(result: dict, out: TextIO) -> dict:
    print(summary(result["row"]), file=out)
    return result["row"]


def _merge_older(spark, conf: Config, out: TextIO) -> None:
    """Update the rounds fetched and not merged below the last one (a pipelined crawl stopped with
    two rounds open), oldest first, so the last round resumes on a merged crawl DB."""
    from jobs import update

    last = ledger.last_round(spark, conf)
    while last is not None and (w := ledger.oldest_fetched(spark, conf)) is not None and w["round"] < last["round"]:
        print(f"round {w['round']}: updating it before round {last['round']} resumes", file=out)
        _updated(update.run(spark, conf, row=w), out)


def summary(row: dict) -> str:
    """A readable block for one round from its ledger row (counter names: ``schemas/counters.py``)."""
    c = row.get("counts") or {}
    s = row.get("seconds") or {}

    def v(name: str) -> int:
        return counters.value(c, name)

    outcomes = {k: n for k, n in sorted(counters.family(c, "fetched_").items()) if n}
    cut = v("tail_cut")  # of not_attempted, what a thin-tail cut left (the rest: the window ended)
    by_outcome = ", ".join(f"{k}={n}" + (f" (tail cut {cut})" if cut and k == "not_attempted" else "")
                           for k, n in outcomes.items()) or "none"
    fetch_s = s.get("fetch") or 0.0
    pages = sum(n for k, n in outcomes.items() if k not in ("not_attempted", "deferred"))
    lines = [
        f"round {row['round']}: {row['state']}",
        f"  pages by outcome: {by_outcome}",
        f"  bytes {v('bytes'):,}  requests {v('requests')} (robots.txt {v('robots_requests')})"
        f"  pages/s {pages / fetch_s if fetch_s else 0.0:.2f}",
        "  seconds: " + ", ".join(f"{k} {s[k]:.1f}" for k in ("generate", "fetch", "update", "round") if k in s),
        f"  politeness wait {v('politeness_wait_ms') / 1000:.1f} s (summed over URLs)"
        f"  new URLs {v('new_urls')}  frontier {v('frontier_size')}",
    ]
    return "\n".join(lines)
