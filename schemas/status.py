"""The crawl DB status enum: one line of meaning per state.

Stored as a string in ``crawldb.status`` (readable in SQL). Only ``update``
moves a URL between states; the state-transition table is in the docstring
of ``jobs/update.py``.

There is no "filtered" state: a URL the admission rules reject
(``crawl_udfs/admission.py``) is counted and never stored. Storing it would
grow the crawl DB by exactly the URLs the rules keep out (a calendar trap has
no end of distinct URLs), and it need not be remembered to stay out: the
verdict is a function of the URL and where it was found, recomputed wherever
it turns up again.

Nor is there a "skipped" state for a URL matching one of its host's learnt duplicate URL patterns
(``hosts.dup_patterns``, ``jobs/pattern_transforms.py``): its row keeps its status (unfetched, or a
duplicate's), generate leaves it out while the pattern holds, and ``status --hosts`` shows the
pattern and its evidence. The verdict is a function of the URL and the host's current patterns, so
a pattern that stops holding lets its URLs through again with nothing to undo.
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    UNFETCHED = "unfetched"            # known (injected or discovered), never fetched; due at next_fetch_time
    FETCHED = "fetched"                # last fetch returned 2xx and the copy is stored in WARC
    NOT_MODIFIED = "not_modified"      # last fetch was a 304 to a conditional GET; stored copy still current
    REDIRECT_TEMP = "redirect_temp"    # last fetch was 302/303/307; target inserted, URL re-checked later
    REDIRECT_PERM = "redirect_perm"    # last fetch was 301/308; target inserted, URL re-checked rarely
    GONE = "gone"                      # 404/410; re-checked at growing intervals (schedule.gone_backoff)
    RETIRED = "retired"                # 404/410 on schedule.gone_checks checks in a row; never generated again
    ROBOTS_DENIED = "robots_denied"    # robots.txt disallows it for our agent; re-checked when robots is
    DUPLICATE = "duplicate"            # a copy (same digest, or near) of dup_of, the original (jobs/originals.py)
    ERROR_RETRY = "error_retry"        # transient failure (timeout, 5xx, 429, robots unavailable); retried with back-off
    ERROR_FINAL = "error_final"        # failed max retries times, or a permanent error (4xx other than 404/410, bad redirect)
    BUDGET_EXHAUSTED = "budget_exhausted"  # the host's crawl budget ran out before this URL was fetched


#: Statuses a URL may be generated from (when due).
ELIGIBLE = (Status.UNFETCHED, Status.FETCHED, Status.NOT_MODIFIED, Status.REDIRECT_TEMP,
            Status.REDIRECT_PERM, Status.GONE, Status.ROBOTS_DENIED, Status.DUPLICATE, Status.ERROR_RETRY)

#: Statuses that count as a stored page (fetched at least once with content).
STORED = (Status.FETCHED, Status.NOT_MODIFIED, Status.DUPLICATE)
