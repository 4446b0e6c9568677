"""The crawl lease (``jobs/lease.py``) and the round protocol (``jobs/ledger.py``).

Unit tier: lease records on a temporary storage.root with injected clocks (no
sleeping but for the one test that watches a holder stop), the ledger's
compare-and-set on small tables, and the protocol's table of states. End-to-end
tier: ``deltacrawl round`` subprocesses against the test web, judged from the
server's own request log.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import threading
import time
from pathlib import Path

import pytest

from crawl_udfs import config
from jobs import ledger, lease
from jobs.ledger import RoundError, StaleRound
from tests.cli_jvm import SPARK_LINE

T0 = dt.datetime(2026, 12, 1, 12, 0, 0)


class Clock:
    def __init__(self, t: dt.datetime = T0):
        self.t = t

    def __call__(self) -> dt.datetime:
        return self.t


@pytest.fixture
def conf(tmp_path):
    return config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"', "lease.ttl_s=60", "lease.heartbeat_s=10"])


def _lease(spark, conf, verb: str, clock=None) -> lease.Lease:
    return lease.Lease(lease._Store(spark, conf), conf, verb, clock=clock or Clock())


# -- the lease ------------------------------------------------------------------------------------
def test_a_live_lease_is_refused_with_one_line_naming_its_holder(spark, conf):
    a = _lease(spark, conf, "crawl")
    a.take()
    with pytest.raises(lease.LeaseHeld) as e:
        _lease(spark, conf, "round", Clock(T0 + dt.timedelta(seconds=59))).take()
    msg = str(e.value)
    assert "\n" not in msg and "crawl (pid" in msg and f"pid {a.pid} on {a.host}" in msg
    assert "since 2026-12-01T12:00:00 UTC" in msg and "until 2026-12-01T12:01:00 UTC" in msg


def test_release_frees_the_lease(spark, conf):
    a = _lease(spark, conf, "inject")
    a.take()
    a.release()
    b = _lease(spark, conf, "round")
    b.take()
    assert b.taken_from == "free" and b.record.seq == 3


def test_an_expired_lease_is_taken_and_its_old_holder_finds_it_lost(spark, conf):
    clock = Clock()
    a = _lease(spark, conf, "crawl", clock)
    a.take()
    clock.t = T0 + dt.timedelta(seconds=30)
    assert a.renew() and a.record.expires_at == "2026-12-01T12:01:30"  # renewed: ttl from the renewal
    b = _lease(spark, conf, "round", Clock(T0 + dt.timedelta(seconds=91)))
    b.take()
    assert b.taken_from == "expired"
    assert a.renew() is False and "taken over" in a.lost and "round (pid" in a.lost


def test_a_holder_that_could_not_renew_in_time_counts_its_lease_lost(spark, conf):
    clock = Clock()
    a = _lease(spark, conf, "crawl", clock)
    a.take()
    clock.t = T0 + dt.timedelta(seconds=61)
    assert a.renew() is False and "not renewed before it expired" in a.lost


def test_a_dead_holder_on_this_host_is_taken_over_at_once(spark, conf):
    dead = subprocess.Popen(["true"])
    dead.wait()
    a = _lease(spark, conf, "crawl")
    a.pid = dead.pid  # the record of a process that is gone (SIGKILL, OOM kill)
    a.take()
    b = _lease(spark, conf, "round", Clock(T0 + dt.timedelta(seconds=1)))
    b.take()
    assert b.taken_from == "dead"


def test_a_gone_pid_in_another_pid_space_is_not_taken_as_dead(spark, conf):
    """Same host name, other pid namespace (another container): its pid says nothing here."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    a = _lease(spark, conf, "crawl")
    a.pid, a.pid_space = dead.pid, "another-boot/4026531999"
    a.take()
    with pytest.raises(lease.LeaseHeld):
        _lease(spark, conf, "round", Clock(T0 + dt.timedelta(seconds=1))).take()


def test_force_takes_a_live_lease_and_the_holder_finds_it_lost(spark, conf):
    a = _lease(spark, conf, "crawl")
    a.take()
    b = _lease(spark, conf, "round", Clock(T0 + dt.timedelta(seconds=1)))
    b.take(force=True)
    assert b.taken_from == "forced"
    assert a.renew() is False and "taken over" in a.lost
    a.release()  # a lost lease is not released over its new holder
    with pytest.raises(lease.LeaseHeld):
        _lease(spark, conf, "update", Clock(T0 + dt.timedelta(seconds=2))).take()


def test_two_takers_of_one_number_have_one_winner(spark, conf):
    """Both read "free" (a stale read, as when two start at the same instant): put-if-absent decides."""
    a, b = _lease(spark, conf, "round"), _lease(spark, conf, "round")
    reads = iter([None])  # b's first read is from before a's write; its second read is real
    b.store.latest = lambda: next(reads, "real") and lease._Store.latest(b.store)
    a.take()
    with pytest.raises(lease.LeaseHeld) as e:
        b.take()
    assert "took the lease first" in str(e.value) and f"pid {a.pid}" in str(e.value)


def test_heartbeat_must_fit_twice_in_the_ttl(tmp_path):
    with pytest.raises(config.ConfigError, match="lease.heartbeat_s"):  # refused at load (config_rules.RELATIONS)
        config.load(overrides=[f'storage.root="{tmp_path}"', "lease.ttl_s=30", "lease.heartbeat_s=20"])


def test_a_holder_that_lost_its_lease_cancels_its_job_and_stops(spark, tmp_path):
    conf = config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"', "lease.ttl_s=4", "lease.heartbeat_s=0.5"])
    t0 = time.monotonic()
    with pytest.raises(lease.LeaseLost, match="taken over"):
        with lease.hold(spark, conf, "fetch"):
            lease.Lease(lease._Store(spark, conf), conf, "round").take(force=True)
            spark.sparkContext.parallelize(range(2), 2).map(lambda x: time.sleep(30)).count()
    assert time.monotonic() - t0 < 20, "the job ran on after the lease was lost"
    lease.check()  # nothing held any more


# -- the ledger's compare-and-set -------------------------------------------------------------------
def test_ledger_writes_are_compare_and_set(spark, crawl_conf):
    from jobs import common
    common.ensure_tables(spark, crawl_conf)
    g = ledger.set_state(spark, crawl_conf, 1, "generated", old={}, n_partitions=2)
    with pytest.raises(StaleRound, match="expected no row"):
        ledger.set_state(spark, crawl_conf, 1, "generated", old={})  # a second generate of round 1
    f = ledger.set_state(spark, crawl_conf, 1, "fetching", old=g)
    with pytest.raises(StaleRound, match="expected generated before moving it to fetching, but it is fetching"):
        ledger.set_state(spark, crawl_conf, 1, "fetching", old=g)  # a stale writer
    ledger.set_state(spark, crawl_conf, 1, "fetched", old=f)
    with pytest.raises(StaleRound):
        ledger.set_state(spark, crawl_conf, 1, "generated", old=g)  # never backwards
    assert ledger.get_round(spark, crawl_conf, 1)["state"] == "fetched"


# -- the protocol: one table ------------------------------------------------------------------------
@pytest.mark.parametrize("verb, state, want", [
    ("generate", None, ("run", 1)),
    ("generate", "updated", ("run", 4)),
    ("generate", "generated", ("skip", 3)),
    ("generate", "fetching", ("skip", 3)),
    ("generate", "fetched", ("skip", 3)),
    ("fetch", "generated", ("run", 3)),
    ("fetch", "fetching", ("resume", 3)),
    ("fetch", "fetched", ("skip", 3)),
    ("fetch", "updated", ("skip", 3)),
    ("update", "fetched", ("run", 3)),
    ("update", "updated", ("skip", 3)),
    ("update", "generated", "round 3 is generated, not fetched: run fetch for it before update"),
    ("update", "fetching", "round 3 is fetching, not fetched: run fetch for it before update"),
    ("fetch", None, "nothing to fetch: the round ledger is empty (run generate first)"),
    ("update", None, "nothing to update: the round ledger is empty (run generate first)"),
])
def test_the_round_protocol(verb, state, want, monkeypatch):
    """``state`` None: an empty ledger (the reads are replaced: round 3 the only round, or none; the others
    hand the row, as rounds.crawl does)."""
    monkeypatch.setattr(ledger, "last_round", lambda spark, conf: None)
    monkeypatch.setattr(ledger, "oldest_fetched", lambda spark, conf: None)
    monkeypatch.setattr(ledger, "get_round", lambda spark, conf, n: None)
    row = {"round": 3, "state": state} if state else None
    if isinstance(want, str):
        with pytest.raises(RoundError) as e:
            ledger.step(None, None, verb, row=row)
        assert str(e.value) == want
    else:
        st = ledger.step(None, None, verb, row=row)
        assert (st.action, st.round) == want


# -- end to end: two writers, and a kill, against the test web --------------------------------------
DELAY = 1.0


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    from tests.testweb import TestWeb
    with TestWeb(tmp_path_factory.mktemp("lease_web") / "web", n_hosts=4, seed=11, kinds=["site"]) as w:
        yield w


def _overlay(d: Path, web, *, ttl_s: float = 120.0) -> Path:
    overlay = d / "lease.toml"
    overlay.write_text(
        f'[storage]\nroot = "{d / "crawl"}"\n'
        f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
        f"[politeness]\nhost_delay_s = {DELAY}\n"
        "[fetch]\ntask_budget_s = 20.0\ntotal_timeout_s = 5.0\n"
        "[generate]\nmax_urls_per_host = 4\nfetch_partitions = 2\n"
        f"[lease]\nttl_s = {ttl_s}\nheartbeat_s = {ttl_s / 4}\n"
        '[spark]\nmaster = "local[2,4]"\ndriver_memory = "1g"\nshuffle_partitions = 2\n' + SPARK_LINE)
    return overlay


def _crawl(spark, d: Path, web) -> Path:
    from jobs import cli
    from tests.test_crash import seed_urls
    overlay = _overlay(d, web)
    seeds = d / "seeds.txt"
    seeds.write_text("\n".join(seed_urls(web)) + "\n")
    assert cli.main(["--conf", str(overlay), "init"]) == 0
    assert cli.main(["--conf", str(overlay), "inject", str(seeds)]) == 0
    return overlay


def _rounds(spark, overlay: Path) -> dict:
    from jobs import common, ledger_mirror
    c = config.load([overlay])
    ledger_mirror.flush(spark, c)  # a killed command never flushed its mirror: the next command's catch-up
    return {r["round"]: r["state"] for r in spark.read.format("delta").load(common.table_path(c, "rounds")).collect()}


@pytest.fixture(scope="module")
def takeover(spark, web, tmp_path_factory) -> dict:
    """A round SIGKILLed inside its fetch, then two rounds started together at once: both find the dead
    holder's lease, both try to take it over (put-if-absent of the next record), one runs, one refuses.
    One chain for the two tests below (three JVMs, one whole round), not a kill and a takeover plus two
    rounds on a fresh crawl (five JVMs, two whole rounds)."""
    from jobs import faults
    from tests.test_crash import run_cli
    d = tmp_path_factory.mktemp("takeover")
    overlay = _crawl(spark, d, web)
    log_from = len(web.log())
    killed = run_cli(["--conf", str(overlay), "round"], env_extra={faults.ENV: "fetch.task_kills_driver:0.8"},
                     log=d / "killed.log")
    after_kill = {"rc": killed, "rounds": _rounds(spark, overlay), "requests": len(web.log()) - log_from}
    results: dict[int, int] = {}

    def go(i: int) -> None:
        results[i] = run_cli(["--conf", str(overlay), "round"], env_extra={}, log=d / f"run-{i}.log")
    t0 = time.monotonic()
    threads = [threading.Thread(target=go, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"overlay": overlay, "after_kill": after_kill, "results": results, "seconds": time.monotonic() - t0,
            "outs": {i: (d / f"run-{i}.log").read_text(errors="replace") for i in (0, 1)},
            "rounds": _rounds(spark, overlay), "lines": web.log()[log_from:]}


def _politeness(t: dict):
    from tests.testweb.analysis import analyze
    return analyze(t["lines"], host_delay_s=DELAY,
                   max_in_flight_per_addr=config.load([t["overlay"]]).politeness.max_in_flight_per_ip)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three JVMs and a whole round: minutes on a loaded 2-core machine
def test_two_rounds_started_together_one_runs_the_other_refuses(takeover):
    results, outs = takeover["results"], takeover["outs"]
    assert sorted(results.values()) == [0, 3], (results, outs)
    loser = next(i for i, rc in results.items() if rc == 3)
    refusal = [ln for ln in outs[loser].splitlines() if ln.startswith("deltacrawl:")]
    assert len(refusal) == 1 and "round refused: another writer" in refusal[0], outs[loser][-2000:]
    assert "round (pid" in refusal[0] and "holds the crawl lease since" in refusal[0] and "until" in refusal[0]
    assert "round 1: updated" in outs[1 - loser]
    assert takeover["rounds"] == {1: "updated"}
    v = _politeness(takeover)
    assert v.clean, v.summary()
    assert v.requests > 0 and max(v.max_in_flight_by_host.values()) == 1, v.summary()
    assert v.too_close == [] and v.overlapping == [], v.summary()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_killed_holder_is_taken_over_cleanly(takeover):
    """SIGKILL inside the fetch, then a rerun at once: the dead pid's lease is taken without waiting
    for its expiry (ttl 120 s), the round is finished, and the server saw no request too close."""
    k = takeover["after_kill"]
    assert k["rc"] == -9 and k["rounds"] == {1: "fetching"}
    assert k["requests"] > 0, "the kill did not land inside the fetch"
    winner = next(i for i, rc in takeover["results"].items() if rc == 0)
    out = takeover["outs"][winner]
    assert "refused" not in out and "resuming from state fetching" in out, out[-2000:]
    assert takeover["seconds"] < 600
    assert takeover["rounds"] == {1: "updated"}
    v = _politeness(takeover)
    assert v.clean, v.summary()
