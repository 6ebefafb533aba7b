"""Corpora of several documents: reading them from files, folders and zip archives.

A corpus is a list of documents, each an independent sequence (its own start; no transition runs from one document
into the next). One file is one document, exactly as :func:`engine.corpora.text.read_text` reads it; a folder gives its
``.txt`` files (recursively, sorted by relative path, hidden files and folders left out); a ``.zip`` gives its file
members (sorted by name; folders, hidden members and ``__MACOSX/`` left out), every one of which must be UTF-8 text.
Every path and member is checked as :func:`engine.corpora.text.decode_bytes` checks a file, and bad input fails with one
:class:`engine.corpora.text.CorpusError` sentence naming the file before anything is trained or written.

Sizes are bounded twice: every file or member, and all of them together, by the same ``max_bytes``. A zip member is
refused from its declared size before it is read, and read in bounded chunks, so an archive whose members expand past
the limit (a zip bomb, or a member whose header lies about its size) never takes more memory than the limit.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from engine.corpora.text import MAX_CORPUS_BYTES, CorpusError, decode_bytes, read_text

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Document:
    """One document of a corpus: its name (file name, path in a folder, or member of an archive) and its text."""

    name: str
    text: str


UNREADABLE_MEMBER = (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError, EOFError)
"""What ``zipfile`` raises for a member a corpus cannot use: a damaged archive or member, an unsupported compression
method (NotImplementedError), an encrypted member (RuntimeError), a truncated one (EOFError)."""


def _hidden(parts: Sequence[str]) -> bool:
    return any(part.startswith(".") or part == "__MACOSX" for part in parts)


class _Budget:
    """The bytes a corpus may still take (``max_bytes`` in all)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0

    def take(self, size: int, name: str) -> None:
        if size > self.max_bytes:
            raise CorpusError(f"{name} is too large: {size:,} bytes, the limit is {self.max_bytes:,} bytes.")
        if self.used + size > self.max_bytes:
            raise CorpusError(
                f"The corpus is too large: with {name} it has more than {self.max_bytes:,} bytes, the limit in all."
            )
        self.used += size


def _read_zip(source: Path | BinaryIO, name: str, budget: _Budget) -> list[Document]:
    try:
        archive = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as exc:
        raise CorpusError(f"{name} is not a readable zip archive ({exc}).") from None
    documents = []
    with archive:
        for info in archive.infolist():
            parts = info.filename.replace("\\", "/").split("/")
            if info.filename.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
                raise CorpusError(
                    f"{name} holds a member whose path leaves the archive ({info.filename}); such archives are refused."
                )
        members = sorted(
            (info for info in archive.infolist() if not info.is_dir() and not _hidden(info.filename.split("/"))),
            key=lambda info: info.filename,
        )
        if not members:
            raise CorpusError(f"{name} holds no files.")
        declared = sum(info.file_size for info in members)
        if declared > budget.max_bytes - budget.used:
            raise CorpusError(
                f"{name} expands to {declared:,} bytes, more than the corpus limit of {budget.max_bytes:,} bytes."
            )
        for info in members:
            label = f"{name}: {info.filename}"
            limit = min(info.file_size, budget.max_bytes - budget.used)
            chunks, size = [], 0
            try:
                with archive.open(info) as member:
                    while True:
                        chunk = member.read(min(_CHUNK, limit + 1 - size))
                        if not chunk:
                            break
                        size += len(chunk)
                        if size > limit:
                            raise CorpusError(f"{label} expands past its declared size or the corpus limit.")
                        chunks.append(chunk)
            except CorpusError:
                raise
            except UNREADABLE_MEMBER as exc:
                raise CorpusError(f"{label} cannot be read from the archive ({exc}).") from None
            budget.take(size, label)
            documents.append(Document(info.filename, decode_bytes(b"".join(chunks), name=label, max_bytes=limit)))
    return documents


def _read_folder(path: Path, budget: _Budget) -> list[Document]:
    files = sorted(
        (p for p in path.rglob("*.txt") if p.is_file() and not _hidden(p.relative_to(path).parts)),
        key=lambda p: p.relative_to(path).as_posix(),
    )
    if not files:
        raise CorpusError(f"{path.name or path} holds no .txt files.")
    documents = []
    for p in files:
        relative = p.relative_to(path).as_posix()
        budget.take(p.stat().st_size, f"{path.name}/{relative}")
        documents.append(Document(relative, read_text(p, max_bytes=budget.max_bytes)))
    return documents


def read_documents(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], max_bytes: int = MAX_CORPUS_BYTES
) -> list[Document]:
    """The documents of the given paths, in order (see the module docstring for files, folders and zips).

    Raises :class:`engine.corpora.text.CorpusError` naming the file for a path that does not exist, a folder without
    ``.txt`` files, a damaged or empty archive, a member or file that is empty, binary, UTF-16 or not UTF-8, and for
    sizes past ``max_bytes`` (per file and in all)."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    if not paths:
        raise CorpusError("No corpus was given.")
    budget = _Budget(max_bytes)
    documents: list[Document] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise CorpusError(f"Corpus file {path.name or path} was not found ({path}).")
        if path.is_dir():
            documents += _read_folder(path, budget)
        elif path.suffix.lower() == ".zip":
            documents += _read_zip(path, path.name, budget)
        else:
            text = read_text(path, max_bytes=max_bytes)
            budget.take(path.stat().st_size, path.name)
            documents.append(Document(path.name, text))
    return documents


def read_zip_bytes(data: bytes, name: str, max_bytes: int = MAX_CORPUS_BYTES) -> list[Document]:
    """The documents of a zip archive held in memory (an upload) named ``name`` in messages, with the checks of
    :func:`read_documents`; ``max_bytes`` bounds what its members expand to."""
    return _read_zip(io.BytesIO(data), name, _Budget(max_bytes))


def corpus_file_name(recorded: object) -> str:
    """The last part of a corpus's path as a model's metadata records it (either slash; "" for none): the file's
    name, never the folder it lay in (models made before names were recorded alone carry the whole path)."""
    return str(recorded or "").replace("\\", "/").rsplit("/", 1)[-1]


def corpus_name(paths: Sequence[str | os.PathLike[str]], documents: Sequence[Document]) -> str:
    """The name a model records for its corpus: the file's name for one file, else the paths' names with the number
    of documents ("chapters (12 documents)"); never the folders they lay in (a model file travels, and its
    summary and exports would show the machine's paths)."""
    if len(paths) == 1 and len(documents) == 1 and not Path(paths[0]).is_dir():
        return corpus_file_name(paths[0])
    names = ", ".join(Path(p).name or str(p) for p in paths)
    return f"{names} ({len(documents)} documents)"
