"""UrlFilter: each trap rule rejects what it names and keeps ordinary pages (table-driven, default config)."""

import pytest

from crawl_udfs import config
from crawl_udfs.url_filter import UrlFilter

F = UrlFilter(config.defaults().filter)


@pytest.mark.parametrize("url,reason", [
    ("http://a.test/", None),
    ("http://a.test/news/2024/story.html?id=7&page=2", None),
    ("http://a.test/a/b/a/x.html", None),                      # a segment twice is still fine (max 2)
    ("http://a.test/" + "x" * 600, None),                      # length is url.max_length's (the normaliser)
    ("http://a.test/" + "/".join("abcdefghijk"), "path_depth"),
    ("http://a.test/a/x/a/y/a/z", "repeated_segment"),         # one segment three times
    ("http://a.test/a/b/a/b/", "repeated_segment"),            # a run repeating back to back
    ("http://a.test/x/x", "repeated_segment"),
    ("http://a.test/p/q/r/p/q/r", "repeated_segment"),
    ("http://a.test/s?a=1&b=2&c=3&d=4", None),
    ("http://a.test/s?a=1&b=2&c=3&d=4&e=5", "query_params"),
    ("http://a.test/calendar/2026/11", "deny_pattern"),
    ("http://a.test/list?date=2026-01-01", "deny_pattern"),
    ("http://a.test/(S(abcdefghijklmnop12))/page.aspx", "deny_pattern"),
    ("http://a.test/p?phpsessid=0123456789abcdef0123", "deny_pattern"),
])
def test_rules(url, reason):
    assert F.reason(url) == reason


def test_rules_come_from_config():
    loose = UrlFilter(config.load(overrides=["filter.max_query_params=10", "filter.deny_patterns=[]"]).filter)
    assert loose.reason("http://a.test/s?a=1&b=2&c=3&d=4&e=5") is None
    assert loose.reason("http://a.test/calendar/2026/11") is None


@pytest.mark.parametrize("url", [
    "http://a.test/sessions/2024-talks.html",                  # the word alone is no session id
    "http://a.test/p?session_name=keynote",                     # short value: a name, not a token
    "http://a.test/(S(short))/page.aspx",                       # too short for an ASP.NET session id
    "http://a.test/events/summer-party.html",                   # an events page that is no calendar
])
def test_session_and_calendar_patterns_keep_ordinary_urls(url):
    assert F.reason(url) is None
