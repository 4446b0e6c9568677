"""The Airflow DAGs (airflow_dags/) as Airflow 3 itself loads and runs them.

Pure tests first: :mod:`jobs.airflow_plan` (what the DAG file takes from the configuration) and the
``generate`` exit status. Then, in Airflow's own venv (its pins conflict with pyspark 4.0.1; built
from tests/airflow-requirements.txt once, under the user's cache dir, and reused), driven by
tests/airflow_driver.py:

- the DAG folder imports through Airflow's ``DagBag`` with no import errors, with the expected
  task graph, skip codes, fetch timeout, retries, Assets, and every task's command accepted by the
  ``deltacrawl`` parser;
- on a SQLite metadata DB (``airflow db migrate``, AIRFLOW_HOME in a temp dir), ``dag.test()``
  runs one real round against the local test web, calling the project venv's ``deltacrawl``
  (``DELTACRAWL``, ``DELTACRAWL_CONF``): the crawl DB shows it (ledger ``updated``, fetch_log
  rows, the server's log), the update's Asset event queues the export DAG; a second run with
  nothing due succeeds with every task skipped and no Asset event.

Each task starts a JVM (~15-20 s), so the round is small: 3 sites, their home pages only
(``scope.max_depth = 0``, so nothing is due after round 1), a 10 s fetch window.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import airflow_plan, cli
from tests.cli_jvm import SPARK_LINE
from tests.summary import note

REPO_ROOT = Path(__file__).resolve().parents[1]
DAGS_FOLDER = REPO_ROOT / "airflow_dags"
REQUIREMENTS = Path(__file__).with_name("airflow-requirements.txt")
DRIVER = Path(__file__).with_name("airflow_driver.py")
DELTACRAWL = Path(sys.executable).parent / "deltacrawl"
ROUND_TASKS = {"generate": ["fetch"], "fetch": ["update"], "update": []}


def _overlay(path: Path, root: str, extra: str = "") -> Path:
    path.write_text(f'[storage]\nroot = "{root}"\n' + extra)
    return path


# -- pure: the plan the DAG file wires ---------------------------------------------------------------
def test_plan_from_the_configuration(tmp_path):
    conf = _overlay(tmp_path / "c.toml", str(tmp_path / "crawl"),
                    "[fetch]\ntask_budget_s = 100.0\ntotal_timeout_s = 7.0\n[lease]\nttl_s = 60.0\nheartbeat_s = 5.0\n")
    p = airflow_plan.plan({"DELTACRAWL": "/opt/dc venv/bin/deltacrawl", "DELTACRAWL_CONF": str(conf)})
    assert p.fetch_timeout.total_seconds() == 100.0 + 7.0 + airflow_plan.STEP_MARGIN_S
    assert p.retry_delay.total_seconds() == 65.0  # past a dead attempt's lease (ttl) by one heartbeat
    assert p.table_uri("crawldb") == f"file://{tmp_path}/crawl/tables/crawldb"
    assert p.export_dir == f"{tmp_path}/crawl/export"
    assert shlex.split(p.command("export", "--out", p.export_dir)) == [
        "/opt/dc venv/bin/deltacrawl", "--conf", str(conf), "export", "--out", f"{tmp_path}/crawl/export"]
    s3 = _overlay(tmp_path / "s3.toml", "s3a://bucket/crawl/")
    p = airflow_plan.plan({"DELTACRAWL_CONF": str(s3), "DELTACRAWL_EXPORT_DIR": "/srv/corpus"})
    assert (p.table_uri("hosts"), p.export_dir, p.deltacrawl) == ("s3a://bucket/crawl/tables/hosts", "/srv/corpus",
                                                                  "deltacrawl")


def test_plan_refuses_a_relative_root_and_a_bad_overlay(tmp_path):
    rel = _overlay(tmp_path / "rel.toml", "./crawl-data")
    with pytest.raises(cli.ConfigError, match="storage.root './crawl-data' is relative"):
        airflow_plan.plan({"DELTACRAWL_CONF": str(rel)})
    with pytest.raises(cli.ConfigError, match="not found"):
        airflow_plan.plan({"DELTACRAWL_CONF": str(tmp_path / "missing.toml")})


def test_plan_names_real_tables_and_needs_no_spark():
    from schemas.tables import TABLES
    assert {t for names in airflow_plan.WRITES.values() for t in names} <= set(TABLES)
    assert airflow_plan.EXIT_NOTHING_DUE not in (0, 1, 2, cli.EXIT_LEASE_HELD, 99)  # 99: BashOperator's default skip
    code = "import sys, jobs.airflow_plan; sys.exit(1 if 'pyspark' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT).returncode == 0


# -- Airflow's venv ----------------------------------------------------------------------------------
def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    """Run ``cmd``; a failure is a test failure with the command's output (never a skip)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        pytest.fail(f"{what} failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n"
                    f"{(proc.stdout + proc.stderr)[-6000:]}", pytrace=False)
    return proc


@pytest.fixture(scope="module")
def airflow_bin() -> Path:
    """The bin directory of Airflow's venv, built from airflow-requirements.txt once per version of that file
    (under ~/.cache/deltacrawl, kept across runs and clones; a lock keeps two test runs from building it
    at once, and a stamp written last marks it complete)."""
    wanted = REQUIREMENTS.read_text()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deltacrawl"
    venv = cache / f"venv-airflow-{hashlib.sha256(wanted.encode()).hexdigest()[:12]}"
    stamp = venv / "installed-requirements.txt"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text() == wanted):
            t0 = time.monotonic()
            _run([sys.executable, "-m", "venv", "--clear", str(venv)], "creating Airflow's venv", timeout=300)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
            _run(pip + ["install", "--no-deps", "-r", str(REQUIREMENTS)], "installing Airflow", timeout=1200)
            _run(pip + ["check"], "pip check in Airflow's venv (a dependency missing from airflow-requirements.txt?)",
                 timeout=120)
            stamp.write_text(wanted)
            note(f"airflow: venv installed in {time.monotonic() - t0:.0f} s ({venv})")
    return venv / "bin"


def _airflow_env(home: Path, conf: Path) -> dict[str, str]:
    return {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",  # a paused export DAG is never queued
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "DELTACRAWL": str(DELTACRAWL), "DELTACRAWL_CONF": str(conf)}


def _driver(airflow_bin: Path, env: dict, *args: str, timeout: float) -> dict:
    """Run tests/airflow_driver.py in Airflow's venv; its output (Airflow's and the tasks' logs) goes to
    a file under AIRFLOW_HOME, whose tail a failure shows."""
    log = Path(env["AIRFLOW_HOME"]) / f"driver-{'-'.join(args)}-{time.monotonic_ns()}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        rc = subprocess.run([str(airflow_bin / "python"), str(DRIVER), *args], stdout=out, stderr=subprocess.STDOUT,
                            env=env, timeout=timeout).returncode
    lines = log.read_text(errors="replace").strip().splitlines()
    if rc != 0 or not lines or not lines[-1].startswith("{"):
        pytest.fail(f"airflow_driver {' '.join(args)} failed (exit {rc}); {log}:\n" + "\n".join(lines[-80:]),
                    pytrace=False)
    return json.loads(lines[-1])


# -- the DagBag ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_dagbag_imports_both_dags_with_their_graph(airflow_bin, tmp_path):
    conf = _overlay(tmp_path / "c.toml", str(tmp_path / "crawl"), "[fetch]\ntask_budget_s = 120.0\n")
    plan = airflow_plan.plan({"DELTACRAWL": str(DELTACRAWL), "DELTACRAWL_CONF": str(conf)})
    bag = _driver(airflow_bin, _airflow_env(tmp_path / "airflow", conf), "bag", timeout=300)
    assert bag["import_errors"] == {}
    assert sorted(bag["dags"]) == ["deltacrawl_export", "deltacrawl_round"]

    rnd = bag["dags"]["deltacrawl_round"]
    assert (rnd["max_active_runs"], rnd["catchup"]) == (1, False)
    assert {t: v["downstream"] for t, v in rnd["tasks"].items()} == ROUND_TASKS
    tasks = rnd["tasks"]
    assert tasks["generate"]["skip_on_exit_code"] == [cli.EXIT_NOTHING_DUE]
    assert tasks["fetch"]["skip_on_exit_code"] == tasks["update"]["skip_on_exit_code"] == []  # failures fail
    assert tasks["fetch"]["execution_timeout_s"] == 120.0 + 30.0 + airflow_plan.STEP_MARGIN_S
    for verb, t in tasks.items():
        assert t["bash_command"] == plan.command(verb)
        assert t["retries"] >= 1 and t["retry_delay_s"] == plan.retry_delay.total_seconds()
        assert t["outlets"] == sorted(plan.table_uri(n) for n in airflow_plan.WRITES[verb])

    export = bag["dags"]["deltacrawl_export"]
    assert export["timetable"] == "AssetTriggeredTimetable"
    assert export["scheduled_on"] == [plan.table_uri("crawldb")]
    assert plan.table_uri("crawldb") in tasks["update"]["outlets"]
    assert export["tasks"]["export"]["bash_command"] == plan.command("export", "--out", plan.export_dir)

    for t in [*tasks.values(), export["tasks"]["export"]]:  # every command is one the CLI accepts
        words = shlex.split(t["bash_command"])
        assert words[0] == str(DELTACRAWL)
        cli._parser().parse_args(words[1:])


# -- a real round ---------------------------------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_dag_runs_a_round_then_skips_when_nothing_is_due(spark, airflow_bin, tmp_path):
    from tests.testweb import TestWeb

    with TestWeb(tmp_path / "web", n_hosts=3, seed=3, kinds=["site"]) as web:
        conf = _overlay(tmp_path / "round.toml", str(tmp_path / "crawl"),
                        f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
                        "[politeness]\nhost_delay_s = 0.2\n"
                        "[fetch]\ntask_budget_s = 10.0\ntotal_timeout_s = 5.0\n"
                        "[scope]\nmax_depth = 0\n"  # the seeds only: nothing is due after round 1
                        "[generate]\nfetch_partitions = 1\n"
                        '[spark]\nmaster = "local[2]"\ndriver_memory = "1g"\nshuffle_partitions = 2\n' + SPARK_LINE +
                        "[lease]\nttl_s = 10.0\nheartbeat_s = 2.0\n")  # a failed task is retried in 12 s
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("\n".join(web.seeds()) + "\n")
        assert cli.main(["--conf", str(conf), "init"]) == 0
        assert cli.main(["--conf", str(conf), "inject", str(seeds)]) == 0

        home = tmp_path / "airflow"
        env = _airflow_env(home, conf)
        t0 = time.monotonic()
        _run([str(airflow_bin / "airflow"), "db", "migrate"], "airflow db migrate", env=env, timeout=600)
        t1 = time.monotonic()
        first = _driver(airflow_bin, env, "test", "deltacrawl_round", timeout=1800)
        t2 = time.monotonic()
        requests = [r for r in web.log() if r["path"] != "/robots.txt"]
        second = _driver(airflow_bin, env, "test", "deltacrawl_round", timeout=900)
        t3 = time.monotonic()
        after = [r for r in web.log() if r["path"] != "/robots.txt"]
    note(f"airflow: db migrate {t1 - t0:.0f} s, dag.test round {t2 - t1:.0f} s (tasks {first['seconds']}), "
         f"nothing-due run {t3 - t2:.0f} s (tasks {second['seconds']})")

    assert first["state"] == "success", first
    assert first["tasks"] == {"generate": "success", "fetch": "success", "update": "success"}
    assert f"file://{tmp_path}/crawl/tables/crawldb" in first["asset_events"]
    assert first["queued_dags"] == ["deltacrawl_export"]  # the scheduler would now run the export
    read = lambda name: spark.read.format("delta").load(f"{tmp_path}/crawl/tables/{name}")  # noqa: E731
    rounds = {r["round"]: r["state"] for r in read("rounds").collect()}
    assert rounds == {1: "updated"}
    fetched = {r["url"] for r in read("fetch_log").where("round = 1 AND status_code = 200").collect()}
    assert len(fetched) == len(web.seeds()) and len(requests) == len(fetched)

    assert second["state"] == "success", second
    assert second["tasks"] == {"generate": "skipped", "fetch": "skipped", "update": "skipped"}
    assert second["asset_events"] == [] and second["queued_dags"] == ["deltacrawl_export"]
    assert after == requests
    assert {r["round"]: r["state"] for r in read("rounds").collect()} == {1: "updated"}
