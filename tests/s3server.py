"""A real S3 API server on loopback for the object-storage tests: moto's standalone server.

Why moto: it is on PyPI (the one registry of Python packages this project reaches; MinIO and
Ceph ship as Go / C++ server binaries outside it), it speaks S3's REST API over HTTP like AWS
(SigV4, path-style addressing, multipart uploads, ranged GETs, conditional writes), and its server
starts in about a second in a process of its own, with state in memory: a bucket per test costs
nothing. What it does not model is S3's consistency or latency; the tests here are about what the
crawler writes and where, not about timing.

It runs from its own venv (``tests/moto-requirements.txt``, installed ``--no-deps``, built once per
version of that file under ``~/.cache/deltacrawl``: the reasons are in that file), bound to
127.0.0.1 on a free port, in its own process group, stopped by the fixture that started it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.net import free_loopback_port
from tests.summary import note

REQUIREMENTS = Path(__file__).with_name("moto-requirements.txt")
#: The environment variables the tests' overlays name for the credentials (storage.s3_*_env): not
#: AWS's defaults, so the keys are shown to travel through the configuration's names.
KEY_ENV, SECRET_ENV = "DELTACRAWL_TEST_S3_KEY", "DELTACRAWL_TEST_S3_SECRET"
REGION = "us-east-1"


def _run(cmd: list, what: str, **kw) -> None:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        pytest.fail(f"{what} failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n"
                    f"{(proc.stdout + proc.stderr)[-4000:]}", pytrace=False)


def moto_bin() -> Path:
    """The bin directory of moto's venv, built from moto-requirements.txt once per version of that file
    (a lock keeps two test runs from building it at once; a stamp written last marks it complete)."""
    wanted = REQUIREMENTS.read_text()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deltacrawl"
    venv = cache / f"venv-moto-{hashlib.sha256(wanted.encode()).hexdigest()[:12]}"
    stamp = venv / "installed-requirements.txt"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text() == wanted):
            t0 = time.monotonic()
            _run([sys.executable, "-m", "venv", "--clear", venv], "creating moto's venv", timeout=300)
            pip = [venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check"]
            _run(pip + ["install", "--no-deps", "-r", REQUIREMENTS], "installing moto", timeout=900)
            _run(pip + ["check"], "pip check in moto's venv (a dependency missing from moto-requirements.txt?)",
                 timeout=120)
            stamp.write_text(wanted)
            note(f"s3: moto's venv installed in {time.monotonic() - t0:.0f} s ({venv})")
    return venv / "bin"


class S3Server:
    """``moto_server`` on 127.0.0.1:<free port> while the ``with`` block runs."""

    def __init__(self, log: Path):
        self.log, self.port, self.proc = log, free_loopback_port(), None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "S3Server":
        bin_dir = moto_bin()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([str(bin_dir / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)],
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).read()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"moto_server did not start: {self.log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    # -- clients ---------------------------------------------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        """The credentials, under the names the overlays give (moto takes any key)."""
        return {KEY_ENV: "deltacrawl-test-key", SECRET_ENV: "deltacrawl-test-secret"}

    def filesystem(self):
        """pyarrow's S3 filesystem on this server (the tests' own reader, independent of the crawler's)."""
        from pyarrow import fs as pafs
        return pafs.S3FileSystem(access_key=self.env[KEY_ENV], secret_key=self.env[SECRET_ENV], region=REGION,
                                 endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
                                 allow_bucket_creation=True, allow_bucket_deletion=True)

    def bucket(self, hint: str) -> str:
        """A new, empty bucket named after ``hint`` (a test's name)."""
        name = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-")[:40] + f"-{time.monotonic_ns() % 10**9}"
        self.filesystem().create_dir(name)
        return name

    def storage_toml(self, bucket: str, prefix: str = "crawl") -> str:
        """The ``[storage]`` table of an overlay whose root is ``s3a://bucket/prefix`` on this server."""
        return (f'[storage]\nroot = "s3a://{bucket}/{prefix}"\ns3_endpoint = "{self.endpoint}"\n'
                f's3_path_style = true\ns3_region = "{REGION}"\ns3_access_key_env = "{KEY_ENV}"\n'
                f's3_secret_key_env = "{SECRET_ENV}"\ns3_single_driver = true\n')

    def objects(self, prefix: str) -> dict[str, int]:
        """``{key under prefix: size}`` of every object below ``bucket/prefix`` (directory markers left out)."""
        from pyarrow import fs as pafs
        fs = self.filesystem()
        sel = pafs.FileSelector(prefix, recursive=True, allow_not_found=True)
        return {i.path[len(prefix):].lstrip("/"): i.size for i in fs.get_file_info(sel)
                if i.type == pafs.FileType.File}
