// Times the two fused bf16 attention variants (MP_ATTENTION's fa2 and wmma) at GPT-2 124M's shape
// (B = 16, T = 1024, NH = 12, head size 64 unless given: attn_bench B T NH HS) and says how far
// fa2's out and dqkv are from wmma's. A measuring tool, not a test: the selftest checks correctness.
// Built by hand against a CUDA build tree (see docs/GPU.md):
//   nvcc -std=c++17 -gencode=arch=compute_90,code=sm_90 -Ikernels validation/cuda/attn_bench.cu \
//     build-cuda/src/device/libmp_cuda.a build-cuda/kernels/libmp_kernels.a -lcublas -lcublasLt -o attn_bench
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"
#include "kernels_cuda.h"

static float *dev_rand(size_t n, float lo, float hi, unsigned seed)
{
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
    }
    float *d;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static std::vector<float> host(const float *d, size_t n)
{
    std::vector<float> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

static double rel(const std::vector<float> &a, const std::vector<float> &b)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) num += (double)(a[i] - b[i]) * (a[i] - b[i]), den += (double)b[i] * b[i];
    return std::sqrt(num / (den > 0 ? den : 1));
}

int main(int argc, char **argv)
{
    const int B = argc > 1 ? atoi(argv[1]) : 16, T = argc > 2 ? atoi(argv[2]) : 1024;
    const int NH = argc > 3 ? atoi(argv[3]) : 12, HS = argc > 4 ? atoi(argv[4]) : 64, C = NH * HS;
    cu_ctx_t ctx;
    if (cu_ctx_init(&ctx, 0, CU_BF16) != KERN_OK) return 1;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = dev_rand(nqkv, -2, 2, 1), *dout = dev_rand(nout, -1, 1, 2), *out, *att, *dqkv, *datt;
    CUDA_CHECK(cudaMalloc(&out, nout * 4));
    CUDA_CHECK(cudaMalloc(&att, natt * 4));
    CUDA_CHECK(cudaMalloc(&dqkv, nqkv * 4));
    CUDA_CHECK(cudaMalloc(&datt, natt * 4));
    if (!cu_attention_flash_fits(&ctx, B, T, C, NH)) {
        std::printf("attn_bench: the fused path does not take this shape\n");
        return 1;
    }
    const double flop = 4.0 * B * NH * (double)T * T * HS / 2; // the causal half of Q Kᵀ and P V
    std::vector<float> o[2], g[2];
    const char *names[2] = {"fa2", "wmma"};
    for (int v = 0; v < 2; v++) {
        ctx.attention = v == 0 ? CU_ATT_FA2 : CU_ATT_WMMA;
        const int reps = 10;
        cudaEvent_t e0, e1, e2;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        CUDA_CHECK(cudaEventCreate(&e2));
        cu_attention_forward(&ctx, out, att, qkv, B, T, C, NH); // warm-up, and scratch grown
        cu_attention_backward(&ctx, dqkv, datt, dout, qkv, att, B, T, C, NH);
        CUDA_CHECK(cudaEventRecord(e0, ctx.compute));
        for (int r = 0; r < reps; r++) cu_attention_forward(&ctx, out, att, qkv, B, T, C, NH);
        CUDA_CHECK(cudaEventRecord(e1, ctx.compute));
        for (int r = 0; r < reps; r++) cu_attention_backward(&ctx, dqkv, datt, dout, qkv, att, B, T, C, NH);
        CUDA_CHECK(cudaEventRecord(e2, ctx.compute));
        CUDA_CHECK(cudaEventSynchronize(e2));
        float f = 0, b = 0;
        CUDA_CHECK(cudaEventElapsedTime(&f, e0, e1));
        CUDA_CHECK(cudaEventElapsedTime(&b, e1, e2));
        f /= reps, b /= reps;
        std::printf("attn_bench %-4s B=%d T=%d NH=%d hs=%d: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms "
                    "(%.1f TFLOP/s at 2.5x forward's flops)\n",
                    names[v], B, T, NH, HS, f, flop / f / 1e9, b, 2.5 * flop / b / 1e9);
        o[v] = host(out, nout);
        g[v] = host(dqkv, nqkv);
    }
    std::printf("attn_bench fa2 against wmma: out rel %.2e, dqkv rel %.2e\n", rel(o[0], o[1]), rel(g[0], g[1]));
    cu_ctx_destroy(&ctx);
    return 0;
}
