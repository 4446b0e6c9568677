"""Airflow 3 DAGs of a deltacrawl crawl: one round per run, and an export after each round.

``deltacrawl_round``: generate -> fetch -> update, each task one CLI verb (STYLE.md rule 12: DAG
files only wire tasks; every value comes from :mod:`jobs.airflow_plan`). One round per run, never
two at once (``max_active_runs=1``). Retries are safe: each verb reads the round ledger, so a
retried or re-run task resumes its round instead of repeating it, and a second writer (a retry
while a killed attempt's JVM still holds the crawl lease, or a person's ``deltacrawl crawl``) is
refused with exit status 3 and retried after ``retry_delay``. When nothing is due, generate exits
with ``EXIT_NOTHING_DUE``: the task is skipped, so are fetch and update, and the run succeeds. The
fetch task's ``execution_timeout`` covers the fetch window (``fetch.task_budget_s``).

Each task's outlets are the tables its verb writes, as Assets (URIs under storage.root);
``deltacrawl_export`` is scheduled on the crawl DB's Asset, so it runs ``deltacrawl export``
after each round that updated it (a skipped update emits no Asset event).

Airflow runs in its own environment (its Spark provider breaks pyspark 4.0.1), and imports only
the checkout's configuration code: keep this file in (or symlink it from) the checkout's
``airflow_dags/``. ``DELTACRAWL`` names the deltacrawl executable of the crawler's venv and
``DELTACRAWL_CONF`` its configuration overlay (README, "Airflow").
"""

from __future__ import annotations

import sys
from pathlib import Path

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import Asset, dag

_CHECKOUT = str(Path(__file__).resolve().parents[1])
if _CHECKOUT not in sys.path:
    sys.path.append(_CHECKOUT)

from jobs import airflow_plan  # noqa: E402 - importable once the checkout is on sys.path

PLAN = airflow_plan.plan()
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def _assets(verb: str) -> list[Asset]:
    return [Asset(PLAN.table_uri(name)) for name in airflow_plan.WRITES[verb]]


@dag(dag_id="deltacrawl_round", schedule="@hourly", start_date=START, catchup=False, max_active_runs=1,
     tags=["deltacrawl"], default_args={"retries": 2, "retry_delay": PLAN.retry_delay})
def deltacrawl_round():
    generate = BashOperator(task_id="generate", bash_command=PLAN.command("generate"), outlets=_assets("generate"),
                            skip_on_exit_code=airflow_plan.EXIT_NOTHING_DUE)
    fetch = BashOperator(task_id="fetch", bash_command=PLAN.command("fetch"), outlets=_assets("fetch"),
                         skip_on_exit_code=None, execution_timeout=PLAN.fetch_timeout)
    update = BashOperator(task_id="update", bash_command=PLAN.command("update"), outlets=_assets("update"),
                          skip_on_exit_code=None)
    generate >> fetch >> update


@dag(dag_id="deltacrawl_export", schedule=[Asset(PLAN.table_uri("crawldb"))], start_date=START, catchup=False,
     max_active_runs=1, tags=["deltacrawl"], default_args={"retries": 1, "retry_delay": PLAN.retry_delay})
def deltacrawl_export():
    BashOperator(task_id="export", bash_command=PLAN.command("export", "--out", PLAN.export_dir),
                 skip_on_exit_code=None)


deltacrawl_round()
deltacrawl_export()
