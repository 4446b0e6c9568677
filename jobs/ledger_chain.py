"""The round ledger's truth: a chain of numbered JSON records under ``<storage.root>/ledger``.

Guarantees:

- **A compare-and-set per write.** Record ``k`` holds one round's whole row
  (the ``rounds`` schema's fields) after the ``k``-th ledger write; the state
  is the chain replayed. A writer that read the state at ``k`` writes ``k+1``
  put-if-absent (:class:`jobs.records.Records`); when ``k+1`` exists another
  writer moved the ledger first, and :meth:`Chain.append` returns None.
- **Cheap to read, however long the crawl.** Every :data:`CHECKPOINT_EVERY`-th
  record is followed by a checkpoint, ``<k>.checkpoint.json``: every round's
  newest row at ``k`` (Delta's ``_delta_log`` checkpoints are the model). A read
  lists the directory, reads the newest checkpoint and the records after it;
  records and checkpoints older than the checkpoint before it are removed, so a
  listing holds at most about ``2 * CHECKPOINT_EVERY`` files. Records never
  change once written, so a process keeps the state it read and reads only the
  records written since (checked against the text of the one it read last).
- **No Spark jobs.** Only the driver touches the files (milliseconds).

The state before the first record (``0.checkpoint.json``) is seeded once from
the ``rounds`` table by :mod:`jobs.ledger_mirror`.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from dataclasses import dataclass, field
from typing import Any

from crawl_udfs.config import Config
from jobs.common import root
from jobs import records
from jobs.records import number, numbered
from schemas.tables import TABLES

CHECKPOINT_EVERY = 20  # records between two checkpoints (four rounds)
CHECKPOINT = ".checkpoint.json"
_TIMES = {f.name for f in TABLES["rounds"].schema.fields if f.dataType.typeName() == "timestamp"}
_lock = threading.Lock()
_cache: dict[str, "State"] = {}  # storage root -> the newest state this process read or wrote


@dataclass(frozen=True)
class State:
    """The ledger after record ``seq``: ``rows`` by round, ``at`` the record that last wrote each round."""

    seq: int
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    at: dict[int, int] = field(default_factory=dict)
    name: str = ""  # the file the state was read up to, and its text: a cached state is checked against it
    text: str = ""


def _plain(v: Any) -> Any:
    """A NumPy or other number-like value JSON does not know, as a plain number."""
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"not JSON serialisable in a ledger row: {v!r}")


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, default=_plain)


def encode(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in row.items()}


def decode(row: dict[str, Any]) -> dict[str, Any]:
    out = {f.name: row.get(f.name) for f in TABLES["rounds"].schema.fields}
    for k in _TIMES:
        if out[k] is not None:
            out[k] = dt.datetime.fromisoformat(out[k])
    return out


def copy(row: dict[str, Any]) -> dict[str, Any]:
    """A row the caller may change without touching the cached state."""
    return {**row, "counts": dict(row["counts"] or {}), "seconds": dict(row["seconds"] or {})}


class Chain:
    """One crawl's ledger records (driver only)."""

    def __init__(self, spark, conf: Config):
        self.files = records.at(spark, conf, "ledger")
        self.key = root(conf)

    def load(self) -> State | None:
        """The newest state, or None when the ledger was never seeded."""
        for _ in range(3):  # a checkpoint or record removed between the listing and its read: list again
            with _lock:
                st = _cache.get(self.key)
            names = self.files.names_from(st.name if st else numbered(0, CHECKPOINT))
            if st is not None and (not names or names[0] != st.name or self.files.read(st.name) != st.text):
                st, names = None, self.files.names_from(numbered(0, CHECKPOINT))  # not the chain it cached
            seqs = [n for n in map(number, names) if n is not None]
            points = [n for n in (number(x, CHECKPOINT) for x in names) if n is not None]
            if st is None:
                if not points:
                    return None
                st = self._checkpoint(points[-1])
            st = self._replay(st, max(seqs + points)) if st is not None else None
            with _lock:
                if st is None:
                    _cache.pop(self.key, None)  # fallen behind a compaction: from the newest checkpoint
                else:
                    _cache[self.key] = st
            if st is not None:
                return st
        raise RuntimeError(f"the round ledger under {self.files.where} changed while it was read three times")

    def _checkpoint(self, seq: int) -> State | None:
        name = numbered(seq, CHECKPOINT)
        text = self.files.read(name)
        if text is None:
            return None
        doc = json.loads(text)
        rows = {int(r["row"]["round"]): decode(r["row"]) for r in doc["rows"]}
        return State(seq, rows, {int(r["row"]["round"]): int(r["seq"]) for r in doc["rows"]}, name, text)

    def _replay(self, st: State, head: int) -> State | None:
        for seq in range(st.seq + 1, head + 1):
            name = numbered(seq)
            text = self.files.read(name)
            if text is None:
                return None
            st = _apply(st, seq, decode(json.loads(text)["row"]), name, text)
        return st

    def seed(self, rows: list[dict[str, Any]]) -> State:
        """Checkpoint 0 from ``rows`` (the ``rounds`` table of a crawl older than the records); a no-op once done."""
        doc = {"seq": 0, "rows": [{"seq": 0, "row": encode(r)} for r in rows]}
        self.files.put(numbered(0, CHECKPOINT), dumps(doc))
        return self.load()

    def append(self, st: State, row: dict[str, Any]) -> State | None:
        """Write ``row`` as record ``st.seq + 1``; the new state, or None when that record exists."""
        seq, text = st.seq + 1, dumps({"seq": st.seq + 1, "row": encode(row)})
        if not self.files.put(numbered(seq), text):
            return None
        new = _apply(st, seq, decode(json.loads(text)["row"]), numbered(seq), text)
        with _lock:
            _cache[self.key] = new
        if seq % CHECKPOINT_EVERY == 0:
            self._compact(new)
        return new

    def _compact(self, st: State) -> None:
        """A checkpoint at ``st.seq``; records and checkpoints older than the checkpoint before it removed."""
        rows = [{"seq": st.at[n], "row": encode(r)} for n, r in sorted(st.rows.items())]
        self.files.put(numbered(st.seq, CHECKPOINT), dumps({"seq": st.seq, "rows": rows}))
        keep = st.seq - CHECKPOINT_EVERY
        for name in self.files.names_from(numbered(0, CHECKPOINT)):
            n = number(name) if number(name) is not None else number(name, CHECKPOINT)
            if n is not None and n < keep:
                self.files.delete(name)


def _apply(st: State, seq: int, row: dict[str, Any], name: str, text: str) -> State:
    n = int(row["round"])
    return State(seq, {**st.rows, n: row}, {**st.at, n: seq}, name, text)
