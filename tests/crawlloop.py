"""A tiny in-memory frontier around fetch_partition, for tests, benchmarks and the demo.

It plays the part that ``generate`` and ``update`` play on Spark, on the same rules:
seeds pass ``crawl_udfs.admission`` as inject admits them; the task admits what a
page names (``max_depth`` is ``scope.max_depth``); an outlink is followed by
``admission.followed`` (canonical and redirect targets too, as update follows them)
at ``admission.depth_of``, redirect targets one redirect hop further. Each pass picks
each host's next URLs (at most ``per_host``), calls :func:`fetch_partition`, and
carries every host's learnt state (robots cache, next-allowed time, failures) into
the next. It is not the crawler; it exercises it.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from pathlib import Path

from crawl_udfs.admission import Admission, depth_of, followed
from crawl_udfs.config import Config
from crawl_udfs.partition import fetch_partition
from crawl_udfs.rows import FetchItem, FetchResult, HostResult, HostState
from crawl_udfs.url_normalize import UrlNormalizer, fingerprint, host_of


@dataclass
class CrawlStats:
    passes: int = 0
    results: list[FetchResult] = field(default_factory=list)
    hosts: dict[str, HostResult] = field(default_factory=dict)
    elapsed_s: float = 0.0
    pass_elapsed_s: list[float] = field(default_factory=list)
    warc_dir: Path | None = None
    requests: int = 0                    # requests the crawler says it sent (pages + robots.txt)
    robots_requests: int = 0

    def outcomes(self) -> collections.Counter:
        return collections.Counter(r.outcome for r in self.results)

    def fetched_by_host(self) -> collections.Counter:
        return collections.Counter(r.host for r in self.results if r.fetch_time is not None)


def crawl(seeds: list[str], conf: Config, warc_dir: Path, *, passes: int = 3, per_host: int = 5,
          max_pages_per_host: int = 20, max_depth: int = 10, retried: bool = False) -> CrawlStats:
    conf = conf.with_overrides(f"scope.max_depth={int(max_depth)}")
    follow_nofollow = bool(conf.parse.follow_nofollow)
    seen: set[int] = set()
    frontier: dict[str, collections.deque] = collections.defaultdict(collections.deque)
    fetched_per_host: collections.Counter = collections.Counter()
    host_states: dict[str, HostState] = {}
    stats = CrawlStats(warc_dir=Path(warc_dir))

    def add(url: str, depth: int, hops: int = 0) -> None:
        fp = fingerprint(url)
        if fp in seen:
            return
        seen.add(fp)
        frontier[host_of(url)].append(FetchItem(url=url, url_fp=fp, host=host_of(url), depth=depth,
                                                redirect_hops=hops))

    normalizer, admission = UrlNormalizer(conf.url), Admission(conf)
    for s in seeds:
        if (n := normalizer.normalize(s)) is not None and admission.reason(n) is None:
            add(n, 0)
    t0 = time.time()
    for p in range(passes):
        batch: list[FetchItem] = []
        for host, q in frontier.items():
            room = min(per_host, max_pages_per_host - fetched_per_host[host])
            while q and room > 0:
                batch.append(q.popleft())
                room -= 1
        if not batch:
            break
        stats.passes += 1
        depth_of_fp = {i.url_fp: i.depth for i in batch}
        tp = time.time()
        out = fetch_partition(batch, conf, hosts=list(host_states.values()), warc_dir=str(warc_dir),
                              warc_name=lambda i, p=p: f"crawl-p{p:03d}-{i:05d}.warc.gz", retried=retried)
        for row in out:
            if isinstance(row, HostResult):
                stats.hosts[row.host] = row
                stats.requests += row.requests
                stats.robots_requests += row.robots_requests
                host_states[row.host] = HostState(
                    host=row.host, robots_status=row.robots_status, robots_body=row.robots_body,
                    robots_fetched_at=row.robots_fetched_at, robots_expires_at=row.robots_expires_at,
                    next_allowed_at=row.next_allowed_at, consecutive_failures=row.consecutive_failures, ip=row.ip)
                continue
            stats.results.append(row)
            if row.outcome in ("not_attempted", "deferred"):
                frontier[row.host].appendleft(FetchItem(url=row.url, url_fp=row.url_fp, host=row.host,
                                                        depth=depth_of_fp.get(row.url_fp, 0)))
                continue
            if row.fetch_time is not None:
                fetched_per_host[row.host] += 1
            depth = depth_of_fp.get(row.url_fp, 0)
            for link in row.outlinks:   # admitted by the task
                if followed(link.kind, link.nofollow, follow_nofollow=follow_nofollow):
                    add(link.url, depth_of(depth, link.kind),
                        row.redirect_hops + 1 if link.kind == "redirect" else 0)
        stats.pass_elapsed_s.append(time.time() - tp)
    stats.elapsed_s = time.time() - t0
    return stats
