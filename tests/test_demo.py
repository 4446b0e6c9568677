"""bin/demo.py fails (exit 1) when the server-side check finds a violation; no crawl is run here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.testweb.analysis import Violations

_spec = importlib.util.spec_from_file_location("demo", Path(__file__).resolve().parents[1] / "bin" / "demo.py")
demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo)


@pytest.mark.parametrize("found, want", [
    ({}, 0),
    ({"too_close": [{"host": "a.test"}]}, 1),
    ({"overlapping": [{"host": "a.test"}]}, 1),
    ({"disallowed": [{"host": "a.test"}]}, 1),
    ({"retry_after": [{"host": "a.test"}]}, 1),
    ({"bait": [{"host": "a.test"}]}, 1),
    ({"max_in_flight_by_addr": {"127.10.0.1": 2}}, 0),   # at the cap
    ({"max_in_flight_by_addr": {"127.10.0.1": 3}}, 1),   # over it
])
def test_demo_problems(found, want):
    assert len(demo.problems(Violations(host_delay_s=1.0, max_in_flight_per_addr=2, **found))) == want


def test_demo_exits_non_zero_on_a_violation(monkeypatch, tmp_path):
    """main() itself: the commands replaced by no-ops, the test web's log by one with a violation."""
    bad = Violations(host_delay_s=1.0, max_in_flight_per_addr=2, too_close=[{"host": "a.test", "path": "/", "start": 0.0}])

    class FakeWeb:
        hosts_file, allow_cidrs = str(tmp_path / "hosts"), ("127.10.0.0/16",)

        def __init__(self, *a, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def seeds(self):
            return ["http://a.test/"]

        def violations(self, host_delay_s, max_in_flight_per_addr):
            return bad

    monkeypatch.setattr(demo, "DATA", tmp_path / "demo-data")
    monkeypatch.setattr(demo, "TestWeb", FakeWeb)
    monkeypatch.setattr(demo, "run", lambda *args, **kw: None)
    assert demo.main() == 1
    bad.too_close.clear()
    assert demo.main() == 0
