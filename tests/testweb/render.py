"""Turn a planned :class:`~tests.testweb.model.Page` into the bytes and Content-Type the server sends.

Boilerplate (nav, sidebar, footer) depends on the page's ``style``, so mirrors
of one article differ only outside ``<main>``. Every link of the page appears
exactly once, in its zone, with its ``href`` HTML-escaped (``&`` as ``&amp;``);
``{sid}`` in an href becomes the per-request session id, which also picks the
rotating ad of a page with ``ad`` (a ``div.advert`` after the first paragraph
of ``<main>``). A template's ``notice`` follows the page's own text inside
``<main>``. The charset is declared where ``page.declared`` says and nowhere else.
"""

from __future__ import annotations

import random
import time
from html import escape

from .model import Link, Page

ADS = ("Save 20 % on garden furniture this weekend only", "New: the phone that lasts a whole week",
       "Flights to the coast from 39, book before Friday", "Learn a language in ten minutes a day",
       "Your dream kitchen, made to measure and fitted in a week", "Switch your energy supplier in five minutes")
BOILERPLATE = {
    "site": ("Home | Sections | About us | Contact", "Popular this week: nothing unusual.",
             "Copyright the site owners. All rights reserved."),
    "origin": ("Front page | World | Business | Sport | Culture", "Most read: the weather, the markets.",
               "The Daily Origin. Subscribe for our newsletter. Privacy policy. Terms of use."),
    "mirror-a": ("MirrorNews portal: Headlines, Trending, Videos, Podcasts", "Sponsored: buy more things today.",
                 "Aggregated by MirrorNews. Content belongs to its owners. Contact the webmaster."),
    "mirror-b": ("Stories Hub / latest / archive / random", "Related stories appear here sometimes.",
                 "Stories Hub republishes stories under licence. Cookies are used."),
    "print": ("", "", ""),
    "bare": ("", "", ""),
}
LABELS = {"iso-8859-1": "ISO-8859-1", "windows-1252": "windows-1252", "shift_jis": "Shift_JIS",
          "koi8-r": "KOI8-R", "utf-8": "utf-8", "utf-16-le": "utf-16le"}
BOMS = {"utf-8": b"\xef\xbb\xbf", "utf-16-le": b"\xff\xfe"}


def _anchor(link: Link, rng: random.Random) -> str:
    href = escape(link.href, quote=True)
    text = escape(link.url.rsplit("/", 2)[-2 if link.url.endswith("/") else -1] if link.url else link.form) or "link"
    rel = f' rel="{link.rel}"' if link.rel else ""
    if link.tag == "area":
        return f'<area shape="rect" coords="0,0,{rng.randint(5, 50)},10" href="{href}" alt="{text}"{rel}>'
    if link.tag == "iframe":
        return f'<iframe src="{href}" title="{text}"></iframe>'
    if link.tag == "img":
        return f'<img src="{href}" alt="{text}">'
    if link.tag == "link":
        return f'<link rel="{link.rel}" href="{href}">'
    return f'<a href="{href}"{rel}>{text}</a>'


def html(page: Page, sid: str = "", now: float | None = None) -> tuple[bytes, str]:
    """(body, Content-Type) of an HTML page."""
    rng = random.Random(page.path)
    cs, declared = page.charset or "utf-8", page.declared
    label = LABELS.get(cs, cs)
    links = [link if "{sid}" not in link.href else
             Link(link.href.replace("{sid}", sid), link.url, link.tag, link.rel, link.form, link.zone, link.bait)
             for link in page.links]
    head = []
    if declared == "meta":
        head.append(f'<meta charset="{label}">')
    elif declared == "http-equiv":
        head.append(f'<meta http-equiv="Content-Type" content="text/html; charset={label}">')
    elif declared == "header-vs-meta":
        head.append('<meta charset="utf-8">')
    head.append(f"<title>{escape(page.title)}</title>")
    if page.base:
        head.append(f'<base href="{escape(page.base)}">')
    if page.meta_robots:
        head.append(f'<meta name="robots" content="{page.meta_robots}">')
    head += [_anchor(link, rng) for link in links if link.zone == "head"]
    nav_text, aside, foot = BOILERPLATE.get(page.style, BOILERPLATE["site"])
    nav = " | ".join(_anchor(link, rng) for link in links if link.zone == "nav")
    main_links = [link for link in links if link.zone == "main"]
    items = "\n".join(f"<li>{_anchor(link, rng)}</li>" for link in main_links if link.tag == "a")
    areas = "".join(_anchor(link, rng) for link in main_links if link.tag == "area")
    embeds = "\n".join(_anchor(link, rng) for link in main_links if link.tag in ("iframe", "img"))
    footer_links = " ".join(_anchor(link, rng) for link in links if link.zone == "footer")
    sentences = page.text.split(". ")
    paras = [f"<p>{escape('. '.join(sentences[i:i + 5]))}</p>" for i in range(0, len(sentences), 5)]
    if page.ad:
        ad = random.Random(f"ad/{sid}/{now}").choice(ADS)
        paras.insert(1, f'<div class="advert"><small>Advertisement</small> <b>{escape(ad)}</b></div>')
    if page.notice:
        paras.append(f'<div class="notice"><h2>About this page</h2><p>{escape(page.notice)}</p></div>')
    stamp = ""
    if page.volatile:
        t = time.time() if now is None else now
        stamp = f'<p class="stamp">Generated at {time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))}.{int(t % 1 * 1e6):06d}Z</p>'
    parts = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", *head, "</head>", "<body>",
        f"<header><nav>{nav}</nav><p>{nav_text}</p>{stamp}</header>" if (nav or nav_text or stamp) else "",
        f"<main><h1>{escape(page.title)}</h1>", "\n".join(paras),
        f"<ul>\n{items}\n</ul>" if items else "",
        f'<map name="m">{areas}</map><img usemap="#m" alt="map" width="50" height="10">' if areas else "",
        embeds, "</main>",
        f"<aside><p>{aside}</p></aside>" if aside else "",
        f"<footer><p>{foot}</p>{footer_links}</footer>", "</body>", "</html>", "",
    ]
    text = "\n".join(p for p in parts if p)
    body = BOMS[cs] + text.encode(cs) if declared == "bom" else text.encode(cs)
    ctype = f"text/html; charset={label}" if declared in ("header", "header-vs-meta") else "text/html"
    return body, ctype


def deep_html(depth: int) -> bytes:
    return (b'<!DOCTYPE html><html><head><title>deep</title></head><body><a href="/top.html">top</a>'
            + b"<div>" * depth + b'<a href="/deepest.html">deepest</a>' + b"</div>" * depth + b"</body></html>")


def many_links(page: Page) -> bytes:
    items = "".join(f'<li><a href="{link.href}">{i}</a></li>' for i, link in enumerate(page.links))
    return f"<!DOCTYPE html><html><head><title>many links</title></head><body><ul>{items}</ul></body></html>".encode()


def small(message: str) -> bytes:
    return f"<!DOCTYPE html><html><head><title>{escape(message)}</title></head><body><p>{escape(message)}</p></body></html>".encode()
