"""Page classification, table-driven: one response in, one verdict out, no event loop, no I/O.

Each row is (name, the response, the item's redirect hops, what the verdict must say). The
redirect rows are the one definition of redirect validity: ``update`` reads the outcome
(``bad_redirect``) and nothing else (tests/test_update.py row ``redirect_loop``).
"""

from __future__ import annotations

import pytest

from crawl_udfs import config
from crawl_udfs.classify import Store, admitted, classify, rules_for
from crawl_udfs.fetcher import FetchResponse
from crawl_udfs.rows import FetchItem, Outlink
from crawl_udfs.signatures import payload_digest
from crawl_udfs.url_normalize import UrlNormalizer, fingerprint

CONF = config.load()
RULES = rules_for(CONF, UrlNormalizer(CONF.url))
URL = "http://a.test/dir/page.html"
HTML = b"<html><title>t</title><a href='/x'>x</a></html>"
DEEP = "http://a.test/" + "/".join("abcdefghijkl")  # past filter.max_path_segments


def response(status=200, headers=(), body=b"", error_class=None) -> FetchResponse:
    return FetchResponse(URL, status, "R", "1.1", list(headers), body, len(body), None, "127.0.0.9",
                         "/dir/page.html", [("Host", "a.test")], 1_700_000_000.0, 3.0, 5.0, error_class,
                         "boom" if error_class else None)


SAME = payload_digest(b"same")  # the stored copy's payload digest in the CASES below: body b"same"


def item(hops=0, prev_digest=SAME, prev_record="<urn:old>") -> FetchItem:
    return FetchItem(url=URL, url_fp=fingerprint(URL), host="a.test", redirect_hops=hops, prev_digest=prev_digest,
                     prev_warc_record_id=prev_record, prev_fetch_time=1.0)


def loc(target: str):
    return [("Location", target)]


# name, response, hops, expected (outcome, error_class, redirect_to, store, parse)
CASES = [
    ("timeout", response(None, error_class="timeout_total"), 0, ("error", "timeout_total", None, Store.NOTHING, False)),
    ("no_status", response(None), 0, ("error", "other", None, Store.NOTHING, False)),
    ("ok_html", response(200, [("Content-Type", "Text/HTML; charset=utf-8")], HTML), 0,
     ("ok", None, None, Store.EXCHANGE, True)),
    ("ok_empty", response(204), 0, ("ok", None, None, Store.EXCHANGE, True)),
    ("not_modified", response(304), 0, ("not_modified", None, None, Store.REVISIT, False)),
    # a 2xx payload equal to the stored copy's (item's prev_digest): an identical-payload revisit, still parsed
    ("ok_same_payload", response(200, [("Content-Type", "text/html")], b"same"), 0,
     ("ok", None, None, Store.IDENTICAL, True)),
    ("gone", response(404, body=b"no"), 0, ("http_error", None, None, Store.EXCHANGE, False)),
    ("gone_same_payload", response(404, body=b"same"), 0, ("http_error", None, None, Store.EXCHANGE, False)),
    ("unavailable", response(503), 0, ("http_error", None, None, Store.EXCHANGE, False)),
    ("throttled", response(429), 0, ("http_error", None, None, Store.EXCHANGE, False)),
    ("redirect_301", response(301, loc("http://b.test/x")), 0,
     ("redirect", None, "http://b.test/x", Store.EXCHANGE, False)),
    ("redirect_relative", response(302, loc("../other.html")), 0,
     ("redirect", None, "http://a.test/other.html", Store.EXCHANGE, False)),
    ("redirect_last_allowed_hop", response(307, loc("/y")), CONF.fetch.max_redirect_hops - 1,
     ("redirect", None, "http://a.test/y", Store.EXCHANGE, False)),
    ("redirect_without_location", response(301), 0, ("bad_redirect", "bad_redirect", None, Store.EXCHANGE, False)),
    ("redirect_unusable_location", response(302, loc("mailto:x@a.test")), 0,
     ("bad_redirect", "bad_redirect", None, Store.EXCHANGE, False)),
    ("redirect_to_itself", response(301, loc(URL)), 0, ("bad_redirect", "redirect_loop", URL, Store.EXCHANGE, False)),
    ("redirect_hops_exhausted", response(308, loc("/y")), CONF.fetch.max_redirect_hops,
     ("bad_redirect", "too_many_redirects", "http://a.test/y", Store.EXCHANGE, False)),
    ("redirect_filtered", response(302, loc(DEEP)), 0,
     ("bad_redirect", "redirect_filtered:path_depth", DEEP, Store.EXCHANGE, False)),
    ("multiple_choices_no_location", response(300), 0, ("bad_redirect", "bad_redirect", None, Store.EXCHANGE, False)),
]


@pytest.mark.parametrize("name, resp, hops, want", CASES, ids=[c[0] for c in CASES])
def test_verdict(name, resp, hops, want):
    v = classify(item(hops), resp, RULES)
    r = v.row
    assert (r.outcome, r.error_class, r.redirect_to, v.store, v.parse) == want
    assert (r.url, r.host, r.status_code, r.fetch_time, r.redirect_hops) == (URL, "a.test", resp.status,
                                                                             resp.started_at, hops)
    if r.outcome == "redirect":
        assert [(o.url, o.kind) for o in r.outlinks] == [(r.redirect_to, "redirect")]
    else:
        assert r.outlinks == []
    if v.store in (Store.EXCHANGE, Store.IDENTICAL):
        assert r.digest == payload_digest(resp.body) and r.content_length == len(resp.body)
    elif v.store is Store.REVISIT:
        assert r.digest == SAME
    else:
        assert r.digest is None and r.warc_filename is None


def test_identical_payload_needs_the_stored_copys_record_and_the_rule_on():
    """No record id to refer to (a copy stored before ids were kept), or the rule off: a full response."""
    from dataclasses import replace
    same = response(200, [], b"same")
    assert classify(item(), same, RULES).store is Store.IDENTICAL
    assert classify(item(prev_record=None), same, RULES).store is Store.EXCHANGE
    assert classify(item(prev_digest=None), same, RULES).store is Store.EXCHANGE
    assert classify(item(), same, replace(RULES, revisit_identical=False)).store is Store.EXCHANGE


def test_headers_kept_are_the_configured_ones_lower_case_and_arrow_safe():
    bad = b"caf\xe9".decode("utf-8", "surrogateescape")
    resp = response(200, [("Content-Type", "text/html; charset=ISO-8859-1"), ("X-Secret", "1"),
                          ("ETag", '"e1"'), ("Server", bad)], HTML)
    v = classify(item(), resp, RULES)
    assert v.row.headers == {"content-type": "text/html; charset=ISO-8859-1", "etag": '"e1"', "server": "caf\ufffd"}
    assert (v.row.etag, v.row.content_type, v.content_type) == ('"e1"', "text/html", "text/html; charset=ISO-8859-1")


def test_outlink_admission_applies_to_the_canonical_too():
    links = [Outlink(url=u, url_fp=fingerprint(u), kind=k) for u, k in
             (("http://a.test/ok", "a"), (DEEP, "a"), (DEEP + "/c", "canonical"), ("http://a.test/c", "canonical"))]
    kept, dropped = admitted(links, item(), RULES)
    assert [(o.url, o.kind) for o in kept] == [("http://a.test/ok", "a"), ("http://a.test/c", "canonical")]
    assert dropped == 2


# -- robots.txt hops (crawl_udfs.robots_fetch.robots_step) -------------------------------------

ROBOTS = "http://a.test/robots.txt"
MAX_HOPS = CONF.fetch.max_redirect_hops


def robots_response(status=200, headers=(), body=b"User-agent: *\nDisallow: /x\n", error_class=None):
    r = response(status, headers, body, error_class)
    r.url = ROBOTS
    return r


# name, response, hops already taken, expected: ("hop", next url, its hops) or ("done", status, body?)
ROBOTS_CASES = [
    ("rules", robots_response(200), 0, ("done", 200, True)),
    ("missing", robots_response(404, body=b"no"), 0, ("done", 404, True)),
    ("server_error", robots_response(503, body=b""), 0, ("done", 503, True)),
    ("unreachable", robots_response(None, error_class="connect"), 0, ("done", None, False)),
    ("redirect_same_host", robots_response(301, loc("/robots-real.txt")), 0,
     ("hop", "http://a.test/robots-real.txt", 1)),
    ("redirect_other_host", robots_response(302, loc("http://b.test:81/robots.txt")), 2,
     ("hop", "http://b.test:81/robots.txt", 3)),
    ("redirect_last_hop", robots_response(307, loc("/r")), MAX_HOPS - 1, ("hop", "http://a.test/r", MAX_HOPS)),
    ("redirect_past_the_bound", robots_response(308, loc("/r")), MAX_HOPS, ("done", None, False)),
    ("redirect_to_itself", robots_response(301, loc(ROBOTS)), 0, ("done", None, False)),
    ("redirect_without_location", robots_response(301), 0, ("done", None, False)),
    ("other_3xx", robots_response(300, loc("/r")), 0, ("done", None, False)),
]


@pytest.mark.parametrize("name, resp, hops, want", ROBOTS_CASES, ids=[c[0] for c in ROBOTS_CASES])
def test_robots_step(name, resp, hops, want):
    from crawl_udfs.robots_fetch import RobotsDone, RobotsFetch, robots_step

    step = robots_step(RobotsFetch("a.test", ROBOTS, hops), resp, RULES.normalize, MAX_HOPS)
    if want[0] == "hop":
        assert isinstance(step, RobotsFetch) and (step.owner, step.url, step.hops) == ("a.test", *want[1:])
    else:
        assert isinstance(step, RobotsDone) and step.status == want[1]
        assert step.body == (resp.body if want[2] else None)


# -- the verdict applied (crawl_udfs.pages): which WARC record is written ------------------------------
@pytest.mark.parametrize("status, body, profile, payload_digest", [
    (200, b"same", "identical-payload-digest", SAME),   # the stored copy's payload again
    (304, b"", "server-not-modified", None),
])
def test_page_work_writes_a_revisit_of_the_stored_copy(tmp_path, status, body, profile, payload_digest):
    """A revisit record names the copy the fetch list carries (record id, URI, date), and the row says so
    (``warc_refers_to``); the row of the 200 stays ``ok`` with its digest, parsed."""
    import io

    from warcio.archiveiterator import ArchiveIterator

    from crawl_udfs.pages import PageWork
    from crawl_udfs.url_normalize import CachedNormalizer
    from crawl_udfs.warc import RollingWarcWriter

    with RollingWarcWriter(str(tmp_path), CONF.warc, name_fn=lambda i: f"t-{i}.warc.gz") as w:
        work = PageWork(CONF, RULES, CachedNormalizer(UrlNormalizer(CONF.url), 100), w, {})
        it = item()
        r = work._apply(classify(it, response(status, [("Content-Type", "text/html")], body), RULES), it,
                        response(status, [("Content-Type", "text/html")], body))
    assert (r.warc_refers_to, r.digest) == ("<urn:old>", SAME)
    with open(tmp_path / r.warc_filename, "rb") as f:
        f.seek(r.warc_offset)
        rec = next(iter(ArchiveIterator(io.BytesIO(f.read(r.warc_length)))))
    h = rec.rec_headers
    assert rec.rec_type == "revisit" and h.get_header("WARC-Profile").endswith("/revisit/" + profile)
    assert (h.get_header("WARC-Refers-To"), h.get_header("WARC-Refers-To-Target-URI")) == ("<urn:old>", URL)
    assert (h.get_header("WARC-Refers-To-Date"), h.get_header("WARC-Payload-Digest")) == (
        "1970-01-01T00:00:01.000Z", payload_digest)
    assert rec.content_stream().read() == b""


def test_page_work_writes_a_changed_payload_in_full(tmp_path):
    from crawl_udfs.pages import PageWork
    from crawl_udfs.url_normalize import CachedNormalizer
    from crawl_udfs.warc import RollingWarcWriter

    with RollingWarcWriter(str(tmp_path), CONF.warc, name_fn=lambda i: f"t-{i}.warc.gz") as w:
        work = PageWork(CONF, RULES, CachedNormalizer(UrlNormalizer(CONF.url), 100), w, {})
        resp = response(200, [("Content-Type", "text/html")], HTML)
        r = work._apply(classify(item(), resp, RULES), item(), resp)
    assert r.warc_refers_to is None and r.outcome == "ok" and r.outlinks
