"""The round's decisions on the driver: DuckDB over Arrow (issue 13 point 3, ``docs/UPDATE.md`` "Engine").

Why: an update planned as ~12 Spark plans cost ~95 Spark jobs, ~0.2-0.4 s each (plan analysis, Delta
snapshots, Parquet staging, the JIT), whatever the round's size: 23-29 s for a 10,000-URL round on
``local[2]`` (``bench/verb_cost.py``). The decisions of a round (transition, duplicates, traps, budgets,
new URLs) read only the round's rows and the crawl-DB rows they key, thousands to ~a million rows: one
in-process DuckDB connection decides them in milliseconds. Spark keeps what is O(crawl DB): the one
scan that gathers those rows, and the MERGEs.

The crossing is Arrow both ways: :func:`from_spark` (``DataFrame.toArrow``: one job, the rows collected
on the driver) and :func:`to_spark` (``createDataFrame`` of an Arrow table: no job until it is read).

Conventions every ported transform keeps (``tests/duck_diff.py`` checks them against Spark's):

- One function per Spark transform, same name, relations in the place of DataFrames, the same output
  columns in the same order with the same types (:func:`cast_to` a Spark ``StructType``).
- Timestamps are ``TIMESTAMPTZ`` in a connection whose ``TimeZone`` is UTC (Spark's session zone here).
- Spark runs in ANSI mode (4.0's default): ``size(NULL)`` is NULL, as DuckDB's ``len(NULL)``.
- ``CAST(double AS BIGINT)`` truncates in Spark and rounds in DuckDB: write ``CAST(trunc(x) AS BIGINT)``.
- Spark sorts NULLs first ascending, DuckDB last: spell ``NULLS FIRST``/``NULLS LAST`` in every ORDER BY
  and window whose keys may be NULL.
- ``xxhash64(s)`` of Spark is :func:`crawl_udfs.url_normalize.fingerprint`: SQL ``spark_xxhash64(s)``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from typing import Any, Callable

import duckdb
import pyarrow as pa

#: DuckDB's name for Spark's ``xxhash64`` of one string column (registered by :func:`connect`).
XXHASH64 = "spark_xxhash64"


def connect(threads: int = 2) -> duckdb.DuckDBPyConnection:
    """A fresh in-memory connection in UTC with the project's SQL functions registered."""
    con = duckdb.connect(config={"threads": max(1, int(threads))})
    con.sql("SET TimeZone = 'UTC'")
    con.create_function(XXHASH64, _xxhash64, [duckdb.sqltype("VARCHAR")], duckdb.sqltype("BIGINT"),
                        type="arrow", null_handling="special")
    return con


def _xxhash64(urls: pa.Array) -> pa.Array:
    from crawl_udfs.url_normalize import fingerprint
    return pa.array([None if u is None else fingerprint(u) for u in urls.to_pylist()], pa.int64())


_views = itertools.count()


def query(con: duckdb.DuckDBPyConnection | None, sql: str, **rels: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """``sql`` over ``rels``, each named in it as ``{name}`` or ``$name``: a view of a fresh name per relation
    (a lazy relation re-binds its views when it runs, so a name is never reused, and a relation passed in
    never meets a table of the same name). Other braces and dollars are left alone. ``con`` None: the
    first relation's connection."""
    n = next(_views)
    views = {}
    for name, rel in rels.items():
        views[name] = f'"_v{n}_{name}"'
        rel.create_view(f"_v{n}_{name}", replace=False)
    text = re.sub(r"\{(\w+)\}|\$(\w+)\b", lambda m: views.get(m.group(1) or m.group(2), m.group(0)), sql)
    return con.sql(text) if con is not None else next(iter(rels.values())).query(f"_v{n}", text)


def union_by_name(con: duckdb.DuckDBPyConnection, a: duckdb.DuckDBPyRelation,
                  b: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """Spark's ``a.unionByName(b, allowMissingColumns=True)``: ``a``'s columns first, NULL where one lacks a column."""
    return query(con, "SELECT * FROM {a} UNION ALL BY NAME SELECT * FROM {b}", a=a, b=b)


def from_spark(con: duckdb.DuckDBPyConnection, df: Any, name: str) -> duckdb.DuckDBPyRelation:
    """``df`` collected as Arrow (one Spark job) and registered in ``con`` as view ``name``."""
    con.register(name, df.toArrow())
    return con.view(name)


def from_spark_all(con: duckdb.DuckDBPyConnection, dfs: dict[str, Any]) -> dict[str, duckdb.DuckDBPyRelation]:
    """:func:`from_spark` of independent DataFrames, by name: their Spark jobs run side by side (one thread
    each; a small collect is mostly the driver's planning and Delta's snapshot work), then each is registered."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, len(dfs)), thread_name_prefix="from-spark") as pool:
        tables = {name: pool.submit(df.toArrow) for name, df in dfs.items()}
        tables = {name: f.result() for name, f in tables.items()}
    for name, table in tables.items():
        con.register(name, table)
    return {name: con.view(name) for name in tables}


def background(call: Callable[[], Any]):
    """``call()`` started in a thread of its own (a Spark collect beside the driver's DuckDB work; it must not
    touch a DuckDB connection): a ``Future``."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1, thread_name_prefix="spark-beside")
    try:
        return pool.submit(call)
    finally:
        pool.shutdown(wait=False)


def register(con: duckdb.DuckDBPyConnection, rel: duckdb.DuckDBPyRelation, name: str) -> duckdb.DuckDBPyRelation:
    """``rel`` computed once into a temporary table ``name`` (what ``keep`` is to the Spark plan)."""
    con.sql(f'DROP TABLE IF EXISTS "{name}"')
    rel.create(name)
    return con.table(name)


def to_spark(spark: Any, rel: duckdb.DuckDBPyRelation, schema: Any):
    """``rel`` as a Spark DataFrame of ``schema`` (a ``StructType``; its columns, in its order)."""
    table = rel.to_arrow_table()
    return spark.createDataFrame(table.select([f.name for f in schema.fields]), schema=schema)


def cast_to(rel: duckdb.DuckDBPyRelation, schema: Any) -> duckdb.DuckDBPyRelation:
    """``rel``'s columns named by ``schema`` (a Spark ``StructType``), in its order, cast to its types."""
    return rel.select(", ".join(f'CAST("{f.name}" AS {sql_type(f.dataType)}) AS "{f.name}"' for f in schema.fields))


def sql_type(t: Any) -> str:
    """DuckDB's type for a Spark ``DataType``."""
    from pyspark.sql import types as T
    simple = {T.LongType: "BIGINT", T.IntegerType: "INTEGER", T.ShortType: "SMALLINT", T.ByteType: "TINYINT",
              T.DoubleType: "DOUBLE", T.FloatType: "FLOAT", T.StringType: "VARCHAR", T.BooleanType: "BOOLEAN",
              T.BinaryType: "BLOB", T.TimestampType: "TIMESTAMPTZ", T.TimestampNTZType: "TIMESTAMP",
              T.DateType: "DATE"}
    for cls, name in simple.items():
        if isinstance(t, cls):
            return name
    if isinstance(t, T.ArrayType):
        return f"{sql_type(t.elementType)}[]"
    if isinstance(t, T.StructType):
        return "STRUCT(" + ", ".join(f'"{f.name}" {sql_type(f.dataType)}' for f in t.fields) + ")"
    if isinstance(t, T.MapType):
        return f"MAP({sql_type(t.keyType)}, {sql_type(t.valueType)})"
    raise TypeError(f"no DuckDB type for Spark type {t}")


def ts(value: dt.datetime) -> str:
    """A ``TIMESTAMPTZ`` SQL literal of a naive-UTC (or aware) datetime, to the microsecond."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return f"TIMESTAMPTZ '{value.astimezone(dt.timezone.utc).isoformat()}'"


def plus_seconds(ts_sql: str, seconds_sql: str) -> str:
    """``ts + seconds`` to the microsecond, as Spark's ``update_transforms.plus_seconds`` (truncated micros)."""
    return f"(({ts_sql}) + to_microseconds(CAST(trunc(({seconds_sql}) * 1e6) AS BIGINT)))"


def literal(value: Any) -> str:
    """A SQL literal of a plain Python value (str, int, float, bool, None, datetime)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"CAST({value} AS BIGINT)"
    if isinstance(value, float):
        return f"CAST({value!r} AS DOUBLE)"
    if isinstance(value, dt.datetime):
        return ts(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


class Sql:
    """A SQL expression (text) with Python's arithmetic, comparison and logic operators, for the rules
    written once over numbers or Spark Columns (``crawl_udfs.change_rate``, ``admission``,
    ``trap_evidence``): ``Sql("x", ints="BIGINT") / 2`` is ``(x / CAST(2 AS BIGINT))``.

    A Python number operand becomes a typed literal: a float DOUBLE, an int of type ``ints`` (the type
    the Spark twin's expression gives it: DOUBLE where it computes in doubles, INTEGER for a ``lit`` of an
    int, BIGINT for longs); a string operand is SQL text. Results keep ``ints``."""

    def __init__(self, text: Any, ints: str = "DOUBLE") -> None:
        self.ints = text.ints if isinstance(text, Sql) else ints
        if isinstance(text, Sql):
            self.text = text.text
        elif isinstance(text, bool):
            self.text = "TRUE" if text else "FALSE"
        elif isinstance(text, int):
            self.text = literal(float(text)) if self.ints == "DOUBLE" else f"CAST({text} AS {self.ints})"
        elif isinstance(text, float):
            self.text = literal(text)
        else:
            self.text = str(text)

    def __str__(self) -> str:
        return self.text

    def _op(self, op: str, other: Any, right: bool = False) -> "Sql":
        o = Sql(other, self.ints)
        a, b = (o, self) if right else (self, o)
        return Sql(f"({a} {op} {b})", self.ints)

    def __add__(self, o): return self._op("+", o)
    def __radd__(self, o): return self._op("+", o, True)
    def __sub__(self, o): return self._op("-", o)
    def __rsub__(self, o): return self._op("-", o, True)
    def __mul__(self, o): return self._op("*", o)
    def __rmul__(self, o): return self._op("*", o, True)
    def __truediv__(self, o): return self._op("/", o)
    def __rtruediv__(self, o): return self._op("/", o, True)
    def __gt__(self, o): return self._op(">", o)
    def __ge__(self, o): return self._op(">=", o)
    def __lt__(self, o): return self._op("<", o)
    def __le__(self, o): return self._op("<=", o)
    def __and__(self, o): return self._op("AND", o)
    def __or__(self, o): return self._op("OR", o)
    def __neg__(self): return Sql(f"(- {self})", self.ints)
    def __invert__(self): return Sql(f"(NOT {self})", self.ints)
