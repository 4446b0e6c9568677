"""The due horizon of a new round (jobs/due.py): pure, no Spark."""

from __future__ import annotations

import datetime as dt

from crawl_udfs import config
from jobs.due import due_horizon

NOW = dt.datetime(2026, 1, 1, 12, 0, 0)


def conf(share: float):
    return config.load(overrides=[f"generate.due_ahead_share={share}"])


def prev(generated_s: float, updated_s: float, generate_s: float | None = 5.0, *, iso: bool = False) -> dict:
    at = {"generated_at": NOW + dt.timedelta(seconds=generated_s), "updated_at": NOW + dt.timedelta(seconds=updated_s)}
    if iso:  # the ledger's JSON form
        at = {k: v.isoformat() for k, v in at.items()}
    return {"round": 1, "state": "updated", **at, "seconds": {"generate": generate_s} if generate_s else {}}


def test_the_horizon_is_a_share_of_the_previous_cycle_ahead_of_now():
    assert due_horizon(conf(0.5), NOW, prev(-40, -5)) == NOW + dt.timedelta(seconds=20)  # (35 + 5) / 2
    assert due_horizon(conf(1.0), NOW, prev(-40, -5, iso=True)) == NOW + dt.timedelta(seconds=40)
    assert due_horizon(conf(0.5), NOW, prev(-40, -5, generate_s=None)) == NOW + dt.timedelta(seconds=17.5)


def test_no_horizon_without_a_share_or_a_finished_previous_round():
    assert due_horizon(conf(0.0), NOW, prev(-40, -5)) == NOW
    assert due_horizon(conf(0.5), NOW, None) == NOW                     # the first round
    assert due_horizon(conf(0.5), NOW, {**prev(-40, -5), "updated_at": None}) == NOW  # pipelined: not updated yet


def test_a_share_outside_0_to_1_is_a_config_error():
    import pytest
    from crawl_udfs.config import ConfigError
    with pytest.raises(ConfigError):
        conf(1.5)
