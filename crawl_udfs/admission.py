"""URL admission: the one definition of which URLs may enter the crawl DB.

Guarantee: a URL enters the crawl DB only after :meth:`Admission.reason` said
None for it, with what is known where it entered. There are two doors, and both
call this module: ``jobs/inject.py`` for seeds (kind ``seed``, depth 0, no
source host) and the fetch task for what a page names (links, its canonical
link, a redirect's target; the page's host is the source host). ``update``
inserts only the outlinks the task returned, so it applies no rule of its own.
A rejected URL is counted (``outlinks_filtered``, inject's ``filtered``), never
stored.

The rules, on normalised URLs (the normaliser already dropped URLs longer than
``url.max_length``, the one length limit, and stripped session ids and tracking
parameters), checked in this order, the first broken one being the reason:

Trap rules (``[filter]``):

- ``path_depth``: more than ``filter.max_path_segments`` path segments;
- ``repeated_segment``: a segment more than ``filter.max_segment_repeats``
  times, or a run of 1-3 segments repeating back to back (``/a/b/a/b/``), the
  pattern Nutch's default ``regex-urlfilter.txt`` rejects with
  ``(/[^/]+)/[^/]+\\1/[^/]+\\1/``;
- ``query_params``: more than ``filter.max_query_params`` query parameters;
- ``deny_pattern``: a match of one of ``filter.deny_patterns`` (Python regular
  expressions searched in the URL).

Scope rules (``[scope]``):

- ``no_host``: the URL has no host;
- ``too_deep``: its depth is over ``scope.max_depth`` (negative: no limit). A
  link is one deeper than its page; a redirect target and a canonical link name
  the same document and keep the page's depth (:func:`depth_of`);
- ``other_host``: ``scope.same_host_only`` and the host differs from the source host;
- ``host_not_allowed``: ``scope.allow_hosts`` is not empty and none matches the host;
- ``host_denied``: one of ``scope.deny_hosts`` matches the host (Python
  regular expressions, searched in the host).

Every rule applies to every kind; a seed has depth 0 and no source host, so
the depth and same-host rules never reject one.

What a followed link inherits from its page is defined here once too: which links
are followed (:func:`followed`), its depth (:func:`link_depth`) and its score
(:func:`link_score`), used by the fetch task when it follows a link inside the round
(``host_runs``) and, built as Columns from the same functions, by update when it
inserts a new URL (``discover_transforms.discover``).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Iterable

from crawl_udfs.config import Config
from crawl_udfs.url_normalize import host_of

#: The kind of a seed URL (the other kinds are the outlink kinds of ``crawl_udfs.rows.Outlink``).
SEED = "seed"
#: Outlink kinds that name the same document as their page rather than a page one link away.
SAME_DOC_KINDS = ("redirect", "canonical")


class PlainOps:
    """The two operations :func:`link_depth` and :func:`link_score` need, on plain values. Update builds
    the same rules as Columns by passing Column ones (``discover_transforms.COLUMN_OPS``), so the task
    (``host_runs.TaskHosts.follow``) and update (``discover_transforms.discover``) share one definition."""

    @staticmethod
    def when(cond, then, otherwise):
        return then if cond else otherwise

    @staticmethod
    def greatest(value, floor: int):
        return max(value, floor)


PLAIN = PlainOps()


def link_depth(parent_depth, same_doc, ops=PLAIN):
    """The depth of a followed link on a page at ``parent_depth``: one deeper; a redirect or canonical
    target (``same_doc``: its kind is in :data:`SAME_DOC_KINDS`) names the same document: the page's."""
    return ops.when(same_doc, parent_depth, parent_depth + 1)


def link_score(parent_score, same_doc, n_sharing, score_decay: float, ops=PLAIN):
    """The score a followed link inherits: the page's score x ``scope.score_decay``, shared among the
    page's ``n_sharing`` followed links that are not same-document targets (:func:`shares_score`); a
    redirect or canonical target (``same_doc``) keeps the page's score."""
    return ops.when(same_doc, parent_score, parent_score * score_decay / ops.greatest(n_sharing, 1))


def depth_of(parent_depth: int, kind: str) -> int:
    """The depth of a URL of ``kind`` found on a page at ``parent_depth`` (a seed: 0)."""
    if kind == SEED:
        return 0
    return link_depth(parent_depth, kind in SAME_DOC_KINDS)


def followed(kind: str, nofollow: bool, *, follow_nofollow: bool) -> bool:
    """Whether an admitted outlink is followed (becomes a crawl-DB URL): redirect and canonical targets
    always, other links unless nofollow (all with ``parse.follow_nofollow``). ``discover_transforms.followed``
    is the same rule as a Column (tests/test_admission.py runs both on every combination)."""
    return follow_nofollow or kind in SAME_DOC_KINDS or not nofollow


def shares_score(kind: str, nofollow: bool, *, follow_nofollow: bool) -> bool:
    """Whether a followed outlink takes a share of its page's score (:func:`link_score`): not a
    redirect or canonical target, which keeps the page's whole score."""
    return kind not in SAME_DOC_KINDS and followed(kind, nofollow, follow_nofollow=follow_nofollow)


class Admission:
    """The admission rules of one configuration (picklable; verdicts per URL and host cached)."""

    def __init__(self, conf: Config):
        f, s = conf.filter, conf.scope
        self._max_segments = int(f.max_path_segments)
        self._max_repeats = int(f.max_segment_repeats)
        self._max_params = int(f.max_query_params)
        self._deny = tuple(re.compile(p) for p in f.deny_patterns)
        self._max_depth = int(s.max_depth)
        self._same_host_only = bool(s.same_host_only)
        self._allow_hosts = tuple(re.compile(p) for p in s.allow_hosts)
        self._deny_hosts = tuple(re.compile(p) for p in s.deny_hosts)
        # Outlinks repeat on every page of a site (menus, footers): remember verdicts, bounded
        # like the task's link cache.
        self._cache_entries = int(conf.parse.link_cache_entries)
        self._facts = functools.lru_cache(self._cache_entries)(self._url_facts)

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_facts"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._facts = functools.lru_cache(self._cache_entries)(self._url_facts)

    def reason(self, url: str, *, kind: str = SEED, source_host: str | None = None,
               parent_depth: int = 0) -> str | None:
        """None when ``url`` (normalised) may enter the crawl DB, else the name of the rule it breaks.

        ``kind`` is ``seed`` or an outlink kind; ``source_host`` and ``parent_depth``
        describe the page the URL was found on (unused for a seed).
        """
        return self._verdict(self._facts(url), kind, source_host, depth_of(parent_depth, kind))

    def admitted(self, urls_kinds: Iterable[tuple[str, str]], *, source_host: str | None,
                 parent_depth: int) -> list[bool]:
        """:meth:`reason` is None, for each (url, kind) found on one page: a page's outlinks in one call."""
        facts, verdict, depths = self._facts, self._verdict, {}
        out = []
        for url, kind in urls_kinds:
            depth = depths.get(kind)
            if depth is None:
                depth = depths[kind] = depth_of(parent_depth, kind)
            out.append(verdict(facts(url), kind, source_host, depth) is None)
        return out

    def _verdict(self, facts: tuple[str | None, str, str | None], kind: str, source_host: str | None,
                 depth: int) -> str | None:
        """The rules, in order, on a URL's facts (:meth:`_url_facts`) and the depth it would have."""
        trap, host, host_rule = facts
        if trap is not None:
            return trap
        if not host:
            return "no_host"
        if self._max_depth >= 0 and depth > self._max_depth:
            return "too_deep"
        if self._same_host_only and kind != SEED and host != source_host:
            return "other_host"
        return host_rule

    def _url_facts(self, url: str) -> tuple[str | None, str, str | None]:
        """What depends on the URL alone (cached): its trap verdict, host and host verdict."""
        host = host_of(url)
        return self._trap_rules(url), host, self._host_rules(host)

    def _trap_rules(self, url: str) -> str | None:
        rest = url.split("://", 1)[-1]
        slash = rest.find("/")
        path_query = rest[slash:] if slash >= 0 else "/"
        path, _, query = path_query.partition("?")
        segments = [s for s in path.split("/") if s]
        if len(segments) > self._max_segments:
            return "path_depth"
        # Both rules need a segment seen twice (max_segment_repeats >= 1): most paths have none.
        if len(set(segments)) < len(segments):
            if max(Counter(segments).values()) > self._max_repeats or _repeating_run(segments):
                return "repeated_segment"
        if query and query.count("&") + 1 > self._max_params:
            return "query_params"
        if any(p.search(url) for p in self._deny):
            return "deny_pattern"
        return None

    def _host_rules(self, host: str) -> str | None:
        if self._allow_hosts and not any(p.search(host) for p in self._allow_hosts):
            return "host_not_allowed"
        if any(p.search(host) for p in self._deny_hosts):
            return "host_denied"
        return None


def _repeating_run(segments: list[str]) -> bool:
    """True when some run of 1-3 segments repeats immediately (a/b/a/b, x/x)."""
    n = len(segments)
    for width in (1, 2, 3):
        for i in range(n - 2 * width + 1):
            if segments[i:i + width] == segments[i + width:i + 2 * width]:
                return True
    return False
