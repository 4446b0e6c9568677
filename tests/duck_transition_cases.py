"""Inputs of the differential tests of ``jobs/duck_transition.py`` (``tests/test_duck_transition.py``).

Each case is (crawl-DB rows, hosts rows, fetch_output rows, fetch_list rows) as dicts, built with the
helpers of ``tests/test_update.py``: the transition table (every row of ``docs/UPDATE.md``, plus a URL
followed inside the round and the fetch list's depth/score), the schedule's visits
(``tests/test_schedule.py``, with stored pages outside the round for the adaptive budget), gone URLs
retired, hosts parked and deferred, and a realistic round (``bench/verb_cost.py``'s synthetic fetch,
with a mix of outcomes and histories).
"""

from __future__ import annotations

import datetime as dt
import random

from crawl_udfs.url_normalize import fingerprint
from tests.test_schedule import HOST_REVISITS, U, VISITS, _http_date
from tests.test_update import FIRST, T0, TRANSITIONS, D, link, listed, old, page, sec

DAY = 86400.0


def host_row(host: str, **kw) -> dict:
    row = dict(host=host, consecutive_failures=0, pages_fetched=0, bytes_fetched=0, requests=0, duplicate_pages=0,
               new_content_pages=0, updated_round=0)
    row.update(kw)
    return row


def task_host(host: str, partition: int = 0, **kw) -> dict:
    """A fetch_output ``host`` row."""
    row = dict(round=1, partition=partition, kind="host", host=host, requests=1, parked=False)
    row.update(kw)
    return row


def table_case():
    """Every transition-table row (tests/test_update.py TRANSITIONS), a followed URL, listed depth/score."""
    pages, olds, flist = [], [], []
    for k, (name, p, o, _) in enumerate(TRANSITIONS):
        url = D + name
        pg = page(url, p["outcome"], **{kk: v for kk, v in p.items() if kk != "outcome"})
        pages.append(pg)
        olds.append(old(url, host=pg["host"], **o))
        if k % 3 == 0:
            flist.append(listed(url, depth=k % 4, score=0.5 + k, hops=k % 2))
    kid = D + "followed"
    pages.append(page(kid, "ok", status_code=200, digest="sha1:K", in_round=True, depth=2, score=0.25,
                      source_fp=fingerprint(D + "ok_first"), outlinks=[link(kid + "/x")]))
    pages.append(page(D + "new_unlisted", "http_error", status_code=404))  # in no list and not in the crawl DB
    hosts = [host_row("slow.test", next_allowed_at=T0 + sec(9 * 3600)),
             host_row("t.test", revisits=10, revisit_changes=3, revisit_span_s=10 * DAY)]
    tasks = [task_host("t.test", requests=30, next_allowed_at=T0 + sec(60)), task_host("slow.test", parked=None)]
    return olds, hosts, pages + tasks, flist


def visits_case():
    """tests/test_schedule.py's visits (each policy's history and interval) and stored pages outside the round."""
    pages, olds = [], []
    for name, (p, o, _) in VISITS.items():
        url = (U if "host" not in p else f"http://{p['host']}/") + name
        pages.append(page(url, p["outcome"], **{k: v for k, v in p.items() if k != "outcome"}))
        olds.append(old(url, **{**o, "host": pages[-1]["host"]}))
    long_hist = [600.0 * (k + 1) for k in range(40)]  # over schedule.change_history: the oldest dropped
    pages.append(page(U + "long_history", "ok", status_code=200, digest="sha1:L2"))
    olds.append(old(U + "long_history", status="fetched", digest="sha1:L1", last_visit_time=T0 - sec(7200),
                    change_intervals_s=long_hist, unchanged_span_s=5 * DAY, score=2.0, fetch_interval_s=3 * DAY))
    pages.append(page(U + "late_lastmod", "ok", status_code=200, digest="sha1:M2",
                      last_modified=_http_date(T0 - sec(5 * DAY))))  # older than the gap: not dated
    olds.append(old(U + "late_lastmod", status="fetched", digest="sha1:M1", last_visit_time=T0 - sec(DAY)))
    pages.append(page(U + "bad_lastmod", "ok", status_code=200, digest="sha1:M3", last_modified="yesterday"))
    olds.append(old(U + "bad_lastmod", status="fetched", digest="sha1:M1", last_visit_time=T0 - sec(DAY)))
    stored = [old(f"http://quiet.test/{k}", status="fetched" if k % 2 else "not_modified",
                  change_rate=None if k == 3 else 3e-8 * (k + 1), score=1.0 + k % 3) for k in range(20)]
    stored.append(old("http://quiet.test/never", status="unfetched", change_rate=1.0))
    hosts = [host_row(h, revisits=n, revisit_changes=x, revisit_span_s=t) for h, (n, x, t) in HOST_REVISITS.items()]
    hosts.append(host_row("s.test"))
    return olds + stored, hosts, pages, []


def gone_case():
    """404/410 in a row, retired at schedule.gone_checks; a gone URL back."""
    olds = [old(U + f"g{k}", status="gone" if k else "fetched", gone_checks=k or None) for k in range(4)]
    olds.append(old(U + "back", status="gone", gone_checks=2))
    pages = [page(U + f"g{k}", "http_error", status_code=404 if k != 1 else 410) for k in range(4)]
    pages.append(page(U + "back", "ok", status_code=200, digest="sha1:Z"))
    return olds, [], pages, []


def hosts_case():
    """host_next: a parked host, a host with two task rows, a host of page rows only, hosts not in the round."""
    a, b, c = "http://a.test/", "http://b.test/", "http://c.test/"
    pages = [page(a + "d1", "deferred", error_class="parked"), page(b + "d2", "not_attempted", error_class="x"),
             page(c + "d3", "deferred", error_class="retry_after")]
    olds = [old(a + "d1", next_fetch_time=T0 + sec(99 * 3600)), old(b + "d2"), old(c + "d3", next_fetch_time=None)]
    olds[-1]["next_fetch_time"] = T0 - sec(5)
    tasks = [task_host("a.test", parked=True, next_allowed_at=T0 + sec(30)),
             task_host("b.test", 0, requests=2, next_allowed_at=T0 + sec(50), robots_fetched_at=T0),
             task_host("b.test", 1, requests=3, next_allowed_at=T0 + sec(70), robots_fetched_at=T0 + sec(1)),
             task_host("e.test", parked=True)]
    hosts = [host_row("a.test", next_allowed_at=T0, parked_until=FIRST),
             host_row("c.test", next_allowed_at=T0 + sec(4 * 3600), parked_until=T0 + sec(8 * 3600)),
             host_row("zz.test", next_allowed_at=T0)]
    return olds, hosts, pages + tasks, []


def realistic_case(n_pages: int = 300, seed: int = 5):
    """A round built like bench/verb_cost.py's synthetic fetch: a fetch list over a dozen hosts, most pages
    ok with outlinks, the others every other outcome; half the URLs with a stored copy and a history."""
    rnd = random.Random(seed)
    outcomes = ([("ok", 200)] * 12 + [("not_modified", 304)] * 3
                + [("redirect", c) for c in (301, 302, 307, 308)]
                + [("http_error", c) for c in (404, 410, 403, 500, 429)]
                + [("error", None), ("robots_denied", None), ("robots_unavailable", None), ("deferred", None),
                   ("not_attempted", None), ("bad_redirect", 301)])
    hosts_n = [f"h{k}.test" for k in range(12)]
    pages, olds, flist = [], [], []
    for i in range(n_pages):
        host = hosts_n[i % len(hosts_n)]
        url = f"http://{host}/p/{i}.html"
        outcome, code = rnd.choice(outcomes)
        kw = dict(status_code=code, wire_bytes=rnd.choice([None, 5200]))
        if outcome in ("ok", "not_modified"):
            kw.update(digest=f"sha1:R{rnd.randint(0, 3) if rnd.random() < 0.5 else i}",
                      simhash=rnd.choice([None, 0, 1 << 20, (1 << 20) ^ rnd.choice([1, 3, 255])]),
                      content_type="text/html", warc_record_id=f"<urn:{i}>", etag=rnd.choice([None, f'"e{i}"']),
                      last_modified=rnd.choice([None, _http_date(T0 - sec(rnd.uniform(1, 9 * DAY)))]),
                      canonical=rnd.choice([None, url, f"http://{host}/c/{i % 7}"]),
                      warc_refers_to=rnd.choice([None, None, "<urn:orig>"]),
                      outlinks=[link(f"http://{host}/p/{(i * 7 + j) % n_pages}.html") for j in range(3)])
        if outcome in ("redirect", "bad_redirect"):
            kw.update(redirect_to=f"http://{host}/r/{i}", outlinks=[link(f"http://{host}/r/{i}", "redirect")])
        if outcome in ("error", "robots_unavailable"):
            kw.update(error_class="timeout")
        if code in (429, 503) or (code == 500 and rnd.random() < 0.5):
            kw.update(retry_after_s=rnd.choice([None, 120.0, 90000.0]))
        if outcome in ("deferred", "not_attempted"):
            kw.update(error_class="parked")
        pages.append(page(url, outcome, **kw))
        flist.append(listed(url, depth=rnd.randint(0, 3), score=rnd.choice([0.0, 0.1, 1.0, 4.0])))
        if rnd.random() < 0.6:
            stored = rnd.random() < 0.8
            gap = rnd.uniform(600, 20 * DAY)
            olds.append(old(url, host=host, status=rnd.choice(["fetched", "not_modified", "error_retry", "gone",
                                                                 "unfetched"]) if stored else "unfetched",
                            digest=f"sha1:R{rnd.randint(0, 3)}" if stored else None,
                            simhash=rnd.choice([None, 1 << 20, 7]) if stored else None,
                            last_visit_time=T0 - sec(gap) if stored and rnd.random() < 0.7 else None,
                            warc_fetch_time=T0 - sec(gap + 5) if stored else None,
                            change_intervals_s=[rnd.uniform(0, 5 * DAY) for _ in range(rnd.randint(0, 35))]
                            if stored else None,
                            unchanged_span_s=rnd.uniform(0, 30 * DAY) if stored else None,
                            change_rate=rnd.choice([None, 1e-6, 3e-5]), score=rnd.choice([0.0, 0.5, 2.0]),
                            retries=rnd.randint(0, 5), fetch_count=rnd.randint(0, 9),
                            gone_checks=rnd.choice([None, 1, 2]),
                            fetch_interval_s=rnd.choice([3600.0, 86400.0, 9e6]), etag=rnd.choice([None, '"old"']),
                            dup_of=rnd.choice([None, 42]), redirect_to=rnd.choice([None, "http://x.test/"]),
                            next_fetch_time=T0 + sec(rnd.uniform(-DAY, DAY)), first_fetched=rnd.choice([None, FIRST])))
    for k in range(40):  # stored pages of the crawl DB outside the round (the adaptive budget's others)
        olds.append(old(f"http://h{k % 12}.test/q/{k}", status=rnd.choice(["fetched", "not_modified", "gone"]),
                        change_rate=rnd.choice([None, 1e-7, 1e-5, 1e-3]), score=rnd.choice([0.0, 1.0, 3.0])))
    hosts = [host_row(h, revisits=rnd.choice([None, 0, 40]), revisit_changes=rnd.choice([None, 5, 20]),
                      revisit_span_s=rnd.choice([None, 0.0, 40 * DAY]), next_allowed_at=T0 + sec(rnd.uniform(0, 3600)),
                      parked_until=rnd.choice([None, T0 + sec(2 * DAY)])) for h in hosts_n[:9]]
    tasks = [task_host(h, k % 2, parked=rnd.choice([None, False, True]), next_allowed_at=T0 + sec(rnd.uniform(0, 600)),
                       requests=rnd.randint(0, 40)) for k, h in enumerate(hosts_n[2:])]
    return olds, hosts, pages + tasks, flist


CASES = {"table": table_case, "visits": visits_case, "gone": gone_case, "hosts": hosts_case,
         "realistic": realistic_case}
#: Config overrides of every policy (test_schedule.py's clamps).
POLICIES = {p: (f'schedule.policy="{p}"', "schedule.min_interval_s=600.0", "schedule.max_interval_s=5000000.0",
                "schedule.gone_checks=3", "schedule.change_history=32")
            for p in ("fixed", "nutch", "adaptive")}

