"""The round ledger and the round protocol: what makes rounds resumable and idempotent.

A round moves ``generated -> fetching -> fetched -> updated``. :func:`step` is
the one place that decides, from a round's row, what a verb does with it:
run it, resume it (a crash left it inside the verb's step), skip it (already
past the step) or refuse it (:class:`RoundError`: an earlier step is missing).

Every write is a compare-and-set: :func:`set_state` names the state it expects
the row to be in (the state of the row the caller read, ``old``; no row for a
new round) and writes only when the stored row still is in it, so a stale
writer can never move a round backwards (:class:`StaleRound`). Writes check the
crawl lease first (:func:`jobs.lease.check`): a command that lost its lease
stops before writing.

The rows live in numbered put-if-absent records under ``<storage.root>/ledger``
(:mod:`jobs.ledger_chain`): a read or a write is a listing and a small file or
two through the driver's file system, milliseconds and no Spark job (a one-row
Delta MERGE a write, 3-5 s, before). A write is record ``k+1`` of the state read
at ``k``; when another writer took ``k+1`` first, the state is read again and
the compare-and-set decided on it. The ``rounds`` Delta table is a mirror of the
records for SQL users (:mod:`jobs.ledger_mirror`), which the protocol never
reads except once, to seed the records of a crawl older than them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crawl_udfs.config import Config, ConfigError
from jobs import lease, ledger_mirror
from jobs.common import now_utc
from jobs.ledger_chain import Chain, State, copy
from schemas.tables import TABLES

STATES = ("generated", "fetching", "fetched", "updated")

#: verb: (state it starts from, state a crash leaves inside its step or None, state it ends in)
STEPS = {"generate": ("updated", None, "generated"),
         "fetch": ("generated", "fetching", "fetched"),
         "update": ("fetched", None, "updated")}


class RoundError(ConfigError):
    """A verb was asked for a round it cannot take (not in the ledger, or an earlier step missing)."""


class StaleRound(RoundError):
    """The round's stored state is not the one the writer expected: another writer moved it."""


@dataclass(frozen=True)
class Step:
    """What ``verb`` does: ``action`` "run", "resume" or "skip" for round ``round`` (row ``row``)."""

    verb: str
    action: str
    round: int
    row: dict
    #: generate with ``pipeline``: the ledger row of the round it opens beside (``fetched``, not merged yet)
    pending: dict | None = None


def rank(state: str | None) -> int:
    return STATES.index(state) if state in STATES else -1


def step(spark, conf: Config, verb: str, *, round_no: int | None = None, row: dict | None = None,
         pipeline: bool = False) -> Step:
    """The round protocol, once: what ``verb`` does for round ``round_no`` (default: the last;
    for update, the oldest round ``fetched`` when there is one).

    ``row`` is that round's ledger row when the caller has it (``rounds.crawl``); else it is read.
    generate takes the last round: a new round N+1 when it is ``updated`` (or the ledger is
    empty) or, with ``pipeline``, when it is ``fetched`` and every round before it is updated
    (round N+1 then opens beside update N: :mod:`jobs.pending_round`); else it skips and the
    unfinished round is returned for the others to finish. Rounds are updated in order: update
    refuses round N while round N-1 is not ``updated``.
    """
    start, inside, end = STEPS[verb]
    if row is None:
        if round_no is not None:
            row = get_round(spark, conf, round_no)
        else:
            row = (oldest_fetched(spark, conf) if verb == "update" else None) or last_round(spark, conf)
    if verb == "generate":
        if row is None or row["state"] == start:
            return Step(verb, "run", (int(row["round"]) if row else 0) + 1, {})
        if pipeline and row["state"] == "fetched":
            _merged_before(spark, conf, int(row["round"]))
            return Step(verb, "run", int(row["round"]) + 1, {}, pending=row)
        return Step(verb, "skip", int(row["round"]), row)
    if row is None:
        where = "the round ledger is empty" if round_no is None else f"round {round_no} is not in the round ledger"
        raise RoundError(f"nothing to {verb}: {where} (run generate first)")
    n, state = int(row["round"]), row["state"]
    if rank(state) >= rank(end):
        return Step(verb, "skip", n, row)
    if state == inside:
        return Step(verb, "resume", n, row)
    if state == start:
        if verb == "update":
            _merged_before(spark, conf, n)
        return Step(verb, "run", n, row)
    before = next(v for v, s in STEPS.items() if s[2] == start)
    raise RoundError(f"round {n} is {state}, not {start}: run {before} for it before {verb}")


def _merged_before(spark, conf: Config, n: int) -> None:
    """Raise :class:`RoundError` unless round ``n - 1`` is ``updated`` (or absent): rounds merge in order."""
    prev = get_round(spark, conf, n - 1) if n > 1 else None
    if prev is not None and prev["state"] != "updated":
        raise RoundError(f"round {n - 1} is {prev['state']}, not updated: update it before round {n}")


def oldest_fetched(spark, conf: Config) -> dict[str, Any] | None:
    """The oldest round in state ``fetched`` (fetched, not merged yet), or None."""
    rows = current(spark, conf).rows
    waiting = [n for n, r in rows.items() if r["state"] == "fetched"]
    return copy(rows[min(waiting)]) if waiting else None


def current(spark, conf: Config, chain: Chain | None = None) -> State:
    """The ledger's newest state (seeded from the ``rounds`` table the first time: one read, once)."""
    chain = chain or Chain(spark, conf)
    return chain.load() or ledger_mirror.seed(spark, conf, chain)


def last_round(spark, conf: Config) -> dict[str, Any] | None:
    rows = current(spark, conf).rows
    return copy(rows[max(rows)]) if rows else None


def get_round(spark, conf: Config, n: int) -> dict[str, Any] | None:
    row = current(spark, conf).rows.get(int(n))
    return copy(row) if row else None


def set_state(spark, conf: Config, n: int, state: str, *, counts: dict[str, int] | None = None,
              seconds: dict[str, float] | None = None, old: dict[str, Any] | None = None,
              **fields: Any) -> dict[str, Any]:
    """Move round ``n`` to ``state`` from the state of ``old``; maps are merged into what ``old`` holds.

    ``old`` is round ``n``'s row as the caller last read or wrote it (``{}`` for a
    round not in the ledger yet); without it the row is read first. The write is a
    compare-and-set on ``old``'s state: :class:`StaleRound` when the stored row is
    no longer in it. Returns the row written.
    """
    assert state in STATES, state
    lease.check()
    chain = Chain(spark, conf)
    cur = current(spark, conf, chain)
    if old is None:
        old = cur.rows.get(int(n)) or {}
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
    expected = old.get("state")
    assert expected is None or expected in STATES, expected
    while True:
        now = cur.rows.get(int(n))
        if (now["state"] if now else None) != expected:
            found = f"it is {now['state']}" if now else "it is not in the ledger"
            raise StaleRound(f"round {n}: expected {expected or 'no row'} before moving it to {state}, but {found}: "
                             f"another writer changed the ledger")
        written = chain.append(cur, row)
        if written is not None:
            break
        cur = chain.load()  # another writer took the next record: decide again on what it wrote
    ledger_mirror.changed()
    return copy(written.rows[int(n)])
