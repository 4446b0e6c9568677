"""One deltacrawl round per DAG run: generate -> fetch -> update (Airflow 3).

Thin by design (STYLE.md rule 12): each task calls the project's CLI, which
reads the round ledger, so a retried or re-run task resumes its round instead
of repeating it. ``max_active_runs=1``: never two rounds at once; a retry
that starts while the first attempt still runs (or a person's ``crawl`` on the
same storage.root) is refused by the crawl lease (exit status 3) and retried
after ``retry_delay``, by then past the dead attempt's ``lease.ttl_s``. Airflow runs
in its own environment (the Spark provider breaks pyspark 4.0.1: docs/ARCHITECTURE.md);
``DELTACRAWL`` names the deltacrawl executable of the crawler's venv and
``DELTACRAWL_CONF`` its configuration overlay.
"""

from __future__ import annotations

import os

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import dag

DELTACRAWL = os.environ.get("DELTACRAWL", "deltacrawl")
CONF = os.environ.get("DELTACRAWL_CONF", "")


def _cmd(verb: str) -> str:
    conf = f"--conf {CONF} " if CONF else ""
    return f"{DELTACRAWL} {conf}{verb}"


@dag(dag_id="deltacrawl_round", schedule="@hourly", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, max_active_runs=1, tags=["deltacrawl"],
     default_args={"retries": 2, "retry_delay": pendulum.duration(minutes=5)})
def deltacrawl_round():
    generate = BashOperator(task_id="generate", bash_command=_cmd("generate"))
    fetch = BashOperator(task_id="fetch", bash_command=_cmd("fetch"))
    update = BashOperator(task_id="update", bash_command=_cmd("update"))
    generate >> fetch >> update


deltacrawl_round()
