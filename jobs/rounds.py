"""``deltacrawl round`` / ``crawl --rounds N``: the verbs in order, resumable.

Each round: finish the last round if a crash left it open (fetch and/or
update, as the ledger says), else generate -> fetch -> update. Stops early
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
    while done < rounds:
        t0 = time.perf_counter()
        last = ledger.last_round(spark, conf)  # the one ledger read of the round before its summary
        if last is not None and last["state"] != "updated":
            n, state = last["round"], last["state"]
            print(f"round {n}: resuming from state {state}", file=out)
        else:
            g = generate.run(spark, conf)
            n, state = g.get("round"), "generated"
            if n is None:
                print("nothing is due: stopping", file=out)
                break
        if ledger.rank(state) < ledger.rank("fetched"):
            fetch.run(spark, conf, round_no=n)
        update.run(spark, conf, round_no=n, round_started=t0)
        print(summary(ledger.get_round(spark, conf, n)), file=out)
        done += 1
    return done


def summary(row: dict) -> str:
    """A readable block for one round from its ledger row (counter names: ``schemas/counters.py``)."""
    c = row.get("counts") or {}
    s = row.get("seconds") or {}

    def v(name: str) -> int:
        return counters.value(c, name)

    outcomes = {k: n for k, n in sorted(counters.family(c, "fetched_").items()) if n}
    fetch_s = s.get("fetch") or 0.0
    pages = sum(n for k, n in outcomes.items() if k not in ("not_attempted", "deferred"))
    lines = [
        f"round {row['round']}: {row['state']}",
        "  pages by outcome: " + (", ".join(f"{k}={n}" for k, n in outcomes.items()) or "none"),
        f"  bytes {v('bytes'):,}  requests {v('requests')} (robots.txt {v('robots_requests')})"
        f"  pages/s {pages / fetch_s if fetch_s else 0.0:.2f}",
        "  seconds: " + ", ".join(f"{k} {s[k]:.1f}" for k in ("generate", "fetch", "update", "round") if k in s),
        f"  politeness wait {v('politeness_wait_ms') / 1000:.1f} s (summed over URLs)"
        f"  new URLs {v('new_urls')}  frontier {v('frontier_size')}",
    ]
    return "\n".join(lines)
