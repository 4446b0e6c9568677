"""The crawl lease: at most one writing ``deltacrawl`` command per ``storage.root``.

Guarantees:

- **One holder.** A writing verb runs inside :func:`hold`, which takes the lease
  or refuses at once (:class:`LeaseHeld`, naming the holder's host, pid, verb,
  since when and until when). Read-only commands (``sql``, ``status``,
  ``export``) never take it.
- **On every storage Delta supports.** The lease is a chain of numbered records
  ``<storage.root>/lease/<seq>.json``; every change (take, renew, release)
  writes the next number with Delta's own LogStore and ``overwrite=False``: the
  put-if-absent that Delta's commits rely on (atomic create on a local disk and
  HDFS, the DynamoDB LogStore or a commit coordinator on S3, conditional writes
  on Azure and GCS). Two writers of the same number: one succeeds, the other
  gets ``FileAlreadyExistsException`` and has lost the race. The newest number
  is the lease's state, so a change is a compare-and-set on it.
- **No Spark jobs.** Records are read, listed and written by the driver through
  the Hadoop file system (milliseconds), so a renewal never queues behind fetch
  tasks that hold every task slot for ``fetch.task_budget_s``.
- **A dead holder needs no clean-up.** The holder renews every
  ``lease.heartbeat_s`` from a daemon thread; a record not renewed by its
  ``expires_at`` (``lease.ttl_s`` after its write) may be taken over. A holder
  whose pid is gone is taken over at once when it ran in this process-id space
  (same kernel boot and pid namespace, :func:`pid_space`; a host name alone is
  not enough: containers may share one, each with its own pids). ``force`` takes a
  lease that is still live (the risks: :data:`FORCE_RISK`).
- **A holder that lost its lease stops.** When a renewal finds a newer record
  than its own (taken over after an expiry, or forced), or it could not renew
  before its own expiry, the holder cancels its Spark jobs and :func:`check`
  raises :class:`LeaseLost` before the next ledger write.

Expiry compares the holder's wall clock (written) with the reader's: machines
sharing a ``storage.root`` need clocks within a small part of ``lease.ttl_s``.

**On S3** the records are put with S3's conditional write (``If-None-Match: *``,
:mod:`jobs.records`), not through Delta's default S3 LogStore (``S3SingleDriverLogStore``: an
existence check and a put, serialised only inside one JVM), so the lease holds across drivers there
too. Delta's own commits through that LogStore do not: two drivers committing one version can
silently overwrite each other, as a writer taken over alive (forced, or stalled past its expiry)
could. So on an ``s3a://`` root a writing command refuses to start (:func:`refuse_unsafe_storage`)
unless the deployment declares one driver at a time (``storage.s3_single_driver``; ``--force`` is then
refused) or configures Delta's DynamoDB LogStore, whose commits are conditional writes in DynamoDB.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import threading
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Iterator

from crawl_udfs.config import Config, ConfigError
from jobs.common import now_utc
from jobs import records
from jobs.records import number, numbered

FORCE_RISK = ("a live holder goes on until its next renewal (up to lease.heartbeat_s): two fetchers "
              "on one web (requests closer than the host delay) and Delta conflicts that fail a step")
_KEEP = 8  # records kept behind the newest (older ones are removed by renewals)
_lock = threading.Lock()
_held: list["Lease"] = []  # the lease this process holds, if any


#: Delta's LogStore whose put-if-absent holds across drivers on S3 (a DynamoDB conditional write).
MULTI_DRIVER_LOGSTORE = "io.delta.storage.S3DynamoDBLogStore"
_LOGSTORE_KEYS = ("spark.delta.logStore.s3a.impl", "spark.delta.logStore.s3.impl", "spark.delta.logStore.class")


def refuse_unsafe_storage(conf: Config, *, force: bool) -> None:
    """Raise :class:`ConfigError` when a writing command on ``storage.root`` could corrupt the crawl:
    an S3 root whose LogStore is single-driver (Delta's default there) without
    ``storage.s3_single_driver``, or with it and ``force``. Any other root: nothing to refuse."""
    from jobs import object_store

    if not object_store.is_s3(conf.storage.root):
        return
    extra = {k.strip(): v.strip() for k, _, v in (p.partition("=") for p in conf.spark.extra)}
    if any(extra.get(k) == MULTI_DRIVER_LOGSTORE for k in _LOGSTORE_KEYS):
        return
    if not conf.storage.s3_single_driver:
        raise ConfigError(
            f"storage.root {conf.storage.root} is on S3, where Delta's default LogStore (S3SingleDriverLogStore) "
            f"and the crawl lease are safe only while one driver writes: set storage.s3_single_driver=true if "
            f"this deployment runs one writing command at a time, or configure Delta's DynamoDB LogStore "
            f"(spark.extra: spark.delta.logStore.s3a.impl={MULTI_DRIVER_LOGSTORE})")
    if force:
        raise ConfigError(
            f"--force is refused on {conf.storage.root}: with a single-driver LogStore on S3 a forced takeover "
            f"beside a live writer could lose a Delta commit; wait until the lease expires (lease.ttl_s)")


class LeaseHeld(ConfigError):
    """Another command holds the crawl's lease."""


class LeaseLost(RuntimeError):
    """This command's lease was taken over (expired or forced): it must not write on."""


@dataclass(frozen=True)
class Record:
    """One lease record: who holds the crawl (``event`` "release": nobody) until ``expires_at``."""

    seq: int
    event: str  # take | renew | release
    holder: str  # a random id per hold
    host: str
    pid: int
    verb: str
    since: str  # ISO UTC, when the holder took the lease
    expires_at: str  # ISO UTC
    pid_space: str = ""  # where ``pid`` means something (:func:`pid_space`); "" in records before it existed

    def describe(self) -> str:
        return (f"{self.verb} (pid {self.pid} on {self.host}) holds the crawl lease since {self.since} UTC, "
                f"until {self.expires_at} UTC unless renewed")


def _iso(t: dt.datetime) -> str:
    return t.replace(microsecond=0).isoformat()


class _Store:
    """Numbered records under ``<root>/lease`` (:class:`jobs.records.Records`: put-if-absent, driver only)."""

    def __init__(self, spark, conf: Config):
        self._files = records.at(spark, conf, "lease")

    def latest(self) -> Record | None:
        seqs = [n for n in map(number, self._files.names()) if n is not None]
        for seq in sorted(seqs, reverse=True):  # the newest readable one (an older one may be mid-removal)
            text = self._files.read(numbered(seq))
            if text is not None:
                return Record(**json.loads(text))
        return None

    def put(self, rec: Record) -> bool:
        """Write ``rec`` as number ``rec.seq`` unless that number exists; True when written."""
        if not self._files.put(numbered(rec.seq), json.dumps(asdict(rec))):
            return False
        for old in range(max(0, rec.seq - _KEEP - 4), rec.seq - _KEEP):
            self._files.delete(numbered(old))
        return True


def pid_space() -> str:
    """This process's pid space: the kernel's boot id and the pid namespace (empty where unknown).

    Two processes see the same pids only when both match; a container sharing the host name of
    another (or of the machine) has its own pid namespace."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


def free_reason(cur: Record | None, now: dt.datetime, *, this_space: str, alive) -> str | None:
    """Why ``cur`` may be taken without force ("free", "expired", "dead"), or None when it is live."""
    if cur is None or cur.event == "release":
        return "free"
    if dt.datetime.fromisoformat(cur.expires_at) <= now:
        return "expired"
    if this_space and cur.pid_space == this_space and not alive(cur.pid):
        return "dead"
    return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists in this pid space (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Lease:
    """This process's hold on the crawl; :meth:`take` it, :meth:`renew` it, :meth:`release` it."""

    def __init__(self, store: _Store, conf: Config, verb: str, *, clock=now_utc):
        ttl, beat = conf.lease.ttl_s, conf.lease.heartbeat_s  # beat <= ttl / 2: config_rules.RELATIONS
        self.store, self.verb, self.clock = store, verb, clock
        self.ttl, self.heartbeat_s = dt.timedelta(seconds=ttl), beat
        self.holder, self.host, self.pid = uuid.uuid4().hex, socket.gethostname(), os.getpid()
        self.pid_space = pid_space()
        self.record: Record | None = None
        self.lost: str | None = None
        self.taken_from: str | None = None  # why the previous record could be taken (free/expired/dead/forced)

    def _next(self, event: str, seq: int, since: str) -> Record:
        return Record(seq=seq, event=event, holder=self.holder, host=self.host, pid=self.pid, verb=self.verb,
                      since=since, expires_at=_iso(self.clock() + self.ttl), pid_space=self.pid_space)

    def take(self, *, force: bool = False) -> Record:
        """Take the lease, or raise :class:`LeaseHeld` naming the live holder."""
        cur = self.store.latest()
        reason = free_reason(cur, self.clock(), this_space=self.pid_space, alive=alive)
        if reason is None and not force:
            raise LeaseHeld(f"another writer is running: {cur.describe()}; wait for it, or if it is surely gone "
                            f"rerun with --force")
        rec = self._next("take", (cur.seq if cur else 0) + 1, _iso(self.clock()))
        if not self.store.put(rec):
            winner = self.store.latest()
            raise LeaseHeld(f"another writer took the lease first: {winner.describe() if winner else 'unknown'}")
        self.record, self.taken_from = rec, reason or "forced"
        return rec

    def renew(self) -> bool:
        """Extend the lease by ``lease.ttl_s``; False (and :attr:`lost` set) when it is no longer ours."""
        assert self.record is not None
        if self.lost:
            return False
        if dt.datetime.fromisoformat(self.record.expires_at) <= self.clock():
            self.lost = f"not renewed before it expired at {self.record.expires_at} UTC"
            return False
        rec = self._next("renew", self.record.seq + 1, self.record.since)
        if self.store.put(rec):
            self.record = rec
            return True
        other = self.store.latest()
        if other is not None and other.holder == self.holder and other.seq >= rec.seq:
            self.record = other  # our own write, whose reply was lost
            return True
        self.lost = f"taken over: {other.describe() if other else 'unknown holder'}"
        return False

    def release(self) -> None:
        """Hand the lease back (a later taker needs no expiry); a lost lease is left to its new holder."""
        if self.record is None or self.lost:
            return
        rec = self._next("release", self.record.seq + 1, self.record.since)
        if self.store.put(rec):
            self.record = rec


def check() -> None:
    """Raise :class:`LeaseLost` when this process held a lease and lost it (a no-op when it holds none)."""
    with _lock:
        lease = _held[0] if _held else None
    if lease is None:
        return
    if lease.lost is None and dt.datetime.fromisoformat(lease.record.expires_at) <= lease.clock():
        lease.lost = f"not renewed before it expired at {lease.record.expires_at} UTC"
    if lease.lost:
        raise LeaseLost(f"the crawl lease was lost ({lease.lost}); stopped without writing further: "
                        f"rerun the command once the other writer is done")


def holder(spark, conf: Config) -> Record | None:
    """The live holder of the lease, if any (for ``status``)."""
    cur = _Store(spark, conf).latest()
    live = free_reason(cur, now_utc(), this_space=pid_space(), alive=alive) is None
    return cur if live else None


@contextmanager
def hold(spark, conf: Config, verb: str, *, force: bool = False, out=None) -> Iterator[Lease]:
    """Hold the crawl lease for the block: take it (or raise :class:`LeaseHeld`), renew it from a daemon
    thread, release it at the end. Losing it cancels this session's Spark jobs; the block's exit then
    raises :class:`LeaseLost`."""
    lease = Lease(_Store(spark, conf), conf, verb)
    lease.take(force=force)
    if force and out is not None and lease.taken_from == "forced":
        print(f"deltacrawl: --force took a live lease; risk: {FORCE_RISK}", file=out)
    stop = threading.Event()

    def beat():
        while not stop.wait(lease.heartbeat_s):
            try:
                ok = lease.renew()
            except Exception:  # noqa: BLE001 - storage hiccup: retried next beat, until the expiry
                ok = lease.lost is None
            if not ok:
                # Every beat from now on, not once: a job submitted after the loss was seen
                # (the block may be between two jobs) is cancelled too.
                spark.sparkContext.cancelAllJobs()

    thread = threading.Thread(target=beat, name="deltacrawl-lease", daemon=True)
    with _lock:
        _held[:] = [lease]
    thread.start()
    try:
        yield lease
        check()
    except Exception:
        check()  # a lost lease is the reason; the cancelled job's error is its consequence
        raise
    finally:
        stop.set()
        thread.join(timeout=lease.heartbeat_s)
        with _lock:
            _held.clear()
        lease.release()
