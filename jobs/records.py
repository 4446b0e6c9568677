"""Small JSON files under ``storage.root`` with a put-if-absent write: the lease's and the ledger's records.

Guarantees:

- **Put-if-absent on every storage Delta supports.** :meth:`Records.put` writes
  with Delta's own LogStore and ``overwrite=False``, the primitive Delta's commits
  rely on (atomic create on HDFS, the DynamoDB LogStore or a
  commit coordinator on S3, conditional writes on Azure and GCS): of two writers
  of one name, one succeeds and the other gets ``False``. A file is whole or absent.
  Except on a **local disk**: there Hadoop's rename is exists-then-rename (two racing writers can
  both "win") and the checksum file moves after the data (a reader can meet one writer's text under
  the other's checksum: ``ChecksumException``). A local record is written whole to a hidden
  temporary name and published with a hard link (``link(2)``: atomic, fails when the name exists;
  ``rename(2)`` to overwrite), with no checksum file.
  And except on **S3** (``s3a://``), where Delta's default LogStore (``S3SingleDriverLogStore``) checks
  for the name and then puts, serialised only inside one JVM: there a record is put with S3's
  conditional write (``If-None-Match: *``, through S3A's own SDK client), so the server refuses a
  second writer of the name (412) whichever driver it runs in (:class:`_ConditionalPut`).
- **No Spark jobs.** Files are listed, read and written by the driver through the
  Hadoop file system and the LogStore (milliseconds on a local disk), so a write
  never queues behind tasks that hold every task slot.
- **Numbered names** (:func:`numbered`) sort as numbers, so a chain of records
  (``<seq>.json``) is a sequence whose newest is the largest number.
"""

from __future__ import annotations

import os
import re
import threading
import uuid

from crawl_udfs.config import Config
from jobs.common import root


def numbered(seq: int, suffix: str = ".json") -> str:
    """``seq`` as a file name that sorts as a number: ``00000000000000000042.json``."""
    return f"{seq:020d}{suffix}"


def number(name: str, suffix: str = ".json") -> int | None:
    """The number of a :func:`numbered` name with ``suffix``, else None."""
    stem = name[:-len(suffix)] if name.endswith(suffix) else ""
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


class Records:
    """The files of ``<storage.root>/<name>`` (driver only); :func:`at` gives this process's one per directory.

    Every Py4J call is a socket round trip (about a millisecond, more under load), and naming a JVM
    class is one per package segment: the handles are looked up once."""

    def __init__(self, spark, conf: Config, name: str):
        jvm = spark.sparkContext._jvm
        self._new_path = jvm.org.apache.hadoop.fs.Path
        self._one = getattr(getattr(jvm.scala.collection, "Iterator$"), "MODULE$").single  # a one-line Scala iterator
        self._hconf = spark.sparkContext._jsc.hadoopConfiguration()
        self._dir = self._new_path(f"{root(conf)}/{name}")
        self._fs = self._dir.getFileSystem(self._hconf)
        self._log = getattr(getattr(jvm.org.apache.spark.sql.delta.storage, "LogStore$"), "MODULE$").apply(
            spark._jsparkSession)
        self._made = False  # the directory is made by the first write, so readers never write
        self.where = f"{root(conf)}/{name}"
        # a local disk's directory, written through the OS (see the module's docstring), else None
        self._local = (self._fs.makeQualified(self._dir).toUri().getPath()
                       if self._fs.getUri().getScheme() == "file" else None)
        self._s3 = _ConditionalPut(jvm, self._fs) if self._fs.getUri().getScheme() == "s3a" else None

    def _path(self, name: str):
        return self._new_path(self._dir, name)

    def names(self) -> list[str]:
        """The names of the files in the directory (none when it does not exist)."""
        if not self._fs.exists(self._dir):
            return []
        return [s.getPath().getName() for s in self._fs.listStatus(self._dir)]

    def names_from(self, start: str) -> list[str]:
        """The names ``>= start``, sorted (LogStore's ``listFrom``: on object stores a listing from a key,
        so the cost follows the names returned, not the directory)."""
        try:
            it = self._log.listFrom(self._path(start), self._hconf)
            out = []
            while it.hasNext():
                out.append(it.next().getPath().getName())
            return out
        except Exception as e:  # noqa: BLE001 - Py4JJavaError wrapping java.io.FileNotFoundException
            if "FileNotFound" in str(e):
                return []
            raise

    def read(self, name: str) -> str | None:
        """The text of file ``name``, or None when it is absent (or was removed since it was listed)."""
        try:
            return str(self._log.read(self._path(name), self._hconf).mkString())
        except Exception as e:  # noqa: BLE001 - Py4JJavaError wrapping java.io.FileNotFoundException
            if "FileNotFound" in str(e):
                return None
            raise

    def put(self, name: str, text: str, *, overwrite: bool = False) -> bool:
        """Write ``text`` (one line) as file ``name`` unless it exists (``overwrite``: always); True when written."""
        assert "\n" not in text
        if self._local is not None:
            return self._put_local(name, text, overwrite)
        if self._s3 is not None and not overwrite:
            return self._s3.put(self._fs.makeQualified(self._path(name)).toUri(), text + "\n")
        it = self._one(text)
        if not self._made:
            self._made = bool(self._fs.mkdirs(self._dir))
        try:
            self._log.write(self._path(name), it, overwrite, self._hconf)
        except Exception as e:  # noqa: BLE001 - Py4JJavaError wrapping java.nio.file.FileAlreadyExistsException
            if "FileAlreadyExists" in str(e):
                return False
            if not self._made or self._fs.exists(self._dir):
                raise
            self._made = False  # the directory was removed since this process made it (a crawl deleted)
            return self.put(name, text, overwrite=overwrite)
        return True

    def _put_local(self, name: str, text: str, overwrite: bool) -> bool:
        """:meth:`put` on a local disk: the whole file under a hidden name (which no numbered listing
        matches), then one atomic link (or rename to overwrite); a stale checksum file is removed first."""
        os.makedirs(self._local, exist_ok=True)
        path = os.path.join(self._local, name)
        temp = os.path.join(self._local, f".{name}.{uuid.uuid4().hex}.tmp")
        with open(temp, "x", encoding="utf-8") as f:
            f.write(text + "\n")
        try:
            if overwrite:
                _remove(os.path.join(self._local, f".{name}.crc"))
                os.replace(temp, path)
            else:
                os.link(temp, path)
        except FileExistsError:
            return False
        finally:
            _remove(temp)
        return True

    def delete(self, name: str) -> None:
        self._fs.delete(self._path(name), False)


class _ConditionalPut:
    """Put-if-absent on S3 by a conditional write: ``PutObject`` with ``If-None-Match: *`` (AWS S3 since
    2024-08; MinIO and moto too). The header is added to the request (SDK v2's override configuration),
    so any SDK version the S3A JAR brings sends it; a store that ignores it would let a second writer
    overwrite (none that S3A supports is known to)."""

    def __init__(self, jvm, fs):
        sdk = jvm.software.amazon.awssdk
        self._client = fs.getS3AInternals().getAmazonS3Client("deltacrawl records: conditional put")
        self._if_absent = sdk.awscore.AwsRequestOverrideConfiguration.builder().putHeader("If-None-Match", "*").build()
        self._request = sdk.services.s3.model.PutObjectRequest.builder
        self._body = sdk.core.sync.RequestBody.fromString

    def put(self, uri, text: str) -> bool:
        """Write ``text`` at ``uri`` (a qualified ``s3a://bucket/key``) unless the key exists; True when written."""
        request = (self._request().bucket(uri.getHost()).key(uri.getPath().lstrip("/"))
                   .overrideConfiguration(self._if_absent).build())
        try:
            self._client.putObject(request, self._body(text))
        except Exception as e:  # noqa: BLE001 - Py4JJavaError wrapping S3Exception
            # 412: the key exists; 409: another conditional write of the key is under way (AWS)
            if re.search(r"Status Code: (412|409)", str(e)):
                return False
            raise
        return True


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


_lock = threading.Lock()
_open: dict[tuple[int, str], Records] = {}


def at(spark, conf: Config, name: str) -> Records:
    """This process's :class:`Records` of ``<storage.root>/<name>`` (one per JVM and directory)."""
    key = (id(spark.sparkContext._jvm), f"{root(conf)}/{name}")
    with _lock:
        if key not in _open:
            _open[key] = Records(spark, conf, name)
        return _open[key]
