"""A fetch task's spool: the local directory its WARC files are written in before they are staged.

A task removes its spool when it ends, however it ends (:func:`task_spool`'s ``finally``). A worker
killed outright (SIGKILL, the kernel's OOM killer, an executor lost with its Python workers) cannot, and
its spool, a partition's WARC bytes, would stay in the temp dir for good. So a spool's name carries its
owner's pid and a tag of the owner's pid space (:func:`jobs.lease.pid_space`), and each new spool first
removes those whose owner, in this pid space, is gone (:func:`sweep`). A spool whose owner is alive, or
in another pid space (another container sharing the temp dir), or of a name not made here, is left.
A pid reused since by a live process keeps a dead owner's spool until that process ends: a leak for a
while, never a removal of live files.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from typing import Iterator

from jobs.lease import alive, pid_space

PREFIX = "deltacrawl-fetch-"
# ``{PREFIX}{label}-{space tag}-{pid}-{mkdtemp's suffix}``; mkdtemp's suffix has no "-".
_NAME = re.compile(re.escape(PREFIX) + r".*-(?P<tag>[0-9a-f]{12})-(?P<pid>\d+)-[a-z0-9_]+")


def space_tag() -> str | None:
    """This process's pid space, hashed to 12 hex digits for a file name; None where it is unknown."""
    space = pid_space()
    return hashlib.sha256(space.encode()).hexdigest()[:12] if space else None


def sweep(root: str) -> list[str]:
    """Remove the spools under ``root`` whose owners, in this pid space, are no longer alive; their paths."""
    tag = space_tag()
    if tag is None:
        return []
    removed = []
    for name in os.listdir(root):
        m = _NAME.fullmatch(name)
        if m and m["tag"] == tag and not alive(int(m["pid"])):
            path = os.path.join(root, name)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@contextmanager
def task_spool(label: str, root: str | None = None) -> Iterator[str]:
    """A fresh spool directory under ``root`` (the temp dir by default) named after ``label`` and this
    process, removed on exit; the dead owners' spools are swept first."""
    root = root or tempfile.gettempdir()
    sweep(root)
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{label}-{space_tag() or 'unknown'}-{os.getpid()}-", dir=root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
