"""Differential checks of the driver engine (``jobs/duck_engine.py``): a DuckDB transform against its Spark twin.

``assert_same(expected_df, actual_rel)``: the same column names in the same order, the same types
(Arrow's, list element names aside), and the same rows as a multiset (floats within ``rel_tol``, timestamps
within a microsecond; rows paired by their values, so no key is needed). ``duck_inputs(con, **dfs)``: Spark DataFrames
registered in ``con`` as relations of the same names (one ``toArrow`` each).
"""

from __future__ import annotations

import datetime as dt
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


_SLACK = "~"        # where a float or a timestamp stood in a row's exact part
_MICROSECOND = dt.timedelta(microseconds=1)


def _split(v: Any, loose: list) -> Any:
    """``v`` with each float and timestamp replaced by ``_SLACK`` and appended to ``loose``."""
    if isinstance(v, (float, dt.datetime)):
        loose.append(v)
        return ("nan",) if isinstance(v, float) and math.isnan(v) else _SLACK
    if isinstance(v, dict):
        return tuple((k, _split(x, loose)) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return tuple(_split(x, loose) for x in v)
    return v


def _close(e: Any, a: Any, rel_tol: float) -> bool:
    """Two floats within ``rel_tol`` (or both NaN); two timestamps within a microsecond (each engine rounds
    ``time + float seconds`` to the microsecond, and a last-bit difference in the float can tip it)."""
    if isinstance(e, float) and isinstance(a, float):
        return (math.isnan(e) and math.isnan(a)) or math.isclose(e, a, rel_tol=rel_tol, abs_tol=1e-300)
    if isinstance(e, dt.datetime) and isinstance(a, dt.datetime):
        return abs(e - a) <= _MICROSECOND
    return False


def rows(table: pa.Table) -> dict[str, list[tuple[tuple, list]]]:
    """The rows grouped by their exact part (all but floats and timestamps), as ``(row, loose values)``."""
    groups: dict[str, list[tuple[tuple, list]]] = {}
    for r in table.to_pylist():
        loose: list = []
        exact = repr(tuple(_split(v, loose) for v in r.values()))
        groups.setdefault(exact, []).append((tuple(r.values()), loose))
    return groups


def unmatched(expected: pa.Table, actual: pa.Table, rel_tol: float) -> tuple[list[tuple], list[tuple]]:
    """The rows of each side with no counterpart on the other: the same exact part, and floats within
    ``rel_tol``. Matched greedily within each group of equal exact parts (rounding both sides to a number
    of digits instead would fail whenever a value sits on a rounding boundary)."""
    exp, act = rows(expected), rows(actual)
    only_e: list[tuple] = []
    only_a: list[tuple] = []
    for key in exp.keys() | act.keys():
        left = list(act.get(key, []))
        for row, loose in exp.get(key, []):
            hit = next((i for i, (_, other) in enumerate(left)
                        if all(_close(x, y, rel_tol) for x, y in zip(loose, other))), None)
            if hit is None:
                only_e.append(row)
            else:
                left.pop(hit)
        only_a.extend(row for row, _ in left)
    return only_e, only_a


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
    only_e, only_a = unmatched(exp, act, rel_tol)
    if only_e or only_a:
        raise AssertionError(f"rows differ ({exp.num_rows} spark, {act.num_rows} duck; {len(only_e)} and {len(only_a)}"
                             f" unmatched)\n only spark: {only_e[:3]}\n only duck:  {only_a[:3]}"
                             f"\n columns: {exp.column_names}")
