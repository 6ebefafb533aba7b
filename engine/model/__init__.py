"""The model: the block layout and its arithmetic (:mod:`~engine.model.blocks`), the CHMM and its files
(:mod:`~engine.model.dense`, :mod:`~engine.model.archive`), how it reads text (:mod:`~engine.model.codec`), the back-off
(:mod:`~engine.model.backoff`), row keys, pruning. :data:`__all__` holds what the rest of the engine takes from this
wing; the rest is the wing's own."""

from __future__ import annotations

from engine.model.archive import (
    MAX_MODEL_BYTES,
    PEER_FORMAT,
    ArchiveError,
    ModelArchive,
    load_bytes,
    read_header,
    stored_states,
)
from engine.model.backoff import Backoff, backoff_kind, choose_weight
from engine.model.blocks import BlockLayout, normalise_rows, pairs_in_sequence, row_sums
from engine.model.codec import TextCodec
from engine.model.dense import (
    BACKOFF_WEIGHT,
    CHMM,
    FORMAT_NAME,
    MAX_STATES,
    READABLE_VERSIONS,
    CloneModel,
    ModelFormatError,
    check_content,
    check_row_sums,
    load,
    random_model,
    read_layout,
    read_typed_header,
    typed_header,
    write_npz_atomic,
)
from engine.model.pruning import check_threshold, prune, pruned_backoff_weight, pruned_metadata
from engine.model.row_keys import check_row_key, check_row_shift

__all__ = [  # fmt: skip
    "ArchiveError", "Backoff", "backoff_kind", "BACKOFF_WEIGHT", "BlockLayout", "check_content", "check_row_key",
    "check_row_shift", "check_row_sums", "check_threshold", "CHMM", "choose_weight", "CloneModel", "FORMAT_NAME",
    "load", "load_bytes", "MAX_MODEL_BYTES", "MAX_STATES", "ModelArchive", "ModelFormatError", "normalise_rows",
    "pairs_in_sequence", "PEER_FORMAT", "prune", "pruned_backoff_weight", "pruned_metadata", "random_model",
    "read_header", "read_layout", "read_typed_header", "READABLE_VERSIONS", "row_sums", "stored_states", "TextCodec",
    "typed_header", "write_npz_atomic"
]
