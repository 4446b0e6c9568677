"""Each host's duplicate URL patterns on the driver (DuckDB): the twins of :mod:`jobs.pattern_transforms`.

Same names and parameters, relations for DataFrames, the same output columns, order and types
(``jobs/duck_engine.py``). The rule is ``jobs/pattern_transforms.py``'s docstring's; the features of
a URL and the matching stay in ``crawl_udfs/url_patterns.py``, called here as DuckDB Python functions
(:func:`register`, ``FEATURES_FN`` and ``SKIPPED_FN``), as the Spark twin calls them in a UDF.

What it reads of the crawl DB (for the gather): :func:`stored_pages` reads ``host``, ``url``,
``url_fp``, ``status``, ``dup_of`` of the learning hosts' rows (:func:`learning_hosts`): the sampled
stored pages (``pattern_transforms.in_sample``) and their counterparts. The driver
engine gathers the sampled pages by host (``jobs/update_gather.py``, key 2), then the counterparts
they name that it lacks (:func:`missing_counterparts`, one keyed read): not every row of a host,
which grows with the crawl DB. The other functions read only their inputs.
"""

from __future__ import annotations

import functools

import duckdb
import pyarrow as pa

from crawl_udfs import url_patterns
from jobs.duck_hosts import query
from jobs.pattern_transforms import RELEARN_AT, SAMPLE_SPAN
from jobs.pattern_transforms import reason  # noqa: F401  (plain Python: the one rule, re-exported)
from schemas.status import STORED

Rel = duckdb.DuckDBPyRelation
#: DuckDB names of the Python functions :func:`register` creates.
FEATURES_FN, SKIPPED_FN = "url_pattern_features", "url_pattern_skipped"
_FEATURE = "STRUCT(pattern VARCHAR, kind VARCHAR, value VARCHAR, counterpart_fp BIGINT)"
_FEATURES_ARROW = pa.list_(pa.struct([("pattern", pa.string()), ("kind", pa.string()), ("value", pa.string()),
                                      ("counterpart_fp", pa.int64())]))
_RULES = "STRUCT(pattern VARCHAR, kind VARCHAR, pages INTEGER, dup_share DOUBLE)[]"


@functools.lru_cache(maxsize=1 << 17)
def _features_of(url: str | None) -> list[tuple]:
    """The Spark UDF's own function, remembered: a round computes a URL's features twice
    (:func:`missing_counterparts`, then :func:`learn`)."""
    from jobs.pattern_transforms import _features as one
    return one(url)


def _features(urls: pa.Array) -> pa.Array:
    return pa.array([_features_of(u) for u in urls.to_pylist()], _FEATURES_ARROW)


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


def sample_threshold(pages_fetched_sql: str, sample_pages: int) -> str:
    """SQL of :func:`jobs.pattern_transforms.sample_threshold`."""
    fetched, span, k = f"coalesce({pages_fetched_sql}, 0)", SAMPLE_SPAN, int(sample_pages)
    return (f"CASE WHEN {fetched} <= {k} THEN CAST({span} AS BIGINT) "
            f"ELSE CAST(floor(CAST({span * k} AS DOUBLE) / {fetched}) AS BIGINT) END")


def in_sample(url_fp_sql: str, threshold_sql: str) -> str:
    """SQL of :func:`jobs.pattern_transforms.in_sample`."""
    return f"(({url_fp_sql}) & {SAMPLE_SPAN - 1}) < coalesce({threshold_sql}, {SAMPLE_SPAN})"


def learning_hosts(fetch_output: Rel, fetch_list: Rel, hosts: Rel, *, sample_pages: int) -> Rel:
    """As :func:`jobs.pattern_transforms.learning_hosts`: (host, threshold). ``hosts`` needs only the rows
    of :func:`unlisted_hosts` (the driver reads no others)."""
    at = "CAST([" + ", ".join(str(b) for b in RELEARN_AT) + "] AS BIGINT[])"
    return query(f"""
        WITH r AS (
            SELECT host, CAST(sum(CASE WHEN kind = 'page' AND status_code IS NOT NULL THEN 1 ELSE 0 END) AS BIGINT)
                   AS _responses
            FROM $fetch_output WHERE host IS NOT NULL GROUP BY host),
        l AS (SELECT host, max(pages_fetched) AS _listed FROM $fetch_list GROUP BY host),
        j0 AS (
            SELECT r.host, r._responses, coalesce(l._listed, h.pages_fetched) AS pages_fetched
            FROM r LEFT JOIN l ON r.host = l.host
                   LEFT JOIN (SELECT host, pages_fetched FROM $hosts) h ON r.host = h.host AND l._listed IS NULL),
        j AS (SELECT host, pages_fetched, coalesce(pages_fetched, 0) AS _before,
                     coalesce(pages_fetched, 0) + _responses AS _after FROM j0)
        SELECT host, {sample_threshold('pages_fetched', sample_pages)} AS threshold FROM j
        WHERE len(list_filter({at}, lambda b: b > _before AND b <= _after)) > 0""",
                 fetch_output=fetch_output, fetch_list=fetch_list, hosts=hosts)


def unlisted_hosts(fetch_output: Rel, fetch_list: Rel) -> Rel:
    """``host`` of the round's rows whose fetched pages the fetch list does not carry (a round listed before
    ``fetch_list.pages_fetched`` existed): the only ``hosts`` rows :func:`learning_hosts` reads."""
    return query("""
        SELECT DISTINCT o.host FROM $fetch_output o
        WHERE o.host IS NOT NULL AND o.host NOT IN (
            SELECT host FROM $fetch_list GROUP BY host HAVING max(pages_fetched) IS NOT NULL)""",
                 fetch_output=fetch_output, fetch_list=fetch_list)


def stored_pages(crawldb: Rel, updated: Rel, learning: Rel) -> Rel:
    """As :func:`jobs.pattern_transforms.stored_pages`: (host, url, url_fp, original, sampled)."""
    stored = ", ".join(f"'{s.value}'" for s in STORED)
    return query(f"""
        WITH t AS (SELECT host, threshold AS _threshold FROM $learning),
        now AS (SELECT host, url, url_fp, status, dup_of FROM $updated WHERE host IN (SELECT host FROM t)),
        before AS (
            SELECT host, url, url_fp, status, dup_of FROM $crawldb c
            WHERE host IN (SELECT host FROM now) AND NOT EXISTS (SELECT 1 FROM now n WHERE n.url_fp = c.url_fp)),
        pages AS (SELECT * FROM before UNION ALL SELECT * FROM now)
        SELECT p.host, url, url_fp, CASE WHEN status IN ({stored}) THEN coalesce(dup_of, url_fp) END AS original,
               coalesce(status IN ({stored}), FALSE) AND {in_sample('url_fp', 't._threshold')} AS sampled
        FROM pages p LEFT JOIN t ON p.host = t.host""", updated=updated, crawldb=crawldb, learning=learning)


def likely_counterparts(con: duckdb.DuckDBPyConnection, known: Rel, fetch_output: Rel, learning: Rel) -> Rel:
    """``url_fp`` of the counterparts that :func:`missing_counterparts` can name, before the round's
    decisions: those of the gathered by-host rows (``known``'s stored pages of the ``learning`` hosts in
    their samples) and of the round's page rows of those hosts in their samples, that neither ``known``
    nor ``fetch_output`` holds. A superset, so the keyed read can start while the round is decided."""
    stored = ", ".join(f"'{s.value}'" for s in STORED)
    pages = query(f"""
        WITH t AS (SELECT host, threshold FROM $learning),
        rows AS (
            SELECT k.host, k.url, k.url_fp, k.status IN ({stored}) AS _candidate FROM $known k
            UNION ALL
            SELECT host, url, url_fp, TRUE FROM $fetch_output WHERE kind = 'page' AND url_fp IS NOT NULL)
        SELECT r.host, r.url, r.url_fp,
               coalesce(r._candidate, FALSE) AND t.host IS NOT NULL AND {in_sample('r.url_fp', 't.threshold')} AS sampled
        FROM rows r LEFT JOIN t ON r.host = t.host""", known=known, fetch_output=fetch_output, learning=learning)
    return missing_counterparts(con, pages)


def missing_counterparts(con: duckdb.DuckDBPyConnection, pages: Rel) -> Rel:
    """``url_fp`` of the counterparts the sampled ``pages`` (:func:`stored_pages`) name that are not among
    ``pages``: what :func:`learn` must still be given (a crawl DB's row, or known absent)."""
    register(con)
    return query(f"""
        SELECT DISTINCT f.counterpart_fp AS url_fp
        FROM (SELECT unnest({FEATURES_FN}(url)) AS f FROM $pages WHERE sampled)
        WHERE f.counterpart_fp IS NOT NULL AND f.counterpart_fp NOT IN (SELECT url_fp FROM $pages)""", pages=pages)


def learn(con: duckdb.DuckDBPyConnection, pages: Rel, *, min_pages: int, min_share: float) -> Rel:
    """As :func:`jobs.pattern_transforms.learn`: (host, dup_patterns) of the hosts with a rule learnt,
    ``dup_patterns`` sorted (``sort_array``: by pattern, kind, pages, dup_share)."""
    register(con)
    param, value = url_patterns.PARAM, url_patterns.PARAM_VALUE
    return query(f"""
        WITH per_feature AS (
            SELECT host, original, f.pattern, f.kind, f.value, f.counterpart_fp
            FROM (SELECT host, original, unnest({FEATURES_FN}(url)) AS f FROM $pages WHERE sampled)),
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


def with_patterns(hosts_new: Rel, learnt: Rel, learning: Rel) -> Rel:
    """As :func:`jobs.pattern_transforms.with_patterns`: ``host`` first (Spark's join on it), the other
    columns of ``hosts_new`` but ``dup_patterns``, then ``dup_patterns``: the learnt ones (null: none) for
    the ``learning`` hosts, the row's own for the others."""
    has = "dup_patterns" in hosts_new.columns
    drop = ["host"] + (["dup_patterns"] if has else [])
    kept = "h.dup_patterns" if has else "NULL"
    return query(f"""
        SELECT h.host, h.* EXCLUDE ({", ".join(drop)}),
               CASE WHEN g.host IS NOT NULL THEN l.dup_patterns ELSE {kept} END AS dup_patterns
        FROM $hosts_new h LEFT JOIN (SELECT host, dup_patterns FROM $learnt) l ON h.host = l.host
        LEFT JOIN (SELECT host FROM $learning) g ON h.host = g.host""",
                 hosts_new=hosts_new, learnt=learnt, learning=learning)


def skipped(url_sql: str, patterns_sql: str) -> str:
    """SQL of :func:`jobs.pattern_transforms.skipped` (``url_patterns.matches``, through :data:`SKIPPED_FN`:
    call :func:`register` on the connection first)."""
    return f"coalesce({SKIPPED_FN}({url_sql}, {patterns_sql}), FALSE)"
