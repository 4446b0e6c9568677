"""Crash tests: ``deltacrawl crawl`` SIGKILLed at every step of a round, then rerun.

One crawl directory, one test web, one chain of CLI subprocess runs (each its
own driver and JVM, as in production). Each run is armed with the next fault
point (``jobs/faults.py``), dies by SIGKILL there (return code -9), and is also
the resume of the previous run's crash:

====  ================================  ==========================================
run   armed with                        dies (round 1 unless said)
====  ================================  ==========================================
1     generate.after_write              fetch list written, ledger not told
2     fetch.task_kills_driver:0.8       0.8 s into the fetch tasks (requests in flight)
3     fetch.after_write                 fetch_output committed, WARC files still staged
4     update.after_links                crawldb and hosts merged, fetch_log and links
                                        appended, ledger not told; pipelined
                                        (generate.pipeline): round 2 is listed and
                                        fetching (or fetched) beside that update
--    (in process) update with the      exit 1, one line; round stays fetched
      links table made unwritable
5     fetch.task:0.8                    merges round 1 first, resumes round 2 (if the
                                        kill left it unfetched), fetches round 3 beside
                                        update 2; a Python worker dies 0.8 s into each
                                        fetch task; Spark retries it; exits 0
====  ================================  ==========================================

After every run: no URL lost from the crawl DB, no (round, url_fp) twice in
fetch_log, no WARC record referenced twice, and the process group (driver,
JVM, Python workers) gone. At the end: rounds 1 and 2 updated, no staging
left, every WARC pointer reads back, and the test web's own log shows no
politeness violation across all five runs.

On a bucket (``storage.root = s3a://…``), where nothing is renamed, the "kill after fetch commit" case
runs in tests/test_s3.py's crawl.

The chain's host delay (0.5 s) is far shorter than the time a new JVM takes to
come up, so it cannot show that a resumed fetch waits for the killed one:
:func:`test_rerun_within_one_host_delay_of_the_kill_waits_it` does, with a
host delay longer than the time from the kill to the rerun's first request.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from jobs import cli, common, faults, ledger_mirror, spool, warc_staging
from tests.summary import note
from tests.cli_jvm import SPARK_LINE
from tests.testweb import TestWeb

# Each CLI run starts a JVM; a test may span two runs (measured 83-362 s each at load 10).
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1800)]

DELAY = 0.5
DELTACRAWL = str(Path(sys.executable).with_name("deltacrawl"))
MASTER = "local[2,4]"   # local mode with up to 4 task attempts (plain local[n] never retries a task)

#: (test name, fault spec, crawl --rounds, expected return code, ledger state of round 1 after the run)
CHAIN = [
    ("generate", "generate.after_write", 3, -9, None),
    ("fetch_tasks", "fetch.task_kills_driver:0.8", 3, -9, "fetching"),
    ("fetch_commit", "fetch.after_write", 3, -9, "fetching"),
    ("update", "update.after_links", 3, -9, "fetched"),
    ("worker", "fetch.task:0.8", 2, 0, "updated"),
]


def run_cli(args: list[str], *, env_extra: dict[str, str], log: Path, timeout: float = 1200) -> int:
    """Run the CLI in its own process group; return its status once the whole group is gone."""
    env = {**os.environ, **env_extra}
    with open(log, "wb") as out:
        p = subprocess.Popen([DELTACRAWL, *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise
    deadline = time.monotonic() + 60
    while True:  # the driver's JVM and Python workers must die with it, not keep fetching or committing
        try:
            os.killpg(p.pid, 0)
        except ProcessLookupError:
            return rc
        if time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            raise AssertionError(f"processes of the killed driver {p.pid} outlived it by 60 s")
        time.sleep(0.2)


def seed_urls(web: TestWeb, per_host: int = 4) -> list[str]:
    """Home page plus a few pages per host, so round 1's tasks fetch for seconds, not one page."""
    out = []
    for h in web.plan.hosts.values():
        pages = [p for p in sorted(h.pages) if p.endswith(".html")
                 and not any(x in p for x in ("private", "members", "hidden"))]
        out += [h.url("/")] + [h.url(p) for p in pages[:per_host - 1]]
    return out


def write_overlay(path: Path, web: TestWeb, *, host_delay_s: float, task_budget_s: float,
                  max_urls_per_host: int) -> Path:
    """The crash tests' configuration: the crawl beside the file, the test web, 2 fetch partitions, a
    master that retries tasks."""
    path.write_text(
        f'[storage]\nroot = "{path.parent / "crawl"}"\n'
        f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
        f"[politeness]\nhost_delay_s = {host_delay_s}\n"
        f"[fetch]\ntask_budget_s = {task_budget_s}\ntotal_timeout_s = 5.0\n"
        f"[generate]\nmax_urls_per_host = {max_urls_per_host}\nfetch_partitions = 2\npipeline = true\n"
        f'[spark]\nmaster = "{MASTER}"\ndriver_memory = "1g"\nshuffle_partitions = 2\n' + SPARK_LINE)
    return path


class Chain:
    """The crawl directory and the runs done so far (each run at most once, in order)."""

    def __init__(self, spark, d: Path, web: TestWeb):
        self.spark, self.d, self.web = spark, d, web
        self.overlay = write_overlay(d / "crash.toml", web, host_delay_s=DELAY, task_budget_s=20.0,
                                     max_urls_per_host=4)
        from crawl_udfs import config
        self.conf = config.load([self.overlay])
        seeds = d / "seeds.txt"
        seeds.write_text("\n".join(seed_urls(web)) + "\n")
        base = ["--conf", str(self.overlay)]
        assert cli.main(base + ["init"]) == 0
        assert cli.main(base + ["inject", str(seeds)]) == 0
        self.urls = self.crawldb_urls()
        self.done: dict[str, dict] = {}
        self.tmp = d / "tmp"  # the runs' temp dir (TMPDIR): where their fetch tasks' spools are
        self.tmp.mkdir()

    def spools(self) -> list[str]:
        """The fetch-task spools (jobs/spool.py) in the runs' temp dir."""
        return sorted(p.name for p in self.tmp.glob(f"{spool.PREFIX}*"))

    def warc_files(self) -> set[str]:
        """Paths of the WARC files under ``storage.root/warc`` (staging included), relative to it."""
        warc = Path(common.warc_root(self.conf))
        return {str(p.relative_to(warc)) for p in warc.rglob("*.warc.gz")}

    def table(self, name: str):
        return self.spark.read.format("delta").load(common.table_path(self.conf, name))

    def crawldb_urls(self) -> set[str]:
        return {r[0] for r in self.table("crawldb").select("url").collect()}

    def run(self, name: str) -> dict:
        for step, spec, rounds, rc_want, state in CHAIN:
            if step in self.done:
                if step == name:
                    return self.done[step]
                continue
            before, t0, log_from = self.urls, time.monotonic(), len(self.web.log())
            rc = run_cli(["--conf", str(self.overlay), "crawl", "--rounds", str(rounds)],
                         env_extra={faults.ENV: spec, "TMPDIR": str(self.tmp)}, log=self.d / f"run-{step}.log")
            out = (self.d / f"run-{step}.log").read_text(errors="replace")
            assert rc == rc_want, f"run {step} ({spec}): status {rc}, wanted {rc_want}\n{out[-3000:]}"
            self.urls = self.crawldb_urls()
            ledger_mirror.flush(self.spark, self.conf)  # a killed run never flushed: the next command's catch-up
            ledger = {r["round"]: r["state"] for r in self.table("rounds").collect()}
            self.done[step] = {"rc": rc, "out": out, "seconds": time.monotonic() - t0, "ledger": ledger,
                               "lost": before - self.urls, "requests": self.web.log()[log_from:]}
            note(f"crash chain {step}: {spec} -> status {rc} in {self.done[step]['seconds']:.0f} s, "
                 f"ledger {ledger}")
            self.check_invariants(step, state)
            if step == name:
                return self.done[step]
        raise KeyError(name)

    def check_invariants(self, step: str, state: str | None) -> None:
        r = self.done[step]
        assert r["ledger"].get(1) == state, (step, r["ledger"])
        assert r["lost"] == set(), f"{step}: URLs lost from the crawl DB: {sorted(r['lost'])[:5]}"
        fl = self.table("fetch_log").select("round", "url_fp", "warc_filename", "warc_offset").collect()
        keys = [(x["round"], x["url_fp"]) for x in fl]
        assert len(keys) == len(set(keys)), f"{step}: a (round, url_fp) twice in fetch_log"
        ptrs = [(x["warc_filename"], x["warc_offset"]) for x in fl if x["warc_filename"]]
        assert len(ptrs) == len(set(ptrs)), f"{step}: a WARC record referenced twice"
        v = self.web.violations(host_delay_s=DELAY, max_in_flight_per_addr=self.conf.politeness.max_in_flight_per_ip)
        assert v.too_close == [] and v.overlapping == [], f"{step}: {v.summary()}"


@pytest.fixture(scope="module")
def chain(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("crash")
    with TestWeb(d / "web", n_hosts=6, seed=5, kinds=["site"]) as web:
        yield Chain(spark, d, web)


def test_fault_specs_parse_and_unknown_points_are_refused():
    assert faults.parse(None) is None and faults.parse("") is None
    assert faults.parse("update.after_fetch_log") == ("update.after_fetch_log", None)
    assert faults.parse("fetch.task:0.8") == ("fetch.task", 0.8)
    with pytest.raises(ValueError, match="unknown fault point 'fetch.nope'"):
        faults.parse("fetch.nope")


def test_kill_after_generate_write_regenerates_the_round(chain):
    r = chain.run("generate")
    assert r["ledger"] == {}, "the ledger never heard of round 1"
    written = {x[0] for x in chain.table("fetch_list").where("round = 1").select("url_fp").collect()}
    assert written, "the kill came after the fetch list was written"
    assert chain.run("fetch_tasks")["ledger"] == {1: "fetching"}  # the rerun regenerated round 1 over it
    assert chain.table("fetch_list").where("round = 1").count() == len(written)


def test_kill_during_fetch_tasks_refetches_politely(chain):
    chain.run("fetch_tasks")
    sent_before = len(chain.web.log())
    assert sent_before > 0, "the driver died before any request: the kill did not land inside the fetch"
    assert chain.table("fetch_output").where("round = 1").count() == 0, "nothing of the dead fetch committed"
    if "fetch_commit" not in chain.done:
        assert chain.spools(), "the killed tasks left no spool: this test could not see one swept"
    chain.run("fetch_commit")  # resumed with retried=True: refetches, commits, dies before promoting
    assert chain.spools() == [], "the resumed tasks did not sweep the killed tasks' spools"
    assert chain.table("fetch_output").where("round = 1").count() > 0
    staged = Path(warc_staging.round_staging_dir(common.warc_root(chain.conf), 1))
    assert staged.is_dir() and any(staged.rglob("*.warc.gz")), "committed files wait in staging"


def test_kill_after_fetch_commit_promotes_without_refetching(chain):
    chain.run("fetch_commit")
    sent = len(chain.web.log())
    round1 = {_host_path(r[0]) for r in chain.table("fetch_list").where("round = 1").select("url").collect()}
    committed = {r[0] for r in chain.table("fetch_output").where("round = 1 AND warc_filename IS NOT NULL")
                 .select("warc_filename").collect()}
    staging = f"{warc_staging.STAGING}/r000001/"
    if "update" not in chain.done:  # right after the kill: the committed files wait in staging, none promoted
        files = chain.warc_files()
        assert committed and {f.rsplit("/", 1)[1] for f in files if f.startswith(staging)} >= committed, files
        assert not committed & files
    r = chain.run("update")  # resume: promote + ledger fetched; round 2 (pipelined) fetches beside update 1
    again = [(x["host"], x["path"]) for x in chain.web.log()[sent:] if (x["host"], x["path"]) in round1]
    assert again == [], f"a committed fetch was fetched again: {again[:5]}"
    assert r["ledger"][1] == "fetched"
    files = chain.warc_files()
    assert not [f for f in files if f.startswith(staging)], "round 1's staging was left behind"
    round1_files = {f for f in files if "-r000001-" in f}
    assert round1_files == committed, f"kept {sorted(round1_files ^ committed)[:5]} (only committed files are)"
    note(f"kill after fetch commit: {len(committed)} committed WARC files promoted, none refetched")


def _host_path(url: str) -> tuple[str, str]:
    """(host, path+query) of a URL, as the test web's log names a request."""
    u = urlsplit(url)
    return u.hostname, (u.path or "/") + (f"?{u.query}" if u.query else "")


def _round_links(chain, n: int) -> list[tuple]:
    return [tuple(r) for r in chain.table("links").where(f"round = {n}").collect()]


def test_kill_inside_update_leaves_it_resumable(chain):
    ledger = chain.run("update")["ledger"]
    # killed inside update 1, which ran beside round 2 (pipelined rounds): round 2 was listed, and
    # fetching or already fetched, when the driver died
    assert ledger[1] == "fetched" and ledger.get(2) in ("generated", "fetching", "fetched"), ledger
    if "worker" not in chain.done:
        links_at_kill = _round_links(chain, 1)
        assert links_at_kill, "the kill came after round 1's links were appended"
        failed_write(chain)
    else:
        links_at_kill = None
    chain.run("worker")  # finishes round 1's update first: its rerun of the links append is a no-op
    # each table's write of round 1 changed rows once; every rerun's was a no-op (the crawl DB's replace
    # skipped by its txnVersion, the hosts MERGE guarded by updated_round)
    from delta.tables import DeltaTable
    for name, operation, written in (("crawldb", "WRITE", ("numOutputRows",)),
                                     ("hosts", "MERGE", ("numTargetRowsUpdated", "numTargetRowsInserted"))):
        hist = [h for h in DeltaTable.forPath(chain.spark, common.table_path(chain.conf, name)).history().collect()
                if h["userMetadata"] == "deltacrawl update round 1" and h["operation"] == operation]
        changed = [h["version"] for h in hist if sum(int(h["operationMetrics"].get(k, "0")) for k in written) > 0]
        assert len(changed) == 1, (name, [(h["version"], h["operationMetrics"]) for h in hist])
    # fetch_log and links, both appended before the kill, hold round 1 once
    assert chain.table("fetch_log").where("round = 1").count() > 0
    links = _round_links(chain, 1)
    assert links and len(links) == len(set(links)), "round 1's links appended twice"
    if links_at_kill is not None:
        assert sorted(links) == sorted(links_at_kill)


def failed_write(chain) -> None:
    """In-process ``deltacrawl update`` of round 1 with a real failed write: the ``links``
    table's directory replaced by a regular file. Exit 1, one line naming the problem and
    the remedy, the round still ``fetched``, nothing doubled."""
    import contextlib

    base = ["--conf", str(chain.overlay)]
    links = Path(common.table_path(chain.conf, "links"))
    moved = links.with_name("links.moved-away")
    links.rename(moved)
    links.write_text("not a directory")
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            rc = cli.main(base + ["update"])
    finally:
        links.unlink()
        moved.rename(links)
    lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("deltacrawl:")]
    note(f"failed write in update: status {rc}: {lines[-1] if lines else err.getvalue()[-300:]}")
    assert rc == 1 and len(lines) == 1 and "update failed" in lines[0] and "rerun" in lines[0], err.getvalue()
    assert {r["round"]: r["state"] for r in chain.table("rounds").collect()} == chain.done["update"]["ledger"]
    keys = [(x[0], x[1]) for x in chain.table("fetch_log").select("round", "url_fp").collect()]
    assert len(keys) == len(set(keys))


def test_worker_death_is_retried_politely_and_the_crawl_continues(chain):
    r = chain.run("worker")
    # round 1 merged before round 2 resumes; --rounds 2 counts round 2 and round 3, fetched beside
    # update 2. w, the first round this run fetched (where the workers die): 2 when the killed run
    # left round 2 unfetched, else 3
    w = 3 if chain.done["update"]["ledger"].get(2) == "fetched" else 2
    assert r["ledger"] == {1: "updated", 2: "updated", 3: "updated"}, r["ledger"]
    assert "round 1: updating it before round 2 resumes" in r["out"]
    assert "round 2: updating beside the fetch of round 3" in r["out"]
    assert "2 round(s) completed" in r["out"]
    # A worker dies 0.8 s into each fetch task, so a retried attempt's rows are in the rounds this run
    # fetched: round w, unless its tasks (a resumed round 2 of few URLs) ended sooner, then round 3
    out2 = chain.table("fetch_output").where(f"round >= {w} AND kind = 'page'")
    staging = {x[0] for x in out2.select("warc_staging").where("warc_staging IS NOT NULL").collect()}
    assert any(s.endswith("-a1") for s in staging), f"no row of rounds {w}-3 from a retried attempt: {staging}"
    # the dead attempts had sent requests: the same page was requested twice in rounds w-3
    fl2 = chain.table("fetch_log").where(f"round = {w}")
    urls2 = {x[0] for x in fl2.select("url").collect()}
    paths = [(x["host"], x["path"]) for x in r["requests"]]  # round 1 needed none: it was fetched
    twice = [p for p in set(paths) if paths.count(p) > 1 and p[1] != "/robots.txt"]
    assert twice, "no page was requested by both attempts: the worker did not die mid-fetch"
    note(f"worker death: {len(paths)} requests in rounds {w}-3, {len(twice)} pages requested by both attempts")
    keys = [x[0] for x in fl2.select("url_fp").collect()]
    assert len(keys) == len(set(keys)) == len(urls2)
    assert chain.spools() == [], "a dead worker's spool (jobs/spool.py) outlived the run"


def test_after_the_chain_nothing_is_lost_and_every_pointer_reads(chain):
    chain.run("worker")
    warc_dir = common.warc_root(chain.conf)
    assert not Path(warc_dir, warc_staging.STAGING).exists(), "staging files left behind"
    rows = chain.table("fetch_log").where("warc_filename IS NOT NULL").collect()
    assert len(rows) > 10
    for r in rows:
        with open(f"{warc_dir}/{r['warc_filename']}", "rb") as f:
            f.seek(r["warc_offset"])
            rec = next(iter(ArchiveIterator(io.BytesIO(f.read(r["warc_length"])))))
        assert rec.rec_headers.get_header("WARC-Target-URI") == r["url"]
    on_disk = {p.name for p in Path(warc_dir).glob("*.warc.gz")}
    assert on_disk == {r["warc_filename"] for r in chain.table("fetch_output")
                       .where("warc_filename IS NOT NULL").select("warc_filename").distinct().collect()}
    # every URL of every fetch list is still in the crawl DB (fetch_log once per URL: checked after each run)
    listed = {x[0] for x in chain.table("fetch_list").select("url").collect()}
    assert listed <= chain.urls
    v = chain.web.violations(host_delay_s=DELAY, max_in_flight_per_addr=chain.conf.politeness.max_in_flight_per_ip)
    note(f"crash chain (server-side, {len(chain.done)} runs): " + v.summary().replace("\n", "; "))
    assert v.clean, v.summary()
    assert v.max_in_flight_host <= 1
    total = sum(r["seconds"] for r in chain.done.values())
    note(f"crash chain: {len(chain.done)} CLI runs, {total:.0f} s of subprocess time")


# Host delay of the killed run below: it dies 0.8 s into its fetch, one request to each host at most.
KILLED_DELAY = 60.0
# The rerun's host delay: longer than the time from the kill to the rerun's first request to a host
# without the retried-task wait (the kill to the rerun's start, measured, twice, then its own start-up
# before the first fetch task: seconds in process). From the kill to the rerun's first fetch task took
# 10-20 s on a quiet machine and 88-139 s at load 25-30 on 2 cores (the dead JVM's exit): measured per
# run, the test neither waits a minute on a quiet machine nor loses its power to fail on a loaded one.
MIN_RESUME_DELAY = 30.0


def test_rerun_within_one_host_delay_of_the_kill_waits_it(spark, tmp_path):
    """Kill the driver 0.8 s into round 1's fetch, then resume at once (in process: no JVM to
    start), with a host delay longer than the time between the two. The rerun's first request
    to each host the killed run reached would come too soon unless the resumed fetch waits one
    host delay (``retried=True``) before it."""
    with TestWeb(tmp_path / "web", n_hosts=4, seed=9, kinds=["site"]) as web:
        overlay = write_overlay(tmp_path / "resume.toml", web, host_delay_s=KILLED_DELAY,
                                task_budget_s=KILLED_DELAY + 15, max_urls_per_host=2)
        from crawl_udfs import config
        (tmp_path / "seeds.txt").write_text("\n".join(web.seeds()) + "\n")
        base = ["--conf", str(overlay)]
        assert cli.main(base + ["init"]) == 0
        assert cli.main(base + ["inject", str(tmp_path / "seeds.txt")]) == 0
        rc = run_cli([*base, "crawl", "--rounds", "1"], env_extra={faults.ENV: "fetch.task_kills_driver:0.8"},
                     log=tmp_path / "killed.log")
        assert rc == -9, (tmp_path / "killed.log").read_text(errors="replace")[-3000:]
        killed = web.log()
        assert killed, "the driver died before any request: the kill did not land inside the fetch"
        last_killed = max(r["end"] for r in killed)  # the test web stamps its log with this wall clock
        delay = max(MIN_RESUME_DELAY, 2 * (time.time() - last_killed) + 10)
        # the rerun's task budget: long enough for its wait and one request per host, not for a second
        resume = write_overlay(tmp_path / "resume.toml", web, host_delay_s=delay, task_budget_s=delay + 15,
                               max_urls_per_host=2)
        conf = config.load([resume])
        rerun_at = time.time()
        assert cli.main(["--conf", str(resume), "crawl", "--rounds", "1"]) == 0
        log = web.log()
        v = web.violations(host_delay_s=delay, max_in_flight_per_addr=conf.politeness.max_in_flight_per_ip)
    rerun = log[len(killed):]
    gaps = {}
    for host in {r["host"] for r in killed}:
        first = min((r for r in rerun if r["host"] == host), key=lambda r: r["start"], default=None)
        if first is not None:
            gaps[host] = first["start"] - max(r["end"] for r in killed if r["host"] == host)
    note(f"resume after a kill: rerun {rerun_at - last_killed:.0f} s after the kill, host delay {delay:.0f} s, "
         "gaps across the kill " + ", ".join(f"{g:.1f} s" for g in sorted(gaps.values())))
    assert gaps, "no host the killed run reached was requested again"
    # The rerun began within one host delay of the killed run's last request, or this test could not
    # fail (its own start-up before the first fetch task adds to that).
    assert rerun_at - last_killed < delay, f"the rerun came {rerun_at - last_killed:.0f} s after the kill"
    assert v.too_close == [] and v.overlapping == [], v.summary()
    assert v.clean, v.summary()
