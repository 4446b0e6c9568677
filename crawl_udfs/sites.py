"""Which site a host belongs to: its registered domain under the Public Suffix List.

The PSL is the snapshot that ships inside ``tldextract`` (never fetched at run
time); ``jobs/export.py`` fills Common Crawl's ``url_host_registered_domain`` /
``url_host_private_domain`` from the same extractor.

``site(host)`` is the registered domain *with the PSL's private section*
(``a.blogspot.com`` and ``b.blogspot.com`` are two sites, ``www.example.co.uk``
and ``example.co.uk`` one): the unit that can speak for a page's
``rel=canonical`` (``jobs/originals.py``). A TLD the list lacks (``.test``)
follows the list's default rule ``*`` (one label, as its algorithm says;
tldextract would give no domain at all). An IP address, a single label or a
bare suffix is its own site.
"""

from __future__ import annotations

import functools

from crawl_udfs.dns import parse_ip


@functools.lru_cache(maxsize=2)
def psl(include_private: bool):
    """A tldextract extractor on the bundled PSL snapshot only: no cache dir, no download."""
    import tldextract
    return tldextract.TLDExtract(cache_dir=None, suffix_list_urls=(), fallback_to_snapshot=True,
                                 include_psl_private_domains=include_private)


def site(host: str | None) -> str | None:
    """The site of ``host`` (lower-case punycode, no port): its private-section registered domain, else itself."""
    if not host:
        return None
    host = host.rstrip(".").lower()
    if parse_ip(host) is not None:
        return host
    found = psl(True)(host)
    if found.suffix:
        return found.top_domain_under_public_suffix or host
    labels = host.split(".")  # a TLD the list lacks (.test, .internal): its default rule "*", one label
    return ".".join(labels[-2:])


def same_site(a: str | None, b: str | None) -> bool:
    """Whether two hosts belong to one site (:func:`site`); never for a missing host."""
    return bool(a) and bool(b) and (a == b or site(a) == site(b))
