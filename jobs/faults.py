"""Fault injection for the crash tests: die at a named point, armed by ``DELTACRAWL_FAULT``.

    DELTACRAWL_FAULT=update.after_fetch_log deltacrawl crawl --rounds 3   # dies there, status -9

``DELTACRAWL_FAULT=point[:seconds]``. Reaching an armed point kills the process
at once, or ``seconds`` later from a timer thread (so the kill lands in the
middle of whatever comes next). Guarantees:

- **Zero cost unarmed**: every hook is one ``is None`` test of a value read
  once at import; nothing else runs, no thread is started.
- **Driver points** (:data:`DRIVER_POINTS`) SIGKILL the driver process itself:
  no ``finally``, no ``atexit``, no Spark shutdown hook in Python runs, as
  after ``kill -9`` or an OOM kill. The JVM then exits on its own (PySpark's
  gateway exits when the driver's pipe closes).
- **Task points** (:data:`TASK_POINTS`) run inside a Spark task's Python
  worker, and fire only on attempt 0, so Spark's retry succeeds:
  ``fetch.task`` ``os._exit``\\ s the worker (Spark sees a crashed Python
  worker and retries the task, given a master that allows task retries, e.g.
  ``local[2,4]``); ``fetch.task_kills_driver`` SIGKILLs the driver from
  inside a running fetch task (the driver's pid travels in
  ``DELTACRAWL_DRIVER_PID``, set by :func:`note_driver` when armed), which is
  "kill the driver during fetch" without guessing timings. Without
  ``seconds`` a task point fires after the task's fetch, before its output;
  with ``seconds`` it fires that long into the fetch unless the fetch ended
  first (the call after the fetch disarms it: Python workers are reused).

Executors inherit the variable from the driver's environment in local mode
(the JVM and its Python workers are children of the driver).
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "DELTACRAWL_FAULT"
DRIVER_PID_ENV = "DELTACRAWL_DRIVER_PID"

#: Points in the driver, in the order a round reaches them.
DRIVER_POINTS = (
    "generate.after_write",          # fetch_list of round N written, ledger not yet "generated"
    "fetch.after_write",             # fetch_output of round N committed, WARC files still staged
    "update.after_fetch_log",        # fetch_log appended, links not; the MERGEs beside it done or not
    "update.after_links",            # links appended too, ledger not yet "updated"
)
#: Points inside a fetch task's Python worker.
TASK_POINTS = ("fetch.task", "fetch.task_kills_driver")


def parse(spec: str | None) -> tuple[str, float | None] | None:
    """``"point[:seconds]"`` -> (point, seconds or None); None when unset. Unknown points raise."""
    if not spec:
        return None
    name, _, arg = spec.strip().partition(":")
    if name not in DRIVER_POINTS + TASK_POINTS:
        raise ValueError(f"{ENV}={spec!r}: unknown fault point {name!r}; known: "
                         f"{', '.join(DRIVER_POINTS + TASK_POINTS)}")
    return name, (float(arg) if arg else None)


_ARMED = parse(os.environ.get(ENV))
_task_timer: threading.Timer | None = None


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_driver() -> None:
    os.kill(int(os.environ[DRIVER_PID_ENV]), signal.SIGKILL)


def _exit_worker() -> None:
    os._exit(17)


def note_driver() -> None:
    """In the driver, before Spark starts: let task points find the driver (only when armed)."""
    if _ARMED is not None:
        os.environ[DRIVER_PID_ENV] = str(os.getpid())


def point(name: str) -> None:
    """A driver point: SIGKILL this process now, or ``seconds`` from now, when ``name`` is armed."""
    if _ARMED is None or _ARMED[0] != name:
        return
    seconds = _ARMED[1]
    if seconds is None:
        _kill_self()
    t = threading.Timer(seconds, _kill_self)
    t.daemon = True
    t.start()


def task_point(attempt: int, *, done: bool = False) -> None:
    """The fetch task's point (``fetch.task`` or ``fetch.task_kills_driver``), called by the
    task before its fetch and again (``done=True``) after it has staged its WARC files.

    Armed with seconds: the first call starts the timer, the second disarms it. Armed
    without: the second call fires. Only task attempt 0 ever dies.
    """
    global _task_timer
    if _ARMED is None or _ARMED[0] not in TASK_POINTS or attempt != 0:
        return
    action = _exit_worker if _ARMED[0] == "fetch.task" else _kill_driver
    seconds = _ARMED[1]
    if seconds is None:
        if done:
            action()
    elif done:
        if _task_timer is not None:
            _task_timer.cancel()
            _task_timer = None
    else:
        _task_timer = threading.Timer(seconds, action)
        _task_timer.daemon = True
        _task_timer.start()
