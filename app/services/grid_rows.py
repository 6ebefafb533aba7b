"""Tables kept on the server in columns and served to a grid a block at a time (ag-grid's infinite row model): a
block of rows in the order a sort model asks, among the rows a filter model keeps, both as ag-grid sends them. A
table of a million transitions stays a few numpy arrays; the page receives the hundred rows it draws.

String columns are codes into sorted categories, so that a sort is an integer sort and a text filter reads each
category once (a transition's "from" is one of the graph's clones)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.services import UserError

BLOCK_ROWS = 100
"""Rows a grid asks for at a time (its ``cacheBlockSize``); a request for more is cut to :data:`MAX_BLOCK_ROWS`."""
MAX_BLOCK_ROWS = 1_000


@dataclass(frozen=True)
class Text:
    """A string column: ``codes`` index ``categories``, which are sorted (so that codes sort as the strings do)."""

    codes: np.ndarray
    categories: list[str]

    @classmethod
    def of(cls, values: list[str]) -> Text:
        """The column of ``values`` (one per row)."""
        categories, codes = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
        return cls(codes.astype(np.int64), [str(c) for c in categories.tolist()])

    @classmethod
    def indexed(cls, labels: list[str], index: np.ndarray) -> Text:
        """The column of ``labels[index]`` (e.g. each transition's source clone's label), sorted once over labels."""
        order = np.argsort(np.asarray(labels, dtype=object).astype(str), kind="stable")
        rank = np.empty(len(labels), dtype=np.int64)
        rank[order] = np.arange(len(labels))
        return cls(rank[np.asarray(index, dtype=np.int64)], [labels[i] for i in order.tolist()])


@dataclass(frozen=True)
class Table:
    """Columns of equal length: numpy arrays of numbers (NaN: no value) or :class:`Text` columns, in the order the
    table starts in (the most flow first)."""

    columns: dict[str, np.ndarray | Text]
    rows: int

    def order(self, sort_model: Any = None, filter_model: Any = None) -> np.ndarray:
        """The rows' indices the grid shows: those ``filter_model`` keeps, in the order of ``sort_model`` (ties and
        no sort: the table's own order)."""
        keep = np.ones(self.rows, dtype=bool)
        for key, spec in (filter_model or {}).items():
            if key in self.columns and isinstance(spec, dict):
                keep &= self._kept(self.columns[key], spec)
        rows = np.flatnonzero(keep)
        keys = []
        for item in reversed([s for s in sort_model or [] if isinstance(s, dict) and s.get("colId") in self.columns]):
            column = self.columns[item["colId"]]
            values = column.codes[rows] if isinstance(column, Text) else np.nan_to_num(column[rows], nan=-np.inf)
            keys.append(-values if item.get("sort") == "desc" else values)
        if keys:  # the last key is the first sort (a stable sort: ties keep the table's order)
            rows = rows[np.lexsort(keys)]
        return rows

    def _kept(self, column: np.ndarray | Text, spec: dict[str, Any]) -> np.ndarray:
        """The rows a column's filter (ag-grid's model of one condition, or of two joined by AND / OR) keeps."""
        if "conditions" in spec:
            parts = [self._kept(column, c) for c in spec["conditions"] if isinstance(c, dict)]
            if not parts:
                return np.ones(self.rows, dtype=bool)
            joined = np.logical_or if spec.get("operator") == "OR" else np.logical_and
            return joined.reduce(parts)
        if isinstance(column, Text):
            return _text_kept(column.categories, spec)[column.codes]
        return _number_kept(column, spec)

    def rows_of(self, indices: np.ndarray) -> list[dict[str, Any]]:
        """The rows ``indices`` as plain dicts (None for a missing number)."""
        out: dict[str, list[Any]] = {}
        for key, column in self.columns.items():
            if isinstance(column, Text):
                out[key] = [column.categories[c] for c in column.codes[indices].tolist()]
            else:
                values = column[indices].tolist()
                out[key] = values if column.dtype.kind in "iub" else [None if v != v else v for v in values]
        return [dict(zip(out, values, strict=True)) for values in zip(*out.values(), strict=True)]


def _number_kept(values: np.ndarray, spec: dict[str, Any]) -> np.ndarray:
    """ag-grid's number filter over ``values`` (greater than, in range, blank ...)."""
    kind = spec.get("type", "equals")
    if kind == "blank":
        return np.isnan(values)
    if kind == "notBlank":
        return ~np.isnan(values)
    try:
        low = float(spec.get("filter"))
        high = float(spec.get("filterTo")) if kind == "inRange" else low
    except (TypeError, ValueError):
        return np.ones(len(values), dtype=bool)  # a number not typed yet: no filter, as the grid has it
    with np.errstate(invalid="ignore"):
        tests: dict[str, Callable[[], np.ndarray]] = {
            "equals": lambda: values == low,
            "notEqual": lambda: values != low,
            "greaterThan": lambda: values > low,
            "greaterThanOrEqual": lambda: values >= low,
            "lessThan": lambda: values < low,
            "lessThanOrEqual": lambda: values <= low,
            "inRange": lambda: (values > min(low, high)) & (values < max(low, high)),
        }
        if kind not in tests:
            raise UserError(f"The table cannot filter numbers by {str(kind)[:30]!r}.")
        return tests[kind]()


def _text_kept(categories: list[str], spec: dict[str, Any]) -> np.ndarray:
    """ag-grid's text filter (case-insensitive, as the grid's) over each category once."""
    kind = spec.get("type", "contains")
    if kind in ("blank", "notBlank"):
        blank = np.array([not c.strip() for c in categories], dtype=bool)
        return blank if kind == "blank" else ~blank
    wanted = str(spec.get("filter") or "").lower()
    tests: dict[str, Callable[[str], bool]] = {
        "contains": lambda c: wanted in c,
        "notContains": lambda c: wanted not in c,
        "equals": lambda c: c == wanted,
        "notEqual": lambda c: c != wanted,
        "startsWith": lambda c: c.startswith(wanted),
        "endsWith": lambda c: c.endswith(wanted),
    }
    if kind not in tests:
        raise UserError(f"The table cannot filter text by {str(kind)[:30]!r}.")
    return np.array([tests[kind](c.lower()) for c in categories], dtype=bool)


def model_key(sort_model: Any, filter_model: Any) -> str:
    """A sort and a filter model as one key (the order they give is kept per key)."""
    return json.dumps([sort_model or [], filter_model or {}], sort_keys=True, default=str)[:4_000]


def block(request: Any) -> tuple[int, int]:
    """The rows ``[start, end)`` a grid's block request asks for, bounded by :data:`MAX_BLOCK_ROWS`."""
    request = request if isinstance(request, dict) else {}
    try:
        start = max(0, int(request.get("startRow") or 0))
        end = int(request.get("endRow") or start + BLOCK_ROWS)
    except (TypeError, ValueError):
        start, end = 0, BLOCK_ROWS
    return start, max(start, min(end, start + MAX_BLOCK_ROWS))


def write_csv(table: Table, order: np.ndarray, headers: list[tuple[str, str]], path: Path) -> None:
    """The rows ``order`` of ``table`` as CSV with the grid's ``headers`` ((key, header) pairs), a block at a time."""

    def lines() -> Iterator[str]:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow([header for _, header in headers])
        for start in range(0, len(order), 10_000):
            for row in table.rows_of(order[start : start + 10_000]):
                writer.writerow(["" if row.get(key) is None else row.get(key) for key, _ in headers])
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
        yield buffer.getvalue()

    with path.open("w", encoding="utf-8", newline="") as out:
        out.writelines(lines())
