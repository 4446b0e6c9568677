"""The fetch task's garbage collector (crawl_udfs.event_loop.quiet_gc): older objects out of its collections,
full collections rarer, both given back."""

import gc

import pytest

from crawl_udfs.event_loop import TASK_FULL_COLLECTION_EVERY, quiet_gc


def _tracked(obj) -> bool:
    """In a generation the collector walks (frozen objects are in none)."""
    return any(o is obj for o in gc.get_objects())


def test_older_objects_are_out_of_the_tasks_collections_and_given_back():
    gc.unfreeze()
    held = [[] for _ in range(3)]  # lists are tracked
    assert _tracked(held) and gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    with quiet_gc():
        assert not _tracked(held) and gc.get_freeze_count() > 0
        made = [[]]
        assert _tracked(made)  # the task's own objects are collected as usual
        assert gc.get_threshold() == (*thresholds[:2], max(thresholds[2], TASK_FULL_COLLECTION_EVERY))
    assert _tracked(held) and gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds


def test_frozen_objects_are_given_back_when_the_task_fails():
    with pytest.raises(RuntimeError):
        with quiet_gc():
            raise RuntimeError("task bug")
    assert gc.get_freeze_count() == 0 and gc.get_threshold()[2] < TASK_FULL_COLLECTION_EVERY
