"""The round ledger's records (``jobs/ledger_chain.py``) and the ``rounds`` mirror (``jobs/ledger_mirror.py``).

Small tier: a temporary storage.root with only the ``rounds`` table, the one
shared Spark session; the protocol's writes are files, so most of these run no
Spark job at all.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from pathlib import Path

import pytest

from crawl_udfs import config
from jobs import common, ledger, ledger_chain, ledger_mirror, records
from jobs.ledger import StaleRound
from schemas.tables import TABLES

T0 = dt.datetime(2026, 12, 1, 12, 0, 0, 123456)


@pytest.fixture
def conf(tmp_path):
    c = config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"', "spark.shuffle_partitions=1"])
    yield c
    ledger_chain._cache.pop(common.root(c), None)


def _rounds_table(spark, conf, rows=()):
    """The ``rounds`` table alone (the others are not needed here), with ``rows``."""
    df = spark.createDataFrame([{f.name: r.get(f.name) for f in TABLES["rounds"].schema.fields} for r in rows],
                               TABLES["rounds"].schema)
    df.write.format("delta").mode("append").save(common.table_path(conf, "rounds"))


def _table(spark, conf) -> dict:
    return {r["round"]: r.asDict() for r in spark.read.format("delta").load(common.table_path(conf, "rounds")).collect()}


def _commits(conf) -> int:
    return len(list((Path(common.table_path(conf, "rounds")) / "_delta_log").glob("*.json")))


def _fresh(spark, conf) -> None:
    """A new crawl's ledger (``deltacrawl init`` seeds it from the empty table): no table needed here."""
    ledger_chain.Chain(spark, conf).seed([])


def test_two_writers_from_the_same_old_row_exactly_one_wins(spark, conf):
    _fresh(spark, conf)
    g = ledger.set_state(spark, conf, 1, "generated", old={}, n_partitions=2)
    # the race itself, at the record level: both read the state at k, both write k+1
    chain = ledger_chain.Chain(spark, conf)
    at_k = chain.load()
    assert chain.append(at_k, {**g, "state": "fetching"}) is not None
    assert chain.append(at_k, {**g, "state": "fetching", "n_partitions": 9}) is None
    assert ledger.get_round(spark, conf, 1)["n_partitions"] == 2
    # and through the protocol, from two threads at once: one moves the round, the other is stale
    f = ledger.get_round(spark, conf, 1)
    go, won, lost = threading.Barrier(2), [], []

    def writer(k):
        go.wait()
        try:
            won.append(ledger.set_state(spark, conf, 1, "fetched", old=f, counts={"requests": k}))
        except StaleRound as e:
            lost.append(str(e))
    threads = [threading.Thread(target=writer, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 1, (won, lost)
    assert "expected fetching before moving it to fetched, but it is fetched" in lost[0]
    assert ledger.get_round(spark, conf, 1)["counts"] == won[0]["counts"]


def test_two_writers_of_one_record_name_at_once_one_wins_and_readers_see_it_whole(spark, conf):
    """Put-if-absent under a real race (jobs/records.py): two threads write each name at the same moment
    while a third reads it. On a local disk Hadoop's rename is exists-then-rename and the checksum file
    moves separately, so both writers could win, or a reader meet one writer's text under the other's
    checksum (ChecksumException). Every name must have one winner, and every read be None or that text."""
    files = records.at(spark, conf, "race")
    names = [records.numbered(n) for n in range(40)]
    won, seen, errors = {n: [] for n in names}, {n: [] for n in names}, []
    gates = {n: threading.Barrier(3) for n in names}

    def writer(k):
        for n in names:
            gates[n].wait()
            try:
                if files.put(n, f'{{"writer": {k}, "pad": "{"x" * 600}"}}'):
                    won[n].append(k)
            except Exception as e:  # noqa: BLE001 - the failure this test looks for
                errors.append(repr(e)[:300])

    def reader():
        for n in names:
            gates[n].wait()
            for _ in range(3):
                try:
                    seen[n].append(files.read(n))
                except Exception as e:  # noqa: BLE001 - a partial or mismatched record
                    errors.append(repr(e)[:300])
    threads = [threading.Thread(target=writer, args=(k,)) for k in (1, 2)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [], errors[:3]
    assert all(len(w) == 1 for w in won.values()), {n: w for n, w in won.items() if len(w) != 1}
    for n in names:
        text = files.read(n)
        assert f'"writer": {won[n][0]},' in text
        assert set(seen[n]) <= {None, text}, n
    assert not [n for n in files.names() if n not in names], files.names()  # no temporary file left
    # and no checksum file beside a record (Hadoop's local .crc, moved apart from its data by a rename)
    assert not [n for n in os.listdir(files.where) if n.endswith(".crc")], sorted(os.listdir(files.where))[:4]


def test_records_survive_and_a_new_process_resumes_from_them(spark, conf, monkeypatch):
    monkeypatch.setattr(ledger_chain, "CHECKPOINT_EVERY", 4)
    _fresh(spark, conf)
    row = {}
    for n in range(1, 6):  # 5 rounds x 4 writes: checkpoints every 4 records, the old ones removed
        for s in ("generated", "fetching", "fetched", "updated"):
            stamp = {"fetched_at": T0} if s == "fetched" else {}
            row = ledger.set_state(spark, conf, n, s, old=row if s != "generated" else {},
                                   counts={f"c_{s}": n}, seconds={s: n / 3}, **stamp)
        row = {}
    written = {n: ledger.get_round(spark, conf, n) for n in range(1, 6)}
    names = ledger_chain.Chain(spark, conf).files.names()
    assert len(names) <= 2 * 4 + 3, sorted(names)   # not 20 records: compacted behind checkpoints
    ledger_chain._cache.clear()   # a new process: nothing in memory, and no rounds table to read
    assert not Path(common.table_path(conf, "rounds")).exists()
    assert {n: ledger.get_round(spark, conf, n) for n in range(1, 6)} == written
    assert written[3]["fetched_at"] == T0 and written[3]["counts"] == {
        "c_generated": 3, "c_fetching": 3, "c_fetched": 3, "c_updated": 3}
    assert ledger.last_round(spark, conf)["round"] == 5
    nxt = ledger.step(spark, conf, "generate")
    assert (nxt.action, nxt.round) == ("run", 6)


def test_the_mirror_catches_up_after_a_crash_before_its_flush(spark, conf):
    _rounds_table(spark, conf)
    g = ledger.set_state(spark, conf, 1, "generated", old={}, n_partitions=2)
    with ledger_mirror.mirroring(spark, conf):  # a command: its flush at the end
        ledger.set_state(spark, conf, 1, "fetching", old=g)
    assert {n: r["state"] for n, r in _table(spark, conf).items()} == {1: "fetching"}
    # a command killed before its flush: the table is behind the records
    f = ledger.get_round(spark, conf, 1)
    ledger.set_state(spark, conf, 2, "generated", old={}, counts={"generated": 7})
    ledger.set_state(spark, conf, 1, "fetched", old=f)
    assert {n: r["state"] for n, r in _table(spark, conf).items()} == {1: "fetching"}
    assert ledger_mirror.flush(spark, conf) == 2   # the next command's catch-up: the two changed rows
    got = _table(spark, conf)
    assert got == {n: ledger.get_round(spark, conf, n) for n in (1, 2)}
    commits = _commits(conf)
    assert ledger_mirror.flush(spark, conf) == 0 and _commits(conf) == commits   # nothing new: no commit


def test_an_old_crawl_with_only_the_table_is_seeded_once(spark, conf):
    old = dict(round=1, state="updated", generated_at=T0, updated_at=T0, n_partitions=3,
               counts={"generated": 12}, seconds={"round": 4.5})
    _rounds_table(spark, conf, [old, {**old, "round": 2, "state": "fetched", "counts": {"generated": 5}}])
    assert ledger.last_round(spark, conf)["round"] == 2
    assert ledger.get_round(spark, conf, 1) == _table(spark, conf)[1]
    commits = _commits(conf)
    import shutil
    shutil.rmtree(common.table_path(conf, "rounds"))   # from now on the table is never read
    ledger_chain._cache.clear()
    assert ledger.get_round(spark, conf, 2)["counts"] == {"generated": 5}
    moved = ledger.set_state(spark, conf, 2, "updated")
    assert moved["generated_at"] == T0 and ledger.last_round(spark, conf)["state"] == "updated"
    assert commits == 1
