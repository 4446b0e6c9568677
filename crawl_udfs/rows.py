"""The rows that cross the boundary between Spark and a fetch task.

Guarantees: plain, picklable dataclasses holding only str/int/float/bool/bytes,
lists and None (and a host's :class:`~crawl_udfs.known_urls.KnownUrls`, a sorted
int64 array), so the Spark layer (``jobs/fetch.py``) converts them to and
from Arrow without knowing anything else of ``crawl_udfs``. Times are Unix
epoch seconds (float, UTC). ``url_fp`` is :func:`crawl_udfs.url_normalize.fingerprint`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crawl_udfs.known_urls import KnownUrls


class Outcome(str, Enum):
    """What happened to one fetch-list URL in a task (one line of meaning each)."""

    OK = "ok"                        # 2xx response stored in WARC (body maybe truncated)
    NOT_MODIFIED = "not_modified"    # 304 to a conditional GET; revisit record written
    REDIRECT = "redirect"            # 3xx with a valid Location; target in redirect_to, not followed inline
    BAD_REDIRECT = "bad_redirect"    # 3xx not to be followed (crawl_udfs.classify): error_class says why
    HTTP_ERROR = "http_error"        # 4xx/5xx (incl. 429); status_code says which
    ROBOTS_DENIED = "robots_denied"  # robots.txt disallows this URL for our agent
    ROBOTS_UNAVAILABLE = "robots_unavailable"  # robots.txt 5xx/unreachable: host treated as disallowed, retry later
    ERROR = "error"                  # no usable response: timeout, connect, dns, ssrf_blocked, … (error_class)
    DEFERRED = "deferred"            # not attempted on purpose: host parked, Retry-After or Crawl-delay too long
    NOT_ATTEMPTED = "not_attempted"  # the round ended first (error_class: task_budget, tail_cut); untouched


@dataclass(slots=True)
class FetchItem:
    """One row of a round's fetch list."""

    url: str                          # normalised URL
    url_fp: int                       # fingerprint(url), signed 64-bit
    host: str                         # lower-case host (punycode), no port
    depth: int = 0
    score: float = 0.0
    redirect_hops: int = 0            # redirects already taken to reach this URL
    etag: str | None = None           # for If-None-Match
    last_modified: str | None = None  # for If-Modified-Since (HTTP-date as the server sent it)
    prev_digest: str | None = None    # payload digest of the last stored copy ("sha1:…")
    prev_warc_record_id: str | None = None  # WARC-Record-ID of that copy, for revisit records
    prev_fetch_time: float | None = None    # when that copy was fetched
    in_round: bool = False            # followed inside this round (host_runs.TaskHosts.follow), not on the fetch list
    source_fp: int | None = None      # in_round: url_fp of the page it was found on
    fetch_kind: str | None = None     # "sitemap": read as a sitemap (crawl_udfs.sitemaps); None: a page


@dataclass(slots=True)
class HostState:
    """What the crawl DB knows of a host when a task starts (seeded from ``hosts``)."""

    host: str
    robots_status: int | None = None        # HTTP status of the cached robots.txt fetch; None = never fetched
    robots_body: bytes | None = None        # cached body (capped), when robots_status is 2xx
    robots_fetched_at: float | None = None
    robots_expires_at: float | None = None  # after this the cache is stale and robots.txt is fetched again
    next_allowed_at: float | None = None    # earliest time of the next request (survives rounds)
    consecutive_failures: int = 0
    ip: str | None = None                   # last address connected to
    follow_cap: int | None = None           # most URLs of the host this round, fetch list + followed (None: none followed)
    known: "KnownUrls | None" = None        # url_fps the crawl DB knows on the host (None: none followed)
    dup_patterns: list[dict] | None = None  # hosts.dup_patterns: URL patterns learnt as duplicates (url_patterns)


@dataclass(slots=True)
class Outlink:
    url: str                  # normalised absolute URL
    url_fp: int
    kind: str                 # "a", "area", "frame", "iframe", "canonical", "redirect", "sitemap", "sitemap_child"
    nofollow: bool = False    # rel=nofollow, or the page is under meta/X-Robots-Tag nofollow
    host: str | None = None   # host_of(url); jobs/fetch.output_columns fills it when None (update reads it)
    lastmod: float | None = None  # kind "sitemap": the sitemap's <lastmod> for it (epoch seconds)


@dataclass(slots=True)
class FetchResult:
    """One per fetch-list URL: the outcome of the task for it."""

    url: str
    url_fp: int
    host: str
    outcome: str                         # an Outcome value
    fetch_time: float | None = None      # request start; None when not attempted
    status_code: int | None = None
    error_class: str | None = None       # timeout, connect, dns, ssrf_blocked, redirect_loop, …
    error_message: str | None = None
    ip: str | None = None                # address actually connected to
    redirect_to: str | None = None       # normalised Location target
    redirect_hops: int = 0
    retry_after_s: float | None = None
    content_type: str | None = None      # media type, lower-case, no parameters
    charset: str | None = None
    content_length: int | None = None    # stored (decoded) body bytes
    wire_bytes: int | None = None        # bytes received on the wire for the body
    truncated: str | None = None         # WARC-Truncated reason: "length", "time", "disconnect"
    etag: str | None = None
    last_modified: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # selected response headers
    digest: str | None = None            # payload digest "sha1:BASE32"
    simhash: int | None = None           # signed 64-bit SimHash of the main text
    title: str | None = None
    canonical: str | None = None
    noindex: bool = False
    nofollow: bool = False
    outlinks: list[Outlink] = field(default_factory=list)
    outlinks_filtered: int = 0           # outlinks dropped by the URL filters (traps)
    warc_filename: str | None = None
    warc_offset: int | None = None
    warc_length: int | None = None
    warc_record_id: str | None = None
    warc_refers_to: str | None = None    # a revisit record (304 or identical payload): the full copy's record id
    t_first_byte_ms: float | None = None
    t_total_ms: float | None = None
    politeness_wait_ms: float | None = None  # time this URL waited for its host to be allowed
    in_round: bool = False               # the URL was followed inside the round, not on the fetch list
    depth: int | None = None             # in_round: its depth (parent's + 1)
    score: float | None = None           # in_round: its score (as update gives a new URL)
    source_fp: int | None = None         # in_round: url_fp of the page it was found on
    minhash: bytes | None = None         # MinHash of the main text's shingles (crawl_udfs.near_dup.minhash)
    words: int | None = None             # main-text length in words (the near-duplicate length check)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class RobotsCapture:
    """One robots.txt response stored as a WARC ``response`` record (a hop of the chain of host ``host``);
    ``jobs/fetch.py`` writes it as a ``robots`` row of ``fetch_output``, which the export indexes in the
    ``robotstxt`` subset, as Common Crawl does."""

    host: str                            # the host whose robots.txt chain this is (its task partition)
    url: str                             # the URL requested (a redirect hop may be on another host)
    fetch_time: float                    # request start, epoch seconds (the record's WARC-Date)
    status_code: int
    ip: str | None
    content_type: str | None             # media type, lower-case, no parameters
    content_length: int                  # stored (decoded) body bytes
    truncated: str | None
    digest: str                          # payload digest "sha1:BASE32"
    warc_filename: str
    warc_offset: int
    warc_length: int
    warc_record_id: str


@dataclass(slots=True)
class HostResult:
    """One per host seen by a task: what the task learnt, for ``hosts``."""

    host: str
    robots_status: int | None = None
    robots_body: bytes | None = None
    robots_fetched_at: float | None = None
    robots_expires_at: float | None = None
    crawl_delay_s: float | None = None
    sitemaps: list[str] = field(default_factory=list)
    ip: str | None = None
    next_allowed_at: float | None = None
    consecutive_failures: int = 0
    parked: bool = False
    park_reason: str | None = None
    requests: int = 0                    # requests that reached the host in this task (robots included)
    robots_requests: int = 0
    bytes_received: int = 0
    delay_s: float | None = None         # seconds per request at the end: delay + back-off + request (host_result)
    robots_captures: list[RobotsCapture] = field(default_factory=list)  # its robots.txt responses stored in WARC
    sitemap_urls: list[str] | None = None  # robots.txt fetched in this task, sitemaps on: the host's sitemaps to read

    def to_dict(self) -> dict:
        return asdict(self)
