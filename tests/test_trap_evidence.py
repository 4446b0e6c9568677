"""The trap rule's evidence test (crawl_udfs/trap_evidence.py): pure, a table of streaks.

A strike streak parks its host at once when the upper Wilson bound of its new-content share is under
trap.max_new_share: hundreds of first copies with ~no new content are proof, five are not.
"""

from __future__ import annotations

import math

import pytest

from crawl_udfs import config
from crawl_udfs.trap_evidence import new_share_bound, proves_trap, z_score

CONF = config.defaults().trap
Z = z_score(CONF.park_confidence)
MOST = CONF.max_new_share


def test_the_defaults_the_table_assumes():
    assert (CONF.park_confidence, MOST) == (0.99, 0.1)
    assert Z == pytest.approx(2.3263, abs=1e-4)


# (name, new pages, first copies of the streak, parked at once with the defaults)
STREAKS = [
    ("five_pages_all_copies", 0, 5, False),          # the issue: a round of five pages is not enough
    ("ten_pages_all_copies", 0, 10, False),
    ("one_page", 0, 1, False),
    ("48_copies_just_short", 0, 48, False),           # bound 10.1 %
    ("49_copies_just_enough", 0, 49, True),           # bound 9.95 %
    ("300_pages_2_new", 2, 300, True),                # the issue: hundreds of pages, almost nothing new
    ("400_pages_none_new", 0, 400, True),             # a whole per-round cap of 400 copies
    ("100_pages_3_new", 3, 100, True),                # bound 9.97 %
    ("100_pages_4_new", 4, 100, False),               # bound 11.4 %
    ("share_at_the_threshold", 100, 1000, False),     # 10 % observed: bound 12.4 %
    ("share_just_under_many_pages", 900, 10000, True),  # 9 % observed, 10k pages: bound 9.7 %
    ("share_just_under_few_pages", 9, 100, False),    # 9 % observed, 100 pages: bound 17.9 %
]


@pytest.mark.parametrize("name, new, pages, parks", STREAKS, ids=[s[0] for s in STREAKS])
def test_streak_evidence(name, new, pages, parks):
    bound = new_share_bound(new, pages, Z)
    assert new / pages <= bound < 1
    assert proves_trap(new, pages, MOST, Z) is parks, (name, bound)


def test_the_bound_of_no_new_page_is_z2_over_n_plus_z2():
    for n in (1, 5, 49, 300):
        assert new_share_bound(0, n, Z) == pytest.approx(Z * Z / (n + Z * Z))


def test_more_pages_same_share_prove_more():
    bounds = [new_share_bound(n // 50, n, Z) for n in (50, 100, 500, 5000)]  # 2 % observed each
    assert bounds == sorted(bounds, reverse=True) and bounds[-1] < 0.03 < 0.1 < bounds[0]


def test_confidence_one_half_is_the_observed_share():
    z = z_score(0.5)
    assert z == 0 and new_share_bound(1, 5, z) == pytest.approx(0.2)
    assert proves_trap(0, 5, MOST, z)                     # without doubt allowed, five copies would park
    assert not proves_trap(0, 5, MOST, z_score(0.999))


@pytest.mark.parametrize("confidence", [0.49, 1.0, 1.5])
def test_a_confidence_outside_half_to_one_is_refused(confidence):
    with pytest.raises(ValueError):
        z_score(confidence)


def test_sqrt_is_the_only_function_the_formula_calls():
    calls = []

    def sqrt(x):
        calls.append(x)
        return math.sqrt(x)
    assert new_share_bound(2, 300, Z, sqrt) == new_share_bound(2, 300, Z) and len(calls) == 1
