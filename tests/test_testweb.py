"""The test web answers as its plan says, and its log analysis computes the right numbers.

Plain clients only: requests connects to a host's planned address and sends the
Host header; raw sockets where the answer is deliberately not HTTP.
"""

from __future__ import annotations

import gzip
import re
import socket
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from html import escape
from urllib.parse import urljoin, urlsplit

import brotli
import lxml.html
import protego
import pytest
import requests

from tests.testweb import TestWeb, analyze, build_plan, normalize, robots, sites
from tests.testweb.model import Knobs

KNOBS = dict(latency_s=0.0, robots_slow_s=1.0, hang_s=20.0, drip_total_s=30.0, retry_after_s=2, throttle_count=2,
             bomb_bytes=128 * 2**20)


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    with TestWeb(tmp_path_factory.mktemp("web"), n_hosts=50, seed=3, knobs=KNOBS) as w:
        yield w


def get(web, host, path="/", ua="testweb-test", **kw):
    h = web.plan.host(host)
    kw.setdefault("timeout", 10)
    return requests.get(f"http://{h.address}:{web.port}{path}", headers={"Host": f"{host}:{web.port}", "User-Agent": ua,
                        **kw.pop("headers", {})}, allow_redirects=False, **kw)


def log_for(web, ua, wait_s=5.0, n=None):
    return web.log_of(lambda r: r["ua"] == ua, n=n, wait_s=wait_s)


def raw_request(addr, port, host, path, timeout=5.0) -> bytes:
    with socket.create_connection((addr, port), timeout=timeout) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: raw\r\n\r\n".encode())
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                return b"".join(chunks)
            chunks.append(b)


# ------------------------------------------------------------------ plan and hosts file


def test_plan_is_deterministic_and_sized():
    a, b = build_plan(60, 5, 1234), build_plan(60, 5, 1234)
    assert len(a.hosts) == 60 and list(a.hosts) == list(b.hosts)
    assert a.host("news-3.test").pages["/"] == b.host("news-3.test").pages["/"]
    assert build_plan(60, 6, 1234).host("news-5.test").size != a.host("news-5.test").size or \
        build_plan(60, 6, 1234).host("news-5.test").pages["/"] != a.host("news-5.test").pages["/"]
    only_sites = build_plan(20, 5, 1234, kinds=["site"])
    assert {h.kind for h in only_sites.hosts.values()} == {"site"} and len(only_sites.hosts) == 20
    with pytest.raises(ValueError, match="too small"):
        build_plan(20, 5, 1234)
    sizes = [h.size for h in build_plan(300, 7, 1).by_kind("site") if h.variant == "ordinary"]
    assert min(sizes) == 1 and max(sizes) == 300 and len(set(sizes)) > 50


def test_every_link_resolves_to_its_planned_target(monkeypatch):
    monkeypatch.setattr(sites, "VERIFY_LINKS", True)
    plan = build_plan(70, 11, 4321)
    n = 0
    for h in plan.hosts.values():
        if h.variant == "manylinks":
            continue
        for page in h.pages.values():  # make_link raises on any href that resolves elsewhere
            for link in page.links:
                n += 1
                if link.url:
                    assert normalize(urljoin(page.base or h.url(page.path), link.href.strip())) == link.url
    assert n > 2000
    forms = {l.form for l in plan.host("site-linkforms.test").pages["/"].links}
    assert set(sites.FORMS) <= forms and {"mailto", "javascript", "tel", "fragment-only"} <= forms


def test_realistic_pages_keep_the_page_and_weigh_tens_of_kb():
    """The benchmark's realistic pages (knob realistic_pages): 40-80 KB, and the planned page's links,
    text and charset are all still there (lxml finds every planned <a> href and every word)."""
    from tests.testweb import realistic, render

    plan = build_plan(40, 7, 4321, kinds=["site"])
    pages = [(h, p) for h in plan.hosts.values() for p in list(h.pages.values())[:12]
             if p.behaviour == "html" and p.status == 200]
    assert len(pages) > 100
    for h, page in pages:
        body, ctype = realistic.html(page)
        assert (body, ctype) == realistic.html(page)  # deterministic (and cached)
        assert ctype == render.html(page)[1] and 40_000 < len(body) < 80_000, (page.path, len(body))
        tree = lxml.html.fromstring(body.decode(page.charset or "utf-8"))
        hrefs = {a.get("href") for a in tree.iter("a")}
        assert {l.href for l in page.links if l.tag == "a" and l.zone != "head"} <= hrefs, page.path
        words = lambda t: " ".join(t.replace(".", " ").split())  # render.html's paragraphs drop a ". "
        assert words(page.text) in words(tree.find(".//main").text_content()), page.path


def test_hosts_file_maps_every_host(web):
    entries = {}
    for line in web.hosts_file.read_text().splitlines():
        if line and not line.startswith("#"):
            addr, *names = line.split()
            for name in names:
                entries[name] = addr
    for h in web.plan.hosts.values():
        assert entries[h.name] == h.address
        assert h.address.startswith("127.10.")
    assert entries["intranet.bait.test"] == "127.66.0.1" and entries["admin.bait.test"] == "127.0.0.1"
    assert web.plan.shared_addresses(), "some sites share an address"
    assert web.allow_cidrs == ["127.10.0.0/16"]
    assert web.url("news-3.test", "/x") == f"http://news-3.test:{web.port}/x"
    assert len(web.seeds()) == 50 and all(u.endswith(f":{web.port}/") for u in web.seeds())
    assert len(web.seeds(kinds=["trap"])) == 5


def test_big_web_starts_quickly(tmp_path):
    t = time.monotonic()
    with TestWeb(tmp_path, n_hosts=400, seed=1, kinds=["site"]) as w:
        elapsed = time.monotonic() - t
        r = get(w, w.plan.site_names[-1])
        assert r.status_code == 200
    assert elapsed < 15, elapsed


# ------------------------------------------------------------------ kinds answer as planned


def expected_home_status(h) -> int | tuple:
    page = h.pages["/"]
    if h.variant in ("throttle-seconds", "throttle-date"):
        return 429
    if h.variant == "flaky":
        return (200, 503)
    return page.status


def test_every_kind_answers_as_planned(web):
    skip = {"drip", "hang", "huge", "reset", "refused", "badheaders"}  # tested below
    seen_kinds = set()
    for h in web.plan.hosts.values():
        if h.kind == "hostile" and h.variant in skip:
            continue
        r = get(web, h.name, "/", ua="kinds")
        want = expected_home_status(h)
        assert r.status_code in (want if isinstance(want, tuple) else (want,)), (h, r.status_code)
        page = h.pages["/"]
        if page.behaviour == "redirect":
            assert r.headers["Location"] == page.location
        if r.status_code == 200 and page.behaviour in ("html", "html-gzip"):
            doc = lxml.html.fromstring(r.content)
            served = sorted((el.tag, (el.get("href") or el.get("src") or "")) for el in doc.iter("a", "area", "iframe", "link"))
            sid = re.search(r"sid=([0-9A-F]{24})", r.text).group(1) if h.variant == "session" else ""
            planned = sorted((l.tag, l.href.replace("{sid}", sid)) for l in page.links)
            assert served == planned, h
        seen_kinds.add(h.kind)
    assert seen_kinds == set(sites.KINDS)
    # pages of a big site: every planned page answers with its planned bytes or status
    h = web.plan.host("news-0.test")
    for path, page in list(h.pages.items())[::7]:
        r = get(web, h.name, path)
        assert r.status_code == 200
        if page.behaviour == "file":
            assert r.content == page.body and r.headers["Content-Type"].startswith(page.content_type)
    assert get(web, h.name, "/no-such-page.html").status_code == 404
    other = web.plan.host("ssrf-links.test")
    assert requests.get(f"http://{other.address}:{web.port}/", headers={"Host": "news-0.test"}, timeout=5).status_code == 421


def http_crawl(web, host):
    """Breadth-first over one host by HTTP, like a polite crawler would (robots from the plan)."""
    h = web.plan.host(host)
    prefix = h.url("")
    seen, queue = {h.url("/"): None}, [h.url("/")]
    for url in queue:
        target = url[len(prefix):]
        if not h.allowed(target):
            continue
        r = get(web, host, target, ua="bfs")
        if r.status_code != 200 or not r.headers["Content-Type"].startswith("text/html"):
            continue
        body = r.content.decode("utf-16") if r.content.startswith(b"\xff\xfe") else r.content
        doc = lxml.html.fromstring(body)
        if any("nofollow" in (m.get("content") or "") for m in doc.iter("meta") if m.get("name") == "robots"):
            continue
        base = doc.find(".//base")
        base_url = urljoin(url, base.get("href")) if base is not None else url
        for el in doc.iter("a", "area", "iframe"):
            href = el.get("href") or el.get("src")
            if not href or "nofollow" in (el.get("rel") or ""):
                continue
            u = urljoin(base_url, href.strip())
            if urlsplit(u).scheme.lower() not in ("http", "https"):
                continue
            n = normalize(u)
            if n.startswith(prefix + "/") and n not in seen and h.allowed(n[len(prefix):]):
                seen[n] = None
                queue.append(n)
    return set(seen)


@pytest.mark.parametrize("host", ["site-linkforms.test", "news-0.test", "robots-wildcard.test",
                                  "robots-agent-group.test", "trap-session.test", "site-charsets.test"])
def test_reachable_matches_an_http_crawl(web, host):
    h = web.plan.host(host)
    expected = set(h.reachable())
    assert http_crawl(web, host) == expected
    hidden = {h.url(p) for p in h.pages} - expected
    if host == "news-0.test":
        assert any("/hidden/" in u for u in hidden) and len(expected) > 200
    if host == "robots-wildcard.test":
        assert h.url("/files/report-0.pdf") in hidden and h.url("/members/profile.html") in expected


def test_charsets_declared_as_planned(web):
    h = web.plan.host("site-charsets.test")
    pages = [p for p in h.pages.values() if p.path.startswith("/intl/")]
    assert len(pages) == len(sites.CHARSET_COMBOS)
    for page in pages:
        r = get(web, h.name, page.path)
        ctype = r.headers["Content-Type"]
        body = r.content
        if page.declared == "bom":
            assert body.startswith({"utf-8": b"\xef\xbb\xbf", "utf-16-le": b"\xff\xfe"}[page.charset])
            body = body[3:] if page.charset == "utf-8" else body[2:]
        text = body.decode(page.charset)
        sample = sites.CHARSET_SAMPLES[page.charset]
        assert sample in text and page.text.startswith(sample)
        assert ("charset=" in ctype) == (page.declared in ("header", "header-vs-meta")), (page.path, ctype)
        head = text[: text.find("</head>")].lower()
        assert ("<meta charset" in head) == (page.declared in ("meta", "header-vs-meta"))
        assert ("http-equiv" in head) == (page.declared == "http-equiv")
        if page.charset not in ("utf-8", "utf-16-le"):
            with pytest.raises(UnicodeDecodeError):
                body.decode("utf-8")


# ------------------------------------------------------------------ robots


def test_robots_variants(web):
    for h in web.plan.by_kind("robots"):
        v = h.robots_variant
        t = time.monotonic()
        r = get(web, h.name, "/robots.txt", ua="robots")
        took = time.monotonic() - t
        hops = 0
        while r.status_code in (301, 302, 307):
            hops += 1
            loc = urlsplit(r.headers["Location"])
            r = get(web, loc.hostname or h.name, loc.path, ua="robots")
        assert hops == {"redirect": 1, "redirect-chain": 3, "redirect-offsite": 1}.get(v, 0), v
        assert r.status_code == {"404": 404, "410": 410, "5xx": 503}.get(v, 200), v
        if v == "slow":
            assert took >= KNOBS["robots_slow_s"] * 0.9
        if r.status_code != 200:
            continue
        body = r.content
        if v == "huge":
            assert len(body) > 600_000 and body.index(b"Disallow: /beyond/") > robots.PARSE_LIMIT
        if v == "bom-case":
            assert body.startswith(b"\xef\xbb\xbf")
        ours = robots.parse(body)
        theirs = protego.Protego.parse(body[: robots.PARSE_LIMIT].decode("utf-8-sig", "ignore"))
        for path in list(h.pages) + ["/private/x-secret.html", "/members/", "/early/a", "/beyond/a"]:
            if v != "changing":
                assert ours.allowed(path) == h.allowed(path), (v, path)
            assert ours.allowed(path) == theirs.can_fetch(f"http://x{path}", "deltacrawl"), (v, path)
        assert ours.crawl_delay == theirs.crawl_delay("deltacrawl")
    assert web.plan.host("robots-crawl-delay-2.test").crawl_delay == 2
    assert web.plan.host("robots-crawl-delay-3600.test").crawl_delay == 3600
    huge = web.plan.host("robots-huge.test")
    assert not huge.allowed("/early/page.html") and huge.allowed("/beyond/page.html")
    assert not web.plan.host("robots-5xx.test").allowed("/") and web.plan.host("robots-5xx.test").allowed("/robots.txt")
    ag = web.plan.host("robots-agent-group.test")
    assert ag.allowed("/s0/") and not ag.allowed("/members/profile.html")
    assert not web.plan.host("robots-bom-case.test").allowed("/private/ok.html")
    assert web.plan.host("robots-bom-case.test").allowed("/s0/")


def test_robots_changes_after_n_requests_or_seconds(tmp_path):
    with TestWeb(tmp_path / "n", n_hosts=18, seed=3, kinds=["robots"], robots_change_after_requests=3) as w:
        for _ in range(3):
            assert get(w, "robots-changing.test", "/", ua="changing").status_code == 200
        assert get(w, "robots-changing.test", "/robots.txt", ua="changing").text == robots.DISALLOW_ALL
        get(w, "robots-changing.test", "/s0/", ua="changing")
        assert [r["disallowed"] for r in log_for(w, "changing", n=5)] == [False, False, False, False, True]
    with TestWeb(tmp_path / "s", n_hosts=18, seed=3, kinds=["robots"], robots_change_after_s=1.0) as w:
        assert get(w, "robots-changing.test", "/robots.txt").text == robots.ALLOW_ALL
        time.sleep(1.1)
        assert get(w, "robots-changing.test", "/robots.txt").text == robots.DISALLOW_ALL


def test_disallowed_hits_are_flagged(web):
    get(web, "robots-plain.test", "/private/secret.html", ua="dis")
    get(web, "robots-plain.test", "/private/ok.html", ua="dis")
    get(web, "robots-plain.test", "/%70rivate/secret.html", ua="dis")
    get(web, "robots-5xx.test", "/", ua="dis")
    get(web, "robots-5xx.test", "/robots.txt", ua="dis")
    assert [r["disallowed"] for r in log_for(web, "dis", n=5)] == [True, False, True, True, False]


# ------------------------------------------------------------------ traps


def follow(web, host, path, pick, steps):
    seen = []
    for _ in range(steps):
        r = get(web, host, path, ua="trap")
        assert r.status_code == 200, (host, path)
        seen.append(path)
        hrefs = [a.get("href") for a in lxml.html.fromstring(r.content).iter("a")]
        nxt = urlsplit(urljoin(f"http://{host}:{web.port}{path}", pick(hrefs)))
        path = nxt.path + ("?" + nxt.query if nxt.query else "")
    return seen


def test_traps_are_infinite(web):
    days = follow(web, "trap-calendar.test", "/calendar/2026/11/30", lambda hs: hs[1], 40)
    assert len(set(days)) == 40 and days[-1] == "/calendar/2027/01/08"
    deep = follow(web, "trap-deep.test", "/d/1/", lambda hs: hs[0], 40)
    assert deep[-1] == "/d/" + "/".join(str(i) for i in range(1, 41)) + "/"
    rep = follow(web, "trap-repeat.test", "/r/a/b/", lambda hs: hs[0], 30)
    assert rep[-1] == "/r/" + "a/b/" * 30
    facets = follow(web, "trap-facets.test", "/search?color=red", lambda hs: hs[-1], 30)
    assert len(set(facets)) == 30 and facets[-1].endswith("page=30")
    plan_links = web.plan.host("trap-facets.test").page("/search?size=m&color=red").links
    assert len({l.url for l in plan_links}) == len(plan_links) > 15
    # session ids change per response; normalised, the link set is the same
    a, b = get(web, "trap-session.test", "/s0/", ua="trap"), get(web, "trap-session.test", "/s0/", ua="trap")
    ha = [x.get("href") for x in lxml.html.fromstring(a.content).iter("a")]
    hb = [x.get("href") for x in lxml.html.fromstring(b.content).iter("a")]
    assert ha != hb and "jsessionid=" in a.text and "sid=" in a.text
    base = f"http://trap-session.test:{web.port}/s0/"
    assert [normalize(urljoin(base, x.strip())) for x in ha] == [normalize(urljoin(base, x.strip())) for x in hb]
    assert get(web, "trap-session.test", "/s0/;jsessionid=ABC?sid=DEF", ua="trap").status_code == 200


def test_near_duplicates_share_text(web):
    o, a, b = (web.plan.host(n) for n in ("dup-origin.test", "dup-mirror-a.test", "dup-mirror-b.test"))
    groups = {}
    for h in (o, a, b):
        for p in h.pages.values():
            if p.dup_group and p.dup_group.startswith("article-"):
                groups.setdefault(p.dup_group, []).append((h, p))
    assert len(groups) == sites.N_ARTICLES and all(len(v) == 4 for v in groups.values())
    texts = []
    for h, p in groups["article-3"]:
        r = get(web, h.name, p.path)
        main = lxml.html.fromstring(r.content).find(".//main")
        texts.append(" ".join(x.text_content() for x in main.iter("p")))
    assert len(set(texts)) == 1
    r1, r2 = get(web, o.name, "/article/3.html"), get(web, o.name, "/article/3.html")
    assert r1.content != r2.content and 'class="stamp"' in r1.text
    assert a.pages["/news/3/"].canonical == o.url("/article/3.html") and b.pages["/stories/3.html"].canonical is None
    assert get(web, o.name, "/article/3.html?utm_source=rss&ref=front").status_code == 200


def test_near_duplicate_truth_and_the_variants_it_labels(web):
    """plan.dup_clusters() lists what the server serves; the copies differ on the wire only where planned."""
    from tests.testweb import render

    plan = web.plan
    clusters = plan.dup_clusters()
    articles = {g: urls for g, urls in clusters.items() if g.startswith("article-")}
    briefs = {g: urls for g, urls in clusters.items() if g.startswith("brief-")}
    assert len(articles) == sites.N_ARTICLES and all(len(u) == 7 for u in articles.values())
    assert len(briefs) == sites.N_BRIEFS and all(len(u) == 1 for u in briefs.values()) and len(clusters) == 22
    pairs = plan.dup_pairs()
    n = sum(map(len, clusters.values()))
    assert len(pairs) == n * (n - 1) // 2 and sum(pairs.values()) == sites.N_ARTICLES * 21
    assert {urlsplit(u).query for u in articles["article-3"]} == {"", "ref=front", "page=1", "ref=home"}
    for url in articles["article-3"] + briefs["brief-0"]:
        parts = urlsplit(url)
        assert get(web, parts.hostname, parts.path + ("?" + parts.query if parts.query else "")).status_code == 200
    assert build_plan(3, 3, web.port, kinds=["dup"]).dup_clusters() == clusters
    assert build_plan(20, 3, web.port, kinds=["site"]).dup_clusters() == {}
    # mirror-a: a rotating ad in <main>, new on every response, and nothing else changes
    ads = re.compile(rb'<div class="advert">.*?</div>')
    one, two = (get(web, "dup-mirror-a.test", "/news/3/?page=1").content for _ in range(2))
    for _ in range(5):
        if one != two:
            break
        two = get(web, "dup-mirror-a.test", "/news/3/").content
    assert one != two and ads.sub(b"", one) == ads.sub(b"", two)
    assert all(any(escape(ad).encode() in ads.search(b).group() for ad in render.ADS) for b in (one, two))
    # mirror-b: session ids in its links, new on every response, and nothing else changes
    sids = re.compile(rb"(jsessionid|sid)=[0-9A-F]{24}")
    one, two = (get(web, "dup-mirror-b.test", p).content for p in ("/stories/3.html", "/stories/3.html?ref=home"))
    assert one != two and sids.search(one) and sids.sub(b"", one) == sids.sub(b"", two)
    # the briefs: one heavy template, a short text of their own
    pages = [plan.page(urls[0]) for urls in briefs.values()]
    assert len({p.notice for p in pages}) == 1 and len(pages[0].notice.split()) == 400
    assert len({p.text for p in pages}) == len(pages) and all(10 <= len(p.text.split()) <= 60 for p in pages)
    assert escape(pages[0].notice).encode() in get(web, "dup-origin.test", "/brief/0.html").content


def test_conditional_get_answers_304_when_unchanged(web):
    site = next(h for h in web.plan.by_kind("site") if h.variant != "linkforms"
                and any(p.behaviour == "file" for p in h.pages.values()))
    file_path = next(p.path for p in site.pages.values() if p.behaviour == "file")
    for path in ("/", file_path):
        first = get(web, site.name, path)
        etag, last_modified = first.headers["ETag"], first.headers["Last-Modified"]
        assert first.status_code == 200 and first.content
        again = get(web, site.name, path, headers={"If-None-Match": f'"other", {etag}'})
        assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == etag
        assert get(web, site.name, path, headers={"If-Modified-Since": last_modified}).status_code == 304
        assert get(web, site.name, path, headers={"If-None-Match": '"other"',  # If-None-Match wins
                                                   "If-Modified-Since": last_modified}).status_code == 200
        assert get(web, site.name, path, headers={"If-Modified-Since": "Thu, 01 Jan 2015 00:00:00 GMT"}
                   ).status_code == 200
    # a page whose body changes on every response is never "not modified"
    origin = get(web, "dup-origin.test", "/article/3.html")
    assert get(web, "dup-origin.test", "/article/3.html",
               headers={"If-None-Match": origin.headers["ETag"]}).status_code == 200


# ------------------------------------------------------------------ hostile


def test_bombs_are_small_on_the_wire(web):
    for path, enc in (("/gzip", "gzip"), ("/br", "br")):
        r = get(web, "hostile-bombs.test", path, stream=True, headers={"Accept-Encoding": "identity"}, timeout=60)
        wire = r.raw.read(decode_content=False)
        assert r.headers["Content-Encoding"] == enc and len(wire) < 2_000_000
        data = zlib.decompress(wire, 31) if enc == "gzip" else brotli.decompress(wire)
        assert len(data) == KNOBS["bomb_bytes"] and data.count(0) == len(data)
        assert len(data) / len(wire) > 100
    r = get(web, "hostile-bombs.test", "/", headers={"Accept-Encoding": "gzip"}, stream=True)
    assert r.headers["Content-Encoding"] == "gzip" and b"/gzip" in gzip.decompress(r.raw.read(decode_content=False))


def test_slow_huge_hang_reset_refused(web):
    # drip: a few bytes a second; the log records the abort when we go away
    r = get(web, "hostile-drip.test", "/", ua="drip", stream=True)
    t, got = time.monotonic(), b""
    for chunk in r.iter_content(chunk_size=1):
        got += chunk
        if time.monotonic() - t > 2.2:
            break
    r.close()
    assert 8 <= len(got) <= KNOBS.get("drip_bytes", 8) * 4
    # huge: Content-Length says 300 MiB; we read 1 MiB and hang up
    r = get(web, "hostile-huge.test", "/", ua="huge", stream=True)
    assert int(r.headers["Content-Length"]) == Knobs().huge_bytes
    assert len(r.raw.read(1 << 20)) == 1 << 20
    r.close()
    # hang: no headers within 1 s
    with pytest.raises(requests.exceptions.ReadTimeout):
        get(web, "hostile-hang.test", "/", ua="hang", timeout=1)
    # reset and refused
    with pytest.raises(requests.exceptions.ConnectionError):
        get(web, "hostile-reset.test", "/", ua="reset")
    with pytest.raises(requests.exceptions.ConnectionError):
        get(web, "hostile-refused.test", "/", ua="refused", timeout=3)
    for ua, min_s, max_s in (("drip", 2.0, 6.0), ("huge", 0.0, 6.0), ("hang", 0.9, 6.0)):
        line = log_for(web, ua, n=1)[0]
        assert line["aborted"] and min_s <= line["end"] - line["start"] <= max_s, line
    assert log_for(web, "reset", n=1)[0]["aborted"]


def test_malformed_responses(web):
    h = web.plan.host("hostile-badheaders.test")
    home = raw_request(h.address, web.port, h.name, "/")
    assert home.startswith(b"HTTP/1.1 200 OK\r\n") and b"/no-colon" in home
    checks = {"/no-colon": b"has no colon\r\n", "/bad-status": b"HTTP/1.1 2OO", "/lf-only": b"200 OK\nServer",
              "/huge-header": b"a" * 100_000, "/bad-chunk": b"\r\n\r\nzz\r\n", "/nul-header": b"a\x00b",
              "/http09": b"<!DOCTYPE html>", "/short-body": b"Content-Length: 1000"}
    for path, needle in checks.items():
        data = raw_request(h.address, web.port, h.name, path)
        assert needle in data, path
    assert raw_request(h.address, web.port, h.name, "/two-lengths").count(b"Content-Length:") == 2
    assert raw_request(h.address, web.port, h.name, "/http09").startswith(b"<!DOCTYPE")


def test_redirects_deep_and_many_links(web):
    r = get(web, "hostile-redirects.test", "/self")
    assert r.status_code == 301 and r.headers["Location"] == web.url("hostile-redirects.test", "/self")
    assert get(web, "hostile-redirects.test", "/loop-a").headers["Location"].endswith("/loop-b")
    assert get(web, "hostile-redirects.test", "/loop-b").headers["Location"].endswith("/loop-a")
    url, hops, hosts = web.url("hostile-redirects.test", "/cross/0"), 0, set()
    while True:
        parts = urlsplit(url)
        r = get(web, parts.hostname, parts.path)
        if r.status_code == 200:
            break
        hosts.add(parts.hostname)
        url, hops = r.headers["Location"], hops + 1
    assert hops == sites.CHAIN_HOPS and len(hosts) == 2
    codes = {get(web, "hostile-redirects.test", f"/chain/{i}").status_code for i in range(sites.CHAIN_HOPS)}
    assert codes == {301, 302, 303, 307, 308}
    deep = get(web, "hostile-deephtml.test", "/").content
    assert deep.count(b"<div>") == Knobs().deep_divs
    many = get(web, "hostile-manylinks.test", "/").content
    assert many.count(b"<a href=") == Knobs().many_links
    assert get(web, "hostile-manylinks.test", "/p/9999.html").status_code == 200
    assert get(web, "hostile-down.test", "/").status_code == 500
    flaky = [get(web, "hostile-flaky.test", "/").status_code for _ in range(30)]
    assert set(flaky) == {200, 503}


def test_retry_after_windows_are_flagged(web):
    ua = "throttle-client"
    r1 = get(web, "hostile-throttle-seconds.test", "/", ua=ua)
    assert r1.status_code == 429 and r1.headers["Retry-After"] == "2"
    assert get(web, "hostile-throttle-seconds.test", "/", ua=ua).status_code == 429  # inside the window
    time.sleep(2.1)
    assert get(web, "hostile-throttle-seconds.test", "/", ua=ua).status_code == 429  # second (last) window
    time.sleep(2.1)
    assert get(web, "hostile-throttle-seconds.test", "/", ua=ua).status_code == 200
    assert get(web, "hostile-throttle-seconds.test", "/", ua="another-client").status_code == 429
    lines = log_for(web, ua, n=4)
    assert [r["in_retry_after"] for r in lines] == [False, True, False, False]
    rd = get(web, "hostile-throttle-date.test", "/", ua=ua)
    assert rd.status_code == 429
    when = parsedate_to_datetime(rd.headers["Retry-After"]).timestamp()
    assert 1 <= when - time.time() <= KNOBS["retry_after_s"] + 1.5
    assert len([r for r in web.violations(1.0, max_in_flight_per_addr=2).retry_after if r["ua"] == ua]) == 1


def test_ssrf_bait_is_counted(web):
    h = web.plan.host("ssrf-links.test")
    assert {l.url for l in h.pages["/"].links if l.bait} == set(map(normalize, sites.bait_urls(web.port)))
    r = get(web, h.name, "/to-secret")
    assert r.status_code == 301 and r.headers["Location"] == f"http://127.0.0.1:{web.port}/secret"
    before = len(web.violations(1.0, max_in_flight_per_addr=2).bait)
    requests.get(f"http://127.0.0.1:{web.port}/secret", headers={"User-Agent": "bait"}, timeout=5)
    requests.get(f"http://127.66.0.1:{web.port}/", headers={"Host": "intranet.bait.test", "User-Agent": "bait"}, timeout=5)
    n = 2
    try:
        requests.get(f"http://[::1]:{web.port}/", headers={"User-Agent": "bait"}, timeout=5)
        n = 3
    except requests.exceptions.ConnectionError:
        pass  # no IPv6 loopback here
    log_for(web, "bait", n=n)
    v = web.violations(1.0, max_in_flight_per_addr=2)
    assert len(v.bait) == before + n
    assert {r["addr"] for r in v.bait if r["ua"] == "bait"} <= {"127.0.0.1", "127.66.0.1", "::1"}


def test_live_politeness_numbers(web):
    ua = "burst"
    for path in ("/", "/s0/", "/private/ok.html"):
        get(web, "robots-crawl-delay-2.test", path, ua=ua)
    lines = log_for(web, ua, n=3)
    v = analyze(lines, 1.0, {"robots-crawl-delay-2.test": 2.0}, max_in_flight_per_addr=2)
    assert len(v.too_close) == 2 and all(r["required_s"] == 2.0 for r in v.too_close)
    assert 0 <= v.min_gap_s < 1.0 and v.max_in_flight_by_host["robots-crawl-delay-2.test"] == 1
    assert all(r["end"] >= r["start"] and r["status"] == 200 and r["bytes"] > 0 for r in lines)
    assert "too close: 2" in v.summary()
    # real concurrency shows up as in-flight: five parallel 1-second robots.txt requests to one host
    with ThreadPoolExecutor(5) as pool:
        list(pool.map(lambda _: get(web, "robots-slow.test", "/robots.txt", ua="parallel"), range(5)))
    v = analyze(log_for(web, "parallel", n=5), 1.0, max_in_flight_per_addr=2)
    assert v.max_in_flight_by_host == {"robots-slow.test": 5} and len(v.overlapping) == 4


# ------------------------------------------------------------------ analysis on synthetic logs


def L(host, start, end, addr="127.10.0.1", **kw):
    return {"host": host, "addr": addr, "path": "/", "start": start, "end": end, "kind": kw.pop("kind", "site"),
            "disallowed": False, "in_retry_after": False, "bait": False, **kw}


@pytest.mark.parametrize("lines, delay, crawl, min_gap, too_close, overlapping, in_flight_host, in_flight_addr", [
    ([L("a", 0, 1), L("a", 2, 3)], 1.0, {}, 1.0, 0, 0, 1, 1),
    ([L("a", 0, 1), L("a", 1.5, 2)], 1.0, {}, 0.5, 1, 0, 1, 1),
    ([L("a", 0, 1), L("a", 1, 2)], 0.0, {}, 0.0, 0, 0, 1, 1),            # touching intervals do not overlap
    ([L("a", 0, 3), L("a", 1, 2), L("a", 2.5, 4)], 1.0, {}, -2.0, 2, 2, 2, 2),  # gap from the latest end so far
    ([L("a", 0, 1), L("b", 0.5, 1.5), L("a", 3, 4)], 1.0, {"a": 2.5}, 2.0, 1, 0, 1, 2),  # crawl-delay raises it
    ([L("a", 0, 1, addr="x"), L("b", 0, 1, addr="y"), L("c", 0.2, 0.4, addr="x")], 1.0, {}, None, 0, 0, 1, 2),
    ([L("a", 5, 6), L("a", 0, 1)], 1.0, {}, 4.0, 0, 0, 1, 1),            # order of lines does not matter
])
def test_analysis_gaps_and_in_flight(lines, delay, crawl, min_gap, too_close, overlapping, in_flight_host, in_flight_addr):
    v = analyze(lines, delay, crawl, max_in_flight_per_addr=2)
    assert v.min_gap_s == min_gap
    assert len(v.too_close) == too_close and len(v.overlapping) == overlapping
    assert v.max_in_flight_host == in_flight_host and v.max_in_flight_addr == in_flight_addr


def test_analysis_flags_and_counts():
    lines = [L("a", 0, 1), L("a", 2, 3, disallowed=True), L("t", 0, 1, kind="trap"), L("t", 5, 6, kind="trap"),
             L("b", 0, 1, in_retry_after=True), L("127.0.0.1", 0.5, 0.6, addr="127.0.0.1", bait=True, kind="bait")]
    v = analyze(lines, 1.0, max_in_flight_per_addr=3)
    assert v.counts() == {"requests": 6, "too_close": 0, "overlapping": 0, "disallowed": 1, "retry_after": 1,
                          "bait": 1, "max_in_flight_host": 1, "max_in_flight_addr": 3, "crowded_addrs": 0,
                          "trap_requests": 2}
    assert v.requests_by_host == {"a": 2, "b": 1, "t": 2} and v.trap_requests == {"t": 2}
    assert not v.clean and "SSRF bait: 1" in v.summary()
    assert v.min_slack_s == 0.0 and v.min_gap_by_host == {"a": 1.0, "t": 4.0}
    assert analyze([L("a", 0, 1), L("a", 2.5, 3)], 1.0, max_in_flight_per_addr=1).clean


def test_analysis_per_address_in_flight_over_the_cap_is_not_clean():
    # three hosts on one address, each polite on its own: only the per-address cap catches them
    lines = [L("a", 0, 1), L("b", 0.2, 1.2), L("c", 0.4, 1.4), L("d", 0, 1, addr="127.10.0.2")]
    assert analyze(lines, 1.0, max_in_flight_per_addr=3).clean
    v = analyze(lines, 1.0, max_in_flight_per_addr=2)
    assert v.too_close == [] and v.overlapping == [] and v.max_in_flight_host == 1
    assert v.crowded_addrs == {"127.10.0.1": 3} and not v.clean
    assert "per address 3 (cap 2, 1 address(es) over it)" in v.summary()
    assert "crowded: 127.10.0.1 3 in flight > cap 2" in v.summary()


class _FakeTransport:
    def __init__(self, pending: int = 0):
        self.pending, self.written = pending, []

    def write(self, data: bytes) -> None:
        self.written.append((time.time(), data))
        time.sleep(0.03)  # as if the kernel ran the woken client before this server resumed

    def get_write_buffer_size(self) -> int:
        return self.pending

    def is_closing(self) -> bool:
        return False


@pytest.mark.parametrize("case", ["sent", "buffered", "aborted"])
def test_log_end_is_stamped_just_before_the_last_write(case):
    """``end`` is when the server last handed the client bytes (stamped before the write, so a
    client can never have read them before it), whether the response was complete or cut off
    by the client (``aborted``); when bytes of a complete response stay buffered, it is when
    the exchange was logged."""
    from tests.testweb.server import Exchange, TestWebServer

    class Log:
        def write(self, rec):
            self.rec = dict(rec)

    srv = type("S", (), {"log": Log()})()
    transport = _FakeTransport(pending=100 if case == "buffered" else 0)
    ex = Exchange("a.test", "127.1.0.1", "/", "GET", "ua", "127.0.0.1", transport)
    ex.transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    ex.transport.write(b"body")
    if case == "aborted":
        ex["aborted"] = True
    TestWebServer.finish(srv, ex)
    last_write_called = transport.written[-1][0]
    if case in ("sent", "aborted"):
        assert ex["start"] <= srv.log.rec["end"] <= last_write_called
    else:
        assert srv.log.rec["end"] >= last_write_called + 0.03
