"""``deltacrawl sql``: the README's queries for crawl engineers, run on a real crawl, and the verb itself.

The queries are read from README.md (section "SQL for crawl engineers"), so the text a reader copies
is the text tested. Each runs through ``jobs.cli.main`` (the path of ``deltacrawl sql``, in-process on
the suite's Spark session) against the shared 3-round crawl of the test web (``e2e_crawl``), and its
answer is checked against the tables read with the DataFrame API: status by host sums to the crawl
DB, pages per round equal the rounds ledger, the change feed's new URLs are the ones the last round
inserted, and so on. Then the output formats, and a rejected query: one line, exit status 2.
"""

from __future__ import annotations

import collections
import csv
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import cli, common
from schemas import counters
from schemas.status import ELIGIBLE, Status

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## SQL for crawl engineers"


# -- the README's queries (pure) ------------------------------------------------------------------
def readme_queries() -> dict[str, list[str]]:
    """{### title: [query, ...]} of the README's section, each query as written inside ``deltacrawl sql "..."``."""
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    blocks = re.split(r"^### ", text[start:end], flags=re.M)[1:]
    return {b.split("\n", 1)[0].strip(): re.findall(r'deltacrawl sql "([^"]*)"', b) for b in blocks}


QUERIES = readme_queries()


def test_every_readme_query_has_a_check_and_is_safe_to_paste():
    assert set(QUERIES) == set(CHECKS), "a README query without a check here, or a check without its query"
    assert len(QUERIES) >= 9
    for title, queries in QUERIES.items():
        assert queries, f"{title}: no deltacrawl sql command"
        for q in queries:
            # inside bash double quotes, $ and ` would be expanded by the shell before Spark sees them
            assert "$" not in q and "`" not in q and "\\" not in q, (title, q)


def test_due_query_leaves_out_exactly_the_statuses_generate_never_selects():
    (q,) = QUERIES["URLs due in the next 24 hours"]
    left_out = set(re.search(r"status NOT IN \(([^)]*)\)", q).group(1).replace("'", "").replace(" ", "").split(","))
    assert left_out == {s.value for s in Status} - {s.value for s in ELIGIBLE}


# -- running them -----------------------------------------------------------------------------------
def run_sql(capsys, base: list[str], query: str, *extra: str) -> str:
    """stdout of ``deltacrawl sql`` (asserting exit 0 and nothing on stderr)."""
    capsys.readouterr()
    rc = cli.main(base + ["sql", query, *extra])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "", (rc, err, query)
    return out


def rows_of(capsys, base, query) -> list[dict]:
    return [json.loads(line) for line in run_sql(capsys, base, query, "--format", "json").splitlines()]


def _df(spark, conf, name):
    return spark.read.format("delta").load(common.table_path(conf, name))


def _ledger(spark, conf) -> dict[int, dict]:
    return {r["round"]: r.asDict() for r in _df(spark, conf, "rounds").collect()}


def _ts(s: str) -> dt.datetime:
    return dt.datetime.fromisoformat(s)


@pytest.fixture(scope="module")
def crawl(spark, e2e_crawl):
    web, conf, base, log, violations = e2e_crawl
    return spark, conf, base


def check_status_by_host(crawl, capsys, queries):
    spark, conf, base = crawl
    rows = rows_of(capsys, base, queries[0])
    db = _df(spark, conf, "crawldb").select("host", "status").collect()
    assert sum(r["urls"] for r in rows) == len(db)
    assert {(r["host"], r["status"]): r["urls"] for r in rows} == collections.Counter((r[0], r[1]) for r in db)
    assert [r["host"] for r in rows] == sorted(r["host"] for r in rows)


def check_politeness_waits(crawl, capsys, queries):
    spark, conf, base = crawl
    rows = rows_of(capsys, base, queries[0])
    log = _df(spark, conf, "fetch_log")
    last = max(r[0] for r in log.select("round").distinct().collect())
    waits = collections.defaultdict(list)
    for r in log.where(f"round = {last} AND politeness_wait_ms IS NOT NULL").select("host", "politeness_wait_ms").collect():
        waits[r[0]].append(r[1])
    delay = {r["host"]: r["delay_s"] for r in _df(spark, conf, "hosts").select("host", "delay_s").collect()}
    assert len(rows) == min(20, len(waits))
    assert [r["waited_s"] for r in rows] == sorted((r["waited_s"] for r in rows), reverse=True)
    for r in rows:
        assert r["fetches"] == len(waits[r["host"]])
        assert r["waited_s"] == pytest.approx(sum(waits[r["host"]]) / 1000, abs=0.051)
        assert r["longest_wait_s"] == pytest.approx(max(waits[r["host"]]) / 1000, abs=0.051)
        assert r["delay_s"] == delay[r["host"]]
    # the top 20 are the hosts that waited longest: nobody left out waited more than the last one listed
    left_out = [sum(w) / 1000 for h, w in waits.items() if h not in {r["host"] for r in rows}]
    assert all(w <= rows[-1]["waited_s"] + 0.051 for w in left_out)
    assert rows[0]["waited_s"] > 0  # a host with several URLs in a round waits host_delay_s between them


def check_duplicate_clusters(crawl, capsys, queries):
    spark, conf, base = crawl
    rows = rows_of(capsys, base, queries[0])
    db = _df(spark, conf, "crawldb").select("url_fp", "url", "status", "dup_of").collect()
    url = {r["url_fp"]: r["url"] for r in db}
    clusters = collections.defaultdict(list)
    for r in db:
        if r["status"] == Status.DUPLICATE.value and r["dup_of"] in url:
            clusters[url[r["dup_of"]]].append(r["url"])
    assert clusters, "the test web's dup hosts left no duplicate in the crawl DB"
    assert len(rows) == min(10, len(clusters))
    assert rows[0]["copies"] == max(len(c) for c in clusters.values())
    assert [r["copies"] for r in rows] == sorted((r["copies"] for r in rows), reverse=True)
    for r in rows:
        assert r["copies"] == len(clusters[r["original"]])
        assert r["some_copies"] == sorted(clusters[r["original"]])[:3]


def check_change_feed(crawl, capsys, queries):
    spark, conf, base = crawl
    rows = rows_of(capsys, base, queries[0])
    ledger = _ledger(spark, conf)
    last = max(ledger)
    # the same changes read with the DataFrame API from the version after the last round's snapshot
    feed = (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", ledger[last]["crawldb_version"] + 1)
            .load(common.table_path(conf, "crawldb"))
            .select("url_fp", "status", "_change_type", "_commit_version").collect())
    before = {(r["url_fp"], r["_commit_version"]): r["status"] for r in feed
              if r["_change_type"] in ("delete", "update_preimage")}
    expected = collections.Counter((before.get((r["url_fp"], r["_commit_version"]), "(new)"), r["status"])
                                   for r in feed if r["_change_type"] in ("insert", "update_postimage"))
    assert {(r["was"], r["now"]): r["urls"] for r in rows} == expected
    # the URLs shown as new are the ones the last round's update inserted, as the ledger counted them
    new = sum(r["urls"] for r in rows if r["was"] == "(new)")
    db = _df(spark, conf, "crawldb")
    assert new == db.where(f"discovered_round = {last}").count() == counters.value(ledger[last]["counts"], "new_urls")
    assert new > 0
    # and every URL the update rewrote is a transition, from its status one round ago
    assert sum(r["urls"] for r in rows if r["was"] != "(new)") >= counters.value(ledger[last]["counts"], "updated_urls")
    assert any(r["was"] == Status.UNFETCHED.value and r["now"] == Status.FETCHED.value for r in rows)


def check_time_travel(crawl, capsys, queries):
    spark, conf, base = crawl
    ledger_q, version_q, time_q = queries
    ledger_rows = rows_of(capsys, base, ledger_q)
    latest, previous = ledger_rows[0], ledger_rows[1]
    assert latest["round"] == max(_ledger(spark, conf)) and previous["round"] == latest["round"] - 1
    # the README's literals are an example; the reader (and this test) takes them from the ledger's answer
    version_q, n = re.subn(r"VERSION AS OF \d+", f"VERSION AS OF {latest['crawldb_version']}", version_q)
    time_q, m = re.subn(r"TIMESTAMP AS OF '[^']*'", f"TIMESTAMP AS OF '{previous['updated_at']}'", time_q)
    assert n == m == 1
    by_version = {r["status"]: r["urls"] for r in rows_of(capsys, base, version_q)}
    by_time = {r["status"]: r["urls"] for r in rows_of(capsys, base, time_q)}
    db = _df(spark, conf, "crawldb")
    # one round ago: every URL the last round did not insert, in the statuses it had before the round
    then = common.read_at(spark, conf, "crawldb", latest["crawldb_version"])
    assert by_version == {r[0]: r[1] for r in then.groupBy("status").count().collect()}
    assert sum(by_version.values()) == db.where(f"discovered_round < {latest['round']}").count()
    assert by_time == by_version
    assert by_version != {r[0]: r[1] for r in db.groupBy("status").count().collect()}


def check_due(crawl, capsys, queries):
    spark, conf, base = crawl
    horizon = common.now_utc() + dt.timedelta(hours=24)
    rows = rows_of(capsys, base, queries[0])
    eligible = {s.value for s in ELIGIBLE}
    db = _df(spark, conf, "crawldb").select("host", "status", "next_fetch_time").collect()
    due = [r for r in db if r["status"] in eligible and r["next_fetch_time"] < horizon]
    assert {r["host"]: r["due_urls"] for r in rows} == collections.Counter(r["host"] for r in due)
    assert due and len(due) < len(db)  # some URLs are due, and some (retired, budget_exhausted...) never are
    first = {}
    for r in due:
        first[r["host"]] = min(first.get(r["host"], r["next_fetch_time"]), r["next_fetch_time"])
    assert all(_ts(r["first_due"]) == first[r["host"]] for r in rows)


def check_error_classes(crawl, capsys, queries):
    spark, conf, base = crawl
    rows = rows_of(capsys, base, queries[0])
    log = _df(spark, conf, "fetch_log").where("error_class IS NOT NULL").select("host", "error_class", "round").collect()
    assert log, "the test web's robots and trap hosts left no error class"
    assert {(r["host"], r["error_class"]): r["attempts"] for r in rows} == collections.Counter(
        (r[0], r[1]) for r in log)
    last = {}
    for r in log:
        last[(r[0], r[1])] = max(last.get((r[0], r[1]), 0), r[2])
    assert all(r["last_round"] == last[(r["host"], r["error_class"])] for r in rows)
    # robots.txt answering 5xx, a name that does not resolve (robots_denied is an outcome, not an error class)
    assert {"robots_unavailable", "dns"} <= {r["error_class"] for r in rows}


def check_bytes_by_mime(crawl, capsys, queries):
    spark, conf, base = crawl
    rows = rows_of(capsys, base, queries[0])
    stored = _df(spark, conf, "fetch_log").where("warc_filename IS NOT NULL").select("content_length").collect()
    assert sum(r["records"] for r in rows) == len(stored) > 0
    # a revisit record (a 304: no body, no content type) has no content_length; SQL's sum of a group of
    # nulls is null, counted here as the table side counts it: 0
    assert sum(r["stored_bytes"] or 0 for r in rows) == sum(r[0] or 0 for r in stored)
    assert rows[0]["mime"] == "text/html"  # the test web is mostly HTML
    assert all(";" not in r["mime"] and r["mime"] == r["mime"].lower() for r in rows)


def check_pages_per_round(crawl, capsys, queries):
    spark, conf, base = crawl
    rows = rows_of(capsys, base, queries[0])
    ledger = _ledger(spark, conf)
    assert [r["round"] for r in rows] == sorted(ledger)
    for r in rows:
        c = ledger[r["round"]]["counts"]
        assert r["state"] == "updated"
        assert r["generated"] == counters.value(c, "generated")
        assert r["attempts"] == counters.value(c, "fetch_log_rows")
        assert r["ok"] == counters.value(c, "fetched_ok") > 0
        assert 0 < r["stored"] <= r["attempts"]
        assert r["seconds"] > 0


CHECKS = {
    "Status by host": check_status_by_host,
    "Hosts waiting longest on politeness": check_politeness_waits,
    "The largest duplicate clusters": check_duplicate_clusters,
    "What changed in the last round": check_change_feed,
    "The crawl DB one round ago": check_time_travel,
    "URLs due in the next 24 hours": check_due,
    "Error classes by host": check_error_classes,
    "Bytes by MIME type": check_bytes_by_mime,
    "Pages per round": check_pages_per_round,
}


@pytest.mark.parametrize("title", sorted(QUERIES))
def test_readme_query(crawl, capsys, title):
    CHECKS[title](crawl, capsys, QUERIES[title])


# -- the verb: formats and errors -------------------------------------------------------------------
STATUS_Q = "SELECT status, count(*) AS urls FROM crawldb GROUP BY status ORDER BY status"


def test_formats_agree(crawl, capsys):
    spark, conf, base = crawl
    truth = sorted((r[0], r[1]) for r in _df(spark, conf, "crawldb").groupBy("status").count().collect())
    as_json = [(r["status"], r["urls"]) for r in rows_of(capsys, base, STATUS_Q)]
    as_csv = list(csv.reader(io.StringIO(run_sql(capsys, base, STATUS_Q, "--format", "csv"))))
    table = run_sql(capsys, base, STATUS_Q).splitlines()
    grid = [[c.strip() for c in ln.strip("|").split("|")] for ln in table if ln.startswith("|")]
    assert as_json == truth
    assert as_csv[0] == ["status", "urls"] and [(s, int(n)) for s, n in as_csv[1:]] == truth
    assert grid[0] == ["status", "urls"] and [(s, int(n)) for s, n in grid[1:]] == truth
    assert len(truth) > 2
    limited = run_sql(capsys, base, STATUS_Q, "--limit", "2")
    assert len([ln for ln in limited.splitlines() if ln.startswith("|")]) == 1 + 2
    assert "only showing top 2 rows" in limited


@pytest.mark.parametrize("query, names", [
    ("SELEC status FROM crawldb", "[PARSE_SYNTAX_ERROR]"),
    ("SELECT status FROM crawl_db", "[TABLE_OR_VIEW_NOT_FOUND]"),
    ("SELECT no_such_column FROM crawldb", "[UNRESOLVED_COLUMN"),
])
def test_a_rejected_query_is_one_line_and_exit_2(crawl, capsys, query, names):
    spark, conf, base = crawl
    capsys.readouterr()
    rc = cli.main(base + ["sql", query])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(f"deltacrawl: sql: {names}"), err
    if "TABLE_OR_VIEW" in names:
        assert "crawldb, hosts" in err  # it names the tables there are


def test_a_query_failing_in_its_tasks_prints_no_stack_trace(crawl):
    """As an operator runs it: a new process, its whole stderr read (the JVM's log lines included)."""
    spark, conf, base = crawl
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("DELTACRAWL_DEBUG", None)
    # every value of url fails the cast, inside the scan's tasks (ANSI mode): an executor error
    p = subprocess.run([sys.executable, "-m", "jobs.cli", *base, "--set", "spark.master=local[1]", "sql",
                        "SELECT sum(CAST(url AS INT)) FROM crawldb"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr[-3000:])
    assert lines[-1].startswith("deltacrawl: sql: [CAST_INVALID_INPUT]"), p.stderr[-3000:]
    ours = [ln for ln in lines if ln.startswith("deltacrawl:")]
    assert len(ours) == 1
    for marker in ("\tat ", "Traceback", "Exception in task", '"level": "ERROR"', "Py4J"):
        assert marker not in p.stderr, (marker, p.stderr[-3000:])
