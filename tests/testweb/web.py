"""``TestWeb``: start the test web in a subprocess, wait until it is ready, and hand tests its plan and log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterable

from .analysis import Violations, analyze, read_log
from .live import LiveWeb
from .model import Knobs
from .sites import CIDR, Plan, build_plan

REPO_ROOT = Path(__file__).resolve().parents[2]


class TestWeb:
    """The local test web as a context manager::

        with TestWeb(tmp_path, n_hosts=300, seed=7) as web:
            web.port, web.hosts_file, web.allow_cidrs, web.url("news-3.test", "/"), web.seeds(kinds=["site"])
            web.plan, web.log(), web.violations(host_delay_s=1.0, max_in_flight_per_addr=2)

    ``kinds`` (default: all of ``sites.KINDS``) selects the special hosts; ordinary
    sites fill up to ``n_hosts``. ``knobs`` overrides :class:`~tests.testweb.model.Knobs` fields.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | os.PathLike, n_hosts: int = 300, seed: int = 7, port: int | None = None,
                 robots_change_after_s: float | None = None, *, kinds: Iterable[str] | None = None,
                 robots_change_after_requests: int | None = None, knobs: dict | Knobs | None = None,
                 startup_timeout_s: float = 30.0):
        base = knobs if isinstance(knobs, Knobs) else Knobs(**(knobs or {}))
        self.knobs = replace(base, robots_change_after_s=robots_change_after_s if robots_change_after_s is not None
                             else base.robots_change_after_s,
                             robots_change_after_requests=robots_change_after_requests
                             if robots_change_after_requests is not None else base.robots_change_after_requests)
        self.dir = Path(directory)
        self.n_hosts, self.seed, self.requested_port = n_hosts, seed, port
        self.kinds = tuple(kinds) if kinds is not None else None
        self.startup_timeout_s = startup_timeout_s
        self.allow_cidrs = [CIDR]
        self.proc: subprocess.Popen | None = None
        self.port: int = 0
        self.hosts_file: Path | None = None
        self.log_path: Path | None = None
        self.plan: Plan | None = None
        self.live: LiveWeb | None = None  # the live pages' truth (knobs live_hosts > 0): tests/testweb/live.py
        build_plan(n_hosts, seed, 0, self.kinds, self.knobs)  # fail fast on bad arguments, before a subprocess

    def start(self) -> "TestWeb":
        self.dir.mkdir(parents=True, exist_ok=True)
        ready = self.dir / "ready.json"
        ready.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "tests.testweb", "serve", "--n-hosts", str(self.n_hosts), "--seed",
               str(self.seed), "--dir", str(self.dir), "--knobs", json.dumps(self.knobs.as_dict()),
               "--parent-pid", str(os.getpid())]
        if self.requested_port:
            cmd += ["--port", str(self.requested_port)]
        if self.kinds is not None:
            cmd += ["--kinds", ",".join(self.kinds)]  # "" selects no kind (live hosts alone)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        self._out = open(self.dir / "server.out", "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=REPO_ROOT)
        deadline = time.monotonic() + self.startup_timeout_s
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = (self.dir / "server.out").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"test web did not start (exit {self.proc.returncode}):\n{tail}")
            time.sleep(0.02)
        info = json.loads(ready.read_text())
        self.port, self.hosts_file, self.log_path = info["port"], Path(info["hosts_file"]), Path(info["log"])
        self.plan = build_plan(self.n_hosts, self.seed, self.port, self.kinds, self.knobs)
        self.live = LiveWeb.load(info["live"]) if info.get("live") else None
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if getattr(self, "_out", None):
            self._out.close()

    def __enter__(self) -> "TestWeb":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.port}{path}"

    def seeds(self, kinds: Iterable[str] | str | None = None) -> list[str]:
        """Home page URLs of every host, or of the hosts of ``kinds``."""
        kinds = (kinds,) if isinstance(kinds, str) else kinds
        return [h.url("/") for h in self.plan.hosts.values() if kinds is None or h.kind in kinds]

    def log(self) -> list[dict]:
        return read_log(self.log_path) if self.log_path and self.log_path.exists() else []

    def log_of(self, keep, n: int | None = None, wait_s: float = 5.0) -> list[dict]:
        """The log's lines ``keep`` accepts, waiting up to ``wait_s`` for ``n`` of them: the server writes a
        request's line after its response has gone, so a client can read the log before its last line."""
        deadline = time.time() + wait_s
        while True:
            lines = [r for r in self.log() if keep(r)]
            if n is None or len(lines) >= n or time.time() > deadline:
                return lines
            time.sleep(0.05)

    def violations(self, host_delay_s: float, max_in_flight_per_addr: int) -> Violations:
        """The log judged against the crawler's delay and per-IP cap (see :func:`analysis.analyze`)."""
        delays = {h.name: h.crawl_delay for h in self.plan.hosts.values() if h.crawl_delay}
        traps = {h.name for h in self.plan.by_kind("trap")}
        return analyze(self.log(), host_delay_s, delays, traps, max_in_flight_per_addr=max_in_flight_per_addr)
