"""Uploading a corpus (one text file, several, or a zip of them) and what the Train page shows of it."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app import config, sessions
from app.services import UserError, file_name, format_bytes, kept, visible
from engine import api
from engine.errors import CHMMError
from engine.files import atomic_write_bytes, atomic_write_json

PREVIEW_CHARS = 600
PREVIEW_SYMBOLS = 300
"""The most symbols of the alphabet the preview lists (a word model has thousands)."""


def _over(size: int, limit: int) -> str:
    """ "<size>, the limit is <limit>", in bytes where the rounded figures would read the same."""
    if format_bytes(size) == format_bytes(limit):
        return f"{size:,} bytes, the limit is {limit:,} bytes"
    return f"{format_bytes(size)}, the limit is {format_bytes(limit)}"


def decode_upload(
    contents: str | None, filename: str | None, max_bytes: int, remedy: str = "", folder: Path | None = None
) -> bytes:
    """The bytes of an upload widget's ``contents``: a file that arrived through the upload route into ``folder``'s
    uploads (:func:`app.sessions.upload_path`), or a ``dcc.Upload`` data URI (``data:<type>;base64,<payload>``);
    UserError when nothing arrived, the payload is damaged, or the file is larger than ``max_bytes`` (checked before
    reading or decoding; the sentence ends with ``remedy``, what to do, when given)."""
    name = filename if isinstance(filename, str) and filename else "the file"
    if not contents:
        raise UserError("No file arrived; choose or drop a file.")
    path = sessions.upload_path(folder, contents) if folder is not None else None
    if path is not None:
        size = path.stat().st_size
        if size > max_bytes:
            raise UserError(f"{name} is too large: {_over(size, max_bytes)}{remedy}.")
        return path.read_bytes()
    if not isinstance(contents, str):
        raise UserError(f"{name} arrived damaged (not a base64 data URI); try again.")
    header, sep, payload = contents.partition(",")
    if not sep or not header.startswith("data:") or ";base64" not in header:
        raise UserError(f"{name} arrived damaged (not a base64 data URI); try again.")
    estimated = len(payload) * 3 // 4
    if estimated > max_bytes + 2:
        raise UserError(f"{name} is too large: about {_over(estimated, max_bytes)}{remedy}.")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise UserError(f"{name} arrived damaged (invalid base64); try again.") from None
    if len(data) > max_bytes:
        raise UserError(f"{name} is too large: {_over(len(data), max_bytes)}{remedy}.")
    return data


def upload_size(folder: Path, contents: str | None) -> int:
    """The bytes of an upload widget's ``contents`` (its file's size, or a data URI's payload estimated), before any
    of it is read."""
    path = sessions.upload_path(folder, contents)
    return path.stat().st_size if path is not None else len(contents or "") * 3 // 4


# ------------------------------------------------------------------------------------------ corpus
@dataclass
class CorpusInfo:
    """The session's corpus: its name, size in bytes and characters, and how many documents it has."""

    name: str
    bytes: int
    characters: int
    documents: int = 1


def store_corpus(folder: Path, contents: str | list[str] | None, filename: str | list[str] | None) -> CorpusInfo:
    """Validate an upload of one or several files (each a UTF-8 text file or a ``.zip`` of them) and keep it as the
    session's corpus: one text, or several documents (independent sequences, see :mod:`engine.corpora.documents`). Every
    file, every zip member and all of them together are checked (empty, binary, invalid UTF-8, too large, a zip
    that expands past the limit: one clear message naming the file); a rejected upload keeps the previous corpus."""
    contents_list = contents if isinstance(contents, list) else [contents]
    names = filename if isinstance(filename, list) else [filename]
    if not contents_list or len(names) != len(contents_list):
        raise UserError("No file arrived; choose or drop a file.")
    if not all(c is None or isinstance(c, str) for c in contents_list):  # a forged request (was an HTTP 500)
        raise UserError("The upload arrived damaged (its contents are not a file's data); try again.")
    limit = config.max_upload_bytes()
    estimated = sum(upload_size(folder, c) for c in contents_list)
    if len(contents_list) > 1 and estimated > limit + 2 * len(contents_list):
        raise UserError(
            f"The {len(contents_list)} files are too large together: about {format_bytes(estimated)}, the limit is "
            f"{format_bytes(limit)} in all."
        )
    read: list[api.corpora.Document] = []
    size = 0
    for data_uri, given in zip(contents_list, names, strict=True):
        name = given or "upload.txt"
        data = decode_upload(data_uri, name, limit - size, folder=folder)
        size += len(data)
        if name.lower().endswith(".zip"):
            read += _zip_documents(data, name, limit)
        else:
            read.append(api.corpora.Document(name, api.corpora.decode_bytes(data, name=name, max_bytes=limit)))
    _check_trainable(read)
    sessions.check_space(folder, size, "This corpus")
    if len(read) == 1:
        return _keep_corpus(folder, read[0].text, read[0].name, size)
    return _keep_documents(folder, read, ", ".join(n or "upload.txt" for n in names), size)


SHORT_CORPUS_CHARACTERS = 10_000
"""A corpus with fewer characters is checked at upload for a split it can be trained on (a longer one always has
one): it is refused then, not at Start."""


def _check_trainable(read: list[api.corpora.Document]) -> None:
    """UserError (one sentence) for a short upload that no normalisation can split into training, validation and
    test text with the Train page's defaults."""
    if sum(len(d.text) for d in read) >= SHORT_CORPUS_CHARACTERS:
        return
    given: Any = read[0].text if len(read) == 1 else read
    name = read[0].name if len(read) == 1 else "the upload"
    problems = []
    for normalisation in api.CHOICES.NORMALISATIONS:
        try:
            api.corpora.prepare_corpus(given, normalisation=normalisation, name=name)
            return
        except CHMMError as exc:
            problems.append(str(exc))
    raise UserError(f"{problems[0]} It cannot be trained on; upload a longer text.")


def _zip_documents(data: bytes, name: str, limit: int) -> list[api.corpora.Document]:
    """The documents of an uploaded zip (read in memory by :func:`engine.corpora.documents.read_zip_bytes`, with the
    size checks of every corpus: members and all of them together within ``limit``)."""
    return [api.corpora.Document(f"{name}: {d.name}", d.text) for d in api.corpora.read_zip_bytes(data, name, limit)]


def _keep_documents(folder: Path, read: list[api.corpora.Document], name: str, size: int) -> CorpusInfo:
    """Keep several documents: their list (``corpus-documents.json``) and, for previews and references, their texts
    joined by blank lines (``corpus.txt``)."""
    info = CorpusInfo(
        name=f"{name} ({len(read)} documents)",
        bytes=size,
        characters=sum(len(d.text) for d in read),
        documents=len(read),
    )
    atomic_write_json(folder / sessions.CORPUS_DOCUMENTS, [{"name": d.name, "text": d.text} for d in read])
    atomic_write_bytes(folder / sessions.CORPUS, "\n\n".join(d.text for d in read).encode("utf-8"))
    atomic_write_bytes(folder / sessions.CORPUS_INFO, json.dumps(asdict(info)).encode("utf-8"))
    return info


def use_sample_corpus(folder: Path) -> CorpusInfo:
    """Make the bundled sample corpus (``sample_models/carroll-alice.txt``) the session's corpus."""
    if not config.SAMPLE_CORPUS.is_file():
        raise UserError("The bundled sample corpus is missing from this installation.")
    corpus_text = api.corpora.read_text(config.SAMPLE_CORPUS)
    return _keep_corpus(folder, corpus_text, config.SAMPLE_CORPUS.name, config.SAMPLE_CORPUS.stat().st_size)


def _keep_corpus(folder: Path, corpus_text: str, name: str, size: int) -> CorpusInfo:
    info = CorpusInfo(name=name, bytes=size, characters=len(corpus_text))
    (folder / sessions.CORPUS_DOCUMENTS).unlink(missing_ok=True)
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
    except (OSError, ValueError, TypeError):  # json's ValueError: a damaged record
        return None


def read_corpus(folder: Path) -> tuple[str | list[api.corpora.Document], CorpusInfo]:
    """The session corpus (its text, or its documents when it has several) and info; UserError when there is none
    yet."""
    info = corpus_info(folder)
    if info is None:
        raise UserError("No corpus yet: upload a .txt file or use the sample corpus first.")
    if info.documents > 1:
        try:
            listed = json.loads((folder / sessions.CORPUS_DOCUMENTS).read_text(encoding="utf-8"))
            pairs = [(str(d["name"]), str(d["text"])) for d in listed]
        except (OSError, ValueError, TypeError, KeyError):  # json's ValueError: a damaged list
            raise UserError("The session's documents cannot be read; upload the corpus again.") from None
        return [api.corpora.Document(name, text) for name, text in pairs], info
    return (folder / sessions.CORPUS).read_text(encoding="utf-8"), info


def joined_corpus_text(folder: Path) -> str | None:
    """The session corpus as one text (several documents joined by blank lines), for previews and as the reference
    of generalized words; None when there is none."""
    if corpus_info(folder) is None:
        return None
    return (folder / sessions.CORPUS).read_text(encoding="utf-8")


def corpus_preview(
    folder: Path, normalisation: str = "paper", validation: float = 0.1, unit: str = "characters"
) -> dict[str, Any]:
    """Size, alphabet, split sizes and the start of the normalised training text of the session's corpus, as
    ``engine.corpora.text.prepare_corpus`` prepares it for training with symbols of ``unit`` (CorpusError when it
    cannot be trained on)."""
    given, info = read_corpus(folder)
    corpus = api.corpora.prepare_corpus(
        given, normalisation=normalisation, validation=validation, name=info.name, unit=unit
    )
    shown = corpus.symbols[:PREVIEW_SYMBOLS]
    alphabet = "".join(visible(s) for s in shown) if unit == "characters" else " ".join(shown)
    if len(corpus.symbols) > len(shown):
        alphabet += f" … and {len(corpus.symbols) - len(shown):,} more"
    return {
        "name": info.name,
        "documents": info.documents,
        "bytes": info.bytes,
        "characters": info.characters,
        "normalisation": corpus.normalisation,
        "unit": unit,
        "alphabet_size": corpus.n_symbols,
        "alphabet": alphabet,
        "vocabulary": len(corpus.vocabulary) if corpus.vocabulary is not None else None,
        "train": len(corpus.train),
        "validation": len(corpus.validation),
        "test": len(corpus.test),
        "preview": corpus.train_text[:PREVIEW_CHARS],
    }


def _trained_on_session_corpus(folder: Path, model: Any, info: CorpusInfo) -> bool:
    """Whether ``model`` was trained on the session's corpus: by content where the model names its text so
    (``corpus_sha256``, :func:`engine.api.corpora.corpus_fingerprint`: a model made by ``chmm train`` elsewhere and the
    same file uploaded here), else by the file's name (models made before that; a path's last part)."""
    wanted = model.metadata.get("corpus_sha256")
    if isinstance(wanted, str) and wanted:
        path = folder / sessions.CORPUS
        return (
            kept.kept(("fingerprint",), [path], lambda: api.corpora.corpus_fingerprint(read_corpus(folder)[0]))
            == wanted
        )
    trained_on = model.metadata.get("corpus")
    return isinstance(trained_on, str) and file_name(trained_on) == info.name


def reference_corpus(folder: Path, model: Any) -> str | None:
    """The raw text the model was trained on, as far as the session has it: the session's corpus when the model
    names it as its corpus (the models trained in this session), the bundled sample corpus when the model was
    trained on that; None otherwise (an uploaded model, or one trained before another corpus was uploaded). It
    marks generalized words seen/novel and gives the default prefix and the placeholder's share in training."""
    info = corpus_info(folder)
    if info is not None and _trained_on_session_corpus(folder, model, info):
        return (folder / sessions.CORPUS).read_text(encoding="utf-8")  # what joined_corpus_text reads, checked once
    for text in (config.SAMPLE_CORPUS, config.start_corpus()):
        if text is not None and text.is_file() and _trained_on_file(model, text):
            return api.corpora.read_text(text)
    return None


def _trained_on_file(model: Any, path: Path) -> bool:
    """Whether ``model`` was trained on the server's text file ``path`` (the sample corpus, or the start model's
    text that the operator gave with ``chmm app --corpus``): by content where the model names its text so, else by
    the file's name. The file's fingerprint is kept while it is unchanged."""
    wanted = model.metadata.get("corpus_sha256")
    if isinstance(wanted, str) and wanted:
        return (
            kept.kept(("fingerprint",), [path], lambda: api.corpora.corpus_fingerprint(api.corpora.read_text(path)))
            == wanted
        )
    return file_name(model.metadata.get("corpus")) == path.name
