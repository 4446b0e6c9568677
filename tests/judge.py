"""The per-address cap a Spark crawl's server log is judged by (one place, so it is tightened once).

KNOWN BUG, issue 12 point 6 ("per-IP cap from round 1"): generate groups hosts
into fetch tasks by their last known IP, and a host's address is unknown before
its first fetch. In round 1 hosts sharing an address may sit in different tasks,
each task holding ``politeness.max_in_flight_per_ip`` on it. Until the resolve
step before generate lands, a Spark crawl is judged against that cap times the
number of fetch partitions; then this returns the cap itself.
"""

from __future__ import annotations


def spark_ip_cap(conf, n_partitions: int | None = None) -> int:
    """``politeness.max_in_flight_per_ip`` x the fetch partitions (default ``generate.fetch_partitions``)."""
    n = conf.generate.fetch_partitions if n_partitions is None else n_partitions
    return conf.politeness.max_in_flight_per_ip * max(1, n)
