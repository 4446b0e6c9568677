"""Run by tests/test_s3.py in a driver of its own (the suite's Spark session has no S3A): the put-if-absent
of jobs/records.py on the bucket, with no existence check in the way.

``python -m tests.s3_records_probe OVERLAY``: puts one name twice through ``Records.put`` of a fresh
directory, then asks a second ``Records`` of the same directory (built after, so the JVM's LogStore
has no memory of the first put) to put it a third time; prints one JSON line: what each put returned
and the text stored.
"""

from __future__ import annotations

import json
import sys

from crawl_udfs import config
from jobs import records
from jobs.session import build_session


def main(overlay: str) -> None:
    conf = config.load([overlay])
    spark = build_session(conf, app_suffix="records-probe")
    a = records.Records(spark, conf, "probe")
    first = a.put("00000000000000000001.json", '{"writer": "a"}')
    second = a.put("00000000000000000001.json", '{"writer": "b"}')
    third = records.Records(spark, conf, "probe").put("00000000000000000001.json", '{"writer": "c"}')
    print(json.dumps({"puts": [first, second, third], "text": a.read("00000000000000000001.json")}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
