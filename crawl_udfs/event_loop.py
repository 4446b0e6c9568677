"""The fetch task's event loop: asyncio's selector loop with its polls timed.

Guarantees: :func:`new_event_loop` returns a :class:`PolledEventLoop`, which
behaves as asyncio's default selector loop and also records, for the latest
poll, when it was called and returned (loop time, ``time.monotonic``). From
that, :meth:`Poll.own_lag_s` bounds how much of a measured response time may be
the task's own stall (callbacks, a garbage collection) rather than the server:
the fetcher reports it as ``FetchResponse.t_own_lag_ms`` and the fetch task
does not learn a delay from such a time. :func:`quiet_gc` makes the task's full
garbage collections short and rare (less CPU per page, shorter stalls).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import selectors
import time
from dataclasses import dataclass
from typing import Any, Iterator


@dataclass(frozen=True, slots=True)
class Poll:
    """One poll of the event loop's selector, in loop time."""

    previous_return: float  # when the poll before this one returned
    called_at: float        # when this one was called
    returned_at: float      # when it returned (the bytes it saw had come by then)

    def own_lag_s(self, sent_at: float, seen_at: float) -> float:
        """How much later than they came the loop may have seen bytes that this poll saw.

        Bytes that came while the loop was polling were seen at once. Bytes that came
        while it ran callbacks (from the poll before, or from the request's write if
        later, to this poll's call) waited unseen; after this poll, callbacks ahead of
        ours ran until ``seen_at``.
        """
        return max(0.0, self.called_at - max(self.previous_return, sent_at)) + max(0.0, seen_at - self.returned_at)


class _TimedSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The platform's default selector, noting when each poll was called and returned."""

    def __init__(self) -> None:
        super().__init__()
        self._called_at = self._returned_at = self._previous_return = time.monotonic()

    def select(self, timeout: float | None = None) -> Any:
        self._called_at = time.monotonic()  # the loop's clock: BaseEventLoop.time() is time.monotonic()
        try:
            return super().select(timeout)
        finally:
            self._previous_return, self._returned_at = self._returned_at, time.monotonic()

    def last(self) -> Poll:
        return Poll(self._previous_return, self._called_at, self._returned_at)


class PolledEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector event loop whose polls are timed (``polls``), so that a response time
    can tell the server's time from the loop's own stalls (see ``FetchResponse.t_own_lag_ms``)."""

    def __init__(self) -> None:
        self.polls = _TimedSelector()
        super().__init__(self.polls)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The event loop a fetch task runs on: :class:`PolledEventLoop`."""
    return PolledEventLoop()


#: While a task runs, a full collection waits for this many collections of the middle generation
#: (CPython's default: 10). Why: the task's results grow all along (an Outlink per link) and every full
#: collection walks all of them: measured on 3,600 realistic pages in one task, GC 0.32-0.38 ms a page
#: with 10, 0.16 with 100 (nine full collections against one). CPython still runs one only when the
#: oldest generation has grown by a quarter; cyclic garbage that reached it waits longer (~700k net
#: allocations of tracked objects instead of ~70k), plain garbage is freed by reference counting as always.
TASK_FULL_COLLECTION_EVERY = 100


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """The task's garbage collector: what the process held before the task (modules, the fetch
    list) frozen out of its collections (``gc.freeze``), and full collections rarer
    (:data:`TASK_FULL_COLLECTION_EVERY`); both given back after (``gc.unfreeze``, the thresholds).

    Why the freeze: a full collection walks every tracked object. In a fresh Python worker
    ~150-250k of them are imports, never garbage: measured 0.69 ms of GC a realistic page in a
    process holding 260k objects, 0.19 with the freeze (bench/RESULTS.md, session 18). Cycles that
    were garbage before the task wait until after it to be collected.
    """
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(thresholds[0], thresholds[1], max(thresholds[2], TASK_FULL_COLLECTION_EVERY))
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
