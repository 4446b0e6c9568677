"""URL admission: one table of cases, run through every path that admits URLs.

The same :data:`CASES` go through ``crawl_udfs.admission`` directly, through
inject's seed parsing (the seed cases, on a small DataFrame) and through a real
fetch task (the link, canonical and redirect cases: a loopback server serves one
page per case, and the task's result says what it kept). ``update`` inserts
what the task returned and applies no rule of its own (``test_update.py``).
"""

from __future__ import annotations

import http.server
import pickle
import threading

import pytest

from crawl_udfs import config
from crawl_udfs.admission import SEED, Admission, depth_of, followed
from crawl_udfs.partition import fetch_partition
from crawl_udfs.rows import FetchItem, FetchResult
from crawl_udfs.url_normalize import fingerprint, host_of
from tests.urls import normalize
from tests.net import free_loopback_port

SCOPE = ["scope.max_depth=2", 'scope.allow_hosts=["\\\\.test$"]', 'scope.deny_hosts=["^evil\\\\."]']
CONFS = {
    "open": config.load(overrides=SCOPE),
    "same_host": config.load(overrides=[*SCOPE, "scope.same_host_only=true"]),
}
A = "http://a.test"

#: (conf, url, kind, source host, parent depth) -> None (admitted) or the rule's reason.
CASES = [
    # trap rules, for every kind
    ("open", A + "/", SEED, None, 0, None),
    ("open", A + "/news/2024/story.html?id=7&page=2", "a", "a.test", 0, None),
    ("open", A + "/a/b/a/x.html", "a", "a.test", 0, None),                 # a segment twice is fine (max 2)
    ("open", A + "/" + "/".join("abcdefghijk"), "a", "a.test", 0, "path_depth"),
    ("open", A + "/a/x/a/y/a/z", "a", "a.test", 0, "repeated_segment"),    # one segment three times
    ("open", A + "/a/b/a/b/", SEED, None, 0, "repeated_segment"),          # a run repeating back to back
    ("open", A + "/x/x", "canonical", "a.test", 0, "repeated_segment"),    # the canonical link too
    ("open", A + "/p/q/r/p/q/r", "redirect", "a.test", 0, "repeated_segment"),
    ("open", A + "/s?a=1&b=2&c=3&d=4", "a", "a.test", 0, None),
    ("open", A + "/s?a=1&b=2&c=3&d=4&e=5", "a", "a.test", 0, "query_params"),
    ("open", A + "/calendar/2026/11", SEED, None, 0, "deny_pattern"),
    ("open", A + "/list?date=2026-01-01", "redirect", "a.test", 0, "deny_pattern"),
    ("open", A + "/(S(abcdefghijklmnop12))/page.aspx", "a", "a.test", 0, "deny_pattern"),
    ("open", A + "/p?shop_sess_key=0123456789abcdef0123", "canonical", "a.test", 0, "deny_pattern"),
    ("open", A + "/sessions/2024-talks.html", "a", "a.test", 0, None),      # the word alone is no session id
    ("open", A + "/p?session_name=keynote", "a", "a.test", 0, None),        # short value: a name, not a token
    ("open", A + "/(S(short))/page.aspx", "a", "a.test", 0, None),          # too short for an ASP.NET session
    ("open", A + "/events/summer-party.html", "a", "a.test", 0, None),      # an events page that is no calendar
    # depth: a link is one deeper than its page; redirect and canonical targets keep the page's depth
    ("open", A + "/deep", "a", "a.test", 1, None),
    ("open", A + "/deeper", "a", "a.test", 2, "too_deep"),
    ("open", A + "/same-doc", "canonical", "a.test", 2, None),
    ("open", A + "/moved", "redirect", "a.test", 2, None),
    ("open", A + "/moved-deep", "redirect", "a.test", 3, "too_deep"),
    # hosts: allow and deny lists (Python regexes searched in the host), same-host rule
    ("open", "http://b.test/x", "a", "a.test", 0, None),
    ("open", "http://b.example/x", "a", "a.test", 0, "host_not_allowed"),
    ("open", "http://b.example/", SEED, None, 0, "host_not_allowed"),
    ("open", "http://evil.test/x", "a", "a.test", 0, "host_denied"),
    ("open", "http://evil.test/", SEED, None, 0, "host_denied"),
    ("open", "http://evil.test/to", "redirect", "a.test", 0, "host_denied"),
    ("same_host", "http://b.test/x", "a", "a.test", 0, "other_host"),
    ("same_host", "http://b.test/x", "canonical", "a.test", 0, "other_host"),
    ("same_host", "http://b.test/x", "redirect", "a.test", 0, "other_host"),
    ("same_host", A + ":8080/x", "a", "a.test", 0, None),                  # the host, not the port
    ("same_host", "http://b.test/", SEED, None, 0, None),                  # a seed has no source host
]


@pytest.mark.parametrize("conf_name,url,kind,source_host,parent_depth,reason", CASES)
def test_module(conf_name, url, kind, source_host, parent_depth, reason):
    assert normalize(url) == url   # the table holds normalised URLs, as every path passes them on
    admission = Admission(CONFS[conf_name])
    assert admission.reason(url, kind=kind, source_host=source_host, parent_depth=parent_depth) == reason
    # the verdict survives the trip to an executor
    again = pickle.loads(pickle.dumps(admission))
    assert again.reason(url, kind=kind, source_host=source_host, parent_depth=parent_depth) == reason


def test_a_pages_outlinks_in_one_call_get_reasons_verdicts():
    """Admission.admitted (the fetch task's per-page call) is reason() is None, link by link, whatever
    the mix of kinds and depths: the table's page-found cases grouped by page."""
    pages: dict = {}
    for conf_name, url, kind, source_host, parent_depth, reason in CASES:
        if kind != SEED:
            pages.setdefault((conf_name, source_host, parent_depth), []).append((url, kind, reason))
    assert len(pages) > 3
    for (conf_name, source_host, parent_depth), links in pages.items():
        got = Admission(CONFS[conf_name]).admitted([(u, k) for u, k, _ in links], source_host=source_host,
                                                   parent_depth=parent_depth)
        assert got == [reason is None for _, _, reason in links], (conf_name, source_host, parent_depth)


def test_rules_come_from_config():
    loose = Admission(config.load(overrides=["filter.max_query_params=10", "filter.deny_patterns=[]",
                                             "scope.max_depth=-1"]))
    assert loose.reason(A + "/s?a=1&b=2&c=3&d=4&e=5") is None
    assert loose.reason(A + "/calendar/2026/11") is None
    assert loose.reason(A + "/x", kind="a", source_host="a.test", parent_depth=10 ** 6) is None


def test_depth_of():
    assert [depth_of(3, k) for k in (SEED, "a", "frame", "canonical", "redirect")] == [0, 4, 4, 3, 3]


@pytest.mark.spark
def test_inject_path(spark):
    from jobs import inject

    for conf_name, conf in CONFS.items():
        seeds = [c for c in CASES if c[0] == conf_name and c[2] == SEED]
        lines = spark.createDataFrame([(c[1],) for c in seeds], "value string")
        got = {r.raw: r.reason for r in inject.parse_seeds(lines, conf).collect()}
        assert got == {c[1]: c[5] for c in seeds}


class _Pages(http.server.BaseHTTPRequestHandler):
    """``/case/<i>``: an HTML page naming case i's URL as a link or canonical link, or a 301 to it."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        if not self.path.startswith("/case/"):
            self.send_error(404)
            return
        _, url, kind, *_ = CASES[int(self.path.rsplit("/", 1)[1])]
        if kind == "redirect":
            self.send_response(301)
            self.send_header("Location", url)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        tag = f'<link rel="canonical" href="{url}">' if kind == "canonical" else ""
        body = (f"<html><head><title>case</title>{tag}</head><body>"
                + ("" if kind == "canonical" else f'<a href="{url}">link</a>') + "</body></html>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_task_path(tmp_path):
    """The fetch task keeps exactly the links, canonical links and redirect targets the table admits."""
    port = free_loopback_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("127.0.0.1 a.test\n")
    try:
        for conf_name, conf in CONFS.items():
            conf = conf.with_overrides(f'net.hosts_file="{hosts_file}"', 'net.allow_private_cidrs=["127.0.0.1/32"]',
                                       "politeness.host_delay_s=0.01", "politeness.response_time_factor=0")
            cases = {i: c for i, c in enumerate(CASES) if c[0] == conf_name and c[2] != SEED}
            assert all(c[3] == "a.test" for c in cases.values())   # the page is served by a.test
            pages = {f"http://a.test:{port}/case/{i}": i for i in cases}
            items = [FetchItem(url=u, url_fp=fingerprint(u), host=host_of(u), depth=cases[i][4])
                     for u, i in pages.items()]
            out = fetch_partition(items, conf, warc_dir=str(tmp_path / conf_name), warc_name=lambda i: f"a-{i}.warc.gz")
            results = {r.url: r for r in out if isinstance(r, FetchResult)}
            for url, i in pages.items():
                _, target, kind, _, _, reason = cases[i]
                r = results[url]
                kept = [(o.url, o.kind) for o in r.outlinks]
                assert kept == ([] if reason else [(target, kind)]), (cases[i], r.outcome)
                if kind == "redirect":
                    assert r.error_class == (f"redirect_filtered:{reason}" if reason else None), cases[i]
                else:
                    assert r.outcome == "ok" and r.outlinks_filtered == (1 if reason else 0), cases[i]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.spark
def test_followed_is_updates_rule(spark):
    """crawlloop and update follow the same outlinks: admission.followed against update's Column, every case."""
    from pyspark.sql import functions as F

    from jobs import discover_transforms as DT

    combos = [(k, n) for k in ("a", "frame", "canonical", "redirect") for n in (True, False)]
    links = spark.createDataFrame([((f"http://a.test/{i}", i, k, n, "a.test"),) for i, (k, n) in enumerate(combos)],
                                  "l struct<url:string,url_fp:long,kind:string,nofollow:boolean,host:string>")
    for follow_nofollow in (False, True):
        got = {r.k: r.f for r in links.select(F.col("l.url_fp").alias("k"),
                                              DT.followed(F.col("l"), follow_nofollow).alias("f")).collect()}
        assert got == {i: followed(k, n, follow_nofollow=follow_nofollow) for i, (k, n) in enumerate(combos)}
