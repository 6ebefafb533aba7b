"""Corpora of many short sequences: one sequence per line of a text file, or an event log (a CSV file with a sequence
column and a token column: each case one sequence, its rows in the order of an order column when one is named), and
their split by sequence (the last tenth of the sequences is the test part, not the last tenth of each).

A sequence here is a document of :mod:`engine.corpora.documents`: a name and a text (its tokens joined by spaces).
Bad input is refused with one :class:`~engine.corpora.text.CorpusError` sentence before anything is trained.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from engine.corpora.documents import Document
from engine.corpora.text import CorpusError

__all__ = ["FORMATS", "read_event_log", "read_lines", "sequences_from_tokens"]

FORMATS: tuple[str, ...] = ("text", "lines", "csv")
"""How a corpus file holds its sequences: one text (or a folder of documents), one sequence per line, or a CSV of
cases (an event log). The first is the default."""


def read_lines(raw: str, name: str = "corpus") -> list[Document]:
    """One sequence per non-blank line of ``raw`` (named by line number); CorpusError when no line has text."""
    documents = [Document(f"{name}:{n}", line) for n, line in enumerate(raw.splitlines(), 1) if line.strip()]
    if not documents:
        raise CorpusError(f"{name} has no line with text.")
    return documents


def _order_key(values: list[str]) -> Any:
    """The sort key of an order column: numbers when every value reads as a finite number, else the text itself
    (ISO dates and times sort as text)."""
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        return lambda i: values[i]
    if all(math.isfinite(v) for v in numbers):
        return lambda i: numbers[i]
    return lambda i: values[i]


def read_event_log(
    raw: str,
    sequence_column: str,
    token_column: str,
    order_column: str | None = None,
    name: str = "corpus",
) -> list[Document]:
    """The cases of a CSV event log, one sequence per value of ``sequence_column`` (in the order cases first
    appear), its tokens the ``token_column`` values of its rows in file order, or sorted by ``order_column`` (stable;
    numerically when every value is a number). Whitespace inside a token becomes ``_`` (a token is one symbol).
    CorpusError, one sentence: a file without a header, a named column missing, a row without its token."""
    reader = csv.reader(io.StringIO(raw))
    header = next(reader, None)
    if not header or not any(h.strip() for h in header):
        raise CorpusError(f"{name} has no header row; a CSV corpus names its columns in its first row.")
    header = [h.strip() for h in header]
    wanted = [c for c in (sequence_column, token_column, order_column) if c is not None]
    missing = [c for c in wanted if c not in header]
    if missing:
        raise CorpusError(
            f"{name} has no column {missing[0]!r}; its columns are {', '.join(repr(h) for h in header[:12])}."
        )
    where = [header.index(c) for c in wanted]
    cases: dict[str, list[tuple[str, str]]] = {}
    for row_number, row in enumerate(reader, 2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) <= max(where):
            raise CorpusError(f"Row {row_number} of {name} has {len(row)} cells, fewer than the header's columns.")
        case, token = row[where[0]].strip(), "_".join(row[where[1]].split())
        if not token:
            raise CorpusError(f"Row {row_number} of {name} has no {token_column!r} value.")
        order = row[where[2]].strip() if order_column is not None else ""
        cases.setdefault(case, []).append((token, order))
    if not cases:
        raise CorpusError(f"{name} has a header but no rows.")
    documents = []
    for case, rows in cases.items():
        if order_column is not None:
            key = _order_key([o for _, o in rows])
            rows = [rows[i] for i in sorted(range(len(rows)), key=key)]
        documents.append(Document(case, " ".join(t for t, _ in rows)))
    return documents


def sequences_from_tokens(sequences: Sequence[Sequence[Any]]) -> list[Document]:
    """Sequences given in memory (lists of tokens: strings, or integers written as their decimal text) as documents
    of tokens; CorpusError for a token with whitespace inside or an empty one."""
    documents = []
    for n, sequence in enumerate(sequences):
        tokens = [str(t) for t in sequence]
        bad = next((t for t in tokens if not t or t.split() != [t]), None)
        if bad is not None:
            raise CorpusError(f"Sequence {n} has the token {bad!r}; a token is non-empty and has no whitespace.")
        documents.append(Document(f"sequence {n}", " ".join(tokens)))
    return documents
