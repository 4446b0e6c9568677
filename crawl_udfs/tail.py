"""When a fetch task ends its round early: the judge of a thin tail.

Guarantees:
- **Never in the task's first seconds.** No cut before ``fetch.tail_check_after_s``
  since the task started (a task starts with robots.txt fetches and first requests;
  with in-round link following its hosts keep getting work later on).
- **Only a tail that stays thin.** The tail is *thin* at a sample when
  (a) fewer than ``fetch.tail_busy_host_share`` x the most hosts that had work at any
  earlier sample still have work (queued, held behind robots.txt or in flight), or
  (b) the pages/s of the last ``fetch.tail_rate_window_s`` is under
  ``fetch.tail_rate_share`` x the highest such rate seen in the task.
  The judge says :meth:`TailJudge.cut` only once the tail has been thin at every
  sample for ``fetch.tail_patience_s``. A share of 0 turns its test off; both 0 turn
  the cut off (the task then runs to ``fetch.task_budget_s`` as before).
- Pure: the time is passed in (``now``), no I/O, no clock of its own; O(1) amortized
  per page ended and per sample.

What the cut means is the drive loop's (``crawl_udfs.partition``): no request is started
after it, requests in flight finish normally, and the URLs still queued come back
``not_attempted``, untouched, for the next round.

The rule after Nutch's ``fetcher.throughput.threshold.pages`` / ``.retries`` /
``.check.after`` (a fetcher whose pages/s stays under a threshold for some checks ends
early); here the threshold is a share of the task's own peak, not an absolute rate, so
one setting fits a task of ten hosts and one of a thousand, and the share of hosts still
at work is a second, faster signal of the same tail.
"""

from __future__ import annotations

from collections import deque
from typing import Any

#: ``error_class`` of a URL the cut left queued (outcome not_attempted); one the budget left: "task_budget".
TAIL_CUT = "tail_cut"
#: Seconds between two samples of the task's state (hosts with work, pages/s): Nutch
#: samples its fetcher once a second too. Counting the hosts with work is O(hosts).
SAMPLE_S = 1.0


class TailJudge:
    """Decides, from samples of one task's progress, when what is left is a thin tail."""

    def __init__(self, fetch: Any, *, start: float):
        self.check_after_s = float(fetch.tail_check_after_s)
        self.busy_share = float(fetch.tail_busy_host_share)
        self.rate_share = float(fetch.tail_rate_share)
        self.window_s = float(fetch.tail_rate_window_s)
        self.patience_s = float(fetch.tail_patience_s)
        self.start = start
        self.enabled = self.busy_share > 0 or self.rate_share > 0
        self._ends: deque[float] = deque()   # when each page of the last window ended
        self._peak_busy = 0
        self._peak_rate = 0.0
        self._thin_since: float | None = None
        self._next_sample = start
        self.cut_at: float | None = None     # when the judge said cut (None: not yet)
        self.reason: str | None = None       # "hosts" or "rate": the test that held at the cut

    def page_ended(self, now: float) -> None:
        """One page request ended (any outcome with a request sent)."""
        self._ends.append(now)

    def next_sample_at(self) -> float | None:
        """When the drive loop should call :meth:`sample` next (None: never again)."""
        return self._next_sample if self.enabled and self.cut_at is None else None

    def sample(self, now: float, busy_hosts: int) -> bool:
        """Take one sample (``busy_hosts``: hosts with work now); True once the round should end."""
        if self.cut_at is not None:
            return True
        if not self.enabled or now < self._next_sample:
            return False
        self._next_sample = now + SAMPLE_S
        while self._ends and self._ends[0] <= now - self.window_s:
            self._ends.popleft()
        rate = len(self._ends) / self.window_s
        reason = None
        if self.busy_share > 0 and busy_hosts < self.busy_share * self._peak_busy:
            reason = "hosts"
        elif self.rate_share > 0 and rate < self.rate_share * self._peak_rate:
            reason = "rate"
        self._peak_busy = max(self._peak_busy, busy_hosts)
        if now - self.start >= self.window_s:  # a full window behind it: the rate is a rate
            self._peak_rate = max(self._peak_rate, rate)
        if reason is None:
            self._thin_since = None
            return False
        if self._thin_since is None:
            self._thin_since = now
        if now - self._thin_since >= self.patience_s and now - self.start >= self.check_after_s:
            self.cut_at, self.reason = now, reason
            return True
        return False

    def cut(self) -> bool:
        return self.cut_at is not None
