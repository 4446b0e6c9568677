"""The ``hosts`` rows of a round on the driver: trap signals, host counters, trap judgement, budgets (DuckDB).

The DuckDB twins of :mod:`jobs.hosts_transforms` (``host_next`` aside: ``jobs/duck_engine.py``'s
conventions, ``docs/UPDATE.md`` "Engine"): same names and parameters, relations for DataFrames, the
same output columns, order and types. The trap evidence rule is ``crawl_udfs.trap_evidence``'s,
built here as SQL text through :class:`jobs.duck_engine.Sql` (as the Spark twin builds it as Columns).

What each function reads of the crawl DB and of ``hosts`` (for the gather):

- :func:`trap_signals`: crawl DB ``url_fp``, ``host`` of the rows whose ``url_fp`` is the ``dup_of``
  of one of the round's first copies that are duplicates. Every such row that counts is a row of a
  round's host (jobs/crawldb_slice.py's argument), so the Spark plan's slice is enough; the driver
  engine's gather has each by key instead: an original of an exact copy by the round's digests,
  of a near copy by the index rows. A first copy never names a page that leaves in its round (the
  original is chosen among the round's pages as they are left, ``jobs/originals.py``), so none is
  re-pointed to a promoted copy (``tests/test_update_engines.py`` checks a first copy of a leaving
  original's old content).
- :func:`hosts_update`: every ``hosts`` column of the rows of the round's hosts (hosts of the
  ``fetch_output`` rows and of ``updated``).
- :func:`judge_traps`: only its input.
- :func:`exhausted_hosts`: ``hosts`` ``host``, ``pages_fetched``, ``bytes_fetched`` of EVERY host
  (the third result lists every host out of budget after the round, the round's or not): the gather
  must hand over the hosts out of budget (``pages_fetched >= max_pages_per_host OR bytes_fetched >=
  max_bytes_per_host``) beside the round's hosts, or the whole table in those three columns.
- :func:`budget_rows`: every crawl-DB column of the rows with ``status = 'unfetched'`` of the hosts
  that reached their budget this round (``exhausted_hosts(...)[1]``); known only after the decisions,
  so the slice (every column of the round's URLs, five of the round's hosts' other rows) is not enough
  in a round where a host reaches its budget: ``update.plan`` then reads the crawl DB.
"""

from __future__ import annotations

import datetime as dt

import duckdb

from crawl_udfs import rate_prior as RP
from crawl_udfs.trap_evidence import new_share_bound, proves_trap, z_score
from jobs import duck_engine as E
from jobs.duck_transition import _host_rows_sql, _parked_until
from jobs.duck_engine import Sql, cast_to, literal, plus_seconds, ts
from jobs.schedule_transforms import GAP, MASS
from jobs.update_transforms import BUDGET_ERROR_PREFIX, CAT, CHANGED, FIRST, KEEP, WAS, WIRE
from schemas.status import Status

Rel = duckdb.DuckDBPyRelation


def query(sql: str, **rels: Rel) -> Rel:
    """:func:`jobs.duck_engine.query` on the first relation's connection."""
    return E.query(None, sql, **rels)


def sql_sqrt(x: Sql) -> Sql:
    """Spark's ``sqrt``: NaN below 0 (DuckDB's raises)."""
    return Sql(f"(CASE WHEN {x} < 0 THEN CAST('NaN' AS DOUBLE) ELSE sqrt({x}) END)", x.ints)


def java_fixed(x_sql: str, digits: int) -> str:
    """``%.<digits>f`` of a DOUBLE as Spark's ``format_string`` (Java) writes it: the shortest decimal
    of the double rounded half up (28.45 -> "28.5"), where DuckDB's ``printf`` rounds the binary value
    ("28.4"). For values under 10^20."""
    return f"CAST(CAST(CAST(CAST({x_sql} AS VARCHAR) AS DECIMAL(38,18)) AS DECIMAL(38,{int(digits)})) AS VARCHAR)"


# -- trap signals ----------------------------------------------------------------------------
def trap_signals(updated: Rel, near: Rel | None, crawldb: Rel) -> Rel:
    """As :func:`jobs.hosts_transforms.trap_signals`: per host ``t_pages``, ``t_exact``, ``t_near``.
    An original's host, when the crawl DB and the round both have its row, is taken from either
    (the Spark twin's ``dropDuplicates``; one URL has one host)."""
    rels = dict(updated=updated, crawldb=crawldb)
    if near is None:  # dedup.near_duplicates off: no page is a near copy
        near_copy = "CAST(NULL AS BOOLEAN) AS _near FROM first c"
    else:
        rels["near"] = near
        near_copy = "n._near FROM first c LEFT JOIN (SELECT url_fp, TRUE AS _near FROM $near) n ON c.url_fp = n.url_fp"
    return query(f"""
        WITH first AS (SELECT host, url_fp, status, dup_of FROM $updated WHERE "{FIRST}"),
        copies AS (
            SELECT c.host, c.url_fp, c.dup_of, {near_copy}
            WHERE c.status = '{Status.DUPLICATE.value}'),
        originals AS (SELECT DISTINCT dup_of AS url_fp FROM copies),
        of_host AS (
            SELECT url_fp AS dup_of, min(host) AS _of_host FROM (
                SELECT url_fp, host FROM $crawldb WHERE url_fp IN (SELECT url_fp FROM originals)
                UNION ALL
                SELECT url_fp, host FROM $updated WHERE url_fp IN (SELECT url_fp FROM originals))
            GROUP BY url_fp),
        ranked AS (
            SELECT c.*, o._of_host,
                   row_number() OVER (PARTITION BY c.host, c.dup_of ORDER BY c.url_fp NULLS FIRST) AS _rank
            FROM copies c LEFT JOIN of_host o ON c.dup_of = o.dup_of),
        evidence AS (
            SELECT url_fp, (coalesce(_of_host = host, FALSE) OR _rank > 1) AS _own,
                   coalesce(_near, FALSE) AS _near_copy
            FROM ranked),
        j AS (
            SELECT f.host, f.url_fp, e._own AND NOT e._near_copy AS _exact, e._own AND e._near_copy AS _nearly
            FROM first f LEFT JOIN evidence e ON f.url_fp = e.url_fp)
        SELECT host, CAST(count(*) AS BIGINT) AS t_pages,
               CAST(coalesce(sum(CAST(_exact AS BIGINT)), 0) AS BIGINT) AS t_exact,
               CAST(coalesce(sum(CAST(_nearly AS BIGINT)), 0) AS BIGINT) AS t_near
        FROM j GROUP BY host""", **rels)


# -- hosts ---------------------------------------------------------------------------------
def _host_rows(host_rows: Rel) -> Rel:
    """As :func:`jobs.hosts_transforms._host_rows` (the SQL is ``duck_transition``'s, which ``host_next`` reads)."""
    return query(_host_rows_sql("$host_rows"), host_rows=host_rows)


def page_counts(updated: Rel) -> Rel:
    """As :func:`jobs.hosts_transforms.page_counts`: per host ``p_revisits`` ... ``p_new``."""
    has_gap = GAP in updated.columns
    revisit = f'"{GAP}" IS NOT NULL' if has_gap else "FALSE"
    gap = f'"{GAP}"' if has_gap else "CAST(NULL AS DOUBLE)"
    attempted = f"{CAT} <> '{KEEP}'"
    dup = f"status = '{Status.DUPLICATE.value}'"

    def count(cond: str) -> str:
        return f"CAST(sum(CASE WHEN {cond} THEN 1 ELSE 0 END) AS BIGINT)"
    mass = ""
    if MASS in updated.columns:  # as the Spark twin: per grid point, null when no revisit measured one
        sums = ", ".join(f'sum("{MASS}"[{i + 1}])' for i in range(len(RP.LOG_GRID)))
        mass = f'CASE WHEN count("{MASS}") > 0 THEN [{sums}] END AS p_rate_mass,'
    return query(f"""
        SELECT host, {mass}
               {count(revisit)} AS p_revisits,
               {count(f'{revisit} AND "{CHANGED}"')} AS p_revisit_changes,
               sum(CASE WHEN {revisit} THEN {gap} ELSE 0.0 END)::DOUBLE AS p_revisit_span,
               {count(f'{attempted} AND http_status IS NOT NULL')} AS p_pages,
               CAST(sum("{WIRE}") AS BIGINT) AS p_bytes,
               {count(f'{attempted} AND {dup}')} AS p_dups,
               {count(f'''{CAT} = 'ok' AND status <> '{Status.DUPLICATE.value}' AND coalesce("{CHANGED}", TRUE)''')} AS p_new
        FROM $updated GROUP BY host""", updated=updated)


#: hosts columns of the trap state, carried by hosts_update and changed by judge_traps.
_TRAP_STATE = ("budget_reason", "round_cap", "trap_strikes", "trap_new_share", "trap_streak_pages",
               "trap_streak_exact", "trap_streak_near")
_SIGNALS = ("t_pages", "t_exact", "t_near")


def _schema_with_signals():
    from pyspark.sql.types import LongType, StructField, StructType
    from schemas.tables import HOSTS
    return StructType([*HOSTS.fields, *[StructField(c, LongType()) for c in _SIGNALS]])


def hosts_update(hosts: Rel, host_rows: Rel, counts: Rel, *, park_duration_s: float, round_no: int,
                 now: dt.datetime) -> Rel:
    """As :func:`jobs.hosts_transforms.hosts_update`: HOSTS columns, then ``t_pages``, ``t_exact``, ``t_near``."""
    from schemas.tables import HOSTS
    signals = ", ".join(f"c.{c}" if c in counts.columns else f"CAST(0 AS BIGINT) AS {c}" for c in _SIGNALS)
    olds = ", ".join(f'o."{f.name}" AS "o_{f.name}"' for f in HOSTS.fields)

    def r(c: str) -> str:
        return f"CASE WHEN robots_fetched_at IS NOT NULL THEN {c} ELSE o_{c} END AS {c}"

    def add(old: str, new: str, out: str | None = None) -> str:
        return f"CAST(coalesce(o_{old}, 0) + coalesce({new}, 0) AS BIGINT) AS {out or old}"
    df = query(f"""
        SELECT *, o_parked_until AS o_parked FROM (
            SELECT coalesce(h.host, c.host) AS host, h.* EXCLUDE (host),
                   c.p_pages, c.p_bytes, c.p_dups, c.p_new, c.p_revisits, c.p_revisit_changes, c.p_revisit_span,
                   {"c.p_rate_mass" if "p_rate_mass" in counts.columns else "CAST(NULL AS DOUBLE[]) AS p_rate_mass"},
                   {signals}
            FROM $h h FULL JOIN $counts c ON h.host = c.host) d
        LEFT JOIN (SELECT {olds} FROM $hosts o) ON d.host = o_host""",
               h=_host_rows(host_rows), counts=counts, hosts=hosts)
    out = query(f"""
        SELECT host, coalesce(ip, o_ip) AS ip, coalesce(next_allowed_at, o_next_allowed_at) AS next_allowed_at,
               coalesce(consecutive_failures, o_consecutive_failures, 0) AS consecutive_failures,
               {_parked_until(park_duration_s, now)} AS parked_until,
               CASE WHEN coalesce(parked, FALSE) THEN park_reason ELSE o_park_reason END AS park_reason,
               {r("robots_status")}, {r("robots_fetched_at")}, {r("robots_expires_at")}, {r("crawl_delay_s")},
               {add("pages_fetched", "p_pages")}, {add("bytes_fetched", "p_bytes")}, {add("requests", "requests")},
               {add("duplicate_pages", "p_dups")}, {add("new_content_pages", "p_new")},
               {literal(int(round_no))} AS updated_round, {r("sitemaps")}, {r("robots_body")},
               {", ".join(f"o_{c} AS {c}" for c in _TRAP_STATE)},
               {add("near_duplicate_pages", "t_near")}, coalesce(delay_s, o_delay_s) AS delay_s,
               CASE WHEN coalesce(ip, o_ip) IS NULL THEN o_resolve_error END AS resolve_error,
               o_dup_patterns AS dup_patterns,
               {add("revisits", "p_revisits")}, {add("revisit_changes", "p_revisit_changes")},
               coalesce(o_revisit_span_s, 0.0) + coalesce(p_revisit_span, 0.0) AS revisit_span_s,
               CASE WHEN p_rate_mass IS NULL THEN o_rate_mass WHEN o_rate_mass IS NULL THEN p_rate_mass
                    ELSE list_transform(list_zip(o_rate_mass, p_rate_mass), lambda z: z[1] + z[2]) END AS rate_mass,
               {", ".join(f"coalesce({c}, 0) AS {c}" for c in _SIGNALS)}
        FROM $df""", df=df)
    return cast_to(out, _schema_with_signals())


def judge_traps(hosts_new: Rel, trap, *, base_cap: int, now: dt.datetime) -> Rel:
    """As :func:`jobs.hosts_transforms.judge_traps`: the same columns, the trap state judged. The
    new-content bound is ``crawl_udfs.trap_evidence``'s, as SQL text."""
    judged = f"(pages_fetched >= {int(trap.min_pages)} AND t_pages > 0)"
    share = "(CAST(t_pages - t_exact - t_near AS DOUBLE) / CAST(greatest(t_pages, 1) AS DOUBLE))"

    def streak(col: str, add: str) -> str:
        return (f"CAST(CASE WHEN _low THEN coalesce({col}, 0) + {add} WHEN _judged THEN 0 ELSE {col} END AS BIGINT)"
                f" AS {col}")
    n, dups = Sql("_n", ints="BIGINT"), Sql("_dups", ints="BIGINT")
    zq, most = z_score(float(trap.park_confidence)), float(trap.max_new_share)
    bound = new_share_bound(n - dups, n, zq, sql_sqrt)
    proven = proves_trap(n - dups, n, most, zq, sql_sqrt)
    until = plus_seconds(ts(now), literal(float(trap.park_duration_s)))
    confidence = literal(f"{100 * float(trap.park_confidence):g}")
    reason = (f"printf('trap: %d%% duplicates (%d exact, %d near-duplicates of %d new pages) over %d %s; "
              f"new-content share at most %s%% at %s%% confidence', "
              f"CAST(round(CAST(100.0 AS DOUBLE) * _dups / _n) AS INTEGER), trap_streak_exact, trap_streak_near, trap_streak_pages, "
              f"trap_strikes, CASE WHEN trap_strikes = 1 THEN 'round' ELSE 'rounds' END, "
              f"{java_fixed(f'CAST(100.0 AS DOUBLE) * {bound}', 1)}, {confidence})")
    return query(f"""
        WITH judged AS (SELECT *, {judged} AS _judged, {judged} AND {share} < {literal(most)} AS _low,
                               {share} AS _share FROM $hosts_new),
        struck AS (
            SELECT * REPLACE (
                CAST(CASE WHEN _low THEN coalesce(trap_strikes, 0) + 1 WHEN _judged THEN 0 ELSE trap_strikes END
                     AS INTEGER) AS trap_strikes,
                CASE WHEN _judged THEN _share ELSE trap_new_share END AS trap_new_share,
                {streak("trap_streak_pages", "t_pages")}, {streak("trap_streak_exact", "t_exact")},
                {streak("trap_streak_near", "t_near")})
            FROM judged),
        capped AS (
            SELECT * REPLACE (
                CASE WHEN _low AND trap_strikes >= {int(trap.throttle_after_rounds)}
                     THEN CAST(greatest(floor(coalesce(round_cap, {int(base_cap)}) / 2), 1) AS INTEGER)
                     WHEN _judged AND NOT _low THEN CAST(NULL AS INTEGER) ELSE round_cap END AS round_cap),
                   CAST(greatest(trap_streak_pages, 1) AS DOUBLE) AS _n, trap_streak_exact + trap_streak_near AS _dups
            FROM struck),
        parked AS (
            SELECT *, _low AND (trap_strikes >= {int(trap.park_after_rounds)} OR {proven}) AS _park FROM capped)
        SELECT * EXCLUDE (_judged, _low, _share, _n, _dups, _park) REPLACE (
            CASE WHEN _park THEN {until} ELSE parked_until END AS parked_until,
            CASE WHEN _park THEN {reason} ELSE park_reason END AS park_reason)
        FROM parked""", hosts_new=hosts_new)


# -- budgets -----------------------------------------------------------------------------------
def budget_reason(max_pages_per_host: int, max_bytes_per_host: int) -> str:
    """SQL of :func:`jobs.hosts_transforms.budget_reason` over a ``hosts`` row."""
    return (f"CASE WHEN pages_fetched >= {int(max_pages_per_host)} THEN 'pages' "
            f"WHEN bytes_fetched >= {int(max_bytes_per_host)} THEN 'bytes' END")


def exhausted_hosts(hosts_new: Rel, hosts: Rel, max_pages_per_host: int,
                    max_bytes_per_host: int) -> tuple[Rel, Rel, Rel]:
    """As :func:`jobs.hosts_transforms.exhausted_hosts`: (``hosts_new`` with ``budget_reason``, the
    round's hosts out of budget, every host out of budget after the round)."""
    why = budget_reason(max_pages_per_host, max_bytes_per_host)
    new = query(f"SELECT * REPLACE ({why} AS budget_reason) FROM $hosts_new", hosts_new=hosts_new)
    now_at = query("SELECT host, budget_reason FROM $new WHERE budget_reason IS NOT NULL", new=new)
    every = query(f"""
        SELECT host, budget_reason FROM $now_at
        UNION ALL
        SELECT host, budget_reason FROM (SELECT host, {why} AS budget_reason FROM $hosts) e
        WHERE budget_reason IS NOT NULL AND NOT EXISTS (SELECT 1 FROM $new n WHERE n.host = e.host)""",
                  now_at=now_at, hosts=hosts, new=new)
    return new, now_at, every


def budget_rows(crawldb: Rel, exhausted: Rel, *, round_no: int) -> Rel:
    """As :func:`jobs.hosts_transforms.budget_rows`: ``host`` first (Spark's join on it), the other
    crawl-DB columns, then ``_was``."""
    return query(f"""
        SELECT c.host, c.* EXCLUDE (host) REPLACE (
                   '{Status.BUDGET_EXHAUSTED.value}' AS status,
                   {literal(BUDGET_ERROR_PREFIX)} || e.budget_reason AS error_class,
                   {literal(int(round_no))} AS updated_round),
               c.status AS "{WAS}"
        FROM $crawldb c JOIN (SELECT host, budget_reason FROM $exhausted) e ON c.host = e.host
        WHERE c.status = '{Status.UNFETCHED.value}'""", crawldb=crawldb, exhausted=exhausted)
