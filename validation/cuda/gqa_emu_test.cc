// Runs the host code of the CUDA attention (kernels/attention_cuda.cu, included with MP_ATT_EMU):
// cu_attention_gqa_forward/_backward's strided-batched products, in kernels_cuda.h's row-major
// cu_gemm contract computed here in double, and its softmax kernels on CPU threads
// (validation/cuda/emu_dialect.h); compared with the CPU kernels (attention_gqa_forward/_backward)
// as the selftest does on a GPU: outputs assigned (=) start as NaN (cu_gemm with beta 0 does not
// read C, as cuBLAS), the norm-wise relative error below 1e-5. Grouped heads (KVH < NH, one kv head
// when KVH = 1) and multi-head (KVH = NH, GPT-2's calls). No GPU: this checks which q, k, v, att
// and dqkv elements each product reads and writes and dk, dv's sum over a group, not cuBLAS.
#include <cstring>

#include "emu_dialect.h"

extern "C" {
#include "kern_check.h"
#include "kernels.h"
}

struct cu_ctx_t {
    int precision; // fp32: the fused kernels never fit
};

// kernels_cuda.h: C (m,n) = alpha · op(A) (m,k) · op(B) (k,n) + beta · C for each of `batch`
// items, row-major, A stored (k,m) when trans_a; C is not read when beta is 0.
static int gemm_calls = 0;
static void cu_gemm(cu_ctx_t *, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
                    long long stride_a, const float *B, int ldb, long long stride_b, float beta, float *C, int ldc,
                    long long stride_c, int batch)
{
    gemm_calls++;
    for (int b = 0; b < batch; b++) {
        const float *a = A + b * stride_a, *bb = B + b * stride_b;
        float *c = C + b * stride_c;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int p = 0; p < k; p++)
                    s += (double)(trans_a ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) *
                         (trans_b ? bb[(size_t)j * ldb + p] : bb[(size_t)p * ldb + j]);
                float *o = c + (size_t)i * ldc + j;
                *o = beta == 0.0f ? (float)(alpha * s) : (float)(alpha * s + (double)beta * *o);
            }
    }
}

static int cu_attention_flash_fits(const cu_ctx_t *, int, int, int, int) { return 0; }
static void cu_attention_flash_forward(cu_ctx_t *, float *, float *, const float *, int, int, int, int)
{
    std::abort();
}
static void cu_attention_flash_backward(cu_ctx_t *, float *, float *, const float *, const float *, const float *,
                                        int, int, int, int)
{
    std::abort();
}

#define MP_ATT_EMU 1
#define ATT_LAUNCH(kernel, grid, block, ctx, ...) emu_launch(dim3(grid), dim3(block), [&] { kernel(__VA_ARGS__); })
#include "attention_cuda.cu"

static int tests = 0, failures = 0;
static unsigned seed = 20240611u;

static std::vector<float> rnd(size_t n, float lo, float hi)
{
    std::vector<float> v(n);
    for (auto &x : v) {
        seed = seed * 1664525u + 1013904223u;
        x = lo + (hi - lo) * (float)(seed >> 8) / 16777216.0f;
    }
    return v;
}

static void report(const char *what, double rel, size_t nan)
{
    const bool ok = nan == 0 && rel < 1e-5;
    tests++;
    if (!ok) failures++;
    std::printf("%sok %d - %s (rel %.2e, tolerance 1e-05)%s\n", ok ? "" : "not ", tests, what, rel,
                nan ? " (NaN: an element never written)" : "");
    std::fflush(stdout);
}

// Forward: out and att; backward from the CPU's att (its errors alone): dqkv. GPT-2's entry points
// (KVH = NH) also against the grouped ones: the same bits.
static void t_gqa(int B, int T, int NH, int KVH, int hs)
{
    const int C = NH * hs, ld = C + 2 * KVH * hs;
    const size_t nqkv = (size_t)B * T * ld, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    cu_ctx_t ctx = {0};
    std::vector<float> qkv = rnd(nqkv, -1, 1), out(nout), att(natt, 0.0f); // 0: where the CPU writes nothing
    std::vector<float> gout(nout, NAN), gatt(natt, NAN);
    attention_gqa_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, KVH);
    cu_attention_gqa_forward(&ctx, gout.data(), gatt.data(), qkv.data(), B, T, C, NH, KVH);
    size_t nan = 0;
    double e = emu_rel(gout.data(), out.data(), nout, &nan), ea = emu_rel(gatt.data(), att.data(), natt, &nan);
    char what[128];
    std::snprintf(what, sizeof what, "attention_gqa_forward B=%d T=%d NH=%d KVH=%d hs=%d: out, att = CPU", B, T, NH,
                  KVH, hs);
    report(what, e > ea ? e : ea, nan);

    std::vector<float> dout = rnd(nout, -1, 1), dqkv(nqkv), datt(natt), gdqkv(nqkv, NAN), gdatt(natt, NAN);
    attention_gqa_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, KVH);
    cu_attention_gqa_backward(&ctx, gdqkv.data(), gdatt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, KVH);
    nan = 0;
    e = emu_rel(gdqkv.data(), dqkv.data(), nqkv, &nan);
    std::snprintf(what, sizeof what, "attention_gqa_backward B=%d T=%d NH=%d KVH=%d hs=%d: dqkv = CPU", B, T, NH, KVH,
                  hs);
    report(what, e, nan);
    if (KVH != NH) return;
    std::vector<float> mout(nout, NAN), matt(natt, NAN), mdqkv(nqkv, NAN), mdatt(natt, NAN);
    cu_attention_forward(&ctx, mout.data(), matt.data(), qkv.data(), B, T, C, NH);
    cu_attention_backward(&ctx, mdqkv.data(), mdatt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    const bool same = !std::memcmp(mout.data(), gout.data(), nout * 4) && !std::memcmp(matt.data(), gatt.data(), natt * 4) &&
                      !std::memcmp(mdqkv.data(), gdqkv.data(), nqkv * 4);
    tests++;
    if (!same) failures++;
    std::printf("%sok %d - attention_forward/_backward NH=%d = the grouped ones with KVH = NH, bitwise\n",
                same ? "" : "not ", tests, NH);
}

int main()
{
    std::printf("1..9\n");
    kernels_set_threads(1);
    t_gqa(2, 16, 4, 4, 12); // the selftest's multi-head shape: GPT-2's calls
    t_gqa(2, 16, 4, 2, 12); // two query heads a kv head
    t_gqa(1, 9, 6, 1, 8);   // one kv head: batches of one item (cuBLAS's plain sgemm)
    t_gqa(1, 70, 8, 2, 8);  // past the CPU's 64-row blocks, four query heads a kv head
    return failures ? 1 : 0;
}
