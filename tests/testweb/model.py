"""Plain data of the test web's plan: links, pages, knobs, and the reference URL normaliser.

A :class:`Link` carries both what the HTML says (``href``) and what it must
resolve to (``url``), so tests check a crawler's link extraction and URL
normalisation without crawling. ``url`` is computed by :func:`normalize`:
scheme and host lower-cased, fragment dropped, ``;params`` and the query
parameters in :data:`STRIP_PARAMS` removed (tracking and session ids),
percent-escapes of unreserved characters decoded, other escapes upper-cased.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from urllib.parse import urlsplit, urlunsplit

HTML_BEHAVIOURS = ("html", "html-gzip", "html-br", "raw-ok", "many-links", "deep-html")
STRIP_PARAMS = ("utm_", "gclid", "fbclid", "sid", "jsessionid")  # utm_ is a prefix


@dataclass(frozen=True)
class Link:
    href: str             # the attribute value exactly as written (before HTML escaping)
    url: str | None       # normalised absolute target; None for mailto:, javascript:, tel:
    tag: str = "a"        # a | area | iframe | img | link (canonical)
    rel: str = ""         # "nofollow", "canonical", ""
    form: str = ""        # how href is spelled: root, relative, dot, dotdot, absolute, ...
    zone: str = "main"    # where the renderer puts it: nav | main | footer | head
    bait: bool = False    # points at an SSRF bait address (outside 127.10.0.0/16)


@dataclass(frozen=True)
class Page:
    path: str                          # path (and query) this page is served at, as the plan keys it
    behaviour: str = "html"            # html | file | redirect | status | drip | huge | bomb-gzip | ... (see server)
    status: int = 200
    content_type: str = "text/html"
    charset: str | None = "utf-8"      # encoding of the bytes (None for binary files)
    declared: str = "header"           # where the charset is declared: header | meta | http-equiv | bom | none | header-vs-meta
    title: str = ""
    text: str = ""                     # the main text, as Unicode (what a good extractor recovers)
    links: tuple[Link, ...] = ()       # every link in the page, in document order
    canonical: str | None = None       # normalised rel=canonical target
    base: str | None = None            # <base href> value, absolute
    meta_robots: str = ""              # content of <meta name=robots>
    dup_group: str | None = None       # pages with the same group carry the same main text (Plan.dup_clusters)
    location: str | None = None        # absolute Location of a redirect
    volatile: bool = False             # a timestamp line changes on every request
    ad: bool = False                   # a rotating ad block inside <main> (a div.advert) changes on every request
    notice: str = ""                   # a template's long standard text, inside <main> after the page's own text
    style: str = "site"                # boilerplate: site | origin | mirror-a | mirror-b | print | bare
    body: bytes | None = None          # the exact bytes of a non-HTML file

    def outlinks(self, follow_nofollow: bool = False) -> list[str]:
        """Normalised targets a crawler should follow from this page (a/area/iframe, deduplicated)."""
        if not follow_nofollow and "nofollow" in self.meta_robots:
            return []
        seen: dict[str, None] = {}
        for link in self.links:
            if link.url and link.tag in ("a", "area", "iframe") and (follow_nofollow or "nofollow" not in link.rel):
                seen.setdefault(link.url)
        return list(seen)


@dataclass(frozen=True)
class Knobs:
    """Timings and sizes of the hostile and changing hosts (all overridable by tests)."""

    latency_s: float = 0.02                        # every ordinary response waits this long first, so that
                                                   # concurrent requests really overlap in the log
    robots_slow_s: float = 5.0                     # robots-slow waits this long before answering
    robots_change_after_s: float | None = None     # robots-changing switches to Disallow: / after this many seconds
    robots_change_after_requests: int | None = None  # ... or after this many requests to that host
    drip_bytes: int = 8                            # hostile-drip sends this many bytes ...
    drip_interval_s: float = 1.0                   # ... every this many seconds ...
    drip_total_s: float = 600.0                    # ... for this long
    huge_bytes: int = 300 * 2**20                  # hostile-huge body size (streamed, never held)
    hang_s: float = 120.0                          # hostile-hang waits this long before the headers
    retry_after_s: int = 12                        # Retry-After of the throttle hosts (seconds, or now+this as a date):
                                                   # longer than the crawler's own pause after the first two 429s
                                                   # (host_delay_s + backoff_base_s x 1, x 2 = 6 s, 11 s with the
                                                   # defaults and a 1 s delay), so a crawler that backed off but
                                                   # ignored Retry-After would be caught (tests/test_retry_after.py)
    throttle_count: int = 3                        # 429s a client gets (outside windows) before 200s
    flaky_p: float = 0.5                           # probability of 503 on hostile-flaky
    bomb_bytes: int = 2**30                        # decoded size of the gzip and brotli bombs
    deep_divs: int = 100_000                       # nesting depth of hostile-deephtml
    many_links: int = 10_000                       # outlinks of hostile-manylinks
    max_lifetime_s: float = 3600.0                 # the server exits by itself after this long
    realistic_pages: bool = False                  # HTML pages carry a real site's markup around them
                                                   # (tens of KB: tests/testweb/realistic.py), for benchmarks
    warm: bool = False                             # build every host's pages before reporting ready; a cold
                                                   # server builds a site on its first request (~10 ms a host),
                                                   # so a crawl's opening burst over hundreds of hosts meets
                                                   # second-long answers: benchmarks start warm
    live_hosts: int = 0                            # hosts live-0.test ... whose /live/i pages change as Poisson
                                                   # processes at known rates (tests/testweb/live.py); 0: none
    live_pages: int = 15                           # live pages per live host
    live_rate_min: float = 1 / 2000                # slowest change rate, per nominal second (log-uniform spread)
    live_rate_max: float = 1 / 20                  # fastest change rate, per nominal second
    live_fast_share: float = 0.0                   # > 0: that share of the pages at live_rate_max, the rest at
                                                   # live_rate_min (two classes, not the log-uniform spread)
    live_time_scale: float = 1.0                   # real seconds per nominal second (the time compression)

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_ESC = re.compile(r"%([0-9A-Fa-f]{2})")


def _fix_escapes(s: str) -> str:
    def sub(m: re.Match) -> str:
        c = chr(int(m.group(1), 16))
        return c if (c.isascii() and (c.isalnum() or c in "-._~")) else "%" + m.group(1).upper()

    return _ESC.sub(sub, s)


def _strip_param(name: str) -> bool:
    n = name.lower()
    return n.startswith("utm_") or n in STRIP_PARAMS


def normalize(url: str) -> str:
    """The plan's reference normalisation of an absolute http URL (see module docstring)."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port in (None, 80) else f"{host}:{parts.port}"
    path = "/".join(seg.split(";", 1)[0] for seg in parts.path.split("/")) or "/"
    path = _fix_escapes(path)
    query = "&".join(
        p for p in parts.query.split("&") if p and not _strip_param(p.split("=", 1)[0])
    )
    return urlunsplit((parts.scheme.lower(), netloc, path, _fix_escapes(query), ""))


def split_target(raw: str) -> tuple[str, str]:
    """A request target as the server keys it: (path without ;params and with unreserved escapes decoded, query)."""
    path, _, query = raw.partition("?")
    path = "/".join(seg.split(";", 1)[0] for seg in path.split("/"))
    return _fix_escapes(path) or "/", query
