"""CHMMs with sparse blocks: paper-scale models on the CPU, at a cost per step that grows with the non-zeros.

After training, about 99% of a CHMM's transitions can be set to zero at no cost (paper, section 4.2; Fig 3(d)), and
EM keeps zeros at zero. A :class:`SparseCHMM` stores each block T(i, j) in CSR form, so the forward and backward
passes, the expected counts, Viterbi and sampling visit only the stored entries; memory grows with the non-zeros, not
with the number of states squared.

Reaching sparsity at 30,000 states without ever paying for dense EM there is done by growing capacity
(:mod:`engine.training.growing`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.cpu import inference, sampling
from engine.backends.cpu import sparse_kernels as kernels
from engine.errors import CHMMError
from engine.model.archive import MAX_MODEL_BYTES, ArchiveError, ModelArchive, read_header
from engine.model.blocks import BlockLayout
from engine.model.codec import TextCodec
from engine.model.dense import (
    BACKOFF_WEIGHT,
    CHMM,
    READABLE_VERSIONS,
    CloneModel,
    ModelFormatError,
    check_content,
    check_row_sums,
    read_layout,
    read_typed_header,
    typed_header,
    write_npz_atomic,
)
from engine.model.row_keys import check_row_key, check_row_shift

SPARSE_FORMAT = "chmm-explorer-sparse-model"
SPARSE_FORMAT_VERSION = 2


@dataclass
class SparseCHMM(CloneModel):
    """A CHMM whose stored blocks are CSR matrices (see :mod:`engine.backends.cpu.sparse_kernels` for the arrays).

    Attributes:
        symbols, layout, pi, metadata, codec, backoff_weight: as in :class:`engine.model.dense.CHMM`
            (``layout.block_offset`` is not used). EM never adds entries to a sparse model (zeros are not stored),
            so ``fixed_zeros`` holds by construction.
        row_base: first CSR row of each block, shape (K + 1,); block k has ``n_clones[i]`` rows.
        indptr: CSR row pointers, shape (rows + 1,); indices: local column (clone of j) of each entry, int32;
        data: the transition probabilities of the stored entries (float32); counts: expected counts per entry.
    """

    symbols: list[str]
    layout: BlockLayout
    row_base: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    pi: np.ndarray
    counts: np.ndarray | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    codec: TextCodec = field(default_factory=TextCodec)
    backoff_weight: float = BACKOFF_WEIGHT

    form = "sparse"
    """Which implementation runs this model (see :func:`engine.backends.engines.engine_for`)."""
    fixed_zeros = True

    def __post_init__(self) -> None:
        rows = self.layout.n_clones[self.layout.block_pairs[:, 0]]
        expected = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        if self.row_base.shape != expected.shape or np.any(self.row_base != expected):
            raise CHMMError("row_base does not match the layout's blocks")
        if self.indptr.shape != (int(expected[-1]) + 1,) or self.indptr[0] != 0 or np.any(np.diff(self.indptr) < 0):
            raise CHMMError("indptr is not a valid CSR row pointer for the layout")
        if self.indices.shape != self.data.shape or self.indices.size != int(self.indptr[-1]):
            raise CHMMError("indices and data must hold one entry per stored transition")
        if self.pi.shape != (self.layout.n_states,):
            raise CHMMError("pi must have one entry per clone")

    def n_nonzero(self) -> int:
        return int(np.count_nonzero(self.data))

    @property
    def T(self) -> np.ndarray:
        """The stored transition values (what the training loop checks for finiteness)."""
        return self.data

    def with_data(self, data: np.ndarray, counts: np.ndarray | None, pi: np.ndarray | None = None) -> SparseCHMM:
        """The same model with new values of the stored entries (and counts, and pi if given)."""
        return replace(self, data=data, counts=counts, pi=self.pi if pi is None else pi)

    def block_counts(self) -> np.ndarray | None:
        """The expected counts summed over each stored block (:func:`block_sums`), or None without counts."""
        return block_sums(self)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save to ``path`` (see :func:`save`)."""
        save(self, path)

    def row_sums(self) -> np.ndarray:
        """Each clone's total outgoing transition probability (its row of T over all stored blocks), float64."""
        row_clone, _ = self.entry_rows_cols()
        return np.bincount(row_clone, weights=self.data.astype(np.float64), minlength=self.n_states)

    def transitions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The non-zero transitions as (row clone, column clone, probability, expected count or None), float64."""
        rows, cols = self.entry_rows_cols()
        values = np.asarray(self.data, dtype=np.float64)
        nz = np.flatnonzero(values)
        counts = None if self.counts is None else np.asarray(self.counts, dtype=np.float64)[nz]
        return rows[nz], cols[nz], values[nz], counts

    def entry_rows_cols(self) -> tuple[np.ndarray, np.ndarray]:
        """Global (row clone, column clone) of every stored entry."""
        layout = self.layout
        rows_per_block = layout.n_clones[layout.block_pairs[:, 0]]
        block_of_row = np.repeat(np.arange(layout.n_blocks), rows_per_block)
        local_row = np.arange(int(self.row_base[-1])) - self.row_base[block_of_row]
        row_clone = layout.clone_start[layout.block_pairs[block_of_row, 0]] + local_row
        per_row = np.diff(self.indptr)
        entry_row = np.repeat(row_clone, per_row)
        entry_block = np.repeat(block_of_row, per_row)
        entry_col = layout.clone_start[layout.block_pairs[entry_block, 1]] + self.indices
        return entry_row, entry_col

    def to_dense(self) -> CHMM:
        """The same model with dense blocks (zeros stored): for tests, small models and the dense-only tools."""
        layout = self.layout
        T = np.zeros(layout.size, dtype=self.data.dtype)
        counts = None if self.counts is None else np.zeros(layout.size)
        rows_per_block = layout.n_clones[layout.block_pairs[:, 0]]
        block_of_row = np.repeat(np.arange(layout.n_blocks), rows_per_block)
        local_row = np.arange(int(self.row_base[-1])) - self.row_base[block_of_row]
        per_row = np.diff(self.indptr)
        entry_block = np.repeat(block_of_row, per_row)
        cols = layout.n_clones[layout.block_pairs[entry_block, 1]]
        flat = layout.block_offset[entry_block] + np.repeat(local_row, per_row) * cols + self.indices
        T[flat] = self.data
        if counts is not None:
            counts[flat] = self.counts
        return CHMM(
            list(self.symbols),
            layout,
            T,
            self.pi.copy(),
            counts,
            dict(self.metadata),
            self.codec,
            self.backoff_weight,
            fixed_zeros=True,
        )


def as_sparse(model: CHMM | SparseCHMM) -> SparseCHMM:
    """``model`` as a :class:`SparseCHMM`: itself if it is one, else its non-zero entries (:func:`from_dense`)."""
    return model if model.form == "sparse" else from_dense(model)


def from_dense(model: CHMM) -> SparseCHMM:
    """The non-zero entries of ``model`` as a :class:`SparseCHMM` (exactly the same distribution)."""
    layout = model.layout
    T = np.asarray(model.T)
    rows_per_block = layout.n_clones[layout.block_pairs[:, 0]]
    row_base = np.concatenate([[0], np.cumsum(rows_per_block)]).astype(np.int64)
    indptr_parts = [np.zeros(1, dtype=np.int64)]
    index_parts, data_parts, count_parts = [], [], []
    total = 0
    for k in range(layout.n_blocks):
        m_i, m_j = layout.block_shape(k)
        block = T[layout.block_offset[k] : layout.block_offset[k + 1]].reshape(m_i, m_j)
        rows, cols = np.nonzero(block)
        indptr_parts.append(total + np.cumsum(np.bincount(rows, minlength=m_i)))
        total += len(rows)
        index_parts.append(cols.astype(np.int32))
        data_parts.append(block[rows, cols])
        if model.counts is not None:
            count_parts.append(
                model.counts[layout.block_offset[k] : layout.block_offset[k + 1]].reshape(m_i, m_j)[rows, cols]
            )
    indptr = np.concatenate(indptr_parts).astype(np.int64)
    indices = np.concatenate(index_parts) if index_parts else np.zeros(0, np.int32)
    data = np.concatenate(data_parts).astype(T.dtype) if data_parts else np.zeros(0, T.dtype)
    counts = np.concatenate(count_parts) if count_parts else None
    return SparseCHMM(
        list(model.symbols),
        layout,
        row_base,
        indptr,
        indices,
        data,
        np.asarray(model.pi).copy(),
        counts,
        dict(model.metadata),
        model.codec,
        model.backoff_weight,
    )


# ------------------------------------------------------------------------------------------------ inference
def forward(
    model: SparseCHMM,
    x: np.ndarray,
    store: bool = False,
    initial: np.ndarray | None = None,
    row_key: np.ndarray | None = None,
) -> inference.ForwardResult:
    """:func:`engine.backends.cpu.inference.forward` on the sparse blocks; ``row_key``: each step's block row, for a
    walk with actions (:func:`engine.model.row_keys.check_row_key`)."""
    x = np.ascontiguousarray(x, dtype=np.int64)
    layout = model.layout
    row_key = check_row_key(layout, x, row_key)
    start = model.pi if initial is None else np.asarray(initial)
    predictive = np.empty(len(x))
    if store:
        offsets = inference.sequential_offsets(layout, x)
        alpha = np.empty(int(offsets[-1]), dtype=model.data.dtype)
    else:
        offsets, alpha = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=model.data.dtype)
    zero_events = kernels.forward_pass(
        model.indptr,
        model.indices,
        model.data,
        model.row_base,
        start.astype(np.float64),
        x,
        row_key,
        layout.n_clones,
        layout.clone_start,
        layout.block_lookup,
        alpha,
        offsets,
        predictive,
    )
    return inference.ForwardResult(predictive, int(zero_events), alpha, offsets)


def log_likelihood(model: SparseCHMM, x: np.ndarray, row_key: np.ndarray | None = None) -> float:
    """log P(x) in nats (given the actions for a walk whose ``row_key`` is given); -inf if x is impossible."""
    result = forward(model, x, row_key=row_key)
    return -np.inf if result.zero_events else float(np.sum(np.log(result.predictive)))


def block_sums(model: SparseCHMM) -> np.ndarray | None:
    """Summed expected counts of each block (the training text's pair counts), or None without counts."""
    if model.counts is None:
        return None
    cumulative = np.concatenate([[0.0], np.cumsum(model.counts, dtype=np.float64)])
    per_row = cumulative[model.indptr[1:]] - cumulative[model.indptr[:-1]]
    row_cumulative = np.concatenate([[0.0], np.cumsum(per_row)])
    return row_cumulative[model.row_base[1:]] - row_cumulative[model.row_base[:-1]]


def score(model: SparseCHMM, x: np.ndarray, backoff_weight: float | None = None) -> inference.ScoreResult:
    """:func:`engine.backends.cpu.inference.score` (BPS with the documented back-off) on the sparse blocks."""
    x = np.ascontiguousarray(x, dtype=np.int64)
    if backoff_weight is None:
        backoff_weight = model.backoff_weight
    result = forward(model, x)
    backoff = inference.backoff_from_block_sums(model, block_sums(model))
    return inference.score_from_predictive(x, result.predictive, result.zero_events, backoff, backoff_weight)


def surprisal(model: SparseCHMM, x: np.ndarray, backoff_weight: float | None = None) -> np.ndarray:
    """:func:`engine.backends.cpu.inference.surprisal` (bits per position) on the sparse blocks."""
    x = np.ascontiguousarray(x, dtype=np.int64)
    if backoff_weight is None:
        backoff_weight = model.backoff_weight
    backoff = inference.backoff_from_block_sums(model, block_sums(model))
    return inference.surprisal_from_predictive(x, forward(model, x).predictive, backoff, backoff_weight)


@dataclass
class SequencePlan:
    """What the sparse E-step reuses across EM iterations on one sequence: message offsets, the blocks the
    sequence uses, and the alpha buffer."""

    offsets: np.ndarray
    touched: np.ndarray
    alpha: np.ndarray

    @staticmethod
    def build(layout: BlockLayout, x: np.ndarray, dtype: Any, row_key: np.ndarray | None = None) -> SequencePlan:
        """The plan of ``x`` (with each step's block row from ``row_key`` for a walk with actions)."""
        x = np.ascontiguousarray(x, dtype=np.int64)
        offsets = inference.sequential_offsets(layout, x)
        pair = layout.find_blocks(check_row_key(layout, x, row_key)[:-1], x[1:])
        touched = np.bincount(pair[pair >= 0], minlength=layout.n_blocks) > 0
        return SequencePlan(offsets, touched, np.empty(int(offsets[-1]), dtype))


def e_step(
    model: SparseCHMM,
    x: np.ndarray,
    plan: SequencePlan | None = None,
    initial: np.ndarray | None = None,
    row_key: np.ndarray | None = None,
) -> inference.EStepResult:
    """Expected transition counts sum_n xi(n) per stored entry (float64), the E-step of the paper's EM in
    O(non-zeros) per step: a forward pass that stores alpha, then the backward pass fused with the counts
    (:func:`engine.backends.cpu.sparse_kernels.backward_counts`: each product T_uv beta(n+1)_v serves both). Same
    semantics as :func:`engine.backends.cpu.inference.e_step`, ``row_key`` included (a walk with actions); no beta
    messages are stored."""
    x = np.ascontiguousarray(x, dtype=np.int64)
    if len(x) < 2:
        raise CHMMError("the E-step needs a sequence of at least two symbols")
    layout = model.layout
    row_key = check_row_key(layout, x, row_key)
    plan = SequencePlan.build(layout, x, model.data.dtype, row_key) if plan is None else plan
    alpha, offsets = plan.alpha, plan.offsets
    predictive = np.empty(len(x))
    start = (model.pi if initial is None else np.asarray(initial)).astype(np.float64)
    zero_events = int(
        kernels.forward_pass(
            model.indptr,
            model.indices,
            model.data,
            model.row_base,
            start,
            x,
            row_key,
            layout.n_clones,
            layout.clone_start,
            layout.block_lookup,
            alpha,
            offsets,
            predictive,
        )
    )
    counts = np.zeros(model.data.size)
    m_first = layout.n_clones[x[0]]
    beta_first = np.zeros(m_first)
    kernels.backward_counts(
        model.indptr,
        model.indices,
        model.data,
        model.row_base,
        x,
        row_key,
        layout.n_clones,
        layout.block_lookup,
        alpha,
        offsets,
        predictive,
        counts,
        beta_first,
    )
    g = alpha[offsets[0] : offsets[0] + m_first].astype(np.float64) * beta_first
    gamma_first = np.zeros(layout.n_states)
    if g.sum() > 0:
        gamma_first[layout.clone_start[x[0]] : layout.clone_start[x[0]] + m_first] = g / g.sum()
    last = len(x) - 1
    m_last = layout.n_clones[x[last]]
    last_alpha = np.zeros(layout.n_states, dtype=model.data.dtype)
    last_alpha[layout.clone_start[x[last]] : layout.clone_start[x[last]] + m_last] = alpha[
        offsets[last] : offsets[last] + m_last
    ]
    ll = -np.inf if zero_events else float(np.sum(np.log(predictive)))
    return inference.EStepResult(counts, gamma_first, ll, zero_events, last_alpha, plan.touched)


def normalise(model: SparseCHMM, values: np.ndarray, pseudocount: float) -> np.ndarray:
    """M-step: T = row-normalise(values + pseudocount) over the stored entries (zeros are not stored, so they
    stay zero)."""
    out = np.empty(model.data.size, dtype=model.data.dtype)
    layout = model.layout
    kernels.normalise(
        np.ascontiguousarray(values, dtype=np.float64),
        float(pseudocount),
        model.indptr,
        model.row_base,
        layout.block_pairs,
        layout.n_clones,
        layout.clone_start,
        out,
    )
    return out


def viterbi(
    model: SparseCHMM, evidence: np.ndarray | inference.Evidence, row_shift: np.ndarray | None = None
) -> inference.ViterbiResult:
    """:func:`engine.backends.cpu.inference.viterbi` on the sparse blocks (the same path as the dense kernel),
    ``row_shift`` included: added to position n's symbols it names the block row of step n -> n+1 (``a_n * E`` for a
    walk with actions; zeros when None)."""
    layout = model.layout
    evidence, state_offsets = inference.viterbi_evidence(layout, evidence)
    row_shift = check_row_shift(layout, evidence.ptr, evidence.symbol, row_shift)
    backpointer = np.empty(int(state_offsets[-1]), dtype=np.int64)
    path = np.full(len(evidence.ptr) - 1, -1, dtype=np.int64)
    log_probability = kernels.viterbi_pass(
        model.indptr,
        model.indices,
        model.data,
        model.row_base,
        model.pi.astype(np.float64),
        layout.n_clones,
        layout.clone_start,
        layout.block_lookup,
        row_shift,
        evidence.ptr,
        evidence.symbol,
        evidence.weight.astype(np.float64),
        state_offsets,
        backpointer,
        path,
    )
    return inference.viterbi_result(layout, path, log_probability)


def sample(model: SparseCHMM, length: int, rng: np.random.Generator, prefix: np.ndarray | None = None) -> np.ndarray:
    """:func:`engine.backends.cpu.sampling.sample` on the sparse blocks."""
    layout = model.layout
    first, out, primed = sampling.sampling_start(model, length, rng, prefix, forward, model.row_sums())
    row_block_start = np.searchsorted(layout.block_pairs[:, 0], np.arange(layout.n_symbols + 1))
    written = kernels.sample_path(
        model.indptr,
        model.indices,
        model.data,
        model.row_base,
        layout.n_clones,
        layout.clone_start,
        layout.clone_symbol(),
        row_block_start,
        layout.block_pairs,
        first,
        rng.random(len(out)),
        out,
    )
    return out[1:written] if primed else out[:written]


def prune(model: SparseCHMM, threshold: float) -> SparseCHMM:
    """:func:`engine.model.pruning.prune` by threshold for a sparse model: drop the stored entries below ``threshold``,
    renormalise the rows, record the pruning and set the back-off weight to the removed transition mass
    (occupancy-weighted mean over the rows that keep some mass)."""
    from engine.model.pruning import check_threshold, pruned_backoff_weight, pruned_metadata

    threshold = check_threshold(threshold)
    keep = model.data >= threshold
    n_rows = int(model.row_base[-1])
    entry_row = np.repeat(np.arange(n_rows), np.diff(model.indptr))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(entry_row[keep], minlength=n_rows))]).astype(np.int64)
    row_clone, _ = model.entry_rows_cols()
    kept_mass = np.bincount(row_clone[keep], weights=model.data[keep].astype(np.float64), minlength=model.n_states)
    occupancy = (
        np.bincount(row_clone, weights=model.counts, minlength=model.n_states)
        if model.counts is not None
        else np.ones(model.n_states)
    )
    weights = np.where(kept_mass > 0, occupancy, 0.0)
    removed = float(np.sum(weights * np.clip(1.0 - kept_mass, 0.0, 1.0)) / weights.sum()) if weights.sum() else 0.0
    before, after = model.n_nonzero(), int(np.count_nonzero(model.data[keep]))
    record = {
        "threshold": threshold,
        "nonzeros_before": before,
        "nonzeros_after": after,
        "kept_fraction": after / before if before else 1.0,
        "removed_mass": removed,
    }
    pruned = model.with_arrays(
        symbols=list(model.symbols),
        indptr=indptr,
        indices=model.indices[keep],
        data=model.data[keep],
        pi=model.pi.copy(),
        counts=None if model.counts is None else model.counts[keep],
        metadata=pruned_metadata(model.metadata, record),
        backoff_weight=pruned_backoff_weight(model.backoff_weight, removed),
    )
    return pruned.with_data(normalise(pruned, pruned.data.astype(np.float64), 0.0), pruned.counts)


# ------------------------------------------------------------------------------------------------ files
def save(model: SparseCHMM, path: str | os.PathLike[str]) -> None:
    """Save as ``.npz`` of plain arrays plus JSON metadata (no pickle), written to a temporary file and renamed."""
    path = Path(path)
    header = {"format": SPARSE_FORMAT, "format_version": SPARSE_FORMAT_VERSION} | typed_header(model)
    arrays = {
        "n_clones": model.layout.n_clones,
        "block_pairs": model.layout.block_pairs,
        "row_base": model.row_base,
        "indptr": model.indptr,
        "indices": model.indices,
        "data": model.data,
        "pi": model.pi,
    }
    if model.counts is not None:
        arrays["counts"] = model.counts
    # uncompressed: a 30,000-state model's arrays are hundreds of MB, and zlib would take minutes
    write_npz_atomic(path, arrays, header, compressed=False)


SPARSE_ARRAYS = ("n_clones", "block_pairs", "row_base", "indptr", "indices", "data", "pi", "counts")
"""The arrays a sparse model file holds ("counts" optional)."""


def is_sparse_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a sparse-model file (checked from its JSON header only, read in bounded memory)."""
    header = read_header(path)
    return header is not None and header.get("format") == SPARSE_FORMAT


def load(path: str | os.PathLike[str], max_bytes: int = MAX_MODEL_BYTES) -> SparseCHMM:
    """Load a model saved by :func:`save`; anything else raises :class:`engine.model.dense.ModelFormatError`.

    Read as untrusted input like a dense model (:func:`engine.model.dense.load`): the layout fixes ``row_base`` and
    ``indptr``, whose last entry (at most the layout's dense size) fixes ``indices``, ``data`` and ``counts``, each
    checked before it is inflated."""
    path = Path(path)
    if not path.is_file():
        raise ModelFormatError(f"{path}: no such model file")
    try:
        with ModelArchive(path, known=SPARSE_ARRAYS, max_bytes=max_bytes) as archive:
            header = archive.header
            version = header.get("format_version")
            if header.get("format") != SPARSE_FORMAT or version not in READABLE_VERSIONS:
                raise ModelFormatError(
                    f"{path}: not a sparse CHMM of format version {', '.join(map(str, READABLE_VERSIONS))}"
                )
            symbols = header.get("symbols")
            if not isinstance(symbols, list):
                raise ModelFormatError(f"{path}: damaged sparse CHMM (the symbols must be a list of non-empty strings)")
            layout = read_layout(path, archive, len(symbols))
            rows = sum(int(layout.n_clones[i]) for i in layout.block_pairs[:, 0])
            row_base = archive.array("row_base", shape=(layout.n_blocks + 1,), kind="iu")
            indptr = archive.array("indptr", shape=(rows + 1,), kind="iu")
            entries = int(indptr[-1])
            if not 0 <= entries <= layout.size:
                raise ModelFormatError(f"{path}: damaged sparse CHMM (indptr ends at {entries:,})")
            arrays = {
                "row_base": row_base,
                "indptr": indptr,
                "indices": archive.array("indices", shape=(entries,), kind="iu"),
                "data": archive.array("data", shape=(entries,), kind="f"),
                "pi": archive.array("pi", shape=(layout.n_states,), kind="f"),
                "counts": archive.array("counts", shape=(entries,), kind="f") if "counts" in archive.names else None,
            }
    except ArchiveError as exc:
        raise ModelFormatError(f"{path}: not a readable sparse CHMM ({exc})") from None
    typed, metadata = read_typed_header(path, header, version)
    values = {"data": arrays["data"], "pi": arrays["pi"], "counts": arrays["counts"]}
    check_content(path, symbols, metadata, values)
    try:
        model = SparseCHMM(
            list(symbols),
            layout,
            arrays["row_base"],
            arrays["indptr"],
            arrays["indices"],
            arrays["data"],
            arrays["pi"],
            arrays["counts"],
            dict(metadata),
            typed["codec"],
            typed["backoff_weight"],
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise ModelFormatError(f"{path}: damaged sparse CHMM ({exc})") from exc
    if model.indices.size and (
        model.indices.min() < 0
        or np.any(
            model.indices
            >= np.repeat(
                layout.n_clones[
                    layout.block_pairs[
                        np.repeat(np.arange(layout.n_blocks), layout.n_clones[layout.block_pairs[:, 0]]), 1
                    ]
                ],
                np.diff(model.indptr),
            )
        )
    ):
        raise ModelFormatError(f"{path}: damaged sparse CHMM (a column index outside its block)")
    check_row_sums(path, model.row_sums())
    return model
