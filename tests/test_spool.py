"""jobs/spool.py: a fetch task's spool goes when the task ends; one whose owner was killed goes at the next
task's start; a live owner's, another pid space's and a name not ours stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from jobs import spool


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _spool_of(root, pid: int, tag: str | None = None) -> str:
    path = root / f"{spool.PREFIX}r1-p0-a0-{tag or spool.space_tag()}-{pid}-abc_12"
    path.mkdir()
    (path / "x.warc.gz").write_bytes(b"bytes of a killed task")
    return path.name


@pytest.fixture
def tagged():
    if spool.space_tag() is None:
        pytest.skip("no pid space here (/proc unreadable): spools are never swept")


def test_a_spool_goes_when_its_task_ends_however_it_ends(tmp_path):
    with spool.task_spool("r1-p0-a0", str(tmp_path)) as d:
        assert os.path.isdir(d) and os.path.basename(d).startswith(f"{spool.PREFIX}r1-p0-a0-")
    assert os.listdir(tmp_path) == []
    with pytest.raises(RuntimeError):
        with spool.task_spool("r1-p0-a0", str(tmp_path)) as d:
            raise RuntimeError("the fetch failed")
    assert os.listdir(tmp_path) == []


def test_a_killed_owners_spool_goes_at_the_next_tasks_start(tagged, tmp_path):
    dead = _spool_of(tmp_path, _dead_pid())
    live = _spool_of(tmp_path, os.getpid())
    elsewhere = _spool_of(tmp_path, _dead_pid(), tag="0" * 12)  # another pid space: its pids are not ours
    (tmp_path / f"{spool.PREFIX}r1-p0-a0-q7x2").mkdir()  # an old-style name without an owner
    with spool.task_spool("r2-p0-a0", str(tmp_path)) as d:
        left = sorted(os.listdir(tmp_path))
    assert dead not in left
    assert {live, elsewhere, f"{spool.PREFIX}r1-p0-a0-q7x2", os.path.basename(d)} == set(left)


def test_a_spool_of_a_worker_killed_inside_it_is_swept(tagged, tmp_path):
    """A real worker SIGKILLed inside its spool (``finally`` never runs), then the next task's sweep."""
    code = ("import sys, time; from jobs import spool\n"
            "with spool.task_spool('r1-p0-a0', sys.argv[1]) as d:\n"
            "    print(d, flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(spool.__file__))))
    killed = p.stdout.readline().strip()
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert os.path.isdir(killed), "the killed worker's spool should have outlived it"
    assert spool.sweep(str(tmp_path)) == [killed]
    assert os.listdir(tmp_path) == []
