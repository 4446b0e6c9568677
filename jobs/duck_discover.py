"""Update's discovery on the driver (DuckDB): the round's keys, edges, new URLs, moves to known URLs.

The DuckDB twins (``jobs/duck_engine.py``) of ``jobs.crawldb_slice.round_keys``/``round_slice``,
``jobs.update_transforms.edges``/``moved_to_known`` and ``jobs.discover_transforms.followed``/
``_shares_score``/``discover``: same names, a connection ``con`` first, relations in the place of
DataFrames, the Spark twin's output columns, order and types (``tests/test_duck_discover.py``).
The depth and score rules stay ``crawl_udfs.admission``'s, built as SQL text by :data:`SQL_OPS`.

Crawl-DB rows each function reads (``crawldb``/``known``: what the engine's gather must fetch):

- :func:`discover`: ``url_fp`` of the rows whose ``url_fp`` is an outlink target of a round page
  (``l.url_fp`` of the page rows' ``outlinks``).
- :func:`moved_to_known`: the rows whose ``url_fp`` is a redirect outlink target of a round page:
  ``url_fp``, ``host``, ``url``, ``status``, ``score``, ``fetch_count`` and the
  ``update_transforms.MOVED`` columns. A row with ``fetch_count`` null counts as absent (the slice's
  host-only rows: ``fetch_count`` is NOT NULL in the table).
- :func:`round_slice`: the model of the gather. Keys: :func:`round_keys` (``url_fp`` of the round's
  page rows and of every outlink target of them: every column) and :func:`round_hosts` (``host`` of
  every ``fetch_output`` row: ``crawldb_slice.HOST_COLUMNS`` only). Both key sets are computed here
  from ``fetch_output`` alone, so the gather can broadcast them from the driver.

So for this group the gather is today's slice: by URL (:func:`round_keys`) ``url_fp``, ``host``, ``url``,
``status``, ``score``, ``fetch_count``, ``last_fetch_time``, ``next_fetch_time`` and ``MOVED``
(``duck_outputs.lastmod_due`` too); by host (:func:`round_hosts`) ``url_fp``, ``status``
(``duck_outputs.robots_refresh``: a sitemap URL is on the host whose robots.txt names it; the
driver engine's gather keys those by URL instead, ``jobs/update_gather.py``).
SQL is composed by :func:`query` (views of fresh names, never reused).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb

from crawl_udfs.admission import SAME_DOC_KINDS, link_depth, link_score
from crawl_udfs.sitemaps import CHILD_KIND, SITEMAP
from jobs.crawldb_slice import HOST_COLUMNS
from jobs.duck_engine import Sql, literal, query, ts
from jobs.update_transforms import CAT, KEEP, MOVED
from schemas.status import Status

Rel = duckdb.DuckDBPyRelation


def sql_list(values) -> str:
    """``(v1, v2, ...)``: SQL literals of plain values, for ``IN``."""
    return "(" + ", ".join(literal(v) for v in values) + ")"


# -- the ops object of crawl_udfs.admission's rules, on SQL text ------------------------------------
def _sql(v: Any) -> Sql:
    """An operand of the admission rules as SQL: an int is INTEGER (Spark's ``lit`` of a Python int)."""
    return Sql(v, ints="INTEGER")


class SqlOps:
    """``crawl_udfs.admission.PlainOps`` on SQL text (``discover_transforms.ColumnOps``' twin)."""

    @staticmethod
    def when(cond: Sql, then: Sql, otherwise: Sql) -> Sql:
        return _sql(f"CASE WHEN {_sql(cond)} THEN {_sql(then)} ELSE {_sql(otherwise)} END")

    @staticmethod
    def greatest(value: Sql, floor: int) -> Sql:
        return _sql(f"greatest({_sql(value)}, {_sql(floor)})")


SQL_OPS = SqlOps()


# -- the round's keys (jobs/crawldb_slice.py) --------------------------------------------------------
def round_keys(con, fetch_output: Rel) -> Rel:
    """As ``jobs.crawldb_slice.round_keys``: ``url_fp`` of the round's page rows and their outlink targets."""
    return query(con, """
        WITH pages AS (SELECT url_fp, outlinks FROM {fo} WHERE kind = 'page'),
             links AS (SELECT unnest(outlinks).url_fp AS url_fp FROM pages)
        SELECT DISTINCT url_fp FROM (SELECT url_fp FROM pages UNION ALL SELECT url_fp FROM links)
        WHERE url_fp IS NOT NULL""", fo=fetch_output)


def round_hosts(con, fetch_output: Rel) -> Rel:
    """``host`` of the round's rows (page and host rows), distinct: the slice's by-host key."""
    return query(con, "SELECT DISTINCT host FROM {fo} WHERE host IS NOT NULL", fo=fetch_output)


def round_slice(con, crawldb: Rel, fetch_output: Rel) -> Rel:
    """As ``jobs.crawldb_slice.round_slice``: by-URL rows whole, by-host rows in ``HOST_COLUMNS``."""
    cols = ", ".join(f'c."{c}"' if c in HOST_COLUMNS else f'CASE WHEN k._by_url THEN c."{c}" END AS "{c}"'
                     for c in crawldb.columns)
    return query(con, f"""
        SELECT {cols}
        FROM {{db}} c
        LEFT JOIN (SELECT url_fp, TRUE AS _by_url FROM {{keys}}) k ON c.url_fp = k.url_fp
        LEFT JOIN (SELECT host, TRUE AS _by_host FROM {{hosts}}) h ON c.host = h.host
        WHERE k._by_url IS NOT NULL OR h._by_host IS NOT NULL""",
                 db=crawldb, keys=round_keys(con, fetch_output), hosts=round_hosts(con, fetch_output))


# -- edges (jobs/update_transforms.py) ------------------------------------------------------------------
def edges(con, prepared: Rel) -> Rel:
    """As ``jobs.update_transforms.edges``: one row per outlink of a page row with outlinks, not kept."""
    moved = ", ".join(f'"{c}" := "o_{c}"' for c in MOVED)
    return query(con, f"""
        SELECT url_fp AS src_fp,
               CASE WHEN "{CAT}" = 'redirect_perm' THEN struct_pack({moved}) END AS _moved,
               coalesce(_list_depth, o_depth, CAST(0 AS INTEGER)) AS src_depth,
               coalesce(_list_score, o_score, CAST(0.0 AS DOUBLE)) AS src_score,
               coalesce(_list_hops, redirect_hops, CAST(0 AS INTEGER)) AS src_hops,
               outlinks,
               unnest(outlinks) AS l
        FROM {{prepared}}
        WHERE outlinks IS NOT NULL AND "{CAT}" <> {literal(KEEP)}""", prepared=prepared)


# -- discovery (jobs/discover_transforms.py) --------------------------------------------------------------
def followed(link: str, follow_nofollow: bool) -> str:
    """As ``discover_transforms.followed`` (``crawl_udfs.admission.followed``), SQL over an outlink struct."""
    if follow_nofollow:
        return f"(TRUE AND {link} IS NOT NULL)"
    return f"({link}.kind IN {sql_list(SAME_DOC_KINDS)} OR NOT coalesce({link}.nofollow, FALSE))"


def _shares_score(link: str, follow_nofollow: bool) -> str:
    """As ``discover_transforms._shares_score``: followed, and not a redirect or canonical target."""
    return f"({followed(link, follow_nofollow)} AND NOT ({link}.kind IN {sql_list(SAME_DOC_KINDS)}))"


def discover(con, prepared: Rel, crawldb: Rel, scope, *, duplicates: Rel | None, follow_nofollow: bool,
             default_interval_s: float, round_no: int, now: dt.datetime) -> Rel:
    """As ``jobs.discover_transforms.discover``: rows of URLs first found this round, one per url_fp.

    ``crawldb``: rows whose ``url_fp`` is an outlink target of the round (``url_fp`` read)."""
    same_doc = f"l.kind IN {sql_list(SAME_DOC_KINDS)}"
    rels = dict(e=edges(con, prepared), db=crawldb)
    if duplicates is None:
        src_score = "src_score"
        dup_join = ""
    else:  # a kept row (deferred) has no edges: its old status is no decision of this round
        rels["duplicates"] = duplicates
        src_score = (f"CASE WHEN dup._src_dup IS NOT NULL AND NOT ({same_doc}) "
                     f"THEN src_score * {literal(float(scope.duplicate_score_factor))} ELSE src_score END")
        dup_join = f"""LEFT JOIN (SELECT url_fp AS src_fp, TRUE AS _src_dup FROM {{duplicates}}
                                  WHERE status = {literal(Status.DUPLICATE.value)} AND "{CAT}" <> {literal(KEEP)}) dup
                       USING (src_fp)"""
    n_sharing = _sql(f"len(list_filter(outlinks, lambda x: {_shares_score('x', follow_nofollow)}))")
    depth = link_depth(_sql("src_depth"), _sql(same_doc), SQL_OPS)
    score = link_score(_sql("_src_score"), _sql(same_doc), n_sharing, float(scope.score_decay), SQL_OPS)
    now_ts, zero, rnd = ts(now), "CAST(0 AS INTEGER)", f"CAST({int(round_no)} AS BIGINT)"
    moved = ",\n               ".join(f'_moved."{c}" AS "{c}"' for c in MOVED[2:])
    return query(con, f"""
        WITH e AS (
            SELECT e.*, {src_score} AS _src_score FROM {{e}} e {dup_join}
            WHERE {followed('l', follow_nofollow)} AND l.url_fp IS NOT NULL),
        links AS (
            SELECT l.url_fp AS url_fp, l.url AS url, l.host AS host, src_fp,
                   CASE WHEN l.kind = 'redirect' THEN _moved END AS _moved,
                   {depth} AS depth,
                   CASE WHEN l.kind = 'redirect' THEN src_hops + 1 ELSE {zero} END AS redirect_hops,
                   {score} AS score,
                   CASE WHEN l.kind = {literal(CHILD_KIND)} THEN {literal(SITEMAP)} END AS fetch_kind
            FROM e),
        d AS (
            SELECT url_fp,
                   first(struct_pack(depth, redirect_hops, src_fp, url, host)
                         ORDER BY depth, redirect_hops, src_fp, url NULLS FIRST, host NULLS FIRST) AS b,
                   max(score) AS score,
                   arg_min(_moved, CASE WHEN _moved IS NOT NULL THEN src_fp END) AS _moved,
                   max(fetch_kind) AS fetch_kind
            FROM links GROUP BY url_fp),
        new AS (SELECT * FROM d WHERE NOT EXISTS (SELECT 1 FROM {{db}} k WHERE k.url_fp = d.url_fp))
        SELECT url_fp, b.host AS host, {literal(Status.UNFETCHED.value)} AS status, {now_ts} AS next_fetch_time,
               score, b.depth AS depth, b.redirect_hops AS redirect_hops, {zero} AS retries, {zero} AS fetch_count,
               coalesce(_moved.change_count, {zero}) AS change_count,
               coalesce(_moved.unchanged_count, {zero}) AS unchanged_count,
               {literal(float(default_interval_s))} AS fetch_interval_s, {now_ts} AS first_seen,
               {rnd} AS discovered_round, {rnd} AS updated_round,
               b.src_fp AS source_fp, b.url AS url,
               {moved},
               fetch_kind
        FROM new""", **rels)


# -- a permanent redirect to a known URL (jobs/update_transforms.py) ---------------------------------------
def moved_to_known(con, prepared: Rel, known: Rel, *, round_no: int) -> Rel:
    """As ``jobs.update_transforms.moved_to_known``: ``moved`` rows for the known targets of 301/308s.

    ``known``: rows whose ``url_fp`` is a redirect target of the round (module docstring: columns)."""
    hist = ",\n               ".join(f'CASE WHEN t.fetch_count = 0 THEN b.src_hist."{c}" ELSE t."{c}" END AS "{c}"'
                                     for c in MOVED)
    return query(con, f"""
        WITH src AS (
            SELECT l.url_fp AS url_fp, src_fp, src_score, _moved AS src_hist FROM {{e}}
            WHERE _moved IS NOT NULL AND l.kind = 'redirect' AND l.url_fp IS NOT NULL),
        by_target AS (  -- the highest score's, then the smallest url_fp's
            SELECT url_fp, src_score, src_hist FROM src
            QUALIFY row_number() OVER (PARTITION BY url_fp ORDER BY src_score DESC, src_fp) = 1)
        SELECT t.url_fp AS url_fp, t.host AS host, t.url AS url, t.status AS status,
               greatest(t.score, b.src_score) AS score,
               {hist},
               CAST({int(round_no)} AS BIGINT) AS updated_round
        FROM {{known}} t JOIN by_target b ON t.url_fp = b.url_fp
        WHERE t.fetch_count IS NOT NULL""", e=edges(con, prepared), known=known)
