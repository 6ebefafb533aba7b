"""The dense CHMM (:class:`CHMM`, over the block layout of :mod:`engine.model.blocks`), what dense and sparse models
share (:class:`CloneModel`), random starts, and the dense model's file: ``.npz`` arrays plus a typed JSON header,
saved atomically without pickle and read as untrusted input (:mod:`engine.model.archive`).
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.corpora.text import NORMALISATIONS
from engine.errors import CHMMError
from engine.files import atomic_write
from engine.model.archive import MAX_MODEL_BYTES, ArchiveError, ModelArchive
from engine.model.blocks import (
    BlockLayout,
    align_rows,
    blocks_to_dense,
    entry_rows_cols,
    normalise_rows,
    row_sums,
)
from engine.model.codec import TextCodec

FORMAT_NAME = "chmm-explorer-model"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 1 kept the codec, the back-off weight and the pruning (which made EM keep zeros) in the metadata;
version 2 stores them as typed header fields. Version-1 files are read and converted."""

MAX_STATES = 100_000_000
"""More clones than any machine's memory holds (the paper's largest model has 30,000): the bound on a model asked
for and on a model file."""

BACKOFF_WEIGHT = 1e-6
"""Weight of the back-off distribution in scoring (see :func:`engine.backends.cpu.inference.score`) for a model that no
pruning took mass from."""

BEHAVIOUR_KEYS = ("normalisation", "vocabulary", "backoff_weight")
"""Metadata keys of version-1 files that drove behaviour; loading moves them into the typed fields."""


class ModelFormatError(CHMMError):
    """A file is not a CHMM Explorer model, or it is damaged."""


class CloneModel:
    """What every form of CHMM shares (the dense :class:`CHMM`, the sparse
    :class:`engine.backends.cpu.sparse.SparseCHMM`): an alphabet of ``symbols``, a block ``layout`` of clones, and
    reading and writing text in that alphabet."""

    symbols: list[str]
    layout: BlockLayout

    @property
    def n_symbols(self) -> int:
        return self.layout.n_symbols

    @property
    def n_states(self) -> int:
        return self.layout.n_states

    @property
    def n_clones(self) -> np.ndarray:
        return self.layout.n_clones

    def symbol_index(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.symbols)}

    def encode(self, text: str) -> np.ndarray:
        """Map already-normalised text to symbol indices (its characters, or its space-separated words or tokens, by
        the codec's unit); unknown symbols raise a clear ValueError."""
        index = self.symbol_index()
        symbols = self.codec.split(text)
        unknown = sorted({c for c in symbols if c not in index})
        if unknown:
            shown = ", ".join(repr(c) for c in unknown[:10])
            raise CHMMError(
                f"the text has {len(unknown)} {self.codec.unit} outside the model's alphabet: {shown}"
                + (" ..." if len(unknown) > 10 else "")
            )
        return np.fromiter((index[c] for c in symbols), dtype=np.int64, count=len(symbols))

    def decode_symbols(self, x: np.ndarray) -> str:
        """Symbol indices as text (characters side by side, words and tokens separated by spaces)."""
        return self.codec.join([self.symbols[int(s)] for s in x])

    def with_arrays(self, **changes: Any) -> Any:
        """The same model (alphabet, codec, back-off, metadata) with the given fields replaced (T, pi, counts,
        layout...); arrays are shared, not copied."""
        return replace(self, **changes)


@dataclass
class CHMM(CloneModel):
    """A cloned HMM over an alphabet of symbols.

    Attributes:
        symbols: the alphabet, one string per symbol (symbol ``i`` is emitted by the clones of index ``i``).
        layout: the block-sparse layout (clones per symbol, stored blocks).
        T: flat transition buffer (float32 or float64); each clone's row, gathered over all blocks (i, .),
            sums to 1 (or to 0 for a clone that no transition leaves, which only happens after pruning).
        pi: initial clone distribution, shape (H,), sums to 1.
        counts: expected transition counts of the last E-step in the same flat layout (float64), or None.
        metadata: JSON-serialisable facts shown to people (corpus, allocation, training history, settings, seed,
            the record of the last pruning); nothing in it changes what the model computes.
        codec: how the model reads raw text (normalisation and vocabulary).
        backoff_weight: the weight w of the symbol-bigram back-off in scoring (see
            :func:`engine.backends.cpu.inference.score`): 1e-6, or the transition mass a pruning removed.
        fixed_zeros: EM may update only the non-zero transitions (a pruned model stays pruned); otherwise the
            pseudocount reaches every stored entry.
        pair_counts: the expected counts summed over each stored block (the training text's symbol-pair counts,
            shape (K,), float64), kept where ``counts`` are not: the scorer's back-off bigram needs only these
            (:func:`engine.backends.cpu.inference.symbol_bigram`); None when ``counts`` are kept or unknown.
    """

    symbols: list[str]
    layout: BlockLayout
    T: np.ndarray
    pi: np.ndarray
    counts: np.ndarray | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    codec: TextCodec = field(default_factory=TextCodec)
    backoff_weight: float = BACKOFF_WEIGHT
    fixed_zeros: bool = False
    pair_counts: np.ndarray | None = None

    form = "dense"
    """Which implementation runs this model (see :func:`engine.backends.engines.engine_for`)."""

    def __post_init__(self) -> None:
        if len(self.symbols) != self.layout.n_symbols:
            raise CHMMError("symbols and n_clones disagree on the alphabet size")
        if self.T.shape != (self.layout.size,):
            raise CHMMError(f"T has shape {self.T.shape}, the layout needs ({self.layout.size},)")
        if self.pi.shape != (self.layout.n_states,):
            raise CHMMError(f"pi has shape {self.pi.shape}, the layout needs ({self.layout.n_states},)")
        if self.counts is not None and self.counts.shape != self.T.shape:
            raise CHMMError("counts must have the same layout as T")
        if self.pair_counts is not None and self.pair_counts.shape != (self.layout.n_blocks,):
            raise CHMMError("pair_counts must hold one value per stored block")

    # ------------------------------------------------------------------ accessors
    def block(self, i: int, j: int) -> np.ndarray | None:
        """The block T(i, j) as a (view) array of shape ``n_clones[i] x n_clones[j]``, or None if not stored."""
        k = self.layout.find_block(i, j)
        if k < 0:
            return None
        start, stop = self.layout.block_offset[k], self.layout.block_offset[k + 1]
        return self.T[start:stop].reshape(self.layout.block_shape(k))

    def dense_T(self) -> np.ndarray:
        """The full H x H transition matrix (for tests and tiny models only)."""
        return blocks_to_dense(self.layout, self.T)

    def n_nonzero(self) -> int:
        return int(np.count_nonzero(self.T))

    def copy(self) -> CHMM:
        return replace(
            self,
            symbols=list(self.symbols),
            T=self.T.copy(),
            pi=self.pi.copy(),
            counts=None if self.counts is None else self.counts.copy(),
            metadata=json.loads(json.dumps(self.metadata)),
            pair_counts=None if self.pair_counts is None else self.pair_counts.copy(),
        )

    def block_counts(self) -> np.ndarray | None:
        """The expected counts summed over each stored block, shape (K,), float64: from ``counts`` when kept, else
        ``pair_counts``, else None."""
        if self.counts is not None:
            if not self.layout.n_blocks:
                return np.zeros(0)
            return np.add.reduceat(np.asarray(self.counts, dtype=np.float64), self.layout.block_offset[:-1])
        return None if self.pair_counts is None else np.asarray(self.pair_counts, dtype=np.float64)

    def without_statistics(self) -> CHMM:
        """The same model without the per-entry expected counts (the float64 array as large as T, twice T's bytes
        in float32), keeping their sums per block (``pair_counts``), which is all that scoring reads from them: it
        scores every text exactly as this model does. What is lost: the counts on each edge (``chmm communities
        --flow counts``, the export's ``count`` column) and the occupancy of each clone that a later pruning weights
        its back-off weight by."""
        return self.with_arrays(counts=None, pair_counts=self.block_counts())

    def support(self) -> np.ndarray | None:
        """The entries EM may make non-zero, as a boolean mask in the flat layout, or None for "every stored
        entry" (see ``fixed_zeros``)."""
        return np.asarray(self.T) > 0 if self.fixed_zeros else None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save to ``path`` (see :func:`save`)."""
        save(self, path)

    def transitions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The non-zero transitions as (row clone, column clone, probability, expected count or None), float64."""
        values = np.asarray(self.T, dtype=np.float64)
        nz = np.flatnonzero(values)
        rows, cols = entry_rows_cols(self.layout, nz)
        counts = None if self.counts is None else np.asarray(self.counts, dtype=np.float64)[nz]
        return rows, cols, values[nz], counts


def random_model(
    symbols: list[str],
    n_clones: np.ndarray,
    block_pairs: np.ndarray,
    rng: np.random.Generator,
    dtype: Any = np.float32,
    metadata: dict[str, Any] | None = None,
    codec: TextCodec | None = None,
    concentration: float | None = None,
    aligned_share: float = 0.0,
) -> CHMM:
    """A CHMM with T random on the stored blocks and uniform pi. Each row of T is uniform(0, 1) entries normalised,
    or, given ``concentration`` c, a draw of a symmetric Dirichlet(c) over the row's stored entries (Gamma(c) entries
    normalised): c < 1 starts every clone close to a few successors (sharp), c = 1 uniform on the simplex. With
    ``aligned_share`` s > 0, s of each row's mass then goes to its aligned entries (:func:`align_rows`)."""
    layout = BlockLayout.build(n_clones, block_pairs)
    if concentration is not None and not (concentration > 0 and np.isfinite(concentration)):
        raise CHMMError(f"the concentration must be a positive number, got {concentration!r}")
    # Gamma(c) draws for small c reach 0.0 in floating point; a zero entry never grows under EM, hence the floor
    raw = rng.random(layout.size) if concentration is None else rng.gamma(concentration, size=layout.size) + 1e-12
    if aligned_share:
        raw = align_rows(layout, raw, aligned_share)
    T = normalise_rows(layout, raw, 0.0, dtype)
    pi = np.full(layout.n_states, 1.0 / layout.n_states, dtype=dtype)
    return CHMM(list(symbols), layout, T, pi, None, dict(metadata or {}), codec or TextCodec())


# ---------------------------------------------------------------------------------------------- save / load
def _json_safe(value: Any) -> Any:
    """Metadata as strict JSON: NaN and infinities become null, numpy scalars plain numbers."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def save(model: CHMM, path: str | os.PathLike[str]) -> None:
    """Save ``model`` as a ``.npz`` archive of plain arrays plus a JSON metadata entry (no pickle).

    The file is written to a temporary name in the same folder and renamed, so a failure leaves any existing
    file intact.
    """
    path = Path(path)
    header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION} | typed_header(model)
    arrays: dict[str, np.ndarray] = {
        "n_clones": model.layout.n_clones,
        "block_pairs": model.layout.block_pairs,
        "T": np.asarray(model.T),
        "pi": np.asarray(model.pi),
    }
    if model.counts is not None:
        arrays["counts"] = np.asarray(model.counts)
    elif model.pair_counts is not None:
        arrays["pair_counts"] = np.asarray(model.pair_counts, dtype=np.float64)
    write_npz_atomic(path, arrays, header, compressed=True)


def typed_header(model: Any) -> dict[str, Any]:
    """The header fields every model file (dense or sparse) stores besides its arrays: the alphabet, the typed
    fields that drive behaviour, and the metadata."""
    return {
        "symbols": list(model.symbols),
        "codec": model.codec.to_json(),
        "backoff_weight": float(model.backoff_weight),
        "fixed_zeros": bool(model.fixed_zeros),
        "metadata": model.metadata,
    }


def read_typed_header(path: Any, header: dict[str, Any], version: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The typed fields (codec, backoff_weight, fixed_zeros) and the metadata of a loaded header. A version-1 file
    kept them in its metadata (normalisation, vocabulary, backoff_weight; a "pruned" record made EM keep zeros):
    they are moved out of it. Raises :class:`ModelFormatError` on values of the wrong type."""
    metadata = dict(header.get("metadata") or {}) if isinstance(header.get("metadata", {}), dict) else None
    if metadata is None:
        raise ModelFormatError(f"{path}: damaged CHMM model (the metadata must be an object)")
    try:
        if version == 1:
            problem = _metadata_problem(metadata)
            if problem:
                raise ModelFormatError(f"{path}: damaged CHMM model ({problem})")
            codec = TextCodec(metadata.get("normalisation") or "raw", metadata.get("vocabulary"))
            weight = metadata.get("backoff_weight")
            fixed_zeros = bool(metadata.get("pruned"))
            for key in BEHAVIOUR_KEYS:
                metadata.pop(key, None)
        else:
            codec = TextCodec.from_json(header["codec"]) if "codec" in header else TextCodec()
            weight = header.get("backoff_weight")
            fixed_zeros = header.get("fixed_zeros", False)
            if not isinstance(fixed_zeros, bool):
                raise CHMMError("fixed_zeros must be true or false")
    except ValueError as exc:
        if isinstance(exc, ModelFormatError):
            raise
        raise ModelFormatError(f"{path}: damaged CHMM model ({exc})") from None
    if weight is None:
        weight = BACKOFF_WEIGHT
    if not (_is_number(weight) and 0.0 <= weight < 1.0):
        raise ModelFormatError(f"{path}: damaged CHMM model (the back-off weight must be a number in [0, 1))")
    typed = {"codec": codec, "backoff_weight": float(weight), "fixed_zeros": fixed_zeros}
    return typed, metadata


COMPRESS_LEVEL = 1
"""zlib level of the members of a model file: a 10,000-state model (T float32, counts float64, 1.07 GB of arrays) is
written 2.7-2.9 times faster than at numpy's default level 6 (20 s against 57 s) into a file 4.5% larger
(bench/bench_save.py)."""


def write_npz_atomic(
    path: str | os.PathLike[str], arrays: dict[str, np.ndarray], header: dict[str, Any], compressed: bool = True
) -> None:
    """Write ``arrays`` plus ``header`` (strict JSON, its ``arrays`` entry listing the array names, stored as the
    uint8 array ``header_json``) as one ``.npz`` without pickle. The file is written under a temporary name in the
    same folder and renamed over ``path``, so a failure leaves an existing file intact. Every model file of the
    project (dense, sparse, peer learners) is written by this function."""
    path = Path(path)
    payload = dict(arrays)
    header = dict(header) | {"arrays": sorted(payload)}
    payload["header_json"] = np.frombuffer(json.dumps(_json_safe(header), allow_nan=False).encode("utf-8"), np.uint8)

    def write(tmp: str) -> None:
        method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
        with zipfile.ZipFile(tmp, "w", method, allowZip64=True, compresslevel=COMPRESS_LEVEL) as archive:
            for name, array in payload.items():  # what np.savez writes, at a faster compression level
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)

    atomic_write(path, write)


ROW_SUM_TOLERANCE = 1e-3
"""A stored row of T must sum to 1 within this (float32 rounding over thousands of entries), or to 0 (a clone with
no outgoing transitions)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number_or_none(value: Any) -> bool:
    """None or a number (NaN allowed: a figure not measured)."""
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _metadata_problem(metadata: dict[str, Any]) -> str | None:
    """What is wrong with a model's metadata (the fields the tools read), or None."""

    def history_ok(value: Any) -> bool:
        return isinstance(value, list) and all(
            isinstance(r, dict)
            and _is_number(r.get("iteration"))
            and all(_number_or_none(r.get(key)) for key in ("train_bps", "validation_bps", "seconds"))
            for r in value
        )

    checks: dict[str, tuple[Any, str]] = {
        "symbols": (lambda v: True, ""),
        "corpus": (lambda v: isinstance(v, str), "a string"),
        "normalisation": (lambda v: v in NORMALISATIONS, f"one of {', '.join(NORMALISATIONS)}"),
        "allocation": (lambda v: v is None or isinstance(v, str), "a string"),
        "stopped": (lambda v: v is None or isinstance(v, str), "a string"),
        "train_bps": (lambda v: v is None or _is_number(v), "a number"),
        "validation_bps": (lambda v: v is None or _is_number(v), "a number"),
        "test_bps": (lambda v: v is None or _is_number(v), "a number"),
        "backoff_weight": (lambda v: v is None or (_is_number(v) and 0.0 <= v < 1.0), "a number in [0, 1)"),
        "seed": (lambda v: v is None or _is_number(v), "a number"),
        "best_iteration": (lambda v: _is_number(v), "a number"),
        "refit_iterations": (lambda v: _is_number(v), "a number"),
        "settings": (lambda v: isinstance(v, dict), "an object"),
        "sizes": (lambda v: isinstance(v, dict) and all(_is_number(n) for n in v.values()), "an object of counts"),
        "pruned": (lambda v: isinstance(v, dict), "an object"),
        "schedule": (lambda v: isinstance(v, dict), "an object"),
        "pruned_history": (lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v), "a list"),
        "vocabulary": (lambda v: v is None or (isinstance(v, list) and all(isinstance(w, str) for w in v)), "words"),
        "history": (history_ok, "a list of iteration records"),
    }
    for key, (ok, what) in checks.items():
        if key in metadata and not ok(metadata[key]):
            return f"metadata field {key!r} must be {what}"
    return None


def check_content(path: Any, symbols: Any, metadata: Any, arrays: dict[str, np.ndarray | None]) -> None:
    """Raise :class:`ModelFormatError` unless a loaded model's content is usable by every tool: symbols are
    distinct non-empty strings; the transition values, pi and counts (``arrays``; None: absent) are finite,
    non-negative floats; pi has mass; the metadata fields the tools read have their types."""

    def fail(reason: str) -> None:
        raise ModelFormatError(f"{path}: damaged CHMM model ({reason})")

    if not isinstance(symbols, list) or not all(isinstance(c, str) and c for c in symbols):
        fail("the symbols must be a list of non-empty strings")
    if len(set(symbols)) != len(symbols):
        fail("the symbols must be distinct")
    if not isinstance(metadata, dict):
        fail("the metadata must be an object")
    problem = _metadata_problem(metadata)
    if problem:
        fail(problem)
    for name, values in arrays.items():
        if values is None:
            continue
        if not np.issubdtype(values.dtype, np.floating):
            fail(f"{name} holds {values.dtype} values, not floating point")
        if not (np.all(np.isfinite(values)) and np.all(values >= 0)):
            fail(f"{name} holds negative or non-finite values")
    if "pi" in arrays and float(np.sum(arrays["pi"], dtype=np.float64)) <= 0:
        fail("pi has no mass")


def check_row_sums(path: Any, sums: np.ndarray) -> None:
    """Raise :class:`ModelFormatError` unless every stored row of T sums to 1 (within
    :data:`ROW_SUM_TOLERANCE`) or 0, and at least one to 1."""
    ones = np.abs(sums - 1.0) <= ROW_SUM_TOLERANCE
    bad = ~(ones | (sums == 0))
    if np.any(bad):
        raise ModelFormatError(f"{path}: damaged CHMM model (a row of T sums to {float(sums[bad][0]):.6g}, not 1)")
    if not np.any(ones):
        raise ModelFormatError(f"{path}: damaged CHMM model (T has no transition mass)")


DENSE_ARRAYS = ("n_clones", "block_pairs", "T", "pi", "counts", "pair_counts")
"""The arrays a dense model file holds ("counts" optional; "pair_counts", their sums per block, only without them)."""


def read_layout(path: Any, archive: ModelArchive, n_symbols: int, max_states: int = MAX_STATES) -> BlockLayout:
    """The block layout of a model file (dense or sparse): ``n_clones`` (one positive count per symbol, at most
    ``max_states`` in all) and ``block_pairs`` (at most one per symbol pair), read and checked before any array
    whose size they fix. Raises :class:`ModelFormatError`."""
    n_clones = archive.array("n_clones", shape=(n_symbols,), kind="iu")
    if np.any(n_clones < 1):
        raise ModelFormatError(f"{path}: damaged CHMM model (a symbol has no clones)")
    states = sum(int(n) for n in n_clones)  # Python integers: no overflow
    if states > max_states:
        raise ModelFormatError(
            f"{path}: damaged CHMM model ({states:,} clones, more than the {max_states:,} a model file may have)"
        )
    pairs = archive.array("block_pairs", ndim=2, kind="iu")
    if pairs.shape[1:] != (2,) or pairs.shape[0] > n_symbols * n_symbols:
        raise ModelFormatError(f"{path}: damaged CHMM model (block_pairs has shape {pairs.shape})")
    try:
        # clone_start and the pair -> block lookup (sized by the stored pairs: once n_symbols^2) and block_offset
        tables = 2 * (n_symbols + 1) + 2 * len(pairs) + 1
        archive.charge(tables * 8, f"its block tables ({n_symbols:,} symbols, {len(pairs):,} blocks)")
    except ArchiveError as exc:
        raise ModelFormatError(f"{path}: cannot be loaded: {exc}") from None
    try:
        return BlockLayout.build(n_clones, pairs)
    except ValueError as exc:
        raise ModelFormatError(f"{path}: damaged CHMM model ({exc})") from None


def load(path: str | os.PathLike[str], max_bytes: int = MAX_MODEL_BYTES) -> CHMM:
    """Load a model saved by :func:`save`; a missing, damaged or foreign file raises :class:`ModelFormatError`.

    The file is read as untrusted input (:class:`engine.model.archive.ModelArchive`): members other than the model's
    arrays are refused, and each array's size is checked against the block layout, and all of them against
    ``max_bytes``, before it is inflated."""
    path = Path(path)
    if not path.is_file():
        raise ModelFormatError(f"{path}: no such model file")
    try:
        with ModelArchive(path, known=DENSE_ARRAYS, max_bytes=max_bytes) as archive:
            header = archive.header
            if header.get("format") != FORMAT_NAME:
                raise ModelFormatError(f"{path}: not a CHMM Explorer model (wrong format marker)")
            symbols = header.get("symbols")
            if not isinstance(symbols, list):
                raise ModelFormatError(f"{path}: damaged CHMM model (the symbols must be a list of non-empty strings)")
            layout = read_layout(path, archive, len(symbols))
            has_counts = "counts" in archive.names
            arrays = {
                "T": archive.array("T", shape=(layout.size,), kind="f"),
                "pi": archive.array("pi", shape=(layout.n_states,), kind="f"),
                "counts": archive.array("counts", shape=(layout.size,), kind="f") if has_counts else None,
                "pair_counts": (
                    archive.array("pair_counts", shape=(layout.n_blocks,), kind="f")
                    if "pair_counts" in archive.names and not has_counts
                    else None
                ),
            }
    except ArchiveError as exc:
        raise ModelFormatError(f"{path}: not a readable CHMM Explorer model ({exc})") from None
    version = header.get("format_version")
    if version not in READABLE_VERSIONS:
        raise ModelFormatError(
            f"{path}: model format version {version!r} is not supported "
            f"(this program reads versions {', '.join(map(str, READABLE_VERSIONS))})"
        )
    typed, metadata = read_typed_header(path, header, version)
    check_content(path, symbols, metadata, arrays)
    try:
        model = CHMM(
            list(symbols),
            layout,
            arrays["T"],
            arrays["pi"],
            arrays["counts"],
            dict(metadata),
            **typed,
            pair_counts=arrays["pair_counts"],
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelFormatError(f"{path}: damaged CHMM model ({exc})") from exc
    check_row_sums(path, row_sums(layout, model.T))
    return model
