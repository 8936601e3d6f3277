// Rotary position embeddings on the GPU, in place on the q and k heads of a packed qkv buffer;
// per-pair math in math_rope.h, the CPU's (rope_cpu.c). Legend in kernels.h.
//
// A thread per rotated pair (row, head, i < hs/2) over a grid-stride loop: every pair is rotated
// on its own, as on the CPU, with cos and sin read from the host's table (rope_table_init) copied
// to the device, so both backends rotate by the same floats. The backward is the rotation by the
// negated sine (the transpose).
//
// MP_LLAMA_EMU: validation/cuda/llama_emu_test.cc includes this file (see rmsnorm_cuda.cu).
#ifndef MP_LLAMA_EMU
#include "cuda_check.h"
#include "kernels_cuda.h"
#endif
#include "math_rope.h"

namespace {

enum { ROPE_THREADS = 256, ROPE_MAX_BLOCKS = 1 << 16 };

// n = B·T·heads·(hs/2) pairs; heads = NH + KVH (q's, then k's: contiguous in the row), ld the row
// length (NH + 2·KVH)·hs; row r is at position pos0 + r % T.
__global__ void __launch_bounds__(ROPE_THREADS)
    rope_kernel(float *qkv, const float *cs, int pos0, int T, int heads, int hs, size_t ld, size_t n, float sign)
{
    const int h2 = hs / 2;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(e % h2);
        const size_t rh = e / h2, r = rh / heads;
        const int h = (int)(rh % heads);
        const float *c = cs + (size_t)(pos0 + (int)(r % T)) * hs;
        float *lo = qkv + r * ld + (size_t)h * hs + i, *hi = lo + h2;
        const float x0 = *lo, x1 = *hi, si = sign * c[h2 + i];
        *lo = mp_rope_lo(x0, x1, c[i], si);
        *hi = mp_rope_hi(x0, x1, c[i], si);
    }
}

// Launch shape, shared with the emulation: the pairs and the blocks for them.
size_t rope_pairs(int B, int T, int NH, int KVH, int hs) { return (size_t)B * T * (NH + KVH) * (hs / 2); }
unsigned rope_blocks(size_t n)
{
    const size_t b = (n + ROPE_THREADS - 1) / ROPE_THREADS;
    return (unsigned)(b < (size_t)ROPE_MAX_BLOCKS ? b : (size_t)ROPE_MAX_BLOCKS);
}

} // namespace

#ifndef MP_LLAMA_EMU
static void rope_apply(cu_ctx_t *ctx, float *qkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs,
                       float sign)
{
    const size_t n = rope_pairs(B, T, NH, KVH, hs);
    if (n == 0) return; // nothing to rotate, and no empty grid to launch
    rope_kernel<<<rope_blocks(n), ROPE_THREADS, 0, ctx->compute>>>(qkv, cs, pos0, T, NH + KVH, hs,
                                                                   (size_t)(NH + 2 * KVH) * hs, n, sign);
    CUDA_CHECK_LAUNCH();
}

void cu_rope_forward(cu_ctx_t *ctx, float *qkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs)
{
    rope_apply(ctx, qkv, cs, pos0, B, T, NH, KVH, hs, 1.0f);
}

void cu_rope_backward(cu_ctx_t *ctx, float *dqkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs)
{
    rope_apply(ctx, dqkv, cs, pos0, B, T, NH, KVH, hs, -1.0f);
}
#endif
