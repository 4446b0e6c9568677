"""Every deltacrawl table: its StructType, its Delta properties, where it lives.

Schemas are code (STYLE.md rule 11): nullability is deliberate — a NOT NULL
column is one every writer must fill. Timestamps are UTC ``TimestampType``.
All tables live under ``storage.root/tables/<name>`` and are registered by
name in the session catalog (``jobs.common.register_tables``), so SQL can say
``SELECT … FROM crawldb``; any other Spark session can read them as
``delta.`<root>/tables/crawldb```.

Short long strings (URLs, bodies) sit after the columns that queries filter
on: the crawl DB keeps data-skipping statistics on its first four columns (see ``_DV``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DoubleType, IntegerType, LongType, MapType,
                               StringType, StructField, StructType, TimestampType)


def _f(name: str, dtype, nullable: bool = True, comment: str = "") -> StructField:
    return StructField(name, dtype, nullable, metadata={"comment": comment} if comment else {})


#: fetch_output / fetch_log ``warc_refers_to``: set exactly for the revisit records of pages.
REFERS_TO = ("a revisit record (304, or a 2xx payload identical to the stored copy's): WARC-Refers-To, the "
             "record id of the full copy; null for a response record")

CRAWLDB = StructType([
    _f("url_fp", LongType(), False, "xxhash64(url): the key (Spark SQL xxhash64, seed 42)"),
    _f("host", StringType(), False, "lower-case punycode host, no port"),
    _f("status", StringType(), False, "schemas.status.Status value"),
    _f("next_fetch_time", TimestampType(), False, "due at or after this time"),
    _f("score", DoubleType(), False, "priority: higher first"),
    _f("depth", IntegerType(), False, "link distance from a seed (redirects keep the depth)"),
    _f("redirect_hops", IntegerType(), False, "redirects taken to reach this URL"),
    _f("retries", IntegerType(), False, "consecutive failed fetches"),
    _f("fetch_count", IntegerType(), False, "fetches with a response"),
    _f("change_count", IntegerType(), False, "fetches whose content differed from the previous copy"),
    _f("unchanged_count", IntegerType(), False, "fetches whose content was the same (incl. 304)"),
    _f("fetch_interval_s", DoubleType(), False, "current re-fetch interval"),
    _f("first_seen", TimestampType(), False, "when the URL entered the crawl DB"),
    _f("last_fetch_time", TimestampType(), True, "start of the last fetch attempt"),
    _f("last_change_time", TimestampType(), True, "fetch time at which a change was last seen"),
    _f("http_status", IntegerType(), True, "status code of the last response"),
    _f("error_class", StringType(), True, "why the last attempt failed or was deferred"),
    _f("simhash", LongType(), True, "64-bit SimHash of the main text of the last copy"),
    _f("dup_of", LongType(), True, "url_fp of the original when status = duplicate"),
    _f("discovered_round", LongType(), False, "round that inserted the URL (0 = injected)"),
    _f("updated_round", LongType(), False, "last round whose update touched the row (idempotence guard)"),
    _f("source_fp", LongType(), True, "url_fp of the page the URL was first found on"),
    _f("digest", StringType(), True, "WARC payload digest of the last stored copy (sha1:BASE32)"),
    _f("content_type", StringType(), True, "media type of the last response"),
    _f("etag", StringType(), True, "ETag of the last 2xx response, for If-None-Match"),
    _f("last_modified", StringType(), True, "Last-Modified of the last 2xx response, for If-Modified-Since"),
    _f("warc_record_id", StringType(), True, "WARC-Record-ID of the last stored copy (revisits refer to it)"),
    _f("warc_fetch_time", TimestampType(), True, "fetch time of that copy"),
    _f("redirect_to", StringType(), True, "normalised redirect target of the last response"),
    _f("url", StringType(), False, "normalised URL"),
    # which copy is the original (jobs/originals.py); last, so `init` appends them to old tables
    _f("first_fetched", TimestampType(), True, "fetch time of the first stored copy (the earliest is the original)"),
    _f("canonical_fp", LongType(), True, "url_fp of the last stored copy's rel=canonical (itself when self-canonical)"),
    # the re-crawl schedule's history (jobs/schedule_transforms.py, crawl_udfs/change_rate.py); last, for `init`
    _f("last_visit_time", TimestampType(), True, "fetch time of the last visit that saw content (2xx or 304)"),
    _f("change_intervals_s", ArrayType(DoubleType(), True), True,
       "seconds between the visits that saw a change and the visit before (0: dated by Last-Modified); "
       "the last schedule.change_history"),
    _f("unchanged_span_s", DoubleType(), True,
       "seconds observed without a change (visits that saw none, and since Last-Modified), kept in "
       "proportion to change_intervals_s"),
    _f("change_rate", DoubleType(), True, "estimated changes per second (the MAP estimate, with the host prior)"),
    _f("gone_checks", IntegerType(), True, "consecutive 404/410 answers (retired at schedule.gone_checks)"),
    # link importance (jobs/importance.py); last, so `init` appends it to old tables
    _f("importance", DoubleType(), True,
       "host-damped PageRank over the links table x the URLs counted (mean <= 1), refreshed every "
       "importance.every_rounds rounds; generate's priority reads it (null: not computed yet, the score stands in)"),
    # sitemaps (crawl_udfs/sitemaps.py); last, so `init` appends it to old tables
    _f("fetch_kind", StringType(), True,
       "'sitemap': a sitemap, fetched as a request of its host and read as one (its URLs become outlinks); "
       "null: a page"),
])

#: One learnt URL pattern of a host (crawl_udfs/url_patterns.py), with the evidence it was learnt from.
DUP_PATTERN = StructType([
    _f("pattern", StringType(), True, "/print/ (first path segment), ?name (a parameter), ?name=value"),
    _f("kind", StringType(), True, "prefix | param | param_value"),
    _f("pages", IntegerType(), True, "stored pages of the host matching it, when learnt"),
    _f("dup_share", DoubleType(), True, "share of them whose URL without the pattern has the same content"),
])

HOSTS = StructType([
    _f("host", StringType(), False, "lower-case punycode host, no port"),
    _f("ip", StringType(), True, "last address connected to"),
    _f("next_allowed_at", TimestampType(), True, "earliest next request (politeness survives rounds)"),
    _f("consecutive_failures", IntegerType(), False, "timeouts/5xx in a row"),
    _f("parked_until", TimestampType(), True, "no URL of the host is generated before this"),
    _f("park_reason", StringType(), True,
       "failures, retry_after, crawl_delay_too_long, robots_unavailable (fetch); 'trap: <why>' (update)"),
    _f("robots_status", IntegerType(), True, "HTTP status of the cached robots.txt (null: unreachable)"),
    _f("robots_fetched_at", TimestampType(), True, "when robots.txt was fetched"),
    _f("robots_expires_at", TimestampType(), True, "after this robots.txt is fetched again"),
    _f("crawl_delay_s", DoubleType(), True, "robots.txt Crawl-delay for our agent"),
    _f("pages_fetched", LongType(), False, "pages fetched over the whole crawl (budget.max_pages_per_host)"),
    _f("bytes_fetched", LongType(), False, "body bytes received over the whole crawl"),
    _f("requests", LongType(), False, "requests sent over the whole crawl (robots.txt included)"),
    _f("duplicate_pages", LongType(), False, "fetched pages found to be duplicates"),
    _f("new_content_pages", LongType(), False, "fetched pages with content not seen before on the host"),
    _f("updated_round", LongType(), False, "last round whose update touched the row"),
    _f("sitemaps", ArrayType(StringType(), True), True, "Sitemap lines of robots.txt"),
    _f("robots_body", BinaryType(), True, "cached robots.txt body (capped at robots.max_body_bytes)"),
    # Budgets and trap detection. Nullable: `deltacrawl init` adds them to older tables (ALTER TABLE ADD COLUMNS).
    _f("budget_reason", StringType(), True, "which budget ran out: pages | bytes (null: budget left)"),
    _f("round_cap", IntegerType(), True, "per-round URL cap lowered by trap throttling (null: generate's cap)"),
    _f("trap_strikes", IntegerType(), True, "consecutive judged rounds with new-content share < trap.max_new_share"),
    _f("trap_new_share", DoubleType(), True, "new-content share of the first copies of the last judged round"),
    _f("trap_streak_pages", LongType(), True, "first copies fetched over the current strike streak"),
    _f("trap_streak_exact", LongType(), True, "of those, exact duplicates (payload digest) of the host's own pages"),
    _f("trap_streak_near", LongType(), True, "of those, near-duplicates (the dedup lookup) of the host's own pages"),
    _f("near_duplicate_pages", LongType(), True,
       "first copies that were near-duplicates of the host's own pages (trap evidence), whole crawl"),
    # The effective delay (update) and the address learnt before the first fetch (resolve, jobs/resolve.py).
    _f("delay_s", DoubleType(), True,
       "seconds per request at the end of the last fetch task: max(host_delay_s, Crawl-delay, learnt) "
       "+ back-off + its longest recent request"),
    _f("resolve_error", StringType(), True, "why the resolve step found no address: dns | ssrf_blocked"),
    # URL patterns learnt as duplicates (jobs/pattern_transforms.py); last, so `init` appends it to old tables.
    _f("dup_patterns", ArrayType(DUP_PATTERN, True), True,
       "URL patterns whose pages copy the host's other URLs, with their evidence; generate skips their URLs "
       "(dedup.pattern_action); null: none learnt"),
    # pooled revisits of the host's pages: the prior of a new page's change rate (crawl_udfs/change_rate.py)
    _f("revisits", LongType(), True, "visits of the host's pages that could tell changed from unchanged"),
    _f("revisit_changes", LongType(), True, "of those, visits that saw a change"),
    _f("revisit_span_s", DoubleType(), True, "seconds between those visits and the visit before, summed"),
    # the host's mixture prior over change rates (crawl_udfs/rate_prior.py, mixture_weights); last, so `init`
    # appends it to old tables
    _f("rate_mass", ArrayType(DoubleType(), True), True,
       "its pages' change-rate posteriors over rate_prior.LOG_GRID, summed over their revisits, each weighted "
       "by the revisit's gap / schedule.default_interval_s (null: no revisit under the adaptive policy yet)"),
])

FETCH_LOG = StructType([
    _f("round", LongType(), False, "round of the fetch"),
    _f("url_fp", LongType(), False, "key of the URL in crawldb"),
    _f("host", StringType(), False, ""),
    _f("outcome", StringType(), False, "crawl_udfs.rows.Outcome value"),
    _f("status_code", IntegerType(), True, "HTTP status"),
    _f("fetch_time", TimestampType(), True, "request start (null: not attempted)"),
    _f("error_class", StringType(), True, ""),
    _f("content_type", StringType(), True, ""),
    _f("content_length", LongType(), True, "stored body bytes"),
    _f("wire_bytes", LongType(), True, "body bytes on the wire"),
    _f("truncated", StringType(), True, "WARC-Truncated reason"),
    _f("digest", StringType(), True, "payload digest"),
    _f("simhash", LongType(), True, ""),
    _f("changed", BooleanType(), True, "content differs from the previous copy (null: unknown)"),
    _f("t_first_byte_ms", DoubleType(), True, ""),
    _f("t_total_ms", DoubleType(), True, ""),
    _f("politeness_wait_ms", DoubleType(), True, "time the URL waited for its host"),
    _f("n_outlinks", IntegerType(), True, ""),
    _f("warc_offset", LongType(), True, ""),
    _f("warc_length", LongType(), True, ""),
    _f("ip", StringType(), True, ""),
    _f("charset", StringType(), True, ""),
    _f("redirect_to", StringType(), True, ""),
    _f("warc_filename", StringType(), True, "file under storage.root/warc/"),
    _f("warc_record_id", StringType(), True, ""),
    _f("error_message", StringType(), True, ""),
    _f("url", StringType(), False, ""),
    _f("dup_of", LongType(), True, "url_fp of the original when update marked this capture a duplicate"),
    # identical-payload revisits (crawl_udfs/warc.py); last, so `init` appends it to old tables
    _f("warc_refers_to", StringType(), True, REFERS_TO),
])

LINKS = StructType([
    _f("round", LongType(), False, ""),
    _f("src_fp", LongType(), False, ""),
    _f("dst_fp", LongType(), False, ""),
    _f("kind", StringType(), False, "a, area, frame, iframe, canonical, redirect, sitemap (a URL a sitemap "
       "lists), sitemap_child (a sitemap an index lists)"),
    _f("nofollow", BooleanType(), False, ""),
    _f("dst_url", StringType(), False, ""),
])

ROUNDS = StructType([
    _f("round", LongType(), False, "round number, from 1"),
    _f("state", StringType(), False, "generated -> fetching -> fetched -> updated"),
    _f("generated_at", TimestampType(), True, ""),
    _f("fetch_started_at", TimestampType(), True, ""),
    _f("fetched_at", TimestampType(), True, ""),
    _f("updated_at", TimestampType(), True, ""),
    _f("n_partitions", IntegerType(), True, "fetch partitions of the round"),
    _f("counts", MapType(StringType(), LongType()), True, "declared counters (schemas.counters.COUNTERS)"),
    _f("seconds", MapType(StringType(), DoubleType()), True, "time spent per verb"),
    _f("crawldb_version", LongType(), True, "crawldb version update reads as the round's pre-round snapshot"),
    _f("hosts_version", LongType(), True, "hosts version update reads as the round's pre-round snapshot"),
])

# Delta refuses NOT NULL inside arrays, so nested fields are nullable; writers fill them all.
OUTLINK = StructType([
    _f("url", StringType(), True, ""),
    _f("url_fp", LongType(), True, ""),
    _f("kind", StringType(), True, ""),
    _f("nofollow", BooleanType(), True, ""),
    _f("host", StringType(), True, ""),
    _f("lastmod", TimestampType(), True, "kind sitemap: the sitemap's <lastmod> for the URL"),
])

#: The round's fetch list (segment), one row per URL to fetch; written by generate.
FETCH_LIST = StructType([
    _f("round", LongType(), False, ""),
    _f("partition", IntegerType(), False, "fetch partition: pmod(xxhash64(ip or host), n)"),
    _f("url_fp", LongType(), False, ""),
    _f("host", StringType(), False, ""),
    _f("depth", IntegerType(), False, ""),
    _f("score", DoubleType(), False, ""),
    _f("redirect_hops", IntegerType(), False, ""),
    _f("etag", StringType(), True, ""),
    _f("last_modified", StringType(), True, ""),
    _f("prev_digest", StringType(), True, ""),
    _f("prev_warc_record_id", StringType(), True, ""),
    _f("prev_fetch_time", TimestampType(), True, ""),
    _f("url", StringType(), False, ""),
    _f("fetch_kind", StringType(), True, "crawldb.fetch_kind: 'sitemap' or null (a page)"),
    _f("pages_fetched", LongType(), True,
       "hosts.pages_fetched of the URL's host as listed (0 without a hosts row): which hosts update relearns "
       "(jobs/pattern_transforms.learning_hosts); null in rounds listed before the column existed"),
])

#: The round's fetch output (segment): one "page" row per fetch-list URL, one "host" row per host
#: and one "robots" row per robots.txt response stored in WARC (crawl_udfs.rows.RobotsCapture;
#: read only by export), from the committed attempt of each task; written by fetch.
FETCH_OUTPUT = StructType([
    _f("round", LongType(), False, ""),
    _f("partition", IntegerType(), False, ""),
    _f("kind", StringType(), False, "page | host | robots (a robots.txt response stored in WARC)"),
    _f("host", StringType(), False, ""),
    _f("url_fp", LongType(), True, "page rows"),
    _f("outcome", StringType(), True, ""),
    _f("fetch_time", TimestampType(), True, ""),
    _f("status_code", IntegerType(), True, ""),
    _f("error_class", StringType(), True, ""),
    _f("redirect_hops", IntegerType(), True, ""),
    _f("retry_after_s", DoubleType(), True, ""),
    _f("content_type", StringType(), True, ""),
    _f("charset", StringType(), True, ""),
    _f("content_length", LongType(), True, ""),
    _f("wire_bytes", LongType(), True, ""),
    _f("truncated", StringType(), True, ""),
    _f("digest", StringType(), True, ""),
    _f("simhash", LongType(), True, ""),
    _f("noindex", BooleanType(), True, ""),
    _f("nofollow", BooleanType(), True, ""),
    _f("outlinks_filtered", IntegerType(), True, ""),
    _f("warc_offset", LongType(), True, ""),
    _f("warc_length", LongType(), True, ""),
    _f("t_first_byte_ms", DoubleType(), True, ""),
    _f("t_total_ms", DoubleType(), True, ""),
    _f("politeness_wait_ms", DoubleType(), True, ""),
    _f("ip", StringType(), True, "page and host rows"),
    _f("etag", StringType(), True, ""),
    _f("last_modified", StringType(), True, ""),
    _f("redirect_to", StringType(), True, ""),
    _f("canonical", StringType(), True, ""),
    _f("title", StringType(), True, ""),
    _f("warc_filename", StringType(), True, "final name under storage.root/warc/"),
    _f("warc_staging", StringType(), True, "attempt directory the file waits in until promoted"),
    _f("warc_record_id", StringType(), True, ""),
    _f("error_message", StringType(), True, ""),
    _f("url", StringType(), True, ""),
    _f("outlinks", ArrayType(OUTLINK, True), True, ""),
    # host rows
    _f("robots_status", IntegerType(), True, ""),
    _f("robots_fetched_at", TimestampType(), True, ""),
    _f("robots_expires_at", TimestampType(), True, ""),
    _f("crawl_delay_s", DoubleType(), True, ""),
    _f("sitemaps", ArrayType(StringType(), True), True, ""),
    _f("next_allowed_at", TimestampType(), True, ""),
    _f("consecutive_failures", IntegerType(), True, ""),
    _f("parked", BooleanType(), True, ""),
    _f("park_reason", StringType(), True, ""),
    _f("requests", LongType(), True, ""),
    _f("robots_requests", LongType(), True, ""),
    _f("bytes_received", LongType(), True, ""),
    _f("robots_body", BinaryType(), True, ""),
    _f("delay_s", DoubleType(), True, "the host's seconds per request when the task ended (TaskHosts.host_result)"),
    # page rows of URLs followed inside the round (fetch.follow_in_round); last, so `init` appends them to old tables
    _f("in_round", BooleanType(), True, "the URL was followed inside the round, not on the fetch list"),
    _f("depth", IntegerType(), True, "in_round rows: depth (parent's + 1), for update's insert"),
    _f("score", DoubleType(), True, "in_round rows: score (parent's x scope.score_decay / its followed links)"),
    _f("source_fp", LongType(), True, "in_round rows: url_fp of the page the URL was found on"),
    # near-duplicate signatures (crawl_udfs/near_dup.py); last, so `init` appends them to old tables
    _f("minhash", BinaryType(), True, "MinHash of the main text's shingles: dedup.minhash_permutations x 4 bytes"),
    _f("words", IntegerType(), True, "main-text length in words (null: no main text)"),
    # sitemaps (crawl_udfs/sitemaps.py); last, so `init` appends it to old tables
    _f("sitemap_urls", ArrayType(StringType(), True), True,
       "host rows, robots.txt fetched in the round (sitemaps.enabled): the host's sitemaps to read, "
       "normalised (those robots.txt names on the host, then /sitemap.xml)"),
    # identical-payload revisits (crawl_udfs/warc.py); last, so `init` appends it to old tables
    _f("warc_refers_to", StringType(), True, REFERS_TO),
])

#: The near-duplicate index (jobs/dedup_transforms.py): one row per (SimHash block key, original page),
#: so a round's lookup is an equi-join on ``block_key`` (an array of keys per page would have to be
#: exploded over the whole index every round). Written by update (append once per round), only when
#: ``dedup.near_duplicates`` is on; a page marked duplicate is never added.
NEAR_DUP_INDEX = StructType([
    _f("block_key", LongType(), False, "one of the page's k + 1 SimHash block keys (crawl_udfs.near_dup.block_keys)"),
    _f("url_fp", LongType(), False, "the original page's key in crawldb"),
    _f("host", StringType(), False, ""),
    _f("simhash", LongType(), False, "64-bit SimHash of its main text"),
    _f("words", IntegerType(), False, "main-text length in words"),
    _f("first_fetched", TimestampType(), False, "fetch time of the copy indexed (the original is the earliest)"),
    _f("round", LongType(), False, "round whose update added it"),
    _f("minhash", BinaryType(), False, "MinHash signature (dedup.minhash_permutations x 4 bytes, little-endian)"),
    _f("canonical_fp", LongType(), True, "url_fp of its rel=canonical when indexed (jobs/originals.py)"),
])


@dataclass(frozen=True)
class Table:
    name: str
    schema: StructType
    partition_by: tuple[str, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    comment: str = ""


# Deletion vectors keep a MERGE from rewriting the untouched rows of the files it touches: worth it
# for the crawl DB, whose rounds touch a few rows of every file. Every other table is small, or
# written by append / replaceWhere overwrite only, and a table with the deletion-vector feature costs
# a file-listing Spark job each time a plan that reads it is analysed (Delta's
# PreprocessTableWithDVs): measured by bench/verb_cost.py, RESULTS.md "Rounds that cost seconds".
# Data-skipping statistics: the crawl DB's first four columns (url_fp, host, status, next_fetch_time:
# generate's pushed-down filter is on the last two), none on the other tables (read by round
# partition or whole). Collecting min/max over 32 columns is work in every write and MERGE.
_DV = (("delta.enableDeletionVectors", "true"), ("delta.dataSkippingNumIndexedCols", "4"))
_NO_DV = (("delta.enableDeletionVectors", "false"), ("delta.dataSkippingNumIndexedCols", "0"))

TABLES: dict[str, Table] = {t.name: t for t in (
    Table("crawldb", CRAWLDB, properties=_DV + (("delta.enableChangeDataFeed", "true"),),
          comment="one row per normalised URL: the frontier and what is known of each URL"),
    Table("hosts", HOSTS, properties=_NO_DV, comment="one row per host: robots cache, politeness, budgets"),
    Table("fetch_log", FETCH_LOG, partition_by=("round",), properties=_NO_DV,
          comment="one row per fetch attempt: the crawl log"),
    Table("links", LINKS, partition_by=("round",), properties=_NO_DV, comment="one row per link edge"),
    Table("rounds", ROUNDS, properties=_NO_DV, comment="the round ledger"),
    Table("fetch_list", FETCH_LIST, partition_by=("round",), properties=_NO_DV,
          comment="segment: the URLs each round fetches"),
    Table("fetch_output", FETCH_OUTPUT, partition_by=("round",), properties=_NO_DV,
          comment="segment: what each round's fetch tasks returned"),
    # Not partitioned or clustered by block_key: unmeasured, left for issue 14's lookup benchmark.
    Table("near_dup_index", NEAR_DUP_INDEX, properties=_NO_DV,
          comment="one row per SimHash block key of each original page: the near-duplicate lookup"),
)}
