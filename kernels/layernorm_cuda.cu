// LayerNorm on the GPU; per-element math in math_layernorm.h. Legend in kernels.h.
//
// Rows whose width C is a multiple of 4 up to 1024, 16-byte aligned (GPT-2's 768 among them): a
// warp per row, the row in registers as float4s, its sums by a butterfly of shuffles (every lane
// ends with the same bits). One pass over the tensors: LayerNorm is memory-bound, and the block per
// row below read a row two or three times with block-wide barriers between. Backward adds each
// block's rows into per-block dw/db partials as it goes (warps in a fixed order), then the blocks'
// partials are summed in a fixed tree: no float atomics, the bits depend on N and C alone.
//
// Other widths: one block per row, sums through CUB's block reduction (a fixed tree: reproducible);
// dw/db from per-chunk partials, then the chunks summed in order.
#include <stdint.h>

#include <cub/block/block_reduce.cuh>

#include "cuda_check.h"
#include "kernels_cuda.h"
#include "math_layernorm.h"

enum { THREADS = 128, COLS = 256, CHUNK_ROWS = 64 };

typedef cub::BlockReduce<float, THREADS> Reduce;

// Sum over the block, returned to every thread; leaves tmp and slot free for the next call.
static __device__ float block_sum(float v, Reduce::TempStorage &tmp, float *slot)
{
    v = Reduce(tmp).Sum(v);
    if (threadIdx.x == 0) *slot = v;
    __syncthreads();
    v = *slot;
    __syncthreads();
    return v;
}

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                         const float *b, int C)
{
    __shared__ Reduce::TempStorage tmp;
    __shared__ float slot;
    const float *x = inp + (size_t)blockIdx.x * C;
    float *y = out + (size_t)blockIdx.x * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += THREADS) s += x[c];
    const float m = block_sum(s, tmp, &slot) / C;
    float v = 0.0f; // two passes, as on the CPU: no cancellation in E[x²] − m²
    for (int c = threadIdx.x; c < C; c += THREADS) v += (x[c] - m) * (x[c] - m);
    const float r = mp_ln_rstd(block_sum(v, tmp, &slot) / C);
    for (int c = threadIdx.x; c < C; c += THREADS) y[c] = mp_ln_out(x[c], m, r, w[c], b[c]);
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = m;
        rstd[blockIdx.x] = r;
    }
}

// ---- a warp per row ----

enum { LANES = 32, WARPS = 4, ROWS_PER_WARP = 8, BLOCK_ROWS = WARPS * ROWS_PER_WARP, MAX_K4 = 8 };

// The warp's sum, the same bits in every lane (each step adds the same two values in every lane).
static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float sum4(const float4 a) { return ((a.x + a.y) + a.z) + a.w; }

// Lane l holds float4s l, l + 32, ..., K4 of them (those at or past C/4 are zeros and skipped).
template <int K4>
__global__ void __launch_bounds__(WARPS * LANES) layernorm_forward_warp_kernel(float *out, float *mean, float *rstd,
                                                                               const float *inp, const float *w,
                                                                               const float *b, int N, int C)
{
    const int row = blockIdx.x * WARPS + threadIdx.x / LANES, lane = threadIdx.x % LANES, C4 = C / 4;
    if (row >= N) return;
    const float4 *x4 = reinterpret_cast<const float4 *>(inp + (size_t)row * C);
    float4 x[K4];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < K4; k++) {
        const int c = lane + k * LANES;
        x[k] = c < C4 ? x4[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int k = 0; k < K4; k++) s += sum4(x[k]);
    const float m = warp_sum(s) / C;
    float v = 0.0f; // two passes over the registers, as the CPU: no cancellation in E[x²] − m²
#pragma unroll
    for (int k = 0; k < K4; k++) {
        if (lane + k * LANES >= C4) continue;
        const float dx = x[k].x - m, dy = x[k].y - m, dz = x[k].z - m, dw = x[k].w - m;
        v += ((dx * dx + dy * dy) + dz * dz) + dw * dw;
    }
    const float r = mp_ln_rstd(warp_sum(v) / C);
    float4 *y4 = reinterpret_cast<float4 *>(out + (size_t)row * C);
    const float4 *w4 = reinterpret_cast<const float4 *>(w), *b4 = reinterpret_cast<const float4 *>(b);
#pragma unroll
    for (int k = 0; k < K4; k++) {
        const int c = lane + k * LANES;
        if (c >= C4) continue;
        const float4 ww = w4[c], bb = b4[c];
        y4[c] = make_float4(mp_ln_out(x[k].x, m, r, ww.x, bb.x), mp_ln_out(x[k].y, m, r, ww.y, bb.y),
                            mp_ln_out(x[k].z, m, r, ww.z, bb.z), mp_ln_out(x[k].w, m, r, ww.w, bb.w));
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// The float4s per lane for width C on the warp path, or 0 where C or an address rules it out.
static int warp_k4(int C, const void *const *ptrs, int nptrs)
{
    if (C <= 0 || C % 4 || C > MAX_K4 * LANES * 4) return 0;
    for (int i = 0; i < nptrs; i++)
        if ((uintptr_t)ptrs[i] % 16) return 0;
    const int k4 = (C / 4 + LANES - 1) / LANES;
    return k4 <= 1 ? 1 : k4 <= 2 ? 2 : k4 <= 4 ? 4 : k4 <= 6 ? 6 : 8;
}

template <int K4>
static void forward_warp(cu_ctx_t *ctx, float *out, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b, int N, int C)
{
    layernorm_forward_warp_kernel<K4>
        <<<(unsigned)((N + WARPS - 1) / WARPS), WARPS * LANES, 0, ctx->compute>>>(out, mean, rstd, inp, w, b, N, C);
    CUDA_CHECK_LAUNCH();
}

void cu_layernorm_forward(cu_ctx_t *ctx, float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C)
{
    if (N <= 0) return;
    const void *ptrs[] = {out, inp, w, b};
    switch (warp_k4(C, ptrs, 4)) {
    case 1: return forward_warp<1>(ctx, out, mean, rstd, inp, w, b, N, C);
    case 2: return forward_warp<2>(ctx, out, mean, rstd, inp, w, b, N, C);
    case 4: return forward_warp<4>(ctx, out, mean, rstd, inp, w, b, N, C);
    case 6: return forward_warp<6>(ctx, out, mean, rstd, inp, w, b, N, C);
    case 8: return forward_warp<8>(ctx, out, mean, rstd, inp, w, b, N, C);
    default: break;
    }
    layernorm_forward_kernel<<<N, THREADS, 0, ctx->compute>>>(out, mean, rstd, inp, w, b, C);
    CUDA_CHECK_LAUNCH();
}

// dinp (N,C) += per row, from the row means of dn = dy·w and dn·n. Thread j takes columns j,
// j+THREADS, ... in order; up to K of them are kept in registers between the sums and the write
// (K = 0: read again), the same arithmetic either way.
template <int K>
__global__ void __launch_bounds__(THREADS) layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                                                 const float *w, const float *mean,
                                                                 const float *rstd, int C)
{
    __shared__ Reduce::TempStorage tmp;
    __shared__ float slot;
    const size_t off = (size_t)blockIdx.x * C;
    const float *x = inp + off, *dy = dout + off;
    float *dx = dinp + off;
    const float m = mean[blockIdx.x], r = rstd[blockIdx.x];
    float sdn = 0.0f, sdnn = 0.0f;
    if constexpr (K > 0) {
        float dn[K], n[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int c = threadIdx.x + k * THREADS;
            dn[k] = c < C ? dy[c] * w[c] : 0.0f;
            n[k] = c < C ? mp_ln_norm(x[c], m, r) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < K; k++) {
            if (threadIdx.x + k * THREADS < C) {
                sdn += dn[k];
                sdnn += dn[k] * n[k];
            }
        }
        sdn = block_sum(sdn, tmp, &slot) / C;
        sdnn = block_sum(sdnn, tmp, &slot) / C;
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int c = threadIdx.x + k * THREADS;
            if (c < C) dx[c] += mp_ln_dx(dn[k], n[k], r, sdn, sdnn);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += THREADS) {
            const float dn = dy[c] * w[c];
            sdn += dn;
            sdnn += dn * mp_ln_norm(x[c], m, r);
        }
        sdn = block_sum(sdn, tmp, &slot) / C;
        sdnn = block_sum(sdnn, tmp, &slot) / C;
        for (int c = threadIdx.x; c < C; c += THREADS)
            dx[c] += mp_ln_dx(dy[c] * w[c], mp_ln_norm(x[c], m, r), r, sdn, sdnn);
    }
}

enum { LN_UNROLL = 8 };

// Pass 1: pw, pb (R, C) = Σ over row chunk r of dy·n and of dy; a thread per column, rows in order
// (LN_UNROLL rows' loads issued before their additions).
__global__ void layernorm_dwdb_partial_kernel(float *pw, float *pb, const float *dout, const float *inp,
                                              const float *mean, const float *rstd, int N, int C)
{
    const int c = blockIdx.x * COLS + threadIdx.x, r = blockIdx.y;
    if (c >= C) return;
    const int i1 = (r + 1) * CHUNK_ROWS < N ? (r + 1) * CHUNK_ROWS : N;
    float sw = 0.0f, sb = 0.0f;
    int i = r * CHUNK_ROWS;
    for (; i + LN_UNROLL <= i1; i += LN_UNROLL) {
        float dy[LN_UNROLL], n[LN_UNROLL];
#pragma unroll
        for (int u = 0; u < LN_UNROLL; u++) {
            dy[u] = dout[(size_t)(i + u) * C + c];
            n[u] = mp_ln_norm(inp[(size_t)(i + u) * C + c], mean[i + u], rstd[i + u]);
        }
#pragma unroll
        for (int u = 0; u < LN_UNROLL; u++) {
            sw += dy[u] * n[u];
            sb += dy[u];
        }
    }
    for (; i < i1; i++) {
        const float dy = dout[(size_t)i * C + c];
        sw += dy * mp_ln_norm(inp[(size_t)i * C + c], mean[i], rstd[i]);
        sb += dy;
    }
    pw[(size_t)r * C + c] = sw;
    pb[(size_t)r * C + c] = sb;
}

// Pass 2: dw, db (C) += the chunk partials in chunk order.
__global__ void layernorm_dwdb_finish_kernel(float *dw, float *db, const float *pw, const float *pb, int R, int C)
{
    const int c = blockIdx.x * COLS + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int r = 0; r < R; r++) {
        sw += pw[(size_t)r * C + c];
        sb += pb[(size_t)r * C + c];
    }
    dw[c] += sw;
    db[c] += sb;
}

// dinp += per row as layernorm_dinp_kernel, a warp per row: warp j of block B takes rows
// B·BLOCK_ROWS + j·ROWS_PER_WARP, ... in order, adding dy·n and dy into its lanes' dw/db sums; then
// the block's partial for each column is the warps' sums added in warp order (pw, pb row B).
template <int K4>
__global__ void __launch_bounds__(WARPS * LANES) layernorm_backward_warp_kernel(float *dinp, float *pw, float *pb,
                                                                                const float *dout, const float *inp,
                                                                                const float *w, const float *mean,
                                                                                const float *rstd, int N, int C)
{
    __shared__ float4 part_w[WARPS][K4 * LANES], part_b[WARPS][K4 * LANES];
    const int warp = threadIdx.x / LANES, lane = threadIdx.x % LANES, C4 = C / 4;
    const float4 *w4 = reinterpret_cast<const float4 *>(w);
    float4 ww[K4], aw[K4], ab[K4];
#pragma unroll
    for (int k = 0; k < K4; k++) {
        const int c = lane + k * LANES;
        ww[k] = c < C4 ? w4[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        aw[k] = ab[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const int r0 = blockIdx.x * BLOCK_ROWS + warp * ROWS_PER_WARP;
    for (int row = r0; row < r0 + ROWS_PER_WARP && row < N; row++) {
        const size_t off = (size_t)row * C;
        const float4 *x4 = reinterpret_cast<const float4 *>(inp + off);
        const float4 *dy4 = reinterpret_cast<const float4 *>(dout + off);
        float4 *dx4 = reinterpret_cast<float4 *>(dinp + off);
        const float m = mean[row], r = rstd[row];
        // every load of the row issued before any arithmetic; dinp too, it is added to
        float4 x[K4], dy[K4], dx[K4];
#pragma unroll
        for (int k = 0; k < K4; k++) {
            const int c = lane + k * LANES;
            if (c < C4) x[k] = x4[c], dy[k] = dy4[c], dx[k] = dx4[c];
        }
        float sdn = 0.0f, sdnn = 0.0f;
#pragma unroll
        for (int k = 0; k < K4; k++) {
            if (lane + k * LANES >= C4) continue;
            const float4 n = make_float4(mp_ln_norm(x[k].x, m, r), mp_ln_norm(x[k].y, m, r), mp_ln_norm(x[k].z, m, r),
                                         mp_ln_norm(x[k].w, m, r));
            const float4 dn = make_float4(dy[k].x * ww[k].x, dy[k].y * ww[k].y, dy[k].z * ww[k].z, dy[k].w * ww[k].w);
            sdn += ((dn.x + dn.y) + dn.z) + dn.w;
            sdnn += ((dn.x * n.x + dn.y * n.y) + dn.z * n.z) + dn.w * n.w;
            aw[k].x += dy[k].x * n.x, aw[k].y += dy[k].y * n.y, aw[k].z += dy[k].z * n.z, aw[k].w += dy[k].w * n.w;
            ab[k].x += dy[k].x, ab[k].y += dy[k].y, ab[k].z += dy[k].z, ab[k].w += dy[k].w;
        }
        sdn = warp_sum(sdn) / C;
        sdnn = warp_sum(sdnn) / C;
#pragma unroll
        for (int k = 0; k < K4; k++) {
            const int c = lane + k * LANES;
            if (c >= C4) continue;
            // n and dn taken again from the registers rather than kept: fewer live registers
            float4 d = dx[k];
            d.x += mp_ln_dx(dy[k].x * ww[k].x, mp_ln_norm(x[k].x, m, r), r, sdn, sdnn);
            d.y += mp_ln_dx(dy[k].y * ww[k].y, mp_ln_norm(x[k].y, m, r), r, sdn, sdnn);
            d.z += mp_ln_dx(dy[k].z * ww[k].z, mp_ln_norm(x[k].z, m, r), r, sdn, sdnn);
            d.w += mp_ln_dx(dy[k].w * ww[k].w, mp_ln_norm(x[k].w, m, r), r, sdn, sdnn);
            dx4[c] = d;
        }
    }
#pragma unroll
    for (int k = 0; k < K4; k++) part_w[warp][lane + k * LANES] = aw[k], part_b[warp][lane + k * LANES] = ab[k];
    __syncthreads();
    float4 *pw4 = reinterpret_cast<float4 *>(pw + (size_t)blockIdx.x * C);
    float4 *pb4 = reinterpret_cast<float4 *>(pb + (size_t)blockIdx.x * C);
    for (int c = threadIdx.x; c < C4; c += WARPS * LANES) {
        float4 sw = part_w[0][c], sb = part_b[0][c];
#pragma unroll
        for (int j = 1; j < WARPS; j++) {
            const float4 a = part_w[j][c], b = part_b[j][c];
            sw.x += a.x, sw.y += a.y, sw.z += a.z, sw.w += a.w;
            sb.x += b.x, sb.y += b.y, sb.z += b.z, sb.w += b.w;
        }
        pw4[c] = sw;
        pb4[c] = sb;
    }
}

enum { FIN_COLS = 32, FIN_GROUPS = 16 };

// dw, db (C) += Σ over the R block partials: thread (g, l) of a block of FIN_COLS columns adds
// partials g, g + FIN_GROUPS, ... of its column in order, then thread g = 0 adds the groups in order.
// Many short sums in parallel: a thread per column walking R rows waits R loads end to end.
__global__ void __launch_bounds__(FIN_COLS *FIN_GROUPS) layernorm_dwdb_tree_kernel(float *dw, float *db,
                                                                                  const float *pw, const float *pb,
                                                                                  int R, int C)
{
    __shared__ float gw[FIN_GROUPS][FIN_COLS], gb[FIN_GROUPS][FIN_COLS];
    const int l = threadIdx.x % FIN_COLS, g = threadIdx.x / FIN_COLS, c = blockIdx.x * FIN_COLS + l;
    float sw = 0.0f, sb = 0.0f;
    if (c < C)
        for (int r = g; r < R; r += FIN_GROUPS) sw += pw[(size_t)r * C + c], sb += pb[(size_t)r * C + c];
    gw[g][l] = sw, gb[g][l] = sb;
    __syncthreads();
    if (g != 0 || c >= C) return;
    for (int j = 1; j < FIN_GROUPS; j++) sw += gw[j][l], sb += gb[j][l];
    dw[c] += sw;
    db[c] += sb;
}

template <int K4>
static void backward_warp(cu_ctx_t *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int N, int C)
{
    const int R = (N + BLOCK_ROWS - 1) / BLOCK_ROWS;
    float *pw = (float *)cu_ctx_scratch(ctx, 2 * (size_t)R * C * sizeof(float)), *pb = pw + (size_t)R * C;
    layernorm_backward_warp_kernel<K4>
        <<<(unsigned)R, WARPS * LANES, 0, ctx->compute>>>(dinp, pw, pb, dout, inp, w, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    layernorm_dwdb_tree_kernel<<<(unsigned)((C + FIN_COLS - 1) / FIN_COLS), FIN_COLS * FIN_GROUPS, 0,
                                 ctx->compute>>>(dw, db, pw, pb, R, C);
    CUDA_CHECK_LAUNCH();
}

void cu_layernorm_backward(cu_ctx_t *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0) return;
    const void *ptrs[] = {dinp, dout, inp, w};
    switch (warp_k4(C, ptrs, 4)) {
    case 1: return backward_warp<1>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    case 2: return backward_warp<2>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    case 4: return backward_warp<4>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    case 6: return backward_warp<6>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    case 8: return backward_warp<8>(ctx, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    default: break;
    }
    if (C <= 4 * THREADS)
        layernorm_dinp_kernel<4><<<N, THREADS, 0, ctx->compute>>>(dinp, dout, inp, w, mean, rstd, C);
    else if (C <= 8 * THREADS)
        layernorm_dinp_kernel<8><<<N, THREADS, 0, ctx->compute>>>(dinp, dout, inp, w, mean, rstd, C);
    else
        layernorm_dinp_kernel<0><<<N, THREADS, 0, ctx->compute>>>(dinp, dout, inp, w, mean, rstd, C);
    CUDA_CHECK_LAUNCH();
    const int R = (N + CHUNK_ROWS - 1) / CHUNK_ROWS;
    if (R > 65535) KERN_ABORT("layernorm_backward: %d rows exceed the %d the dw/db grid covers", N, 65535 * CHUNK_ROWS);
    float *pw = (float *)cu_ctx_scratch(ctx, 2 * (size_t)R * C * sizeof(float)), *pb = pw + (size_t)R * C;
    const dim3 grid((unsigned)((C + COLS - 1) / COLS), (unsigned)R);
    layernorm_dwdb_partial_kernel<<<grid, COLS, 0, ctx->compute>>>(pw, pb, dout, inp, mean, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    layernorm_dwdb_finish_kernel<<<grid.x, COLS, 0, ctx->compute>>>(dw, db, pw, pb, R, C);
    CUDA_CHECK_LAUNCH();
}
