"""The round's counters: declared once (schemas/counters.py), written and read through that declaration.

The unit tests pin the checks; the round test runs generate, fetch and update on a
small test web and compares the ledger's counts with the declaration both ways.
"""

from __future__ import annotations

import pytest

from jobs import rounds
from schemas import counters
from schemas.counters import COUNTERS, FAMILIES


def test_names_are_unique_and_each_has_a_verb_and_meaning():
    names = [c.name for c in COUNTERS] + [f.prefix + v for f in FAMILIES for v in f.values]
    assert len(names) == len(set(names))
    assert all(c.verb in ("generate", "fetch", "update") and c.meaning for c in COUNTERS)
    assert all(f.verb in ("generate", "fetch", "update") and f.meaning for f in FAMILIES)


def test_checked_refuses_an_undeclared_counter_or_another_verbs():
    assert counters.checked("fetch", {"bytes": 3, "fetched_ok": 1}) == {"bytes": 3, "fetched_ok": 1}
    with pytest.raises(KeyError, match="bytez"):
        counters.checked("fetch", {"bytez": 3})
    with pytest.raises(KeyError, match="new_urls"):
        counters.checked("fetch", {"new_urls": 3})       # update's counter


def test_readers_refuse_an_undeclared_name():
    assert counters.value({"new_urls": 4}, "new_urls") == 4
    assert counters.value(None, "frontier_size") == 0
    with pytest.raises(KeyError):
        counters.value({"new_url": 4}, "new_url")
    assert counters.family({"fetched_ok": 2, "fetched_error": 0, "bytes": 1}, "fetched_") == {"ok": 2, "error": 0}
    with pytest.raises(KeyError):
        counters.family({}, "fetch_")


def test_summary_reads_declared_counters():
    row = {"round": 3, "state": "updated", "seconds": {"fetch": 2.0},
           "counts": {"fetched_ok": 4, "fetched_deferred": 1, "bytes": 1234, "requests": 6, "robots_requests": 2,
                      "politeness_wait_ms": 1500, "new_urls": 7, "frontier_size": 9}}
    text = rounds.summary(row)
    assert "pages by outcome: deferred=1, ok=4" in text and "bytes 1,234  requests 6 (robots.txt 2)" in text
    assert "pages/s 2.00" in text and "politeness wait 1.5 s" in text and "new URLs 7  frontier 9" in text
    assert "tail cut" not in text
    row["counts"].update(fetched_not_attempted=5, tail_cut=3)   # of the 5 never tried, 3 left by the tail cut
    assert "pages by outcome: deferred=1, not_attempted=5 (tail cut 3), ok=4" in rounds.summary(row)


@pytest.mark.spark
def test_a_round_writes_exactly_the_declared_counters(spark, tmp_path):
    from crawl_udfs import config
    from jobs import cli, ledger
    from tests.testweb import TestWeb

    with TestWeb(tmp_path / "web", n_hosts=3, seed=5, kinds=["site"]) as web:
        sets = [f'storage.root="{tmp_path / "crawl"}"', f'net.hosts_file="{web.hosts_file}"',
                'net.allow_private_cidrs=["127.10.0.0/16"]', "politeness.host_delay_s=0.2",
                "fetch.task_budget_s=10.0", "generate.max_urls_per_host=3", "generate.fetch_partitions=1"]
        (tmp_path / "seeds.txt").write_text("\n".join(web.seeds()) + "\n")
        base = [arg for kv in sets for arg in ("--set", kv)]
        for verb in (["init"], ["inject", str(tmp_path / "seeds.txt")], ["crawl", "--rounds", "1"]):
            assert cli.main(base + verb) == 0, verb
        written = ledger.get_round(spark, config.load(overrides=sets), 1)["counts"]
    declared = {c.name for c in COUNTERS}
    members = {f.prefix + v for f in FAMILIES for v in f.values}
    assert set(written) - declared - members == set()                 # every counter written is declared
    assert declared - set(written) == set()                           # every declared counter is written
    for f in FAMILIES:                                                # and every family by some member
        assert counters.family(written, f.prefix), f.prefix
    assert written["generated"] > 0 and written["fetched_ok"] > 0 and written["new_urls"] > 0
    assert written["in_round_pages"] > 0  # links were followed inside the round (fetch.follow_in_round, on)
