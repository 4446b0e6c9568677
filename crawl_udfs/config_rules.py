"""What each configuration value must be, beyond its type: one declared table.

Guarantees:
- :data:`RULES` names every key of ``conf/defaults.toml`` (tests/test_config.py
  fails on a key without a rule, so a new key cannot skip validation) and
  says, for each, the range, the element rule of a list or the allowed words.
- :func:`problem` returns what is wrong with one value (``None`` when it is
  fine) in words an operator reads in a one-line error: ``must be >= 0``,
  ``element '10.1.2.3/8' has host bits set``. :func:`relation_problems` checks
  the few rules between two keys (a back-off base above its cap).
- Plain data and functions: no I/O, no import of the loader
  (:mod:`crawl_udfs.config` raises the error and names where the value came from).

The type of a key is checked by the loader (the type of its default); a rule
here may assume it.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Callable

Check = Callable[[Any], "str | None"]  # None: the value is fine; else what is wrong with it


def at_least(low: float) -> Check:
    """A number >= ``low``."""
    return lambda v: None if v >= low else f"must be >= {low}"


def above(low: float) -> Check:
    """A number > ``low`` (a timeout of 0 would mean "no timeout" to aiohttp)."""
    return lambda v: None if v > low else f"must be > {low}"


def between(low: float, high: float) -> Check:
    """A number in ``low..high``, both included."""
    return lambda v: None if low <= v <= high else f"must be within {low}..{high}"


def at_least_below(low: float, high: float) -> Check:
    """A number in ``low..high``, ``high`` excluded (a confidence level: 1 would ask for certainty)."""
    return lambda v: None if low <= v < high else f"must be within {low}..{high} ({high} excluded)"


def one_of(*words: str) -> Check:
    return lambda v: None if v in words else f"must be one of {', '.join(map(repr, words))}"


def matching(pattern: str, what: str) -> Check:
    """A string matching ``pattern`` in full; ``what`` says it in words."""
    compiled = re.compile(pattern)
    return lambda v: None if compiled.fullmatch(v) else f"must be {what}"


def each(check: Check) -> Check:
    """A list whose every element passes ``check`` (which also checks the element's type)."""
    def run(values: list) -> str | None:
        for element in values:
            if (wrong := check(element)) is not None:
                return f"element {element!r} {wrong}"
        return None
    return run


def _string(check: Check) -> Check:
    return lambda v: "must be a string" if not isinstance(v, str) else check(v)


def _python_regex(v: str) -> str | None:
    try:
        re.compile(v)
    except re.error as e:
        return f"is not a valid regular expression ({e})"
    return None


def _network(v: str) -> str | None:
    try:
        ipaddress.ip_network(v)  # strict: "10.1.2.3/8" is an error, never widened to 10.0.0.0/8
    except ValueError as e:
        return f"is not a CIDR network ({e})"
    return None


def _key_value(v: str) -> str | None:
    key, sep, _ = v.partition("=")
    return None if sep and key.strip() else "must be key=value"


ANY = lambda v: None  # noqa: E731 (free text, a flag, or a value checked where it is used, as said)
SECONDS = at_least(0)
COUNT = at_least(1)
COUNT_OR_ZERO = at_least(0)
SHARE = between(0, 1)
NON_EMPTY = matching(r".+", "non-empty")
ONE_LINE = matching(r"[^\x00-\x1f\x7f]*", "one line without control characters")
NAME = matching(r"[A-Za-z0-9._-]+", "a name of letters, digits, '.', '_' or '-'")
PARAM_NAMES = each(_string(matching(r"[^*]+\*?", "a parameter name, with at most a trailing *")))
PYTHON_REGEXES = each(_string(_python_regex))
# Spark's rlike takes Java regexes; the common subset is what Python compiles
# (Java-only syntax such as \p{L} is refused rather than silently ignored).
HOST_REGEXES = PYTHON_REGEXES
WARC_RECORD_TYPES = ("warcinfo", "response", "resource", "request", "metadata", "revisit", "conversion",
                     "continuation")

RULES: dict[str, Check] = {
    "storage.root": NON_EMPTY,
    "storage.s3_endpoint": matching(r"(https?://[^/\s]+/?)?", "empty or an http(s):// URL of a host[:port]"),
    "storage.s3_path_style": ANY,
    "storage.s3_region": matching(r"[a-z0-9-]*", "empty or a region name such as us-east-1"),
    "storage.s3_access_key_env": matching(r"([A-Za-z_][A-Za-z0-9_]*)?", "empty or an environment variable's name"),
    "storage.s3_secret_key_env": matching(r"([A-Za-z_][A-Za-z0-9_]*)?", "empty or an environment variable's name"),
    "storage.s3_single_driver": ANY,
    "spark.master": NON_EMPTY,
    "spark.app_name": NON_EMPTY,
    "spark.local_max_failures": COUNT,
    "spark.local_spare_slots": COUNT_OR_ZERO,
    "spark.driver_memory": matching(r"(?i)\d+[kmgtp]?b?", "a JVM memory size such as 2g or 512m"),
    "spark.driver_java_options": _string(ONE_LINE),
    "spark.shuffle_partitions": COUNT,
    "spark.ui_enabled": ANY,
    "spark.extra": each(_string(_key_value)),
    "spark.verbose": ANY,
    "spark.log_dir": NON_EMPTY,
    "spark.log_level": one_of("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"),
    # Fetch refuses to start without a product token and a contact URL
    # (crawl_udfs.fetcher); other verbs run without them.
    "crawler.agent_name": ANY,
    "crawler.user_agent": ANY,
    "politeness.host_delay_s": SECONDS,
    "politeness.max_in_flight_per_host": COUNT,
    "politeness.max_in_flight_per_ip": COUNT,
    "politeness.response_time_factor": at_least(0),
    "politeness.end_margin_s": SECONDS,
    "politeness.response_time_window": COUNT,
    "politeness.max_response_time_delay_s": SECONDS,
    "politeness.max_crawl_delay_s": SECONDS,
    "politeness.backoff_base_s": SECONDS,
    "politeness.backoff_max_s": SECONDS,
    "politeness.max_consecutive_failures": COUNT,
    "politeness.failure_park_duration_s": SECONDS,
    "politeness.max_retry_after_s": SECONDS,
    "robots.max_body_bytes": COUNT,
    "robots.cache_ttl_s": between(0, 86400),  # RFC 9309 §2.4: a cached robots.txt at most 24 h
    "robots.unavailable_ttl_s": between(0, 86400),
    "robots.recheck_after_error_s": SECONDS,
    "fetch.connect_timeout_s": above(0),
    "fetch.first_byte_timeout_s": above(0),
    "fetch.total_timeout_s": above(0),
    "fetch.max_body_bytes": COUNT,
    "fetch.max_compression_ratio": at_least(1),
    "fetch.max_concurrency": COUNT,
    "fetch.parse_threads": COUNT_OR_ZERO,
    "fetch.task_budget_s": above(0),
    "fetch.follow_in_round": ANY,
    "fetch.follow_max_known_urls": COUNT,
    "fetch.tail_check_after_s": SECONDS,
    "fetch.tail_busy_host_share": SHARE,
    "fetch.tail_rate_share": SHARE,
    "fetch.tail_rate_window_s": above(0),
    "fetch.tail_patience_s": SECONDS,
    "fetch.progress_every_s": SECONDS,
    "fetch.max_redirect_hops": COUNT_OR_ZERO,
    "fetch.dns_ttl_s": SECONDS,
    "fetch.dns_timeout_s": above(0),
    "fetch.dns_negative_ttl_s": SECONDS,
    "fetch.compression_check_floor_bytes": COUNT_OR_ZERO,
    "fetch.accept": ONE_LINE,
    "fetch.accept_robots": ONE_LINE,
    "fetch.accept_language": ONE_LINE,
    "fetch.keep_headers": each(_string(matching(r"[a-z0-9!#$%&'*+.^_`|~-]+", "a lower-case header name"))),
    "fetch.arrow_batch_rows": COUNT,
    "net.hosts_file": ANY,
    "net.allow_private_cidrs": each(_string(_network)),
    "net.dns_concurrency": COUNT,
    "url.max_length": COUNT,
    "url.query_order": one_of("keep", "sort"),
    "url.tracking_params": PARAM_NAMES,
    "url.session_params": PARAM_NAMES,
    "parse.max_outlinks_per_page": COUNT_OR_ZERO,
    "parse.follow_nofollow": ANY,
    "parse.max_links_examined": COUNT_OR_ZERO,
    "parse.charset_prescan_bytes": COUNT_OR_ZERO,
    "parse.charset_detect_bytes": COUNT_OR_ZERO,
    "parse.max_title_chars": COUNT_OR_ZERO,
    "parse.link_cache_entries": COUNT,
    "parse.min_block_words": COUNT_OR_ZERO,
    "parse.max_link_density": SHARE,
    "filter.max_path_segments": COUNT_OR_ZERO,
    "filter.max_segment_repeats": COUNT,
    "filter.max_query_params": COUNT_OR_ZERO,
    "filter.deny_patterns": PYTHON_REGEXES,
    "simhash.shingle_words": COUNT,
    "simhash.near_duplicate_bits": between(0, 64),
    "dedup.minhash_permutations": between(1, 1024),
    "dedup.jaccard_threshold": SHARE,
    "dedup.length_ratio": SHARE,
    "dedup.near_duplicates": ANY,
    "dedup.learn_patterns": ANY,
    "dedup.pattern_min_pages": at_least(1),
    "dedup.pattern_sample_pages": at_least(1),
    "dedup.pattern_min_share": between(0.5, 1),  # under half: most of its pages are not copies
    "dedup.pattern_action": one_of("skip", "lower"),
    "dedup.pattern_score_factor": SHARE,
    "dedup.max_bucket_rows": COUNT_OR_ZERO,
    "warc.max_file_bytes": COUNT,
    "warc.prefix": NAME,
    "warc.operator": ONE_LINE,  # a WARC header value: a line break would end the header
    "warc.gzip_level": between(0, 9),
    "warc.revisit_identical_payload": ANY,
    "generate.top_n": COUNT,
    "generate.max_urls_per_host": COUNT_OR_ZERO,
    "generate.discovery_share": SHARE,
    "generate.pipeline": ANY,
    "generate.list_ahead": ANY,
    "generate.resolve_wait_s": SECONDS,
    "generate.due_ahead_share": SHARE,
    "update.engine": one_of("spark", "driver"),
    "update.driver_threads": COUNT,
    "generate.fetch_partitions": COUNT_OR_ZERO,
    "priority.importance_s": at_least(0),
    "priority.importance_decades": above(0),
    "priority.depth_s": at_least(0),
    "priority.duplicate_s": at_least(0),
    "priority.due_now_s": at_least(0),
    "importance.every_rounds": COUNT_OR_ZERO,
    "importance.damping": at_least_below(0.0, 1.0),
    "importance.spread_host_pages": COUNT,
    "importance.intra_host_share": SHARE,
    "importance.iterations": COUNT,
    "importance.min_change": SHARE,
    "inject.score": at_least(0),
    "inject.filter": ANY,
    "sitemaps.enabled": ANY,
    "sitemaps.max_urls": between(1, 50000),
    "sitemaps.max_bytes": between(1024, 52428800),
    "sitemaps.max_index_depth": between(0, 10),
    "schedule.default_interval_s": SECONDS,
    "schedule.gone_interval_s": SECONDS,
    "schedule.redirect_perm_interval_s": SECONDS,
    "schedule.duplicate_interval_s": SECONDS,
    "schedule.robots_denied_interval_s": SECONDS,
    "schedule.retry_base_s": SECONDS,
    "schedule.retry_max_s": SECONDS,
    "schedule.max_retries": COUNT,
    "schedule.unchanged_simhash_bits": between(-1, 64),
    "schedule.policy": one_of("fixed", "adaptive", "nutch"),
    "schedule.min_interval_s": above(0),
    "schedule.max_interval_s": above(0),
    "schedule.prior_changes": above(0),
    "schedule.first_copy_dated": ANY,
    "schedule.change_history": COUNT,
    "schedule.nutch_inc_rate": at_least(0),
    "schedule.nutch_dec_rate": at_least_below(0, 1),
    "schedule.gone_backoff": at_least(1),
    "schedule.gone_checks": COUNT,
    "scope.max_depth": ANY,  # any integer; negative means no limit
    "scope.allow_hosts": HOST_REGEXES,
    "scope.deny_hosts": HOST_REGEXES,
    "scope.same_host_only": ANY,
    "scope.score_decay": SHARE,
    "scope.duplicate_score_factor": SHARE,
    "budget.max_pages_per_host": COUNT_OR_ZERO,
    "budget.max_bytes_per_host": COUNT_OR_ZERO,
    "trap.min_pages": COUNT,
    "trap.max_new_share": SHARE,
    "trap.park_confidence": at_least_below(0.5, 1),
    "trap.throttle_after_rounds": COUNT,
    "trap.park_after_rounds": COUNT,
    "trap.park_duration_s": SECONDS,
    "export.crawl_id": NAME,
    "export.hard_link": ANY,
    "export.index_files": COUNT,
    "export.cdxj_records": each(_string(one_of(*WARC_RECORD_TYPES))),
    "lease.ttl_s": above(0),
    "lease.heartbeat_s": above(0),
    "ledger.mirror_interval_s": above(0),
}

# (smaller, larger, factor): factor x the first key's value may not exceed the second's.
RELATIONS = (
    ("politeness.backoff_base_s", "politeness.backoff_max_s", 1),
    ("schedule.retry_base_s", "schedule.retry_max_s", 1),
    ("schedule.min_interval_s", "schedule.max_interval_s", 1),
    ("lease.heartbeat_s", "lease.ttl_s", 2),  # a holder renews at least twice per ttl
)


def problem(dotted: str, value: Any) -> str | None:
    """What is wrong with ``value`` for key ``dotted`` (already of the key's type); None if nothing."""
    check = RULES.get(dotted)
    return None if check is None else check(value)


def relation_problems(get: Callable[[str], Any]) -> list[str]:
    """The broken :data:`RELATIONS`, each as a sentence; ``get`` reads a dotted key."""
    return [f"{small} ({get(small)!r}) must not exceed {large} ({get(large)!r})"
            + ("" if factor == 1 else f" / {factor}")
            for small, large, factor in RELATIONS if get(small) * factor > get(large)]
