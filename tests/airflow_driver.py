"""Runs inside Airflow's own venv (tests/test_airflow.py builds it): what Airflow makes of our DAGs.

    python airflow_driver.py bag           the DagBag of $AIRFLOW__CORE__DAGS_FOLDER, as JSON
    python airflow_driver.py test DAG_ID   one ``dag.test()`` run of DAG_ID: task states and seconds, Asset events

Prints one JSON document on its last line of stdout (Airflow logs to stdout before it). Imports
nothing of the project's test code: Airflow's venv has no pytest and no pyspark.
"""

from __future__ import annotations

import json
import sys


def _bag():
    from airflow.dag_processing.dagbag import DagBag
    return DagBag()  # settings.DAGS_FOLDER, from AIRFLOW__CORE__DAGS_FOLDER


def describe() -> dict:
    bag = _bag()
    dags = {}
    for dag_id, dag in bag.dags.items():
        cond = getattr(dag.timetable, "asset_condition", None)
        dags[dag_id] = {
            "max_active_runs": dag.max_active_runs,
            "catchup": dag.catchup,
            "timetable": type(dag.timetable).__name__,
            "scheduled_on": sorted(a.uri for a in cond.objects) if cond is not None else [],  # AssetAll of Assets
            "tasks": {t.task_id: {
                "downstream": sorted(t.downstream_task_ids),
                "bash_command": t.bash_command,
                "skip_on_exit_code": sorted(t.skip_on_exit_code),
                "execution_timeout_s": t.execution_timeout.total_seconds() if t.execution_timeout else None,
                "retries": t.retries,
                "retry_delay_s": t.retry_delay.total_seconds(),
                "outlets": sorted(a.uri for a in t.outlets),
            } for t in dag.tasks},
        }
    return {"import_errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": dags}


def run(dag_id: str) -> dict:
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.utils.session import create_session

    dag = _bag().get_dag(dag_id)
    with create_session() as session:
        events_before = session.query(AssetEvent).count()
    dr = dag.test()
    with create_session() as session:
        tis = dr.get_task_instances(session=session)
        states = {ti.task_id: str(ti.state) for ti in tis}
        seconds = {ti.task_id: round(ti.duration or 0.0, 1) for ti in tis}
        events = [uri for (uri,) in session.query(AssetModel.uri).join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
                  .order_by(AssetEvent.id).offset(events_before)]
        queued = sorted(q.target_dag_id for q in session.query(AssetDagRunQueue))
    return {"state": str(dr.state), "tasks": states, "seconds": seconds, "asset_events": events,
            "queued_dags": queued}


if __name__ == "__main__":
    result = describe() if sys.argv[1] == "bag" else run(sys.argv[2])
    print(json.dumps(result))
