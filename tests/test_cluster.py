"""The same deltacrawl on a Spark standalone cluster: a master and two workers on this machine.

ARCHITECTURE.md "Scaling out": nothing changes but the master URL. The cluster
is started from pyspark's own ``spark-class`` (Master and Worker daemons bound
to 127.0.0.1), then:

1. init and inject run embedded (in the suite's process: only the master differs), then the
   ``deltacrawl`` CLI opens round 1 with ``--set spark.master=spark://…`` (``generate``: the
   driver here, executors on the workers, the resolve step's Python tasks on them);
2. ``spark-submit --master spark://… jobs/cli.py … round`` resumes that round and runs it to the
   end (fetch and update), the way a cluster operator would (the session factory then leaves the
   master and the packages to spark-submit).

One round split over the two entry paths, not a round each: each path's own part (how the
session is made) is the same whatever the verb, and a round on this cluster costs minutes
(update's Spark jobs on 1-core executors).

It asserts the round completed, both applications ran executors on both workers
(the master's own JSON status lists the applications with the cores they got),
every page is in ``fetch_log`` once with a WARC pointer, and the test web saw
no politeness violation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.net import free_loopback_port
from tests.cli_jvm import SPARK_LINE
from tests.testweb import TestWeb

pytestmark = [pytest.mark.spark, pytest.mark.slow]

VENV_BIN = Path(sys.executable).parent
SPARK_CLASS = VENV_BIN / "spark-class"
SPARK_SUBMIT = VENV_BIN / "spark-submit"
DELAY = 0.5


def _state(ui_port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m",
           "SPARK_LOG_DIR": str(d / "logs"), "SPARK_WORKER_DIR": str(d / "work")}
    port, ui = free_loopback_port(), free_loopback_port()
    url = f"spark://127.0.0.1:{port}"
    procs = [subprocess.Popen([str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)], env=env,
                              stdout=open(d / "master.log", "wb"), stderr=subprocess.STDOUT)]
    try:
        worker_uis = [free_loopback_port(), free_loopback_port()]
        for i in range(2):
            procs.append(subprocess.Popen(
                [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--webui-port", str(worker_uis[i]), "--cores", "1", "--memory", "1g",
                 "--work-dir", str(d / f"work{i}"), url],
                env=env, stdout=open(d / f"worker{i}.log", "wb"), stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 120
        while True:
            try:
                alive = [w for w in _state(ui).get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) == 2:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "\n".join((d / n).read_text(errors="replace")[-2000:]
                                 for n in ("master.log", "worker0.log", "worker1.log") if (d / n).exists())
                pytest.fail(f"the standalone cluster did not come up:\n{logs}")
            time.sleep(1)
        yield {"url": url, "ui": ui, "worker_uis": worker_uis, "dir": d}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert r.returncode == 0, f"{' '.join(cmd)}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-5000:]}"
    return r


@pytest.mark.timeout(1500)
def test_crawl_on_a_standalone_cluster(cluster, tmp_path, spark):
    from crawl_udfs import config
    from jobs import common

    with TestWeb(tmp_path / "web", n_hosts=8, seed=5, kinds=["site"]) as web:
        overlay = tmp_path / "cluster.toml"
        overlay.write_text(
            f'[storage]\nroot = "{tmp_path / "crawl"}"\n'
            f'[net]\nhosts_file = "{web.hosts_file}"\nallow_private_cidrs = ["127.10.0.0/16"]\n'
            f"[politeness]\nhost_delay_s = {DELAY}\n"
            "[fetch]\ntask_budget_s = 20.0\ntotal_timeout_s = 6.0\n"
            "[generate]\nmax_urls_per_host = 4\nfetch_partitions = 2\n"
            '[spark]\nshuffle_partitions = 4\ndriver_memory = "1g"\n' + SPARK_LINE +
            # Delta replays its log with 50 tasks by default: right for a real cluster, minutes here.
            # No task waits for a busy executor that holds its input (spark.locality.wait, 3 s): every
            # input is on this one disk, and the round's update is some 130 short jobs on two 1-core executors.
            'extra = ["spark.executor.memory=512m", "spark.cores.max=2", '
            '"spark.databricks.delta.snapshotPartitions=2", "spark.locality.wait=0"]\n')
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("\n".join(web.seeds()) + "\n")
        import jobs.cli
        # init and inject in this process (the suite's embedded session: the same tables on this disk), so
        # the cluster's two applications are the ones that fetch (each costs a driver and two executors)
        assert jobs.cli.main(["--conf", str(overlay), "init"]) == 0
        assert jobs.cli.main(["--conf", str(overlay), "inject", str(seeds)]) == 0
        cli = [str(VENV_BIN / "deltacrawl"), "--conf", str(overlay), "--set", f"spark.master={cluster['url']}"]
        out = _run(cli + ["generate"]).stdout
        assert "generate: round=1, resumed=False" in out, out

        submit = [str(SPARK_SUBMIT), "--master", cluster["url"],
                  "--packages", "io.delta:delta-spark_2.13:4.0.1",
                  "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
                  "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
                  "--conf", "spark.executor.memory=512m", "--conf", "spark.ui.enabled=false",
                  "--conf", "spark.databricks.delta.snapshotPartitions=2",
                  "--conf", "spark.locality.wait=0",
                  jobs.cli.__file__, "--conf", str(overlay), "round"]
        out = _run(submit, env={**os.environ, "PYSPARK_PYTHON": sys.executable}).stdout
        assert "round 1: resuming from state generated" in out and "1 round(s) completed" in out, out
        v = web.violations(host_delay_s=DELAY, max_in_flight_per_addr=config.load([overlay]).politeness.max_in_flight_per_ip)
        n_requests = len(web.log())

    conf = config.load([overlay])
    rounds = {r["round"]: r["state"] for r in spark.read.format("delta").load(common.table_path(conf, "rounds"))
              .collect()}
    assert rounds == {1: "updated"}
    log = spark.read.format("delta").load(common.table_path(conf, "fetch_log"))
    sent = log.where("fetch_time IS NOT NULL")
    assert sent.count() > 8
    assert sent.count() == sent.select("round", "url_fp").distinct().count()
    assert sent.where("outcome = 'ok' AND (warc_filename IS NULL OR warc_offset IS NULL)").count() == 0
    assert v.too_close == [] and v.overlapping == [] and v.disallowed == [] and v.bait == [], v.summary()
    assert n_requests > 8

    apps = _state(cluster["ui"]).get("completedapps", [])
    assert len(apps) >= 2, apps  # generate, spark-submit round
    # Each worker ran an executor for every application: the fetch tasks ran on the cluster.
    for ui in cluster["worker_uis"]:
        w = _state(ui)
        ran = {e.get("appid") for e in w.get("finishedexecutors", []) + w.get("executors", [])}
        assert {a["id"] for a in apps} <= ran, (ui, ran, [a["id"] for a in apps])
