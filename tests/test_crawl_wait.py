"""``crawl --wait``: what the crawl loop does when nothing is due (``jobs.rounds._idle_wait``)."""

from __future__ import annotations

import io
import time

import pytest

from jobs import generate, rounds


@pytest.mark.parametrize("left, due_in, nap, said", [
    (0.0, 5.0, None, "nothing is due: stopping"),                      # no --wait (or its idle time spent)
    (60.0, None, None, "no URL will fall due: stopping"),              # nothing eligible anywhere
    (60.0, 120.0, None, "falls due in 120 s, beyond the wait: stopping"),
    (60.0, 20.0, 20.5, "falls due in 20 s): waiting 20 s"),           # just past its due time
    (60.0, -3.0, rounds.POLL_S + 0.5, "no list holds): waiting 10 s"),                 # due, but no list holds it: poll
    (5.0, -3.0, None, "no list holds, beyond the wait: stopping"),                    # ... within the wait only
])
def test_nothing_due_waits_for_the_next_due_url_within_the_wait(monkeypatch, left, due_in, nap, said):
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)
    monkeypatch.setattr(generate, "next_due_epoch", lambda spark, conf: None if due_in is None else now + due_in)
    out = io.StringIO()
    got = rounds._idle_wait(None, None, left, out)
    assert (got if got is None else round(got, 6)) == nap
    assert said in out.getvalue()
