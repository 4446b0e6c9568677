"""The fetch task's loop helpers (crawl_udfs.event_loop): older objects out of the task's collections."""

import gc

import pytest

from crawl_udfs.event_loop import older_objects_frozen


def _tracked(obj) -> bool:
    """In a generation the collector walks (frozen objects are in none)."""
    return any(o is obj for o in gc.get_objects())


def test_older_objects_are_out_of_the_tasks_collections_and_given_back():
    gc.unfreeze()
    held = [[] for _ in range(3)]  # lists are tracked
    assert _tracked(held) and gc.get_freeze_count() == 0
    with older_objects_frozen():
        assert not _tracked(held) and gc.get_freeze_count() > 0
        made = [[]]
        assert _tracked(made)  # the task's own objects are collected as usual
    assert _tracked(held) and gc.get_freeze_count() == 0


def test_frozen_objects_are_given_back_when_the_task_fails():
    with pytest.raises(RuntimeError):
        with older_objects_frozen():
            raise RuntimeError("task bug")
    assert gc.get_freeze_count() == 0
