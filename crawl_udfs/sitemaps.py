"""Sitemaps (sitemaps.org protocol 0.9): a fetched sitemap's URLs, read safely and within caps.

A sitemap is a crawl-DB row like a page, marked ``fetch_kind = "sitemap"``
(``schemas/tables.py``): generated, leased by the fetch task's scheduler and
checked against robots.txt like any page. Its body is read here instead of by
the HTML parser (``crawl_udfs.pages``), and what it lists comes back as outlinks.

Guarantees:
- :func:`parse_sitemap` never raises and stays bounded on hostile input. The XML
  is read incrementally (lxml's pull parser: no entity substitution, no network,
  no DTD loaded, ``huge_tree`` off, elements freed as they are read). A document
  with a DOCTYPE is refused (``doctype``: a sitemap has none; entity bombs and
  external entities need one); libxml2 refuses an entity expansion before that on
  its own (amplification limit), which also ends as ``doctype``. Other broken XML
  keeps what was read before the break (``xml_error: ...``).
- A gzip body (magic bytes; ``.gz`` files are served as ``application/gzip``, so
  the fetcher keeps them compressed) is decompressed in steps, never past
  ``max_bytes``; the protocol's caps are ``max_urls`` entries and ``max_bytes``
  uncompressed per file. A file past either is read up to the cap and the reason
  (``max_urls``, ``max_bytes``) is returned: the first entries are kept.
- Entries: ``<url><loc>`` (pages, kind :data:`URL_KIND`, with their ``<lastmod>``)
  and ``<sitemap><loc>`` of an index (child sitemaps, kind :data:`CHILD_KIND`),
  each normalised by the caller's normaliser; an entry on another host than the
  sitemap's is dropped (the protocol: a sitemap lists URLs of its own host) and
  counted. A child sitemap is kept only while the sitemap's ``depth`` (its index
  depth: 0 for robots.txt's and ``/sitemap.xml``) is under ``max_index_depth``,
  so a chain of generated index files ends (``max_index_depth``); a loop of
  index files ends anyway, as a known URL is not inserted again.
- ``lastmod`` (W3C Datetime: a date, or a date and time with a zone) becomes
  epoch seconds; an invalid one is ignored. ``not_after`` is the fetch time: a
  sitemap cannot know a future change. A lastmod at most :data:`CLOCK_SKEW_S`
  after it is the server's clock ahead of ours, or a "now" written in whole
  seconds (``…T17:19:25Z`` for a request sent at 17:19:24.98): it is taken as
  the fetch time. One further ahead is ignored (a broken sitemap).

Reference: https://www.sitemaps.org/protocol.html (caps, index files, W3C Datetime).
"""

from __future__ import annotations

import datetime as dt
import re
import zlib
from dataclasses import dataclass, field
from typing import Callable

import lxml.etree as etree

from crawl_udfs.url_normalize import host_of

#: ``crawldb.fetch_kind`` / ``fetch_list.fetch_kind`` of a sitemap row (null: a page).
SITEMAP = "sitemap"
#: Outlink kinds: a URL a sitemap lists, and a child sitemap an index lists.
URL_KIND = "sitemap"
CHILD_KIND = "sitemap_child"

#: Seconds a lastmod may be after the fetch time and still count (as the fetch time): clocks differ.
CLOCK_SKEW_S = 900.0

_CHUNK = 65536
_GZIP_MAGIC = b"\x1f\x8b"
_DOCTYPE = re.compile(rb"<!DOCTYPE", re.I)
# W3C Datetime (https://www.w3.org/TR/NOTE-datetime): YYYY, YYYY-MM, YYYY-MM-DD, and with hh:mm[:ss[.s]] TZD.
_W3C = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?"
                  r"(Z|[+-]\d{2}:\d{2}))?)?)?")


@dataclass(slots=True)
class Entry:
    url: str                    # normalised
    lastmod: float | None       # epoch seconds, UTC


@dataclass(slots=True)
class Sitemap:
    urls: list[Entry] = field(default_factory=list)      # <urlset> entries
    children: list[Entry] = field(default_factory=list)  # <sitemapindex> entries (child sitemaps)
    foreign: int = 0            # entries dropped: another host, or not a usable URL
    reason: str | None = None   # why the file was cut or refused (None: read whole)


def parse_lastmod(text: str | None) -> float | None:
    """Epoch seconds of a W3C Datetime, or None when it is not one (ignored, as the protocol allows)."""
    m = _W3C.fullmatch((text or "").strip())
    if m is None:
        return None
    y, mo, d, h, mi, s, tz = m.groups()
    try:
        zone = dt.timezone.utc
        if tz and tz != "Z":
            sign = 1 if tz[0] == "+" else -1
            zone = dt.timezone(sign * dt.timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6])))
        when = dt.datetime(int(y), int(mo or 1), int(d or 1), int(h or 0), int(mi or 0), int(s or 0), tzinfo=zone)
    except ValueError:  # month 13, hour 25, a zone beyond 24 h
        return None
    return when.timestamp()


def _decompressed(body: bytes, max_bytes: int) -> tuple[bytes, str | None]:
    """``body`` gunzipped (multi-member too) to at most ``max_bytes``, and why it was cut."""
    out, data = bytearray(), body
    dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        while data and len(out) <= max_bytes:
            out += dec.decompress(data, max_bytes + 1 - len(out))
            data = dec.unconsumed_tail
            if dec.eof:  # the next gzip member, if any
                data, dec = dec.unused_data, zlib.decompressobj(16 + zlib.MAX_WBITS)
    except zlib.error as e:
        return bytes(out[:max_bytes]), f"gzip_error: {e}"
    if len(out) > max_bytes:
        return bytes(out[:max_bytes]), "max_bytes"
    return bytes(out), None


def parse_sitemap(body: bytes, *, host: str, depth: int, normalize: Callable[[str, str], str | None], base_url: str,
                  max_urls: int, max_bytes: int, max_index_depth: int, not_after: float | None = None) -> Sitemap:
    """The entries of one sitemap body (module docstring); ``host`` is the sitemap's own host."""
    out = Sitemap()
    if body[:2] == _GZIP_MAGIC:
        body, out.reason = _decompressed(body, max_bytes)
    elif len(body) > max_bytes:
        body, out.reason = body[:max_bytes], "max_bytes"
    parser = etree.XMLPullParser(events=("start", "end"), resolve_entities=False, no_network=True, load_dtd=False,
                                 huge_tree=False, remove_comments=True, remove_pis=True)
    started = False
    entry: dict[str, str] = {}
    try:
        for i in range(0, len(body), _CHUNK):
            parser.feed(body[i:i + _CHUNK])
            for event, el in parser.read_events():
                name = etree.QName(el).localname if isinstance(el.tag, str) else ""
                if event == "start":
                    if not started:
                        started = True
                        if el.getroottree().docinfo.doctype:
                            out.reason = "doctype"
                            return out
                        if name not in ("urlset", "sitemapindex"):
                            out.reason = f"not_sitemap: <{name}>"
                            return out
                    continue
                if name in ("loc", "lastmod"):
                    entry[name] = el.text or ""
                elif name in ("url", "sitemap"):
                    if not _take(out, entry, name == "sitemap", host, depth, normalize, base_url, max_urls,
                                 max_index_depth, not_after):
                        return out
                    entry = {}
                    el.clear()
                    while el.getprevious() is not None:  # free what was read: memory stays bounded
                        del el.getparent()[0]
        parser.close()
    except etree.XMLSyntaxError as e:
        if not started and _DOCTYPE.search(body[:_CHUNK]):
            out.reason = "doctype"  # libxml2 refused an entity expansion before the root element
        elif not started:
            out.reason = f"not_sitemap: {e}"[:200]
        elif out.reason is None:
            out.reason = f"xml_error: {e}"[:200]
    return out


def _take(out: Sitemap, entry: dict[str, str], child: bool, host: str, depth: int, normalize, base_url: str,
          max_urls: int, max_index_depth: int, not_after: float | None) -> bool:
    """Keep one entry; False when the file must not be read further (a cap reached)."""
    if len(out.urls) + len(out.children) >= max_urls:
        out.reason = "max_urls"
        return False
    url = normalize(entry.get("loc", "").strip(), base_url) if entry.get("loc", "").strip() else None
    if url is None or host_of(url) != host:
        out.foreign += 1
        return True
    lastmod = parse_lastmod(entry.get("lastmod"))
    if lastmod is not None and not_after is not None and lastmod > not_after:
        lastmod = not_after if lastmod <= not_after + CLOCK_SKEW_S else None
    if not child:
        out.urls.append(Entry(url, lastmod))
    elif depth < max_index_depth:
        out.children.append(Entry(url, lastmod))
    else:
        out.reason = "max_index_depth"
    return True


def robots_sitemaps(robots_url: str, named: list[str] | tuple[str, ...], normalize: Callable[[str, str], str | None],
                    host: str) -> list[str]:
    """The sitemaps of a host to (re)read after its robots.txt was fetched: those robots.txt names on the
    host itself, then ``/sitemap.xml``; normalised, in order, once each."""
    out: dict[str, None] = {}
    for ref in (*named, "/sitemap.xml"):
        url = normalize(ref, robots_url)
        if url is not None and host_of(url) == host:
            out[url] = None
    return list(out)
