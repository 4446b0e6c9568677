"""Live pages: content that changes as Poisson processes at known rates (issue 15's freshness benchmark).

API. With ``Knobs(live_hosts=H, live_pages=P)`` the test web adds H hosts ``live-0.test`` …
``live-{H-1}.test`` (after every other host; 0 by default, so no other test sees them), each with a
static home page ``/`` listing its P live pages ``/live/0`` … ``/live/{P-1}``. Page k of the H × P has
a true change rate spread log-uniformly (stratified, then shuffled by the seed) over
``[live_rate_min, live_rate_max]`` per *nominal* second, or, with ``live_fast_share`` s > 0, in two classes (a
web of hubs that change often and articles that seldom do): round(s × H × P) pages at ``live_rate_max``, the
others at ``live_rate_min``, shuffled by the seed; ``live_time_scale`` real seconds make one
nominal second (the time compression), so the real rate is ``nominal / live_time_scale``. Its changes
are a Poisson process started at the server's start time ``epoch``, drawn from the seed, each change
time rounded up to the next whole epoch second (so ``Last-Modified`` is exact; two changes in one
second are one). Version v of a page (v = changes at or before t) has a new main text (150 words,
SimHash far from the others'), ``ETag`` of its body and ``Last-Modified`` of its last change (for
v = 0, one an exponential time at the page's rate before ``epoch``, as on a web that changed before
the server started: :meth:`LiveWeb.age`); a conditional GET it satisfies (If-None-Match wins over
If-Modified-Since, RFC 9110) gets 304. The server writes ``DIR/live.json`` (:meth:`LiveWeb.to_json`)
at start; ``LiveWeb.load(path)`` (or ``TestWeb.live``) rebuilds the same model in any process, and
answers at any instant: :meth:`~LiveWeb.rate`, :meth:`~LiveWeb.changes`, :meth:`~LiveWeb.version`,
:meth:`~LiveWeb.page`. The request log carries ``live_version`` for every live page served;
``tests.testweb.staleness`` judges a crawler's copies against this model.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import random
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path

from . import render
from .model import Knobs, Page
from .sites import prose

HOST_PREFIX = "live-"
PAGE_PREFIX = "/live/"
WORDS = 150  # main text of a version: a fresh draw, so versions are ~32 SimHash bits apart


def host_name(j: int) -> str:
    return f"{HOST_PREFIX}{j}.test"


def page_path(i: int) -> str:
    return f"{PAGE_PREFIX}{i}"


@dataclass
class _Process:
    """One page's change instants (epoch seconds, increasing, distinct), drawn lazily."""

    rate: float                       # real changes per second
    rng: random.Random
    clock: float                      # epoch + the sum of the gaps drawn so far
    times: list[int] = field(default_factory=list)

    def until(self, t: float) -> list[int]:
        while self.clock <= t + 1:
            self.clock += self.rng.expovariate(self.rate)
            second = math.floor(self.clock) + 1
            if not self.times or second > self.times[-1]:
                self.times.append(second)
        return self.times


class LiveWeb:
    """The live pages' truth: rates, change instants, versions and bodies (see the module docstring)."""

    def __init__(self, seed: int, hosts: int, pages: int, rate_min: float, rate_max: float, time_scale: float,
                 epoch: float, port: int = 0, fast_share: float = 0.0):
        if hosts < 0 or pages < 1 or not 0 < rate_min <= rate_max or time_scale <= 0 or not 0 <= fast_share <= 1:
            raise ValueError(f"bad live pages: hosts={hosts} pages={pages} rates={rate_min}..{rate_max} "
                             f"time_scale={time_scale} fast_share={fast_share}")
        self.seed, self.hosts, self.pages, self.port = seed, hosts, pages, port
        self.rate_min, self.rate_max, self.time_scale, self.epoch = rate_min, rate_max, time_scale, epoch
        self.fast_share = fast_share
        keys = [(host_name(j), page_path(i)) for j in range(hosts) for i in range(pages)]
        n = len(keys)
        if fast_share:
            fast = round(fast_share * n)
            strata = [rate_max] * fast + [rate_min] * (n - fast)
        else:
            strata = [rate_max * (rate_min / rate_max) ** ((k + 0.5) / n) for k in range(n)]
        random.Random(f"{seed}/live/rates").shuffle(strata)
        self._rates = {key: r / time_scale for key, r in zip(keys, strata)}
        self._procs: dict[tuple[str, str], _Process] = {}

    @classmethod
    def from_knobs(cls, seed: int, knobs: Knobs, epoch: float, port: int = 0) -> "LiveWeb":
        return cls(seed, knobs.live_hosts, knobs.live_pages, knobs.live_rate_min, knobs.live_rate_max,
                   knobs.live_time_scale, epoch, port, knobs.live_fast_share)

    # -- the truth
    def keys(self) -> list[tuple[str, str]]:
        """(host, path) of every live page, in host then page order."""
        return list(self._rates)

    def urls(self) -> list[str]:
        return [f"http://{h}:{self.port}{p}" for h, p in self._rates]

    def key(self, url_or_host: str, path: str | None = None) -> tuple[str, str]:
        """(host, path) of ``url`` (``http://live-0.test:port/live/3``) or of (host, path)."""
        if path is None:
            rest = url_or_host.split("://", 1)[-1]
            hostport, _, tail = rest.partition("/")
            return hostport.rsplit(":", 1)[0].lower(), "/" + tail
        return url_or_host.lower(), path

    def rate(self, *where: str) -> float:
        """The true change rate of a page, per real second."""
        return self._rates[self.key(*where)]

    def rates(self) -> dict[tuple[str, str], float]:
        return dict(self._rates)

    def changes(self, *where: str, until: float) -> list[int]:
        """The page's change instants (epoch seconds) after ``epoch`` and at or before ``until``."""
        k = self.key(*where)
        proc = self._procs.get(k)
        if proc is None:
            proc = self._procs[k] = _Process(self._rates[k], random.Random(f"{self.seed}/live/{k[0]}{k[1]}"),
                                             self.epoch)
        times = proc.until(until)
        return times[:bisect.bisect_right(times, until)]

    def version(self, *where: str, at: float) -> int:
        """The version served at ``at``: the number of changes at or before it."""
        return len(self.changes(*where, until=at))

    def last_modified(self, *where: str, at: float) -> int:
        """Epoch second of the version served at ``at``: its last change; for version 0 the change before
        ``epoch`` (:meth:`age`)."""
        times = self.changes(*where, until=at)
        return times[-1] if times else math.floor(self.epoch - self.age(*where))

    def age(self, *where: str) -> float:
        """Seconds between version 0's last change and ``epoch``: as on a web that was changing long before
        the server started (its process stationary), exponential at the page's rate (the backward recurrence
        time of a Poisson process), drawn from the seed apart from the changes after ``epoch``."""
        host, path = self.key(*where)
        return random.Random(f"{self.seed}/live/{host}{path}/age").expovariate(self._rates[(host, path)])

    # -- what the server sends
    def page(self, *where: str, version: int) -> Page:
        host, path = self.key(*where)
        rng = random.Random(f"{self.seed}/live/{host}{path}/v{version}")
        return Page(path, title=f"{host} {path}", text=prose(rng, WORDS), style="site")

    def body(self, *where: str, version: int) -> bytes:
        return render.html(self.page(*where, version=version))[0]

    def headers(self, *where: str, version: int, at: float) -> dict[str, str]:
        body = self.body(*where, version=version)
        return {"ETag": '"' + hashlib.sha1(body).hexdigest()[:20] + '"',
                "Last-Modified": formatdate(self.last_modified(*where, at=at), usegmt=True)}

    # -- a file any process can read
    def to_json(self) -> dict:
        return {"seed": self.seed, "hosts": self.hosts, "pages": self.pages, "rate_min": self.rate_min,
                "rate_max": self.rate_max, "time_scale": self.time_scale, "epoch": self.epoch, "port": self.port,
                "fast_share": self.fast_share, "rates": {f"{h}{p}": r for (h, p), r in self._rates.items()}}

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path | str) -> "LiveWeb":
        d = json.loads(Path(path).read_text())
        return cls(d["seed"], d["hosts"], d["pages"], d["rate_min"], d["rate_max"], d["time_scale"], d["epoch"],
                   d["port"], d.get("fast_share", 0.0))


def not_modified(etag: str, last_modified_s: int, if_none_match: str | None, if_modified_since_s: float | None) -> bool:
    """304 or not (RFC 9110, 13.2.2): If-None-Match, when sent, decides alone (a weak or strong match of
    ``etag``, or ``*``); else If-Modified-Since at or after the version's last change."""
    if if_none_match is not None:
        tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
        return "*" in tags or etag in tags
    return if_modified_since_s is not None and if_modified_since_s >= last_modified_s

