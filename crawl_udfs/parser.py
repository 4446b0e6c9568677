"""HTML parsing for the fetch task: charset, title, robots directives, canonical,
outlinks and the main text that SimHash fingerprints.

Guarantees:

- :func:`parse` never raises and stays bounded on hostile input: lxml's HTML
  parser runs with ``recover=True`` and ``huge_tree`` off, so libxml2 cuts
  nesting at 256 levels (content deeper than that is dropped) and refuses
  oversized text nodes; every walk over the tree is iterative and linear;
  charset detection sees at most ``parse.charset_detect_bytes``; link
  normalisation is cached per distinct ``href`` and stops at
  ``parse.max_outlinks_per_page`` links or ``parse.max_links_examined`` hrefs.
  Measured on a loaded 2-core machine: hostile 5 MB documents take at most
  ~2 s (1.2 s CPU); a realistic 50 KB page 2-4 ms (1.9 ms CPU, 250-500
  pages/s), two thirds of it URL normalisation; a 2 KB test-web page ~0.14 ms
  CPU (with the task's cached normaliser).
- Non-HTML bodies are not parsed (``is_html`` false, ``main_text`` ""), but
  the header-level facts still apply: ``X-Robots-Tag`` and a canonical from
  the ``Link`` header.
- Outlinks are normalised with the task's URL normaliser, deduplicated (first
  occurrence keeps its place and kind; a URL is nofollow only if every
  occurrence is), exclude the page itself and fragment-only links, skip
  non-http(s) schemes, and come canonical first. Links
  under ``rel=nofollow`` or page-level nofollow are *returned* with
  ``nofollow=True``: whether to follow them (``parse.follow_nofollow``) is the
  update step's decision. ``<meta http-equiv=refresh>`` targets are not
  extracted.

Charset, first match wins (the WHATWG HTML "encoding sniffing algorithm", which
puts a byte-order mark before the transport label): BOM; ``charset`` of the
``Content-Type`` header; ``<meta charset>`` / ``<meta http-equiv>`` (or an XML
declaration) in the first ``parse.charset_prescan_bytes``; strict UTF-8;
charset-normalizer, limited first to the legacy encodings still common on the
web; windows-1252. Labels map as browsers map them
(``iso-8859-1`` and ``ascii`` decode as windows-1252, ``gb2312`` as gb18030,
``shift_jis`` as windows-31j, a ``<meta>`` claiming UTF-16 means UTF-8);
unknown, non-text and unsafe (UTF-7) labels are skipped. Undecodable bytes
become U+FFFD. ``charset`` reports the decoder used, lower-case.

Robots directives: ``<meta name=robots>`` and ``<meta name=AGENT>`` (anywhere
in the document, case-insensitive) and ``X-Robots-Tag`` header values, either
global or scoped to our agent (``X-Robots-Tag: deltacrawl: nofollow``; a scope
runs to the end of that header value). ``none`` means noindex and nofollow.
Canonical: the first ``<link rel=canonical>`` inside ``<head>`` (one in the
body is ignored, as search engines do, since page content may inject it),
else the ``Link: <…>; rel="canonical"`` header.

Main text (for near-duplicate detection, not display): script, style,
noscript, template, svg, nav, header, footer, aside, form controls, embedded
media and ``<time>`` (a volatile date) are dropped; so are ``<form>``s and
elements whose class, id or ARIA role name navigation, menus, sidebars,
footers, cookie banners, breadcrumbs, sharing, comments, bylines or dates, or
that are hidden -- unless they contain ``<main>`` or ``<article>``, and only
while that leaves some text (else a second pass goes without these rules).
Then the first ``<main>`` (or ``role=main``) is the text, else
the outermost ``<article>`` elements, blocks dominated by link text removed.
Without either, the body is cut into text blocks at block-level elements and
each is classified by two shallow features, word count and link density, as
in Boilerpipe (C. Kohlschütter, P. Fankhauser, W. Nejdl, "Boilerplate
Detection using Shallow Text Features", WSDM 2010): a block of at least
``parse.min_block_words`` words with link density at most
``parse.max_link_density`` is content; denser blocks are boilerplate; short
blocks are content when their nearest long neighbours on both sides are
(headings: when the next one is), jusText's context rule (J. Pomikálek,
"Removing Boilerplate and Duplicate Content from Web Corpora", 2011). If
no block qualifies, all blocks not dominated by links (else all blocks) are
used, so ``main_text`` is "" only for a page with no text outside the dropped
elements -- and :data:`crawl_udfs.simhash.EMPTY` is then no fingerprint.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import charset_normalizer
from charset_normalizer.utils import is_multi_byte_encoding
import lxml.etree as etree

from crawl_udfs.config import Section
from crawl_udfs.rows import Outlink
from crawl_udfs.url_normalize import fingerprint

__all__ = ["ParseResult", "parse", "is_html"]


@dataclass(slots=True)
class ParseResult:
    is_html: bool
    charset: str | None = None       # the decoder used, lower-case ("utf-8", "windows-1252", …)
    title: str | None = None
    main_text: str = ""              # boilerplate removed, blocks joined by "\n"; "" for non-HTML
    canonical: str | None = None     # normalised <link rel=canonical> or Link header target
    noindex: bool = False
    nofollow: bool = False           # page-level: meta robots / X-Robots-Tag
    outlinks: list[Outlink] = field(default_factory=list)


# ---------------------------------------------------------------- media type

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_AMBIGUOUS_TYPES = frozenset({"", "application/octet-stream", "application/unknown", "unknown/unknown", "*/*"})
# WHATWG MIME Sniffing §7.1: tags that identify HTML when they open a document.
_HTML_SNIFF = re.compile(
    rb"<(?:!doctype\s+html|html|head|script|iframe|h1|div|font|table|a|style|title|b|body|br|p|!--)[\s>]", re.I
)


def _media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_html(content_type: str | None, body: bytes) -> bool:
    """True for HTML: by the Content-Type header, sniffing the body only when
    the header is absent or says nothing (``application/octet-stream``, …)."""
    media = _media_type(content_type)
    if media in _HTML_TYPES:
        return True
    if media not in _AMBIGUOUS_TYPES:
        return False
    head = body[:512].lstrip(b"\xef\xbb\xbf").lstrip(b" \t\n\r\x0c")
    return _HTML_SNIFF.match(head) is not None


# ---------------------------------------------------------------- headers


def _header_values(headers: Mapping[str, str] | Any, name: str) -> list[str]:
    """All values of one header, from a plain mapping (any key case) or a multidict."""
    if not headers:
        return []
    getall = getattr(headers, "getall", None)
    if getall is not None:
        try:
            return [str(v) for v in getall(name, [])]
        except Exception:
            pass
    name = name.lower()
    return [str(v) for k, v in headers.items() if isinstance(k, str) and k.lower() == name]


_VALUED_RULES = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
_TOKEN_SPLIT = re.compile(r"[\s,]+")


def _apply_rules(tokens, state: list[bool]) -> None:
    for token in tokens:
        if token == "noindex":
            state[0] = True
        elif token == "nofollow":
            state[1] = True
        elif token == "none":
            state[0] = state[1] = True


def _x_robots_tag(values: list[str], agent: str, state: list[bool]) -> None:
    """Google's X-Robots-Tag syntax: comma-separated rules, optionally behind
    ``agent:``; rules after an agent prefix apply to that agent only."""
    for value in values:
        scope = None
        for part in value.lower().split(","):
            name, sep, rest = part.partition(":")
            if sep and name.strip() not in _VALUED_RULES:
                scope, part = name.strip(), rest
            if scope is None or (scope and scope == agent):
                _apply_rules(part.split(), state)


_LINK_ITEM = re.compile(r"<([^>]*)>([^<]*)")
_LINK_REL = re.compile(r"(?:^|;)\s*rel\s*=\s*(?:\"([^\"]*)\"|([^\s;,\"]+))", re.I)


def _link_header_canonical(values: list[str]) -> str | None:
    for value in values:
        for target, params in _LINK_ITEM.findall(value):
            m = _LINK_REL.search(params)
            if m and "canonical" in (m.group(1) or m.group(2) or "").lower().split():
                return target.strip()
    return None


# ---------------------------------------------------------------- charset

# Labels Python does not know but browsers do.
_LABELS = {"windows-874": "cp874", "x-sjis": "cp932", "x-gbk": "gb18030", "x-euc-jp": "euc_jp",
           "ks_c_5601-1987": "cp949", "unicode-1-1-utf-8": "utf-8", "x-mac-roman": "mac_roman"}
# Python codec -> the decoder browsers use for that label (WHATWG Encoding Standard).
_WHATWG = {"iso8859-1": "cp1252", "ascii": "cp1252", "iso8859-9": "cp1254", "iso8859-11": "cp874",
           "tis-620": "cp874", "gb2312": "gb18030", "gbk": "gb18030", "euc_kr": "cp949",
           "shift_jis": "cp932", "utf-16": "utf-16-le"}
_UNSAFE = frozenset({"utf-7", "unicode-escape", "raw-unicode-escape", "idna", "punycode", "undefined"})
_NAMES = {"cp932": "shift_jis", "cp949": "euc-kr", "cp874": "windows-874", "mac-roman": "macintosh",
          "utf-16-le": "utf-16le", "utf-16-be": "utf-16be", "utf-8-sig": "utf-8"}
# Legacy encodings still seen on the web, down to ~0.01 % of sites (W3Techs
# character-encoding survey). Detection tries these first: left free,
# charset-normalizer takes Western European windows-1252 pages for mac_latin2
# or windows-1257 (measured: 9 of 51 samples wrong unrestricted, 4 restricted).
_WEB_ENCODINGS = [
    "cp1252", "cp1251", "shift_jis", "cp932", "gb18030", "gb2312", "gbk", "euc_kr", "cp949", "euc_jp",
    "cp1250", "iso8859_2", "big5", "cp1254", "iso8859_9", "cp1256", "iso8859_15", "cp874", "cp1253",
    "cp1255", "koi8_r",
]
# A sample cut inside a multi-byte character fails every multi-byte candidate:
# cut after the last byte that is never part of one (< 0x30 or 0x3A-0x3F).
_SAFE_CUT = re.compile(rb"[\x00-\x2f\x3a-\x3f][^\x00-\x2f\x3a-\x3f]{0,1024}\Z")
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_LABEL_OK = re.compile(r"[A-Za-z0-9_.:\-]{1,40}")
_META_CHARSET = re.compile(rb"<meta\b[^>]{0,1024}?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:\-]{1,40})", re.I)
_XML_DECL = re.compile(rb"<\?xml\b[^>]{0,256}?encoding\s*=\s*[\"']([A-Za-z0-9_.:\-]{1,40})", re.I)
_CHARSET_PARAM = re.compile(r";\s*charset\s*=\s*[\"']?\s*([^\s;\"']+)", re.I)


def _codec(label: str | None) -> str | None:
    """The Python codec browsers would use for a charset label, or None."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    if not _LABEL_OK.fullmatch(label):
        return None
    label = _LABELS.get(label, label)
    try:
        name = codecs.lookup(label).name
        b"a".decode(name, "replace")  # refuses non-text codecs (base64, rot13, …)
    except Exception:
        return None
    name = _WHATWG.get(name, name)
    return None if name in _UNSAFE else name


def _charset_name(codec: str) -> str:
    name = codecs.lookup(codec).name
    if name in _NAMES:
        return _NAMES[name]
    if re.fullmatch(r"cp125\d", name):
        return "windows-" + name[2:]
    if name.startswith("iso8859-"):
        return "iso-8859-" + name[8:]
    return name.replace("_", "-")


def _detect(sample: bytes, whole: bool) -> str | None:
    """charset-normalizer's guess for a sample, web encodings first."""
    if whole:
        cuts = [sample]
    elif m := _SAFE_CUT.search(sample):
        cuts = [sample[: m.start() + 1]]
    else:  # no ASCII near the end (CJK text): drop up to 3 bytes of a cut character
        cuts = [sample[: len(sample) - k] for k in range(4)]
    for isolation in (_WEB_ENCODINGS, None):
        guesses = [charset_normalizer.from_bytes(cut, cp_isolation=isolation).best() for cut in cuts]
        guesses = [g for g in guesses if g is not None]
        if guesses:
            # a multi-byte decoder that accepts the sample beats a single-byte one,
            # which accepts anything (charset-normalizer scores both 0 chaos on CJK)
            return min(guesses, key=lambda g: (g.chaos, not is_multi_byte_encoding(g.encoding))).encoding
    return None


def _sniff_codec(body: bytes, declared: str | None, conf: Section) -> tuple[str, int]:
    """(codec, bytes of BOM to skip)."""
    for bom, codec in _BOMS:
        if body.startswith(bom):
            return codec, len(bom)
    codec = _codec(declared)
    if codec:
        return codec, 0
    head = body[: conf.charset_prescan_bytes]
    m = _META_CHARSET.search(head) or _XML_DECL.search(head)
    codec = _codec(m.group(1).decode("ascii")) if m else None
    if codec:
        return ("utf-8" if codec.startswith(("utf-16", "utf-32")) else codec), 0
    try:
        codecs.getincrementaldecoder("utf-8")().decode(body, final=False)  # a cut last character is fine
        return "utf-8", 0
    except UnicodeDecodeError:
        pass
    try:
        limit = conf.charset_detect_bytes
        codec = _codec(_detect(body[:limit], whole=len(body) <= limit))
    except Exception:
        codec = None
    return codec or "cp1252", 0


def _decode(body: bytes, declared: str | None, conf: Section) -> tuple[str, str]:
    codec, skip = _sniff_codec(body, declared, conf)
    try:
        text = body[skip:].decode(codec, "replace")
    except Exception:
        codec, text = "cp1252", body.decode("cp1252", "replace")
    return text, _charset_name(codec)


# ---------------------------------------------------------------- tree helpers

def _collapse(text: str) -> str:
    """Whitespace runs as one space, trimmed (``str.split`` and ``re``'s ``\\s``
    agree on what is whitespace: ``Py_UNICODE_ISSPACE``)."""
    return " ".join(text.split())


def _tokens(value: str | None) -> list[str]:
    return value.lower().split() if value else []


def _in_head(el) -> bool:
    return any(a.tag == "head" for a in el.iterancestors())


def _head_facts(root, agent: str, state: list[bool]) -> tuple[str | None, str | None, str | None]:
    """(title, base href, canonical href) and meta robots into ``state``."""
    title = base = canonical = None
    for el in root.iter("title", "base", "link", "meta"):
        tag = el.tag
        if tag == "meta":
            name = (el.get("name") or "").strip().lower()
            if name == "robots" or (name and name == agent):
                _apply_rules(_TOKEN_SPLIT.split((el.get("content") or "").lower()), state)
        elif tag == "title":
            if title is None and not any(a.tag == "svg" for a in el.iterancestors()):
                title = "".join(el.itertext())
        elif tag == "base":
            if base is None and el.get("href") is not None:
                base = el.get("href")
        elif canonical is None and "canonical" in _tokens(el.get("rel")) and el.get("href") and _in_head(el):
            canonical = el.get("href")
    return title, base, canonical


_OTHER_SCHEME = re.compile(r"(?!https?:)[a-z][a-z0-9+.\-]*:", re.I)  # mailto:, javascript:, data:, …


class _Links:
    """Normalised, deduplicated outlinks in order, with a per-href cache."""

    def __init__(self, normalizer, base: str, own: str | None, conf: Section):
        self.normalizer, self.base, self.own = normalizer, base, own
        self.cap, self.budget = conf.max_outlinks_per_page, conf.max_links_examined
        self.cache: dict[str, str | None] = {}
        self.index: dict[str, Outlink] = {}
        self.items: list[Outlink] = []

    def full(self) -> bool:
        return len(self.items) >= self.cap or len(self.cache) >= self.budget

    def add(self, href: str, kind: str, nofollow: bool) -> str | None:
        href = href.strip()
        if href in self.cache:
            url = self.cache[href]
        else:
            url = None
            if href and not href.startswith("#") and not _OTHER_SCHEME.match(href):
                try:
                    url = self.normalizer.normalize(href, self.base)
                except Exception:
                    pass
            self.cache[href] = url
        if url is None or url == self.own:
            return url
        seen = self.index.get(url)
        if seen is not None:
            seen.nofollow = seen.nofollow and nofollow
        elif len(self.items) < self.cap:
            link = Outlink(url=url, url_fp=fingerprint(url), kind=kind, nofollow=nofollow)
            self.index[url] = link
            self.items.append(link)
        return url


_LINK_ATTR = {"a": "href", "area": "href", "frame": "src", "iframe": "src"}


def _collect_links(root, links: _Links) -> None:
    for el in root.iter("a", "area", "frame", "iframe"):
        if links.full():
            return
        value = el.get(_LINK_ATTR[el.tag])
        if value is not None:
            links.add(value, el.tag, "nofollow" in _tokens(el.get("rel")))


# ---------------------------------------------------------------- main text

_DROP_TAGS = frozenset({
    "script", "style", "noscript", "template", "svg", "math", "nav", "header", "footer", "aside",
    "button", "select", "option", "textarea", "input", "label", "iframe", "frame", "frameset", "object",
    "embed", "canvas", "audio", "video", "dialog", "menu", "time", "head", "title", "meta", "link",
})
_BLOCK_TAGS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details", "dialog",
    "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "h1", "h2", "h3", "h4", "h5", "h6",
    "header", "hr", "html", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody",
    "td", "tfoot", "th", "thead", "tr", "ul",
})
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_NEVER_DROP = frozenset({"html", "body", "main"})
_BOILER_NAME = re.compile(
    r"(?:^|[\s_-])(?:nav|navbar|navigation|menu|menubar|sidebar|footer|cookies?|consent|banner|"
    r"breadcrumbs?|share|sharing|social|comments?|related|advert|advertisement|ads|promo|newsletter|"
    r"popup|modal|byline|dateline|date|timestamp|skip-link)(?:$|[\s_-])"
)
_BOILER_ROLES = frozenset({"navigation", "menu", "menubar", "banner", "contentinfo", "complementary",
                           "search", "dialog", "alertdialog", "toolbar"})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden")
_HOLDS_CONTENT = etree.XPath("boolean(.//main | .//article | .//*[@role='main'])")


def _attr_boilerplate(el) -> bool:
    """A <form>, or boilerplate by class/id/role, or hidden -- holding no <main>/<article>.

    These rules can misfire (ASP.NET wraps whole pages in a <form>, themes put
    "has-sidebar" on wrappers), hence the content check and the second pass
    without them in :func:`_main_text`.
    """
    attrib = el.attrib
    tag = el.tag
    if tag in _NEVER_DROP or attrib.get("role", "").strip().lower() == "main":
        return False
    if tag == "article" and not any(a.tag == "article" for a in el.iterancestors()):
        return False
    hit = (
        tag == "form"
        or "hidden" in attrib
        or attrib.get("aria-hidden", "").strip().lower() == "true"
        or bool(_HIDDEN_STYLE.search(attrib.get("style", "").lower()))
        or attrib.get("role", "").strip().lower() in _BOILER_ROLES
        or bool(_BOILER_NAME.search(f"{attrib.get('class', '')} {attrib.get('id', '')}".lower()))
    )
    return hit and not _HOLDS_CONTENT(el)


# The attributes :func:`_attr_boilerplate` reads: for an element with none of
# them that is not a <form> it is false, so this cheap test (one C call for the
# names, no attribute proxy) guards it.
_RULE_ATTRS = frozenset({"class", "id", "role", "hidden", "aria-hidden", "style"})


def _is_boilerplate(el, attr_rules: bool) -> bool:
    """Dropped by tag; or, with ``attr_rules``, by :func:`_attr_boilerplate`."""
    tag = el.tag
    if not isinstance(tag, str):  # comments, processing instructions, entities
        return True
    if tag in _DROP_TAGS:
        return True
    return attr_rules and (tag == "form" or not _RULE_ATTRS.isdisjoint(el.keys())) and _attr_boilerplate(el)


def _blocks(container, attr_rules: bool) -> list[tuple[str, int, float, bool]]:
    """Text blocks (text, words, link density, is heading) in document order.

    One pass of ``iterwalk``; a block's text pieces gather in ``parts`` and
    :func:`_block` turns them into a block when a block-level element starts
    or ends. (Hot: the per-node work is inlined, no closures.)
    """
    blocks: list[tuple[str, int, float, bool]] = []
    parts: list[str] = []
    link_chars = 0     # characters of the current block inside <a> (each piece stripped)
    heading = False    # the current block opened at a heading
    in_link = 0
    walker = etree.iterwalk(container, events=("start", "end"))
    skipped = None
    for event, el in walker:
        tag = el.tag
        if event == "start":
            if el is not container and _is_boilerplate(el, attr_rules):
                walker.skip_subtree()
                skipped = el
                continue
            if tag in _BLOCK_TAGS:
                if parts:
                    _block(parts, link_chars, heading, blocks)
                    parts = []
                link_chars = 0
                heading = tag in _HEADINGS
            elif tag == "br":
                parts.append(" ")
            elif tag == "a":
                in_link += 1
            text = el.text
        else:
            if el is skipped:
                skipped = None
            elif tag == "a":
                in_link -= 1
            if tag in _BLOCK_TAGS:
                if parts:
                    _block(parts, link_chars, heading, blocks)
                    parts = []
                link_chars = 0
                heading = False
            if el is container:
                continue
            text = el.tail
        if text:
            parts.append(text)
            if in_link:
                link_chars += len(text.strip())
    if parts:
        _block(parts, link_chars, heading, blocks)
    return blocks


def _block(parts: list[str], link_chars: int, heading: bool, blocks: list) -> None:
    """Append the block made of ``parts`` (whitespace collapsed) unless it has no text."""
    words = "".join(parts).split()
    if words:
        text = " ".join(words)
        blocks.append((text, len(words), min(1.0, link_chars / len(text)), heading))


def _classify(blocks, min_words: int, max_density: float) -> list[str]:
    """Boilerpipe's shallow features with jusText's context rule (module docstring)."""
    kind = ["bad" if d > max_density else ("good" if w >= min_words else "short") for _, w, d, _ in blocks]
    prev: list[str | None] = []  # nearest non-short kind before each block
    last = None
    for k in kind:
        prev.append(last)
        last = k if k != "short" else last
    keep = [k == "good" for k in kind]
    nxt = None  # nearest non-short kind after the block, scanning backwards
    for i in range(len(kind) - 1, -1, -1):
        if kind[i] == "short" and nxt == "good" and (prev[i] == "good" or blocks[i][3]):
            keep[i] = True
        nxt = kind[i] if kind[i] != "short" else nxt
    return [b[0] for b, k in zip(blocks, keep) if k]


_ROLE_MAIN = etree.XPath(".//*[@role='main']")


def _main_text(root, conf: Section) -> str:
    body = root.find("body")
    body = root if body is None else body
    max_density = conf.max_link_density
    main = next(body.iter("main"), None)  # the first <main>, else the first role=main
    mains = [main] if main is not None else _ROLE_MAIN(body)[:1]
    articles = None  # the outermost <article>s, found when first needed
    for attr_rules in (True, False):
        texts = _container_texts(mains, body, attr_rules, max_density)
        if not texts:
            if articles is None:
                articles = [el for el in body.iter("article") if not any(a.tag == "article" for a in el.iterancestors())]
            texts = _container_texts(articles, body, attr_rules, max_density)
        if texts:
            return "\n".join(texts)
        blocks = _blocks(body, attr_rules)
        texts = _classify(blocks, conf.min_block_words, max_density)
        if not texts:
            texts = [b[0] for b in blocks if b[2] <= max_density] or [b[0] for b in blocks]
        if texts:
            return "\n".join(texts)
    return ""


def _container_texts(containers, body, attr_rules: bool, max_density: float) -> list[str]:
    """The blocks of these containers not dominated by links, skipping containers inside boilerplate."""
    return [
        b[0] for c in containers if not _inside_boilerplate(c, body, attr_rules)
        for b in _blocks(c, attr_rules) if b[2] <= max_density
    ]


def _inside_boilerplate(el, body, attr_rules: bool) -> bool:
    for a in el.iterancestors():
        if a is body:
            return False
        if _is_boilerplate(a, attr_rules):
            return True
    return False


# ---------------------------------------------------------------- parse


def parse(
    body: bytes,
    *,
    url: str,
    content_type: str | None,
    headers: Mapping[str, str],
    normalizer,
    parse_conf: Section,
    agent_name: str,
) -> ParseResult:
    """Parse one fetched body (see the module docstring). Never raises.

    ``content_type`` is the Content-Type (with or without parameters); when it
    is None or carries no charset, the ``Content-Type`` in ``headers`` is used.
    ``normalizer`` is a :class:`crawl_udfs.url_normalize.UrlNormalizer`.
    """
    agent = (agent_name or "").strip().lower()
    try:
        header_ct = (_header_values(headers, "content-type") or [None])[0]
        ctype = content_type or header_ct
        html = is_html(ctype, body or b"")
    except Exception:
        header_ct, ctype, html = None, None, False
    result = ParseResult(is_html=html)
    try:
        state = [False, False]
        _x_robots_tag(_header_values(headers, "x-robots-tag"), agent, state)
        header_canonical = _link_header_canonical(_header_values(headers, "link"))
        own = _safe_normalize(normalizer, url, None)
        page = own or url
        title = base_href = html_canonical = None
        root = None
        if html and body:
            m = _CHARSET_PARAM.search(content_type or "") or _CHARSET_PARAM.search(header_ct or "")
            text, result.charset = _decode(body, m.group(1) if m else None, parse_conf)
            root = _parse_tree(text)
            if root is not None:
                title, base_href, html_canonical = _head_facts(root, agent, state)
        base = (_safe_normalize(normalizer, base_href, page) if base_href else None) or page
        links = _Links(normalizer, base, own, parse_conf)
        if html_canonical:
            result.canonical = links.add(html_canonical, "canonical", False)
        if result.canonical is None and header_canonical:  # relative to the page, not <base>
            absolute = _safe_normalize(normalizer, header_canonical, page)
            result.canonical = links.add(absolute, "canonical", False) if absolute else None
        if root is not None:
            _collect_links(root, links)
            result.main_text = _main_text(root, parse_conf)
        if title is not None:
            result.title = _collapse(title)[: parse_conf.max_title_chars] or None
        result.noindex, result.nofollow = state
        if result.nofollow:
            for link in links.items:
                link.nofollow = True
        result.outlinks = links.items
    except Exception:  # a bug or an lxml surprise must not kill the fetch task
        pass
    return result


def _safe_normalize(normalizer, url: str | None, base: str | None) -> str | None:
    try:
        return normalizer.normalize(url, base) if url else None
    except Exception:
        return None


def _parse_tree(text: str):
    parser = etree.HTMLParser(
        recover=True, huge_tree=False, remove_comments=True, remove_pis=True,
        no_network=True, default_doctype=False, encoding="utf-8",
    )
    try:
        return etree.fromstring(text.encode("utf-8", "replace"), parser=parser)
    except Exception:  # nothing libxml2 can recover
        return None
