"""Object storage settings (jobs/object_store.py) and the refusal of unsafe S3 writers (jobs/lease.py), no JVM.

The crawl on a real S3 server is tests/test_s3.py; these are the rules it rests on.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pyspark
import pytest

from crawl_udfs import config
from crawl_udfs.config import ConfigError
from jobs import cli, lease, object_store, warc_staging

S3 = ['storage.root="s3a://bucket/crawl"', 'storage.s3_endpoint="http://127.0.0.1:9000"', "storage.s3_path_style=true",
      'storage.s3_region="us-east-1"', 'storage.s3_access_key_env="K"', 'storage.s3_secret_key_env="S"']


def _conf(*extra: str):
    return config.load(overrides=[*S3, *extra])


def test_hadoop_aws_matches_the_hadoop_client_pyspark_bundles():
    jars = Path(pyspark.__file__).parent / "jars"
    bundled = sorted(p.name for p in jars.glob("hadoop-client-api-*.jar"))
    assert bundled == [f"hadoop-client-api-{object_store.HADOOP_AWS.rsplit(':', 1)[1]}.jar"]


def test_the_s3a_jar_and_settings_only_for_an_s3_root():
    local = config.load(overrides=['storage.root="/tmp/x"'])
    assert object_store.packages(local) == [] and object_store.spark_settings(local, {"K": "a", "S": "b"}) == {}
    c = _conf()
    assert object_store.packages(c) == [object_store.HADOOP_AWS]
    got = object_store.spark_settings(c, {"K": "key", "S": "secret"})
    assert got == {"spark.hadoop.fs.s3a.path.style.access": "true",
                   "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
                   "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                   "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
                   "spark.hadoop.fs.s3a.access.key": "key", "spark.hadoop.fs.s3a.secret.key": "secret",
                   "spark.hadoop.fs.s3a.aws.credentials.provider":
                       "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}
    # no variables set: the SDK's default chain, no keys in the configuration
    assert not any("key" in k for k in object_store.spark_settings(c, {}))


def test_credentials_come_from_the_named_variables_and_never_show():
    o = object_store.options(_conf(), {"K": "AKIA-test", "S": "s3cr3t"})
    assert (o.access_key, o.secret_key) == ("AKIA-test", "s3cr3t")
    assert "s3cr3t" not in repr(o) and "AKIA" not in repr(o)
    with pytest.raises(ConfigError, match=r"\$K is set but \$S is not"):
        object_store.options(_conf(), {"K": "a"})


@pytest.mark.parametrize("pair", ['storage.s3_endpoint="127.0.0.1:9000/x"', 'storage.s3_region="US East"',
                                  'storage.s3_access_key_env="1BAD"'])
def test_bad_s3_keys_are_refused(pair):
    with pytest.raises(ConfigError, match=pair.split("=")[0]):
        config.load(overrides=[pair])


def test_pyarrow_gets_the_same_endpoint_and_never_falls_back_to_aws():
    fs, path = warc_staging.filesystem("s3a://bucket/crawl/warc", _conf())
    assert path == "bucket/crawl/warc"
    assert fs.type_name == "s3" and "127.0.0.1:9000" in repr(fs.__reduce__())
    with pytest.raises(ValueError, match="needs the storage.s3_"):
        warc_staging.filesystem("s3a://bucket/crawl/warc")


def _cli(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = cli.main([*sum((["--set", p] for p in S3), []), *args])
    return rc, err.getvalue()


def test_a_writer_on_s3_is_refused_before_spark_unless_one_driver_is_promised():
    rc, err = _cli("init")  # refused before the JVM: this test starts none
    assert rc == 2 and "storage.s3_single_driver=true" in err and "S3DynamoDBLogStore" in err, err
    rc, err = _cli("--force", "--set", "storage.s3_single_driver=true", "crawl", "--rounds", "1")
    assert rc == 2 and "--force is refused" in err, err
    lease.refuse_unsafe_storage(_conf("storage.s3_single_driver=true"), force=False)
    lease.refuse_unsafe_storage(_conf(f'spark.extra=["spark.delta.logStore.s3a.impl={lease.MULTI_DRIVER_LOGSTORE}"]'),
                                force=True)
    lease.refuse_unsafe_storage(config.load(overrides=['storage.root="/tmp/x"']), force=True)
