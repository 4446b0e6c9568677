"""Pages of realistic size: a test-web page wrapped in the markup a real site carries (knob ``realistic_pages``).

A real article page is tens of KB, most of it not the article: a ``<head>`` of meta tags,
preloads, JSON-LD and inline CSS; inline and external scripts; a mega-menu and a footer of
a hundred-odd links repeated on every page of the site; wrappers nested ten deep; related
article cards with ``srcset`` images; comments; a cookie banner; entities everywhere. This
module puts that around :func:`tests.testweb.render.html`'s page, so the page's own links,
text, charset declaration and ``<main>`` stay what the plan says (a crawler's links are a
superset, its main text holds the page's text), and the extra bytes look like the web's.

Deterministic: the site-wide parts come from a fixed seed, the per-page parts from the
page's path. Bodies of pages that never change (no timestamp, no session id) are cached,
so the server's own CPU per request stays close to that of ordinary pages.
"""

from __future__ import annotations

import random
from html import escape

from . import render
from .model import Page
from .sites import VOCAB, prose, words

_SECTIONS = ("world", "business", "tech", "science", "culture", "sport", "travel", "opinion")
_ENTITIES = ("&amp;", "&nbsp;", "&#8217;", "&mdash;", "&eacute;", "&laquo;", "&raquo;", "&#x2019;", "&copy;")
_cache: dict[int, tuple[Page, bytes, str]] = {}


def _js(rng: random.Random, n: int) -> str:
    """Minified-looking script text (``<``, ``&&``, strings, no ``</script>``)."""
    parts = [f"var {w}=function(e,t){{if(e&&t.length<{rng.randint(2, 99)}){{return e['{w}']||null}}"
             f"for(var i=0;i<t.length;i++){{e.push(t[i]*{rng.randint(1, 9)})}};return e}};"
             for w in rng.choices(VOCAB, k=n)]
    return "".join(parts)


def _css(rng: random.Random, n: int) -> str:
    return "".join(f".{w}{{margin:{rng.randint(0, 24)}px;color:#{rng.randint(0, 0xFFFFFF):06x};display:flex}}"
                   f"@media (max-width:{rng.randint(400, 1200)}px){{.{w} a:hover{{opacity:.{rng.randint(1, 9)}}}}}"
                   for w in rng.choices(VOCAB, k=n))


def _para(rng: random.Random, n: int) -> str:
    """A paragraph with inline markup, entities and a link or two."""
    ws = prose(rng, n).split(" ")
    for i in range(3, len(ws), rng.randint(9, 17)):
        r = rng.random()
        if r < 0.3:
            ws[i] = f"<strong>{ws[i]}</strong>"
        elif r < 0.55:
            ws[i] = f"<em>{ws[i]}</em>{rng.choice(_ENTITIES)}"
        elif r < 0.7:
            ws[i] = f'<a href="/{rng.choice(_SECTIONS)}/{ws[i].strip(".").lower()}-{rng.randint(1, 9999)}.html">{ws[i]}</a>'
        else:
            ws[i] = f"{ws[i]}{rng.choice(_ENTITIES)}"
    return f"<p>{' '.join(ws)}</p>"


def _site_chrome() -> tuple[str, str, str, str]:
    """(extra head, header, footer, trailing scripts): the same on every page, like a real site's."""
    rng = random.Random("realistic-site-chrome")
    metas = "".join(f'<meta property="og:{w}" content="{words(rng, 6)}">' for w in rng.choices(VOCAB, k=8))
    head = (f'<meta name="viewport" content="width=device-width, initial-scale=1">{metas}'
            + "".join(f'<link rel="preload" href="/static/{w}.{rng.randint(1000, 9999)}.css" as="style">'
                      for w in rng.choices(VOCAB, k=5))
            + f"<style>{_css(rng, 60)}</style><script>{_js(rng, 40)}</script>"
            '<script async src="https://www.googletagmanager.example/gtag/js?id=G-XYZ"></script>')
    menu = "".join(
        f'<li class="menu-item has-children"><a href="/{s}/">{s.title()}</a><div class="dropdown"><ul>'
        + "".join(f'<li><a href="/{s}/{w}/" data-track="nav-{s}-{w}">{w.title()}</a></li>'
                  for w in rng.choices(VOCAB, k=10)) + "</ul></div></li>" for s in _SECTIONS)
    header = (f'<div class="cookie-consent" role="dialog"><p>We use cookies{rng.choice(_ENTITIES)} '
              f'{words(rng, 30)}</p><button>Accept</button></div><div class="site-header"><div class="container">'
              f'<a class="logo" href="/"><img src="/static/logo.svg" alt="logo" width="120" height="40"></a>'
              f'<ul class="main-menu">{menu}</ul><form class="search" action="/search"><input name="q"></form>'
              "</div></div>")
    columns = "".join(
        f'<div class="footer-col"><h4>{s.title()}</h4><ul>'
        + "".join(f'<li><a href="/{s}/{w}.html">{words(rng, 2)}</a></li>' for w in rng.choices(VOCAB, k=12))
        + "</ul></div>" for s in _SECTIONS[:5])
    social = "".join(f'<a href="https://{n}.example/share?u=%2F&amp;ref=site" rel="noopener">{n}</a>'
                     for n in ("facebook", "twitter", "linkedin", "reddit", "mastodon"))
    footer = f'<div class="site-footer"><div class="footer-grid">{columns}</div><div class="social">{social}</div></div>'
    scripts = "".join(f"<script>{_js(rng, 15)}</script>" for _ in range(4))
    return head, header, footer, scripts


_CHROME = _site_chrome()


def _page_parts(page: Page) -> tuple[str, str]:
    """(article extras inside <main>, related cards + comments after it), from the page's path (its
    ``dup_group`` when it has one, so copies of one article stay copies: Plan.dup_clusters)."""
    rng = random.Random("realistic:" + (page.dup_group or page.path))
    ld = f'<script type="application/ld+json">{{"@type":"NewsArticle","headline":"{escape(page.title)}",' \
         f'"keywords":"{words(rng, 20)}"}}</script>'
    body = "".join(_para(rng, rng.randint(60, 120)) for _ in range(rng.randint(6, 9)))
    figure = (f'<figure><img src="/img/{rng.randint(1, 10**6)}.jpg" srcset="/img/a-480.jpg 480w, /img/a-960.jpg 960w" '
              f'alt="{words(rng, 5)}"><figcaption>{words(rng, 12)}</figcaption></figure>')
    cards = "".join(
        f'<div class="card"><a href="/{rng.choice(_SECTIONS)}/{w}-{rng.randint(1, 99999)}.html?utm_source=related">'
        f'<img src="/img/{w}-320.jpg" loading="lazy" alt=""><h3>{words(rng, 7).capitalize()}</h3></a>'
        f"<p>{prose(rng, 25)}</p></div>" for w in rng.choices(VOCAB, k=12))
    comments = "".join(f'<li class="comment"><div class="comment-meta"><a href="/users/{w}">{w}</a></div>'
                       f"<div class=\"comment-body\">{_para(rng, rng.randint(15, 40))}</div></li>"
                       for w in rng.choices(VOCAB, k=8))
    after = f'<div class="related"><h2>Related</h2>{cards}</div><div class="comments"><ol>{comments}</ol></div>'
    return ld + figure + body, after


def html(page: Page, sid: str = "", now: float | None = None) -> tuple[bytes, str]:
    """(body, Content-Type): :func:`render.html`'s page with a real site's markup around and inside it."""
    hit = _cache.get(id(page))
    if hit is not None:
        return hit[1], hit[2]
    body, ctype = render.html(page, sid=sid, now=now)
    cs = page.charset or "utf-8"
    bom = render.BOMS.get(cs, b"") if page.declared == "bom" else b""
    text = body[len(bom):].decode(cs)
    head, header, footer, scripts = _CHROME
    inside, after = _page_parts(page)
    wrap = '<div class="container"><div class="row"><div class="col-12 col-lg-8"><div class="content-wrapper">'
    text = (text.replace("</head>", head + "</head>", 1).replace("<body>", "<body>" + header + wrap, 1)
            .replace("</main>", inside + "</main>" + after + "</div></div></div></div>", 1)
            .replace("</body>", footer + scripts + "</body>", 1))
    out = bom + text.encode(cs, "xmlcharrefreplace")
    if not (page.volatile or sid):
        _cache[id(page)] = (page, out, ctype)
    return out, ctype
