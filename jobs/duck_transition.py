"""The first half of update's ``plan``, up to ``fresh``, in DuckDB on the driver (``jobs/duck_engine.py``).

Ports of ``jobs/update_transforms.py`` (``with_followed``, ``prepare``, ``category``, ``same_main_text``,
``changed_column``, ``with_rates``, ``transition``) and of ``jobs/hosts_transforms.py``'s ``host_next``
(with ``_host_rows`` and ``_parked_until``); the schedule they call is ``jobs/duck_schedule.py``. Same names,
parameters and contracts as the Spark twins (see their docstrings), ``con`` first, relations in the place of
DataFrames, SQL text in the place of Columns; outputs have the twins' columns, order and types.

What each reads of the crawl DB and of ``hosts`` (the gather fetches these; ``jobs/crawldb_slice.round_slice``
has them):

- :func:`prepare`: the crawl-DB rows whose ``url_fp`` is one of the round's page rows' (every CRAWLDB column;
  ``importance`` only passes through as ``o_importance``);
- :func:`with_rates` / :func:`transition`: nothing more of the crawl DB (the ``o_*`` columns of ``prepare``:
  all but ``o_url_fp``, ``o_host``, ``o_url``, ``o_error_class``, ``o_updated_round``, ``o_importance``;
  the later steps read the rest); ``priors`` (:func:`jobs.duck_schedule.host_priors`) of the ``hosts`` rows
  of the round's hosts (``host``, ``revisits``, ``revisit_changes``, ``revisit_span_s``), read under
  ``schedule.policy = "adaptive"`` only; ``host_next``'s three columns;
- :func:`host_next`: the ``hosts`` rows whose host is a host of any ``fetch_output`` row of the round
  (``host``, ``next_allowed_at``, ``parked_until``);
- the adaptive multiplier (:func:`jobs.duck_schedule.round_multiplier`): the crawl-DB aggregate
  :func:`jobs.duck_schedule.stored_buckets_sql` (the caller computes it where the crawl DB is, Spark).

Relations are lazy (views of fresh names in ``con``, :func:`jobs.duck_schedule.query`); the caller materialises
what it reads more than once (``prepare``'s result: ``duck_engine.register``). Under adaptive the rates (40
bisection steps per stored row) are computed by :func:`with_rates` for the multiplier and again inside
:func:`transition`, as the Spark plan does. Measured on a synthetic round of 10,000 URLs (prepare to transition,
the multiplier included): 0.23 s of CPU under fixed, 0.7 s under adaptive.

The Spark twin choices that are arbitrary: ``prepare``'s ``dropDuplicates(["url_fp"])`` of page rows (the
contract gives one page row per URL; a second one would be kept or dropped at random by either engine), and
``_host_rows``' first row of a host when two have the same partition and robots_fetched_at.
"""

from __future__ import annotations

import datetime as dt

import duckdb

from crawl_udfs.rows import Outcome
from crawl_udfs.simhash import EMPTY as EMPTY_SIMHASH
from jobs import duck_schedule as S
from jobs.duck_engine import XXHASH64, literal, plus_seconds, sql_type
from jobs.duck_schedule import col, query
from jobs.schedule_transforms import GAP, HIST, MASS, PRIOR, RATE, SPAN, STORED_CATS
from jobs.update_transforms import BASE, CAT, CHANGED, FIRST, KEEP, WAS, WIRE
from schemas.status import Status
from schemas.tables import CRAWLDB

Rel = duckdb.DuckDBPyRelation


def _in(expr: str, values) -> str:
    return f"({expr}) IN ({', '.join(literal(v) for v in values)})"


# -- 1. the URL's page row beside its crawl-DB row ----------------------------------------
def with_followed(con, fetch_list: Rel, pages: Rel) -> Rel:
    """As ``update_transforms.with_followed``: ``url_fp``, ``depth``, ``score``, ``redirect_hops``."""
    types = dict(zip(fetch_list.columns, fetch_list.types))
    cols = ("url_fp", "depth", "score", "redirect_hops")
    followed = {"url_fp": "url_fp", "depth": "depth", "score": "score", "redirect_hops": "0"}
    return query(con, f"""
    SELECT {', '.join(cols)} FROM $fetch_list
    UNION ALL
    SELECT {', '.join(f'CAST({followed[c]} AS {types[c]}) AS {c}' for c in cols)}
    FROM $pages WHERE kind = 'page' AND coalesce(in_round, FALSE)""", fetch_list=fetch_list, pages=pages)


def prepare(con, pages: Rel, fetch_list: Rel, crawldb: Rel | None) -> Rel:
    """As ``update_transforms.prepare``: page rows (one per url_fp) + ``_list_*`` + ``o_<column>`` + ``_cat``."""
    others = ", ".join(f"p.{col(c)}" for c in pages.columns if c != "url_fp")
    old = ", ".join(f"c.{col(f.name)} AS {col('o_' + f.name)}" for f in CRAWLDB.fields)
    rels = {"pages": pages, "fl": fetch_list}
    if crawldb is None:
        old = ", ".join(f"CAST(NULL AS {sql_type(f.dataType)}) AS {col('o_' + f.name)}" for f in CRAWLDB.fields)
        joined = ""
    else:
        joined, rels["crawldb"] = "LEFT JOIN $crawldb c ON p.url_fp = c.url_fp", crawldb
    return query(con, f"""
    WITH p AS (SELECT * FROM $pages WHERE kind = 'page' QUALIFY row_number() OVER (PARTITION BY url_fp) = 1),
    fl AS (SELECT url_fp, depth AS _list_depth, score AS _list_score, redirect_hops AS _list_hops FROM $fl)
    SELECT p.url_fp, {others}, fl._list_depth, fl._list_score, fl._list_hops, {old},
           {category('p.outcome', 'p.status_code')} AS {CAT}
    FROM p LEFT JOIN fl ON p.url_fp = fl.url_fp {joined}""", **rels)


def category(outcome: str, code: str) -> str:
    """As ``update_transforms.category`` (SQL text)."""
    return f"""(CASE WHEN {outcome} = 'ok' THEN 'ok'
            WHEN {outcome} = 'not_modified' THEN 'not_modified'
            WHEN {outcome} = {literal(Outcome.BAD_REDIRECT.value)} THEN 'bad_redirect'
            WHEN {outcome} = 'redirect' AND {code} IN (301, 308) THEN 'redirect_perm'
            WHEN {outcome} = 'redirect' THEN 'redirect_temp'
            WHEN {outcome} = 'http_error' AND {code} IN (404, 410) THEN 'gone'
            WHEN {outcome} = 'http_error' AND ({code} IN (408, 429) OR {code} >= 500) THEN 'retry'
            WHEN {outcome} = 'http_error' THEN 'final'
            WHEN {outcome} = 'robots_denied' THEN 'robots_denied'
            WHEN {outcome} IN ('deferred', 'not_attempted') THEN {literal(KEEP)}
            ELSE 'retry' END)"""


# -- 2. the transition ---------------------------------------------------------------------
def same_main_text(simhash: str, stored: str, bits: int) -> str:
    """As ``update_transforms.same_main_text`` (SQL text, never NULL)."""
    def usable(c: str) -> str:
        return f"({c} IS NOT NULL AND {c} <> {int(EMPTY_SIMHASH)})"
    return f"({usable(simhash)} AND {usable(stored)} AND bit_count(xor({simhash}, {stored})) <= {int(bits)})"


def changed_column(schedule) -> str:
    """As ``update_transforms.changed_column`` (SQL text; NULL when there is no previous copy)."""
    same = same_main_text("simhash", "o_simhash", int(schedule.unchanged_simhash_bits))
    return f"""(CASE WHEN {CAT} = 'not_modified' THEN FALSE
            WHEN {CAT} = 'ok' AND o_digest IS NOT NULL AND digest IS NOT NULL
              THEN digest <> o_digest AND NOT {same} END)"""


def with_rates(con, prepared: Rel, schedule, priors: Rel | None) -> Rel:
    """As ``update_transforms.with_rates`` (under adaptive the host prior is joined: ``host`` comes first, as
    Spark's join on ``host`` puts it)."""
    if priors is None or schedule.policy != "adaptive":
        own = ", ".join(col(c) for c in prepared.columns if c != PRIOR)
        df = query(con, f"SELECT {own}, CAST(NULL AS DOUBLE) AS {PRIOR} FROM $p", p=prepared)
    else:
        df = query(con, f"""SELECT p.host, p.* EXCLUDE (host), pr.* EXCLUDE (host)
                            FROM $p p LEFT JOIN $priors pr ON p.host = pr.host""", p=prepared, priors=priors)
    return S.with_history(con, df, schedule, cat=CAT, changed=changed_column(schedule))


def transition(con, prepared: Rel, host_next: Rel, schedule, *, round_no: int, now: dt.datetime,
               priors: Rel | None = None, multiplier: float | None = None) -> Rel:
    """As ``update_transforms.transition``: one updated crawl-DB row per page row (CRAWLDB columns but
    ``importance``, then ``_gap``, ``_cat``, ``_base``, ``_changed``, ``_wire``, ``_stored``, ``_was``, ``_first``)."""
    sc = schedule
    now_ts = literal(now)
    joined = query(con, """SELECT p.host, p.* EXCLUDE (host), h.next_allowed_at AS _h_next, h.parked_until AS _h_parked
                           FROM $p p LEFT JOIN $h h ON p.host = h.host""", p=prepared, h=host_next)
    rates = with_rates(con, joined, schedule, priors)
    default_iv = literal(float(sc.default_interval_s))
    policy = S.policy_interval(sc, changed=CHANGED, multiplier=multiplier)
    interval = f"""CASE WHEN {_in(CAT, STORED_CATS)} THEN {policy}
              WHEN {CAT} = 'redirect_temp' THEN {default_iv}
              WHEN {CAT} = 'redirect_perm' THEN {literal(float(sc.redirect_perm_interval_s))}
              WHEN {CAT} = 'gone' THEN {S.gone_interval('__gone_checks', sc)}
              WHEN {CAT} IN ('final', 'bad_redirect') OR __exhausted THEN {literal(float(sc.gone_interval_s))}
              WHEN {CAT} = 'robots_denied' THEN {literal(float(sc.robots_denied_interval_s))}
              ELSE coalesce(o_fetch_interval_s, {default_iv}) END"""
    backoff = (f"greatest(least({literal(float(sc.retry_base_s))} * pow(2.0::DOUBLE, CAST(__old_retries AS DOUBLE)), "
               f"{literal(float(sc.retry_max_s))}), coalesce(retry_after_s, 0.0::DOUBLE))")
    wait = f"CASE WHEN {CAT} = 'retry' AND NOT __exhausted THEN {backoff} ELSE __interval END"
    sql = f"""
    WITH r AS (
      SELECT *, {changed_column(sc)} AS {CHANGED} FROM $rates),
    a AS (
      SELECT *, {CAT} = {literal(KEEP)} AS __keep, {CAT} <> {literal(KEEP)} AS __attempted,
             status_code IS NOT NULL AND {CAT} <> {literal(KEEP)} AS __has_response,
             {_in(CAT, ('ok', 'not_modified'))} AS __stored, coalesce(fetch_time, {now_ts}) AS __base,
             coalesce(o_retries, 0) AS __old_retries, {CAT} = 'ok' AS __ok
      FROM r),
    b AS (
      SELECT *,
             CASE WHEN {_in(CAT, ('retry', 'final', 'bad_redirect'))} THEN __old_retries + 1
                  WHEN __keep THEN __old_retries ELSE 0 END AS __retries,
             CASE WHEN {CAT} = 'gone' THEN coalesce(o_gone_checks, 0) + 1 WHEN __keep THEN o_gone_checks END
               AS __gone_checks
      FROM a),
    c AS (
      SELECT *, {CAT} = 'retry' AND __retries >= {int(sc.max_retries)} AS __exhausted,
             {CAT} = 'gone' AND __gone_checks >= {int(sc.gone_checks)} AS __retired
      FROM b),
    d AS (
      SELECT *, {interval} AS __interval FROM c)
    SELECT
      url_fp, host,
      CASE WHEN {CAT} = 'ok' THEN {literal(Status.FETCHED.value)}
           WHEN {CAT} = 'not_modified' THEN {literal(Status.NOT_MODIFIED.value)}
           WHEN {CAT} = 'redirect_perm' THEN {literal(Status.REDIRECT_PERM.value)}
           WHEN {CAT} = 'redirect_temp' THEN {literal(Status.REDIRECT_TEMP.value)}
           WHEN __retired THEN {literal(Status.RETIRED.value)}
           WHEN {CAT} = 'gone' THEN {literal(Status.GONE.value)}
           WHEN {CAT} = 'robots_denied' THEN {literal(Status.ROBOTS_DENIED.value)}
           WHEN {CAT} IN ('final', 'bad_redirect') OR __exhausted THEN {literal(Status.ERROR_FINAL.value)}
           WHEN {CAT} = 'retry' THEN {literal(Status.ERROR_RETRY.value)}
           ELSE coalesce(o_status, {literal(Status.UNFETCHED.value)}) END AS status,
      CASE WHEN __keep THEN greatest(coalesce(o_next_fetch_time, {now_ts}), _h_next, _h_parked)
           ELSE {plus_seconds('__base', wait)}
      END AS next_fetch_time,
      coalesce(o_score, _list_score, 0.0::DOUBLE) AS score,
      coalesce(o_depth, _list_depth, 0) AS depth,
      coalesce(o_redirect_hops, _list_hops, redirect_hops, 0) AS redirect_hops,
      __retries AS retries,
      coalesce(o_fetch_count, 0) + CASE WHEN __has_response THEN 1 ELSE 0 END AS fetch_count,
      coalesce(o_change_count, 0) + CASE WHEN {CHANGED} THEN 1 ELSE 0 END AS change_count,
      coalesce(o_unchanged_count, 0) + CASE WHEN NOT {CHANGED} THEN 1 ELSE 0 END AS unchanged_count,
      __interval AS fetch_interval_s,
      coalesce(o_first_seen, {now_ts}) AS first_seen,
      coalesce(CASE WHEN __attempted THEN fetch_time END, o_last_fetch_time) AS last_fetch_time,
      CASE WHEN {CHANGED} THEN fetch_time ELSE o_last_change_time END AS last_change_time,
      CASE WHEN __attempted THEN status_code ELSE o_http_status END AS http_status,
      error_class,
      CASE WHEN __ok THEN simhash ELSE o_simhash END AS simhash,
      CASE WHEN __keep THEN o_dup_of END AS dup_of,
      CAST(coalesce(o_discovered_round, {int(round_no)}) AS BIGINT) AS discovered_round,
      CAST({int(round_no)} AS INTEGER) AS updated_round,
      coalesce(o_source_fp, source_fp) AS source_fp,
      CASE WHEN __ok THEN digest ELSE o_digest END AS digest,
      CASE WHEN __ok THEN content_type ELSE o_content_type END AS content_type,
      CASE WHEN __ok THEN etag WHEN {CAT} = 'not_modified' THEN coalesce(etag, o_etag) ELSE o_etag END AS etag,
      CASE WHEN __ok THEN last_modified WHEN {CAT} = 'not_modified' THEN coalesce(last_modified, o_last_modified)
           ELSE o_last_modified END AS last_modified,
      CASE WHEN __ok AND warc_refers_to IS NULL THEN warc_record_id ELSE o_warc_record_id END AS warc_record_id,
      CASE WHEN __ok AND warc_refers_to IS NULL THEN fetch_time ELSE o_warc_fetch_time END AS warc_fetch_time,
      CASE WHEN {_in(CAT, ('redirect_perm', 'redirect_temp', 'bad_redirect'))} THEN redirect_to
           WHEN __keep OR NOT __has_response THEN o_redirect_to END AS redirect_to,
      url,
      coalesce(o_first_fetched, o_warc_fetch_time, CASE WHEN __stored THEN fetch_time END) AS first_fetched,
      CASE WHEN __ok THEN (CASE WHEN canonical IS NOT NULL THEN {XXHASH64}(canonical) END)
           ELSE o_canonical_fp END AS canonical_fp,
      CASE WHEN __stored THEN fetch_time ELSE o_last_visit_time END AS last_visit_time,
      {HIST} AS change_intervals_s,
      {SPAN} AS unchanged_span_s,
      {RATE} AS change_rate,
      __gone_checks AS gone_checks,
      o_fetch_kind AS fetch_kind,
      {GAP},
      {MASS},
      {CAT},
      __base AS {BASE},
      {CHANGED},
      CAST(CASE WHEN __has_response THEN coalesce(wire_bytes, 0) ELSE 0 END AS BIGINT) AS {WIRE},
      __stored AS _stored,
      o_status AS {WAS},
      __ok AND digest IS NOT NULL AND o_digest IS NULL AS {FIRST}
    FROM d"""
    return query(con, sql, rates=rates)


# -- hosts: where deferred URLs go -----------------------------------------------------------
def host_next(con, hosts: Rel, host_rows: Rel, *, park_duration_s: float, now: dt.datetime) -> Rel:
    """As ``hosts_transforms.host_next``: ``host``, ``next_allowed_at``, ``parked_until`` after this round."""
    return query(con, f"""
    WITH h AS ({_host_rows_sql('$rows')}),
    old AS (SELECT host, next_allowed_at AS o_next, parked_until AS o_parked FROM $hosts
            WHERE host IN (SELECT host FROM $rows))
    SELECT coalesce(h.host, old.host) AS host, coalesce(h.next_allowed_at, old.o_next) AS next_allowed_at,
           {_parked_until(park_duration_s, now)} AS parked_until
    FROM h FULL OUTER JOIN old ON h.host = old.host""", hosts=hosts, rows=host_rows)


def _parked_until(park_duration_s: float, now: dt.datetime) -> str:
    until = plus_seconds(literal(now), literal(float(park_duration_s)))
    return f"(CASE WHEN coalesce(parked, FALSE) THEN {until} ELSE o_parked END)"


def _host_rows_sql(rows: str) -> str:
    """``hosts_transforms._host_rows`` over relation ``rows``: one ``host`` row per host, requests summed."""
    requests = "CAST(sum(coalesce(requests, 0)) OVER (PARTITION BY host) AS BIGINT)"  # Spark's sum of longs
    return f"""SELECT * REPLACE ({requests} AS requests) FROM {rows}
               WHERE kind = 'host'
               QUALIFY row_number() OVER (PARTITION BY host ORDER BY "partition" ASC NULLS FIRST,
                                                               robots_fetched_at DESC NULLS LAST) = 1"""


def _host_rows(con, host_rows: Rel) -> Rel:
    """As ``hosts_transforms._host_rows``."""
    return query(con, _host_rows_sql("$rows"), rows=host_rows)
