// CUDA kernels of the GPU engine (see engine/kernels/gpu.py, which reads this file; each kernel has a NumPy/numba
// twin in engine/kernels/gpu_twins.py).
#include <cuda_fp16.h>
#define FULL 0xffffffffu

__device__ __forceinline__ float warp_sum_f(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

__device__ __forceinline__ double warp_max_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

// Grid-wide barrier on a monotonic counter: the b-th barrier of a launch waits until the counter reaches
// b * gridDim.x. Gives up (and raises the abort flag) after ~2^34 clock cycles (about 10 s).
__device__ __forceinline__ bool grid_barrier(unsigned int* counter, unsigned int target, int* abort_flag) {
    __syncthreads();
    __shared__ int failed;
    if (threadIdx.x == 0) {
        failed = 0;
        __threadfence();
        atomicAdd(counter, 1u);
        volatile unsigned int* c = counter;
        volatile int* a = abort_flag;
        long long t0 = clock64();
        while (*c < target) {
            if (*a) { failed = 1; break; }
            if (clock64() - t0 > (1LL << 34)) { *a = 1; failed = 1; break; }
        }
        __threadfence();
    }
    __syncthreads();
    return failed == 0;
}

// Pull a warp's share of a block's rows (row_bytes each) into L2 ahead of use: one 128-byte line per lane.
__device__ __forceinline__ void prefetch_rows(const char* B, int rows, long long row_bytes, int first_row,
                                              int stride, int lane) {
    for (int row = first_row; row < rows; row += stride) {
        const char* r = B + (long long)row * row_bytes;
        for (long long c = lane * 128; c < row_bytes; c += 32 * 128)
            asm volatile("prefetch.global.L2 [%0];" :: "l"(r + c));
    }
}

// Sum of the per-block partials of this step, in a fixed order (identical in every block).
__device__ __forceinline__ double grid_total(const double* partial, int G) {
    __shared__ double total;
    if (threadIdx.x < 32) {
        double v = 0.0;
        for (int g = threadIdx.x; g < G; g += 32) v += __ldcg(partial + g);
        v = warp_sum_d(v);
        if (threadIdx.x == 0) total = v;
    }
    __syncthreads();
    double t = total;
    __syncthreads();
    return t;
}

// Scaled forward (backward == 0) or backward (backward == 1) pass over x[0..n_pos).
// Forward step n: out(v) = sum_u alpha(n-1)_u T(x_{n-1}, x_n)[u, v], read from the transposed blocks (M = T^T),
// so every output entry is a dot product with a contiguous row. Backward step n: out(u) = sum_v T(x_n, x_{n+1})[u, v]
// beta(n+1)_v, from M = T. The input message is the previous raw output times 1/norm (norm: its sum), or uniform
// after a zero-probability step. norm[pos] receives the sum of the raw output at pos (forward: the predictive
// probability P(x_pos | x_<pos)); store (if not null) receives the raw outputs at offsets[pos] (normalised later by
// scale_messages). The first message ('initial', already normalised) is copied to store by block 0.
__device__ __forceinline__ float load(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load(const __half* p) { return __half2float(__ldg(p)); }

// Scaled forward or backward pass over the n_pos positions of a sequence, in pass order s = 0..n_pos-1
// (forward: position s; backward: position n_pos-1-s). Step s >= 1 multiplies the previous message by one block:
// forward out(v) = sum_u alpha_u T[u, v], read from the transposed blocks (M = T^T) so that every output entry is a
// dot product with a contiguous row; backward out(u) = sum_v T[u, v] beta_v, from M = T. The host lists per step the
// block's offset in M (step_offset, -1 when the pair has no block: a zero-probability step) and the output size
// (step_rows), so a step needs no chain of dependent index loads. The input message is the previous raw output, its
// 1/sum folded into the dot products (uniform after a zero-probability step). norm[pos] receives the sum of the raw
// output at pos (forward: P(x_pos | x_<pos)); store (if not null) the raw outputs at offsets[pos] (normalised later
// by scale_messages). The first message ('initial', normalised) is copied to store by block 0.
template <typename Matrix>
__device__ __forceinline__ void chain_sum(const Matrix* __restrict__ M, const long long* __restrict__ step_offset,
          const int* __restrict__ step_rows, int n_pos, int backward, const float* __restrict__ initial,
          float* work, int width, float* store, const long long* __restrict__ offsets,
          double* norm, double* partial, unsigned int* barrier, int* abort_flag)
{
    extern __shared__ float message[];
    __shared__ float row_part[32];
    __shared__ double warp_partial[32];
    __shared__ double previous_total;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const int G = gridDim.x;
    const int global_warp = blockIdx.x * warps + warp;
    const int total_warps = G * warps;

    int m_prev = step_rows[0];
    if (store != nullptr && blockIdx.x == 0) {
        const long long o = offsets[backward ? n_pos - 1 : 0];
        for (int t = threadIdx.x; t < m_prev; t += blockDim.x) store[o + t] = initial[t];
    }
    const float* prev = initial;
    for (int s = 1; s < n_pos; ++s) {
        const int pos = backward ? n_pos - 1 - s : s;
        const long long block = step_offset[s];
        const int m_out = step_rows[s];
        if (s + 1 < n_pos) {  // a small next block: start moving it towards L2 now (large ones would evict this one)
            const long long next_block = step_offset[s + 1];
            const int next_rows = step_rows[s + 1];
            if (next_block >= 0 && (long long)next_rows * m_out * sizeof(Matrix) <= (8LL << 20))
                prefetch_rows((const char*)(M + next_block), next_rows, (long long)m_out * sizeof(Matrix),
                              global_warp, total_warps, lane);
        }
        // the previous message (raw) and, in the same round trip, the previous step's total
        for (int t = threadIdx.x; t < m_prev; t += blockDim.x) message[t] = __ldcg(prev + t);
        if (s > 1 && warp == 0) {
            double v = 0.0;
            for (int g = lane; g < G; g += 32) v += __ldcg(partial + ((s - 1) & 1) * G + g);
            v = warp_sum_d(v);
            if (lane == 0) previous_total = v;
        }
        __syncthreads();
        float inv = 1.0f;
        if (s > 1) {
            const double total = previous_total;
            if (blockIdx.x == 0 && threadIdx.x == 0) norm[backward ? pos + 1 : pos - 1] = total;
            if (total > 0.0) {
                inv = (float)(1.0 / total);
            } else {  // zero-probability step: restart uniform (the same branch in every block)
                const float u_value = 1.0f / (float)m_prev;
                for (int t = threadIdx.x; t < m_prev; t += blockDim.x) message[t] = u_value;
                __syncthreads();
            }
        }
        float* cur = work + (s & 1) * width;
        double local = 0.0;
        if (block >= 0) {
            // 'split' warps of one block share a row (each takes every split-th 32-column slice), so that short
            // steps still keep many loads in flight; eight independent loads per lane per round.
            int split = 1;
            while (split < warps && (long long)m_out * split * 2 <= total_warps) split <<= 1;
            const int part = warp % split;
            const int rows_per_round = total_warps / split;
            const int stride = 32 * split;
            const Matrix* B = M + block;
            const long long base = store != nullptr ? offsets[pos] : 0;
            for (int round = 0; round < m_out; round += rows_per_round) {
                const int row = round + global_warp / split;
                float acc = 0.f;
                if (row < m_out) {
                    const Matrix* r = B + (long long)row * m_prev;
                    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f, a4 = 0.f, a5 = 0.f, a6 = 0.f, a7 = 0.f;
                    int c = part * 32 + lane;
                    for (; c + 7 * stride < m_prev; c += 8 * stride) {
                        const float v0 = load(r + c), v1 = load(r + c + stride), v2 = load(r + c + 2 * stride),
                                    v3 = load(r + c + 3 * stride), v4 = load(r + c + 4 * stride),
                                    v5 = load(r + c + 5 * stride), v6 = load(r + c + 6 * stride),
                                    v7 = load(r + c + 7 * stride);
                        a0 += v0 * message[c];
                        a1 += v1 * message[c + stride];
                        a2 += v2 * message[c + 2 * stride];
                        a3 += v3 * message[c + 3 * stride];
                        a4 += v4 * message[c + 4 * stride];
                        a5 += v5 * message[c + 5 * stride];
                        a6 += v6 * message[c + 6 * stride];
                        a7 += v7 * message[c + 7 * stride];
                    }
                    for (; c < m_prev; c += stride) a0 += load(r + c) * message[c];
                    acc = warp_sum_f(((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)));
                }
                if (split > 1) {
                    if (lane == 0) row_part[warp] = acc;
                    __syncthreads();
                    if (part == 0 && lane == 0) {
                        for (int p = 1; p < split; ++p) acc += row_part[warp + p];
                    }
                    __syncthreads();
                }
                if (part == 0 && lane == 0 && row < m_out) {
                    acc *= inv;
                    cur[row] = acc;
                    if (store != nullptr) store[base + row] = acc;
                    local += acc;
                }
            }
        }
        if (lane == 0) warp_partial[warp] = local;
        __syncthreads();
        if (warp == 0) {
            double v = lane < warps ? warp_partial[lane] : 0.0;
            v = warp_sum_d(v);
            if (lane == 0) partial[(s & 1) * G + blockIdx.x] = v;
        }
        if (!grid_barrier(barrier, (unsigned int)s * (unsigned int)G, abort_flag)) return;
        prev = cur;
        m_prev = m_out;
    }
    if (n_pos > 1 && blockIdx.x == 0) {  // the last step's total
        const double total = grid_total(partial + ((n_pos - 1) & 1) * G, G);
        if (threadIdx.x == 0) norm[backward ? 0 : n_pos - 1] = total;
    }
}

#define CHAIN_ARGS const long long* __restrict__ step_offset, const int* __restrict__ step_rows, int n_pos, \
    int backward, const float* __restrict__ initial, float* work, int width, float* store, \
    const long long* __restrict__ offsets, double* norm, double* partial, unsigned int* barrier, int* abort_flag
#define CHAIN_PASS step_offset, step_rows, n_pos, backward, initial, work, width, store, offsets, norm, partial, \
    barrier, abort_flag

// The pass on float32 blocks, and on a float16 copy of them (half the bytes; float32 arithmetic).
extern "C" __global__ void __launch_bounds__(512, 2) chain_sum_f32(const float* __restrict__ M, CHAIN_ARGS) {
    chain_sum<float>(M, CHAIN_PASS);
}
extern "C" __global__ void __launch_bounds__(512, 2) chain_sum_f16(const __half* __restrict__ M, CHAIN_ARGS) {
    chain_sum<__half>(M, CHAIN_PASS);
}

// Normalise stored messages (mode 0: divide message n by factor[n], uniform where factor[n] <= 0) or scale them
// (mode 1: multiply message n by factor[n]). One warp per position; positions [first, last).
extern "C" __global__ void scale_messages(float* store, const long long* __restrict__ offsets,
                                          const int* __restrict__ x, const int* __restrict__ n_clones,
                                          const double* __restrict__ factor, int first, int last, int mode)
{
    const int lane = threadIdx.x & 31;
    const long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long n = first + w;
    if (n >= last) return;
    const int m = n_clones[x[n]];
    float* msg = store + offsets[n];
    const double f = factor[n];
    if (mode == 0) {
        if (f > 0.0) {
            const float inv = (float)(1.0 / f);
            for (int v = lane; v < m; v += 32) msg[v] = msg[v] * inv;
        } else {
            const float u = 1.0f / (float)m;
            for (int v = lane; v < m; v += 32) msg[v] = u;
        }
    } else {
        const float s = (float)f;
        for (int v = lane; v < m; v += 32) msg[v] *= s;
    }
}

// weights[n] = 1 / (alpha(n)^T T(x_n, x_{n+1}) beta(n+1)) = 1 / (predictive[n+1] <alpha(n+1), beta(n+1)>)
// for n in [0, n_pos - 1); 0 at a zero-probability step. One warp per step.
extern "C" __global__ void pair_weights(const int* __restrict__ x, int n_pos, const int* __restrict__ n_clones,
                                        const double* __restrict__ predictive,
                                        const float* __restrict__ alpha, const long long* __restrict__ alpha_offsets,
                                        const float* __restrict__ beta, const long long* __restrict__ beta_offsets,
                                        double* weights)
{
    const int lane = threadIdx.x & 31;
    const long long n = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (n >= n_pos - 1) return;
    const int m = n_clones[x[n + 1]];
    const float* a = alpha + alpha_offsets[n + 1];
    const float* b = beta + beta_offsets[n + 1];
    double s = 0.0;
    for (int v = lane; v < m; v += 32) s += (double)(a[v] * b[v]);
    s = warp_sum_d(s);
    if (lane == 0) {
        const double total = predictive[n + 1] * s;
        weights[n] = total > 0.0 ? 1.0 / total : 0.0;
    }
}

// Row sums for the M-step, one warp per block row r (rows of all blocks, in block order):
// totals[row_clone[r]] += sum_v (values[row_offset[r] + v] + pseudocount * support), with support = 1 where
// support_mask is null. row_sum (if not null) receives each block row's own sum.
extern "C" __global__ void row_totals(const float* __restrict__ values, double pseudocount,
                                      const unsigned char* __restrict__ support_mask,
                                      const long long* __restrict__ row_offset, const int* __restrict__ row_len,
                                      const int* __restrict__ row_clone, long long n_rows,
                                      double* totals, double* row_sum)
{
    const int lane = threadIdx.x & 31;
    const long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (r >= n_rows) return;
    const long long o = row_offset[r];
    const int len = row_len[r];
    double s = 0.0;
    for (int v = lane; v < len; v += 32) {
        const double p = support_mask == nullptr ? pseudocount : (support_mask[o + v] ? pseudocount : 0.0);
        s += (double)values[o + v] + p;
    }
    s = warp_sum_d(s);
    if (lane == 0) {
        if (totals != nullptr) atomicAdd(totals + row_clone[r], s);
        if (row_sum != nullptr) row_sum[r] = s;
    }
}

// T = (values + pseudocount * support) / totals[row], written row-major to T and block-transposed to TT
// (totals null: no division, i.e. a plain copy-and-transpose). A row without mass stays zero.
extern "C" __global__ void row_write(const float* __restrict__ values, double pseudocount,
                                     const unsigned char* __restrict__ support_mask,
                                     const long long* __restrict__ row_offset, const int* __restrict__ row_len,
                                     const int* __restrict__ row_clone, const long long* __restrict__ row_base,
                                     const int* __restrict__ row_u, const int* __restrict__ row_m, long long n_rows,
                                     const double* __restrict__ totals, float* T, float* TT)
{
    const int lane = threadIdx.x & 31;
    const long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (r >= n_rows) return;
    const long long o = row_offset[r];
    const int len = row_len[r];
    const long long base = row_base[r];
    const int u = row_u[r];
    const int m = row_m[r];
    double inverse = 1.0;
    if (totals != nullptr) {
        const double t = totals[row_clone[r]];
        inverse = t > 0.0 ? 1.0 / t : 0.0;
    }
    for (int v = lane; v < len; v += 32) {
        const double p = support_mask == nullptr ? pseudocount : (support_mask[o + v] ? pseudocount : 0.0);
        const float t = (float)(((double)values[o + v] + p) * inverse);
        if (T != nullptr) T[o + v] = t;
        if (TT != nullptr) TT[base + (long long)v * m + u] = t;
    }
}

// Expected counts of every occurring symbol pair in one launch (the online batches' E-steps, whose pairs occur a few
// times each: one cuBLAS product per pair cost more to call than to run). Row t of table (6 int64 each) is a
// touched block: the alpha slot of its first occurrence, the beta slot of the step after it, its occurrences, m_i,
// m_j and its offset in counts; the pair's messages are stacked (occurrence k at a0 + k * m_i and b0 + k * m_j).
// counts[lo + r * m_j + c] = (or += with add) sum_k alpha[a0 + k * m_i + r] * beta[b0 + k * m_j + c], A^T B.
// One thread block per work item: PAIR_TILE entries (item_tile[w] of block item_block[w]), one thread per entry.
#define PAIR_TILE 1024
extern "C" __global__ void pair_counts(const float* __restrict__ alpha, const float* __restrict__ beta,
                                       const long long* __restrict__ table, const int* __restrict__ item_block,
                                       const int* __restrict__ item_tile, int n_items, int add, float* counts)
{
    const int w = blockIdx.x;
    if (w >= n_items) return;
    const long long* row = table + 6LL * item_block[w];
    const long long a0 = row[0], b0 = row[1], lo = row[5];
    const int occurrences = (int)row[2], m_i = (int)row[3], m_j = (int)row[4];
    const long long size = (long long)m_i * m_j;
    const long long first = (long long)item_tile[w] * PAIR_TILE;
    const long long last = first + PAIR_TILE < size ? first + PAIR_TILE : size;
    for (long long e = first + threadIdx.x; e < last; e += blockDim.x) {
        const int r = (int)(e / m_j);
        const int c = (int)(e - (long long)r * m_j);
        float s = 0.0f;
        for (int k = 0; k < occurrences; ++k) {
            s += alpha[a0 + (long long)k * m_i + r] * beta[b0 + (long long)k * m_j + c];
        }
        if (add) counts[lo + e] += s;
        else counts[lo + e] = s;
    }
}

// The block number of symbol pair (i, j), or -1 when it has no block: a binary search among row i's blocks in the
// layout's block_lookup table (row starts, then each block's column symbol; engine.kernels.cpu.find_block).
__device__ __forceinline__ int find_block(const int* __restrict__ block_lookup, int n_symbols, int i, int j)
{
    int lo = block_lookup[i], hi = block_lookup[i + 1];
    const int* column = block_lookup + n_symbols + 1;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        const int c = column[mid];
        if (c < j) lo = mid + 1;
        else if (c > j) hi = mid;
        else return mid;
    }
    return -1;
}

// Max-product (Viterbi) pass with per-position soft evidence (see engine.kernels.cpu.viterbi_pass, whose
// arithmetic this repeats operation for operation, so that both give the same path). Candidate c of position n
// (c in ev_ptr[n]..ev_ptr[n+1]) is symbol ev_symbol[c] with weight ev_weight[c]; its clones occupy the slots
// slot_offset[c]..slot_offset[c] + n_clones[ev_symbol[c]] of delta (stored for all positions, raw: the value
// before division by that position's scale). delta at position 0 is set by the caller, already normalised
// (scale[0] = 1). Per output slot one warp takes the max over the previous position's slots of
// delta_prev / scale_prev * T (read from the transposed blocks: contiguous), lowest slot first on ties.
// row_shift (null: zeros, a text) is added to the symbols of position n to name the block row of step n -> n+1
// (a_n * E for a walk with actions, engine.actions; the CPU kernel's row_shift): candidate symbol i of position
// n - 1 reads block (row_shift[n - 1] + i, j). The host checks that every such row is a symbol of the layout.
extern "C" __global__ void __launch_bounds__(512, 2)
viterbi_chain(const float* __restrict__ TT, const long long* __restrict__ block_offset,
              const int* __restrict__ block_lookup, int n_symbols, const int* __restrict__ n_clones,
              const long long* __restrict__ row_shift, const long long* __restrict__ ev_ptr,
              const int* __restrict__ ev_symbol, const double* __restrict__ ev_weight,
              const long long* __restrict__ slot_offset, int n_pos, double* delta, long long* backpointer,
              double* scale, double* partial, unsigned int* barrier, int* abort_flag)
{
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const int G = gridDim.x;
    const int global_warp = blockIdx.x * warps + warp;
    const int total_warps = G * warps;
    __shared__ double warp_best[32];
    double prev_scale = 1.0;
    for (int n = 1; n < n_pos; ++n) {
        const long long c0 = ev_ptr[n], c1 = ev_ptr[n + 1];
        const long long p0 = ev_ptr[n - 1], p1 = ev_ptr[n];
        const int shift = row_shift == nullptr ? 0 : (int)row_shift[n - 1];
        const long long first_slot = slot_offset[c0];
        const long long n_slots = slot_offset[c1 - 1] + n_clones[ev_symbol[c1 - 1]] - first_slot;
        double local_best = 0.0;
        for (long long r = global_warp; r < n_slots; r += total_warps) {
            const long long slot = first_slot + r;
            long long c = c0;
            while (c + 1 < c1 && slot_offset[c + 1] <= slot) ++c;
            const int j = ev_symbol[c];
            const int v = (int)(slot - slot_offset[c]);
            const double w = ev_weight[c];
            double best = 0.0;
            long long arg = -1;
            if (w > 0.0) {
                for (long long p = p0; p < p1; ++p) {
                    const int i = ev_symbol[p];
                    const int k = find_block(block_lookup, n_symbols, shift + i, j);
                    if (k < 0) continue;
                    const int m_i = n_clones[i];
                    const float* row = TT + block_offset[k] + (long long)v * m_i;
                    const double* d = delta + slot_offset[p];
                    for (int u = lane; u < m_i; u += 32) {
                        const double du = __ldcg(d + u) / prev_scale;
                        if (du <= 0.0) continue;
                        const double val = du * (double)row[u];
                        if (val > best) { best = val; arg = slot_offset[p] + u; }
                    }
                }
            }
            // warp argmax: the larger value, the lower slot on ties
            for (int o = 16; o > 0; o >>= 1) {
                const double ob = __shfl_xor_sync(FULL, best, o);
                const long long oa = __shfl_xor_sync(FULL, arg, o);
                if (ob > best || (ob == best && oa >= 0 && (arg < 0 || oa < arg))) { best = ob; arg = oa; }
            }
            if (lane == 0) {
                const double value = best * w;
                delta[slot] = value;
                backpointer[slot] = arg;
                local_best = fmax(local_best, value);
            }
        }
        if (lane == 0) warp_best[warp] = local_best;
        __syncthreads();
        if (warp == 0) {
            double v = lane < warps ? warp_best[lane] : 0.0;
            v = warp_max_d(v);
            if (lane == 0) partial[(n & 1) * G + blockIdx.x] = v;
        }
        if (!grid_barrier(barrier, (unsigned int)n * (unsigned int)G, abort_flag)) return;
        __shared__ double grid_best;
        if (threadIdx.x < 32) {
            double v = 0.0;
            for (int g = threadIdx.x; g < G; g += 32) v = fmax(v, __ldcg(partial + (n & 1) * G + g));
            v = warp_max_d(v);
            if (threadIdx.x == 0) grid_best = v;
        }
        __syncthreads();
        prev_scale = grid_best;
        __syncthreads();
        if (blockIdx.x == 0 && threadIdx.x == 0) scale[n] = prev_scale;
        if (!(prev_scale > 0.0)) return;  // every path has probability zero
    }
}

// Lockstep pass of C chunks (see engine.chunks.LockstepSchedule), forward (M = the transposed blocks TT) or backward
// (M = T, the schedule walking each chunk from its end): step s takes every chunk from its position s to s + 1. The
// message of chunk c at position s lives in store at offsets[c * length + s] (the host's choice: two planes used in
// turn for a pass that keeps nothing, or a slot per position for an E-step). The chunks standing at one block at step
// s form a group; its work is cut into items of up to `tile` chunks by `rows` output rows (group_item_base: each
// group's first item among the step's step_items[s]). A thread block takes an item (in turn, or with item_counter
// the next one not yet taken: DeviceBlocks.lockstep_dynamic): it stages the previous messages
// of its chunks in shared memory, each times 1 / norm[c][s] (the sum of the stored raw message), or uniform where
// that sum is 0 (a zero-probability step: a group without a block has no rows, so no items), or as stored at s = 0
// (normalised); then each warp reads a row of the block once (the memory floor) and takes its dot product with
// every staged message. Every output is stored raw and added to norm[c][s + 1] (float64, zero on entry). Steps are
// separated by the grid-wide barrier, as in chain_sum. Dynamic shared memory: tile * width floats. On float16 blocks
// (a copy of T times a constant scale, engine.backends.gpu.device_blocks.HALF_SCALE) a lane reads two entries per
// load (half the bytes of the float32 pass) and the arithmetic stays float32; outputs and norms carry the scale.
#define LOCKSTEP_TILE_MAX 8

// One warp's dot products of a block row (m_in entries) with the k_count staged messages, added to acc.
__device__ __forceinline__ void lockstep_row(const float* __restrict__ row, const float* staged, int m_in,
                                             int k_count, int lane, float* acc) {
    for (int u = lane; u < m_in; u += 32) {
        const float r = __ldg(row + u);
#pragma unroll
        for (int k = 0; k < LOCKSTEP_TILE_MAX; ++k)
            if (k < k_count) acc[k] += r * staged[k * m_in + u];
    }
}

__device__ __forceinline__ void lockstep_row(const __half* __restrict__ row, const float* staged, int m_in,
                                             int k_count, int lane, float* acc) {
    const int head = (reinterpret_cast<unsigned long long>(row) & 3ull) ? 1 : 0;  // an entry before the first pair
    if (head && lane == 0 && m_in > 0) {
        const float r = __half2float(row[0]);
#pragma unroll
        for (int k = 0; k < LOCKSTEP_TILE_MAX; ++k)
            if (k < k_count) acc[k] += r * staged[k * m_in];
    }
    const int n_pairs = (m_in - head) >> 1;
    const __half2* pairs = reinterpret_cast<const __half2*>(row + head);
    for (int p = lane; p < n_pairs; p += 32) {
        const float2 r = __half22float2(__ldg(pairs + p));
        const int u = head + 2 * p;
#pragma unroll
        for (int k = 0; k < LOCKSTEP_TILE_MAX; ++k)
            if (k < k_count) acc[k] += r.x * staged[k * m_in + u] + r.y * staged[k * m_in + u + 1];
    }
    const int tail = head + 2 * n_pairs;  // an entry after the last pair
    if (tail < m_in && lane == 0) {
        const float r = __half2float(row[tail]);
#pragma unroll
        for (int k = 0; k < LOCKSTEP_TILE_MAX; ++k)
            if (k < k_count) acc[k] += r * staged[k * m_in + tail];
    }
}

// The same dot products for R rows of the block at once (rows[0..R), m_in entries each), with LOADS loads of each
// row in flight per lane (each lane reads its entries u, u + 32, ... LOADS at a time, then multiplies; the sums of
// every row keep the order of lockstep_row, so the results are the same) and K, the staged messages, a compile-time
// count (no branch per message in the inner loop). A row of a few hundred entries is otherwise a chain of dependent
// loads, one HBM latency each (issue 49: 34% of the copy bandwidth at 30,000 states); with R = 2 a warp also keeps
// its loads in flight across the end of a row, where with R = 1 it drains them before its sums and writes.
template <int R, int K, int LOADS>
__device__ __forceinline__ void row_dots(const float* const* rows, const float* staged, int m_in, int lane,
                                         float (*acc)[LOCKSTEP_TILE_MAX]) {
    int u = lane;
    for (; u + 32 * (LOADS - 1) < m_in; u += 32 * LOADS) {
        float r[R][LOADS];
#pragma unroll
        for (int w = 0; w < R; ++w) {
#pragma unroll
            for (int q = 0; q < LOADS; ++q) r[w][q] = __ldg(rows[w] + u + 32 * q);
        }
#pragma unroll
        for (int w = 0; w < R; ++w) {
#pragma unroll
            for (int q = 0; q < LOADS; ++q) {
#pragma unroll
                for (int k = 0; k < K; ++k) acc[w][k] += r[w][q] * staged[k * m_in + u + 32 * q];
            }
        }
    }
    for (; u < m_in; u += 32) {
#pragma unroll
        for (int w = 0; w < R; ++w) {
            const float r = __ldg(rows[w] + u);
#pragma unroll
            for (int k = 0; k < K; ++k) acc[w][k] += r * staged[k * m_in + u];
        }
    }
}

// On float16 rows a lane reads two entries per load; the R rows start at the same offset modulo two entries (the
// caller's rows are an even number of rows apart), so they share the entry before the first pair, if any.
template <int R, int K, int LOADS>
__device__ __forceinline__ void row_dots(const __half* const* rows, const float* staged, int m_in, int lane,
                                         float (*acc)[LOCKSTEP_TILE_MAX]) {
    const int head = (reinterpret_cast<unsigned long long>(rows[0]) & 3ull) ? 1 : 0;  // an entry before the 1st pair
    if (head && lane == 0 && m_in > 0) {
#pragma unroll
        for (int w = 0; w < R; ++w) {
            const float r = __half2float(rows[w][0]);
#pragma unroll
            for (int k = 0; k < K; ++k) acc[w][k] += r * staged[k * m_in];
        }
    }
    const int n_pairs = (m_in - head) >> 1;
    const __half2* pairs[R];
#pragma unroll
    for (int w = 0; w < R; ++w) pairs[w] = reinterpret_cast<const __half2*>(rows[w] + head);
    int p = lane;
    for (; p + 32 * (LOADS - 1) < n_pairs; p += 32 * LOADS) {
        float2 r[R][LOADS];
#pragma unroll
        for (int w = 0; w < R; ++w) {
#pragma unroll
            for (int q = 0; q < LOADS; ++q) r[w][q] = __half22float2(__ldg(pairs[w] + p + 32 * q));
        }
#pragma unroll
        for (int w = 0; w < R; ++w) {
#pragma unroll
            for (int q = 0; q < LOADS; ++q) {
                const int u = head + 2 * (p + 32 * q);
#pragma unroll
                for (int k = 0; k < K; ++k)
                    acc[w][k] += r[w][q].x * staged[k * m_in + u] + r[w][q].y * staged[k * m_in + u + 1];
            }
        }
    }
    for (; p < n_pairs; p += 32) {
#pragma unroll
        for (int w = 0; w < R; ++w) {
            const float2 r = __half22float2(__ldg(pairs[w] + p));
            const int u = head + 2 * p;
#pragma unroll
            for (int k = 0; k < K; ++k) acc[w][k] += r.x * staged[k * m_in + u] + r.y * staged[k * m_in + u + 1];
        }
    }
    const int tail = head + 2 * n_pairs;  // an entry after the last pair
    if (tail < m_in && lane == 0) {
#pragma unroll
        for (int w = 0; w < R; ++w) {
            const float r = __half2float(rows[w][tail]);
#pragma unroll
            for (int k = 0; k < K; ++k) acc[w][k] += r * staged[k * m_in + tail];
        }
    }
}

static_assert(LOCKSTEP_TILE_MAX == 8, "lockstep_row_loads dispatches on 1 to 8 staged messages");

// R rows' dot products with LOADS loads of each in flight per lane (row_dots), dispatched on the number of staged
// messages.
template <int R, int LOADS, typename Matrix>
__device__ __forceinline__ void lockstep_row_loads(const Matrix* const* rows, const float* staged, int m_in,
                                                   int k_count, int lane, float (*acc)[LOCKSTEP_TILE_MAX]) {
    switch (k_count) {
        case 1: row_dots<R, 1, LOADS>(rows, staged, m_in, lane, acc); break;
        case 2: row_dots<R, 2, LOADS>(rows, staged, m_in, lane, acc); break;
        case 3: row_dots<R, 3, LOADS>(rows, staged, m_in, lane, acc); break;
        case 4: row_dots<R, 4, LOADS>(rows, staged, m_in, lane, acc); break;
        case 5: row_dots<R, 5, LOADS>(rows, staged, m_in, lane, acc); break;
        case 6: row_dots<R, 6, LOADS>(rows, staged, m_in, lane, acc); break;
        case 7: row_dots<R, 7, LOADS>(rows, staged, m_in, lane, acc); break;
        default: row_dots<R, 8, LOADS>(rows, staged, m_in, lane, acc); break;
    }
}

// The work item of step s this thread block takes after `item` (-1: its first): in turn, blockIdx.x, + gridDim.x, ...
// (round robin), or with item_counter (zero on entry, one per step) the next one not yet taken (dynamic: whenever
// the thread block is free). Every thread reads *taken before thread 0 writes it again: an item's body ends, and the
// grid barrier begins, with a __syncthreads().
__device__ __forceinline__ int next_item(int* item_counter, int s, int item, int* taken) {
    if (!item_counter) return item < 0 ? blockIdx.x : item + gridDim.x;
    if (threadIdx.x == 0) *taken = atomicAdd(item_counter + s, 1);
    __syncthreads();
    return *taken;
}

template <typename Matrix, int LOADS, int IN_FLIGHT>
__device__ __forceinline__ void lockstep_chain(const Matrix* __restrict__ M, int n_steps, int length, int tile,
                   int rows, const int* __restrict__ step_group_start, const int* __restrict__ step_items,
                   const long long* __restrict__ group_offset, const int* __restrict__ group_in,
                   const int* __restrict__ group_out, const int* __restrict__ group_item_base,
                   const int* __restrict__ group_chunk_start, const int* __restrict__ chunk_ids,
                   const long long* __restrict__ offsets, float* store, double* norm, unsigned int* barrier,
                   int* abort_flag, int* item_counter)
{
    static_assert(LOADS > 1 || IN_FLIGHT == 1, "one load in flight reads one row at a time");
    extern __shared__ float staged[];
    __shared__ long long out_at[LOCKSTEP_TILE_MAX];
    __shared__ int taken;  // the item a thread block took from item_counter
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    const int G = gridDim.x;
    for (int s = 0; s < n_steps; ++s) {
        const int g0 = step_group_start[s], g1 = step_group_start[s + 1];
        for (int item = next_item(item_counter, s, -1, &taken); item < step_items[s];
             item = next_item(item_counter, s, item, &taken)) {
            int lo = g0, hi = g1 - 1;  // the group of this item: the last one whose first item is <= item
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (group_item_base[mid] <= item) lo = mid; else hi = mid - 1;
            }
            const int g = lo;
            const int m_in = group_in[g], m_out = group_out[g];
            const int row_blocks = (m_out + rows - 1) / rows;
            const int j = item - group_item_base[g];
            const int part = j / row_blocks, row_block = j - part * row_blocks;
            const int q0 = group_chunk_start[g] + part * tile;
            const int k_count = min(tile, group_chunk_start[g + 1] - q0);
            for (int k = 0; k < k_count; ++k) {
                const long long at = (long long)chunk_ids[q0 + k] * length + s;
                const double total = s == 0 ? 1.0 : __ldcg(norm + at);
                const float* p = store + offsets[at];
                float* mine = staged + k * m_in;
                if (total > 0.0) {
                    const float scale = (float)(1.0 / total);
                    for (int u = threadIdx.x; u < m_in; u += blockDim.x) mine[u] = __ldcg(p + u) * scale;
                } else {
                    for (int u = threadIdx.x; u < m_in; u += blockDim.x) mine[u] = 1.0f / (float)m_in;
                }
                if (threadIdx.x == 0) out_at[k] = at + 1;
            }
            __syncthreads();
            const int v_end = min(m_out, (row_block + 1) * rows);
            // A warp takes rows v, v + warps, ..., IN_FLIGHT of them at once (warps is even, so the rows of a
            // float16 block start at the same offset modulo two entries); the last turn may hold fewer.
            for (int v = row_block * rows + warp; v < v_end; v += IN_FLIGHT * warps) {
                float acc[IN_FLIGHT][LOCKSTEP_TILE_MAX];
                const Matrix* row_at[IN_FLIGHT];
#pragma unroll
                for (int w = 0; w < IN_FLIGHT; ++w) {
#pragma unroll
                    for (int k = 0; k < LOCKSTEP_TILE_MAX; ++k) acc[w][k] = 0.f;
                    row_at[w] = M + group_offset[g] + (long long)(v + w * warps) * m_in;
                }
                int here = 1;  // the rows of this turn below v_end
#pragma unroll
                for (int w = 1; w < IN_FLIGHT; ++w) here += v + w * warps < v_end ? 1 : 0;
                if constexpr (LOADS == 1) lockstep_row(row_at[0], staged, m_in, k_count, lane, acc[0]);
                else if (here == IN_FLIGHT) lockstep_row_loads<IN_FLIGHT, LOADS>(row_at, staged, m_in, k_count, lane, acc);
                else {  // fewer rows than IN_FLIGHT left in the item: each alone
#pragma unroll
                    for (int w = 0; w < IN_FLIGHT; ++w)
                        if (w < here) lockstep_row_loads<1, LOADS>(row_at + w, staged, m_in, k_count, lane, acc + w);
                }
#pragma unroll
                for (int w = 0; w < IN_FLIGHT; ++w) {
#pragma unroll
                    for (int k = 0; k < LOCKSTEP_TILE_MAX; ++k) {
                        if (w < here && k < k_count) {
                            const float value = warp_sum_f(acc[w][k]);
                            if (lane == 0) {
                                store[offsets[out_at[k]] + v + w * warps] = value;
                                atomicAdd(norm + out_at[k], (double)value);
                            }
                        }
                    }
                }
            }
            __syncthreads();
        }
        if (!grid_barrier(barrier, (unsigned int)(s + 1) * (unsigned int)G, abort_flag)) return;
    }
}

#define LOCKSTEP_ARGS int n_steps, int length, int tile, int rows, const int* __restrict__ step_group_start, \
    const int* __restrict__ step_items, const long long* __restrict__ group_offset, const int* __restrict__ group_in, \
    const int* __restrict__ group_out, const int* __restrict__ group_item_base, \
    const int* __restrict__ group_chunk_start, const int* __restrict__ chunk_ids, \
    const long long* __restrict__ offsets, float* store, double* norm, unsigned int* barrier, int* abort_flag, \
    int* item_counter
#define LOCKSTEP_PASS n_steps, length, tile, rows, step_group_start, step_items, group_offset, group_in, group_out, \
    group_item_base, group_chunk_start, chunk_ids, offsets, store, norm, barrier, abort_flag, item_counter

// The lockstep pass on float32 blocks, and on a float16 copy of them (half the bytes; float32 arithmetic), with
// LOCKSTEP_LOADS loads of a block row in flight per lane; the _loads1 kernels read one at a time (the kernel before
// issue 49's second measure) and the _loads8 kernels eight, kept to measure against (DeviceBlocks.lockstep_loads);
// the _rows2 kernels keep LOCKSTEP_LOADS loads of each of two rows in flight per warp, to measure against
// (DeviceBlocks.lockstep_rows_in_flight).
#define LOCKSTEP_LOADS 4
extern "C" __global__ void __launch_bounds__(512, 2) lockstep_chain_f32(const float* __restrict__ M, LOCKSTEP_ARGS) {
    lockstep_chain<float, LOCKSTEP_LOADS, 1>(M, LOCKSTEP_PASS);
}

extern "C" __global__ void __launch_bounds__(512, 2) lockstep_chain_f16(const __half* __restrict__ M, LOCKSTEP_ARGS) {
    lockstep_chain<__half, LOCKSTEP_LOADS, 1>(M, LOCKSTEP_PASS);
}

extern "C" __global__ void __launch_bounds__(512, 2) lockstep_chain_f32_loads1(const float* __restrict__ M,
                                                                               LOCKSTEP_ARGS) {
    lockstep_chain<float, 1, 1>(M, LOCKSTEP_PASS);
}

extern "C" __global__ void __launch_bounds__(512, 2) lockstep_chain_f16_loads1(const __half* __restrict__ M,
                                                                               LOCKSTEP_ARGS) {
    lockstep_chain<__half, 1, 1>(M, LOCKSTEP_PASS);
}

extern "C" __global__ void __launch_bounds__(512, 2) lockstep_chain_f32_loads8(const float* __restrict__ M,
                                                                               LOCKSTEP_ARGS) {
    lockstep_chain<float, 8, 1>(M, LOCKSTEP_PASS);
}

extern "C" __global__ void __launch_bounds__(512, 2) lockstep_chain_f16_loads8(const __half* __restrict__ M,
                                                                               LOCKSTEP_ARGS) {
    lockstep_chain<__half, 8, 1>(M, LOCKSTEP_PASS);
}

extern "C" __global__ void __launch_bounds__(512, 2) lockstep_chain_f32_rows2(const float* __restrict__ M,
                                                                              LOCKSTEP_ARGS) {
    lockstep_chain<float, LOCKSTEP_LOADS, 2>(M, LOCKSTEP_PASS);
}

extern "C" __global__ void __launch_bounds__(512, 2) lockstep_chain_f16_rows2(const __half* __restrict__ M,
                                                                              LOCKSTEP_ARGS) {
    lockstep_chain<__half, LOCKSTEP_LOADS, 2>(M, LOCKSTEP_PASS);
}

// Sample a clone path by following T from first_clone (one warp; see engine.kernels.cpu.sample_path).
extern "C" __global__ void sample_chain(const float* __restrict__ T, const int* __restrict__ n_clones,
                                        const int* __restrict__ clone_start, const int* __restrict__ clone_symbol,
                                        const int* __restrict__ row_block_start, const int* __restrict__ block_pairs,
                                        const long long* __restrict__ block_offset, int first_clone,
                                        const double* __restrict__ uniforms, int length, int* out_symbols,
                                        int* written)
{
    const int lane = threadIdx.x & 31;
    if (threadIdx.x >= 32) return;
    int clone = first_clone;
    if (lane == 0) out_symbols[0] = clone_symbol[clone];
    for (int n = 1; n < length; ++n) {
        const int i = clone_symbol[clone];
        const int r = clone - clone_start[i];
        double total = 0.0;
        for (int k = row_block_start[i]; k < row_block_start[i + 1]; ++k) {
            const int cols = n_clones[block_pairs[2 * k + 1]];
            const float* row = T + block_offset[k] + (long long)r * cols;
            for (int v = lane; v < cols; v += 32) total += (double)row[v];
        }
        total = warp_sum_d(total);
        if (!(total > 0.0)) { if (lane == 0) *written = n; return; }
        const double target = uniforms[n] * total;
        double acc = 0.0;
        int chosen = -1, last_positive = -1;
        for (int k = row_block_start[i]; k < row_block_start[i + 1] && chosen < 0; ++k) {
            const int j = block_pairs[2 * k + 1];
            const int cols = n_clones[j];
            const float* row = T + block_offset[k] + (long long)r * cols;
            for (int base = 0; base < cols && chosen < 0; base += 32) {
                const int v = base + lane;
                const double value = v < cols ? (double)row[v] : 0.0;
                double inclusive = value;
                for (int o = 1; o < 32; o <<= 1) {
                    const double up = __shfl_up_sync(FULL, inclusive, o);
                    if (lane >= o) inclusive += up;
                }
                const unsigned int positive = __ballot_sync(FULL, value > 0.0);
                const unsigned int reached = __ballot_sync(FULL, value > 0.0 && acc + inclusive >= target);
                if (reached) {
                    chosen = clone_start[j] + base + (__ffs(reached) - 1);
                } else if (positive) {
                    last_positive = clone_start[j] + base + (31 - __clz(positive));
                }
                acc += __shfl_sync(FULL, inclusive, 31);
            }
        }
        if (chosen < 0) chosen = last_positive;
        clone = chosen;
        if (lane == 0) out_symbols[n] = clone_symbol[clone];
    }
    if (lane == 0) *written = length;
}
