"""URL normalisation: one canonical string, and one 64-bit key, per fetchable page.

Guarantees, for every input string (never an exception):

- :meth:`UrlNormalizer.normalize` (of the caller's ``[url]`` section) returns
  either ``None`` (the crawler must not keep the URL: not http/https,
  unparsable, bad or empty host, bad port, IDNA failure, or longer than
  ``url.max_length``) or an ASCII ``http://`` / ``https://`` URL
  that is a fixed point: ``normalize(normalize(x)) == normalize(x)``.
- Relative references resolve against ``base`` exactly as a browser does
  (WHATWG URL Standard, https://url.spec.whatwg.org/): tabs and newlines
  removed, C0/space trimmed, ``\\`` as ``/`` , ``http:foo`` forms, IPv4 number
  forms (``0x7f.1``), IPv6 compression, IDNA via UTS #46 to punycode, default
  ports dropped, dot segments resolved, lower-case scheme and host. The parser
  is Ada (the ``ada-url`` package), which passes every case of the
  web-platform-tests URL suite; we do not write our own.
- On top of WHATWG serialisation we apply these equivalences (RFC 3986 §6.2.2
  syntax-based normalisation, plus crawler practice as in Nutch's
  BasicURLNormalizer and w3lib's ``canonicalize_url``):
  fragment dropped; trailing dots of a domain host dropped (``a.test.`` is
  ``a.test``); ``%XX`` escapes of unreserved characters (A-Z a-z 0-9 ``-._~``)
  decoded and all other escapes upper-cased; path parameters (``;name=value``)
  named in ``url.session_params`` removed; query parameters named in
  ``url.tracking_params`` or ``url.session_params`` removed (names compared
  case-insensitively, a trailing ``*`` matches a prefix); empty ``&&`` pieces
  removed; remaining parameters kept in order or sorted by (name, value)
  (``url.query_order``); an empty query drops its ``?``.
  Characters other than those are left as WHATWG encodes them (what a browser
  sends), so ``|`` stays ``|`` and a bare ``%`` stays ``%``.

:func:`fingerprint` is the crawl DB key ``url_fp``: XXH64, seed 42, over the
UTF-8 bytes, read as a signed 64-bit integer — the value Spark SQL's
``xxhash64(url)`` gives for the same string.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import xxhash
from ada_url import URL, idna, join_url

from crawl_udfs.config import Section

__all__ = ["UrlNormalizer", "CachedNormalizer", "Resolved", "as_resolved", "normalize", "fingerprint", "host_of"]

_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEXDIGITS = frozenset("0123456789ABCDEFabcdef")
# Each of our rewrites that can change how the result re-parses (a host losing
# its trailing dot may become an IPv4 address; a path losing ";jsessionid=" may
# expose a ".." segment) is followed by a re-parse; two are always enough.
_MAX_PASSES = 3


def _escape(m: re.Match[str]) -> str:
    hexpair = m.group(1)
    char = chr(int(hexpair, 16))
    if char in _UNRESERVED:
        if char not in _HEXDIGITS:
            return char
        # A decoded hex digit must not complete a new escape with a bare "%"
        # before it ("%%41" or "%4%41" would become "%A…"), or a second
        # pass would decode again.
        text, at = m.string, m.start()
        if not (text[at - 1 : at] == "%" or (at >= 2 and text[at - 2] == "%" and text[at - 1] in _HEXDIGITS)):
            return char
    return "%" + hexpair.upper()


def _normalize_escapes(text: str) -> str:
    """RFC 3986 §6.2.2.1-2: decode unreserved escapes, upper-case the others.
    A bare "%" (no two hex digits after it) stays as it is, as in a browser."""
    return _ESCAPE.sub(_escape, text) if "%" in text else text


def _to_usv(text: str) -> str:
    """Lone surrogates become U+FFFD, as the WHATWG USVString conversion does."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _ace_labels_valid(host: str) -> bool:
    """UTS #46 §4 validity for labels already in ACE form ("xn--…"), which the
    WHATWG parser keeps unchecked in an all-ASCII host (``xn--``, ``xn--a``,
    ``xn--1ug`` can name no DNS host): each must Punycode-decode (RFC 3492) to
    non-ASCII text that UTS #46 ToASCII maps back to the same label."""
    for label in host.split("."):
        if label.startswith("xn--"):
            try:
                text = label[4:].encode("ascii").decode("punycode")
                if text.isascii() or idna.encode(text) != label.encode("ascii"):
                    return False
            except (UnicodeError, ValueError, OverflowError):
                return False
    return True


class _NameSet:
    """Lower-case names, each exact or (with a trailing ``*``) a prefix."""

    __slots__ = ("exact", "prefixes")

    def __init__(self, patterns: Any):
        names = [str(p).lower() for p in patterns]
        self.exact = frozenset(n for n in names if not n.endswith("*"))
        self.prefixes = tuple(n[:-1] for n in names if n.endswith("*"))

    def __contains__(self, name: str) -> bool:
        name = name.lower()
        return name in self.exact or (bool(self.prefixes) and name.startswith(self.prefixes))


class UrlNormalizer:
    """The normaliser for one ``[url]`` configuration section (picklable, stateless)."""

    __slots__ = ("max_length", "sort_query", "query_drop", "path_drop")

    def __init__(self, url_conf: Section):
        self.max_length: int = url_conf.max_length
        self.sort_query: bool = url_conf.query_order == "sort"  # "keep" or "sort" (crawl_udfs/config_rules.py)
        self.query_drop = _NameSet(tuple(url_conf.tracking_params) + tuple(url_conf.session_params))
        self.path_drop = _NameSet(url_conf.session_params)

    def normalize(self, url: str, base: str | None = None) -> str | None:
        """The canonical form of ``url`` resolved against ``base``, or None if it must not be kept."""
        if not isinstance(url, str) or (base is not None and not isinstance(base, str)):
            return None
        out = self._pass(_to_usv(url), None if base is None else _to_usv(base))
        for _ in range(_MAX_PASSES - 1):
            if out is None or not out[1]:
                break
            out = self._pass(out[0], None)
        if out is None or out[1] or len(out[0]) > self.max_length:
            return None
        return out[0]

    def _pass(self, url: str, base: str | None) -> tuple[str, bool] | None:
        """One WHATWG parse plus our rewrites; the flag says the result must be re-parsed."""
        try:  # join_url: the same parse as URL(url, base).href without the object (2 us a call less)
            href = URL(url).href if base is None else join_url(base, url)
        except ValueError:
            return None
        # A special URL serialises as scheme "://" [userinfo "@"] host [":" port]
        # path ["?" query] ["#" fragment], with "/", "?", "#" and "@" escaped
        # inside the parts before them, so plain string splits are exact.
        if href.startswith("http://"):
            scheme = "http://"
        elif href.startswith("https://"):
            scheme = "https://"
        else:
            return None
        href = href.partition("#")[0]
        slash = href.find("/", len(scheme))
        if slash < 0:  # cannot happen for a special URL; never raise
            return None
        authority = href[len(scheme) : slash]
        path, _, query = href[slash:].partition("?")
        reparse = False

        userinfo, at, host = authority.rpartition("@")
        name, colon, port = host.partition(":")
        if "xn--" in name and not _ace_labels_valid(name):
            return None
        if name.endswith(".") and not name.startswith("["):  # IPv6 literals never end in "."
            name = name.rstrip(".")
            if not name:
                return None
            host, reparse = name + colon + port, True
        if at:
            host = _normalize_escapes(userinfo) + "@" + host

        path = _normalize_escapes(path)
        if ";" in path:
            stripped = self._strip_path_params(path)
            if stripped != path:
                path, reparse = stripped, True

        if query:
            query = self._clean_query(_normalize_escapes(query))
        return f"{scheme}{host}{path}{query}", reparse

    def _strip_path_params(self, path: str) -> str:
        segments = path.split("/")
        for i, segment in enumerate(segments):
            if ";" in segment:
                head, *params = segment.split(";")
                kept = [p for p in params if p.partition("=")[0] not in self.path_drop]
                if len(kept) != len(params):
                    segments[i] = ";".join([head, *kept])
        return "/".join(segments)

    def _clean_query(self, query: str) -> str:
        """``?``-prefixed query without dropped or empty parameters, or ``""``."""
        drop = self.query_drop
        pieces = [p for p in query.split("&") if p and p.partition("=")[0] not in drop]
        if not pieces:
            return ""
        if self.sort_query:
            pieces.sort(key=lambda p: p.partition("=")[::2])
        return "?" + "&".join(pieces)


_MISS = object()
# A character that could change how a reference parses. ":" is one (a reference
# such as "http:x" or "mailto:" may carry a scheme), so such references get the whole base as scope.
_NOT_PLAIN = re.compile(r"[^!$&'()*+,\-./0-9;=?@A-Z_a-z~%]")


#: A result with its crawl-DB key and host, ``(url, fingerprint(url), host_of(url))``: what an outlink carries.
Resolved = tuple[str, int, str]


class CachedNormalizer:
    """A :class:`UrlNormalizer` with a bounded memo, keyed so one entry serves many pages of a site.

    Same results as the wrapped normaliser, by construction of the key
    ``(scope, url)``: ``scope`` is the part of ``base`` the WHATWG resolution of
    ``url`` can depend on. Given a valid base, an absolute ``http(s)://`` reference
    depends on no more; a path-absolute one (``/x``) only on the base's origin; a
    plain path-relative one (``x/y.html``, ``../z``) only on the base's directory.
    These narrower scopes are used only when ``base`` is itself a result of this
    normaliser (valid, and a fixed point: no fragment, backslash, tab or dot
    segment left to change the split) and, for the relative ones, the reference
    is made of plain URL characters; anything else is keyed by the whole base.
    Menus and footers repeat on every page of a site, so most of a page's links
    hit. Each result is remembered with its :func:`fingerprint` and :func:`host_of`
    (:data:`Resolved`, what :meth:`resolver` gives a page's links), so a link met
    again costs one dict lookup. The memo is emptied when it reaches ``max_entries``.
    Thread-safe under the GIL (single dict operations).
    """

    __slots__ = ("_norm", "_memo", "_outputs", "_max")

    def __init__(self, normalizer: UrlNormalizer, max_entries: int):
        self._norm = normalizer
        self._memo: dict[tuple[str | None, str], Resolved | None] = {}
        self._outputs: dict[str, Resolved] = {}   # each result, resolved once (shared by its keys)
        self._max = max(1, int(max_entries))

    def normalize(self, url: str, base: str | None = None) -> str | None:
        out = self.resolved(url, base)
        return None if out is None else out[0]

    def resolved(self, url: str, base: str | None = None) -> Resolved | None:
        """:meth:`normalize`'s result with its fingerprint and host, or None."""
        if not isinstance(url, str) or (base is not None and not isinstance(base, str)):
            return as_resolved(self._norm.normalize(url, base))
        if base is None:
            scope = None
        elif base not in self._outputs:  # an unparsable base fails even an absolute reference
            scope = base
        else:
            scope = _narrow_scope(url, base, *_base_scopes(base))
        out = self._memo.get((scope, url), _MISS)
        return self._miss((scope, url), url, base) if out is _MISS else out

    def for_base(self, base: str):
        """``lambda url: self.normalize(url, base)``, through :meth:`resolver`."""
        resolve = self.resolver(base)
        return lambda url: None if (out := resolve(url)) is None else out[0]

    def resolver(self, base: str):
        """``lambda url: self.resolved(url, base)``, with ``base``'s scopes worked out once: what a
        page's links call. (Once ``base`` is known to be a result, it stays a valid narrow base.)"""
        if not isinstance(base, str) or base not in self._outputs:
            return lambda url: self.resolved(url, base)
        origin, directory = _base_scopes(base)
        memo = self._memo

        def resolve(url: str) -> Resolved | None:
            if not isinstance(url, str):
                return as_resolved(self._norm.normalize(url, base))
            key = (_narrow_scope(url, base, origin, directory), url)
            out = memo.get(key, _MISS)
            return self._miss(key, url, base) if out is _MISS else out

        return resolve

    def _miss(self, key: tuple[str | None, str], url: str, base: str | None) -> Resolved | None:
        out = self._norm.normalize(url, base)
        if len(self._memo) >= self._max:
            self._memo.clear()
            self._outputs.clear()
        resolved = None
        if out is not None:
            resolved = self._outputs.get(out)
            if resolved is None:
                resolved = self._outputs[out] = as_resolved(out)
        self._memo[key] = resolved
        return resolved


def as_resolved(url: str | None) -> Resolved | None:
    """A normaliser result with its fingerprint and host (the host interned: a site's links share one
    string); None for None."""
    return None if url is None else (url, fingerprint(url), sys.intern(host_of(url)))


def _base_scopes(base: str) -> tuple[str, str]:
    """(origin, "\\x00" + directory) of a normaliser result, the narrow scopes of :class:`CachedNormalizer`."""
    authority = base.find("/", base.find("//") + 2)  # a result always has "/" after its authority
    query = base.find("?")
    return base[:authority], "\x00" + base[: base.rfind("/", 0, query if query >= 0 else len(base)) + 1]


def _narrow_scope(url: str, base: str, origin: str, directory: str) -> str:
    """The part of a result ``base`` that resolving ``url`` against it can depend on."""
    if url.startswith(("http://", "https://")):
        return ""
    if not url or _NOT_PLAIN.search(url) or url[0] in "?#":
        return base
    if url[0] == "/":
        return origin if url[1:2] != "/" else base
    return directory


def fingerprint(normalized: str) -> int:
    """Signed 64-bit XXH64 (seed 42) of the UTF-8 bytes: Spark SQL's ``xxhash64(url)``."""
    value = xxhash.xxh64_intdigest(normalized.encode("utf-8"), seed=42)
    return value - (1 << 64) if value >= (1 << 63) else value


def host_of(normalized: str) -> str:
    """The host of a normalised URL: lower-case, punycode, no port, no userinfo (IPv6 in brackets)."""
    start = normalized.find("//") + 2
    end = normalized.find("/", start)
    authority = normalized[start:] if end < 0 else normalized[start:end]
    authority = authority[authority.rfind("@") + 1 :]
    colon = authority.rfind(":")
    if colon >= 0 and "]" not in authority[colon:]:
        authority = authority[:colon]
    return authority.lower()
