"""Growing capacity: a model split into more clones that predict exactly as it did.

Reaching sparsity at 30,000 states without ever paying for dense EM there: a dense model of a tenth of the states is
trained, pruned, and every clone is split into copies that share its incoming mass (:func:`split_clones`); the split
model predicts exactly like the small one (the copies are lumpable), a little noise breaks their symmetry, and sparse
EM then lets the copies specialise (the grown stage of :mod:`engine.training`). ``bench/bench_scale.py`` compares this
schedule with plain dense EM where dense EM is affordable.
"""

from __future__ import annotations

import numpy as np

from engine.backends.cpu.sparse import SparseCHMM, as_sparse, normalise
from engine.errors import CHMMError
from engine.model.blocks import BlockLayout
from engine.model.dense import CHMM


def split_clones(
    model: CHMM | SparseCHMM, n_clones: np.ndarray, rng: np.random.Generator, noise: float = 0.1
) -> SparseCHMM:
    """Grow ``model`` to ``n_clones`` clones per symbol (each at least the old count) by splitting clones.

    New clone c of symbol j copies old clone c mod m_j (its parent). Every stored entry T(u, v) becomes the entries
    T(u', v') = T(u, v) / (number of copies of v) for all copies u' of u and v' of v, so each row still sums to 1 and
    the copies are lumpable: with ``noise`` = 0 the grown model gives every sequence exactly the old probability.
    ``noise`` > 0 multiplies each entry by 1 + noise * U(-1, 1) (rows renormalised) so that EM can separate the
    copies. pi is split the same way. The result is sparse: non-zeros grow by about (new/old clones)^2."""
    sparse = as_sparse(model)
    old = sparse.layout
    n_clones = np.asarray(n_clones, dtype=np.int64)
    if n_clones.shape != old.n_clones.shape or np.any(n_clones < old.n_clones):
        raise CHMMError("split_clones needs at least the old number of clones for every symbol")
    new = BlockLayout.build(n_clones, old.block_pairs)
    children = [
        np.bincount(np.arange(n_clones[s]) % old.n_clones[s], minlength=old.n_clones[s]) for s in range(old.n_symbols)
    ]
    indptr_parts = [np.zeros(1, dtype=np.int64)]
    index_parts, data_parts = [], []
    total = 0
    for k, (i, j) in enumerate(old.block_pairs):
        lengths, cols, vals = _split_block(sparse, k, int(n_clones[i]), children[j])
        indptr_parts.append(total + np.cumsum(lengths))
        total += int(lengths.sum())
        index_parts.append(cols)
        data_parts.append(vals)
    indptr = np.concatenate(indptr_parts).astype(np.int64)
    indices = np.concatenate(index_parts)
    data = np.concatenate(data_parts)
    if noise > 0:
        data = data * (1.0 + noise * rng.uniform(-1.0, 1.0, size=data.size))
    rows_per_block = n_clones[new.block_pairs[:, 0]]
    row_base = np.concatenate([[0], np.cumsum(rows_per_block)]).astype(np.int64)
    grown = SparseCHMM(
        list(sparse.symbols),
        new,
        row_base,
        indptr,
        indices,
        data.astype(sparse.data.dtype),
        np.zeros(new.n_states, dtype=sparse.pi.dtype),
        None,
        dict(sparse.metadata),
        sparse.codec,
        sparse.backoff_weight,
    )
    grown = grown.with_data(normalise(grown, data, 0.0), None)
    pi = np.empty(new.n_states)
    for s in range(new.n_symbols):
        parents = np.arange(n_clones[s]) % old.n_clones[s]
        pi[new.clone_start[s] : new.clone_start[s + 1]] = sparse.pi[old.clone_start[s] + parents] / children[s][parents]
    grown.pi = (pi / pi.sum()).astype(sparse.pi.dtype)
    grown.metadata = dict(sparse.metadata) | {"grown_from": int(old.n_states)}
    return grown


def _split_block(
    sparse: SparseCHMM, k: int, new_rows: int, children: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Block ``k`` of ``sparse`` split: each entry T(u, v) spread over the copies of column clone v (``children[v]``
    copies, the value divided among them), then every new row u' a copy of old row u' mod m_i, for ``new_rows`` rows.
    Returns the entries per new row, their column clones (int32) and their values, row by row, columns sorted."""
    i, j = sparse.layout.block_pairs[k]
    m_i, m_j = int(sparse.layout.n_clones[i]), int(sparse.layout.n_clones[j])
    row_start = sparse.indptr[sparse.row_base[k] : sparse.row_base[k] + m_i + 1]
    old_rows = np.repeat(np.arange(m_i), np.diff(row_start))
    old_cols = sparse.indices[row_start[0] : row_start[-1]].astype(np.int64)
    copies = children[old_cols]
    values = sparse.data[row_start[0] : row_start[-1]].astype(np.float64) / copies
    copy_index = np.arange(int(copies.sum())) - np.repeat(np.cumsum(copies) - copies, copies)
    new_cols = np.repeat(old_cols, copies) + copy_index * m_j
    row_of = np.repeat(old_rows, copies)
    vals = np.repeat(values, copies)
    order = np.lexsort((new_cols, row_of))  # within each old row, by new column
    new_cols, row_of, vals = new_cols[order], row_of[order], vals[order]
    per_old_row = np.bincount(row_of, minlength=m_i)
    starts = np.concatenate([[0], np.cumsum(per_old_row)])
    parents = np.arange(new_rows) % m_i
    lengths = per_old_row[parents]
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    gather = np.repeat(starts[parents], lengths) + within
    return lengths, new_cols[gather].astype(np.int32), vals[gather]
