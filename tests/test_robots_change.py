"""robots.txt that changes mid-crawl (issue 4, "Hostile input").

``robots-changing.test`` serves allow-all, then ``Disallow: /`` once it has
answered N requests. The crawler may keep fetching on its cached allow-all
rules until they expire (``robots.cache_ttl_s``); once it has fetched the new
rules, not one page request may follow. Judged from the test web's own log.
The crawl runs fetch_partition pass after pass (tests/crawlloop.py, the part
generate and update play on Spark), carrying the robots cache between passes.
"""

from __future__ import annotations

from crawl_udfs import config
from tests.crawlloop import crawl
from tests.testweb import TestWeb

HOST = "robots-changing.test"
CHANGE_AFTER = 4  # the host switches to Disallow: / after answering this many requests


def test_new_disallow_is_obeyed_once_the_cache_expires(tmp_path):
    with TestWeb(tmp_path / "web", n_hosts=20, seed=3, kinds=["robots"],
                 robots_change_after_requests=CHANGE_AFTER) as web:
        conf = config.load(overrides=[
            f'net.hosts_file="{web.hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]',
            "politeness.host_delay_s=0.2", "robots.cache_ttl_s=1.5", "fetch.task_budget_s=20"])
        seed = web.plan.host(HOST).url("/")
        stats = crawl([seed], conf, tmp_path / "warc", passes=6, per_host=3, max_pages_per_host=14)
        log = sorted((r for r in web.log() if r["host"] == HOST), key=lambda r: r["start"])

    # The server answered requests 1..CHANGE_AFTER with the old rules; from request CHANGE_AFTER+1 on, new ones.
    # The crawl must reach that request (how many pages precede the re-fetch depends on timing: a pass that
    # starts after the 1.5 s cache has expired re-fetches robots.txt first).
    assert len(log) > CHANGE_AFTER, [r["path"] for r in log]
    new_rules_fetched = [i for i, r in enumerate(log) if i >= CHANGE_AFTER and r["path"] == "/robots.txt"]
    assert new_rules_fetched, "the crawler never re-fetched robots.txt after its cache expired: " + str(
        [(r["path"], round(r["start"] - log[0]["start"], 2)) for r in log])
    first = new_rules_fetched[0]
    after = [r["path"] for r in log[first + 1:] if r["path"] != "/robots.txt"]
    assert after == [], f"page requests after the new Disallow: / was fetched: {after}"
    # Pages fetched before the change were fetched under the cached allow-all rules, as RFC 9309 permits.
    assert any(r["path"] != "/robots.txt" for r in log[:first])
    # And the crawler reports those URLs as robots_denied, not as failures.
    denied = [r for r in stats.results if r.host == HOST and r.outcome == "robots_denied"]
    assert denied, sorted({r.outcome for r in stats.results if r.host == HOST})


def test_error_page_triggers_a_robots_recheck(tmp_path):
    """A site that starts answering 403 and disallowing everything is obeyed at once, cache or not."""
    import asyncio
    import socket
    import threading

    from aiohttp import web

    from crawl_udfs.partition import fetch_partition
    from crawl_udfs.rows import FetchItem, FetchResult
    from crawl_udfs.url_normalize import fingerprint

    addr, log, served = "127.10.250.7", [], {"n": 0}
    with socket.socket() as s:
        s.bind((addr, 0))
        port = s.getsockname()[1]

    async def handle(request):
        served["n"] += 1
        changed = served["n"] > 4          # robots + 3 pages under the old rules
        log.append((request.path, changed))
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /\n" if changed else "User-agent: *\nAllow: /\n")
        return web.Response(status=403, text="go away") if changed else web.Response(
            text="<html><body>page</body></html>", content_type="text/html")

    loop = asyncio.new_event_loop()
    runner = web.AppRunner(_app(web, handle))
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, addr, port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        hosts_file = tmp_path / "hosts"
        hosts_file.write_text(f"{addr} recheck.test\n")
        conf = config.load(overrides=[
            f'net.hosts_file="{hosts_file}"', 'net.allow_private_cidrs=["127.10.0.0/16"]',
            "politeness.host_delay_s=0.05", "politeness.response_time_factor=0",
            "robots.cache_ttl_s=86400", "robots.recheck_after_error_s=0", "fetch.task_budget_s=20"])
        urls = [f"http://recheck.test:{port}/p{i}.html" for i in range(10)]
        items = [FetchItem(url=u, url_fp=fingerprint(u), host="recheck.test", depth=0) for u in urls]
        out = [r for r in fetch_partition(items, conf, hosts=[], warc_dir=str(tmp_path / "warc"),
                                          warc_name=lambda i: f"t-{i}.warc.gz") if isinstance(r, FetchResult)]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    paths = [p for p, _ in log]
    first_403 = next(i for i, (p, changed) in enumerate(log) if changed and p != "/robots.txt")
    recheck = paths.index("/robots.txt", 1)
    assert recheck == first_403 + 1, paths            # the rules are fetched again right after the error
    assert all(p == "/robots.txt" for p in paths[recheck:]), paths   # and obeyed: no page after them
    outcomes = {r.outcome for r in out}
    assert "robots_denied" in outcomes, outcomes


def _app(web, handle):
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    return app
