"""Model files: load any model file by its header (dense or sparse CHMM; a peer learner's file is refused with the
reason) and save atomically. A file is untrusted input (:mod:`engine.model.archive`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.backends import engines
from engine.model import dense as model_io
from engine.model.archive import MAX_MODEL_BYTES, PEER_FORMAT, read_header
from engine.model.dense import CHMM


def load_model(path: str | Path, max_bytes: int = MAX_MODEL_BYTES) -> CHMM:
    """Load a model file, dense or sparse, told apart by its header (clear :class:`engine.model.dense.ModelFormatError`
    on a missing, damaged or foreign file). The file is untrusted input: its arrays are checked against its layout and
    all together against ``max_bytes`` before they are inflated (:mod:`engine.model.archive`)."""
    header = read_header(path) if Path(path).is_file() else None
    kind = header.get("format") if header is not None else None
    if kind == PEER_FORMAT:
        raise model_io.ModelFormatError(
            f"{path}: a {header.get('kind')!r} peer-learner model; only `chmm score` reads those (this needs a CHMM)"
        )
    return engines.reader_for(kind)(path, max_bytes=max_bytes)


def save_model(model: Any, path: str | Path) -> None:
    """Save atomically (temporary file + rename): a failure leaves an existing file untouched."""
    model.save(path)
