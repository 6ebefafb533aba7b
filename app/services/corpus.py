"""Uploading a corpus (one text file, several, or a zip of them) and what the Train page shows of it."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app import config, sessions
from app.services import UserError, format_bytes, visible
from engine import text
from engine.files import atomic_write_bytes

PREVIEW_CHARS = 600


def decode_upload(contents: str | None, filename: str | None, max_bytes: int) -> bytes:
    """The bytes of a ``dcc.Upload`` ``contents`` data URI (``data:<type>;base64,<payload>``); UserError when
    nothing arrived, the payload is damaged, or the file is larger than ``max_bytes`` (checked before decoding)."""
    name = filename or "the file"
    if not contents:
        raise UserError("No file arrived; choose or drop a file.")
    header, sep, payload = contents.partition(",")
    if not sep or not header.startswith("data:") or ";base64" not in header:
        raise UserError(f"{name} arrived damaged (not a base64 data URI); try again.")
    estimated = len(payload) * 3 // 4
    if estimated > max_bytes + 2:
        limit = format_bytes(max_bytes)
        raise UserError(f"{name} is too large: about {format_bytes(estimated)}, the limit is {limit}.")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise UserError(f"{name} arrived damaged (invalid base64); try again.") from None
    if len(data) > max_bytes:
        raise UserError(f"{name} is too large: {format_bytes(len(data))}, the limit is {format_bytes(max_bytes)}.")
    return data


# ------------------------------------------------------------------------------------------ corpus
@dataclass
class CorpusInfo:
    """The session's corpus file: its name, size in bytes and characters."""

    name: str
    bytes: int
    characters: int


def store_corpus(folder: Path, contents: str | None, filename: str | None) -> CorpusInfo:
    """Validate an uploaded corpus (empty, binary, invalid UTF-8, too large: :class:`engine.text.CorpusError`
    with a clear message) and keep it as the session's corpus; a rejected upload keeps the previous corpus."""
    name = filename or "upload.txt"
    limit = config.max_upload_bytes()
    data = decode_upload(contents, name, limit)
    corpus_text = text.decode_bytes(data, name=name, max_bytes=limit)
    return _keep_corpus(folder, corpus_text, name, len(data))


def use_sample_corpus(folder: Path) -> CorpusInfo:
    """Make the bundled sample corpus (``sample_models/carroll-alice.txt``) the session's corpus."""
    if not config.SAMPLE_CORPUS.is_file():
        raise UserError("The bundled sample corpus is missing from this installation.")
    corpus_text = text.read_text(config.SAMPLE_CORPUS)
    return _keep_corpus(folder, corpus_text, config.SAMPLE_CORPUS.name, config.SAMPLE_CORPUS.stat().st_size)


def _keep_corpus(folder: Path, corpus_text: str, name: str, size: int) -> CorpusInfo:
    info = CorpusInfo(name=name, bytes=size, characters=len(corpus_text))
    atomic_write_bytes(folder / sessions.CORPUS, corpus_text.encode("utf-8"))
    atomic_write_bytes(folder / sessions.CORPUS_INFO, json.dumps(asdict(info)).encode("utf-8"))
    return info


def corpus_info(folder: Path) -> CorpusInfo | None:
    """The session's corpus, or None before one is uploaded."""
    try:
        info = json.loads((folder / sessions.CORPUS_INFO).read_text(encoding="utf-8"))
        if not (folder / sessions.CORPUS).is_file():
            return None
        return CorpusInfo(**info)
    except (OSError, ValueError, TypeError):
        return None


def read_corpus(folder: Path) -> tuple[str, CorpusInfo]:
    """The session corpus's text and info; UserError when there is none yet."""
    info = corpus_info(folder)
    if info is None:
        raise UserError("No corpus yet: upload a .txt file or use the sample corpus first.")
    return (folder / sessions.CORPUS).read_text(encoding="utf-8"), info


def corpus_preview(folder: Path, normalisation: str = "paper", validation: float = 0.1) -> dict[str, Any]:
    """Size, alphabet, split sizes and the start of the normalised training text of the session's corpus, as
    ``engine.text.prepare_corpus`` prepares it for training (CorpusError when it cannot be trained on)."""
    corpus_text, info = read_corpus(folder)
    corpus = text.prepare_corpus(corpus_text, normalisation=normalisation, validation=validation, name=info.name)
    return {
        "name": info.name,
        "bytes": info.bytes,
        "characters": info.characters,
        "normalisation": normalisation,
        "alphabet_size": corpus.n_symbols,
        "alphabet": "".join(visible(s) for s in corpus.symbols),
        "vocabulary": len(corpus.vocabulary) if corpus.vocabulary is not None else None,
        "train": len(corpus.train),
        "validation": len(corpus.validation),
        "test": len(corpus.test),
        "preview": corpus.train_text[:PREVIEW_CHARS],
    }
