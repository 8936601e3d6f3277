// Fused causal attention for the bf16 mode, the WMMA variant (MP_ATTENTION=wmma; the default is
// attention_fa2_cuda.cu's, which the entry points at the end dispatch to): q, k, v tiles in shared memory as bf16, products on the
// tensor cores (WMMA 16x16x16, fp32 accumulation), an online softmax, and no (T,T) matrix in memory.
//
// Why: the cuBLAS path (attention_cuda.cu) writes the scores and probabilities of every head, (T,T)
// in fp32, rounds them to bf16 for the next product and reads them back in backward; at GPT-2 124M
// (B = 16, T = 1024) that was 805 MB a layer and half of the step on an H200 (docs/GPU.md).
//
// What the `att` buffer holds here (its contract in kernels_cuda.h): not the probabilities but what
// backward needs to recompute them, the log-sum-exp of each (b, h, query) row at att[0, B·NH·T), and
// a copy of the output (B, T, C) at att + flash_o_offset: D_i = Σ_d dO_id O_id needs O, and the
// backward's signature carries only att. The (T,T) buffer is far larger than both (flash_fits).
//
// Tiles: a block is 4 warps and 64 query rows (or 64 keys in the dK/dV kernel), each warp 16 rows;
// keys (queries) come 64 at a time. The per-element softmax math is the CPU's (math_softmax.h).
// Backward runs as two kernels, dK/dV over key tiles and dQ over query tiles, so that every output
// element is written by one block in a fixed order: no float atomics, the same bits on every run.
#include <cuda_bf16.h>
#include <mma.h>

#include "attention_fused_layout.h"
#include "cuda_check.h"
#include "kernels_cuda.h"
#include "math_softmax.h"

using namespace nvcuda;

namespace {

constexpr int FW = 4;        // warps a block
constexpr int FR = 16 * FW;  // rows a block: queries (forward, dQ) or keys (dK/dV)
constexpr int FT = 64;       // the other side's tile: keys (forward, dQ) or queries (dK/dV)
constexpr int PAD16 = 8;     // bf16 row padding (elements): spreads rows over banks, keeps 32-byte alignment
constexpr int PAD32 = 4;     // fp32 row padding

typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_b_col;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

// Shared-memory carving: every region a multiple of 32 bytes, so every WMMA pointer stays aligned.
struct carve {
    char *p;
    __device__ explicit carve(char *base) : p(base) {}
    template <typename X> __device__ X *take(int n)
    {
        X *r = (X *)p;
        p += ((size_t)n * sizeof(X) + 31) & ~(size_t)31;
        return r;
    }
};
static size_t carve_bytes(size_t n, size_t elem) { return (n * elem + 31) & ~(size_t)31; }

// Two tiles of rows × D floats each, from (B·T)-row matrices with leading dimensions ld0 and ld1,
// into bf16 shared memory with leading dimension D + PAD16; rows at or past T are zeros (src1 may
// be null: one tile). Every load of a chunk is issued before any store: the compiler cannot tell
// a shared-memory store from a global load through these pointers, and a load-store loop waited a
// full global-memory latency per element (the first H200 run: 25 TFLOP/s).
template <int D>
__device__ void load_tiles(bf16 *dst0, const float *__restrict__ src0, int ld0, bf16 *dst1,
                           const float *__restrict__ src1, int ld1, int row0, int T, int rows)
{
    constexpr int V4 = D / 4, CH = D >= 128 ? 4 : 8;
    const int n = rows * V4, step = blockDim.x;
    for (int i0 = threadIdx.x; i0 < n; i0 += CH * step) {
        float4 x0[CH], x1[CH];
#pragma unroll
        for (int u = 0; u < CH; u++) {
            const int i = i0 + u * step, r = i / V4, c = (i % V4) * 4;
            const bool in = i < n && row0 + r < T;
            x0[u] = x1[u] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (in) x0[u] = __ldg((const float4 *)(src0 + (size_t)(row0 + r) * ld0 + c));
            if (in && src1) x1[u] = __ldg((const float4 *)(src1 + (size_t)(row0 + r) * ld1 + c));
        }
#pragma unroll
        for (int u = 0; u < CH; u++) {
            const int i = i0 + u * step, r = i / V4, c = (i % V4) * 4;
            if (i >= n) break;
            __nv_bfloat162 *d = (__nv_bfloat162 *)(dst0 + r * (D + PAD16) + c);
            d[0] = __floats2bfloat162_rn(x0[u].x, x0[u].y);
            d[1] = __floats2bfloat162_rn(x0[u].z, x0[u].w);
            if (src1) {
                d = (__nv_bfloat162 *)(dst1 + r * (D + PAD16) + c);
                d[0] = __floats2bfloat162_rn(x1[u].x, x1[u].y);
                d[1] = __floats2bfloat162_rn(x1[u].z, x1[u].w);
            }
        }
    }
}

// Which elements of a warp's 16-row strip each lane works on: row lane % 16, and of that row's W
// columns (W = FT or D) the half lane / 16; the columns are visited rotated by a per-lane offset so
// that the 32 lanes hit 32 different banks at every step (rows are 68 floats apart: 4 banks).
struct strip {
    int r, half, rot;
    __device__ strip() : r(threadIdx.x % 16), half(threadIdx.x % 32 / 16), rot((threadIdx.x % 16) / 8 + 2 * (threadIdx.x % 32 / 16)) {}
    // the k-th column of this lane's half of a row of W columns
    template <int W> __device__ int col(int k) const { return half * (W / 2) + (k + rot) % (W / 2); }
};

// The warp's A operand, 16 rows × D, held in registers for the whole loop over the other side.
template <int D> __device__ void load_rows(frag_a *a, const bf16 *rows)
{
    for (int kb = 0; kb < D / 16; kb++) wmma::load_matrix_sync(a[kb], rows + kb * 16, D + PAD16);
}

// acc (16 × FT, fp32, ldm FT + PAD32) = a (16 × D, in registers) · b_rowsᵀ: b_rows is FT rows of D.
template <int D>
__device__ void rows_times_rows_t(float *acc, const frag_a *a, const bf16 *b_rows)
{
    constexpr int LD = D + PAD16;
    for (int nb = 0; nb < FT / 16; nb++) {
        frag_c c;
        wmma::fill_fragment(c, 0.0f);
        for (int kb = 0; kb < D / 16; kb++) {
            frag_b_col b;
            wmma::load_matrix_sync(b, b_rows + nb * 16 * LD + kb * 16, LD);
            wmma::mma_sync(c, a[kb], b, c);
        }
        wmma::store_matrix_sync(acc + nb * 16, c, FT + PAD32, wmma::mem_row_major);
    }
}

// frags[db] += p (16 × FT, bf16, ldm FT + PAD16) · m (FT × D, bf16, ldm D + PAD16), db over D / 16.
template <int D>
__device__ void acc_p_times(frag_c *frags, const bf16 *p, const bf16 *m)
{
    for (int db = 0; db < D / 16; db++)
        for (int kb = 0; kb < FT / 16; kb++) {
            frag_a a;
            frag_b_row b;
            wmma::load_matrix_sync(a, p + kb * 16, FT + PAD16);
            wmma::load_matrix_sync(b, m + kb * 16 * (D + PAD16) + db * 16, D + PAD16);
            wmma::mma_sync(frags[db], a, b, frags[db]);
        }
}

// Writes a warp's 16 × D accumulators, times `scale`, to rows row0.. (below T) of a global matrix
// with leading dimension ld, through the warp's staging area (ldm D + PAD32).
template <int D>
__device__ void store_rows(float *dst, int ld, int row0, int T, frag_c *frags, float *stage, float scale)
{
    const int lane = threadIdx.x % 32;
    for (int db = 0; db < D / 16; db++) wmma::store_matrix_sync(stage + db * 16, frags[db], D + PAD32, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * D; i += 32) {
        const int r = i / D, c = i % D;
        if (row0 + r < T) dst[(size_t)(row0 + r) * ld + c] = scale * stage[r * (D + PAD32) + c];
    }
    __syncwarp();
}

template <int D> struct fwd_smem {
    static size_t bytes()
    {
        return 3 * carve_bytes((size_t)FR * (D + PAD16), 2) + FW * carve_bytes(16 * (FT + PAD32), 4) +
               FW * carve_bytes(16 * (FT + PAD16), 2) + FW * carve_bytes(16 * (D + PAD32), 4);
    }
};

// The softmax runs in base 2: exp2 is one hardware instruction, and exp(x) = 2^(x·log2 e).
constexpr float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;

// Forward: block (query tile, head, sequence), the heaviest (last) query tiles first.
template <int D>
__global__ void __launch_bounds__(FW * 32) flash_forward_kernel(float *out, float *lse, float *ocopy, const float *qkv,
                                                                 int T, int C, int NH, float scale)
{
#if __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) char smem[];
    carve cv(smem);
    constexpr int LD = D + PAD16;
    bf16 *Qs = cv.take<bf16>(FR * LD), *Ks = cv.take<bf16>(FT * LD), *Vs = cv.take<bf16>(FT * LD);
    const int warp = threadIdx.x / 32;
    float *S = nullptr, *O = nullptr;
    bf16 *P = nullptr;
    for (int w = 0; w < FW; w++) { float *x = cv.take<float>(16 * (FT + PAD32)); if (w == warp) S = x; }
    for (int w = 0; w < FW; w++) { bf16 *x = cv.take<bf16>(16 * (FT + PAD16)); if (w == warp) P = x; }
    for (int w = 0; w < FW; w++) { float *x = cv.take<float>(16 * (D + PAD32)); if (w == warp) O = x; }

    const int nq = (T + FR - 1) / FR, qt = nq - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int q0 = qt * FR, ld = 3 * C;
    const float *base = qkv + (size_t)b * T * ld;
    load_tiles<D>(Qs, base + h * D, ld, nullptr, nullptr, 0, q0, T, FR);
    const strip e;
    for (int k = 0; k < D / 2; k++) O[e.r * (D + PAD32) + e.col<D>(k)] = 0.0f;
    __syncthreads();
    frag_a qa[D / 16];
    load_rows<D>(qa, Qs + warp * 16 * LD);
    const int t = q0 + warp * 16 + e.r;
    const float sl2 = scale * LOG2E;
    float m = -INFINITY, l = 0.0f; // running max (base 2) and sum of the row, the same in both halves
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * FT;
        __syncthreads(); // every warp is done with the previous K and V
        load_tiles<D>(Ks, base + C + h * D, ld, Vs, base + 2 * C + h * D, ld, k0, T, FT);
        __syncthreads();
        rows_times_rows_t<D>(S, qa, Ks);
        __syncwarp();
        float *srow = S + e.r * (FT + PAD32);
        float mx = -INFINITY;
        for (int k = 0; k < FT / 2; k++) {
            const int c = e.col<FT>(k), j = k0 + c;
            const float x = (j <= t && j < T) ? srow[c] * sl2 : -INFINITY;
            srow[c] = x;
            mx = fmaxf(mx, x);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        const float mnew = fmaxf(m, mx); // finite from the first tile on: key 0 is always visible
        const float alpha = exp2f(m - mnew); // 0 on the first tile (m = -inf)
        float sum = 0.0f;
        bf16 *prow = P + e.r * (FT + PAD16);
        for (int k = 0; k < FT / 2; k++) {
            const int c = e.col<FT>(k);
            const float p = exp2f(srow[c] - mnew); // a masked key: exp2(-inf) = 0
            sum += p;
            prow[c] = __float2bfloat16(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 16);
        l = l * alpha + sum;
        m = mnew;
        float *orow = O + e.r * (D + PAD32);
        for (int k = 0; k < D / 2; k++) orow[e.col<D>(k)] *= alpha;
        __syncwarp();
        for (int db = 0; db < D / 16; db++) {
            frag_c acc;
            wmma::load_matrix_sync(acc, O + db * 16, D + PAD32, wmma::mem_row_major);
            for (int kb = 0; kb < FT / 16; kb++) {
                frag_a a;
                frag_b_row bv;
                wmma::load_matrix_sync(a, P + kb * 16, FT + PAD16);
                wmma::load_matrix_sync(bv, Vs + kb * 16 * LD + db * 16, LD);
                wmma::mma_sync(acc, a, bv, acc);
            }
            wmma::store_matrix_sync(O + db * 16, acc, D + PAD32, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (t < T) {
        const float inv = 1.0f / l;
        const float *orow = O + e.r * (D + PAD32);
        float *o = out + ((size_t)b * T + t) * C + h * D, *oc = ocopy + ((size_t)b * T + t) * C + h * D;
        for (int k = 0; k < D / 2; k++) {
            const int c = e.col<D>(k);
            o[c] = oc[c] = orow[c] * inv;
        }
        if (e.half == 0) lse[((size_t)b * NH + h) * T + t] = (m + log2f(l)) * LN2; // natural log-sum-exp
    }
#else
    (void)out, (void)lse, (void)ocopy, (void)qkv, (void)T, (void)C, (void)NH, (void)scale;
#endif
}

// Dd[b, h, t] = Σ_d dO · O over the head's D channels: one warp a row.
__global__ void flash_dot_kernel(float *Dd, const float *dout, const float *o, int B, int T, int C, int NH)
{
    const int row = blockIdx.x * FW + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= B * NH * T) return;
    const int t = row % T, h = row / T % NH, b = row / T / NH, hs = C / NH;
    const size_t at = ((size_t)b * T + t) * C + (size_t)h * hs;
    float s = 0.0f;
    for (int c = lane; c < hs; c += 32) s += dout[at + c] * o[at + c];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) Dd[row] = s;
}

template <int D> struct bwd_smem {
    static size_t bytes()
    {
        return 4 * carve_bytes((size_t)FR * (D + PAD16), 2) + 2 * carve_bytes(FT, 4) +
               FW * (2 * carve_bytes(16 * (FT + PAD32), 4) + 2 * carve_bytes(16 * (FT + PAD16), 2) +
                     carve_bytes(16 * (D + PAD32), 4));
    }
};

// Per warp: S and dP in fp32; P and dS in bf16; a staging area for the results.
struct warp_bufs {
    float *S, *dP, *stage;
    bf16 *P, *dS;
};

template <int D> __device__ warp_bufs take_warp_bufs(carve &cv, int warp)
{
    warp_bufs mine = {};
    for (int w = 0; w < FW; w++) {
        warp_bufs x;
        x.S = cv.take<float>(16 * (FT + PAD32));
        x.dP = cv.take<float>(16 * (FT + PAD32));
        x.P = cv.take<bf16>(16 * (FT + PAD16));
        x.dS = cv.take<bf16>(16 * (FT + PAD16));
        x.stage = cv.take<float>(16 * (D + PAD32));
        if (w == warp) mine = x;
    }
    return mine;
}

// The two backward kernels' shared memory, one layout: the block's own 64 rows of two operands (K and
// V for dK/dV; Q and dO for dQ), the other side's tile of two (Q and dO; K and V), two row vectors
// of the other side (dK/dV's log-sum-exps and dot products), and each warp's buffers.
struct bwd_layout {
    bf16 *own0, *own1, *oth0, *oth1;
    float *vec0, *vec1;
    warp_bufs wb;
};

template <int D> __device__ bwd_layout take_bwd_layout(char *smem)
{
    carve cv(smem);
    constexpr int LD = D + PAD16;
    bwd_layout l;
    l.own0 = cv.take<bf16>(FR * LD), l.own1 = cv.take<bf16>(FR * LD);
    l.oth0 = cv.take<bf16>(FT * LD), l.oth1 = cv.take<bf16>(FT * LD);
    l.vec0 = cv.take<float>(FT), l.vec1 = cv.take<float>(FT);
    l.wb = take_warp_bufs<D>(cv, threadIdx.x / 32);
    return l;
}

// dK and dV: block (key tile, head, sequence); each warp owns 16 keys and runs over the query
// tiles at or below the diagonal, in the transposed frame (rows are keys, columns queries).
template <int D>
__global__ void __launch_bounds__(FW * 32) flash_dkv_kernel(float *dqkv, const float *dout, const float *qkv,
                                                             const float *lse, const float *Dd, int T, int C, int NH,
                                                             float scale)
{
#if __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) char smem[];
    constexpr int LD = D + PAD16;
    const bwd_layout sm = take_bwd_layout<D>(smem);
    bf16 *Ks = sm.own0, *Vs = sm.own1, *Qs = sm.oth0, *dOs = sm.oth1;
    float *Ls = sm.vec0, *Ds = sm.vec1;
    const warp_bufs wb = sm.wb;
    const int warp = threadIdx.x / 32;

    const int kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, k0 = kt * FR, ld = 3 * C;
    const int nq = (T + FT - 1) / FT;
    const float *base = qkv + (size_t)b * T * ld, *dob = dout + (size_t)b * T * C;
    const float *lrow = lse + ((size_t)b * NH + h) * T, *drow = Dd + ((size_t)b * NH + h) * T;
    load_tiles<D>(Ks, base + C + h * D, ld, Vs, base + 2 * C + h * D, ld, k0, T, FR);
    __syncthreads();
    frag_a ka[D / 16], va[D / 16];
    load_rows<D>(ka, Ks + warp * 16 * LD);
    load_rows<D>(va, Vs + warp * 16 * LD);
    frag_c dK[D / 16], dV[D / 16];
    for (int i = 0; i < D / 16; i++) {
        wmma::fill_fragment(dK[i], 0.0f);
        wmma::fill_fragment(dV[i], 0.0f);
    }
    const strip e;
    const int j = k0 + warp * 16 + e.r;
    const float sl2 = scale * LOG2E;
    for (int qt = k0 / FT; qt < nq; qt++) {
        const int q0 = qt * FT;
        __syncthreads();
        load_tiles<D>(Qs, base + h * D, ld, dOs, dob + h * D, C, q0, T, FT);
        for (int i = threadIdx.x; i < FT; i += blockDim.x) {
            Ls[i] = q0 + i < T ? lrow[q0 + i] * LOG2E : 0.0f;
            Ds[i] = q0 + i < T ? drow[q0 + i] : 0.0f;
        }
        __syncthreads();
        rows_times_rows_t<D>(wb.S, ka, Qs);   // Sᵀ: keys × queries
        rows_times_rows_t<D>(wb.dP, va, dOs); // dPᵀ = V dOᵀ
        __syncwarp();
        const float *srow = wb.S + e.r * (FT + PAD32), *dprow = wb.dP + e.r * (FT + PAD32);
        bf16 *prow = wb.P + e.r * (FT + PAD16), *dsrow = wb.dS + e.r * (FT + PAD16);
        for (int k = 0; k < FT / 2; k++) {
            const int c = e.col<FT>(k), t = q0 + c;
            const float p = (t < T && j <= t) ? exp2f(srow[c] * sl2 - Ls[c]) : 0.0f;
            prow[c] = __float2bfloat16(p);
            dsrow[c] = __float2bfloat16(mp_softmax_dx(p, dprow[c], Ds[c]));
        }
        __syncwarp();
        acc_p_times<D>(dV, wb.P, dOs); // dV += Pᵀ dO
        acc_p_times<D>(dK, wb.dS, Qs); // dK += dSᵀ Q
    }
    store_rows<D>(dqkv + (size_t)b * T * ld + C + h * D, ld, k0 + warp * 16, T, dK, wb.stage, scale);
    store_rows<D>(dqkv + (size_t)b * T * ld + 2 * C + h * D, ld, k0 + warp * 16, T, dV, wb.stage, 1.0f);
#else
    (void)dqkv, (void)dout, (void)qkv, (void)lse, (void)Dd, (void)T, (void)C, (void)NH, (void)scale;
#endif
}

// dQ: block (query tile, head, sequence), the heaviest first; each warp owns 16 queries and runs
// over the key tiles at or below the diagonal.
template <int D>
__global__ void __launch_bounds__(FW * 32) flash_dq_kernel(float *dqkv, const float *dout, const float *qkv,
                                                            const float *lse, const float *Dd, int T, int C, int NH,
                                                            float scale)
{
#if __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) char smem[];
    constexpr int LD = D + PAD16;
    const bwd_layout sm = take_bwd_layout<D>(smem); // its row vectors are dK/dV's: unused here
    bf16 *Qs = sm.own0, *dOs = sm.own1, *Ks = sm.oth0, *Vs = sm.oth1;
    const warp_bufs wb = sm.wb;
    const int warp = threadIdx.x / 32;

    const int nq = (T + FR - 1) / FR, qt = nq - 1 - blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int q0 = qt * FR, ld = 3 * C;
    const float *base = qkv + (size_t)b * T * ld, *dob = dout + (size_t)b * T * C;
    load_tiles<D>(Qs, base + h * D, ld, dOs, dob + h * D, C, q0, T, FR);
    __syncthreads();
    frag_a qa[D / 16], doa[D / 16];
    load_rows<D>(qa, Qs + warp * 16 * LD);
    load_rows<D>(doa, dOs + warp * 16 * LD);
    const strip e;
    const int t = q0 + warp * 16 + e.r;
    const float L2 = t < T ? lse[((size_t)b * NH + h) * T + t] * LOG2E : 0.0f;
    const float Dt = t < T ? Dd[((size_t)b * NH + h) * T + t] : 0.0f;
    const float sl2 = scale * LOG2E;
    frag_c dQ[D / 16];
    for (int i = 0; i < D / 16; i++) wmma::fill_fragment(dQ[i], 0.0f);
    const int last = (q0 + FR - 1) / FT; // the key tile holding the block's last query
    for (int kt = 0; kt <= last; kt++) {
        const int k0 = kt * FT;
        __syncthreads();
        load_tiles<D>(Ks, base + C + h * D, ld, Vs, base + 2 * C + h * D, ld, k0, T, FT);
        __syncthreads();
        rows_times_rows_t<D>(wb.S, qa, Ks);   // S = Q Kᵀ
        rows_times_rows_t<D>(wb.dP, doa, Vs); // dP = dO Vᵀ
        __syncwarp();
        const float *srow = wb.S + e.r * (FT + PAD32), *dprow = wb.dP + e.r * (FT + PAD32);
        bf16 *dsrow = wb.dS + e.r * (FT + PAD16);
        for (int k = 0; k < FT / 2; k++) {
            const int c = e.col<FT>(k), jj = k0 + c;
            const float p = (t < T && jj <= t) ? exp2f(srow[c] * sl2 - L2) : 0.0f;
            dsrow[c] = __float2bfloat16(mp_softmax_dx(p, dprow[c], Dt));
        }
        __syncwarp();
        acc_p_times<D>(dQ, wb.dS, Ks); // dQ += dS K
    }
    store_rows<D>(dqkv + (size_t)b * T * ld + h * D, ld, q0 + warp * 16, T, dQ, wb.stage, scale);
#else
    (void)dqkv, (void)dout, (void)qkv, (void)lse, (void)Dd, (void)T, (void)C, (void)NH, (void)scale;
#endif
}

// Where the output's copy starts in att (attention_fused_layout.h).
size_t flash_o_offset(int B, int T, int NH) { return mp_att_fused_o_offset(B, T, NH); }

template <int D> void forward_d(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    const size_t bytes = fwd_smem<D>::bytes(); // allowed once, by cu_attention_flash_setup
    const dim3 grid((unsigned)((T + FR - 1) / FR), (unsigned)NH, (unsigned)B);
    flash_forward_kernel<D><<<grid, FW * 32, bytes, ctx->compute>>>(out, att, att + flash_o_offset(B, T, NH), qkv, T,
                                                                      C, NH, 1.0f / sqrtf((float)D));
    CUDA_CHECK_LAUNCH();
    cu_attention_fa2_keep(ctx, att, qkv, B, T, C, NH); // so that the FA2 backward may follow this forward
}

template <int D>
void backward_d(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                int T, int C, int NH)
{
    const int rows = B * NH * T;
    flash_dot_kernel<<<(unsigned)((rows + FW - 1) / FW), FW * 32, 0, ctx->compute>>>(
        datt, dout, att + flash_o_offset(B, T, NH), B, T, C, NH);
    CUDA_CHECK_LAUNCH();
    const size_t bytes = bwd_smem<D>::bytes();
    const float scale = 1.0f / sqrtf((float)D);
    const dim3 grid((unsigned)((T + FR - 1) / FR), (unsigned)NH, (unsigned)B);
    flash_dkv_kernel<D><<<grid, FW * 32, bytes, ctx->compute>>>(dqkv, dout, qkv, att, datt, T, C, NH, scale);
    CUDA_CHECK_LAUNCH();
    flash_dq_kernel<D><<<grid, FW * 32, bytes, ctx->compute>>>(dqkv, dout, qkv, att, datt, T, C, NH, scale);
    CUDA_CHECK_LAUNCH();
}

// Lets each kernel of head size D use its shared memory (beyond the default 48 KB); a device that
// offers a block less than they need (sm_86/89: 99 KB, against 157 KB for D = 128's backward) keeps
// that size on the cuBLAS path.
template <int D> cudaError_t allow_smem(int optin, unsigned *sizes)
{
    const int fwd = (int)fwd_smem<D>::bytes(), bwd = (int)bwd_smem<D>::bytes();
    if (fwd > optin || bwd > optin) return cudaSuccess;
    cudaError_t rc = cudaFuncSetAttribute(flash_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, fwd);
    if (rc == cudaSuccess)
        rc = cudaFuncSetAttribute(flash_dkv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bwd);
    if (rc == cudaSuccess) rc = cudaFuncSetAttribute(flash_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bwd);
    if (rc == cudaSuccess) *sizes |= D;
    return rc;
}

} // namespace

int cu_attention_flash_setup(int device, unsigned *sizes)
{
    *sizes = 0;
    int optin = 0;
    cudaError_t rc = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (rc == cudaSuccess) rc = allow_smem<16>(optin, sizes);
    if (rc == cudaSuccess) rc = allow_smem<32>(optin, sizes);
    if (rc == cudaSuccess) rc = allow_smem<64>(optin, sizes);
    if (rc == cudaSuccess) rc = allow_smem<128>(optin, sizes);
    if (rc != cudaSuccess) return KERN_FAIL("fused attention: set-up: %s", cudaGetErrorString(rc));
    return KERN_OK;
}

int cu_attention_flash_fits(const cu_ctx_t *ctx, int B, int T, int C, int NH)
{
    // the shape (head size, float4 rows, room for the log-sum-exps and the output's copy) is the
    // layout's rule, which the CPU emulation and the planner read too
    if (ctx->precision != CU_BF16 || !mp_att_fused_shape_fits(B, T, C, NH)) return 0;
    // no bf16 tensor cores, or too little shared memory for this head size
    return ((ctx->flash_sizes | ctx->fa2_sizes) & (unsigned)(C / NH)) != 0;
}

// The FA2 kernels where they are chosen and take the head size, or where these do not take it.
static bool use_fa2(const cu_ctx_t *ctx, int hs)
{
    const unsigned bit = (unsigned)hs;
    return (ctx->fa2_sizes & bit) && (ctx->attention == CU_ATT_FA2 || !(ctx->flash_sizes & bit));
}

void cu_attention_flash_forward(cu_ctx_t *ctx, float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    if (use_fa2(ctx, C / NH)) {
        cu_attention_fa2_forward(ctx, out, att, qkv, B, T, C, NH);
        return;
    }
    switch (C / NH) {
    case 16: forward_d<16>(ctx, out, att, qkv, B, T, C, NH); break;
    case 32: forward_d<32>(ctx, out, att, qkv, B, T, C, NH); break;
    case 64: forward_d<64>(ctx, out, att, qkv, B, T, C, NH); break;
    case 128: forward_d<128>(ctx, out, att, qkv, B, T, C, NH); break;
    default: KERN_ABORT("flash attention: head size %d (16, 32, 64 or 128)", C / NH);
    }
}

void cu_attention_flash_backward(cu_ctx_t *ctx, float *dqkv, float *datt, const float *dout, const float *qkv,
                                 const float *att, int B, int T, int C, int NH)
{
    if (use_fa2(ctx, C / NH)) {
        cu_attention_fa2_backward(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH);
        return;
    }
    switch (C / NH) {
    case 16: backward_d<16>(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH); break;
    case 32: backward_d<32>(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH); break;
    case 64: backward_d<64>(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH); break;
    case 128: backward_d<128>(ctx, dqkv, datt, dout, qkv, att, B, T, C, NH); break;
    default: KERN_ABORT("flash attention: head size %d (16, 32, 64 or 128)", C / NH);
    }
}
