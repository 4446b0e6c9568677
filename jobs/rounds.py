"""``deltacrawl round`` / ``crawl --rounds N``: the verbs in order, resumable.

Each round: generate -> fetch -> update, each verb deciding from the ledger
row (``jobs.ledger.step``) whether it runs, resumes or skips, so a round a
crash left open is finished first. The ledger is read once; each verb hands
the row it wrote to the next. Stops early
when nothing is due. Prints one readable summary per round; the same counts
are in the ``rounds`` table (each verb writes its own into the ledger).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from crawl_udfs.config import Config
from jobs import ledger
from schemas import counters


def crawl(spark, conf: Config, rounds: int, *, out: TextIO = sys.stdout) -> int:
    from jobs import fetch, generate, update

    done = 0
    row = ledger.last_round(spark, conf)  # the one ledger read; each verb hands on the row it wrote
    while done < rounds:
        t0 = time.perf_counter()
        g = generate.run(spark, conf, row=row)
        if g["round"] is None:
            print("nothing is due: stopping", file=out)
            break
        row = g["row"]
        if g["resumed"]:
            print(f"round {g['round']}: resuming from state {row['state']}", file=out)
        row = fetch.run(spark, conf, row=row)["row"]
        row = update.run(spark, conf, row=row, round_started=t0)["row"]
        print(summary(row), file=out)
        done += 1
    return done


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
