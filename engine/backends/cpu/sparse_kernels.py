"""Numba kernels for CHMMs whose blocks are stored sparse (CSR per block), so that every step costs O(non-zeros).

Layout (see :class:`engine.backends.cpu.sparse.SparseCHMM`): block ``k`` of symbol pair (i, j) owns the CSR rows
``row_base[k] .. row_base[k] + n_clones[i] - 1``; row ``r`` holds the entries ``indptr[r] .. indptr[r + 1] - 1`` with
local column ``indices[e]`` (a clone of j, sorted within the row) and value ``data[e]``. Entries at zero are simply
not stored, so EM, which keeps zeros at zero, never touches them. Message buffers are the dense engine's (message n
at ``offsets[n]`` with ``n_clones[x[n]]`` entries), so the dense engine's helpers (pair weights) apply unchanged.

The passes read the block of step n -> n+1 from the row key ``row_key[n]`` (``x`` itself for text; ``a_n * E + x_n``
for a walk with actions over the layout of :func:`engine.cognitive.actions.action_layout`, whose row symbol ``a * E +
i`` has the clones of symbol i), as :func:`engine.backends.cpu.kernels.forward_pass` does; Viterbi takes ``row_shift =
row_key - x``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from engine.backends.cpu.kernels import find_block, max_product, slots_to_clones

_FLAGS = dict(nogil=True, cache=True, fastmath=False, error_model="numpy")
_FAST = dict(nogil=True, cache=True, fastmath=True, error_model="numpy")


@njit(**_FAST)
def forward_pass(
    indptr, indices, data, row_base, pi, x, row_key, n_clones, clone_start, block_lookup, store, offsets, predictive
):
    """Scaled forward pass alpha(n+1)^T = alpha(n)^T T(row_key_n, x_{n+1}) over the CSR blocks (semantics of
    ``engine.backends.cpu.kernels.forward_pass``: normalisers in ``predictive``, uniform restart after a
    zero-probability step, messages stored when ``offsets`` is non-empty; ``row_key`` is ``x`` for text). Returns the
    number of zero-probability events."""
    n_steps = x.shape[0]
    width = 0
    for s in range(n_clones.shape[0]):
        width = max(width, n_clones[s])
    alpha = np.zeros(width, dtype=data.dtype)
    nxt = np.zeros(width, dtype=np.float64)
    keep = offsets.shape[0] > 0
    zero_events = 0
    i = x[0]
    m_i = n_clones[i]
    total = 0.0
    for u in range(m_i):
        total += pi[clone_start[i] + u]
    if total > 0.0:
        predictive[0] = total
        for u in range(m_i):
            alpha[u] = pi[clone_start[i] + u] / total
    else:
        predictive[0] = 0.0
        zero_events += 1
        for u in range(m_i):
            alpha[u] = 1.0 / m_i
    if keep:
        for u in range(m_i):
            store[offsets[0] + u] = alpha[u]
    for n in range(1, n_steps):
        j = x[n]
        m_j = n_clones[j]
        k = find_block(block_lookup, n_clones.shape[0], row_key[n - 1], j)
        total = 0.0
        for v in range(m_j):
            nxt[v] = 0.0
        if k >= 0:
            base = row_base[k]
            for u in range(m_i):
                a = alpha[u]
                if a != 0.0:
                    for e in range(indptr[base + u], indptr[base + u + 1]):
                        nxt[indices[e]] += a * data[e]
            for v in range(m_j):
                total += nxt[v]
        if total > 0.0:
            predictive[n] = total
            scale = 1.0 / total
            for v in range(m_j):
                alpha[v] = nxt[v] * scale
        else:
            predictive[n] = 0.0
            zero_events += 1
            for v in range(m_j):
                alpha[v] = 1.0 / m_j
        if keep:
            base_store = offsets[n]
            for v in range(m_j):
                store[base_store + v] = alpha[v]
        i = j
        m_i = m_j
    return zero_events


@njit(**_FAST)
def backward_counts(
    indptr, indices, data, row_base, x, row_key, n_clones, block_lookup, alpha, offsets, predictive, counts, beta_first
):
    """The backward pass fused with the expected counts, after a forward pass that stored alpha and predictive.

    Going back from n = N-2, with beta(n+1) at hand: w_n = 1 / (predictive[n+1] <alpha(n+1), beta(n+1)>) (0 at a
    zero-probability step, see ``engine.backends.cpu.kernels.pair_weights``), and for every stored entry e = (u, v) of
    the block of (row_key_n, x_{n+1}) (``row_key`` is ``x`` for text) the product p = T_uv beta(n+1)_v serves twice:
    beta(n)_u = sum_v p (then normalised) and counts[e] += w_n alpha(n)_u p. One sweep over the entries instead of
    two, and no stored beta. ``beta_first`` receives beta(0) (normalised)."""
    n_steps = x.shape[0]
    width = 0
    for s in range(n_clones.shape[0]):
        width = max(width, n_clones[s])
    beta = np.zeros(width, dtype=np.float64)
    nxt = np.zeros(width, dtype=np.float64)
    j = x[n_steps - 1]
    m_j = n_clones[j]
    for v in range(m_j):
        beta[v] = 1.0 / m_j
    for n in range(n_steps - 2, -1, -1):
        i = x[n]
        m_i = n_clones[i]
        k = find_block(block_lookup, n_clones.shape[0], row_key[n], j)
        # the normaliser of xi(n)
        a1 = offsets[n + 1]
        dot = 0.0
        for v in range(m_j):
            dot += alpha[a1 + v] * beta[v]
        total_xi = predictive[n + 1] * dot
        w = 1.0 / total_xi if total_xi > 0.0 else 0.0
        total = 0.0
        if k >= 0:
            base = row_base[k]
            a0 = offsets[n]
            for u in range(m_i):
                a = alpha[a0 + u] * w
                acc = 0.0
                if a != 0.0:
                    for e in range(indptr[base + u], indptr[base + u + 1]):
                        product = data[e] * beta[indices[e]]
                        acc += product
                        counts[e] += a * product
                else:
                    for e in range(indptr[base + u], indptr[base + u + 1]):
                        acc += data[e] * beta[indices[e]]
                nxt[u] = acc
                total += acc
        if total > 0.0:
            scale = 1.0 / total
            for u in range(m_i):
                beta[u] = nxt[u] * scale
        else:
            for u in range(m_i):
                beta[u] = 1.0 / m_i
        j = i
        m_j = m_i
    for u in range(m_j):
        beta_first[u] = beta[u]


@njit(**_FLAGS)
def normalise(values, pseudocount, indptr, row_base, block_pairs, n_clones, clone_start, out):
    """out = row-normalise(values + pseudocount) over the stored entries (float64 row sums over all blocks of a
    clone's row); a row without mass stays zero."""
    totals = np.zeros(clone_start[-1], dtype=np.float64)
    for k in range(block_pairs.shape[0]):
        i = block_pairs[k, 0]
        for u in range(n_clones[i]):
            r = row_base[k] + u
            s = 0.0
            for e in range(indptr[r], indptr[r + 1]):
                s += values[e] + pseudocount
            totals[clone_start[i] + u] += s
    for k in range(block_pairs.shape[0]):
        i = block_pairs[k, 0]
        for u in range(n_clones[i]):
            r = row_base[k] + u
            total = totals[clone_start[i] + u]
            inverse = 1.0 / total if total > 0.0 else 0.0
            for e in range(indptr[r], indptr[r + 1]):
                out[e] = (values[e] + pseudocount) * inverse


@njit(**_FLAGS)
def viterbi_pass(
    indptr,
    indices,
    data,
    row_base,
    pi,
    n_clones,
    clone_start,
    block_lookup,
    row_shift,
    evidence_ptr,
    evidence_symbol,
    evidence_weight,
    state_offsets,
    backpointer,
    path,
):
    """Max-product decoding with per-position soft evidence: :func:`engine.backends.cpu.kernels.max_product` on the CSR
    blocks (the same operations in the same order, so the same path as the dense kernel on the same non-zeros).
    ``row_shift[n]`` is added to the symbols of position n to name the block row of step n -> n+1 (zeros for text,
    ``a_n * E`` for a walk with actions)."""
    n_steps = evidence_ptr.shape[0] - 1
    path_slot = np.empty(n_steps, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    log_scale = max_product(
        data[:0], none, indptr, indices, data, row_base, pi, n_clones, clone_start, block_lookup, row_shift,
        evidence_ptr, evidence_symbol, evidence_weight, none, none, state_offsets, backpointer, path_slot,
    )  # fmt: skip
    if np.isfinite(log_scale):
        slots_to_clones(path_slot, evidence_ptr, evidence_symbol, n_clones, clone_start, state_offsets, path)
    return log_scale


@njit(**_FLAGS)
def sample_path(
    indptr,
    indices,
    data,
    row_base,
    n_clones,
    clone_start,
    clone_symbol,
    row_block_start,
    block_pairs,
    first_clone,
    uniforms,
    out_symbols,
):
    """Sample a clone path by following T (``engine.backends.cpu.kernels.sample_path`` on the CSR blocks: the same draws
    give the same path). Returns the number of symbols written (fewer at a clone with no outgoing mass)."""
    clone = first_clone
    out_symbols[0] = clone_symbol[clone]
    for n in range(1, out_symbols.shape[0]):
        i = clone_symbol[clone]
        u = clone - clone_start[i]
        total = 0.0
        for k in range(row_block_start[i], row_block_start[i + 1]):
            r = row_base[k] + u
            for e in range(indptr[r], indptr[r + 1]):
                total += data[e]
        if total <= 0.0:
            return n
        target = uniforms[n] * total
        acc = 0.0
        chosen = -1
        last_positive = -1
        for k in range(row_block_start[i], row_block_start[i + 1]):
            j = block_pairs[k, 1]
            r = row_base[k] + u
            for e in range(indptr[r], indptr[r + 1]):
                if data[e] > 0.0:
                    last_positive = clone_start[j] + indices[e]
                    acc += data[e]
                    if acc >= target:
                        chosen = last_positive
                        break
            if chosen >= 0:
                break
        if chosen < 0:
            chosen = last_positive
        clone = chosen
        out_symbols[n] = clone_symbol[clone]
    return out_symbols.shape[0]
