"""Update's outputs on the driver (DuckDB): sitemap due rows, the merge source, the round's appends.

The DuckDB twins (``jobs/duck_engine.py``) of ``jobs.sitemap_transforms.robots_refresh``/``lastmod_due``/
``_due``, ``jobs.update_transforms.merge_source``/``fetch_log_rows``/``link_rows`` and ``jobs.crawldb_rows.whole_rows``: same names, a
connection ``con`` first, relations in the place of DataFrames, the Spark twin's output columns, order
and types (``tests/test_duck_outputs.py``); FETCH_LOG, LINKS and CRAWLDB (+ ``_kind``, ``_was``)
exactly, by :func:`jobs.duck_engine.sql_type` of ``schemas/tables.py``.

Crawl-DB rows each function reads (``known``: what the engine's gather must fetch):

- :func:`robots_refresh`: the rows whose ``url_fp`` is ``xxhash64`` of a ``sitemap_urls`` entry of a
  host row of the round: ``url_fp``, ``status``. The driver engine's gather keys them by that
  ``url_fp`` (``jobs/update_gather.py``, key 1); the Spark plan's slice holds them among its by-host
  rows (a sitemap URL is on its host, ``robots_sitemaps``).
- :func:`lastmod_due`: the rows whose ``url_fp`` is an outlink target of a round page (by URL):
  ``url_fp``, ``host``, ``status``, ``last_fetch_time``, ``next_fetch_time``.
- :func:`whole_rows`: the rows of the merge source's known URLs, every column (the gather's key 1 holds
  those of the round's URLs, outlink targets and sitemaps; ``more("repoint")`` those of re-pointed copies).
- :func:`merge_source`, :func:`fetch_log_rows`, :func:`link_rows`: none (the round's rows only).
"""

from __future__ import annotations

import datetime as dt

from crawl_udfs.sitemaps import SITEMAP, URL_KIND
from jobs.duck_discover import Rel, edges, query, sql_list
from jobs.duck_engine import XXHASH64, literal, sql_type, ts
from jobs.sitemap_transforms import REFRESHED
from jobs.crawldb_rows import PARTIAL, whole_kinds
from jobs.update_transforms import BUDGET_ERROR_PREFIX, CAT, CHANGED, KEEP, WAS
from schemas.status import Status
from schemas.tables import CRAWLDB, FETCH_LOG, LINKS


def _cast(expr: str, field) -> str:
    return f'CAST({expr} AS {sql_type(field.dataType)}) AS "{field.name}"'


# -- sitemaps (jobs/sitemap_transforms.py) ------------------------------------------------------------
def _due(con, rel: Rel, now: dt.datetime, round_no: int) -> Rel:
    """As ``sitemap_transforms._due``: ``url_fp``, ``host``, ``next_fetch_time`` = now, ``updated_round``,
    one row per url_fp (the Spark twin's ``dropDuplicates``; its inputs are one row per url_fp already)."""
    return query(con, f"""
        SELECT DISTINCT ON (url_fp) url_fp, host, {ts(now)} AS next_fetch_time,
               CAST({int(round_no)} AS BIGINT) AS updated_round
        FROM {{rel}} ORDER BY url_fp, host NULLS FIRST""", rel=rel)


def robots_refresh(con, fetch_output: Rel, known: Rel, *, now: dt.datetime, round_no: int, score: float,
                   default_interval_s: float) -> tuple[Rel, Rel]:
    """As ``sitemap_transforms.robots_refresh``: (new sitemap rows, due rows) of the hosts whose
    robots.txt the round fetched. ``known``: the rows of the round's hosts (``url_fp``, ``status``)."""
    s = query(con, f"""
        SELECT DISTINCT ON (url_fp) host, url, {XXHASH64}(url) AS url_fp
        FROM (SELECT host, unnest(sitemap_urls) AS url FROM {{fo}}
              WHERE kind = 'host' AND sitemap_urls IS NOT NULL)
        ORDER BY url_fp, host""", fo=fetch_output)
    due = _due(con, query(con, f"""
        SELECT s.* FROM {{s}} s JOIN {{k}} k ON s.url_fp = k.url_fp
        WHERE k.status IN {sql_list(REFRESHED)}""", s=s, k=known), now, round_no)
    now_ts, zero, rnd = ts(now), "CAST(0 AS INTEGER)", f"CAST({int(round_no)} AS BIGINT)"
    new = query(con, f"""
        SELECT url_fp, host, {literal(Status.UNFETCHED.value)} AS status, {now_ts} AS next_fetch_time,
               {literal(float(score))} AS score, {zero} AS depth, {zero} AS redirect_hops, {zero} AS retries,
               {zero} AS fetch_count, {zero} AS change_count, {zero} AS unchanged_count,
               {literal(float(default_interval_s))} AS fetch_interval_s, {now_ts} AS first_seen,
               {rnd} AS discovered_round, {rnd} AS updated_round, url, {literal(SITEMAP)} AS fetch_kind
        FROM {{s}} s WHERE NOT EXISTS (SELECT 1 FROM {{k}} k WHERE k.url_fp = s.url_fp)""", s=s, k=known)
    return new, due


def lastmod_due(con, prepared: Rel, known: Rel, *, now: dt.datetime, round_no: int) -> Rel:
    """As ``sitemap_transforms.lastmod_due``: due rows of the URLs the round's sitemaps list with a
    ``lastmod`` after their last fetch. ``known``: the rows of the outlink targets (module docstring)."""
    hit = query(con, f"""
        WITH e AS (
            SELECT l.url_fp AS url_fp, max(l.lastmod) AS _lastmod
            FROM (SELECT unnest(outlinks) AS l FROM {{prepared}} WHERE outlinks IS NOT NULL)
            WHERE l.kind = {literal(URL_KIND)} AND l.lastmod IS NOT NULL
            GROUP BY l.url_fp)
        SELECT k.url_fp AS url_fp, k.host AS host FROM e JOIN {{k}} k ON e.url_fp = k.url_fp
        WHERE k.status IN {sql_list(REFRESHED)} AND e._lastmod > k.last_fetch_time
          AND k.next_fetch_time > {ts(now)}""", prepared=prepared, k=known)
    return _due(con, hit, now, round_no)


# -- the merge source (jobs/update_transforms.py) -------------------------------------------------------
#: Rank of each kind: the row a url_fp keeps is the smallest's (the Spark twin's order).
RANKS = {"update": 0, "repoint": 1, "new": 2, "budget": 3, "due": 4, "moved": 5}


def merge_source(con, updated: Rel, new: Rel, budget: Rel, exhausted: Rel, repointed: Rel | None = None,
                 due: Rel | None = None, moved: Rel | None = None) -> Rel:
    """As ``jobs.update_transforms.merge_source``: one row per url_fp (update > repoint > new > budget >
    due > moved), CRAWLDB columns + ``_kind`` + ``_was``; unfetched rows of an ``exhausted`` host
    (``host``, ``budget_reason``) become ``budget_exhausted``.

    Two rows of one kind for a url_fp (``new``: a discovered URL that a robots.txt also names as a
    sitemap; ``due``: a sitemap due on its robots.txt and by a lastmod) are an arbitrary pick in the
    Spark twin; here the sitemap row (``fetch_kind`` set) first, then the smaller depth, the larger score."""
    parts = {"update": updated, "repoint": repointed, "new": new, "budget": budget, "due": due, "moved": moved}
    rels = {kind: rel for kind, rel in parts.items() if rel is not None}

    def shape(kind: str, rel: Rel) -> str:
        cols = [_cast(f'"{f.name}"' if f.name in rel.columns else "NULL", f) for f in CRAWLDB.fields]
        was = f'"{WAS}"' if WAS in rel.columns else "NULL"
        return (f"SELECT {', '.join(cols)}, {literal(kind)} AS _kind, CAST({was} AS VARCHAR) AS \"{WAS}\", "
                f"{RANKS[kind]} AS _rank FROM {{{kind}}}")
    union = "\n            UNION ALL ".join(shape(k, r) for k, r in rels.items())
    names = [f.name for f in CRAWLDB.fields]
    hit = f"ex._ex IS NOT NULL AND one.status = {literal(Status.UNFETCHED.value)}"
    out = {n: f'one."{n}"' for n in names}
    out["error_class"] = f"CASE WHEN {hit} THEN concat({literal(BUDGET_ERROR_PREFIX)}, ex._ex) ELSE one.error_class END"
    out["status"] = f"CASE WHEN {hit} THEN {literal(Status.BUDGET_EXHAUSTED.value)} ELSE one.status END"
    cols = ", ".join(f'{e} AS "{n}"' for n, e in out.items())
    return query(con, f"""
        WITH allrows AS (
            {union}),
        one AS (
            SELECT * FROM allrows
            QUALIFY row_number() OVER (PARTITION BY url_fp
                                       ORDER BY _rank, fetch_kind NULLS LAST, depth, score DESC) = 1)
        SELECT {cols}, one._kind AS _kind, one."{WAS}" AS "{WAS}"
        FROM one LEFT JOIN (SELECT host, budget_reason AS _ex FROM {{exhausted}}) ex ON one.host = ex.host""",
                 exhausted=exhausted, **rels)


def whole_rows(con, source: Rel, crawldb: Rel) -> Rel:
    """As ``jobs.crawldb_rows.whole_rows``: ``source``'s rows whole, each column by ``whole_kinds`` from
    the URL's row in ``crawldb`` (the rows read whole: those with ``fetch_count``, NOT NULL in the table),
    else from the source; a partial kind's row of a URL ``crawldb`` lacks is dropped; a ``new`` row of a URL
    it has takes that row's status as ``_was``."""
    names = set(CRAWLDB.fieldNames())

    def col(c: str) -> str:
        if c == WAS:
            return f'CASE WHEN b.url_fp IS NOT NULL AND s._kind = {literal("new")} THEN b.status ELSE s."{c}" END'
        if c not in names or c == "url_fp":
            return f's."{c}"'
        return f'CASE WHEN b.url_fp IS NOT NULL AND s._kind IN {sql_list(whole_kinds(c))} THEN b."{c}" ELSE s."{c}" END'
    return query(con, f"""
        WITH base AS (
            SELECT * FROM {{crawldb}} WHERE fetch_count IS NOT NULL AND url_fp IN (SELECT url_fp FROM {{source}})
            QUALIFY row_number() OVER (PARTITION BY url_fp) = 1)
        SELECT {", ".join(f'{col(c)} AS "{c}"' for c in source.columns)}
        FROM {{source}} s LEFT JOIN base b ON s.url_fp = b.url_fp
        WHERE b.url_fp IS NOT NULL OR s._kind NOT IN {sql_list(tuple(PARTIAL))}""", source=source, crawldb=crawldb)


# -- the round's appends (jobs/update_transforms.py) ------------------------------------------------------
def fetch_log_rows(con, prepared: Rel, updated: Rel, *, round_no: int) -> Rel:
    """As ``jobs.update_transforms.fetch_log_rows``: one FETCH_LOG row per page row not kept."""
    own = {"round": f"{int(round_no)}", "changed": "ch.changed", "dup_of": "ch.dup_of",
           "n_outlinks": "CASE WHEN p.outlinks IS NULL THEN 0 ELSE len(p.outlinks) END"}
    cols = ", ".join(_cast(own.get(f.name, f'p."{f.name}"'), f) for f in FETCH_LOG.fields)
    return query(con, f"""
        SELECT {cols}
        FROM (SELECT * FROM {{prepared}} WHERE "{CAT}" <> {literal(KEEP)}) p
        LEFT JOIN (SELECT url_fp, "{CHANGED}" AS changed, dup_of FROM {{updated}}) ch ON p.url_fp = ch.url_fp""",
                 prepared=prepared, updated=updated)


def link_rows(con, prepared: Rel, *, round_no: int) -> Rel:
    """As ``jobs.update_transforms.link_rows``: every outlink edge once per (src, dst, kind)."""
    own = {"round": f"{int(round_no)}"}
    cols = ", ".join(_cast(own.get(f.name, f'"{f.name}"'), f) for f in LINKS.fields)
    return query(con, f"""
        WITH e AS (
            SELECT src_fp, l.url_fp AS dst_fp, l.kind AS kind,
                   min(coalesce(l.nofollow, FALSE)) AS nofollow, min(l.url) AS dst_url
            FROM {{e}} WHERE l.url_fp IS NOT NULL
            GROUP BY src_fp, l.url_fp, l.kind)
        SELECT {cols} FROM e""", e=edges(con, prepared))
