"""Shared fixtures: one Spark session for the whole suite (STYLE.md rule 13)."""

from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    from crawl_udfs import config
    from jobs.session import build_session

    options = f"{config.load().spark.driver_java_options} -Ddeltacrawl.suite=1".strip()
    conf = config.load(overrides=["spark.master=local[2]", "spark.shuffle_partitions=4", "spark.driver_memory=3g",
                                  # the default's options and a marker the suite's JVM must carry (test_errors:
                                  # the key reaches the JVM)
                                  f"spark.driver_java_options={options}"])
    session = build_session(conf, app_suffix="tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def e2e_crawl(spark, tmp_path_factory):
    """(web, conf, base CLI args, request log, violations) of the suite's one multi-round crawl of the
    test web (tests/e2e_crawl.py), run at its first use; read it, never write to it."""
    from tests import e2e_crawl as crawl
    yield from crawl.crawl(tmp_path_factory.mktemp("e2e"))


@pytest.fixture
def crawl_conf(tmp_path):
    """A config whose storage.root is a fresh temporary directory."""
    from crawl_udfs import config
    return config.load(overrides=[f'storage.root="{tmp_path / "crawl"}"', "spark.master=local[2]",
                                  "spark.shuffle_partitions=4"])


def pytest_terminal_summary(terminalreporter):
    from tests.summary import LINES
    if LINES:
        terminalreporter.section("measured by the tests")
        for line in LINES:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server on 127.0.0.1 (tests/s3server.py), started at its first use, stopped at the end."""
    from tests.s3server import S3Server
    with S3Server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server, request):
    """A new bucket on the S3 server for this test."""
    return s3_server.bucket(request.node.name)
