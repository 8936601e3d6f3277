// Runs the Llama family's CUDA kernels themselves (kernels/rmsnorm_cuda.cu, rope_cuda.cu,
// swiglu_cuda.cu, included with MP_LLAMA_EMU) on CPU threads (validation/cuda/emu_dialect.h), at
// the launch shapes their entry points use, and compares them with the CPU kernels as the selftest
// does on a GPU: outputs assigned (=) start as NaN, those accumulated (+=) from the same random
// values on both sides, the norm-wise relative error below 1e-5. No GPU: indexing, masking, the
// warp sums, dw's chunk-and-tree order and the grid-stride loops, not the device's arithmetic.
#include <cstring>

#include "emu_dialect.h"

#define MP_LLAMA_EMU 1
#include "rmsnorm_cuda.cu"
#include "rope_cuda.cu"
#include "swiglu_cuda.cu"

extern "C" {
#include "kernels.h"
}

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

static std::vector<float> nans(size_t n) { return std::vector<float>(n, NAN); }

// One TAP line from the worst error of a kernel's outputs.
static void report(const char *what, double rel, size_t nan, double tol = 1e-5)
{
    const bool ok = nan == 0 && rel < tol;
    tests++;
    if (!ok) failures++;
    std::printf("%sok %d - %s emulated = CPU kernel (rel %.2e, tolerance %.0e)%s\n", ok ? "" : "not ", tests, what,
                rel, tol, nan ? " (NaN: an element never written)" : "");
    std::fflush(stdout);
}

static double worst(double a, double b) { return a > b || std::isnan(a) ? a : b; }

// Forward, then backward from the CPU's rstd (the backward's errors alone); N rows of width C.
static void t_rmsnorm(int N, int C)
{
    const size_t n = (size_t)N * C;
    const float eps = 1e-5f;
    std::vector<float> x = rnd(n, -2, 2), w = rnd(C, 0.5f, 1.5f), y(n), r(N), gy = nans(n), gr = nans(N);
    rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, C, eps);
    emu_launch(rms_row_blocks(N), RMS_WARPS * RMS_LANES,
               [&] { rmsnorm_forward_kernel(gy.data(), gr.data(), x.data(), w.data(), N, C, eps); });
    size_t nan = 0;
    double e = worst(emu_rel(gy.data(), y.data(), n, &nan), emu_rel(gr.data(), r.data(), N, &nan));
    char what[96];
    std::snprintf(what, sizeof what, "rmsnorm_forward N=%d C=%d", N, C);
    report(what, e, nan);

    std::vector<float> dy = rnd(n, -1, 1), dx = rnd(n, -1, 1), dw = rnd(C, -1, 1), gdx = dx, gdw = dw;
    rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), r.data(), N, C);
    const unsigned R = rms_chunks(N);
    std::vector<float> pw = nans((size_t)R * C);
    emu_launch(rms_row_blocks(N), RMS_WARPS * RMS_LANES,
               [&] { rmsnorm_dinp_kernel(gdx.data(), dy.data(), x.data(), w.data(), r.data(), N, C); });
    emu_launch(dim3(R, rms_col_blocks(C)), RMS_COLS,
               [&] { rmsnorm_dw_partial_kernel(pw.data(), dy.data(), x.data(), r.data(), N, C); });
    emu_launch(rms_fin_blocks(C), RMS_FIN_COLS * RMS_FIN_GROUPS,
               [&] { rmsnorm_dw_tree_kernel(gdw.data(), pw.data(), (int)R, C); });
    nan = 0;
    e = worst(emu_rel(gdx.data(), dx.data(), n, &nan), emu_rel(gdw.data(), dw.data(), C, &nan));
    std::snprintf(what, sizeof what, "rmsnorm_backward N=%d C=%d (%u row chunks)", N, C, R);
    report(what, e, nan);
}

// In place on qkv (B,T,(NH+2KVH)·hs) from position pos0: forward, then backward on other values.
static void t_rope(int B, int T, int NH, int KVH, int hs, int pos0)
{
    const size_t n = (size_t)B * T * (NH + 2 * KVH) * hs;
    std::vector<float> cs((size_t)(pos0 + T) * hs);
    rope_table_init(cs.data(), pos0 + T, hs, 10000.0f);
    const size_t pairs = rope_pairs(B, T, NH, KVH, hs);
    const size_t ld = (size_t)(NH + 2 * KVH) * hs;
    const float sign[2] = {1.0f, -1.0f};
    for (int s = 0; s < 2; s++) {
        std::vector<float> q = rnd(n, -1, 1), g = q;
        (s ? rope_backward : rope_forward)(q.data(), cs.data(), pos0, B, T, NH, KVH, hs);
        emu_launch(rope_blocks(pairs), ROPE_THREADS,
                   [&] { rope_kernel(g.data(), cs.data(), pos0, T, NH + KVH, hs, ld, pairs, sign[s]); });
        size_t nan = 0;
        const double e = emu_rel(g.data(), q.data(), n, &nan);
        char what[96];
        std::snprintf(what, sizeof what, "rope_%s B=%d T=%d NH=%d KVH=%d hs=%d pos0=%d", s ? "backward" : "forward", B,
                      T, NH, KVH, hs, pos0);
        report(what, e, nan, 1e-6);
    }
}

static void t_swiglu(int N, int F)
{
    const size_t n = (size_t)N * F;
    std::vector<float> in = rnd(2 * n, -6, 6), out(n), gout = nans(n), dy = rnd(n, -1, 1), dx(2 * n),
                       gdx = nans(2 * n);
    swiglu_forward(out.data(), in.data(), N, F);
    emu_launch(swiglu_blocks(n), SWIGLU_THREADS, [&] { swiglu_forward_kernel(gout.data(), in.data(), F, n); });
    size_t nan = 0;
    char what[96];
    std::snprintf(what, sizeof what, "swiglu_forward N=%d F=%d", N, F);
    report(what, emu_rel(gout.data(), out.data(), n, &nan), nan);
    swiglu_backward(dx.data(), dy.data(), in.data(), N, F);
    emu_launch(swiglu_blocks(n), SWIGLU_THREADS,
               [&] { swiglu_backward_kernel(gdx.data(), dy.data(), in.data(), F, n); });
    nan = 0;
    std::snprintf(what, sizeof what, "swiglu_backward N=%d F=%d", N, F);
    report(what, emu_rel(gdx.data(), dx.data(), 2 * n, &nan), nan);
}

int main()
{
    std::printf("1..12\n");
    kernels_set_threads(1);
    t_rmsnorm(37, 100);   // widths not a multiple of 32, a partial block of rows
    t_rmsnorm(1061, 300); // 17 row chunks (more than the tree's 16 groups), two column blocks
    t_rope(2, 5, 4, 2, 12, 3);
    t_rope(1, 7, 6, 1, 8, 0);
    t_swiglu(5, 77);
    t_swiglu(3, 700); // more than one block of 256 threads
    return failures ? 1 : 0;
}
