"""A page's outlinks: normalised, deduplicated, bounded.

Outlinks are normalised with the task's URL normaliser, deduplicated (first
occurrence keeps its place and kind; a URL is nofollow only if every
occurrence is), exclude the page itself and fragment-only links, skip
non-http(s) schemes, and come canonical first. Links
under ``rel=nofollow`` or page-level nofollow are *returned* with
``nofollow=True``: whether to follow them (``parse.follow_nofollow``) is the
update step's decision. ``<meta http-equiv=refresh>`` targets are not
extracted.

Bounded: normalisation is cached per distinct ``href`` and stops at
``parse.max_outlinks_per_page`` links or ``parse.max_links_examined`` hrefs.
"""

from __future__ import annotations

import functools
import re

from crawl_udfs.config import Section
from crawl_udfs.rows import Outlink
from crawl_udfs.url_normalize import Resolved, as_resolved


def rel_tokens(value: str | None) -> list[str]:
    """The lower-case tokens of a ``rel`` attribute."""
    return value.lower().split() if value else []


_OTHER_SCHEME = re.compile(r"(?!https?:)[a-z][a-z0-9+.\-]*:", re.I)  # mailto:, javascript:, data:, …


_MISS = object()


class LinkSet:
    """Normalised, deduplicated outlinks in order, with a per-href cache."""

    def __init__(self, normalizer, base: str, own: str | None, conf: Section):
        self.normalizer, self.base, self.own = normalizer, base, own
        # A task's CachedNormalizer resolves a page's links with the base's scopes worked out once,
        # each with its fingerprint and host (url_normalize.Resolved).
        resolver = getattr(normalizer, "resolver", None)
        self.resolve = resolver(base) if resolver is not None else functools.partial(_resolve, normalizer, base)
        self.cap, self.budget = conf.max_outlinks_per_page, conf.max_links_examined
        self.cache: dict[str, Resolved | None] = {}
        self.index: dict[str, Outlink] = {}
        self.items: list[Outlink] = []

    def full(self) -> bool:
        return len(self.items) >= self.cap or len(self.cache) >= self.budget

    def add(self, href: str, kind: str, nofollow: bool) -> str | None:
        href = href.strip()
        found = self.cache.get(href, _MISS)
        if found is _MISS:
            found = None
            if href and href[0] != "#" and not _OTHER_SCHEME.match(href):
                try:
                    found = self.resolve(href)
                except Exception:
                    pass
            self.cache[href] = found
        if found is None:
            return None
        url = found[0]
        if url == self.own:
            return url
        seen = self.index.get(url)
        if seen is not None:
            seen.nofollow = seen.nofollow and nofollow
        elif len(self.items) < self.cap:
            link = Outlink(url=url, url_fp=found[1], kind=kind, nofollow=nofollow, host=found[2])
            self.index[url] = link
            self.items.append(link)
        return url


def _resolve(normalizer, base: str, href: str) -> Resolved | None:
    """A plain normaliser's result for ``href`` on ``base``, with its fingerprint and host."""
    return as_resolved(normalizer.normalize(href, base))


_LINK_ATTR = {"a": "href", "area": "href", "frame": "src", "iframe": "src"}


def collect_links(root, links: LinkSet) -> None:
    """Add the ``<a>``, ``<area>``, ``<frame>`` and ``<iframe>`` targets of ``root``, in document order."""
    items, cache, cap, budget, add = links.items, links.cache, links.cap, links.budget, links.add
    for el in root.iter("a", "area", "frame", "iframe"):
        if len(items) >= cap or len(cache) >= budget:  # links.full(), inlined: this loop is hot
            return
        value = el.get(_LINK_ATTR[el.tag])
        if value is not None:
            rel = el.get("rel")
            add(value, el.tag, rel is not None and "nofollow" in rel.lower().split())
