"""Object storage (S3 and S3-compatible servers) for Spark and for ``pyarrow.fs``, from one set of keys.

Guarantees:

- **One source of settings.** The ``storage.s3_*`` keys (``conf/defaults.toml``) decide the endpoint,
  path-style addressing and region for both readers of ``storage.root``: Hadoop's S3A inside Spark
  (tables, the lease and ledger records; :func:`spark_settings`) and ``pyarrow.fs`` (WARC files,
  progress snapshots, staging, reports, the export record; :func:`pyarrow_filesystem`). A WARC file
  a fetch task writes lands where Delta's table says it is.
- **No credentials in configuration files.** The keys name the *environment variables* that hold
  the access key and secret key (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` by default); when
  they are unset, both clients fall back to their own default chains (instance profile, web identity,
  ``~/.aws``). The driver reads them once and passes them to Spark's executors in the Hadoop
  configuration (which Spark redacts in its UI and logs) and to the fetch tasks in the frozen config
  object they already receive (:class:`S3Options`, built in the driver).
- **The S3A JAR only when needed.** :func:`packages` names ``org.apache.hadoop:hadoop-aws`` (the
  version of the Hadoop client bundled with pyspark: :data:`HADOOP_AWS`, checked against pyspark's
  JARs by tests/test_object_store.py) only when ``storage.root`` is ``s3a://``; a local crawl never
  downloads it. hadoop-aws 3.4.1 depends on the AWS SDK v2 ``bundle`` (558 MB, measured: README,
  "On a cluster").

Plain Python: no SparkSession is imported here (``jobs/session.py`` applies the settings).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from crawl_udfs.config import Config, ConfigError

#: hadoop-aws must be the version of the Hadoop client Spark bundles (pyspark 4.0.1: hadoop-client-api 3.4.1).
HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.4.1"
#: URI schemes that name S3 (Hadoop's s3a is the one Spark is given; Arrow's own is s3).
S3_SCHEMES = ("s3a", "s3", "s3n")


def is_s3(uri: str) -> bool:
    return "://" in uri and uri.split("://", 1)[0].lower() in S3_SCHEMES


@dataclass(frozen=True)
class S3Options:
    """Where and how to reach the object store; the keys are resolved from the environment by :func:`options`."""

    endpoint: str  # "" = the SDKs' default (AWS, by region)
    path_style: bool
    region: str  # "" = the SDKs' default chain
    access_key: str = ""  # "" = the SDKs' default credential chain
    secret_key: str = ""

    def __repr__(self) -> str:  # never print a secret (tracebacks, logs)
        return (f"S3Options(endpoint={self.endpoint!r}, path_style={self.path_style}, region={self.region!r}, "
                f"credentials={'from environment' if self.access_key else 'default chain'})")


def options(conf: Config, environ=os.environ) -> S3Options:
    """The ``storage.s3_*`` keys with the credentials read from the environment variables they name.

    One variable set without the other is a :class:`ConfigError` (a half-configured key pair would send
    requests signed by the default chain's identity instead)."""
    s = conf.storage
    access = environ.get(s.s3_access_key_env, "") if s.s3_access_key_env else ""
    secret = environ.get(s.s3_secret_key_env, "") if s.s3_secret_key_env else ""
    if bool(access) != bool(secret):
        have, lack = ((s.s3_access_key_env, s.s3_secret_key_env) if access
                      else (s.s3_secret_key_env, s.s3_access_key_env))
        raise ConfigError(f"${have} is set but ${lack} is not: set both (storage.s3_access_key_env / "
                          f"storage.s3_secret_key_env name them), or neither for the default credential chain")
    return S3Options(endpoint=s.s3_endpoint, path_style=s.s3_path_style, region=s.s3_region,
                     access_key=access, secret_key=secret)


def packages(conf: Config) -> list[str]:
    """Maven coordinates Spark needs beyond Delta's for ``storage.root``: hadoop-aws for ``s3a://``."""
    return [HADOOP_AWS] if is_s3(conf.storage.root) else []


def spark_settings(conf: Config, environ=os.environ) -> dict[str, str]:
    """``spark.hadoop.fs.s3a.*`` for ``storage.root`` on S3 (empty for any other root)."""
    if not is_s3(conf.storage.root):
        return {}
    o = options(conf, environ)
    out = {"spark.hadoop.fs.s3a.path.style.access": str(o.path_style).lower()}
    if o.endpoint:
        out["spark.hadoop.fs.s3a.endpoint"] = o.endpoint
        out["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(urlsplit(o.endpoint).scheme == "https").lower()
    if o.region:
        out["spark.hadoop.fs.s3a.endpoint.region"] = o.region
    if o.access_key:
        out["spark.hadoop.fs.s3a.access.key"] = o.access_key
        out["spark.hadoop.fs.s3a.secret.key"] = o.secret_key
        out["spark.hadoop.fs.s3a.aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    return out


def pyarrow_filesystem(o: S3Options):
    """A ``pyarrow.fs.S3FileSystem`` reaching the same store as :func:`spark_settings` with the same options."""
    from pyarrow import fs as pafs

    kw: dict = {"force_virtual_addressing": not o.path_style}
    if o.endpoint:
        u = urlsplit(o.endpoint if "://" in o.endpoint else f"https://{o.endpoint}")
        kw.update(endpoint_override=u.netloc, scheme=u.scheme)
    if o.region:
        kw["region"] = o.region
    if o.access_key:
        kw.update(access_key=o.access_key, secret_key=o.secret_key)
    return pafs.S3FileSystem(**kw)


def bucket_path(uri: str) -> str:
    """``s3a://bucket/key`` as pyarrow's S3 path ``bucket/key``."""
    return uri.split("://", 1)[1].rstrip("/")
