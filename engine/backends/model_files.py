"""Model files: load any model file by its header (dense or sparse CHMM; a peer learner's file is refused with the
reason) and save atomically. A file is untrusted input (:mod:`engine.model.archive`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.backends import engines
from engine.model import dense as model_io
from engine.model.archive import MAX_MODEL_BYTES, PEER_FORMAT, read_header
from engine.model.archive import load_bytes as archive_load_bytes
from engine.model.dense import CHMM


def load_model(path: str | Path, max_bytes: int = MAX_MODEL_BYTES) -> CHMM:
    """Load a model file, dense or sparse, told apart by its header (clear :class:`engine.model.dense.ModelFormatError`
    on a missing, damaged or foreign file). The file is untrusted input: its arrays are checked against its layout and
    all together against ``max_bytes`` before they are inflated (:mod:`engine.model.archive`)."""
    header = read_header(path, max_bytes) if Path(path).is_file() else None
    kind = header.get("format") if header is not None else None
    if kind == PEER_FORMAT:
        raise model_io.ModelFormatError(
            f"{path}: a {header.get('kind')!r} peer-learner model; only `chmm score` reads those (this needs a CHMM)"
        )
    del header  # its reader parses it again: never two parsed headers at once (issue 51: +812 MB for a `{}` header)
    return engines.reader_for(kind)(path, max_bytes=max_bytes)


def load_bytes(path: str | Path) -> int:
    """The most memory loading the model file ``path`` takes (:func:`engine.model.archive.load_bytes`: from its zip
    directory, nothing inflated), which a server reserves before it loads one."""
    return archive_load_bytes(path)


def save_model(model: Any, path: str | Path) -> None:
    """Save atomically (temporary file + rename): a failure leaves an existing file untouched."""
    model.save(path)
