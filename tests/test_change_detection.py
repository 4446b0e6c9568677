"""Change detection by main text (``schedule.unchanged_simhash_bits``) on the test web's own pages:
a re-render changes only boilerplate (the origin's timestamp, mirror-a's rotating ad, mirror-b's
session ids in links), which moves the payload digest and not the main-text SimHash; an inserted
paragraph moves it further. Pure: the test web's renderer, fetch's parser and SimHash, no server.
The transition's use of it: tests/test_update.py (``ok_boilerplate_only`` and the rows after it)."""

from __future__ import annotations

import dataclasses
import random

from crawl_udfs import config, parser
from crawl_udfs.signatures import payload_digest
from crawl_udfs.simhash import hamming, simhash
from crawl_udfs.url_normalize import UrlNormalizer
from tests.testweb import render, sites

CONF = config.defaults()
NORM = UrlNormalizer(CONF.url)
BITS = CONF.schedule.unchanged_simhash_bits


def _copy(page, sid: str, now: float) -> tuple[str, int]:
    """(payload digest, main-text SimHash) of one response of ``page``, as the fetch task computes them."""
    body, ctype = render.html(page, sid=sid, now=now)
    parsed = parser.parse(body, url="http://x.test" + page.path, content_type=ctype, headers={}, normalizer=NORM,
                          parse_conf=CONF.parse, agent_name="deltacrawl")
    return payload_digest(body), simhash(parsed.main_text, CONF.simhash.shingle_words)


def _dup_pages():
    plan = sites.build_plan(n_hosts=3, seed=7, port=8080, kinds=["dup"])
    return [plan.page(url) for h in plan.by_kind("dup") for url in h.reachable()]


def test_boilerplate_only_changes_are_unchanged_and_an_inserted_sentence_is_a_change():
    pages = _dup_pages()
    moved, edited = [], []
    rng = random.Random(1)
    for page in pages:
        (d1, s1), (d2, s2) = _copy(page, "SESSIONAAAA1", 1.7e9 + 0.25), _copy(page, "SESSIONBBBB2", 1.7e9 + 86400.5)
        if d1 != d2:
            moved.append(hamming(s1, s2))
        if page.dup_group and page.dup_group.startswith("article-"):
            words = page.text.split(" ")
            at = rng.randrange(len(words))
            text = " ".join(words[:at] + sites.prose(rng, 60).split(" ") + words[at:])
            edited.append(hamming(s1, _copy(dataclasses.replace(page, text=text), "SESSIONAAAA1", 1.7e9 + 0.25)[1]))
    # every article of the origin (timestamp), mirror-a (ad) and mirror-b (session ids) changes its digest
    assert len(moved) >= 36, len(moved)
    assert max(moved) <= BITS, sorted(moved)
    # an inserted 60-word paragraph is a change for (nearly) every 420-word article (measured: 99.5 %; a
    # 12-word sentence: 87 %, one word replaced: 53 %; jobs/update.py, "Changed")
    assert sum(b > BITS for b in edited) >= 0.95 * len(edited) and len(edited) >= 36, sorted(edited)
