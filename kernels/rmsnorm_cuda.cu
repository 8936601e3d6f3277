// RMSNorm on the GPU; per-element math in math_rmsnorm.h, the CPU's (rmsnorm_cpu.c). Legend in
// kernels.h.
//
// Forward and dinp: a warp per row, lane l taking channels l, l + 32, ... in order, the row's sum
// by a butterfly of shuffles (every lane ends with the same bits). dw (C) += Σ over the rows of
// dy·n, without float atomics as layernorm_cuda.cu's general path: a thread per column sums a
// 64-row chunk in row order into a partial (R, C) in scratch, then each column's R partials are
// added in a fixed tree; the bits depend on N and C alone.
//
// MP_LLAMA_EMU: validation/cuda/llama_emu_test.cc includes this file into a host program that runs
// the kernels on CPU threads (no GPU), with the launch shapes of the helpers below.
#ifndef MP_LLAMA_EMU
#include "cuda_check.h"
#include "kernels_cuda.h"
#endif
#include "kern_check.h"
#include "math_rmsnorm.h"

namespace {

enum { RMS_LANES = 32, RMS_WARPS = 4, RMS_CHUNK = 64, RMS_COLS = 256, RMS_FIN_COLS = 32, RMS_FIN_GROUPS = 16 };

__device__ float rms_warp_sum(float v)
{
    for (int o = RMS_LANES / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// out (N,C) =, rstd (N) = ; a warp per row.
__global__ void __launch_bounds__(RMS_WARPS *RMS_LANES)
    rmsnorm_forward_kernel(float *out, float *rstd, const float *inp, const float *w, int N, int C, float eps)
{
    const int row = blockIdx.x * RMS_WARPS + threadIdx.x / RMS_LANES, lane = threadIdx.x % RMS_LANES;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float *y = out + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += RMS_LANES) s += x[c] * x[c];
    const float r = mp_rms_rstd(rms_warp_sum(s) / C, eps);
    for (int c = lane; c < C; c += RMS_LANES) y[c] = mp_rms_out(x[c], r, w[c]);
    if (lane == 0) rstd[row] = r;
}

// dinp (N,C) += ; a warp per row, from the row's mean of dn·n (dn = dy·w, n = x·rstd).
__global__ void __launch_bounds__(RMS_WARPS *RMS_LANES)
    rmsnorm_dinp_kernel(float *dinp, const float *dout, const float *inp, const float *w, const float *rstd, int N,
                        int C)
{
    const int row = blockIdx.x * RMS_WARPS + threadIdx.x / RMS_LANES, lane = threadIdx.x % RMS_LANES;
    if (row >= N) return;
    const size_t off = (size_t)row * C;
    const float *x = inp + off, *dy = dout + off;
    float *dx = dinp + off;
    const float r = rstd[row];
    float s = 0.0f;
    for (int c = lane; c < C; c += RMS_LANES) s += (dy[c] * w[c]) * (x[c] * r);
    const float a = rms_warp_sum(s) / C;
    for (int c = lane; c < C; c += RMS_LANES) dx[c] += mp_rms_dx(dy[c] * w[c], x[c] * r, r, a);
}

// pw (R,C): row r = Σ over rows [64r, 64r + 64) of dy·n, in row order; a thread per column, the
// chunk in blockIdx.x (no 65535 limit on the rows), column blocks in blockIdx.y.
__global__ void rmsnorm_dw_partial_kernel(float *pw, const float *dout, const float *inp, const float *rstd, int N,
                                          int C)
{
    const int c = blockIdx.y * RMS_COLS + threadIdx.x, r = blockIdx.x;
    if (c >= C) return;
    const int i1 = (r + 1) * RMS_CHUNK < N ? (r + 1) * RMS_CHUNK : N;
    float s = 0.0f;
    for (int i = r * RMS_CHUNK; i < i1; i++) s += dout[(size_t)i * C + c] * (inp[(size_t)i * C + c] * rstd[i]);
    pw[(size_t)r * C + c] = s;
}

// dw (C) += Σ over the R partials: thread (g, l) of a block of RMS_FIN_COLS columns adds partials
// g, g + RMS_FIN_GROUPS, ... of its column in order, then thread g = 0 adds the groups in order.
__global__ void __launch_bounds__(RMS_FIN_COLS *RMS_FIN_GROUPS)
    rmsnorm_dw_tree_kernel(float *dw, const float *pw, int R, int C)
{
    __shared__ float gw[RMS_FIN_GROUPS][RMS_FIN_COLS];
    const int l = threadIdx.x % RMS_FIN_COLS, g = threadIdx.x / RMS_FIN_COLS, c = blockIdx.x * RMS_FIN_COLS + l;
    float s = 0.0f;
    if (c < C)
        for (int r = g; r < R; r += RMS_FIN_GROUPS) s += pw[(size_t)r * C + c];
    gw[g][l] = s;
    __syncthreads();
    if (g != 0 || c >= C) return;
    for (int j = 1; j < RMS_FIN_GROUPS; j++) s += gw[j][l];
    dw[c] += s;
}

// Launch shapes, shared with the emulation.
unsigned rms_row_blocks(int N) { return (unsigned)((N + RMS_WARPS - 1) / RMS_WARPS); }
unsigned rms_chunks(int N) { return (unsigned)((N + RMS_CHUNK - 1) / RMS_CHUNK); }
unsigned rms_col_blocks(int C) { return (unsigned)((C + RMS_COLS - 1) / RMS_COLS); }
unsigned rms_fin_blocks(int C) { return (unsigned)((C + RMS_FIN_COLS - 1) / RMS_FIN_COLS); }

} // namespace

#ifndef MP_LLAMA_EMU
void cu_rmsnorm_forward(cu_ctx_t *ctx, float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps)
{
    if (N <= 0) return;
    rmsnorm_forward_kernel<<<rms_row_blocks(N), RMS_WARPS * RMS_LANES, 0, ctx->compute>>>(out, rstd, inp, w, N, C,
                                                                                          eps);
    CUDA_CHECK_LAUNCH();
}

void cu_rmsnorm_backward(cu_ctx_t *ctx, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    if (rms_col_blocks(C) > 65535)
        KERN_ABORT("rmsnorm_backward: %d channels exceed the %d the dw grid covers", C, 65535 * RMS_COLS);
    rmsnorm_dinp_kernel<<<rms_row_blocks(N), RMS_WARPS * RMS_LANES, 0, ctx->compute>>>(dinp, dout, inp, w, rstd, N,
                                                                                       C);
    CUDA_CHECK_LAUNCH();
    const unsigned R = rms_chunks(N);
    float *pw = (float *)cu_ctx_scratch(ctx, (size_t)R * C * sizeof(float));
    rmsnorm_dw_partial_kernel<<<dim3(R, rms_col_blocks(C)), RMS_COLS, 0, ctx->compute>>>(pw, dout, inp, rstd, N, C);
    CUDA_CHECK_LAUNCH();
    rmsnorm_dw_tree_kernel<<<rms_fin_blocks(C), RMS_FIN_COLS * RMS_FIN_GROUPS, 0, ctx->compute>>>(dw, pw, (int)R, C);
    CUDA_CHECK_LAUNCH();
}
#endif
