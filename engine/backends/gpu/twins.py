"""NumPy/numba twins of the CUDA kernels of :mod:`engine.backends.gpu.kernels`, so that the GPU engine's array logic
runs, and is tested, on any machine.

Every twin has the signature of a launched CuPy ``RawKernel``, ``kernel(grid, block, args, shared_mem=0)``, takes
the same ``args`` tuple in the same order and writes the same outputs with the same arithmetic (float32 blocks,
messages and dot products; float64 normalisers, weights and totals). Launch geometry has no meaning here: the
persistent kernels' grid-wide barrier, its partial sums and its abort flag are left untouched (a sequential pass
cannot fail to synchronise). Sums are taken in order, where the CUDA kernels take them over a warp's lanes, so
results agree to float32 rounding, not bit for bit; Viterbi and sampling choose by the same rules (the lowest slot
on ties, the last positive entry when rounding leaves the target above the total), so they pick the same path.

``TWINS`` maps each kernel name to its twin; :class:`engine.backends.gpu.devices.SimulatedDevice` launches from it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from engine.backends.cpu import kernels as cpu
from engine.backends.gpu.kernels import PAIR_TILE

_FLAGS = dict(nogil=True, cache=True, error_model="numpy")


@njit(**_FLAGS)
def _chain_sum(M, step_offset, step_rows, n_pos, backward, initial, work, width, store, offsets, norm):  # noqa: PLR0913
    """The scaled pass of ``chain_sum`` (see :data:`engine.backends.gpu.kernels.SOURCE`), one step after another."""
    m_prev = step_rows[0]
    if store is not None:
        o = offsets[n_pos - 1 if backward else 0]
        for t in range(m_prev):
            store[o + t] = initial[t]
    message = np.empty(width, dtype=np.float32)
    for t in range(m_prev):
        message[t] = initial[t]
    previous_total = 0.0
    for s in range(1, n_pos):
        pos = n_pos - 1 - s if backward else s
        block = step_offset[s]
        m_out = step_rows[s]
        inv = np.float32(1.0)
        if s > 1:
            norm[pos + 1 if backward else pos - 1] = previous_total
            if previous_total > 0.0:
                inv = np.float32(1.0 / previous_total)
            else:  # zero-probability step: restart uniform
                for t in range(m_prev):
                    message[t] = np.float32(1.0) / np.float32(m_prev)
        cur = (s & 1) * width
        local = 0.0
        if block >= 0:
            base = offsets[pos] if store is not None else 0
            for row in range(m_out):
                acc = np.float32(0.0)
                r = block + row * m_prev
                for c in range(m_prev):
                    acc += np.float32(M[r + c]) * message[c]
                acc *= inv
                work[cur + row] = acc
                if store is not None:
                    store[base + row] = acc
                local += acc
        for t in range(m_out):
            message[t] = work[cur + t]
        previous_total = local
        m_prev = m_out
    if n_pos > 1:
        norm[0 if backward else n_pos - 1] = previous_total


def _chain(grid: Any, block: Any, args: tuple, shared_mem: int = 0) -> None:
    """Twin of ``chain_sum_f32`` and ``chain_sum_f16``: the scaled forward or backward pass (float16 blocks are
    widened to float32 on load, as the CUDA kernel does; numba has no float16 arithmetic on the CPU)."""
    (M, step_offset, step_rows, n_pos, backward, initial, work, width, store, offsets, norm, _, _, _) = args
    if M.dtype == np.float16:
        M = M.astype(np.float32)
    _chain_sum(M, step_offset, step_rows, int(n_pos), int(backward), initial, work, int(width), store, offsets, norm)


@njit(**_FLAGS)
def _scale_messages(store, offsets, x, n_clones, factor, first, last, mode):
    for n in range(first, last):
        m = n_clones[x[n]]
        o = offsets[n]
        f = factor[n]
        if mode == 0:
            if f > 0.0:
                inv = np.float32(1.0 / f)
                for v in range(m):
                    store[o + v] = store[o + v] * inv
            else:
                for v in range(m):
                    store[o + v] = np.float32(1.0) / np.float32(m)
        else:
            s = np.float32(f)
            for v in range(m):
                store[o + v] *= s


def scale_messages(grid: Any, block: Any, args: tuple, shared_mem: int = 0) -> None:
    """Twin of ``scale_messages``: normalise (mode 0) or scale (mode 1) the stored messages of [first, last)."""
    store, offsets, x, n_clones, factor, first, last, mode = args
    _scale_messages(store, offsets, x, n_clones, factor, int(first), int(last), int(mode))


@njit(**_FLAGS)
def _pair_weights(x, n_pos, n_clones, predictive, alpha, alpha_offsets, beta, beta_offsets, weights):
    for n in range(n_pos - 1):
        m = n_clones[x[n + 1]]
        a = alpha_offsets[n + 1]
        b = beta_offsets[n + 1]
        s = 0.0
        for v in range(m):
            s += np.float64(alpha[a + v] * beta[b + v])
        total = predictive[n + 1] * s
        weights[n] = 1.0 / total if total > 0.0 else 0.0


def pair_weights(grid: Any, block: Any, args: tuple, shared_mem: int = 0) -> None:
    """Twin of ``pair_weights``: 1 / (predictive[n+1] <alpha(n+1), beta(n+1)>) per step, 0 at a zero event."""
    x, n_pos, n_clones, predictive, alpha, alpha_offsets, beta, beta_offsets, weights = args
    _pair_weights(x, int(n_pos), n_clones, predictive, alpha, alpha_offsets, beta, beta_offsets, weights)


@njit(**_FLAGS)
def _pair_counts(alpha, beta, table, item_block, item_tile, n_items, add, counts, tile):
    for w in range(n_items):
        t = item_block[w]
        a0, b0, occurrences = table[6 * t], table[6 * t + 1], table[6 * t + 2]
        m_i, m_j, lo = table[6 * t + 3], table[6 * t + 4], table[6 * t + 5]
        first = item_tile[w] * tile
        last = min(first + tile, m_i * m_j)
        for e in range(first, last):
            r = e // m_j
            c = e - r * m_j
            s = np.float32(0.0)
            for k in range(occurrences):
                s += alpha[a0 + k * m_i + r] * beta[b0 + k * m_j + c]
            if add:
                counts[lo + e] += s
            else:
                counts[lo + e] = s


def pair_counts(grid: Any, block: Any, args: tuple, shared_mem: int = 0) -> None:
    """Twin of ``pair_counts``: A^T B of each touched block's stacked messages, one entry at a time."""
    alpha, beta, table, item_block, item_tile, n_items, add, counts = args
    _pair_counts(alpha, beta, table, item_block, item_tile, int(n_items), int(add), counts, PAIR_TILE)


@njit(**_FLAGS)
def _row_totals(values, pseudocount, support_mask, row_offset, row_len, row_clone, n_rows, totals, row_sum):
    for r in range(n_rows):
        o = row_offset[r]
        s = 0.0
        for v in range(row_len[r]):
            p = pseudocount
            if support_mask is not None and support_mask[o + v] == 0:
                p = 0.0
            s += np.float64(values[o + v]) + p
        if totals is not None:
            totals[row_clone[r]] += s
        if row_sum is not None:
            row_sum[r] = s


def row_totals(grid: Any, block: Any, args: tuple, shared_mem: int = 0) -> None:
    """Twin of ``row_totals``: per block row, sum(values + pseudocount on the support) into its clone's total
    and/or its own row sum."""
    values, pseudocount, support, row_offset, row_len, row_clone, n_rows, totals, row_sum = args
    _row_totals(values, float(pseudocount), support, row_offset, row_len, row_clone, int(n_rows), totals, row_sum)


@njit(**_FLAGS)
def _row_write(values, pseudocount, support_mask, row_offset, row_len, row_clone, row_base, row_u, row_m, n_rows,
               totals, T, TT):  # fmt: skip
    for r in range(n_rows):
        o = row_offset[r]
        inverse = 1.0
        if totals is not None:
            t = totals[row_clone[r]]
            inverse = 1.0 / t if t > 0.0 else 0.0
        for v in range(row_len[r]):
            p = pseudocount
            if support_mask is not None and support_mask[o + v] == 0:
                p = 0.0
            value = np.float32((np.float64(values[o + v]) + p) * inverse)
            if T is not None:
                T[o + v] = value
            if TT is not None:
                TT[row_base[r] + v * row_m[r] + row_u[r]] = value


def row_write(grid: Any, block: Any, args: tuple, shared_mem: int = 0) -> None:
    """Twin of ``row_write``: T = (values + pseudocount on the support) / totals[row], row-major and transposed."""
    (values, pseudocount, support, row_offset, row_len, row_clone, row_base, row_u, row_m, n_rows, totals, T, TT) = args
    _row_write(
        values, float(pseudocount), support, row_offset, row_len, row_clone, row_base, row_u, row_m, int(n_rows),
        totals, T, TT,
    )  # fmt: skip


@njit(**_FLAGS)
def _viterbi_chain(TT, block_offset, block_lookup, n_symbols, n_clones, row_shift, ev_ptr, ev_symbol, ev_weight,
                   slot_offset, n_pos, delta, backpointer, scale):  # fmt: skip
    prev_scale = 1.0
    for n in range(1, n_pos):
        c0, c1 = ev_ptr[n], ev_ptr[n + 1]
        p0, p1 = ev_ptr[n - 1], ev_ptr[n]
        shift = 0 if row_shift is None else row_shift[n - 1]
        grid_best = 0.0
        for c in range(c0, c1):
            j = ev_symbol[c]
            w = ev_weight[c]
            for v in range(n_clones[j]):
                slot = slot_offset[c] + v
                best = 0.0
                arg = -1
                if w > 0.0:
                    for p in range(p0, p1):
                        i = ev_symbol[p]
                        k = cpu.find_block(block_lookup, n_symbols, shift + i, j)
                        if k < 0:
                            continue
                        m_i = n_clones[i]
                        row = block_offset[k] + v * m_i
                        for u in range(m_i):
                            du = delta[slot_offset[p] + u] / prev_scale
                            if du <= 0.0:
                                continue
                            value = du * np.float64(TT[row + u])
                            if value > best:
                                best = value
                                arg = slot_offset[p] + u
                value = best * w
                delta[slot] = value
                backpointer[slot] = arg
                grid_best = max(grid_best, value)
        prev_scale = grid_best
        scale[n] = prev_scale
        if not prev_scale > 0.0:
            return


def viterbi_chain(grid: Any, block: Any, args: tuple, shared_mem: int = 0) -> None:
    """Twin of ``viterbi_chain``: the max-product pass with soft evidence, lowest slot first on ties; step
    n -> n+1 reads the blocks of rows ``row_shift[n] + i`` (None: zeros, a text)."""
    (TT, block_offset, block_lookup, n_symbols, n_clones, row_shift, ev_ptr, ev_symbol, ev_weight, slot_offset, n_pos,
     delta, backpointer, scale, _, _, _) = args  # fmt: skip
    _viterbi_chain(
        TT, block_offset, block_lookup, int(n_symbols), n_clones, row_shift, ev_ptr, ev_symbol, ev_weight,
        slot_offset, int(n_pos), delta, backpointer, scale,
    )  # fmt: skip


def sample_chain(grid: Any, block: Any, args: tuple, shared_mem: int = 0) -> None:
    """Twin of ``sample_chain``: follow T from the first clone with one uniform per step (the CPU sampler's rule,
    :func:`engine.backends.cpu.kernels.sample_path`, which the CUDA kernel repeats)."""
    (T, n_clones, clone_start, clone_symbol, row_block_start, block_pairs, block_offset, first_clone, uniforms,
     length, out_symbols, written) = args  # fmt: skip
    out = np.zeros(int(length), dtype=np.int64)
    count = cpu.sample_path(
        T, n_clones, clone_start, clone_symbol, row_block_start, block_pairs.reshape(-1, 2), block_offset,
        int(first_clone), uniforms, out,
    )  # fmt: skip
    out_symbols[:count] = out[:count]
    written[0] = count


@njit(**_FLAGS)
def _lockstep_chain(M, n_steps, length, step_group_start, group_offset, group_in, group_out, group_chunk_start,
                    chunk_ids, offsets, store, norm):  # fmt: skip
    for s in range(n_steps):
        for g in range(step_group_start[s], step_group_start[s + 1]):
            if group_offset[g] < 0:
                continue  # no block: no rows (the chunks' next message restarts uniform)
            m_in = group_in[g]
            staged = np.empty(m_in, dtype=np.float32)
            for q in range(group_chunk_start[g], group_chunk_start[g + 1]):
                at = chunk_ids[q] * length + s
                total = 1.0 if s == 0 else norm[at]
                prev = offsets[at]
                if total > 0.0:
                    scale = np.float32(1.0 / total)
                    for u in range(m_in):
                        staged[u] = store[prev + u] * scale
                else:
                    for u in range(m_in):
                        staged[u] = np.float32(1.0) / np.float32(m_in)
                out = offsets[at + 1]
                for v in range(group_out[g]):
                    row = group_offset[g] + v * m_in
                    acc = np.float32(0.0)
                    for u in range(m_in):
                        acc += M[row + u] * staged[u]
                    store[out + v] = acc
                    norm[at + 1] += acc


def lockstep_chain(grid: Any, block: Any, args: tuple, shared_mem: int = 0) -> None:
    """Twin of ``lockstep_chain_f32`` and ``lockstep_chain_f16`` (and their ``_loads1`` / ``_loads8`` / ``_rows2``
    forms, which differ only in how many loads of a row a lane, or rows a warp, keeps in flight): the lockstep pass,
    group by group and chunk by chunk (the items, tiles and rows of the CUDA kernel only share its work out; float16
    blocks are widened to float32 on load, as the CUDA kernel does)."""
    (M, n_steps, length, _, _, step_group_start, _, group_offset, group_in, group_out, _, group_chunk_start,
     chunk_ids, offsets, store, norm, _, _, _) = args  # fmt: skip
    if M.dtype == np.float16:
        M = M.astype(np.float32)
    _lockstep_chain(
        M, int(n_steps), int(length), step_group_start, group_offset, group_in, group_out, group_chunk_start,
        chunk_ids, offsets, store, norm,
    )  # fmt: skip


TWINS: dict[str, Callable[..., None]] = {
    "chain_sum_f32": _chain,
    "chain_sum_f16": _chain,
    "scale_messages": scale_messages,
    "pair_weights": pair_weights,
    "row_totals": row_totals,
    "row_write": row_write,
    "pair_counts": pair_counts,
    "viterbi_chain": viterbi_chain,
    "sample_chain": sample_chain,
    "lockstep_chain_f32": lockstep_chain,
    "lockstep_chain_f16": lockstep_chain,
    "lockstep_chain_f32_loads1": lockstep_chain,
    "lockstep_chain_f16_loads1": lockstep_chain,
    "lockstep_chain_f32_loads8": lockstep_chain,
    "lockstep_chain_f16_loads8": lockstep_chain,
    "lockstep_chain_f32_rows2": lockstep_chain,
    "lockstep_chain_f16_rows2": lockstep_chain,
}
"""Every kernel of :data:`engine.backends.gpu.kernels.KERNELS`, by name, as its twin."""
