"""Corpora: files checked as text (:mod:`~engine.corpora.reading`), normalising, text in units and its splits
(:mod:`~engine.corpora.text`), documents, lines and event logs (:mod:`~engine.corpora.documents`,
:mod:`~engine.corpora.sequences`) and the allocation of clones to symbols (:mod:`~engine.corpora.allocation`).
:data:`__all__` holds what the rest of the engine takes from this wing; the rest is the wing's own."""

from __future__ import annotations

from engine.corpora.allocation import (
    ALLOCATION_METHODS,
    DEFAULT_NGRAM_ORDER,
    allocate_clones,
    check_states,
    largest_remainder,
)
from engine.corpora.documents import Document, corpus_file_name, corpus_name, read_documents, read_zip_bytes
from engine.corpora.normalising import NORMALISATIONS, RARE_WORD, apply_normalisation, normalise_paper_base
from engine.corpora.reading import CorpusError, corpus_fingerprint, decode_bytes, read_text
from engine.corpora.sequences import FORMATS, read_event_log, read_lines, sequences_from_tokens
from engine.corpora.text import (
    MIN_COUNT,
    RARE_TOKEN,
    UNITS,
    Corpus,
    join_symbols,
    normalise_characters,
    normalise_unit,
    placeholder_share,
    prepare_corpus,
    symbols_of,
)

__all__ = [  # fmt: skip
    "allocate_clones", "ALLOCATION_METHODS", "apply_normalisation", "check_states", "Corpus", "corpus_file_name",
    "corpus_fingerprint", "corpus_name", "CorpusError", "decode_bytes", "DEFAULT_NGRAM_ORDER", "Document", "FORMATS",
    "join_symbols", "largest_remainder", "MIN_COUNT", "NORMALISATIONS", "normalise_characters", "normalise_paper_base",
    "normalise_unit", "placeholder_share", "prepare_corpus", "RARE_TOKEN", "RARE_WORD", "read_documents",
    "read_event_log", "read_lines", "read_text", "read_zip_bytes", "sequences_from_tokens", "symbols_of", "UNITS"
]
