"""The ``rounds`` Delta table as a mirror of the ledger's records, for SQL, DuckDB and Spark readers.

The round protocol reads and writes the records only (:mod:`jobs.ledger_chain`,
milliseconds a write); the table holds the same rows (one per round, its
newest state, the ``rounds`` schema) a little later:

- **Coalesced.** :func:`flush` is one MERGE of the rows whose newest record is
  past the one the table was last brought up to (``ledger/mirror.json``); a
  flush with nothing new runs no Spark job.
- **Off the hot path.** A writing command runs inside :func:`mirroring`: a
  daemon thread flushes at most every ``ledger.mirror_interval_s`` while the
  command runs, and the command flushes once more before it exits, so a reader
  after a command sees its final state.
- **Caught up after a crash.** A command killed before its flush leaves the
  table behind; the next command's thread (or any :func:`flush`) brings it up,
  since ``mirror.json`` names the last record mirrored. A MERGE of the same
  rows twice changes nothing, so a crash between the MERGE and ``mirror.json``
  costs a repeated MERGE only.
- **Seeded once.** A crawl whose ``rounds`` table predates the records is read
  once (:func:`seed`), into the records' checkpoint 0.
"""

from __future__ import annotations

import json
import logging
import threading
from contextlib import contextmanager
from typing import Iterator

from crawl_udfs.config import Config
from jobs import lease
from jobs.common import STABLE_MERGE_SOURCE, conform, read, session_conf, table
from jobs.ledger_chain import Chain, State
from schemas.tables import TABLES

MIRRORED = "mirror.json"
log = logging.getLogger(__name__)
_flushing = threading.Lock()  # one flush at a time in this process (the thread and the command's last one)
_wake = threading.Event()  # set by every ledger write: the thread has something to mirror


def seed(spark, conf: Config, chain: Chain) -> State:
    """The records' first state, from the ``rounds`` table (one read, once per crawl)."""
    rows = [r.asDict() for r in read(spark, conf, "rounds").collect()]
    st = chain.seed(rows)
    chain.files.put(MIRRORED, json.dumps({"seq": 0}), overwrite=True)
    return st


def changed() -> None:
    """A ledger write happened: wake the mirror thread (when a command runs one)."""
    _wake.set()


def _mirrored(chain: Chain) -> int:
    text = chain.files.read(MIRRORED)
    return int(json.loads(text)["seq"]) if text else -1


def flush(spark, conf: Config) -> int:
    """Bring ``rounds`` up to the records: one MERGE of the rows changed since the last flush; rows merged."""
    with _flushing:
        lease.check()
        chain = Chain(spark, conf)
        st = chain.load()
        if st is None:  # never seeded: nothing to mirror (and no table read for a crawl that may not exist)
            return 0
        done = _mirrored(chain)
        rows = [r for n, r in sorted(st.rows.items()) if st.at[n] > done]
        if rows:
            df = conform(spark.createDataFrame(rows, TABLES["rounds"].schema), TABLES["rounds"])
            merge = (table(spark, conf, "rounds").alias("t").merge(df.alias("s"), "t.round = s.round")
                     .whenMatchedUpdateAll().whenNotMatchedInsertAll())
            with session_conf(spark, STABLE_MERGE_SOURCE):  # the source is a few local rows
                merge.execute()
        if st.seq != done:
            chain.files.put(MIRRORED, json.dumps({"seq": st.seq}), overwrite=True)
        return len(rows)


@contextmanager
def mirroring(spark, conf: Config) -> Iterator[None]:
    """For one writing command: a thread keeps ``rounds`` following the records; flushed at the end."""
    stop = threading.Event()
    interval = conf.ledger.mirror_interval_s

    def follow():
        while not stop.is_set():
            _wake.wait()
            if stop.wait(interval):  # coalesce what is written meanwhile; the end flushes the rest
                return
            _wake.clear()
            try:
                flush(spark, conf)
            except Exception as e:  # noqa: BLE001 - the table lags; the next flush catches up
                log.warning("ledger mirror: rounds table not updated: %s", e)

    _wake.set()  # a crash may have left the table behind: caught up at the first beat
    thread = threading.Thread(target=follow, name="deltacrawl-ledger-mirror", daemon=True)
    thread.start()
    failed = True
    try:
        yield
        failed = False
    finally:
        stop.set()
        _wake.set()
        thread.join()
        try:
            flush(spark, conf)
        except Exception as e:  # noqa: BLE001 - never hide the command's own error behind the mirror's
            if not failed:
                raise
            log.warning("ledger mirror: rounds table not brought up to the ledger (the next command does): %s", e)
