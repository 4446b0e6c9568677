"""Pipelined rounds (``generate.pipeline``): round N+1 generated from round N's fetch output and fetched
while update N runs (``jobs/rounds.py``, ``jobs/pending_round.py``).

One crawl of a small test web through the CLI (in process, the suite's session), two rounds with a
per-round cap and a page budget below two rounds of it, so round 1 leaves work for round 2 and the
budget binds while round 1 is not merged. Judged from the ledger's timestamps, the tables and
the test web's own request log. The protocol's rules (which round may open, which may be merged)
are checked on a bare ledger.
"""

from __future__ import annotations

import collections
import datetime as dt

import pytest

from crawl_udfs import config
from jobs import cli, common, ledger, ledger_chain
from jobs.ledger import RoundError
from tests.summary import note
from tests.testweb import TestWeb

DELAY = 0.5
ROUNDS = 2
CAP = 3            # generate.max_urls_per_host
BUDGET = 3         # budget.max_pages_per_host: round 1 fetches the home page, round 2 only 2 of its CAP


@pytest.fixture(scope="module")
def crawled(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("pipeline")
    with TestWeb(d / "web", n_hosts=12, seed=5, kinds=["site"]) as web:
        overlay = d / "pipeline.toml"
        overlay.write_text(
            f'[storage]\nroot = "{d / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
            f"[politeness]\nhost_delay_s = {DELAY}\n"
            "[fetch]\ntask_budget_s = 6.0\ntotal_timeout_s = 5.0\nfollow_in_round = false\n"
            f"[budget]\nmax_pages_per_host = {BUDGET}\n"
            f"[generate]\nmax_urls_per_host = {CAP}\nfetch_partitions = 2\npipeline = true\n")
        seeds = d / "seeds.txt"
        seeds.write_text("\n".join(web.seeds()) + "\n")
        base = ["--conf", str(overlay)]
        assert cli.main(base + ["init"]) == 0
        assert cli.main(base + ["inject", str(seeds)]) == 0
        assert cli.main(base + ["crawl", "--rounds", str(ROUNDS)]) == 0
        conf = config.load([overlay])
        v = web.violations(host_delay_s=DELAY, max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)
        yield web, conf, web.log(), v


def _table(spark, conf, name):
    return spark.read.format("delta").load(common.table_path(conf, name))


def test_update_of_a_round_runs_beside_the_next_fetch(spark, crawled):
    web, conf, log, v = crawled
    rows = ledger.current(spark, conf).rows
    assert sorted(rows) == list(range(1, ROUNDS + 1)) and all(r["state"] == "updated" for r in rows.values())
    for n in range(1, ROUNDS):
        # update N ended after fetch N+1 began, and began before fetch N+1 ended: they overlapped
        assert rows[n]["updated_at"] > rows[n + 1]["fetch_started_at"], (n, rows[n], rows[n + 1])
        assert rows[n + 1]["generated_at"] < rows[n]["updated_at"]
    gaps = [(rows[n + 1]["fetch_started_at"] - rows[n]["fetched_at"]).total_seconds() for n in range(1, ROUNDS)]
    note(f"pipelined rounds: seconds from round N fetched to round N+1 fetching: {[round(g, 1) for g in gaps]}")
    # round 2's list inputs were staged beside fetch 1 (generate.list_ahead, on by default with the pipeline)
    from pathlib import Path

    from jobs import list_ahead
    assert Path(list_ahead.ahead_dir(conf, 2), "candidates").is_dir()


def test_next_round_fetches_what_the_previous_one_found_once_and_politely(spark, crawled):
    web, conf, log, v = crawled
    note("pipelined crawl (server-side): " + v.summary().replace("\n", "; "))
    assert v.clean, v.summary()
    pages = collections.Counter((r["host"], r["path"]) for r in log if not r["path"].startswith("/robots.txt"))
    assert pages and max(pages.values()) == 1, [k for k, c in pages.items() if c > 1]
    crawldb = _table(spark, conf, "crawldb")
    fetch_list = _table(spark, conf, "fetch_list")
    # URLs round 1 discovered were listed in round 2, generated from round 1's fetch output before
    # update 1 inserted them, with the depth and score update 1 gave them
    found = crawldb.where("discovered_round = 1").select("url_fp", "depth", "score")
    listed = fetch_list.where("round = 2").select("url_fp", "depth", "score")
    both = found.join(listed, "url_fp").collect()
    assert len(both) >= 5, len(both)
    mismatched = (found.alias("c").join(listed.alias("l"), "url_fp")
                  .where("c.depth != l.depth OR abs(c.score - l.score) > 1e-12").count())
    assert mismatched == 0
    # and round 1's own URLs were not listed again in round 2
    assert fetch_list.where("round = 1").join(listed, "url_fp").count() == 0


def test_budget_holds_while_the_previous_round_is_not_merged(spark, crawled):
    web, conf, log, v = crawled
    answered = collections.Counter(r["host"] for r in log
                                   if not r["path"].startswith("/robots.txt") and r["status"] is not None)
    big = [h.name for h in web.plan.hosts.values() if len(h.pages) > 2 * BUDGET]
    assert big, "the test web has no host larger than the budget"
    note(f"pipelined crawl: pages per large host {sorted(answered[h] for h in big)} (budget {BUDGET})")
    assert max(answered.values()) <= BUDGET, answered.most_common(3)
    assert max(answered[h] for h in big) == BUDGET  # and it was reached: round 2 got the rest


# -- the protocol, on a bare ledger -------------------------------------------------------------------
@pytest.fixture
def bare(spark, tmp_path):
    c = config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"'])
    ledger_chain.Chain(spark, c).seed([])
    yield c
    ledger_chain._cache.pop(common.root(c), None)


def _to(spark, conf, n, *states):
    row = ledger.get_round(spark, conf, n) or {}
    for s in states:
        row = ledger.set_state(spark, conf, n, s, old=row, n_partitions=1)
    return row


def test_a_round_opens_beside_a_fetched_one_and_rounds_merge_in_order(spark, bare):
    r1 = _to(spark, bare, 1, "generated", "fetching", "fetched")
    assert ledger.step(spark, bare, "generate", row=r1).action == "skip"   # not pipelined: wait for update
    st = ledger.step(spark, bare, "generate", row=r1, pipeline=True)
    assert (st.action, st.round, st.pending["round"]) == ("run", 2, 1)
    _to(spark, bare, 2, "generated", "fetching", "fetched")
    # round 2 cannot be merged before round 1; update picks round 1 by default
    with pytest.raises(RoundError, match="round 1 is fetched, not updated: update it before round 2"):
        ledger.step(spark, bare, "update", round_no=2)
    assert ledger.step(spark, bare, "update").round == 1
    # and no third round opens while two are unmerged
    with pytest.raises(RoundError, match="round 1 is fetched"):
        ledger.step(spark, bare, "generate", pipeline=True)
    _to(spark, bare, 1, "updated")
    assert ledger.step(spark, bare, "update").round == 2
    assert ledger.step(spark, bare, "generate", pipeline=True).round == 3


# -- the view of a round not merged yet, on small DataFrames ----------------------------------------
def test_the_view_never_lists_or_follows_a_url_the_pending_round_fetched_or_found(spark):
    """Round 2 pending: A listed and fetched, B followed inside it (not in the crawl DB), C found on A
    and D on B (new), E known and due. U, found in round 1 and inserted unfetched by update 1, was
    followed inside round 2: generate 3 (beside update 2) must not list it again, nor A or B; fetch 3
    must not follow A, B, C, D or U (C and D are generated, not followed)."""
    from jobs import pending_round
    from tests.test_update import CONF, T0, frame, link, listed, old, page
    from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT

    a, b, c, d, e, u = (f"http://h.test/{x}" for x in "abcdeu")
    crawldb = frame(spark, [old(a, status="fetched", updated_round=1), old(e), old(u, discovered_round=1)], CRAWLDB)
    fl = frame(spark, [listed(a, n=2)], FETCH_LIST)
    fo = frame(spark, [page(a, "ok", n=2, status_code=200, outlinks=[link(c), link(u)]),
                       page(b, "ok", n=2, status_code=200, in_round=True, depth=1, score=0.5, outlinks=[link(d)]),
                       page(u, "ok", n=2, status_code=200, in_round=True, depth=1, score=0.5, outlinks=[])],
               FETCH_OUTPUT)
    view = pending_round.generate_crawldb(crawldb, fl, fo, CONF, round_no=2, now=T0)
    got = {r["url"]: r["status"] for r in view.collect()}
    assert got == {e: "unfetched", c: "unfetched", d: "unfetched"}, got
    known = {r["url_fp"] for r in pending_round.known_urls(crawldb, fo).collect()}
    from crawl_udfs.url_normalize import fingerprint
    assert {fingerprint(x) for x in (a, b, c, d, u, e)} <= known


def test_the_list_staged_ahead_is_the_list_from_the_crawl_db(spark):
    """jobs/list_ahead.py: round 2 listed a0 and followed a1, a2 inside the round (all due rows of
    a.test, in order a0 > a1 > ... > a8); a0 found a new URL and a8. Staged before round 2 ended, the
    candidates hold a.test's 2M best due rows not listed (a1..a6, M = 3), of which a1 and a2 leave:
    the list generate 3 makes from them is the one it makes from the whole crawl DB (a3, a4, a5
    and the new URL competing). Kept M a host instead of 2M, only a3 would be left to list."""
    from jobs import generate, list_ahead, pending_round
    from schemas.tables import CRAWLDB, FETCH_LIST, FETCH_OUTPUT, HOSTS
    from tests.test_update import T0, frame, link, listed, old, page

    conf = config.load(overrides=["generate.max_urls_per_host=3", "generate.top_n=100",
                                  "generate.discovery_share=0.5", "priority.importance_s=3600.0"])
    a = [f"http://a.test/{i}" for i in range(9)]
    b = [f"http://b.test/{i}" for i in range(2)]
    new = "http://a.test/new"
    crawldb = frame(spark, [old(u, score=1.0 - i / 10) for i, u in enumerate(a)]
                    + [old(u, score=0.5, status="fetched", fetch_count=1) for u in b], CRAWLDB)
    fl = frame(spark, [listed(a[0], n=2)], FETCH_LIST)
    fo = frame(spark, [page(a[0], "ok", n=2, status_code=200, outlinks=[link(new), link(a[8])]),
                       page(a[1], "ok", n=2, status_code=200, in_round=True, depth=1, score=0.5, outlinks=[]),
                       page(a[2], "ok", n=2, status_code=200, in_round=True, depth=1, score=0.5, outlinks=[])],
               FETCH_OUTPUT)
    hosts = spark.createDataFrame([], HOSTS)
    later = T0 + dt.timedelta(seconds=60)

    cand = list_ahead.candidates(crawldb, hosts, fl, conf, now=T0)  # a1..a6 and b (a7, a8 cut)

    full = pending_round.generate_crawldb(crawldb, fl, fo, conf, round_no=2, now=T0)
    ahead = pending_round.generate_crawldb(cand, fl, fo, conf, round_no=2, now=T0,
                                           known=crawldb.select("host", "url_fp"))
    # a8, known but cut from the candidates, is not found again as new (the known set is the crawl DB's)
    assert {tuple(r) for r in ahead.collect()} <= {tuple(r) for r in full.collect()}

    def listing(view):
        return sorted((r["url"], r["partition"], r["score"]) for r in
                      generate.selection(view, hosts, conf, now=later, n_partitions=2).collect())

    want = listing(full)
    assert [u for u, _, _ in want if "a.test" in u] == [a[3], a[4], a[5]]  # new comes later: due an hour later
    assert listing(ahead) == want
