"""Differential checks of the driver engine (``jobs/duck_engine.py``): a DuckDB transform against its Spark twin.

``assert_same(expected_df, actual_rel)``: the same column names in the same order, the same types
(Arrow's, list element names aside), and the same rows as a multiset (floats to ``rel_tol``; rows
ordered by their values, so no key is needed). ``duck_inputs(con, **dfs)``: Spark DataFrames
registered in ``con`` as relations of the same names (one ``toArrow`` each).
"""

from __future__ import annotations

import math
import re
from typing import Any

import pyarrow as pa


def duck_inputs(con, **dfs):
    """Each Spark DataFrame registered in ``con`` under its keyword; the relations, in a dict."""
    from jobs.duck_engine import from_spark
    return {name: from_spark(con, df, name) for name, df in dfs.items()}


def type_name(t: pa.DataType) -> str:
    """An Arrow type as text, list element names dropped (Spark says ``element``, DuckDB ``l``)."""
    return re.sub(r"list<[a-z_]+: ", "list<", str(t))


def _norm(v: Any, rel_tol: float) -> Any:
    if isinstance(v, float):
        return ("nan",) if math.isnan(v) else float(f"{v:.{max(1, int(-math.log10(rel_tol)))}g}")
    if isinstance(v, dict):
        return tuple((k, _norm(x, rel_tol)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x, rel_tol) for x in v)
    if isinstance(v, bytes):
        return v
    return v


def _key(row: tuple) -> str:
    return repr(row)


def rows(table: pa.Table, rel_tol: float) -> list[tuple]:
    return sorted((tuple(_norm(v, rel_tol) for v in r.values()) for r in table.to_pylist()), key=_key)


def assert_same(expected_df, actual_rel, *, rel_tol: float = 1e-9, columns: list[str] | None = None) -> None:
    """``actual_rel`` (DuckDB) has ``expected_df``'s (Spark) columns, types and rows.

    ``columns``: compare only these (both sides), for an output where Spark picks an arbitrary row
    (``dropDuplicates``) in the other columns; say why at the call."""
    exp = expected_df.toArrow()
    act = actual_rel.to_arrow_table()
    if columns is not None:
        exp, act = exp.select(columns), act.select(columns)
    assert exp.column_names == act.column_names, f"columns differ:\n spark {exp.column_names}\n duck  {act.column_names}"
    for f in exp.schema:
        a = act.schema.field(f.name)
        assert type_name(f.type) == type_name(a.type), f"{f.name}: spark {f.type}, duck {a.type}"
    e, a = rows(exp, rel_tol), rows(act, rel_tol)
    if e != a:
        only_e = [r for r in e if r not in a][:5]
        only_a = [r for r in a if r not in e][:5]
        raise AssertionError(f"rows differ ({len(e)} spark, {len(a)} duck)\n only spark: {only_e}\n only duck:  {only_a}"
                             f"\n columns: {exp.column_names}")
