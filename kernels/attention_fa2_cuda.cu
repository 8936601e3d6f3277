// Fused causal attention for the bf16 mode, FlashAttention-2 style: mma.sync m16n8k16 on fragments
// held in registers. The WMMA kernels of attention_flash_cuda.cu stage S, P and the output
// accumulator through shared memory between products (about 34 TFLOP/s forward on an H200); here
// S = Q Kᵀ stays in the accumulator registers, the online softmax runs on them, P is rounded to
// bf16 in place and is already the A operand of P V (mma_frag.h: c_to_a_*), and O accumulates in
// registers. The same contract as the WMMA kernels (kernels_cuda.h): att holds each row's natural
// log-sum-exp at [0, B·NH·T) and a copy of out at flash_o_offset; datt gets D_i = Σ dO·O. Either
// variant's backward can follow the other's forward. MP_ATTENTION=fa2|wmma picks one (cu_ctx_init).
//
// Operands: one pass rounds q, k, v (and dO in backward) to bf16, head-major (B, NH, T, D): into
// att past the output's copy where it has room (the forward's planes then serve the backward, and
// the WMMA forward leaves them there too, cu_attention_fa2_keep), else into context scratch; so each tile is contiguous rows that cp.async can copy without conversion and the
// next tile loads while this one is multiplied (two stages). The pass reads qkv once (12 B·T·C
// bytes); the WMMA kernels re-read and re-round each fp32 K/V tile for every query tile.
//
// Blocks: 4 warps, 64 rows of the block's own side (queries; keys in dK/dV), each warp 16 rows;
// the other side in tiles of 64. Backward is two kernels, dK/dV per key tile over the query tiles
// and dQ per query tile over the key tiles, so every output element has one writer in a fixed
// order: no atomics, the same bits on every run.
// MP_FA2_EMU: validation/cuda/fa2_emu_test.cc includes this file into a host program that runs
// the kernels below on CPU threads, with its own PTX wrappers and launch loop (no GPU needed).
#ifndef MP_FA2_EMU
#include <cuda_bf16.h>

#include "cuda_check.h"
#include "kernels_cuda.h"
#endif
#include "attention_fused_layout.h"
#include <stdint.h>
#include <string.h>

#include "math_softmax.h"
#include "mma_frag.h"

namespace {

constexpr int NW = 4;       // warps a block
constexpr int BR = 16 * NW; // the block's own rows
constexpr int BC = 64;      // the other side's tile
constexpr int PAD = 8;      // bf16 per row of padding: rows 16 bytes off a bank multiple, so ldmatrix's 8 rows hit 8 bank quads
constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

typedef __nv_bfloat16 bf16;

// ---- PTX wrappers ----
#ifndef MP_FA2_EMU

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared, bypassing L1; in == false writes zeros (src-size 0), the rows past T.
__device__ __forceinline__ void cp16(void *dst, const void *src, bool in)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(in ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp4(void *dst, const void *src, bool in)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(in ? 4 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most one group (the tile being prefetched) is still in flight.
__device__ __forceinline__ void cp_wait1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ __forceinline__ void ldsm(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}
__device__ __forceinline__ void ldsm_t(uint32_t r[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}

// c += a · b (16x16 · 16x8), fp32 accumulation.
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif // MP_FA2_EMU

// Two floats as one register of bf16, the first in the low half (the lower-indexed element).
__device__ __forceinline__ uint32_t pack(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

// ---- tiles and fragments ----

// rows × D bf16 from a head-major (T, D) plane into shared memory (row stride D + PAD), zeros past T.
template <int D> __device__ void load_tile(bf16 *dst, const bf16 *src, int row0, int T, int rows)
{
    constexpr int CH = D / 8; // 16-byte chunks a row
    for (int i = threadIdx.x; i < rows * CH; i += NW * 32) {
        const int r = i / CH, c = i % CH * 8;
        const bool in = row0 + r < T;
        cp16(dst + r * (D + PAD) + c, in ? src + (size_t)(row0 + r) * D + c : src, in);
    }
}

// n floats of a row vector (log-sum-exps or dot products) from index i0, zeros past T.
__device__ void load_vec(float *dst, const float *src, int i0, int T, int n)
{
    for (int i = threadIdx.x; i < n; i += NW * 32) {
        const bool in = i0 + i < T;
        cp4(dst + i, in ? src + i0 + i : src, in);
    }
}

// The warp's 16 rows × D as A fragments: frag[kk] is k-block kk.
template <int D> __device__ void load_a(uint32_t frag[][4], const bf16 *rows)
{
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
        ldsm(frag[kk], rows + ldsm_a_row(lane) * (D + PAD) + kk * 16 + ldsm_a_col(lane));
}

// One k-block's A fragment: from registers when the operand is kept there (KEEP), else from the
// warp's rows in shared memory (head size 128 keeps its accumulators in registers instead).
template <int D, bool KEEP>
__device__ __forceinline__ void a_block(uint32_t a[4], const uint32_t kept[][4], const bf16 *rows, int kk)
{
    if constexpr (KEEP) {
#pragma unroll
        for (int i = 0; i < 4; i++) a[i] = kept[kk][i];
    } else {
        const int lane = threadIdx.x % 32;
        ldsm(a, rows + ldsm_a_row(lane) * (D + PAD) + kk * 16 + ldsm_a_col(lane));
    }
}

// s (16 × BC, C fragments) += rows(A, D wide) · tileᵀ, tile being BC rows of D in shared memory.
template <int D, bool KEEP>
__device__ __forceinline__ void rows_tile_t(float s[][4], const uint32_t kept[][4], const bf16 *rows,
                                            const bf16 *tile)
{
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        a_block<D, KEEP>(a, kept, rows, kk);
#pragma unroll
        for (int np = 0; np < BC / 16; np++) {
            uint32_t b[4];
            ldsm(b, tile + (np * 16 + ldsm_bn_row(lane)) * (D + PAD) + kk * 16 + ldsm_bn_col(lane));
            mma(s[2 * np], a, b[0], b[1]);
            mma(s[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// acc (16 × D) += p (16 × BC, C fragments, rounded to bf16 here) · tile (BC rows of D).
template <int D> __device__ __forceinline__ void p_tile(float acc[][4], const float p[][4], const bf16 *tile)
{
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < BC / 16; kk++) {
        uint32_t a[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const float *c = p[2 * kk + c_to_a_tile(r)] + c_to_a_elem(r);
            a[r] = pack(c[0], c[1]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            ldsm_t(b, tile + (kk * 16 + ldsm_bk_row(lane)) * (D + PAD) + dp * 16 + ldsm_bk_col(lane));
            mma(acc[2 * dp], a, b[0], b[1]);
            mma(acc[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

// Writes the warp's 16 × D accumulator rows row0.. (those below T), times scale, to a global
// matrix with leading dimension ld (and to dst2 too when given).
template <int D>
__device__ void store_acc(float *dst, float *dst2, size_t ld, int row0, int T, const float acc[][4], float scale0,
                          float scale1)
{
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = row0 + frag_c_row(lane, 2 * half);
        if (row >= T) continue;
        const float sc = half ? scale1 : scale0;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const float2 v = make_float2(acc[n][2 * half] * sc, acc[n][2 * half + 1] * sc);
            const size_t at = (size_t)row * ld + 8 * n + frag_c_col(lane, 0);
            *(float2 *)(dst + at) = v;
            if (dst2) *(float2 *)(dst2 + at) = v;
        }
    }
}

// ---- kernels ----

// qkv (B, T, 3C) fp32 -> q, k, v planes (B, NH, T, D) bf16, back to back at dst; 8 elements a thread.
__global__ void fa2_split_kernel(bf16 *dst, const float *qkv, int B, int T, int C, int NH)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)B * T * 3 * C / 8;
    if (i >= n) return;
    const int D = C / NH, per = 3 * C / 8;
    const size_t bt = i / per;
    const int c = (int)(i % per) * 8, which = c / C, h = c % C / D, d = c % D, b = (int)(bt / T), t = (int)(bt % T);
    const float4 *s = (const float4 *)(qkv + bt * 3 * C + c);
    const float4 x = __ldg(s), y = __ldg(s + 1);
    const uint4 o = make_uint4(pack(x.x, x.y), pack(x.z, x.w), pack(y.x, y.y), pack(y.z, y.w));
    *(uint4 *)(dst + (size_t)which * B * T * C + (((size_t)b * NH + h) * T + t) * D + d) = o;
}

// dout (B, T, C) -> a dO plane (B, NH, T, D) bf16, and Dd[(b·NH + h)·T + t] = Σ_d dO·O in fp32.
// D/8 consecutive threads share a row (D/8 divides 32 and blocks are whole warps, so the group
// is aligned lanes of one warp); their partial sums meet by shuffles in a fixed order.
__global__ void fa2_prep_kernel(bf16 *dob, float *Dd, const float *dout, const float *o, int B, int T, int C, int NH)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)B * T * C / 8;
    const int D = C / NH, G = D / 8;
    float s = 0.0f;
    size_t row = 0;
    int d = -1;
    if (i < n) {
        const size_t bt = i / (C / 8);
        const int c = (int)(i % (C / 8)) * 8, h = c / D, b = (int)(bt / T), t = (int)(bt % T);
        d = c % D;
        const float4 *g = (const float4 *)(dout + bt * C + c), *p = (const float4 *)(o + bt * C + c);
        const float4 x = __ldg(g), y = __ldg(g + 1), u = __ldg(p), w = __ldg(p + 1);
        s = x.x * u.x + x.y * u.y + x.z * u.z + x.w * u.w + y.x * w.x + y.y * w.y + y.z * w.z + y.w * w.w;
        row = ((size_t)b * NH + h) * T + t;
        *(uint4 *)(dob + row * D + d) = make_uint4(pack(x.x, x.y), pack(x.z, x.w), pack(y.x, y.y), pack(y.z, y.w));
    }
    for (int off = G / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (d == 0) Dd[row] = s;
}

template <int D> constexpr int fwd_bytes() { return (BR + 4 * BC) * (D + PAD) * 2; }
template <int D> constexpr int bwd_bytes() { return (2 * BR + 4 * BC) * (D + PAD) * 2 + 4 * BC * 4; }

// Forward: block (query tile, head, sequence), the heaviest (last) query tiles first. sl2 is the
// softmax scale times log2 e: the softmax runs in base 2 (exp2 is one instruction).
template <int D>
__global__ void __launch_bounds__(NW * 32) fa2_forward_kernel(float *out, float *lse, float *ocopy, const bf16 *qp,
                                                               const bf16 *kp, const bf16 *vp, int T, int C, int NH,
                                                               float sl2)
{
#if __CUDA_ARCH__ >= 800 || defined(MP_FA2_EMU)
    extern __shared__ __align__(128) char smem[];
    constexpr int LD = D + PAD;
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + BR * LD, *Vs = Ks + 2 * BC * LD; // K and V: two stages each
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int nq = (T + BR - 1) / BR, qt = nq - 1 - (int)blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const size_t head = ((size_t)b * NH + h) * T * D;
    const bf16 *qh = qp + head, *kh = kp + head, *vh = vp + head;
    const int q0 = qt * BR, w0 = q0 + warp * 16; // the block's and the warp's first query
    const int last = (q0 + BR - 1) / BC;          // the key tile holding the block's last query

    load_tile<D>(Qs, qh, q0, T, BR);
    load_tile<D>(Ks, kh, 0, T, BC);
    load_tile<D>(Vs, vh, 0, T, BC);
    cp_commit();

    uint32_t qf[D / 16][4];
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; // m: raw-score max; l: this lane's part
#pragma unroll
    for (int n = 0; n < D / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int kt = 0; kt <= last; kt++) {
        if (kt < last) { // the next tile loads while this one is multiplied
            load_tile<D>(Ks + ((kt + 1) & 1) * BC * LD, kh, (kt + 1) * BC, T, BC);
            load_tile<D>(Vs + ((kt + 1) & 1) * BC * LD, vh, (kt + 1) * BC, T, BC);
        }
        cp_commit(); // an empty group on the last tile keeps wait_group 1's count right
        cp_wait1();
        __syncthreads();
        if (kt == 0) load_a<D>(qf, Qs + warp * 16 * LD);
        const bf16 *Kc = Ks + (kt & 1) * BC * LD, *Vc = Vs + (kt & 1) * BC * LD;
        const int k0 = kt * BC;

        float s[BC / 8][4];
#pragma unroll
        for (int n = 0; n < BC / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        rows_tile_t<D, true>(s, qf, nullptr, Kc);
        if (k0 + BC > w0) { // the diagonal (and the keys past T, which only it holds)
#pragma unroll
            for (int n = 0; n < BC / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int j = k0 + 8 * n + frag_c_col(lane, e), t = w0 + frag_c_row(lane, e);
                    if (j > t || j >= T) s[n][e] = -INFINITY;
                }
        }
        // Online softmax: row r of the lane's two is g + 8r; its columns are spread over the 4
        // lanes of the group, so maxima meet by two shuffles. Key 0 is in the first tile and never
        // masked, so m is finite from there on and exp2(-inf) = 0 rescales the empty start.
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[n][e]);
        float ms[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float alpha = exp2f((m[r] - mx[r]) * sl2);
            m[r] = mx[r];
            ms[r] = mx[r] * sl2;
            l[r] *= alpha;
#pragma unroll
            for (int n = 0; n < D / 8; n++) o[n][2 * r] *= alpha, o[n][2 * r + 1] *= alpha;
        }
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float p = exp2f(fmaf(s[n][e], sl2, -ms[e >> 1]));
                l[e >> 1] += p;
                s[n][e] = p;
            }
        p_tile<D>(o, s, Vc);
        __syncthreads(); // every warp is done with this stage before the next prefetch refills it
    }
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.0f / l[r];
        const int t = w0 + frag_c_row(lane, 2 * r);
        if (t < T && lane % 4 == 0) lse[((size_t)b * NH + h) * T + t] = (m[r] * sl2 + log2f(l[r])) * LN2;
    }
    const size_t at = (size_t)b * T * C + (size_t)h * D;
    store_acc<D>(out + at, ocopy + at, (size_t)C, w0, T, o, inv[0], inv[1]);
#else
    (void)out, (void)lse, (void)ocopy, (void)qp, (void)kp, (void)vp, (void)T, (void)C, (void)NH, (void)sl2;
#endif
}

// dK and dV: block (key tile, head, sequence), tile 0 (the most query tiles) first. Each warp owns
// 16 keys and works in the transposed frame: Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (keys × queries), then
// dV += Pᵀ dO and dK += dSᵀ Q with Pᵀ and dSᵀ straight from their accumulators.
template <int D>
__global__ void __launch_bounds__(NW * 32) fa2_dkv_kernel(float *dqkv, const bf16 *qp, const bf16 *kp, const bf16 *vp,
                                                           const bf16 *dop, const float *lse, const float *Dd, int T,
                                                           int C, int NH, float sl2, float scale)
{
#if __CUDA_ARCH__ >= 800 || defined(MP_FA2_EMU)
    constexpr int LD = D + PAD;
    constexpr bool KEEP = D <= 64; // K, V fragments in registers; at 128 the accumulators need them
    extern __shared__ __align__(128) char smem[];
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + BR * LD, *Qs = Vs + BR * LD, *dOs = Qs + 2 * BC * LD;
    float *Ls = (float *)(dOs + 2 * BC * LD), *Ds = Ls + 2 * BC;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, k0 = kt * BR, w0 = k0 + warp * 16;
    const int nq = (T + BC - 1) / BC, first = k0 / BC;
    const size_t head = ((size_t)b * NH + h) * T * D, vec = ((size_t)b * NH + h) * T;
    const bf16 *qh = qp + head, *kh = kp + head, *vh = vp + head, *doh = dop + head;

    load_tile<D>(Ks, kh, k0, T, BR);
    load_tile<D>(Vs, vh, k0, T, BR);
    load_tile<D>(Qs, qh, first * BC, T, BC);
    load_tile<D>(dOs, doh, first * BC, T, BC);
    load_vec(Ls, lse + vec, first * BC, T, BC);
    load_vec(Ds, Dd + vec, first * BC, T, BC);
    cp_commit();

    uint32_t kf[KEEP ? D / 16 : 1][4], vf[KEEP ? D / 16 : 1][4];
    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;

    for (int qt = first; qt < nq; qt++) {
        const int st = (qt - first) & 1, q0 = qt * BC;
        if (qt + 1 < nq) {
            const int nx = st ^ 1;
            load_tile<D>(Qs + nx * BC * LD, qh, q0 + BC, T, BC);
            load_tile<D>(dOs + nx * BC * LD, doh, q0 + BC, T, BC);
            load_vec(Ls + nx * BC, lse + vec, q0 + BC, T, BC);
            load_vec(Ds + nx * BC, Dd + vec, q0 + BC, T, BC);
        }
        cp_commit();
        cp_wait1();
        __syncthreads();
        if (KEEP && qt == first) {
            load_a<D>(kf, Ks + warp * 16 * LD);
            load_a<D>(vf, Vs + warp * 16 * LD);
        }
        const bf16 *Qc = Qs + st * BC * LD, *dOc = dOs + st * BC * LD;
        const float *Lc = Ls + st * BC, *Dc = Ds + st * BC;

        float s[BC / 8][4], dp[BC / 8][4];
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        rows_tile_t<D, KEEP>(s, kf, Ks + warp * 16 * LD, Qc);   // Sᵀ
        rows_tile_t<D, KEEP>(dp, vf, Vs + warp * 16 * LD, dOc); // dPᵀ
        const bool edge = q0 < w0 + 16 || q0 + BC > T;          // a query above a key, or past T
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = 8 * n + frag_c_col(lane, e), t = q0 + c, j = w0 + frag_c_row(lane, e);
                float p = exp2f(fmaf(s[n][e], sl2, -Lc[c] * LOG2E));
                if (edge && (t < j || t >= T)) p = 0.0f;
                s[n][e] = p;
                dp[n][e] = mp_softmax_dx(p, dp[n][e], Dc[c]);
            }
        p_tile<D>(dv, s, dOc); // dV += Pᵀ dO
        p_tile<D>(dk, dp, Qc); // dK += dSᵀ Q
        __syncthreads();
    }
    float *base = dqkv + (size_t)b * T * 3 * C + (size_t)h * D;
    store_acc<D>(base + C, nullptr, (size_t)3 * C, w0, T, dk, scale, scale);
    store_acc<D>(base + 2 * C, nullptr, (size_t)3 * C, w0, T, dv, 1.0f, 1.0f);
#else
    (void)dqkv, (void)qp, (void)kp, (void)vp, (void)dop, (void)lse, (void)Dd, (void)T, (void)C, (void)NH, (void)sl2,
        (void)scale;
#endif
}

// dQ: block (query tile, head, sequence), the heaviest first; each warp owns 16 queries and runs
// over the key tiles up to the diagonal: S = Q Kᵀ, dP = dO Vᵀ, dQ += dS K.
template <int D>
__global__ void __launch_bounds__(NW * 32) fa2_dq_kernel(float *dqkv, const bf16 *qp, const bf16 *kp, const bf16 *vp,
                                                          const bf16 *dop, const float *lse, const float *Dd, int T,
                                                          int C, int NH, float sl2, float scale)
{
#if __CUDA_ARCH__ >= 800 || defined(MP_FA2_EMU)
    constexpr int LD = D + PAD;
    constexpr bool KEEP = D <= 64;
    extern __shared__ __align__(128) char smem[];
    bf16 *Qs = (bf16 *)smem, *dOs = Qs + BR * LD, *Ks = dOs + BR * LD, *Vs = Ks + 2 * BC * LD;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int nq = (T + BR - 1) / BR, qt = nq - 1 - (int)blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int q0 = qt * BR, w0 = q0 + warp * 16, last = (q0 + BR - 1) / BC;
    const size_t head = ((size_t)b * NH + h) * T * D, vec = ((size_t)b * NH + h) * T;
    const bf16 *qh = qp + head, *kh = kp + head, *vh = vp + head, *doh = dop + head;

    load_tile<D>(Qs, qh, q0, T, BR);
    load_tile<D>(dOs, doh, q0, T, BR);
    load_tile<D>(Ks, kh, 0, T, BC);
    load_tile<D>(Vs, vh, 0, T, BC);
    cp_commit();

    float L2[2], Dr[2]; // the lane's two rows: log-sum-exp in base 2, and D_i
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int t = w0 + frag_c_row(lane, 2 * r);
        L2[r] = t < T ? lse[vec + t] * LOG2E : 0.0f;
        Dr[r] = t < T ? Dd[vec + t] : 0.0f;
    }
    uint32_t qf[KEEP ? D / 16 : 1][4], df[KEEP ? D / 16 : 1][4];
    float dq[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;

    for (int kt = 0; kt <= last; kt++) {
        if (kt < last) {
            load_tile<D>(Ks + ((kt + 1) & 1) * BC * LD, kh, (kt + 1) * BC, T, BC);
            load_tile<D>(Vs + ((kt + 1) & 1) * BC * LD, vh, (kt + 1) * BC, T, BC);
        }
        cp_commit();
        cp_wait1();
        __syncthreads();
        if (KEEP && kt == 0) {
            load_a<D>(qf, Qs + warp * 16 * LD);
            load_a<D>(df, dOs + warp * 16 * LD);
        }
        const bf16 *Kc = Ks + (kt & 1) * BC * LD, *Vc = Vs + (kt & 1) * BC * LD;
        const int k0 = kt * BC;
        float s[BC / 8][4], dp[BC / 8][4];
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        rows_tile_t<D, KEEP>(s, qf, Qs + warp * 16 * LD, Kc);
        rows_tile_t<D, KEEP>(dp, df, dOs + warp * 16 * LD, Vc);
        const bool edge = k0 + BC > w0; // the diagonal, and the keys past T, which only it holds
#pragma unroll
        for (int n = 0; n < BC / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, j = k0 + 8 * n + frag_c_col(lane, e), t = w0 + frag_c_row(lane, e);
                float p = exp2f(fmaf(s[n][e], sl2, -L2[r]));
                if (edge && (j > t || j >= T)) p = 0.0f;
                dp[n][e] = mp_softmax_dx(p, dp[n][e], Dr[r]);
            }
        p_tile<D>(dq, dp, Kc); // dQ += dS K
        __syncthreads();
    }
    store_acc<D>(dqkv + (size_t)b * T * 3 * C + (size_t)h * D, nullptr, (size_t)3 * C, w0, T, dq, scale, scale);
#else
    (void)dqkv, (void)qp, (void)kp, (void)vp, (void)dop, (void)lse, (void)Dd, (void)T, (void)C, (void)NH, (void)sl2,
        (void)scale;
#endif
}

#ifndef MP_FA2_EMU
// Where the output's copy starts in att: the WMMA kernels' layout, so that the two variants'
// forward and backward can mix (attention_fused_layout.h, which the planner carves att by).
size_t o_offset(int B, int T, int NH) { return mp_att_fused_o_offset(B, T, NH); }

// Where the forward keeps its bf16 q, k, v planes for the backward, which then reads them instead of
// rounding qkv again (12 B·T·C bytes a layer less), where the layout keeps them (about
// 2.5·C <= NH·T). A shape without them rounds in scratch each time, as before.
size_t qkv16_offset(int B, int T, int C, int NH) { return mp_att_fused_qkv16_offset(B, T, C, NH); }
bool keeps_qkv16(int B, int T, int C, int NH) { return mp_att_fused_keeps_qkv16(B, T, C, NH) != 0; }

unsigned blocks_of(size_t threads) { return (unsigned)((threads + 255) / 256); }

template <int D> void forward_d(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    const size_t plane = (size_t)B * T * C;
    bf16 *q = keeps_qkv16(B, T, C, NH) ? (bf16 *)(att + qkv16_offset(B, T, C, NH))
                                       : (bf16 *)cu_ctx_scratch(ctx, 3 * plane * sizeof(bf16));
    fa2_split_kernel<<<blocks_of(3 * plane / 8), 256, 0, ctx->compute>>>(q, qkv, B, T, C, NH);
    CUDA_CHECK_LAUNCH();
    const dim3 grid((unsigned)((T + BR - 1) / BR), (unsigned)NH, (unsigned)B);
    fa2_forward_kernel<D><<<grid, NW * 32, fwd_bytes<D>(), ctx->compute>>>(
        out, att, att + o_offset(B, T, NH), q, q + plane, q + 2 * plane, T, C, NH, LOG2E / sqrtf((float)D));
    CUDA_CHECK_LAUNCH();
}

template <int D>
void backward_d(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                int T, int C, int NH)
{
    const size_t plane = (size_t)B * T * C;
    const bf16 *q;
    bf16 *dob;
    if (keeps_qkv16(B, T, C, NH)) { // the forward's planes (either variant's forward leaves them)
        q = (const bf16 *)(att + qkv16_offset(B, T, C, NH));
        dob = (bf16 *)cu_ctx_scratch(ctx, plane * sizeof(bf16));
    } else {
        bf16 *s = (bf16 *)cu_ctx_scratch(ctx, 4 * plane * sizeof(bf16));
        fa2_split_kernel<<<blocks_of(3 * plane / 8), 256, 0, ctx->compute>>>(s, qkv, B, T, C, NH);
        CUDA_CHECK_LAUNCH();
        q = s, dob = s + 3 * plane;
    }
    fa2_prep_kernel<<<blocks_of(plane / 8), 256, 0, ctx->compute>>>(dob, datt, dout, att + o_offset(B, T, NH), B, T,
                                                                     C, NH);
    CUDA_CHECK_LAUNCH();
    const float scale = 1.0f / sqrtf((float)D), sl2 = scale * LOG2E;
    const dim3 grid((unsigned)((T + BR - 1) / BR), (unsigned)NH, (unsigned)B);
    fa2_dkv_kernel<D><<<grid, NW * 32, bwd_bytes<D>(), ctx->compute>>>(dqkv, q, q + plane, q + 2 * plane, dob, att,
                                                                       datt, T, C, NH, sl2, scale);
    CUDA_CHECK_LAUNCH();
    fa2_dq_kernel<D><<<grid, NW * 32, bwd_bytes<D>(), ctx->compute>>>(dqkv, q, q + plane, q + 2 * plane, dob, att,
                                                                      datt, T, C, NH, sl2, scale);
    CUDA_CHECK_LAUNCH();
}

template <int D> cudaError_t allow(int optin, unsigned *sizes)
{
    if (fwd_bytes<D>() > optin || bwd_bytes<D>() > optin) return cudaSuccess; // stays on the WMMA kernels
    cudaError_t rc =
        cudaFuncSetAttribute(fa2_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, fwd_bytes<D>());
    if (rc == cudaSuccess)
        rc = cudaFuncSetAttribute(fa2_dkv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bwd_bytes<D>());
    if (rc == cudaSuccess)
        rc = cudaFuncSetAttribute(fa2_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bwd_bytes<D>());
    if (rc == cudaSuccess) *sizes |= D;
    return rc;
}
#endif // MP_FA2_EMU

} // namespace

#ifndef MP_FA2_EMU
int cu_attention_fa2_setup(int device, unsigned *sizes)
{
    *sizes = 0;
    int optin = 0;
    cudaError_t rc = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (rc == cudaSuccess) rc = allow<16>(optin, sizes);
    if (rc == cudaSuccess) rc = allow<32>(optin, sizes);
    if (rc == cudaSuccess) rc = allow<64>(optin, sizes);
    if (rc == cudaSuccess) rc = allow<128>(optin, sizes);
    if (rc != cudaSuccess) return KERN_FAIL("fused attention (fa2): set-up: %s", cudaGetErrorString(rc));
    return KERN_OK;
}

void cu_attention_fa2_keep(cu_ctx_t *ctx, float *att, const float *qkv, int B, int T, int C, int NH)
{
    if (!keeps_qkv16(B, T, C, NH)) return;
    const size_t plane = (size_t)B * T * C;
    fa2_split_kernel<<<blocks_of(3 * plane / 8), 256, 0, ctx->compute>>>((bf16 *)(att + qkv16_offset(B, T, C, NH)),
                                                                       qkv, B, T, C, NH);
    CUDA_CHECK_LAUNCH();
}

void cu_attention_fa2_forward(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    switch (C / NH) {
    case 16: forward_d<16>(ctx, out, att, qkv, B, T, C, NH); break;
    case 32: forward_d<32>(ctx, out, att, qkv, B, T, C, NH); break;
    case 64: forward_d<64>(ctx, out, att, qkv, B, T, C, NH); break;
    case 128: forward_d<128>(ctx, out, att, qkv, B, T, C, NH); break;
    default: KERN_ABORT("fa2 attention: head size %d (16, 32, 64 or 128)", C / NH);
    }
}

void cu_attention_fa2_backward(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH)
{
    switch (C / NH) {
    case 16: backward_d<16>(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH); break;
    case 32: backward_d<32>(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH); break;
    case 64: backward_d<64>(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH); break;
    case 128: backward_d<128>(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH); break;
    default: KERN_ABORT("fa2 attention: head size %d (16, 32, 64 or 128)", C / NH);
    }
}
#endif // MP_FA2_EMU
