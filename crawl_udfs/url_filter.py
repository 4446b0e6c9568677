"""URL filters that keep crawler traps out of the frontier.

Guarantee: every outlink a fetch task returns has passed :meth:`UrlFilter.reason`
(None = keep); a rejected link is counted, never inserted, so a trap can only
grow the frontier by the links that look like ordinary pages, and those are
held by the per-host budgets. The rules are cheap string checks, applied to
normalised URLs (so session ids and tracking parameters are already gone, and
no URL is longer than ``url.max_length``, the one length limit):

- ``filter.max_path_segments`` path segments (ever-deeper paths);
- a path segment repeated ``filter.max_segment_repeats`` + 1 times, or a run of
  segments repeating back to back (``/a/b/a/b/``), the pattern Nutch's default
  ``regex-urlfilter.txt`` rejects with ``(/[^/]+)/[^/]+\\1/[^/]+\\1/``;
- more than ``filter.max_query_params`` query parameters (faceted search);
- any of ``filter.deny_patterns`` (regular expressions: calendars, session
  and sort/facet parameters the normaliser does not strip).
"""

from __future__ import annotations

import re
from collections import Counter

from crawl_udfs.config import Section


class UrlFilter:
    def __init__(self, filter_conf: Section):
        self._max_segments = int(filter_conf.max_path_segments)
        self._max_repeats = int(filter_conf.max_segment_repeats)
        self._max_params = int(filter_conf.max_query_params)
        self._deny = [re.compile(p) for p in filter_conf.deny_patterns]

    def reason(self, url: str) -> str | None:
        """None when ``url`` (normalised) may enter the frontier, else the rule it breaks."""
        rest = url.split("://", 1)[-1]
        slash = rest.find("/")
        path_query = rest[slash:] if slash >= 0 else "/"
        path, _, query = path_query.partition("?")
        segments = [s for s in path.split("/") if s]
        if len(segments) > self._max_segments:
            return "path_depth"
        if segments and max(Counter(segments).values()) > self._max_repeats:
            return "repeated_segment"
        if _repeating_run(segments):
            return "repeated_segment"
        if query and query.count("&") + 1 > self._max_params:
            return "query_params"
        for pattern in self._deny:
            if pattern.search(url):
                return "deny_pattern"
        return None


def _repeating_run(segments: list[str]) -> bool:
    """True when some run of 1-3 segments repeats immediately (a/b/a/b, x/x)."""
    n = len(segments)
    for width in (1, 2, 3):
        for i in range(n - 2 * width + 1):
            if segments[i:i + width] == segments[i + width:i + 2 * width]:
                return True
    return False
