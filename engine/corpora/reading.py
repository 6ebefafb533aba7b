"""Reading corpus files: bytes checked to be UTF-8 text (not binary, not UTF-16, within a size limit) and decoded,
and a corpus's fingerprint by content."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import CHMMError

__all__ = ["MAX_CORPUS_BYTES", "CorpusError", "corpus_fingerprint", "decode_bytes", "read_text"]

MAX_CORPUS_BYTES = 200_000_000
"""The largest corpus read, per file and in all (bytes)."""


class CorpusError(CHMMError):
    """A problem with a user-supplied corpus or corpus parameter (one-sentence message)."""

# --------------------------------------------------------------------------- reading

# Control bytes that are fine in a text file: \t \n \v \f \r and 0x1A (DOS end-of-file).
_ALLOWED_CONTROL = frozenset({0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1A})
_CONTROL_BYTES = np.array([b for b in list(range(0x20)) + [0x7F] if b not in _ALLOWED_CONTROL], dtype=np.intp)
_MAX_CONTROL_SHARE = 0.01
_MAX_NUL_SHARE = 0.0001


def _looks_utf16(data: bytes) -> bool:
    """UTF-16 text without a byte-order mark: most ASCII characters come with a NUL in every second byte."""
    sample = data[:4096]
    if len(sample) < 8:
        return False
    even, odd = sample[0::2], sample[1::2]
    return max(even.count(0), odd.count(0)) > 0.6 * (len(sample) // 2)


def decode_bytes(data: bytes, name: str = "corpus", max_bytes: int = MAX_CORPUS_BYTES) -> str:
    """Decode a corpus file's bytes as UTF-8 text (BOM removed), rejecting non-text input.

    Raises CorpusError if the data is larger than ``max_bytes``, looks binary (NUL bytes beyond
    one in 10,000, or more than 1% control bytes other than tab, newline, CR, form feed, vertical
    tab and 0x1A), is not valid UTF-8, or is empty or whitespace-only.
    """
    size = len(data)
    if size > max_bytes:
        raise CorpusError(f"{name} is too large: {size:,} bytes, the limit is {max_bytes:,} bytes.")
    if size == 0:
        raise CorpusError(f"{name} is empty.")
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or _looks_utf16(data):
        raise CorpusError(f"{name} is UTF-16 text; save it as UTF-8 and try again.")
    counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
    # A stray NUL is tolerated (the Calgary corpus's book1 has one); a binary file has many.
    if counts[0] > max(1, _MAX_NUL_SHARE * size):
        raise CorpusError(f"{name} looks like a binary file (it contains {int(counts[0]):,} NUL bytes).")
    n_control = int(counts[_CONTROL_BYTES].sum())
    if n_control > _MAX_CONTROL_SHARE * size:
        raise CorpusError(
            f"{name} looks like a binary file ({n_control / size:.1%} of its bytes are control characters)."
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"{name} is not valid UTF-8 text (first invalid byte 0x{data[exc.start]:02x} at byte offset {exc.start:,})."
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise CorpusError(f"{name} contains only whitespace.")
    return text


def corpus_fingerprint(corpus: str | Sequence[Any]) -> str:
    """SHA-256 of a corpus as a trainer is given it (one text, or documents with a ``text`` each, separated by a
    NUL), so that a model names its training text by content: the app finds it again in an upload of the same
    file, whatever the file was called or where it lay."""
    digest = hashlib.sha256()
    if isinstance(corpus, str):
        digest.update(corpus.encode("utf-8", "surrogatepass"))
    else:
        for number, document in enumerate(corpus):
            digest.update(b"\x00" if number else b"")
            digest.update(str(getattr(document, "text", document)).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def read_text(path: str | os.PathLike[str], max_bytes: int = MAX_CORPUS_BYTES) -> str:
    """Read a corpus file and return its decoded text (see ``decode_bytes`` for the checks)."""
    p = Path(path)
    name = p.name or str(p)
    if not p.exists():
        raise CorpusError(f"Corpus file {name} was not found ({p}).")
    if p.is_dir():
        raise CorpusError(f"{name} is a directory, not a text file.")
    if not p.is_file():  # a device (/dev/zero) or a pipe would be read without end
        raise CorpusError(f"{name} is not a regular file (a device or a pipe); save the text to a file first.")
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise CorpusError(f"{name} is too large: {size:,} bytes, the limit is {max_bytes:,} bytes.")
        with p.open("rb") as handle:
            data = handle.read(max_bytes + 1)  # bounded even if the file grows while it is read
        if len(data) > max_bytes:
            raise CorpusError(f"{name} is too large: over {max_bytes:,} bytes, the limit.")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise CorpusError(f"{name} cannot be read ({reason}).") from None
    return decode_bytes(data, name=name, max_bytes=max_bytes)
