"""Which copy is the original, on the driver: the DuckDB twin of ``jobs/originals.py`` (``jobs/duck_engine.py``).

Each function is its Spark twin's (same name, same parameters, a ``duckdb`` relation in the place of each
DataFrame, the connection ``con`` first), with exactly its output columns, order and types; the rule is
the twin's docstring's. SQL-text helpers (:func:`first_copy_time`, :func:`order`, :func:`restored_status`)
return SQL instead of a Column. The same-site test of rule 1 is the twin's own UDF function
(``jobs.originals._names_on_site``, over :func:`crawl_udfs.sites.same_site`), registered as a DuckDB
Python function.

What the crawl DB (``crawldb``: in the engine, the rows the round keys) must hold for these functions
(every column of a row read, or at least those named):

- :func:`left_pages`: the rows whose ``url_fp`` is one of the ``near_dup_index`` rows the lookup reads (those
  of the round's candidates' block keys); ``url_fp``, ``status``.
- :func:`repoint`: the rows whose ``url_fp`` or ``dup_of`` is one of ``gone``'s url_fps;
  :data:`jobs.originals.REPOINT_COLUMNS`. ``gone`` (:func:`leaving`) is known only in the plan, but it is
  within three sets known before it: the round's url_fps, the crawl-DB originals sharing a digest with the
  round's stored pages (``exact_members``' crawl-DB rows: their ``exact_demotions``) and the index pages the
  lookup reads (``demotions``). So the gather needs the rows of the second and third sets (the round's own
  rows come from ``updated``) and the rows whose ``dup_of`` is in any of the three: for the second set a
  second hop after the look-up by digest (a near copy of such an original does not share its digest). A
  row missing here is a copy left pointing at a page that went.
"""

from __future__ import annotations

import weakref

import duckdb
import pyarrow as pa

from jobs.duck_engine import literal, query
from jobs.originals import (BY_CANONICAL, LEAVING_STATUSES, MEMBER_COLUMNS, ORIG, ORIGINAL_STATUSES,
                            REPOINT_COLUMNS, _names_on_site)
from schemas.status import Status

Rel = duckdb.DuckDBPyRelation
#: DuckDB's name for the twin's same-site UDF (registered by :func:`functions`).
NAMES_ON_SITE = "names_on_site"
_registered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> names of its functions


def functions(con: duckdb.DuckDBPyConnection) -> None:
    """The Python functions of this module's SQL, registered in ``con`` once."""
    if _first_use(con, NAMES_ON_SITE):
        on_site = _names_on_site.func

        def names_on_site(hosts: pa.Array, named_by: pa.Array) -> pa.Array:
            return pa.array([on_site(h, n) for h, n in zip(hosts.to_pylist(), named_by.to_pylist())], pa.bool_())
        con.create_function(NAMES_ON_SITE, names_on_site, [duckdb.sqltype("VARCHAR"), duckdb.sqltype("VARCHAR[]")],
                            duckdb.sqltype("BOOLEAN"), type="arrow", null_handling="special")


def _first_use(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """True the first time function ``name`` is asked for in ``con`` (the caller registers it then): a
    look-up in ``duckdb_functions()`` costs ~50 ms."""
    names = _registered.setdefault(con, set())
    first = name not in names
    names.add(name)
    return first


def statuses(values) -> str:
    """A SQL ``IN`` list of status values."""
    return "(" + ", ".join(literal(v) for v in values) + ")"


def left_pages(con: duckdb.DuckDBPyConnection, crawldb: Rel) -> Rel:
    """As ``jobs.originals.left_pages``: ``url_fp`` of the rows of :data:`LEAVING_STATUSES`."""
    return query(con, f"SELECT url_fp FROM {{crawldb}} WHERE status IN {statuses(LEAVING_STATUSES)}", crawldb=crawldb)


def first_copy_time(prefix: str = "") -> str:
    """As ``jobs.originals.first_copy_time``, SQL text."""
    return f"coalesce({prefix}first_fetched, {prefix}warc_fetch_time, {prefix}first_seen)"


def order(by_canonical: str, fetched: str, url_fp: str) -> str:
    """As ``jobs.originals.order``, as SQL sort keys: the first row in this order is the original (Spark's
    ``min`` of a struct puts a NULL field first)."""
    return f"NOT coalesce({by_canonical}, false), {fetched} NULLS FIRST, {url_fp} NULLS FIRST"


def with_original(con: duckdb.DuckDBPyConnection, members: Rel, cluster: str) -> Rel:
    """As ``jobs.originals.with_original``: ``members`` with ``_orig`` and ``_orig_by_canonical``. Who names
    whom is an aggregate joined back (one row per cluster and named page), not a list per member."""
    functions(con)
    url_fp, host, canonical_fp, first_fetched = MEMBER_COLUMNS
    return query(con, f"""
        WITH namers AS (  -- per cluster and named page: the hosts of the members naming it as their canonical
            SELECT {cluster} AS _cluster, {canonical_fp} AS _named, list({host}) AS _named_by
            FROM {{members}}
            WHERE {canonical_fp} IS NOT NULL AND {canonical_fp} <> {url_fp}
            GROUP BY ALL),
        local AS (
            SELECT m.*, CASE WHEN m.{canonical_fp} = m.{url_fp} AND len(n._named_by) > 0
                             THEN {NAMES_ON_SITE}(m.{host}, n._named_by) ELSE false END AS _local
            FROM {{members}} m
            LEFT JOIN namers n ON n._cluster IS NOT DISTINCT FROM m.{cluster} AND n._named = m.{url_fp}),
        canonical AS (
            SELECT * EXCLUDE (_local), bool_or(_local) OVER (PARTITION BY {url_fp}) AS _canonical FROM local),
        best AS (
            SELECT *, first_value(struct_pack(fp := {url_fp}, by_canonical := coalesce(_canonical, false)))
                      OVER (PARTITION BY {cluster} ORDER BY {order("_canonical", first_fetched, url_fp)}) AS _best
            FROM canonical)
        SELECT * EXCLUDE (_canonical, _best), _best.fp AS {ORIG}, _best.by_canonical AS {BY_CANONICAL}
        FROM best""", members=members)


# -- when an original goes -------------------------------------------------------------------------
def leaving(con: duckdb.DuckDBPyConnection, updated: Rel, demoted: Rel, *, was: str = "_was",
            changed: str = "_changed") -> Rel:
    """As ``jobs.originals.leaving``: ``url_fp``, ``_to`` of the originals that go this round."""
    return query(con, f"""
        WITH up AS (
            SELECT * FROM {{updated}}
            WHERE {was} IN {statuses(ORIGINAL_STATUSES)} AND status IN {statuses(LEAVING_STATUSES)}),
        up_and_demoted AS (  -- the twin's `both`
            SELECT url_fp, CASE WHEN status = {literal(Status.DUPLICATE.value)} AND NOT coalesce({changed}, false)
                                THEN dup_of END AS _to
            FROM up
            UNION ALL
            SELECT url_fp, _to FROM {{demoted}})
        SELECT url_fp, min(_to) AS _to FROM up_and_demoted GROUP BY url_fp""", updated=updated, demoted=demoted)


def restored_status(http_status: str) -> str:
    """As ``jobs.originals.restored_status``, SQL text."""
    return (f"CASE WHEN {http_status} = 304 THEN {literal(Status.NOT_MODIFIED.value)} "
            f"ELSE {literal(Status.FETCHED.value)} END")


def repoint(con: duckdb.DuckDBPyConnection, updated: Rel, crawldb: Rel, gone: Rel) -> Rel:
    """As ``jobs.originals.repoint``: one decision per URL whose status or ``dup_of`` may change, ``url_fp``,
    ``_status``, ``_dup_of``, ``_db``, ``host``, ``_was``, ``_was_dup_of``."""
    cols = ", ".join(REPOINT_COLUMNS)
    dup = literal(Status.DUPLICATE.value)
    rows = query(con, f"""
        WITH keys AS (SELECT DISTINCT url_fp AS _k FROM {{gone}}),
        stored AS (  -- the crawl DB's originals that go and their copies, not of the round
            SELECT DISTINCT ON (url_fp) {cols}, true AS _db
            FROM {{crawldb}} c
            WHERE (c.url_fp IN (SELECT _k FROM keys) OR c.dup_of IN (SELECT _k FROM keys))
              AND NOT EXISTS (SELECT 1 FROM {{updated}} u WHERE u.url_fp = c.url_fp)),
        rows AS (
            SELECT * FROM stored
            UNION ALL
            SELECT {cols}, false AS _db FROM {{updated}})
        SELECT r.*, g.url_fp AS _gone, g._to
        FROM rows r JOIN {{gone}} g ON r.url_fp = g.url_fp OR r.dup_of = g.url_fp""",
                 gone=gone, crawldb=crawldb, updated=updated)
    copies = query(con, f"SELECT * FROM {{rows}} WHERE status = {dup} AND dup_of = _gone", rows=rows)
    ranked = with_original(con, query(con, f"SELECT * REPLACE ({first_copy_time()} AS first_fetched) "
                                           "FROM {copies} WHERE _to IS NULL", copies=copies), "_gone")
    decision = "url_fp, _status, _dup_of, _db, host, status AS _was, dup_of AS _was_dup_of"
    return query(con, f"""
        WITH demoted AS (
            SELECT *, {dup} AS _status, _to AS _dup_of FROM {{rows}}
            WHERE _db AND url_fp = _gone AND status IN {statuses(ORIGINAL_STATUSES)}),
        follow AS (
            SELECT *, {dup} AS _status, _to AS _dup_of FROM {{copies}} WHERE _to IS NOT NULL),
        promoted AS (
            SELECT *, CASE WHEN url_fp = {ORIG} THEN {restored_status("http_status")} ELSE {dup} END AS _status,
                      CASE WHEN url_fp <> {ORIG} THEN {ORIG} END AS _dup_of
            FROM {{ranked}}),
        decisions AS (
            SELECT {decision} FROM demoted
            UNION ALL SELECT {decision} FROM follow
            UNION ALL SELECT {decision} FROM promoted)
        SELECT DISTINCT ON (url_fp) *  -- one decision per URL: the smallest, as Spark's min of the struct
        FROM decisions
        ORDER BY url_fp, _status NULLS FIRST, _dup_of NULLS FIRST, _db NULLS FIRST, host NULLS FIRST,
                 _was NULLS FIRST, _was_dup_of NULLS FIRST""", rows=rows, copies=copies, ranked=ranked)


def repointed(con: duckdb.DuckDBPyConnection, updated: Rel, decided: Rel) -> Rel:
    """As ``jobs.originals.repointed``: ``updated`` with the decisions for its own rows applied (``url_fp``
    first, as Spark's join on it puts it)."""
    return query(con, """
        SELECT u.url_fp, u.* EXCLUDE (url_fp) REPLACE (
                   CASE WHEN d._status IS NOT NULL THEN d._status ELSE u.status END AS status,
                   CASE WHEN d._status IS NOT NULL THEN d._dup_of ELSE u.dup_of END AS dup_of)
        FROM {updated} u
        LEFT JOIN (SELECT url_fp, _status, _dup_of FROM {decided} WHERE NOT _db) d ON u.url_fp = d.url_fp""",
                 updated=updated, decided=decided)


def repointed_rows(con: duckdb.DuckDBPyConnection, decided: Rel, *, round_no: int, was: str = "_was") -> Rel:
    """As ``jobs.originals.repointed_rows``: ``url_fp``, ``host``, ``status``, ``dup_of``, ``was``,
    ``updated_round`` of the crawl-DB rows not of the round that :func:`repoint` changes."""
    return query(con, f"""
        SELECT url_fp, host, _status AS status, _dup_of AS dup_of, _was AS {was},
               CAST({int(round_no)} AS BIGINT) AS updated_round
        FROM {{decided}}
        WHERE _db AND (_status IS DISTINCT FROM _was OR _dup_of IS DISTINCT FROM _was_dup_of)""", decided=decided)
