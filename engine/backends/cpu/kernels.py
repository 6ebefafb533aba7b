"""Numba kernels for the block-sparse CHMM on the CPU.

Every kernel works on the flat block buffer described in :mod:`engine.model.dense`: block ``k`` of symbol pair
``(i, j) = block_pairs[k]`` is stored row-major at ``T[block_offset[k] : block_offset[k + 1]]`` with shape
``n_clones[i] x n_clones[j]``. Messages live in flat buffers too: the message of position ``n`` starts at
``offsets[n]`` and has ``n_clones[x[n]]`` entries. The kernels release the GIL so the forward and the backward
pass of an E-step can run on two threads at once.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_FLAGS = dict(nogil=True, cache=True, fastmath=False, error_model="numpy")
# fastmath only where reassociating a sum is harmless (dot products and axpy loops of message passing).
_FAST = dict(nogil=True, cache=True, fastmath=True, error_model="numpy")


@njit(nogil=True, cache=True, inline="always")
def find_block(block_lookup, n_symbols, i, j):
    """The block number of symbol pair (i, j), or -1 when it has no block: a binary search among row i's blocks
    in the layout's ``block_lookup`` table (row starts, then the column symbol of every block; see
    :class:`engine.model.blocks.BlockLayout`)."""
    lo = block_lookup[i]
    hi = block_lookup[i + 1]
    base = n_symbols + 1
    while lo < hi:
        mid = (lo + hi) >> 1
        column = block_lookup[base + mid]
        if column < j:
            lo = mid + 1
        elif column > j:
            hi = mid
        else:
            return mid
    return -1


@njit(**_FAST)
def _axpy_rows(blocks, start, width, weights, active, n_active, out):
    """out += sum over t of weights[active[t]] * row active[t] of the row-major block at ``start`` (rows of
    ``width`` entries). Four rows per sweep of ``out`` (a quarter of the loads and stores of one row at a time: about
    10% faster at 1,000-3,000 states); slices rather than offset arithmetic let LLVM vectorise the loop."""
    t = 0
    while t + 3 < n_active:
        u0 = active[t]
        u1 = active[t + 1]
        u2 = active[t + 2]
        u3 = active[t + 3]
        a0 = weights[u0]
        a1 = weights[u1]
        a2 = weights[u2]
        a3 = weights[u3]
        r0 = blocks[start + u0 * width : start + (u0 + 1) * width]
        r1 = blocks[start + u1 * width : start + (u1 + 1) * width]
        r2 = blocks[start + u2 * width : start + (u2 + 1) * width]
        r3 = blocks[start + u3 * width : start + (u3 + 1) * width]
        for v in range(width):
            out[v] += (a0 * r0[v] + a1 * r1[v]) + (a2 * r2[v] + a3 * r3[v])
        t += 4
    while t < n_active:
        u = active[t]
        a = weights[u]
        row = blocks[start + u * width : start + (u + 1) * width]
        for v in range(width):
            out[v] += a * row[v]
        t += 1


@njit(**_FAST)
def forward_pass(T, pi, x, row_key, n_clones, clone_start, block_lookup, block_offset, store, offsets, predictive):
    """Scaled forward pass (paper, section 3: alpha(n+1)^T = alpha(n)^T T(x_n, x_{n+1}), normalised).

    Writes ``predictive[n] = P(x_n | x_1..x_{n-1})`` (float64; ``P(x_1)`` for n = 0): the normaliser of step n,
    so that log P(x) = sum(log(predictive)). When a step has probability zero under the model (a missing block,
    or all mass lost after pruning) ``predictive[n]`` is 0 and the message restarts uniform over the clones of
    ``x[n]``. If ``offsets`` is non-empty the normalised messages alpha(n) are stored at ``store[offsets[n]:]``.
    Returns the number of zero-probability events.

    ``row_key[n]`` names the row of the block used by step n -> n+1: ``x`` itself for text; ``a_n * E + x_n`` for a
    walk whose transitions depend on the action a_n (:mod:`engine.cognitive.actions`, a layout of A * E row symbols).
    """
    n_steps = x.shape[0]
    width = 0
    for s in range(n_clones.shape[0]):
        width = max(width, n_clones[s])
    alpha = np.zeros(width, dtype=T.dtype)
    nxt = np.zeros(width, dtype=T.dtype)
    active = np.empty(width, dtype=np.int64)
    keep = offsets.shape[0] > 0
    zero_events = 0
    i = x[0]
    m_i = n_clones[i]
    total = 0.0
    for u in range(m_i):
        alpha[u] = pi[clone_start[i] + u]
        total += alpha[u]
    if total > 0.0:
        predictive[0] = total
        scale = 1.0 / total
        for u in range(m_i):
            alpha[u] = alpha[u] * scale
    else:
        predictive[0] = 0.0
        zero_events += 1
        for u in range(m_i):
            alpha[u] = 1.0 / m_i
    if keep:
        base = offsets[0]
        for u in range(m_i):
            store[base + u] = alpha[u]
    for n in range(1, n_steps):
        j = x[n]
        m_j = n_clones[j]
        k = find_block(block_lookup, n_clones.shape[0], row_key[n - 1], j)
        total = 0.0
        if k >= 0:
            out = nxt[:m_j]
            out[:] = 0.0
            start = block_offset[k]
            # visit only the clones with mass (messages of trained models are sparse); the zero test stays
            # out of the inner loop, which would otherwise not vectorise
            n_active = 0
            for u in range(m_i):
                if alpha[u] != 0.0:
                    active[n_active] = u
                    n_active += 1
            _axpy_rows(T, start, m_j, alpha, active, n_active, out)
            for v in range(m_j):
                total += out[v]
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
            base = offsets[n]
            for v in range(m_j):
                store[base + v] = alpha[v]
        i = j
        m_i = m_j
    return zero_events


@njit(**_FLAGS)
def transpose_blocks(T, block_pairs, block_offset, n_clones):
    """Every stored block transposed, in the same place of a new buffer (block k: n_clones[j] x n_clones[i])."""
    out = np.empty_like(T)
    for k in range(block_pairs.shape[0]):
        rows = n_clones[block_pairs[k, 0]]
        cols = n_clones[block_pairs[k, 1]]
        base = block_offset[k]
        for u in range(rows):
            for v in range(cols):
                out[base + v * rows + u] = T[base + u * cols + v]
    return out


@njit(**_FAST)
def backward_pass(T_transposed, x, row_key, n_clones, block_lookup, block_offset, store, offsets):
    """Backward pass beta(n) = T(x_n, x_{n+1}) beta(n+1) (paper, section 3), each message normalised to sum 1.

    Takes the transposed blocks (:func:`transpose_blocks`) so that the product is a sum of contiguous columns
    scaled by the entries of beta(n+1), which vectorises like the forward pass. beta(N) is uniform. A step
    without a block, or with all mass lost, restarts uniform. The messages are written to ``store[offsets[n]:]``.
    Their normalisation differs from the forward one; the E-step divides each xi(n) by its exact total instead
    (see :func:`pair_weights`). ``row_key`` as in :func:`forward_pass`.
    """
    n_steps = x.shape[0]
    width = 0
    for s in range(n_clones.shape[0]):
        width = max(width, n_clones[s])
    beta = np.zeros(width, dtype=T_transposed.dtype)
    nxt = np.zeros(width, dtype=T_transposed.dtype)
    active = np.empty(width, dtype=np.int64)
    j = x[n_steps - 1]
    m_j = n_clones[j]
    base = offsets[n_steps - 1]
    for v in range(m_j):
        beta[v] = 1.0 / m_j
        store[base + v] = beta[v]
    for n in range(n_steps - 2, -1, -1):
        i = x[n]
        m_i = n_clones[i]
        k = find_block(block_lookup, n_clones.shape[0], row_key[n], j)
        base = offsets[n]
        total = 0.0
        if k >= 0:
            start = block_offset[k]
            out = nxt[:m_i]
            out[:] = 0.0
            n_active = 0
            for v in range(m_j):
                if beta[v] != 0.0:
                    active[n_active] = v
                    n_active += 1
            _axpy_rows(T_transposed, start, m_i, beta, active, n_active, out)
            for u in range(m_i):
                total += out[u]
        if total > 0.0:
            scale = 1.0 / total
            for u in range(m_i):
                beta[u] = nxt[u] * scale
                store[base + u] = beta[u]
        else:
            for u in range(m_i):
                beta[u] = 1.0 / m_i
                store[base + u] = beta[u]
        j = i
        m_j = m_i


@njit(**_FAST)
def pair_weights(x, n_clones, predictive, alpha_store, alpha_offsets, beta_store, beta_offsets, weights, scale_alpha):
    """weights[n] = 1 / (alpha(n)^T T(x_n, x_{n+1}) beta(n+1)), the normaliser of xi(n), for every step n.

    With alpha normalised by the forward pass, alpha(n)^T T beta(n+1) = predictive[n+1] * <alpha(n+1), beta(n+1)>,
    so no extra matrix-vector product is needed. Steps with a zero-probability event get weight 0. With
    ``scale_alpha`` each alpha(n) (n < N-1) is multiplied by its weight in the same sweep (alpha(n+1) is read
    before it is scaled).
    """
    for n in range(x.shape[0] - 1):
        m = n_clones[x[n + 1]]
        a = alpha_offsets[n + 1]
        b = beta_offsets[n + 1]
        av = alpha_store[a : a + m]
        bv = beta_store[b : b + m]
        s = 0.0
        for v in range(m):
            s += av[v] * bv[v]
        total = predictive[n + 1] * s
        w = 1.0 / total if total > 0.0 else 0.0
        weights[n] = w
        if scale_alpha:
            m_n = n_clones[x[n]]
            a_n = alpha_offsets[n]
            msg = alpha_store[a_n : a_n + m_n]
            wf = alpha_store.dtype.type(w)
            for u in range(m_n):
                msg[u] *= wf


@njit(**_FAST)
def accumulate_counts_loop(
    T,
    x,
    row_key,
    n_clones,
    block_lookup,
    block_offset,
    alpha_store,
    alpha_offsets,
    beta_store,
    beta_offsets,
    weights,
    counts,
):
    """Expected transition counts by per-step rank-one updates (the reference to the grouped products).

    counts(i, j) += w_n * alpha(n) T(i, j) beta(n+1)^T elementwise, for every n with (x_n, x_{n+1}) = (i, j).
    """
    for n in range(x.shape[0] - 1):
        w = weights[n]
        if w == 0.0:
            continue
        i = x[n]
        j = x[n + 1]
        m_i = n_clones[i]
        m_j = n_clones[j]
        k = find_block(block_lookup, n_clones.shape[0], row_key[n], j)
        start = block_offset[k]
        a = alpha_offsets[n]
        b = beta_offsets[n + 1]
        bv = beta_store[b : b + m_j]
        for u in range(m_i):
            au = alpha_store[a + u] * w
            if au != 0.0:
                row = T[start + u * m_j : start + (u + 1) * m_j]
                out = counts[start + u * m_j : start + (u + 1) * m_j]
                for v in range(m_j):
                    out[v] += au * row[v] * bv[v]


@njit(**_FLAGS)
def rescale_position(delta, evidence_ptr, evidence_symbol, n_clones, state_offsets, n, best):
    """Divide the max-product messages of position ``n`` (all its candidates' slots) by ``best``."""
    for c in range(evidence_ptr[n], evidence_ptr[n + 1]):
        out = state_offsets[c]
        for v in range(n_clones[evidence_symbol[c]]):
            delta[out + v] /= best


@njit(**_FLAGS)
def backtrack_slots(delta, evidence_ptr, evidence_symbol, n_clones, state_offsets, backpointer, path_slot):
    """The MAP path as candidate slots: the first slot of the last position with the largest delta, then the
    back-pointers. Shared by the dense, sparse and scrambled-text Viterbi kernels."""
    n_steps = evidence_ptr.shape[0] - 1
    slot = -1
    top = -1.0
    for c in range(evidence_ptr[n_steps - 1], evidence_ptr[n_steps]):
        out = state_offsets[c]
        for v in range(n_clones[evidence_symbol[c]]):
            if delta[out + v] > top:
                top = delta[out + v]
                slot = out + v
    for n in range(n_steps - 1, -1, -1):
        path_slot[n] = slot
        slot = backpointer[slot]


@njit(**_FLAGS)
def slots_to_clones(path_slot, evidence_ptr, evidence_symbol, n_clones, clone_start, state_offsets, path):
    """Global clone of each position's path slot (the candidate that holds the slot, and its clone)."""
    for n in range(path_slot.shape[0]):
        slot = path_slot[n]
        for c in range(evidence_ptr[n], evidence_ptr[n + 1]):
            s = evidence_symbol[c]
            base = state_offsets[c]
            if base <= slot < base + n_clones[s]:
                path[n] = clone_start[s] + slot - base
                break


@njit(**_FLAGS)
def viterbi_start(
    pi, n_clones, clone_start, evidence_ptr, evidence_symbol, evidence_weight, state_offsets, delta, backpointer
):
    """Position 0 of the max-product pass: delta(0)_v = pi_v e(0, sym(v)) on each candidate's slots, rescaled to
    max 1. Returns the scale (0.0 when every start has probability zero). Shared by the dense, sparse and
    scrambled-text Viterbi kernels."""
    best = 0.0
    for c in range(evidence_ptr[0], evidence_ptr[1]):
        s = evidence_symbol[c]
        w = evidence_weight[c]
        base = state_offsets[c]
        for u in range(n_clones[s]):
            val = pi[clone_start[s] + u] * w
            delta[base + u] = val
            backpointer[base + u] = -1
            if val > best:
                best = val
    if best > 0.0:
        rescale_position(delta, evidence_ptr, evidence_symbol, n_clones, state_offsets, 0, best)
    return best


@njit(**_FLAGS)
def clear_slots(delta, backpointer, out, width):
    """Empty ``width`` max-product slots from ``out`` (no predecessor yet)."""
    for v in range(width):
        delta[out + v] = 0.0
        backpointer[out + v] = -1


@njit(**_FLAGS)
def max_through_block(T, start, delta, src, m_i, out, m_j, backpointer):
    """delta_out(v) = max(delta_out(v), max_u delta_src(u) T_uv) through one dense block (rows of ``m_j`` entries
    from ``T[start]``), the argmax u kept as a slot index in ``backpointer``."""
    for u in range(m_i):
        du = delta[src + u]
        if du <= 0.0:
            continue
        row = start + u * m_j
        for v in range(m_j):
            val = du * T[row + v]
            if val > delta[out + v]:
                delta[out + v] = val
                backpointer[out + v] = src + u


@njit(**_FLAGS)
def weigh_slots(delta, out, width, weight, best):
    """Multiply ``width`` slots from ``out`` by the evidence ``weight``; returns max(best, the largest of them)."""
    for v in range(width):
        delta[out + v] *= weight
        if delta[out + v] > best:
            best = delta[out + v]
    return best


@njit(**_FLAGS)
def max_through_rows(indptr, indices, data, row, delta, src, m_i, out, backpointer):
    """:func:`max_through_block` through one CSR block (its rows from ``row`` in ``indptr``)."""
    for u in range(m_i):
        du = delta[src + u]
        if du <= 0.0:
            continue
        r = row + u
        for e in range(indptr[r], indptr[r + 1]):
            v = indices[e]
            val = du * data[e]
            if val > delta[out + v]:
                delta[out + v] = val
                backpointer[out + v] = src + u


@njit(**_FLAGS)
def max_product(
    T,
    block_offset,
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
    pred_ptr,
    pred_node,
    state_offsets,
    backpointer,
    path_slot,
):
    """The max-product (Viterbi) pass with per-position soft evidence, written once for the dense and the CSR
    blocks and for lattices of candidates: its rescaling and its backtrack.

    Position n may be any of the symbols ``evidence_symbol[evidence_ptr[n]:evidence_ptr[n+1]]``, each with
    likelihood weight ``evidence_weight``; its candidate clones are the clones of those symbols, laid out one
    symbol after another from ``state_offsets[c]`` (c: the candidate's index in the evidence arrays).
    delta(n+1)_v = e(n+1, sym(v)) max_u delta(n)_u T_uv, rescaled to max 1 each step (float64); ``backpointer``
    (one entry per candidate clone) receives the argmax u as a global candidate-clone index.
    The blocks are dense (``T`` from ``block_offset``) or, when ``indptr`` is not empty, CSR (``indptr``,
    ``indices``, ``data``, block k's rows from ``row_base[k]``). ``row_shift[n]`` is added to the symbol of
    position n to name the block row of step n -> n+1 (zeros for text; ``a_n * E`` for a walk with actions, see
    :func:`forward_pass`'s ``row_key``). A candidate follows every candidate of the position before, or, when
    ``pred_ptr`` is not empty (a lattice), only ``pred_node[pred_ptr[c]:pred_ptr[c+1]]``.
    Writes the MAP path's candidate slots into ``path_slot`` (:func:`backtrack_slots`) and returns
    log max_z P(z, evidence) (-inf when every path has probability zero; ``path_slot`` is then not written).
    """
    n_steps = evidence_ptr.shape[0] - 1
    csr = indptr.shape[0] > 0
    lattice = pred_ptr.shape[0] > 0
    delta = np.zeros(state_offsets[-1], dtype=np.float64)
    best = viterbi_start(
        pi, n_clones, clone_start, evidence_ptr, evidence_symbol, evidence_weight, state_offsets, delta, backpointer
    )
    if best <= 0.0:
        return -np.inf
    log_scale = np.log(best)
    for n in range(1, n_steps):
        best = 0.0
        for c in range(evidence_ptr[n], evidence_ptr[n + 1]):
            j = evidence_symbol[c]
            m_j = n_clones[j]
            out = state_offsets[c]
            clear_slots(delta, backpointer, out, m_j)
            if evidence_weight[c] <= 0.0:
                continue
            lo, hi = (pred_ptr[c], pred_ptr[c + 1]) if lattice else (evidence_ptr[n - 1], evidence_ptr[n])
            for q in range(lo, hi):
                p = pred_node[q] if lattice else q
                i = evidence_symbol[p]
                k = find_block(block_lookup, n_clones.shape[0], row_shift[n - 1] + i, j)
                if k < 0:
                    continue
                if csr:
                    max_through_rows(indptr, indices, data, row_base[k], delta, state_offsets[p], n_clones[i], out,
                                     backpointer)  # fmt: skip
                else:
                    max_through_block(T, block_offset[k], delta, state_offsets[p], n_clones[i], out, m_j, backpointer)
            best = weigh_slots(delta, out, m_j, evidence_weight[c], best)
        if best <= 0.0:
            return -np.inf
        log_scale += np.log(best)
        rescale_position(delta, evidence_ptr, evidence_symbol, n_clones, state_offsets, n, best)
    backtrack_slots(delta, evidence_ptr, evidence_symbol, n_clones, state_offsets, backpointer, path_slot)
    return log_scale


@njit(**_FLAGS)
def viterbi_pass(
    T,
    pi,
    n_clones,
    clone_start,
    block_lookup,
    block_offset,
    row_shift,
    evidence_ptr,
    evidence_symbol,
    evidence_weight,
    state_offsets,
    backpointer,
    path,
    pred_ptr,
    pred_node,
):
    """:func:`max_product` on the dense blocks: writes the MAP clone path (global clone indices) into ``path`` and
    returns log max_z P(z, evidence) (-inf when every path has probability zero). ``pred_ptr``, ``pred_node``: a
    lattice's predecessors, or empty."""
    n_steps = evidence_ptr.shape[0] - 1
    path_slot = np.empty(n_steps, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    log_scale = max_product(
        T, block_offset, none, none, T[:0], none, pi, n_clones, clone_start, block_lookup, row_shift, evidence_ptr,
        evidence_symbol, evidence_weight, pred_ptr, pred_node, state_offsets, backpointer, path_slot,
    )  # fmt: skip
    if np.isfinite(log_scale):
        slots_to_clones(path_slot, evidence_ptr, evidence_symbol, n_clones, clone_start, state_offsets, path)
    return log_scale


@njit(**_FLAGS)
def sample_path(
    T,
    n_clones,
    clone_start,
    clone_symbol,
    row_block_start,
    block_pairs,
    block_offset,
    first_clone,
    uniforms,
    out_symbols,
):
    """Sample a clone path from ``first_clone`` by following T; writes the emitted symbols.

    ``uniforms`` holds one U(0, 1) draw per step (drawn by the caller's numpy Generator). A clone with an
    all-zero row (possible after pruning) ends the sample early; the number of symbols written is returned.
    """
    u_clone = first_clone
    out_symbols[0] = clone_symbol[u_clone]
    for n in range(1, out_symbols.shape[0]):
        i = clone_symbol[u_clone]
        row_index = u_clone - clone_start[i]
        total = 0.0
        for k in range(row_block_start[i], row_block_start[i + 1]):
            cols = n_clones[block_pairs[k, 1]]
            row = block_offset[k] + row_index * cols
            for v in range(cols):
                total += T[row + v]
        if total <= 0.0:
            return n
        target = uniforms[n] * total
        acc = 0.0
        chosen = -1
        last_positive = -1  # rounding can leave target just above the final sum: then take the last positive entry
        for k in range(row_block_start[i], row_block_start[i + 1]):
            j = block_pairs[k, 1]
            cols = n_clones[j]
            row = block_offset[k] + row_index * cols
            for v in range(cols):
                if T[row + v] > 0.0:
                    last_positive = clone_start[j] + v
                    acc += T[row + v]
                    if acc >= target:
                        chosen = last_positive
                        break
            if chosen >= 0:
                break
        if chosen < 0:
            chosen = last_positive
        u_clone = chosen
        out_symbols[n] = clone_symbol[u_clone]
    return out_symbols.shape[0]


@njit(**_FLAGS)
def online_accumulate(
    A, counts, touched, gain, row_total, block_pairs, block_offset, n_clones, clone_start, first_block, end_block
):
    """Online EM's statistic kept as A / s (one scale s for all of it, see
    :class:`engine.backends.cpu.implementation.LazyOnlineUpdate`): A <- A + gain * counts over the ``touched`` blocks
    among ``first_block`` to ``end_block - 1`` (whole rows), their counts zeroed for the next batch, and each clone's
    row total kept as the same sum (``row_total``). Untouched blocks are not read."""
    for k in range(first_block, end_block):
        if not touched[k]:
            continue
        rows = n_clones[block_pairs[k, 0]]
        cols = n_clones[block_pairs[k, 1]]
        base = block_offset[k]
        first = clone_start[block_pairs[k, 0]]
        for u in range(rows):
            s = 0.0
            row = base + u * cols
            for v in range(cols):
                c = counts[row + v]
                counts[row + v] = 0.0
                A[row + v] += gain * c
                s += c
            row_total[first + u] += gain * s


@njit(**_FLAGS)
def online_transitions(
    A,
    pseudocount,
    row_total,
    row_length,
    needed,
    T,
    T_transposed,
    block_pairs,
    block_offset,
    n_clones,
    clone_start,
    first_block,
    end_block,
):
    """T = row-normalise(A + pseudocount) on the ``needed`` blocks among ``first_block`` to ``end_block - 1``, written
    both row-major (``T``) and block-transposed (``T_transposed``, for the backward pass), from the rows' totals of A
    (``row_total``; ``row_length[i]`` stored entries in a row of symbol i). A row with no mass stays zero, as in
    :func:`engine.model.blocks.normalise_rows`."""
    for k in range(first_block, end_block):
        if not needed[k]:
            continue
        i = block_pairs[k, 0]
        rows = n_clones[i]
        cols = n_clones[block_pairs[k, 1]]
        base = block_offset[k]
        first = clone_start[i]
        smoothing = pseudocount * row_length[i]
        for u in range(rows):
            total = row_total[first + u] + smoothing
            inverse = 1.0 / total if total > 0.0 else 0.0
            row = base + u * cols
            for v in range(cols):
                t = (A[row + v] + pseudocount) * inverse
                T[row + v] = t
                T_transposed[base + v * rows + u] = t
