"""The live line of a fetch: what its running tasks say of themselves, printed every few seconds.

Spark tells the driver how many tasks ended, not what a running task has done, and a
PySpark accumulator reaches the driver only when its task ends. So each fetch task
writes a small JSON snapshot of itself (:meth:`crawl_udfs.partition._Task.snapshot`)
every ``fetch.progress_every_s`` to ``storage.root/_progress/r{round}/p{partition}.json``
(through ``pyarrow.fs``: a local disk or object storage, like its WARC files; never under
``warc/``, which holds the corpus only), and
the driver reads them back on a thread and prints

    fetch round 3: 1/2 tasks done, 1,234 pages (56 followed in-round), 41.2 pages/s, 80/120 hosts finished

in place on a terminal, or as a plain line every 30 s when stderr is not one (Airflow's
logs). The directory is removed when the fetch ends. A snapshot that cannot be written
or read is skipped: progress is advisory and never fails a task or the fetch.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque

from pyarrow import fs as pafs

from jobs.warc_staging import filesystem

PROGRESS = "_progress"
#: Seconds between the plain lines written when stderr is not a terminal.
PLAIN_EVERY_S = 30.0
#: Snapshots of the whole fetch the pages/s figure is taken over (times the read interval).
RATE_SAMPLES = 6


def round_dir(root: str, round_no: int) -> str:
    """Round ``round_no``'s snapshots under ``root`` (``storage.root``)."""
    return f"{root.rstrip('/')}/{PROGRESS}/r{round_no:06d}"


class TaskProgress:
    """The callable a fetch task hands its snapshots to: one file per partition, replaced whole."""

    def __init__(self, directory: str, partition: int, attempt: int, store=None):
        """``store``: how to reach an object store (:func:`jobs.warc_staging.filesystem`)."""
        self.directory, self.partition, self.attempt, self.store = directory, partition, attempt, store

    def __call__(self, snapshot: dict) -> None:
        try:
            fs, base = filesystem(self.directory, self.store)
            fs.create_dir(base, recursive=True)
            tmp = f"{base}/.p{self.partition}-a{self.attempt}.tmp"
            with fs.open_output_stream(tmp) as f:
                f.write(json.dumps({**snapshot, "attempt": self.attempt}).encode())
            fs.move(tmp, f"{base}/p{self.partition}.json")  # readers never see half a file
        except Exception:  # noqa: BLE001 - advisory: a full disk or a flaky store must not fail the task
            pass


def read(directory: str, store=None) -> list[dict]:
    """Every task's last snapshot (unreadable ones skipped)."""
    try:
        fs, base = filesystem(directory, store)
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except Exception:  # noqa: BLE001
        return []
    out = []
    for info in infos:
        if info.type == pafs.FileType.File and info.base_name.endswith(".json"):
            try:
                with fs.open_input_stream(info.path) as f:
                    out.append(json.loads(f.read()))
            except Exception:  # noqa: BLE001 - replaced under us, or half-written by a dying attempt
                continue
    return out


def line(round_no: int, n_tasks: int, snapshots: list[dict], pages_per_s: float | None) -> str:
    if not snapshots:
        return f"fetch round {round_no}: {n_tasks} task(s) starting"
    pages = sum(s["pages"] for s in snapshots)
    followed = sum(s["followed"] for s in snapshots)
    hosts = sum(s["hosts"] for s in snapshots)
    busy = sum(s["busy_hosts"] for s in snapshots)
    done = sum(bool(s["done"]) for s in snapshots)
    rate = "" if pages_per_s is None else f", {pages_per_s:.1f} pages/s"
    return (f"fetch round {round_no}: {done}/{n_tasks} tasks done, {pages:,} pages ({followed:,} followed "
            f"in-round){rate}, {hosts - busy:,}/{hosts:,} hosts finished")


class LiveLine:
    """Around the fetch's write: a thread printing :func:`line` every ``every_s`` (0 or no directory:
    nothing at all)."""

    def __init__(self, directory: str | None, round_no: int, n_tasks: int, every_s: float, out=None, store=None):
        self.directory, self.round_no, self.n_tasks, self.every_s = directory, round_no, n_tasks, every_s
        self.store = store
        self.out = out or sys.stderr
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples: deque = deque(maxlen=RATE_SAMPLES)
        self._last_plain = 0.0
        self.last = ""

    def __enter__(self) -> LiveLine:
        if self.every_s > 0 and self.directory:
            self._thread = threading.Thread(target=self._run, name="deltacrawl-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=10)
        self.tick(final=True)
        try:
            fs, base = filesystem(self.directory, self.store)
            fs.delete_dir(base)
            parent = base.rsplit("/", 1)[0]
            if not fs.get_file_info(pafs.FileSelector(parent, allow_not_found=True)):
                fs.delete_dir(parent)
        except Exception:  # noqa: BLE001 - advisory files; a leftover is harmless
            pass

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.tick()

    def tick(self, *, final: bool = False) -> str:
        """Read the snapshots, print the line if it is time; returns it."""
        snaps = read(self.directory, self.store)
        now = time.monotonic()
        self._samples.append((now, sum(s["pages"] for s in snaps)))
        (t0, p0), (t1, p1) = self._samples[0], self._samples[-1]
        text = line(self.round_no, self.n_tasks, snaps, (p1 - p0) / (t1 - t0) if t1 > t0 else None)
        if self.tty:
            self.out.write("\r\033[K" + text + ("\n" if final else ""))
        elif final or now - self._last_plain >= PLAIN_EVERY_S:
            self.out.write(text + "\n")
            self._last_plain = now
        self.out.flush()
        self.last = text
        return text
