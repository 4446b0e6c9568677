"""Each host's duplicate URL patterns on the driver (DuckDB): the twins of :mod:`jobs.pattern_transforms`.

Same names and parameters, relations for DataFrames, the same output columns, order and types
(``jobs/duck_engine.py``). The rule is ``jobs/pattern_transforms.py``'s docstring's; the features of
a URL and the matching stay in ``crawl_udfs/url_patterns.py``, called here as DuckDB Python functions
(:func:`register`, ``FEATURES_FN`` and ``SKIPPED_FN``), as the Spark twin calls them in a UDF.

What it reads of the crawl DB (for the gather): :func:`stored_pages` reads ``host``, ``url``,
``url_fp``, ``status``, ``dup_of`` of every crawl-DB row of the round's hosts (the hosts of the
``updated`` rows): the slice of ``jobs/crawldb_slice.py``, ``HOST_COLUMNS``. The other functions
read only their inputs.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from crawl_udfs import url_patterns
from jobs.duck_hosts import query
from jobs.pattern_transforms import reason  # noqa: F401  (plain Python: the one rule, re-exported)
from schemas.status import STORED

Rel = duckdb.DuckDBPyRelation
#: DuckDB names of the Python functions :func:`register` creates.
FEATURES_FN, SKIPPED_FN = "url_pattern_features", "url_pattern_skipped"
_FEATURE = "STRUCT(pattern VARCHAR, kind VARCHAR, value VARCHAR, counterpart_fp BIGINT)"
_FEATURES_ARROW = pa.list_(pa.struct([("pattern", pa.string()), ("kind", pa.string()), ("value", pa.string()),
                                      ("counterpart_fp", pa.int64())]))
_RULES = "STRUCT(pattern VARCHAR, kind VARCHAR, pages INTEGER, dup_share DOUBLE)[]"


def _features(urls: pa.Array) -> pa.Array:
    from jobs.pattern_transforms import _features as one  # the Spark UDF's own function
    return pa.array([one(u) for u in urls.to_pylist()], _FEATURES_ARROW)


def _skipped(urls: pa.Array, rules: pa.Array) -> pa.Array:
    return pa.array([u is not None and url_patterns.matches(u, r) is not None
                     for u, r in zip(urls.to_pylist(), rules.to_pylist())], pa.bool_())


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Create :data:`FEATURES_FN` (url -> its features, ``pattern_transforms.FEATURES``) and
    :data:`SKIPPED_FN` (url, dup_patterns -> ``url_patterns.matches``) in ``con`` (once)."""
    have = {r[0] for r in con.execute("SELECT function_name FROM duckdb_functions()").fetchall()}
    if FEATURES_FN not in have:
        con.create_function(FEATURES_FN, _features, [duckdb.sqltype("VARCHAR")], duckdb.sqltype(f"{_FEATURE}[]"),
                            type="arrow", null_handling="special", side_effects=False)
    if SKIPPED_FN not in have:
        con.create_function(SKIPPED_FN, _skipped, [duckdb.sqltype("VARCHAR"), duckdb.sqltype(_RULES)],
                            duckdb.sqltype("BOOLEAN"), type="arrow", null_handling="special", side_effects=False)


def stored_pages(crawldb: Rel, updated: Rel) -> Rel:
    """As :func:`jobs.pattern_transforms.stored_pages`: (host, url, url_fp, original)."""
    stored = ", ".join(f"'{s.value}'" for s in STORED)
    return query(f"""
        WITH now AS (SELECT host, url, url_fp, status, dup_of FROM $updated),
        before AS (
            SELECT host, url, url_fp, status, dup_of FROM $crawldb c
            WHERE host IN (SELECT host FROM now) AND NOT EXISTS (SELECT 1 FROM now n WHERE n.url_fp = c.url_fp)),
        pages AS (SELECT * FROM before UNION ALL SELECT * FROM now)
        SELECT host, url, url_fp, CASE WHEN status IN ({stored}) THEN coalesce(dup_of, url_fp) END AS original
        FROM pages""", updated=updated, crawldb=crawldb)


def learn(con: duckdb.DuckDBPyConnection, pages: Rel, *, min_pages: int, min_share: float) -> Rel:
    """As :func:`jobs.pattern_transforms.learn`: (host, dup_patterns) of the hosts with a rule learnt,
    ``dup_patterns`` sorted (``sort_array``: by pattern, kind, pages, dup_share)."""
    register(con)
    param, value = url_patterns.PARAM, url_patterns.PARAM_VALUE
    return query(f"""
        WITH per_feature AS (
            SELECT host, original, f.pattern, f.kind, f.value, f.counterpart_fp
            FROM (SELECT host, original, unnest({FEATURES_FN}(url)) AS f FROM $pages WHERE original IS NOT NULL)),
        counterpart AS (SELECT url_fp AS counterpart_fp, original AS c_original, TRUE AS c_known FROM $pages),
        joined AS (
            SELECT p.*, c.c_original, c.c_known, coalesce(c.c_original = p.original, FALSE) AS _dup
            FROM per_feature p LEFT JOIN counterpart c ON p.counterpart_fp = c.counterpart_fp),
        stats AS (
            SELECT host, pattern, kind, count(*) AS pages, CAST(sum(CAST(_dup AS INTEGER)) AS BIGINT) AS dups,
                   count(DISTINCT CASE WHEN _dup THEN value END) AS dup_values
            FROM joined WHERE NOT (c_known IS NOT NULL AND c_original IS NULL)
            GROUP BY host, pattern, kind),
        learnt AS (
            SELECT *, CASE WHEN kind = '{value}' THEN regexp_extract(pattern, '^(\\?[^=]*)', 1) END AS name
            FROM stats
            WHERE pages >= {int(min_pages)} AND dups >= pages * CAST({float(min_share)!r} AS DOUBLE)
              AND (kind <> '{param}' OR dup_values >= 2)),
        names AS (SELECT host, pattern AS name FROM learnt WHERE kind = '{param}'),
        kept AS (
            SELECT * FROM learnt l
            WHERE NOT EXISTS (SELECT 1 FROM names n WHERE n.host = l.host AND n.name = l.name))
        SELECT host, list({{'pattern': pattern, 'kind': kind, 'pages': CAST(pages AS INTEGER),
                            'dup_share': CAST(dups AS DOUBLE) / CAST(pages AS DOUBLE)}}
                          ORDER BY pattern ASC NULLS FIRST, kind ASC NULLS FIRST, pages ASC NULLS FIRST,
                                   CAST(dups AS DOUBLE) / CAST(pages AS DOUBLE) ASC NULLS FIRST) AS dup_patterns
        FROM kept GROUP BY host""".replace("{{", "{").replace("}}", "}"), pages=pages)


def with_patterns(hosts_new: Rel, learnt: Rel) -> Rel:
    """As :func:`jobs.pattern_transforms.with_patterns`: ``host`` first (Spark's join on it), the other
    columns of ``hosts_new`` but ``dup_patterns``, then the learnt ``dup_patterns`` (null: none)."""
    drop = ["host"] + (["dup_patterns"] if "dup_patterns" in hosts_new.columns else [])
    return query(f"""
        SELECT h.host, h.* EXCLUDE ({", ".join(drop)}), l.dup_patterns
        FROM $hosts_new h LEFT JOIN (SELECT host, dup_patterns FROM $learnt) l ON h.host = l.host""",
                 hosts_new=hosts_new, learnt=learnt)


def skipped(url_sql: str, patterns_sql: str) -> str:
    """SQL of :func:`jobs.pattern_transforms.skipped` (``url_patterns.matches``, through :data:`SKIPPED_FN`:
    call :func:`register` on the connection first)."""
    return f"coalesce({SKIPPED_FN}({url_sql}, {patterns_sql}), FALSE)"
