"""The door's corpora (:mod:`engine.corpora`) and a text read under a model: reading text, documents, zip
archives, lines and event logs, decoding bytes, preparing a corpus (units, normalisation, splits), its fingerprint
and names, and the words a model reads as its placeholder. Reached as ``api.corpora``."""

from __future__ import annotations

from engine.backends.reading import RareWords, rare_words
from engine.corpora.documents import Document, corpus_file_name, corpus_name, read_documents, read_zip_bytes
from engine.corpora.sequences import read_event_log, read_lines
from engine.corpora.text import (
    Corpus,
    corpus_fingerprint,
    decode_bytes,
    placeholder_share,
    prepare_corpus,
    read_text,
)

__all__ = [  # fmt: skip
    "read_text", "decode_bytes", "Document", "read_documents", "read_zip_bytes", "read_lines", "read_event_log",
    "corpus_file_name", "corpus_name", "Corpus", "prepare_corpus", "corpus_fingerprint", "placeholder_share",
    "rare_words", "RareWords",
]
"""What a front end may use of the corpora."""
