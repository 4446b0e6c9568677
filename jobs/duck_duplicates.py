"""Exact and near duplicates on the driver: the DuckDB twins of ``jobs/exact_dup_transforms.py`` and
``jobs/dedup_transforms.py`` (``jobs/duck_engine.py``).

Each function is its Spark twin's (same name, same parameters, a ``duckdb`` relation in the place of each
DataFrame, the connection ``con`` first), with exactly its output columns, order and types; the rules are
the twins' docstrings'. Which copy is the original: :mod:`jobs.duck_originals`. The MinHash second check is
the twin's own UDF function (``jobs.dedup_transforms._second_check``, over
:func:`crawl_udfs.near_dup.near_duplicates`), registered as a DuckDB Python function.

What the inputs must hold (in the engine ``crawldb`` is the rows the round keys, not the table):

- :func:`exact_members` (and :func:`mark_duplicates` without ``members``): the crawl-DB rows whose ``digest``
  is one of the round's stored pages' digests (``_stored`` rows of ``updated``) and whose status is fetched
  or not_modified; columns ``url_fp``, ``host``, ``status``, ``digest``, ``canonical_fp``,
  ``first_fetched``, ``warc_fetch_time``, ``first_seen``.
- :func:`near_duplicate_of`: ``index``, the ``near_dup_index`` rows whose ``block_key`` is one of the round's
  candidates' block keys (rows of other keys, and of rounds >= ``round_no``, are ignored, so more rows
  change nothing); ``left`` as :func:`jobs.duck_originals.left_pages` gives it from the crawl-DB rows of
  those index rows' url_fps.
- :func:`candidates`: ``prepared``'s ``url_fp``, ``minhash``, ``words`` (the round's page rows).
"""

from __future__ import annotations

import functools

import duckdb
import pyarrow as pa

from crawl_udfs import near_dup
from crawl_udfs.simhash import EMPTY as EMPTY_SIMHASH
from jobs.dedup_transforms import NEAR_OF, _second_check
from jobs.duck_engine import cast_to, literal, plus_seconds
from jobs.duck_originals import _first_use, first_copy_time, query, statuses, with_original
from jobs.originals import BY_CANONICAL, MEMBER_COLUMNS, ORIG, ORIGINAL_STATUSES
from jobs.update_transforms import BASE, CAT, FIRST, KEEP
from schemas.status import Status
from schemas.tables import NEAR_DUP_INDEX

Rel = duckdb.DuckDBPyRelation
#: DuckDB's name for the twin's MinHash check (registered by :func:`functions`).
NEAR_DUP_CHECK = "near_dup_check"
_DUP = literal(Status.DUPLICATE.value)


def functions(con: duckdb.DuckDBPyConnection) -> None:
    """The Python functions of this module's SQL, registered in ``con`` once: ``near_dup_check(minhash_a,
    minhash_b, words_a, words_b, jaccard_threshold, length_ratio)``."""
    if not _first_use(con, NEAR_DUP_CHECK):
        return

    checks = functools.cache(lambda t, r: _second_check(t, r).func)  # one UDF object per threshold pair

    def check(a: pa.Array, b: pa.Array, wa: pa.Array, wb: pa.Array, jt: pa.Array, lr: pa.Array) -> pa.Array:
        rows = zip(a.to_pylist(), b.to_pylist(), wa.to_pylist(), wb.to_pylist(), jt.to_pylist(), lr.to_pylist())
        return pa.array([checks(t, r)(x, y, u, v) for x, y, u, v, t, r in rows], pa.bool_())
    t = duckdb.sqltype
    con.create_function(NEAR_DUP_CHECK, check, [t("BLOB"), t("BLOB"), t("INTEGER"), t("INTEGER"), t("DOUBLE"),
                                                t("DOUBLE")], t("BOOLEAN"), type="arrow")


# -- exact duplicates (jobs/exact_dup_transforms.py) ------------------------------------------------
def exact_members(con: duckdb.DuckDBPyConnection, updated: Rel, crawldb: Rel) -> Rel:
    """As ``jobs.exact_dup_transforms.exact_members``: ``digest``, member columns, ``_batch``."""
    return query(con, f"""
        WITH batch AS (
            SELECT digest, url_fp, host, canonical_fp, {first_copy_time()} AS first_fetched, true AS _batch
            FROM {{updated}}
            WHERE _stored AND digest IS NOT NULL),
        touched AS (SELECT url_fp FROM {{updated}} WHERE {CAT} <> {literal(KEEP)}),
        stored AS (
            SELECT digest, url_fp, host, canonical_fp, {first_copy_time()} AS first_fetched, false AS _batch
            FROM {{crawldb}} c
            WHERE status IN {statuses(ORIGINAL_STATUSES)} AND digest IS NOT NULL
              AND digest IN (SELECT digest FROM batch)
              AND NOT EXISTS (SELECT 1 FROM touched t WHERE t.url_fp = c.url_fp))
        SELECT * FROM batch
        UNION ALL
        SELECT * FROM stored""", updated=updated, crawldb=crawldb)


def mark_duplicates(con: duckdb.DuckDBPyConnection, updated: Rel, crawldb: Rel, *, duplicate_interval_s: float,
                    members: Rel | None = None) -> Rel:
    """As ``jobs.exact_dup_transforms.mark_duplicates`` (``digest`` first, as Spark's join on it puts it)."""
    members = exact_members(con, updated, crawldb) if members is None else members
    df = query(con, f"""
        WITH originals AS (SELECT DISTINCT digest, {ORIG} FROM {{ranked}})
        SELECT u.digest, u.* EXCLUDE (digest), o.{ORIG}
        FROM {{updated}} u LEFT JOIN originals o ON u.digest = o.digest""",
               ranked=with_original(con, members, "digest"), updated=updated)
    dup = f"_stored AND {ORIG} IS NOT NULL AND {ORIG} <> url_fp"
    return as_duplicates(con, df, dup, ORIG, duplicate_interval_s=duplicate_interval_s).project(f"* EXCLUDE ({ORIG})")


def exact_demotions(con: duckdb.DuckDBPyConnection, members: Rel) -> Rel:
    """As ``jobs.exact_dup_transforms.exact_demotions``: ``url_fp``, ``_to``."""
    return query(con, f"SELECT url_fp, {ORIG} AS _to FROM {{ranked}} WHERE NOT _batch AND {ORIG} <> url_fp",
                 ranked=with_original(con, members, "digest"))


def as_duplicates(con: duckdb.DuckDBPyConnection, df: Rel, dup: str, original: str, *,
                  duplicate_interval_s: float) -> Rel:
    """As ``jobs.exact_dup_transforms.as_duplicates``; ``dup`` and ``original`` are SQL expressions over ``df``."""
    iv = literal(float(duplicate_interval_s))
    return query(con, f"""
        SELECT * EXCLUDE (_dup) REPLACE (
            CASE WHEN _dup THEN {_DUP} ELSE status END AS status,
            CASE WHEN _dup THEN {original} ELSE dup_of END AS dup_of,
            CASE WHEN _dup THEN {iv} ELSE fetch_interval_s END AS fetch_interval_s,
            CASE WHEN _dup THEN {plus_seconds(BASE, iv)} ELSE next_fetch_time END AS next_fetch_time)
        FROM (SELECT *, ({dup}) AS _dup FROM {{df}})""", df=df)


# -- near duplicates (jobs/dedup_transforms.py) -----------------------------------------------------
#: The columns of a candidate the lookup carries (``dedup_transforms.near_duplicate_of``'s ``cols``).
_COLS = ("url_fp", "host", "canonical_fp", "simhash", "minhash", "words", "first_fetched")


def block_keys(simhash: str, k: int) -> str:
    """As ``jobs.dedup_transforms.block_keys``: :func:`crawl_udfs.near_dup.block_keys` of a SQL BIGINT,
    a ``BIGINT[]`` (an arithmetic shift: the mask keeps only bits of the 64)."""
    keys = [f"CAST((({simhash} >> {shift}) & {(1 << width) - 1}) | {i << near_dup.INDEX_SHIFT} AS BIGINT)"
            for i, (shift, width) in enumerate(near_dup.blocks(int(k)))]
    return "[" + ", ".join(keys) + "]"


def candidates(con: duckdb.DuckDBPyConnection, updated: Rel, prepared: Rel) -> Rel:
    """As ``jobs.dedup_transforms.candidates``: ``url_fp``, ``host``, ``simhash``, ``canonical_fp``,
    ``first_fetched``, ``minhash``, ``words`` of the round's first copies with both signatures."""
    return query(con, f"""
        WITH first AS (
            SELECT url_fp, host, simhash, canonical_fp, {first_copy_time()} AS first_fetched
            FROM {{updated}}
            WHERE {FIRST} AND status <> {_DUP} AND simhash IS NOT NULL AND simhash <> {literal(EMPTY_SIMHASH)}),
        sig AS (SELECT url_fp, minhash, words FROM {{prepared}})
        SELECT f.*, s.minhash, s.words
        FROM first f JOIN sig s ON f.url_fp = s.url_fp
        WHERE s.minhash IS NOT NULL AND s.words IS NOT NULL AND f.first_fetched IS NOT NULL""",
                 updated=updated, prepared=prepared)


def capped(con: duckdb.DuckDBPyConnection, rows: Rel, max_rows: int,
           order: tuple[str, ...] = ("first_fetched", "url_fp")) -> Rel:
    """As ``jobs.dedup_transforms.capped``: at most ``max_rows`` rows of each ``block_key``, the first by
    ``order`` (NULLs first, as Spark's ascending sort); 0 keeps every row."""
    if int(max_rows) <= 0:
        return rows
    keys = ", ".join(f"{c} NULLS FIRST" for c in order)
    return query(con, f"SELECT * FROM {{rows}} QUALIFY row_number() OVER (PARTITION BY block_key ORDER BY {keys}) "
                      f"<= {int(max_rows)}", rows=rows)


def near_duplicate_of(con: duckdb.DuckDBPyConnection, cands: Rel, index: Rel, *, round_no: int, near_bits: int,
                      jaccard_threshold: float, length_ratio: float, max_bucket_rows: int = 0,
                      left: Rel | None = None) -> Rel:
    """As ``jobs.dedup_transforms.near_duplicate_of``: ``url_fp``, ``_near_of``.

    Of the pairs agreeing on several block keys the one of the smallest key is kept (Spark's
    ``dropDuplicates`` keeps any: they differ in ``block_key`` only, which nothing reads after)."""
    functions(con)
    k, cols = int(near_bits), ", ".join(_COLS)
    mine = query(con, f"SELECT {cols}, unnest({block_keys('simhash', k)}) AS block_key FROM {{cands}}", cands=cands)
    skip = "AND NOT EXISTS (SELECT 1 FROM {left} l WHERE l.url_fp = i.url_fp)" if left is not None else ""
    both = query(con, f"""
        WITH indexed AS (  -- the rows of the buckets hit, of earlier rounds, of pages that have not left
            SELECT block_key, {cols}, true AS indexed
            FROM {{index}} i
            WHERE round < {int(round_no)} AND block_key IN (SELECT block_key FROM {{mine}}) {skip})
        SELECT * FROM indexed
        UNION ALL
        SELECT block_key, {cols}, false AS indexed FROM {{mine}}""",
                 index=index, mine=mine, **({} if left is None else {"left": left}))
    other = capped(con, both, max_bucket_rows)
    o_cols = ", ".join(f"o.{c} AS o_{c}" for c in (*_COLS, "indexed"))
    m_cols = ", ".join(MEMBER_COLUMNS)
    members = query(con, f"""
        WITH paired AS (
            SELECT m.*, {o_cols}
            FROM {{mine}} m JOIN {{other}} o ON m.block_key = o.block_key
            WHERE bit_count(xor(m.simhash, o.simhash)) <= {k} AND o.url_fp <> m.url_fp),
        pairs AS (  -- a pair agreeing on several blocks is one pair
            SELECT DISTINCT ON (url_fp, o_url_fp) * FROM paired ORDER BY url_fp, o_url_fp, block_key),
        checked AS (
            SELECT * FROM pairs
            WHERE {NEAR_DUP_CHECK}(minhash, o_minhash, words, o_words, {literal(float(jaccard_threshold))},
                                   {literal(float(length_ratio))}))
        -- each candidate's cluster: itself and the pages it is a near-duplicate of
        SELECT url_fp AS _c, {m_cols}, false AS indexed FROM checked
        UNION
        SELECT url_fp AS _c, {", ".join(f"o_{c} AS {c}" for c in MEMBER_COLUMNS)}, o_indexed AS indexed
        FROM checked""", mine=mine, other=other)
    ranked = with_original(con, members, "_c")
    # a copy names its cluster's original; an index page in the cluster of a candidate that won it by a
    # consistent canonical becomes that candidate's copy; a copy's original that is a copy: its original
    return query(con, f"""
        WITH found AS (
            SELECT url_fp, min({NEAR_OF}) AS {NEAR_OF}
            FROM (SELECT url_fp, CASE WHEN url_fp = _c AND {ORIG} <> _c THEN {ORIG}
                                      WHEN {ORIG} = _c AND {BY_CANONICAL} AND indexed THEN _c END AS {NEAR_OF}
                  FROM {{ranked}})
            WHERE {NEAR_OF} IS NOT NULL
            GROUP BY url_fp)
        SELECT f.url_fp, coalesce(hop.{NEAR_OF}, f.{NEAR_OF}) AS {NEAR_OF}
        FROM found f LEFT JOIN found hop ON f.{NEAR_OF} = hop.url_fp""", ranked=ranked)


def mark_near_duplicates(con: duckdb.DuckDBPyConnection, updated: Rel, near: Rel, *,
                         duplicate_interval_s: float) -> Rel:
    """As ``jobs.dedup_transforms.mark_near_duplicates`` (``url_fp`` first, as Spark's join on it puts it)."""
    df = query(con, f"""
        SELECT u.url_fp, u.* EXCLUDE (url_fp), n.{NEAR_OF}
        FROM {{updated}} u LEFT JOIN {{near}} n ON u.url_fp = n.url_fp""", updated=updated, near=near)
    df = as_duplicates(con, df, f"{NEAR_OF} IS NOT NULL", NEAR_OF, duplicate_interval_s=duplicate_interval_s)
    # an exact copy of a page this round found a near-duplicate names that page's original instead
    return query(con, f"""
        SELECT d.* EXCLUDE ({NEAR_OF}) REPLACE (coalesce(hop.{NEAR_OF}, d.dup_of) AS dup_of)
        FROM {{df}} d LEFT JOIN {{near}} hop ON d.dup_of = hop.url_fp""", df=df, near=near)


def demotions(con: duckdb.DuckDBPyConnection, updated: Rel, near: Rel) -> Rel:
    """As ``jobs.dedup_transforms.demotions``: ``url_fp``, ``_to``."""
    return query(con, f"""
        SELECT url_fp, {NEAR_OF} AS _to FROM {{near}} n
        WHERE NOT EXISTS (SELECT 1 FROM {{updated}} u WHERE u.url_fp = n.url_fp)""", updated=updated, near=near)


def index_rows(con: duckdb.DuckDBPyConnection, cands: Rel, near: Rel, *, round_no: int, near_bits: int) -> Rel:
    """As ``jobs.dedup_transforms.index_rows``: NEAR_DUP_INDEX rows of the candidates that are no copy."""
    rows = query(con, f"""
        SELECT *, unnest({block_keys('simhash', int(near_bits))}) AS block_key, {int(round_no)} AS round
        FROM {{cands}} c
        WHERE NOT EXISTS (SELECT 1 FROM {{near}} n WHERE n.url_fp = c.url_fp)""", cands=cands, near=near)
    return cast_to(rows, NEAR_DUP_INDEX)
