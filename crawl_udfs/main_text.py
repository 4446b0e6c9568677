"""The main text of an HTML page, which SimHash fingerprints.

Guarantee: every walk over the tree is iterative and linear in its size.

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

import re

import lxml.etree as etree

from crawl_udfs.config import Section


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
    without them in :func:`main_text`.
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


def main_text(root, conf: Section) -> str:
    """The main text of a parsed document (module docstring); "" when there is none."""
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
