"""deltacrawl's local test web: a few hundred virtual hosts on loopback, one port, a request log.

    from tests.testweb import TestWeb
    with TestWeb(tmp_path, n_hosts=300, seed=7) as web:      # a subprocess server, ready on return
        crawl(seeds=web.seeds(kinds=["site"]), hosts_file=web.hosts_file, allow=web.allow_cidrs)
        v = web.violations(host_delay_s=1.0, max_in_flight_per_addr=2)
        assert v.clean, v.summary()

Every host name ends in ``.test`` and maps, in the generated hosts file
(/etc/hosts format, for ``net.hosts_file``), to its own 127.10.x.y address
(``net.allow_private_cidrs=["127.10.0.0/16"]``); sites ``j % 25 in (1, 2)``
share the address of site ``j - j % 25`` (shared hosting). All addresses
listen on one port; the Host header picks the virtual host, and a request on
the wrong address gets 421. Bait listeners (127.0.0.1, 127.66.0.1, [::1] on
the same port, plus ``intranet.bait.test`` -> 127.66.0.1 and
``admin.bait.test`` -> 127.0.0.1 in the hosts file) answer 200 and log
``bait: true``. Every response first waits knobs.latency_s (20 ms), so that
concurrent requests really overlap in the log. Everything is generated from (seed, n_hosts, kinds, knobs): the
special hosts of the selected kinds come first (named ``{kind}-{variant}.test``),
ordinary sites ``{topic}-{j}.test`` (news-0 … news-9, shop-10 …) fill up to
``n_hosts``. ``web.plan`` holds the same plan the server uses (hosts, pages,
links with their resolved targets, robots rules); ``model.Knobs`` holds the
timings. ``python -m tests.testweb plan --n-hosts 50`` lists it. Plain
(uncompressed) HTML pages and files carry an ETag (of the body) and a
Last-Modified, and answer a conditional GET they satisfy with 304; a page
whose body changes per response (a timestamp, a session id) never does.

Host kinds (one line each; the variant is the part of the name after the kind):

site (ordinary sites, robots rotate allow-all/plain/wildcard/agent-group/sitemap)
- ``{topic}-{j}``: 1-300 pages (news-0 has 300, news-1 has 1, others log-uniform): sections, articles,
  deep /s/Y/M/ paths, PDF/PNG/CSV files, /intl/ pages in other charsets, /hidden/ pages linked only with
  rel=nofollow, /embed/ only via <iframe>, /map/ only via <area>, <base href>, rel=canonical, meta robots
  noindex/nofollow on some leaves, mailto:/javascript: links, links to other sites, a dead-host link
  (nxdomain-N.test) on every 4th home page, an SSRF bait link on every 5th; sites of >= 10 pages carry
  /private/, /private/ok.html, /private/secret.html, /members/, /members/profile.html, a PDF and a CSV.
  Links are written in every form: root, relative, ./, ../, excess ../, absolute, protocol-relative,
  #fragment, utm_*/gclid/fbclid, odd-case scheme and host, %-encoded letters, surrounding whitespace.
- ``site-linkforms``: 40 pages; its home page carries one link of every form, plus tel:, mailto:, javascript:, #.
- ``site-charsets``: one page per (charset, declaration) in sites.CHARSET_COMBOS: ISO-8859-1, windows-1252,
  Shift_JIS, KOI8-R declared in the header, in <meta charset>, in http-equiv, nowhere, header-vs-meta
  (header wins); UTF-8 with BOM and undeclared; UTF-16LE with BOM. ``Page.text`` is the true text.

robots (a 14-page site whose robots.txt is the variant; see robots.VARIANTS for the exact rules)
- ``robots-allow-all``, ``-plain``, ``-wildcard`` (* and $), ``-agent-group`` (deltacrawl vs *),
  ``-sitemap``, ``-disallow-all``, ``-bom-case`` (BOM, upper-case keys, 'DeltaCrawl' group)
- ``robots-crawl-delay-2``, ``robots-crawl-delay-3600`` (absurd: a polite crawler defers the host)
- ``robots-404``, ``robots-410`` (allow all), ``robots-5xx`` (503: nothing may be fetched)
- ``robots-slow``: answers after knobs.robots_slow_s (5 s)
- ``robots-redirect``: 301 to /robots-real.txt; ``robots-redirect-chain``: 301, 302, 307 then the rules
- ``robots-huge``: ~620 KB, Disallow /early/ first, Disallow /beyond/ only after 500 KiB (not held against you)
- ``robots-changing``: allow-all, then Disallow: / after knobs.robots_change_after_s seconds or
  robots_change_after_requests requests to that host (never, if neither is set)

trap (robots allow all)
- ``trap-calendar``: /calendar/2026/11/30 links prev/next day, +1 month, +1 year, forever
- ``trap-session``: 15 pages, every link carries ;jsessionid= and/or ?sid= that change on every response
- ``trap-facets``: /search?color=&size=&sort=&page= in any order and combination, next page forever
- ``trap-repeat``: /r/a/b/ links a/b/, b/a/, ./a/ -> /r/a/b/a/b/... forever
- ``trap-deep``: /d/1/ links 2/ -> /d/1/2/3/... forever

dup (near-duplicates; pages of one article share ``Page.dup_group``; the truth: ``plan.dup_clusters()``,
``plan.dup_pairs()``: 12 article groups of 7 URLs, 252 pairs; 10 briefs, each a group of its own)
- ``dup-origin``: 12 articles, a timestamp line that changes per request, /print/ versions (canonical to
  the article), home links with utm_ variants and a ?ref=front variant (same content, other URL);
  10 briefs /brief/N.html: 10-60 words of their own in one heavy template (a 400-word notice inside
  <main> and the site's boilerplate): distinct pages, the negatives
- ``dup-mirror-a``: the same articles at /news/K/ (and /news/K/?page=1) with other boilerplate,
  rel=canonical to the origin, and a rotating ad (div.advert inside <main>) new on every response
- ``dup-mirror-b``: the same articles at /stories/K.html (and ?ref=home) with other boilerplate, no
  canonical, and session ids (;jsessionid= / ?sid=) in their links, new on every response

hostile (robots allow all)
- ``hostile-drip``: / sends knobs.drip_bytes every drip_interval_s for drip_total_s
- ``hostile-huge``: / streams knobs.huge_bytes (300 MiB) with Content-Length; /chunked the same chunked
- ``hostile-bombs``: / is gzip-encoded HTML; /gzip and /br are ~1 GiB of zeros compressed (~1 MB, ~3 KB)
  sent whatever Accept-Encoding says; /small-br.html is a brotli-encoded page
- ``hostile-redirects``: /self (self loop), /loop-a <-> /loop-b, /chain/0 -> ... -> /chain/12 (301/302/303/
  307/308), /cross/0 -> hostile-redirects-b /cross/1 -> ... -> /cross/12, /xloop across both hosts
- ``hostile-redirects-b``: the other half of the cross-host chain and loop
- ``hostile-throttle-seconds`` / ``hostile-throttle-date``: a 6-page site; the first knobs.throttle_count
  requests (per client = peer address + User-Agent) outside a window get 429 with Retry-After in seconds /
  as an HTTP-date (knobs.retry_after_s, 12 s: more than the crawler's back-off), each opening a window;
  requests inside a window get 429 again and are logged ``in_retry_after``; after that, 200s
- ``hostile-flaky``: a 10-page site answering 503 with probability knobs.flaky_p (seeded sequence)
- ``hostile-down``: every page 500 (robots.txt fine)
- ``hostile-hang``: / waits knobs.hang_s (120 s) before the headers
- ``hostile-reset``: / resets the connection (RST) after reading the request; /partial mid-body
- ``hostile-badheaders``: / is fine and links /no-colon, /bad-status, /two-lengths, /huge-header,
  /lf-only, /http09, /bad-chunk, /short-body, /nul-header (raw socket server)
- ``hostile-deephtml``: / is knobs.deep_divs (100k) nested <div>s with links at the top and the bottom
- ``hostile-manylinks``: / has knobs.many_links (10k) links to /p/N.html
- ``hostile-refused``: in the hosts file at 127.10.255.254, where nothing listens

ssrf
- ``ssrf-links``: links to 127.0.0.1, intranet.bait.test, [::1], 127.66.0.1, localhost, 2130706433
  (decimal 127.0.0.1), admin.bait.test, and /to-* pages that redirect (301/302/307/308) to them

live (opt-in: ``Knobs(live_hosts=H)``; none by default, so the counts above never change)
- ``live-0.test`` ... : a home page listing ``/live/0`` ... ``/live/{live_pages-1}``, pages whose main text
  changes as Poisson processes at known rates (log-uniform over live_rate_min..live_rate_max per nominal
  second, ``live_time_scale`` real seconds each), with Last-Modified, ETag and 304s; the truth
  (``tests/testweb/live.py``) is ``web.live`` and ``DIR/live.json``; ``tests/testweb/staleness.py``
  judges a crawler's copies from the log. ``kinds=[]`` with ``n_hosts=0`` serves the live hosts alone.

Request log (one JSON line per request, ``web.log()``): host, addr, path (path+query as sent), method, ua,
peer, start, end, status, bytes (body bytes sent), kind, disallowed, in_retry_after, bait, aborted
(and ``live_version``, the version served, for a live page).
"""

from .analysis import Violations, analyze, read_log
from .model import Knobs, Link, Page, normalize
from .sites import KINDS, HostPlan, Plan, build_plan
from .web import TestWeb

__all__ = ["TestWeb", "Plan", "HostPlan", "Page", "Link", "Knobs", "Violations", "analyze", "read_log",
           "build_plan", "normalize", "KINDS"]
