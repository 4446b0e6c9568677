"""The deterministic plan of the test web: which hosts exist, where, and what each serves.

``build_plan(n_hosts, seed, port, kinds, knobs)`` gives the same :class:`Plan`
in every process (the server and the tests build it independently), so tests
compute expectations without crawling. Every random choice comes from a
``random.Random`` seeded by a string (stable across runs and hash seeds), and a
host's pages are generated lazily on first use, so a plan of 400 hosts costs
almost nothing until a host is visited.

Every link a page carries is checked at generation time: its ``href`` resolved
against the page (or its ``<base>``) and normalised must equal the target the
plan meant, so the plan cannot drift from the HTML it serves.
"""

from __future__ import annotations

import os
import random
import re
import struct
import zlib
from dataclasses import dataclass, replace
from datetime import date, timedelta
from functools import cached_property
from math import exp, log
from urllib.parse import parse_qsl, urljoin, urlsplit

from . import robots
from .model import HTML_BEHAVIOURS, Knobs, Link, Page, normalize, split_target

KINDS = ("site", "robots", "trap", "dup", "hostile", "ssrf")
#: Kinds a plan has only when named (``kinds=[..., "sitemap"]``): the default plan stays as it was.
OPT_IN_KINDS = ("sitemap",)
CIDR = "127.10.0.0/16"
REFUSED_ADDRESS = "127.10.255.254"
BAIT_NAMES = {"intranet.bait.test": "127.66.0.1", "admin.bait.test": "127.0.0.1"}
BAIT_ADDRESSES = ("127.0.0.1", "127.66.0.1", "::1")
TOPICS = ("news", "shop", "blog", "wiki", "forum", "docs", "club", "travel", "food", "music")
ALWAYS_ALLOW = "allow-all"
SITE_ROBOTS = ("allow-all", "plain", "wildcard", "agent-group", "sitemap")

# (kind, variant, robots variant); the host is named f"{kind}-{variant}.test".
SPECIALS: tuple[tuple[str, str, str], ...] = (
    ("site", "linkforms", "allow-all"),
    ("site", "charsets", "allow-all"),
    *(("robots", v, v) for v in robots.VARIANTS),
    ("trap", "calendar", ALWAYS_ALLOW),
    ("trap", "session", ALWAYS_ALLOW),
    ("trap", "facets", ALWAYS_ALLOW),
    ("trap", "repeat", ALWAYS_ALLOW),
    ("trap", "deep", ALWAYS_ALLOW),
    ("dup", "origin", ALWAYS_ALLOW),
    ("dup", "mirror-a", ALWAYS_ALLOW),
    ("dup", "mirror-b", ALWAYS_ALLOW),
    *(("hostile", v, ALWAYS_ALLOW) for v in (
        "drip", "huge", "bombs", "redirects", "redirects-b", "throttle-seconds", "throttle-date",
        "flaky", "down", "hang", "reset", "badheaders", "deephtml", "manylinks", "refused")),
    ("ssrf", "links", ALWAYS_ALLOW),
    # opt-in (OPT_IN_KINDS): last, so the default plan's addresses do not move
    ("sitemap", "plain", "sitemap"),
    *(("sitemap", v, ALWAYS_ALLOW) for v in ("index", "gzip", "cap", "bomb", "foreign")),
)
#: URLs sitemap-cap.test's /sitemap.xml lists (a test sets sitemaps.max_urls below it).
SITEMAP_CAP_URLS = 60
_SM_NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
RAW_VARIANTS = ("reset", "badheaders")  # served by the raw socket server, not aiohttp
INFINITE = {("trap", "calendar"), ("trap", "facets"), ("trap", "repeat"), ("trap", "deep")}
ROBOTS_EXTRAS = ("/private/", "/private/ok.html", "/private/secret.html", "/members/", "/members/profile.html",
                 "/files/report-0.pdf", "/data/table-0.csv")
FORMS = ("root", "relative", "dot", "dotdot", "dotdot-excess", "absolute", "protocol-relative", "fragment",
         "tracking", "odd-case", "percent", "spaces")
TRACKING = ("utm_source=newsletter&utm_medium=email&utm_campaign=spring", "gclid=EAIaIQobChMI", "fbclid=IwAR2xYz",
            "utm_source=twitter")
CHARSET_COMBOS = (
    ("iso-8859-1", "header"), ("iso-8859-1", "meta"), ("iso-8859-1", "none"),
    ("windows-1252", "header"), ("windows-1252", "http-equiv"), ("windows-1252", "none"),
    ("windows-1252", "header-vs-meta"),
    ("shift_jis", "header"), ("shift_jis", "meta"), ("shift_jis", "none"),
    ("koi8-r", "header"), ("koi8-r", "http-equiv"), ("koi8-r", "none"),
    ("utf-8", "bom"), ("utf-8", "none"), ("utf-16-le", "bom"),
)
CHARSET_SAMPLES = {
    "iso-8859-1": "Café déjà vu, naïve façade, Grüße aus Köln, señor, smørrebrød à la crème brûlée.",
    "windows-1252": "“Smart quotes” — the € sign, œuvre, Šibenik, ‰ per mille… and ‘single’ ones.",
    "shift_jis": "日本語のテキストです。東京都は晴れ、桜が咲いています。漢字とひらがなとカタカナ。",
    "koi8-r": "Съешь же ещё этих мягких французских булок, да выпей чаю. Привет, мир!",
    "utf-8": "Grüße, 日本語のテキスト, Привет мир, ½ ¾ ✓ — plain UTF-8.",
    "utf-16-le": "UTF-16 with a BOM: Grüße, Привет, 日本語です。",
}
N_ARTICLES = 12  # articles shared by dup-origin and its mirrors
N_BRIEFS = 10    # dup-origin's short briefs in one heavy template: distinct pages, the scorer's negatives
COLORS = ("red", "green", "blue", "black", "white", "grey", "pink")
SIZES = ("xs", "s", "m", "l", "xl")
SORTS = ("price", "name", "new")
CHAIN_HOPS = 12
RAW_PAGES = ("/no-colon", "/bad-status", "/two-lengths", "/huge-header", "/lf-only", "/http09", "/bad-chunk",
             "/short-body", "/nul-header")

VERIFY_LINKS = os.environ.get("TESTWEB_VERIFY_LINKS") == "1"
_vocab_rng = random.Random("deltacrawl-testweb-vocabulary")
_SYL = ("ka", "lo", "mi", "ne", "ru", "ta", "ve", "so", "pi", "da", "fe", "gu", "zo", "ba", "chi", "or", "en",
        "al", "is", "um", "tri", "sel", "mon", "ark", "ple", "vin", "dor", "quo", "sha", "wex")
VOCAB = tuple(sorted({"".join(_vocab_rng.choice(_SYL) for _ in range(_vocab_rng.randint(2, 4)))
                      for _ in range(6000)}))


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(VOCAB, k=n))


def prose(rng: random.Random, n: int) -> str:
    ws, out, i = rng.choices(VOCAB, k=n), [], 0
    while i < n:
        k = 6 + int(rng.random() * 11)
        out.append(" ".join(ws[i:i + k]).capitalize() + ".")
        i += k
    return " ".join(out)


def address_of(index: int) -> str:
    return f"127.10.{index // 254}.{index % 254 + 1}"


# ------------------------------------------------------------------ hrefs


def _rel(target: str, base_dir: str) -> str:
    t = target.split("/")
    t_dirs, last = t[:-1], t[-1]
    b = base_dir.split("/")[:-1]
    i = 0
    while i < min(len(t_dirs), len(b)) and t_dirs[i] == b[i]:
        i += 1
    r = "../" * (len(b) - i) + "/".join(t_dirs[i:] + [last])
    if not r:
        return "./"
    if ":" in r.split("/", 1)[0]:
        r = "./" + r
    return r


def _oddcase(s: str, rng: random.Random) -> str:
    out = "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in s)
    return out if out != s.lower() else s.upper()


def href_for(form: str, target: str, base_url: str, host: str, port: int, rng: random.Random) -> str:
    """``target`` (a root-relative path) spelled in ``form``, resolving against ``base_url``."""
    base_path = urlsplit(base_url).path or "/"
    base_dir = base_path[: base_path.rfind("/") + 1]
    depth = base_dir.count("/") - 1
    if form == "root":
        return target
    if form == "absolute":
        return f"http://{host}:{port}{target}"
    if form == "protocol-relative":
        return f"//{host}:{port}{target}"
    if form == "odd-case":
        return f"{_oddcase('http', rng)}://{_oddcase(host, rng)}:{port}{target}"
    if form == "relative":
        return _rel(target, base_dir)
    if form == "dot":
        r = _rel(target, base_dir)
        return r if r.startswith(".") else "./" + r
    if form == "dotdot":
        return "../" * depth + target[1:] if depth > 0 else _rel(target, base_dir)
    if form == "dotdot-excess":
        return "../" * (depth + 2) + target[1:]
    if form == "fragment":
        return target + "#" + rng.choice(("top", "comments", "section-2", "main"))
    if form == "tracking":
        return target + ("&" if "?" in target else "?") + rng.choice(TRACKING)
    if form == "percent":
        head, _, seg = target.rpartition("/")
        for i, c in enumerate(seg):
            if c.isalpha():
                return f"{head}/{seg[:i]}%{ord(c):02{'x' if rng.random() < 0.5 else 'X'}}{seg[i + 1:]}"
        return target
    if form == "spaces":
        return "  " + target + " \n"
    raise ValueError(form)


def make_link(href: str, base_url: str, expect: str | None = None, **kw) -> Link:
    """A link whose ``url`` is what ``href`` resolves to; if ``expect`` is given it must be the same.

    ``expect`` is trusted as is unless :data:`VERIFY_LINKS` is set (the tests of the test web set it),
    which resolves and normalises every href and fails on any difference.
    """
    if expect is not None and not VERIFY_LINKS:
        return Link(href=href, url=expect, **kw)
    scheme = href.strip().split(":", 1)[0].lower() if ":" in href.strip().split("/", 1)[0] else "http"
    url = normalize(urljoin(base_url, href.strip())) if scheme in ("http", "https") else None
    if expect is not None and url != normalize(expect):
        raise AssertionError(f"plan bug: {href!r} from {base_url} gives {url}, meant {expect}")
    return Link(href=href, url=url, **kw)


# ------------------------------------------------------------------ files


def pdf_bytes(rng: random.Random) -> bytes:
    return (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\nstream\n"
            + rng.randbytes(rng.randint(200, 2000)) + b"\nendstream\n%%EOF\n")


def png_bytes(rng: random.Random, w: int = 4, h: int = 4) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    raw = b"".join(b"\x00" + rng.randbytes(3 * w) for _ in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def csv_bytes(rng: random.Random) -> bytes:
    rows = ["id,name,value"] + [f"{i},{rng.choice(VOCAB)},{rng.randint(0, 9999) / 100}" for i in range(rng.randint(3, 40))]
    return ("\n".join(rows) + "\n").encode()


# ------------------------------------------------------------------ hosts


class HostPlan:
    """One virtual host: its kind, variant, address, robots.txt and (lazily) its pages."""

    def __init__(self, plan: "Plan", name: str, kind: str, variant: str, address: str, robots_variant: str,
                 position: int, size: int = 0):
        self.plan, self.name, self.kind, self.variant = plan, name, kind, variant
        self.address, self.robots_variant, self.position, self.size = address, robots_variant, position, size

    def __repr__(self) -> str:
        return f"HostPlan({self.name!r}, {self.kind}/{self.variant}, {self.address}, robots={self.robots_variant})"

    @property
    def base_url(self) -> str:
        return f"http://{self.name}:{self.plan.port}"

    def url(self, path: str = "/") -> str:
        return self.base_url + path

    @property
    def infinite(self) -> bool:
        """True for the trap hosts whose URL space has no end (``pages`` then holds only the entry pages)."""
        return (self.kind, self.variant) in INFINITE

    @property
    def raw(self) -> bool:
        return self.kind == "hostile" and self.variant in RAW_VARIANTS

    def rng(self, *salt: object) -> random.Random:
        return random.Random("/".join(map(str, (self.plan.seed, self.name) + salt)))

    @cached_property
    def pages(self) -> dict[str, Page]:
        """Every page of a finite host by path (the entry pages of an infinite one)."""
        return _GENERATORS[self.kind](self)

    def page(self, target: str) -> Page | None:
        """The page served for a request target (path and query as sent), or None for 404."""
        path, query = split_target(target)
        if self.kind == "trap" and self.variant in ("calendar", "facets", "repeat", "deep") and path != "/":
            return _trap_page(self, path, query)
        if self.kind == "hostile" and self.variant == "manylinks" and path.startswith("/p/"):
            m = re.fullmatch(r"/p/(\d+)\.html", path)
            if m and int(m.group(1)) < self.plan.knobs.many_links:
                return _tiny_page(self, path)
            return None
        return self.pages.get(path)

    def robots(self, changed: bool = False) -> robots.Ruleset:
        """The rules imposed on ``deltacrawl`` (``changed``: after robots-changing switched)."""
        return robots.effective(self.robots_variant, self.base_url, changed)

    @property
    def crawl_delay(self) -> float | None:
        return self.robots().crawl_delay

    def allowed(self, target: str, changed: bool = False) -> bool:
        return self.robots(changed).allowed(target)

    def reachable(self, follow_nofollow: bool = False, respect_robots: bool = True, limit: int = 50_000) -> list[str]:
        """URLs of this host a crawler reaches from ``/`` over same-host links, breadth first (at most ``limit``)."""
        start = self.url("/")
        seen, queue = {start: None}, [start]
        prefix = self.url("")
        for url in queue:
            target = url[len(prefix):]
            page = self.page(target)
            if page is None or page.behaviour not in HTML_BEHAVIOURS:
                continue
            if respect_robots and not self.allowed(target):
                continue
            for nxt in page.outlinks(follow_nofollow):
                if nxt.startswith(prefix + "/") and nxt not in seen and len(seen) < limit:
                    if not respect_robots or self.allowed(nxt[len(prefix):]):
                        seen[nxt] = None
                        queue.append(nxt)
        return list(seen)


# ------------------------------------------------------------------ site graphs


def _site(h: HostPlan, size: int, extras: tuple[str, ...] = (), showcase: bool = False,
          session: bool = False, combos: tuple = ()) -> dict[str, Page]:
    rng = h.rng("site")
    specs: list[tuple[str, str]] = [("/", "home")]
    specs += [(p, "pdf" if p.endswith(".pdf") else "csv" if p.endswith(".csv") else "article") for p in extras]
    n_extra = len(specs)
    n_sections = max(1, min(8, size // 12))
    for j in range(n_sections):
        if len(specs) < size:
            specs.append((f"/s{j}/", "section"))
    specs += [(f"/intl/{cs}-{decl}.html", f"intl:{cs}:{decl}") for cs, decl in combos]
    kinds = ("article", "deep", "pdf", "png", "csv", "intl", "hidden", "embed", "area")
    while len(specs) < size:
        k, t = len(specs), rng.choices(kinds, weights=(60, 12, 4, 3, 3, 6, 3, 4, 5))[0]
        j = rng.randrange(n_sections)
        path = {
            "article": f"/s{j}/a{k}.html", "deep": f"/s{j}/{2020 + rng.randrange(6)}/{rng.randrange(1, 13):02d}/story-{k}.html",
            "pdf": f"/files/doc-{k}.pdf", "png": f"/img/pic-{k}.png", "csv": f"/data/table-{k}.csv",
            "intl": f"/intl/page-{k}.html", "hidden": f"/hidden/h{k}.html", "embed": f"/embed/e{k}.html",
            "area": f"/map/m{k}.html",
        }[t]
        if t == "intl":
            t = "intl:" + ":".join(rng.choice(CHARSET_COMBOS))
        specs.append((path, t))
    html_types = ("home", "section", "article", "deep")
    children: dict[int, list[int]] = {i: [] for i in range(len(specs))}
    parents = [0]
    for i, (path, t) in enumerate(specs[1:], 1):
        if i < n_extra or t == "section" or t.startswith("intl") and combos:
            parent = 0
        else:
            parent = rng.choice(parents)
        children[parent].append(i)
        if t in html_types:
            parents.append(i)
    sections = [p for p, t in specs if t == "section"]
    targets = [p for p, t in specs if t in html_types or t.startswith("intl") or t in ("pdf", "png", "csv")]
    others = [n for n in h.plan.site_names if n != h.name]
    pages: dict[str, Page] = {}
    for i, (path, t) in enumerate(specs):
        prng = h.rng("page", path)
        doc_url = h.url(path)
        if t == "pdf":
            pages[path] = Page(path, "file", content_type="application/pdf", charset=None, body=pdf_bytes(prng))
            continue
        if t == "png":
            pages[path] = Page(path, "file", content_type="image/png", charset=None, body=png_bytes(prng))
            continue
        if t == "csv":
            pages[path] = Page(path, "file", content_type="text/csv", charset="utf-8", body=csv_bytes(prng))
            continue
        base = None
        if t in ("article", "deep") and sections and prng.random() < 0.1:
            base = h.url(prng.choice(sections))
        res = base or doc_url
        links: list[Link] = []

        def add(target: str, form: str, zone: str = "main", tag: str = "a", rel: str = "") -> None:
            href = href_for(form, target, res, h.name, h.plan.port, prng)
            if form == "percent" and "%" not in href:
                form = "root"
            if session:
                href = _with_session(href, prng)
            links.append(make_link(href, res, h.url(target), tag=tag, rel=rel, form=form, zone=zone))

        add("/", prng.choice(("root", "absolute", "relative")), "nav")
        for s in sections[:4]:
            add(s, "root", "nav")
        for c in children[i]:
            cpath, ct = specs[c]
            tag = {"embed": "iframe", "area": "area"}.get(ct, "a")
            add(cpath, prng.choice(FORMS), tag=tag, rel="nofollow" if ct == "hidden" else "")
        for _ in range(prng.randint(0, 3)):
            add(prng.choice(targets), prng.choice(FORMS))
        if showcase and t == "home":
            pool = [p for p, tt in specs if tt in ("article", "deep")] or ["/"]
            for n, form in enumerate(FORMS):
                add(pool[n % len(pool)], form)
            links.append(make_link("#top", res, doc_url, form="fragment-only", zone="footer"))
        if others and (prng.random() < 0.3 or t == "home"):
            for other in prng.sample(others, min(len(others), prng.randint(1, 2))):
                form = prng.choice(("absolute", "protocol-relative", "odd-case"))
                href = href_for(form, "/", f"http://{other}:{h.plan.port}/", other, h.plan.port, prng)
                links.append(make_link(href, res, f"http://{other}:{h.plan.port}/", form="cross-" + form, zone="footer"))
        if t == "home":
            if h.position % 4 == 0 and h.kind == "site":
                dead = f"http://nxdomain-{h.position}.test:{h.plan.port}/"
                links.append(make_link(dead, res, dead, form="dead-host", zone="footer"))
            if h.position % 5 == 2 and h.kind == "site":
                bait = f"http://intranet.bait.test:{h.plan.port}/wiki"
                links.append(make_link(bait, res, bait, form="bait", zone="footer", bait=True))
        if prng.random() < 0.4 or showcase:
            links.append(make_link("mailto:editor@example.org", res, form="mailto", zone="footer"))
        if prng.random() < 0.3 or showcase:
            links.append(make_link("javascript:void(0)", res, form="javascript", zone="footer"))
        if showcase:
            links.append(make_link("tel:+15550100", res, form="tel", zone="footer"))
            links.append(make_link("#comments", res, form="fragment-only", zone="footer"))
        canonical = None
        if t in ("article", "deep") and prng.random() < 0.3:
            canonical = doc_url
            links.insert(0, make_link(doc_url, res, doc_url, tag="link", rel="canonical", form="absolute", zone="head"))
        charset, declared, text = "utf-8", "header", prose(prng, prng.randint(80, 250))
        if t.startswith("intl"):
            _, charset, declared = t.split(":")
            sample = CHARSET_SAMPLES[charset]
            text = " ".join([sample, prose(prng, 20), sample, prose(prng, 20), sample])
        title = f"{h.name.split('-')[0].capitalize()} {words(prng, 3)}"
        meta = ""
        if t in ("article", "deep") and not children[i]:
            meta = prng.choices(("", "noindex", "noindex,nofollow"), weights=(90, 5, 5))[0]
        pages[path] = Page(path, title=title, text=text, links=tuple(links), canonical=canonical, base=base,
                           meta_robots=meta, charset=charset, declared=declared)
    if h.robots_variant == "sitemap":
        urls = "".join(f"<url><loc>{h.url(p)}</loc></url>" for p, pg in pages.items() if pg.behaviour == "html")
        body = f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'
        pages["/sitemap.xml"] = Page("/sitemap.xml", "file", content_type="application/xml", body=body.encode())
    return pages


def _with_session(href: str, rng: random.Random) -> str:
    """Put a per-request session id into a link: ``{sid}`` is replaced by the server on every response."""
    lead, core, trail = href[: len(href) - len(href.lstrip())], href.strip(), href[len(href.rstrip()):]
    core, hash_, frag = core.partition("#")
    mode = rng.choice(("path", "query", "both"))
    path, q, query = core.partition("?")
    if mode in ("path", "both"):
        path += ";jsessionid={sid}"
    if mode in ("query", "both"):
        query = (query + "&" if query else "") + "sid={sid}"
    return lead + path + ("?" + query if query else "") + hash_ + frag + trail


def _site_size(h: HostPlan) -> int:
    if h.position == 0:
        return 300
    if h.position == 1:
        return 1
    r = h.rng("size")
    return max(1, min(300, round(exp(r.uniform(0, log(300))))))


def _gen_site(h: HostPlan) -> dict[str, Page]:
    if h.variant == "linkforms":
        return _site(h, 40, ROBOTS_EXTRAS, showcase=True)
    if h.variant == "charsets":
        return _site(h, 1 + len(CHARSET_COMBOS), combos=CHARSET_COMBOS)
    size = h.size
    return _site(h, size, ROBOTS_EXTRAS if size >= 10 else ())


def _gen_robots(h: HostPlan) -> dict[str, Page]:
    extras = ROBOTS_EXTRAS + (("/early/page.html", "/beyond/page.html") if h.variant == "huge" else ())
    return _site(h, 14, extras)


# ------------------------------------------------------------------ traps


def _links_page(h: HostPlan, path: str, targets: list[tuple[str, str]], text_n: int = 60, **kw) -> Page:
    """An HTML page of ``h`` linking each ``(target path, form)``."""
    prng = h.rng("page", path)
    res = h.url(path)
    links = []
    for target, form in targets:
        href = href_for(form, target, res, h.name, h.plan.port, prng)
        links.append(make_link(href, res, h.url(target), form=form))
    return Page(path, title=f"{h.name} {path}", text=prose(prng, text_n), links=tuple(links), **kw)


def _gen_trap(h: HostPlan) -> dict[str, Page]:
    if h.variant == "session":
        return _site(h, 15, session=True)
    entry = {"calendar": "/calendar/2026/11/30", "facets": "/search", "repeat": "/r/a/b/", "deep": "/d/1/"}[h.variant]
    return {"/": _links_page(h, "/", [(entry, "root")])}


def _trap_page(h: HostPlan, path: str, query: str) -> Page | None:
    v = h.variant
    if v == "calendar":
        m = re.fullmatch(r"/calendar/(\d{4})/(\d{2})/(\d{2})", path)
        try:
            d = date(int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None
        except ValueError:
            d = None
        if d is None:
            return None
        nxt = []
        for delta in (timedelta(days=-1), timedelta(days=1), timedelta(days=31), timedelta(days=365)):
            try:
                e = d + delta
            except OverflowError:
                continue
            nxt.append((f"/calendar/{e.year:04d}/{e.month:02d}/{e.day:02d}", ("relative", "root", "absolute")[e.toordinal() % 3]))
        return _links_page(h, path, nxt, 40)
    if v == "facets":
        if path != "/search":
            return None
        params = parse_qsl(query, keep_blank_values=True)
        allowed = {"color": COLORS, "size": SIZES, "sort": SORTS}
        for k, val in params:
            if k == "page":
                if not val.isdigit() or len(val) > 9 or int(val) < 1:
                    return None
            elif k not in allowed or val not in allowed[k]:
                return None
        keys = [k for k, _ in params]
        if len(set(keys)) != len(keys):
            return None
        targets = []

        def q(ps: list[tuple[str, str]]) -> str:
            return "/search" + ("?" + "&".join(f"{k}={v_}" for k, v_ in ps) if ps else "")

        for k, vals in allowed.items():
            for val in vals:
                if (k, val) in params:
                    continue
                ps = [(kk, val if kk == k else vv) for kk, vv in params] if k in keys else params + [(k, val)]
                targets.append((q(ps), "root"))
            if k in keys:
                targets.append((q([(kk, vv) for kk, vv in params if kk != k]), "root"))
        page_no = int(dict(params).get("page", "1"))
        ps = [(kk, str(page_no + 1) if kk == "page" else vv) for kk, vv in params] if "page" in keys else params + [("page", "2")]
        targets.append((q(ps), "root"))
        return _links_page(h, q(params), targets, 30)
    if v == "repeat":
        segs = path.strip("/").split("/")
        if not path.startswith("/r/") or not path.endswith("/") or any(s not in ("a", "b") for s in segs[1:]) or len(segs) > 4000:
            return None
        return _links_page(h, path, [(path + "a/b/", "relative"), (path + "b/a/", "relative"), (path + "a/", "dot")], 30)
    if v == "deep":
        segs = path.strip("/").split("/")
        if segs[0] != "d" or not path.endswith("/") or segs[1:] != [str(i) for i in range(1, len(segs))] or len(segs) > 4000:
            return None
        return _links_page(h, path, [(path + f"{len(segs)}/", "relative")], 30)
    return None


# ------------------------------------------------------------------ near-duplicates


def _article_text(h: HostPlan, k: int) -> tuple[str, str]:
    r = random.Random(f"{h.plan.seed}/article/{k}")
    return f"Story {k}: {words(r, 4)}", prose(r, 420)


def _gen_dup(h: HostPlan) -> dict[str, Page]:
    origin = h.plan.url("dup-origin.test", "")
    pages: dict[str, Page] = {}
    path_of = {"origin": "/article/{}.html", "mirror-a": "/news/{}/", "mirror-b": "/stories/{}.html"}[h.variant]
    variant_of = {"origin": "?ref=front", "mirror-a": "?page=1", "mirror-b": "?ref=home"}[h.variant]
    home_targets: list[tuple[str, str]] = []
    for k in range(N_ARTICLES):
        title, text = _article_text(h, k)
        p = path_of.format(k)
        res = h.url(p)
        if h.variant == "mirror-b":  # session ids in its links, new on every response
            nav = _with_session("/", h.rng("session", k))
            nxt = path_of.format((k + 1) % N_ARTICLES)
            links = [make_link(nav, res, h.url("/"), form="session", zone="nav"),
                     make_link(_with_session(nxt, h.rng("session-next", k)), res, h.url(nxt), form="session")]
        else:
            links = [make_link("/", res, h.url("/"), form="root", zone="nav")]
        canonical = None
        if h.variant == "origin":
            links.append(make_link(f"/print{p}", res, h.url(f"/print{p}"), form="root"))
            links.append(make_link(path_of.format((k + 1) % N_ARTICLES), res, h.url(path_of.format((k + 1) % N_ARTICLES)), form="root"))
            pages[f"/print{p}"] = Page(f"/print{p}", title=title, text=text, style="print", dup_group=f"article-{k}",
                                       canonical=origin + p, links=(make_link(origin + p, origin + f"/print{p}", origin + p, tag="link", rel="canonical", form="absolute", zone="head"),))
            home_targets += [(p, "root"), (f"/print{p}", "root"), (p, "tracking"), (p + variant_of, "root")]
        else:
            home_targets += [(p, "root"), (p + variant_of, "root")]
            if h.variant == "mirror-a":
                canonical = f"{origin}/article/{k}.html"
                links.insert(0, make_link(canonical, res, canonical, tag="link", rel="canonical", form="absolute", zone="head"))
        pages[p] = Page(p, title=title, text=text, links=tuple(links), canonical=canonical, style=h.variant,
                        dup_group=f"article-{k}", volatile=h.variant == "origin", ad=h.variant == "mirror-a")
    if h.variant == "origin":
        notice = prose(random.Random(f"{h.plan.seed}/brief-notice"), 400)
        for n in range(N_BRIEFS):
            r = random.Random(f"{h.plan.seed}/brief/{n}")
            p = f"/brief/{n}.html"
            pages[p] = Page(p, title=f"In brief: {words(r, 3)}", text=prose(r, r.randint(10, 60)), notice=notice,
                            links=(make_link("/", h.url(p), h.url("/"), form="root", zone="nav"),),
                            style="origin", dup_group=f"brief-{n}")
            home_targets.append((p, "root"))
    home = _links_page(h, "/", home_targets, 50, style=h.variant)
    pages["/"] = home
    return pages


# ------------------------------------------------------------------ hostile and ssrf


def _tiny_page(h: HostPlan, path: str) -> Page:
    return Page(path, title=path, text=f"tiny page {path}", links=(make_link("/", h.url(path), h.url("/"), form="root"),))


def _gen_hostile(h: HostPlan) -> dict[str, Page]:
    v, home = h.variant, h.url("/")
    if v == "drip":
        return {"/": Page("/", "drip", text="slow drip")}
    if v == "huge":
        return {"/": Page("/", "huge", links=(make_link("/chunked", home, h.url("/chunked"), form="root"),)),
                "/chunked": Page("/chunked", "huge-chunked")}
    if v == "bombs":
        p = _links_page(h, "/", [("/gzip", "root"), ("/br", "root"), ("/small-br.html", "root")])
        return {"/": replace(p, behaviour="html-gzip"),
                "/gzip": Page("/gzip", "bomb-gzip"), "/br": Page("/br", "bomb-br"),
                "/small-br.html": replace(_links_page(h, "/small-br.html", [("/", "root")]), behaviour="html-br")}
    if v in ("redirects", "redirects-b"):
        a, b = h.plan.url("hostile-redirects.test", ""), h.plan.url("hostile-redirects-b.test", "")
        me, other = (a, b) if v == "redirects" else (b, a)
        codes = (301, 302, 303, 307, 308)
        pages = {}
        if v == "redirects":
            pages["/"] = _links_page(h, "/", [("/self", "root"), ("/loop-a", "root"), ("/chain/0", "root"),
                                              ("/cross/0", "root"), ("/xloop", "root"), ("/relative", "root"),
                                              ("/landing.html", "root")])
            pages["/self"] = Page("/self", "redirect", 301, location=me + "/self")
            pages["/loop-a"] = Page("/loop-a", "redirect", 302, location=me + "/loop-b")
            pages["/loop-b"] = Page("/loop-b", "redirect", 302, location=me + "/loop-a")
            for i in range(CHAIN_HOPS):
                pages[f"/chain/{i}"] = Page(f"/chain/{i}", "redirect", codes[i % 5], location=f"{me}/chain/{i + 1}")
            pages[f"/chain/{CHAIN_HOPS}"] = _links_page(h, f"/chain/{CHAIN_HOPS}", [("/", "root")])
            pages["/relative"] = Page("/relative", "redirect", 301, location=me + "/landing.html")
            pages["/landing.html"] = _links_page(h, "/landing.html", [("/", "root")])
        else:
            pages["/"] = _links_page(h, "/", [("/cross/1", "root"), ("/xloop", "root")])
        pages["/xloop"] = Page("/xloop", "redirect", 301, location=other + "/xloop")
        for i in range(0 if v == "redirects" else 1, CHAIN_HOPS, 2):
            pages[f"/cross/{i}"] = Page(f"/cross/{i}", "redirect", codes[i % 5], location=f"{other}/cross/{i + 1}")
        if (CHAIN_HOPS % 2 == 0) == (v == "redirects"):
            pages[f"/cross/{CHAIN_HOPS}"] = _links_page(h, f"/cross/{CHAIN_HOPS}", [("/", "root")])
        return pages
    if v in ("throttle-seconds", "throttle-date"):
        return _site(h, 6)
    if v == "flaky":
        return _site(h, 10)
    if v == "down":
        return {"/": Page("/", "status", 500, text="internal error"), "/page.html": Page("/page.html", "status", 500)}
    if v == "hang":
        return {"/": Page("/", "hang", text="finally")}
    if v == "reset":
        return {"/": Page("/", "raw-reset"), "/partial": Page("/partial", "raw-reset-partial")}
    if v == "badheaders":
        p = _links_page(h, "/", [(r, "root") for r in RAW_PAGES])
        pages = {"/": replace(p, behaviour="raw-ok")}
        pages.update({r: Page(r, "raw" + r.replace("/", "-")) for r in RAW_PAGES})
        return pages
    if v == "deephtml":
        return {"/": Page("/", "deep-html", links=(make_link("/top.html", home, h.url("/top.html")),
                                                   make_link("/deepest.html", home, h.url("/deepest.html")))),
                "/top.html": _tiny_page(h, "/top.html"), "/deepest.html": _tiny_page(h, "/deepest.html")}
    if v == "manylinks":
        n = h.plan.knobs.many_links
        return {"/": Page("/", "many-links", title="many links", text="ten thousand links",
                          links=tuple(Link(f"/p/{i}.html", f"{home[:-1]}/p/{i}.html", form="root") for i in range(n)))}
    if v == "refused":
        return {"/": Page("/", "refused")}
    raise ValueError(v)


def bait_urls(port: int) -> list[str]:
    return [f"http://127.0.0.1:{port}/secret", f"http://intranet.bait.test:{port}/", f"http://[::1]:{port}/",
            f"http://127.66.0.1:{port}/admin", f"http://localhost:{port}/", f"http://2130706433:{port}/decimal",
            f"http://admin.bait.test:{port}/"]


def _gen_ssrf(h: HostPlan) -> dict[str, Page]:
    port = h.plan.port
    home = h.url("/")
    redirects = {"/to-secret": (301, f"http://127.0.0.1:{port}/secret"),
                 "/to-intranet": (302, f"http://intranet.bait.test:{port}/"),
                 "/to-ipv6": (301, f"http://[::1]:{port}/"), "/to-localhost": (307, f"http://localhost:{port}/"),
                 "/to-admin": (308, f"http://admin.bait.test:{port}/")}
    links = [make_link(u, home, u, form="bait", bait=True) for u in bait_urls(port)]
    links += [make_link(p, home, h.url(p), form="root") for p in (*redirects, "/about.html")]
    pages = {"/": Page("/", title="ssrf bait", text=prose(h.rng("home"), 60), links=tuple(links)),
             "/about.html": _tiny_page(h, "/about.html")}
    for p, (code, loc) in redirects.items():
        pages[p] = Page(p, "redirect", code, location=loc)
    return pages


def _gen_live(h: HostPlan) -> dict[str, Page]:
    """A live host's static home page and its live pages (served by version: ``tests/testweb/live.py``)."""
    from .live import page_path

    paths = [page_path(i) for i in range(h.plan.knobs.live_pages)]
    home = Page("/", title=f"{h.name}: live pages", text=f"Pages of {h.name} that change as time goes.",
                links=tuple(make_link(p, h.url("/"), h.url(p)) for p in paths))
    return {"/": home, **{p: Page(p, behaviour="live") for p in paths}}


def _urlset(h: HostPlan, entries: list[tuple[str, str | None]]) -> bytes:
    """A sitemap listing ``(URL, lastmod)``; a path is made absolute on ``h``."""
    items = "".join(f"<url><loc>{u if '://' in u else h.url(u)}</loc>" + (f"<lastmod>{m}</lastmod>" if m else "")
                    + "</url>" for u, m in entries)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {_SM_NS}>{items}</urlset>\n'.encode()


def _sitemap_index(h: HostPlan, paths: list[str]) -> bytes:
    items = "".join(f"<sitemap><loc>{h.url(p)}</loc></sitemap>" for p in paths)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex {_SM_NS}>{items}</sitemapindex>\n'.encode()


def _xml(path: str, body: bytes, behaviour: str = "file", ctype: str = "application/xml") -> Page:
    return Page(path, behaviour, content_type=ctype, charset=None, body=body)


def _gen_sitemap(h: HostPlan) -> dict[str, Page]:
    """Sitemap hosts: a home page linking nothing, pages only their sitemaps list, and the sitemaps.

    plain (robots.txt names /sitemap.xml and /sitemap-extra.xml, a 404): /sitemap.xml lists /, whose
    lastmod is the time of the request (behaviour file-now: newer than any earlier fetch of /), and
    /p1-/p3.html with an old lastmod, none, and an invalid one. index: an index of /sm/pages.xml, the
    gzip file /sm/more.xml.gz and another index /sm/index2.xml (of /sm/deep.xml). gzip: /sitemap.xml
    is gzip bytes served as application/gzip. cap: SITEMAP_CAP_URLS URLs. bomb: billion laughs.
    foreign: its own /f1.html and URLs of sitemap-plain.test and another test web host.
    """
    v = h.variant
    home = Page("/", title=f"{h.name} home", text=prose(h.rng("home"), 40))
    pages = {"/": home}

    def leaves(*paths: str) -> None:
        pages.update({p: Page(p, title=p, text=f"sitemap page {p} of {h.name}") for p in paths})
    if v == "plain":
        leaves("/p1.html", "/p2.html", "/p3.html")
        pages["/sitemap.xml"] = _xml("/sitemap.xml", _urlset(h, [
            ("/", "{now}"), ("/p1.html", "2020-01-01"), ("/p2.html", None), ("/p3.html", "soon")]), "file-now")
    elif v == "index":
        leaves("/i1.html", "/i2.html", "/g1.html", "/g2.html", "/deep.html")
        pages["/sitemap.xml"] = _xml("/sitemap.xml", _sitemap_index(h, ["/sm/pages.xml", "/sm/more.xml.gz",
                                                                         "/sm/index2.xml"]))
        pages["/sm/pages.xml"] = _xml("/sm/pages.xml", _urlset(h, [("/i1.html", None), ("/i2.html", None)]))
        pages["/sm/more.xml.gz"] = _xml("/sm/more.xml.gz", gzip_bytes(_urlset(h, [("/g1.html", None),
                                                                                  ("/g2.html", None)])),
                                        ctype="application/gzip")
        pages["/sm/index2.xml"] = _xml("/sm/index2.xml", _sitemap_index(h, ["/sm/deep.xml"]))
        pages["/sm/deep.xml"] = _xml("/sm/deep.xml", _urlset(h, [("/deep.html", None)]))
    elif v == "gzip":
        leaves("/z1.html", "/z2.html")
        pages["/sitemap.xml"] = _xml("/sitemap.xml", gzip_bytes(_urlset(h, [("/z1.html", "2021-06-01T10:00:00Z"),
                                                                             ("/z2.html", None)])),
                                     ctype="application/gzip")
    elif v == "cap":
        paths = [f"/c/{i}.html" for i in range(SITEMAP_CAP_URLS)]
        leaves(*paths)
        pages["/sitemap.xml"] = _xml("/sitemap.xml", _urlset(h, [(p, None) for p in paths]))
    elif v == "bomb":
        lol = "".join(f'<!ENTITY l{i} "{("&l%d;" % (i - 1)) * 10}">' for i in range(1, 10))
        body = (f'<?xml version="1.0"?>\n<!DOCTYPE urlset [<!ENTITY l0 "lol">{lol}]>\n'
                f'<urlset {_SM_NS}><url><loc>{h.url("/")}&l9;</loc></url></urlset>\n')
        pages["/sitemap.xml"] = _xml("/sitemap.xml", body.encode())
    elif v == "foreign":
        leaves("/f1.html")
        pages["/sitemap.xml"] = _xml("/sitemap.xml", _urlset(h, [
            ("/f1.html", None), (h.plan.url("sitemap-plain.test", "/p1.html"), None),
            (h.plan.url("sitemap-plain.test", "/elsewhere.html"), None), (h.plan.url("news-0.test", "/"), None)]))
    else:
        raise ValueError(v)
    return pages


def gzip_bytes(data: bytes) -> bytes:
    """gzip with a fixed header time: the plan's bytes are the same on every build."""
    import gzip
    return gzip.compress(data, mtime=0)


_GENERATORS = {"site": _gen_site, "robots": _gen_robots, "trap": _gen_trap, "dup": _gen_dup,
               "hostile": _gen_hostile, "ssrf": _gen_ssrf, "live": _gen_live, "sitemap": _gen_sitemap}


# ------------------------------------------------------------------ the plan


@dataclass
class Plan:
    seed: int
    n_hosts: int
    port: int
    kinds: tuple[str, ...]
    knobs: Knobs
    hosts: dict[str, HostPlan]
    site_names: tuple[str, ...]

    def host(self, name: str) -> HostPlan:
        return self.hosts[name.lower()]

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.port}{path}"

    def by_kind(self, *kinds: str) -> list[HostPlan]:
        return [h for h in self.hosts.values() if h.kind in kinds]

    def page(self, url: str) -> Page | None:
        """The page an absolute URL of the test web serves (None for 404 or a host not in the plan)."""
        parts = urlsplit(url)
        h = self.hosts.get((parts.hostname or "").lower())
        if h is None:
            return None
        return h.page(parts.path + ("?" + parts.query if parts.query else ""))

    def dup_clusters(self) -> dict[str, list[str]]:
        """The near-duplicate truth: dup_group -> the normalised URLs of the dup hosts that serve it.

        Every URL a crawler reaches from the dup hosts' home pages (``reachable``: variant URLs such as
        ``?ref=front`` and ``?page=1`` included; tracking and session parameters normalise away, so such
        links are the same URL) whose page has a ``dup_group``. An article's group holds its original,
        variants, print version and mirrors; a brief's group is the brief alone (a negative: distinct
        pages sharing a heavy template). Empty without the ``dup`` kind.
        """
        clusters: dict[str, list[str]] = {}
        for h in self.by_kind("dup"):
            for url in h.reachable():
                page = self.page(url)
                if page is not None and page.dup_group:
                    clusters.setdefault(page.dup_group, []).append(url)
        return clusters

    def dup_pairs(self) -> dict[tuple[str, str], bool]:
        """Every unordered pair of URLs in :meth:`dup_clusters` (as a sorted tuple) -> same group or not."""
        group = {url: g for g, urls in self.dup_clusters().items() for url in urls}
        urls = sorted(group)
        return {(a, b): group[a] == group[b] for i, a in enumerate(urls) for b in urls[i + 1:]}

    def addresses(self) -> dict[str, list[str]]:
        """Address -> host names (bound addresses only; hostile-refused's address is never bound)."""
        out: dict[str, list[str]] = {}
        for h in self.hosts.values():
            if h.variant != "refused" or h.kind != "hostile":
                out.setdefault(h.address, []).append(h.name)
        return out

    def shared_addresses(self) -> dict[str, list[str]]:
        return {a: names for a, names in self.addresses().items() if len(names) > 1}

    def hosts_file_text(self) -> str:
        """/etc/hosts format: shared addresses alternate between one line with aliases and one line per name."""
        lines = [f"# deltacrawl test web: seed {self.seed}, {len(self.hosts)} hosts, port {self.port}", ""]
        by_addr: dict[str, list[str]] = {}
        for h in self.hosts.values():
            by_addr.setdefault(h.address, []).append(h.name)
        for n, (addr, names) in enumerate(by_addr.items()):
            if len(names) > 1 and n % 2:
                lines += [f"{addr}\t{name}" for name in names]
            else:
                lines.append(f"{addr}\t" + " ".join(names))
        lines.append("# SSRF bait: outside 127.10.0.0/16, a crawler must never connect here")
        lines += [f"{addr}\t{name}" for name, addr in BAIT_NAMES.items()]
        return "\n".join(lines) + "\n"


def build_plan(n_hosts: int = 300, seed: int = 7, port: int = 0, kinds: tuple[str, ...] | list[str] | None = None,
               knobs: Knobs | None = None) -> Plan:
    """The plan: the special hosts of ``kinds`` (all by default) first, then ordinary sites up to ``n_hosts``."""
    kinds = tuple(KINDS if kinds is None else kinds)
    unknown = set(kinds) - set(KINDS) - set(OPT_IN_KINDS)
    if unknown:
        raise ValueError(f"unknown kinds {sorted(unknown)}; known: {KINDS + OPT_IN_KINDS}")
    specials = [s for s in SPECIALS if s[0] in kinds]
    if n_hosts < len(specials):
        raise ValueError(f"n_hosts={n_hosts} is too small for kinds {kinds}: their special hosts alone are "
                         f"{len(specials)}; raise n_hosts or pass kinds=('site',)")
    n_sites = n_hosts - len(specials)
    site_names = tuple(f"{TOPICS[(j // 10) % len(TOPICS)]}-{j}.test" for j in range(n_sites))
    plan = Plan(seed, n_hosts, port, kinds, knobs or Knobs(), {}, site_names)
    index = 0
    for kind, variant, rv in specials:
        name = f"{kind}-{variant}.test"
        addr = REFUSED_ADDRESS if (kind, variant) == ("hostile", "refused") else address_of(index)
        index += addr != REFUSED_ADDRESS
        plan.hosts[name] = HostPlan(plan, name, kind, variant, addr, rv, len(plan.hosts))
    first_site = index
    for j, name in enumerate(site_names):
        shared = j % 25 in (1, 2)
        addr = address_of(first_site + j - j % 25) if shared else address_of(first_site + j)
        h = HostPlan(plan, name, "site", "ordinary", addr, SITE_ROBOTS[j % len(SITE_ROBOTS)], j)
        h.size = _site_size(h)
        plan.hosts[name] = h
    for j in range(plan.knobs.live_hosts):  # opt-in (Knobs.live_hosts), after every other host and address
        from .live import host_name

        name = host_name(j)
        plan.hosts[name] = HostPlan(plan, name, "live", str(j), address_of(first_site + n_sites + j), ALWAYS_ALLOW,
                                    len(plan.hosts))
    return plan
