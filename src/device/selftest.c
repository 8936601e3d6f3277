/* mindpipe selftest: each GPU kernel against the CPU kernel it mirrors (contract in selftest.h).
 * Compiles in every build; the CUDA part only where configure found CUDA (MP_HAVE_CUDA). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "selftest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MP_HAVE_CUDA
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "cuda_check.h"
#include "kernels.h"
#include "kernels_cuda.h"
#include "nccl_grid.h"
#include "rng.h"

/* Small and deliberately unequal (N = 32, C = 48, OC = 80, T = 16, hs = 12), so a swapped dimension
 * or a transposed operand cannot pass by accident. */
enum { SB = 2, ST = 16, SC = 48, SNH = 4, SV = 67, SOC = 80, SN = SB * ST };
enum { MAX_HOST = 256 }; /* t_flash: 12 cases of 10 buffers each */
#define SEED 20240611u
#define TOL_FP32 1e-5
#define TOL_BF16 1e-2

typedef struct {
    cu_ctx_t ctx;
    cu_arena_t arena;
    void *host[MAX_HOST]; /* host buffers of the running test, freed when it ends */
    int nhost;
    uint64_t draws;       /* random stream counter: every buffer draws different numbers */
    int verbose, passed, failed;
} st_t;

/* Worst error over a kernel's outputs. */
typedef struct {
    double rel;
    size_t nan;
} cmp_t;

/* ---- host and device buffers ---- */

static void *st_host_bytes(st_t *s, size_t bytes)
{
    if (s->nhost == MAX_HOST) MP_ABORT("selftest: more than %d host buffers in one test", MAX_HOST);
    void *p = MP_CALLOC(1, bytes);
    if (!p) MP_ABORT("selftest: out of host memory");
    s->host[s->nhost++] = p;
    return p;
}

static float *st_host(st_t *s, size_t n) { return st_host_bytes(s, n * sizeof(float)); }

/* Uniform in [lo, hi), a fresh stream per call. */
static float *st_rand(st_t *s, size_t n, float lo, float hi)
{
    float *h = st_host(s, n);
    s->draws++;
    for (size_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * rng_uniform(rng_key(SEED, s->draws, i, 0));
    return h;
}

static int *st_tokens(st_t *s, size_t n, int V)
{
    int *h = st_host_bytes(s, n * sizeof(int));
    s->draws++;
    for (size_t i = 0; i < n; i++) h[i] = (int)(rng_key(SEED, s->draws, i, 0) % (uint64_t)V);
    return h;
}

static float *st_dup(st_t *s, const float *src, size_t n)
{
    float *h = st_host(s, n);
    memcpy(h, src, n * sizeof(float));
    return h;
}

static void *st_dev_bytes(st_t *s, size_t bytes)
{
    void *d = cu_arena_alloc(&s->arena, bytes, "selftest buffer");
    if (!d) MP_ABORT("selftest: device arena exhausted");
    return d;
}

/* Copies go through ctx->compute: its streams do not synchronise with the legacy default stream. */
static float *st_dev(st_t *s, const float *h, size_t n)
{
    float *d = st_dev_bytes(s, n * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, s->ctx.compute));
    return d;
}

static int *st_dev_int(st_t *s, const int *h, size_t n)
{
    int *d = st_dev_bytes(s, n * sizeof(int));
    CUDA_CHECK(cudaMemcpyAsync(d, h, n * sizeof(int), cudaMemcpyHostToDevice, s->ctx.compute));
    return d;
}

/* An "=" output: all bits set is a NaN, so an element the kernel does not write is caught. */
static float *st_dev_nan(st_t *s, size_t n)
{
    float *d = st_dev_bytes(s, n * sizeof(float));
    CUDA_CHECK(cudaMemsetAsync(d, 0xFF, n * sizeof(float), s->ctx.compute));
    return d;
}

/* ---- comparison and report ---- */

/* Downloads n results and folds ||gpu − cpu|| / ||cpu|| and the NaN count into c. */
static void cmp_add(st_t *s, cmp_t *c, const char *what, const float *dev, const float *ref, size_t n)
{
    float *g = st_host(s, n);
    CUDA_CHECK(cudaMemcpyAsync(g, dev, n * sizeof(float), cudaMemcpyDeviceToHost, s->ctx.compute));
    cu_ctx_sync(&s->ctx);
    double num = 0.0, den = 0.0;
    size_t nan = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(g[i])) {
            nan++;
            continue;
        }
        num += ((double)g[i] - ref[i]) * ((double)g[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    const double rel = den > 0.0 ? sqrt(num / den) : sqrt(num);
    if (s->verbose) printf("       %-10s n=%-6zu rel=%.2e%s\n", what, n, rel, nan ? " (NaN: unwritten)" : "");
    if (rel > c->rel || isnan(rel)) c->rel = rel;
    c->nan += nan;
}

static void st_report(st_t *s, const char *name, int bf16, const cmp_t *c)
{
    const double tol = bf16 ? TOL_BF16 : TOL_FP32;
    const int ok = c->nan == 0 && c->rel < tol;
    char label[64];
    /* the handoff only acts with our rounding (bf16 == 1); its default, bf16, keeps the plain names */
    snprintf(label, sizeof label, "%s%s%s", name, bf16 == 2 ? "[bf16 cublas]" : bf16 ? "[bf16]" : "",
             bf16 == 1 && s->ctx.handoff == CU_HANDOFF_FP32 ? "[fp32-handoff]" : "");
    printf("%-4s %-30s rel=%.2e (tolerance %.0e)", ok ? "ok" : "FAIL", label, c->rel, tol);
    if (c->nan) printf(" %zu elements never written", c->nan);
    printf("\n");
    fflush(stdout);
    if (ok)
        s->passed++;
    else
        s->failed++;
}

/* name: no spaces (bringup_check.py keys each ok/FAIL line by its first word). */
static void st_verdict(st_t *s, const char *name, int ok, const char *what)
{
    printf("%-4s %-30s %s\n", ok ? "ok" : "FAIL", name, what);
    fflush(stdout);
    if (ok)
        s->passed++;
    else
        s->failed++;
}

/* Runs one test with its own device and host buffers, released when it returns. */
static void st_run(st_t *s, void (*test)(st_t *, int), int bf16)
{
    const size_t mark = cu_arena_mark(&s->arena);
    s->ctx.precision = bf16 ? CU_BF16 : CU_FP32;
    s->ctx.bf16_gemm = bf16 == 2 ? CU_GEMM_CUBLAS : CU_GEMM_ROUND; /* 2: bf16, cuBLAS converting */
    test(s, bf16);
    cu_ctx_sync(&s->ctx);
    cu_arena_release(&s->arena, mark);
    for (int i = 0; i < s->nhost; i++) free(s->host[i]);
    s->nhost = 0;
}

/* ---- the kernels ---- */

static void t_encoder(st_t *s, int bf16)
{
    const int v0 = 10, vn = 40; /* vocab-parallel slice: some tokens fall outside it */
    const size_t nout = (size_t)SN * SC;
    int *tok = st_tokens(s, SN, SV);
    float *wte = st_rand(s, (size_t)vn * SC, -1, 1), *wpe = st_rand(s, (size_t)ST * SC, -1, 1);
    float *out = st_host(s, nout), *dout = st_rand(s, nout, -1, 1);
    int *d_tok = st_dev_int(s, tok, SN);
    float *d_wte = st_dev(s, wte, (size_t)vn * SC), *d_wpe = st_dev(s, wpe, (size_t)ST * SC);
    cmp_t c = {0, 0};
    float *d_out = st_dev_nan(s, nout);
    encoder_forward(out, tok, wte, wpe, SB, ST, SC, v0, vn);
    cu_encoder_forward(&s->ctx, d_out, d_tok, d_wte, d_wpe, SB, ST, SC, v0, vn);
    cmp_add(s, &c, "out", d_out, out, nout);
    st_report(s, "encoder_forward", bf16, &c);

    float *acc = st_rand(s, nout, -1, 1), *d_acc = st_dev(s, acc, nout);
    c = (cmp_t){0, 0};
    position_forward(acc, wpe, SB, ST, SC);
    cu_position_forward(&s->ctx, d_acc, d_wpe, SB, ST, SC);
    cmp_add(s, &c, "out", d_acc, acc, nout);
    st_report(s, "position_forward", bf16, &c);

    float *dwte = st_rand(s, (size_t)vn * SC, -1, 1), *dwpe = st_rand(s, (size_t)ST * SC, -1, 1);
    float *d_dwte = st_dev(s, dwte, (size_t)vn * SC), *d_dwpe = st_dev(s, dwpe, (size_t)ST * SC);
    float *d_dout = st_dev(s, dout, nout);
    c = (cmp_t){0, 0};
    encoder_backward(dwte, dwpe, dout, tok, SB, ST, SC, v0, vn);
    cu_encoder_backward(&s->ctx, d_dwte, d_dwpe, d_dout, d_tok, SB, ST, SC, v0, vn);
    cmp_add(s, &c, "dwte", d_dwte, dwte, (size_t)vn * SC);
    cmp_add(s, &c, "dwpe", d_dwpe, dwpe, (size_t)ST * SC);
    st_report(s, "encoder_backward", bf16, &c);
}

/* One shape: widths a multiple of 4 up to 1024 run the warp-per-row kernels, others the block per row. */
static void layernorm_at(st_t *s, int bf16, int N, int C, const char *fwd, const char *bwd)
{
    const size_t n = (size_t)N * C;
    float *inp = st_rand(s, n, -2, 2), *w = st_rand(s, C, 0.5f, 1.5f), *b = st_rand(s, C, -0.5f, 0.5f);
    float *out = st_host(s, n), *mean = st_host(s, N), *rstd = st_host(s, N);
    float *d_inp = st_dev(s, inp, n), *d_w = st_dev(s, w, C), *d_b = st_dev(s, b, C);
    float *d_out = st_dev_nan(s, n), *d_mean = st_dev_nan(s, N), *d_rstd = st_dev_nan(s, N);
    cmp_t c = {0, 0};
    layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    cu_layernorm_forward(&s->ctx, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
    cmp_add(s, &c, "out", d_out, out, n);
    cmp_add(s, &c, "mean", d_mean, mean, N);
    cmp_add(s, &c, "rstd", d_rstd, rstd, N);
    st_report(s, fwd, bf16, &c);

    /* Backward from the CPU's saved statistics: this test sees backward errors only. */
    float *dout = st_rand(s, n, -1, 1), *dinp = st_rand(s, n, -1, 1);
    float *dw = st_rand(s, C, -1, 1), *db = st_rand(s, C, -1, 1);
    float *d_dout = st_dev(s, dout, n), *d_dinp = st_dev(s, dinp, n), *d_dw = st_dev(s, dw, C),
          *d_db = st_dev(s, db, C);
    float *d_mean_c = st_dev(s, mean, N), *d_rstd_c = st_dev(s, rstd, N);
    c = (cmp_t){0, 0};
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    cu_layernorm_backward(&s->ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean_c, d_rstd_c, N, C);
    cmp_add(s, &c, "dinp", d_dinp, dinp, n);
    cmp_add(s, &c, "dw", d_dw, dw, C);
    cmp_add(s, &c, "db", d_db, db, C);
    st_report(s, bwd, bf16, &c);
}

static void t_layernorm(st_t *s, int bf16)
{
    layernorm_at(s, bf16, SN, SC, "layernorm_forward", "layernorm_backward");
    /* GPT-2's width over rows that leave the last block of the backward partly filled */
    layernorm_at(s, bf16, 100, 768, "layernorm_forward(C=768)", "layernorm_backward(C=768)");
    /* float4s past the row's end in the last lanes */
    layernorm_at(s, bf16, 37, 1000, "layernorm_forward(C=1000)", "layernorm_backward(C=1000)");
    /* not a multiple of 4: the block-per-row kernels */
    layernorm_at(s, bf16, SN, 50, "layernorm_forward(C=50)", "layernorm_backward(C=50)");
}

/* A device buffer holding h after `pad` leading elements: an operand that starts off a 16-byte
 * boundary when pad is not a multiple of 4. */
static float *st_dev_at(st_t *s, const float *h, size_t n, size_t pad)
{
    float *hp = st_host(s, n + pad);
    memcpy(hp + pad, h, n * sizeof(float));
    return st_dev(s, hp, n + pad) + pad;
}

/* One forward product on t_matmul's operands: matmul_forward where res is NULL, else
 * matmul_residual_forward, into a fresh out or (inplace) into res itself; out, res and bias start
 * `pad` floats past a 256-byte boundary (the alignments cuBLASLt is told of). */
static void matmul_forward_at(st_t *s, int bf16, const char *name, const float *d_inp, const float *d_w,
                              const float *inp, const float *w, const float *bias, const float *res, int inplace,
                              size_t pad)
{
    const size_t nout = (size_t)SN * SOC;
    float *out = st_host(s, nout), *d_bias = st_dev_at(s, bias, SOC, pad);
    float *d_res = res ? st_dev_at(s, res, nout, pad) : NULL;
    float *d_out = inplace ? d_res : st_dev_nan(s, nout + pad) + pad;
    cmp_t c = {0, 0};
    if (res) {
        matmul_residual_forward(out, res, inp, w, bias, SN, SC, SOC);
        cu_matmul_residual_forward(&s->ctx, d_out, d_res, d_inp, d_w, d_bias, SN, SC, SOC);
    } else {
        matmul_forward(out, inp, w, bias, SN, SC, SOC);
        cu_matmul_forward(&s->ctx, d_out, d_inp, d_w, d_bias, SN, SC, SOC);
    }
    cmp_add(s, &c, "out", d_out, out, nout);
    st_report(s, name, bf16, &c);
}

/* The forward products with a bias. bf16 with our rounding (and bf16 hand-offs, the default) adds
 * bias and residual in cuBLASLt's epilogue (MP_GEMM_BIAS=epilogue): checked to have run, then the
 * pass path beside it ("(pass)"). In place, out = res, as the model may call it; "(offset)": out,
 * res and bias 4 bytes off 256, where cuBLASLt must be told (it may then offer nothing, and the
 * pass path runs). */
static void matmul_forwards(st_t *s, int bf16, const float *d_inp, const float *d_w, const float *inp,
                            const float *w)
{
    const size_t nout = (size_t)SN * SOC;
    float *bias = st_rand(s, SOC, -1, 1), *res = st_rand(s, nout, -1, 1);
    const int gemm_bias = s->ctx.gemm_bias;
    s->ctx.gemm_bias = CU_BIAS_EPILOGUE;
    const unsigned long fallbacks = s->ctx.gemm_bias_fallbacks;
    matmul_forward_at(s, bf16, "matmul_forward", d_inp, d_w, inp, w, bias, NULL, 0, 0);
    matmul_forward_at(s, bf16, "matmul_residual_forward", d_inp, d_w, inp, w, bias, res, 0, 0);
    matmul_forward_at(s, bf16, "matmul_residual_forward(inplace)", d_inp, d_w, inp, w, bias, res, 1, 0);
    if (bf16 == 1 && s->ctx.handoff == CU_HANDOFF_BF16)
        st_verdict(s, "matmul_bias_epilogue[bf16]", s->ctx.gemm_bias_fallbacks == fallbacks,
                   s->ctx.gemm_bias_fallbacks == fallbacks
                       ? "the three products above ran cuBLASLt's bias epilogue"
                       : "cuBLASLt offered no algorithm: the pass path ran (MP_GEMM_BIAS=pass is the same)");
    const unsigned long before_offset = s->ctx.gemm_bias_fallbacks;
    matmul_forward_at(s, bf16, "matmul_residual_forward(offset)", d_inp, d_w, inp, w, bias, res, 0, 1);
    if (s->verbose && s->ctx.gemm_bias_fallbacks != before_offset)
        printf("       cuBLASLt offered no algorithm at 4-byte alignment: the pass path ran\n");
    if (bf16 == 1) {
        s->ctx.gemm_bias = CU_BIAS_PASS;
        matmul_forward_at(s, bf16, "matmul_forward(pass)", d_inp, d_w, inp, w, bias, NULL, 0, 0);
        matmul_forward_at(s, bf16, "matmul_residual_forward(pass)", d_inp, d_w, inp, w, bias, res, 0, 0);
        matmul_forward_at(s, bf16, "matmul_residual_forward(inplace,pass)", d_inp, d_w, inp, w, bias, res, 1, 0);
    }
    s->ctx.gemm_bias = gemm_bias;
}

static void t_matmul(st_t *s, int bf16)
{
    const size_t nin = (size_t)SN * SC, nw = (size_t)SOC * SC, nout = (size_t)SN * SOC;
    float *inp = st_rand(s, nin, -1, 1), *w = st_rand(s, nw, -1, 1);
    float *d_inp = st_dev(s, inp, nin), *d_w = st_dev(s, w, nw);
    matmul_forwards(s, bf16, d_inp, d_w, inp, w);

    float *dout = st_rand(s, nout, -1, 1), *dinp = st_host(s, nin);
    float *dw = st_rand(s, nw, -1, 1), *dbias = st_rand(s, SOC, -1, 1);
    float *d_dout = st_dev(s, dout, nout), *d_dinp = st_dev_nan(s, nin);
    float *d_dw = st_dev(s, dw, nw), *d_dbias = st_dev(s, dbias, SOC);
    cmp_t c = {0, 0};
    matmul_backward(dinp, dw, dbias, dout, inp, w, SN, SC, SOC);
    cu_matmul_backward(&s->ctx, d_dinp, d_dw, d_dbias, d_dout, d_inp, d_w, SN, SC, SOC);
    cmp_add(s, &c, "dinp", d_dinp, dinp, nin);
    cmp_add(s, &c, "dw", d_dw, dw, nw);
    cmp_add(s, &c, "dbias", d_dbias, dbias, SOC);
    st_report(s, "matmul_backward", bf16, &c);

    c = (cmp_t){0, 0}; /* the weight half alone (a split backward's W), accumulating a second time */
    matmul_backward_weight(dw, dbias, dout, inp, SN, SC, SOC);
    cu_matmul_backward_weight(&s->ctx, d_dw, d_dbias, d_dout, d_inp, SN, SC, SOC);
    cmp_add(s, &c, "dw", d_dw, dw, nw);
    cmp_add(s, &c, "dbias", d_dbias, dbias, SOC);
    st_report(s, "matmul_backward_weight", bf16, &c);
}

/* 1 when the n device floats at a and b have the same bits. */
static int st_same_bits(st_t *s, const float *a, const float *b, size_t n)
{
    float *ha = st_host(s, n), *hb = st_host(s, n);
    CUDA_CHECK(cudaMemcpyAsync(ha, a, n * sizeof(float), cudaMemcpyDeviceToHost, s->ctx.compute));
    CUDA_CHECK(cudaMemcpyAsync(hb, b, n * sizeof(float), cudaMemcpyDeviceToHost, s->ctx.compute));
    cu_ctx_sync(&s->ctx);
    return !memcmp(ha, hb, n * sizeof(float));
}

/* matmul_backward_gelu under the bf16 handoff (dout · w handed to GELU's backward in bf16) against
 * the fp32 handoff: dw and dbias bitwise equal, the weight half being the same calls either way.
 * dinp (N,C) = (dout (N,OC) · w (OC,C)) ⊙ dgelu; dinp itself is the tolerance tests' business. */
static void handoff_bits(st_t *s, int N, int C, int OC)
{
    const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    float *inp = st_rand(s, nin, -1, 1), *w = st_rand(s, nw, -1, 1), *dout = st_rand(s, nout, -1, 1);
    float *dg = st_rand(s, nin, 0, 1), *dw0 = st_rand(s, nw, -1, 1), *db0 = st_rand(s, OC, -1, 1);
    float *d_inp = st_dev(s, inp, nin), *d_w = st_dev(s, w, nw), *d_dout = st_dev(s, dout, nout);
    float *d_dg = st_dev(s, dg, nin);
    float *d_dw[2], *d_db[2];
    const int chosen = s->ctx.handoff;
    for (int h = 0; h < 2; h++) {
        d_dw[h] = st_dev(s, dw0, nw);
        d_db[h] = st_dev(s, db0, OC);
        s->ctx.handoff = h ? CU_HANDOFF_FP32 : CU_HANDOFF_BF16;
        float *d_hidden = st_dev_nan(s, nin); /* inp in each handoff's form of the hidden activation */
        cu_mlp_hidden_from_fp32(&s->ctx, d_hidden, d_inp, nin);
        cu_matmul_backward_gelu(&s->ctx, st_dev_nan(s, nin), d_dw[h], d_db[h], d_dout, d_hidden, d_w, d_dg, N, C, OC);
    }
    s->ctx.handoff = chosen;
    char name[64];
    snprintf(name, sizeof name, "matmul_backward_gelu[handoff-bits,N=%d,OC=%d]", N, OC);
    st_verdict(s, name, st_same_bits(s, d_dw[0], d_dw[1], nw) && st_same_bits(s, d_db[0], d_db[1], (size_t)OC),
               "dw, dbias with the hidden activation kept and dout · w handed on in bf16 bitwise as in fp32");
}

/* bf16 with our rounding, bitwise against the plain cu_gemm route: the vector rounding (odd tails)
 * against the scalar one (operands off 16 bytes), and matmul_backward's shared bf16 copies and
 * fused dbias partials against two cu_gemm calls and the separate dbias reduction (dw = NULL takes
 * that route), over row counts with a partial 64-row chunk and both the 4-column and 1-column
 * kernels. */
static void t_bf16_bits(st_t *s, int bf16)
{
    (void)bf16;
    {
        const int m = 37, n = 29, k = 47; /* spans 1739 and 1363: tails of 3 */
        float *a = st_rand(s, (size_t)m * k, -1, 1), *b = st_rand(s, (size_t)n * k, -1, 1);
        float *d_c1 = st_dev_nan(s, (size_t)m * n), *d_c2 = st_dev_nan(s, (size_t)m * n);
        cu_gemm(&s->ctx, 0, 1, m, n, k, 1.0f, st_dev(s, a, (size_t)m * k), k, 0, st_dev(s, b, (size_t)n * k), k, 0,
                0.0f, d_c1, n, 0, 1);
        cu_gemm(&s->ctx, 0, 1, m, n, k, 1.0f, st_dev_at(s, a, (size_t)m * k, 1), k, 0,
                st_dev_at(s, b, (size_t)n * k, 3), k, 0, 0.0f, d_c2, n, 0, 1);
        st_verdict(s, "bf16_round[vector=scalar]", st_same_bits(s, d_c1, d_c2, (size_t)m * n),
                   "products of aligned and misaligned copies bitwise equal");
    }
    static const struct {
        int N, OC, pad;
    } cases[] = {{203, 80, 0}, {203, 67, 0}, {130, 80, 1}};
    const int C = SC;
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int N = cases[t].N, OC = cases[t].OC;
        const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
        float *inp = st_rand(s, nin, -1, 1), *w = st_rand(s, nw, -1, 1), *dout = st_rand(s, nout, -1, 1);
        float *dw0 = st_rand(s, nw, -1, 1), *db0 = st_rand(s, OC, -1, 1);
        float *d_inp = st_dev(s, inp, nin), *d_w = st_dev(s, w, nw), *d_dout = st_dev_at(s, dout, nout, cases[t].pad);
        float *d_dinp = st_dev_nan(s, nin), *d_dw = st_dev(s, dw0, nw), *d_db = st_dev(s, db0, OC);
        float *r_dinp = st_dev_nan(s, nin), *r_dw = st_dev(s, dw0, nw), *r_db = st_dev(s, db0, OC);
        float *h_dw = st_dev(s, dw0, nw), *h_db = st_dev(s, db0, OC);
        cu_matmul_backward(&s->ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
        cu_matmul_backward_weight(&s->ctx, h_dw, h_db, d_dout, d_inp, N, C, OC);
        cu_gemm(&s->ctx, 0, 0, N, C, OC, 1.0f, d_dout, OC, 0, d_w, C, 0, 0.0f, r_dinp, C, 0, 1);
        cu_gemm(&s->ctx, 1, 0, OC, C, N, 1.0f, d_dout, OC, 0, d_inp, C, 0, 1.0f, r_dw, C, 0, 1);
        cu_matmul_backward_weight(&s->ctx, NULL, r_db, d_dout, d_inp, N, C, OC);
        const int ok = st_same_bits(s, d_dinp, r_dinp, nin) && st_same_bits(s, d_dw, r_dw, nw) &&
                       st_same_bits(s, d_db, r_db, (size_t)OC) && st_same_bits(s, h_dw, r_dw, nw) &&
                       st_same_bits(s, h_db, r_db, (size_t)OC);
        char name[64];
        snprintf(name, sizeof name, "matmul_backward[bits,N=%d,OC=%d%s]", N, OC, cases[t].pad ? ",off" : "");
        st_verdict(s, name, ok, "dinp, dw, dbias (and the weight half) bitwise as via cu_gemm");
    }
    handoff_bits(s, 203, 80, 48); /* 4-column dbias partials, dinp in float4s */
    handoff_bits(s, 130, 81, 67); /* 1-column partials, dinp's scalar tail */
}

static void t_attention(st_t *s, int bf16)
{
    const size_t nqkv = (size_t)SN * 3 * SC, nout = (size_t)SN * SC, natt = (size_t)SB * SNH * ST * ST;
    float *qkv = st_rand(s, nqkv, -1, 1), *out = st_host(s, nout), *att = st_host(s, natt);
    float *d_qkv = st_dev(s, qkv, nqkv), *d_out = st_dev_nan(s, nout), *d_att = st_dev_nan(s, natt);
    cmp_t c = {0, 0};
    attention_forward(out, att, qkv, SB, ST, SC, SNH);
    cu_attention_forward(&s->ctx, d_out, d_att, d_qkv, SB, ST, SC, SNH);
    cmp_add(s, &c, "out", d_out, out, nout);
    cmp_add(s, &c, "att", d_att, att, natt);
    st_report(s, "attention_forward", bf16, &c);

    /* Backward from the CPU's probabilities; datt is scratch, so only dqkv is compared. */
    float *dout = st_rand(s, nout, -1, 1), *dqkv = st_host(s, nqkv), *datt = st_host(s, natt);
    float *d_dout = st_dev(s, dout, nout), *d_att_c = st_dev(s, att, natt);
    float *d_dqkv = st_dev_nan(s, nqkv), *d_datt = st_dev_nan(s, natt);
    c = (cmp_t){0, 0};
    attention_backward(dqkv, datt, dout, qkv, att, SB, ST, SC, SNH);
    cu_attention_backward(&s->ctx, d_dqkv, d_datt, d_dout, d_qkv, d_att_c, SB, ST, SC, SNH);
    cmp_add(s, &c, "dqkv", d_dqkv, dqkv, nqkv);
    st_report(s, "attention_backward", bf16, &c);
}

/* The fused bf16 attention at each head size it takes, in both variants: `attention_fa2[...]` (the
 * mma.sync kernels of attention_fa2_cuda.cu, the default) and `attention_flash[...]` (the WMMA
 * kernels of attention_flash_cuda.cu, MP_ATTENTION=wmma), so that one run says whether the default
 * is right and whether the fallback still is. T not a multiple of the 64-row tiles (and for fa2 at
 * head size 64 also an exact multiple and a longer T, whose tiles go through both shared-memory
 * stages several times), NH = 3: out and dqkv against the CPU within the bf16 tolerance (att holds
 * log-sum-exps, not probabilities, so backward runs from the GPU's own forward), dqkv bitwise equal
 * over two runs (no atomics), and the shape must really take the variant asked for: on sm_90 (H100,
 * H200) every size; on a device whose blocks have less shared memory, the sizes that do not fit say
 * so in a note line. */
static void flash_case_mix(st_t *s, int bf16, int variant, int bwd_variant, int hs, int T)
{
    const int NH = 3, C = NH * hs, B = 2;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    const int fa2 = variant == CU_ATT_FA2;
    const unsigned sizes = (fa2 ? s->ctx.fa2_sizes : s->ctx.flash_sizes) &
                           (bwd_variant == CU_ATT_FA2 ? s->ctx.fa2_sizes : s->ctx.flash_sizes);
    char name[48];
    if (bwd_variant == variant)
        snprintf(name, sizeof name, "%s[hs=%d,T=%d]", fa2 ? "attention_fa2" : "attention_flash", hs, T);
    else
        snprintf(name, sizeof name, "attention_mix[%s>%s,hs=%d,T=%d]", fa2 ? "fa2" : "wmma", fa2 ? "wmma" : "fa2", hs, T);
    s->ctx.attention = variant;
    if (!cu_attention_flash_fits(&s->ctx, B, T, C, NH) || !(sizes & (unsigned)hs)) {
        int major = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, s->ctx.device));
        if (major >= 9) {
            printf("FAIL %-30s the fused path refused this shape\n", name);
            s->failed++;
        } else {
            printf("note %-30s not this variant on this device (too little shared memory a block)\n", name);
        }
        return;
    }
    float *qkv = st_rand(s, nqkv, -2, 2), *out = st_host(s, nout), *att = st_host(s, natt);
    float *dout = st_rand(s, nout, -1, 1), *dqkv = st_host(s, nqkv), *datt = st_host(s, natt);
    float *d_qkv = st_dev(s, qkv, nqkv), *d_out = st_dev_nan(s, nout), *d_att = st_dev_nan(s, natt);
    float *d_dout = st_dev(s, dout, nout), *d_dqkv = st_dev_nan(s, nqkv), *d_datt = st_dev_nan(s, natt);
    attention_forward(out, att, qkv, B, T, C, NH);
    attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
    cu_attention_forward(&s->ctx, d_out, d_att, d_qkv, B, T, C, NH);
    s->ctx.attention = bwd_variant; /* one variant's backward after the other's forward: the same att contract */
    cu_attention_backward(&s->ctx, d_dqkv, d_datt, d_dout, d_qkv, d_att, B, T, C, NH);
    cmp_t c = {0, 0};
    cmp_add(s, &c, "out", d_out, out, nout);
    cmp_add(s, &c, "dqkv", d_dqkv, dqkv, nqkv);
    float *first = st_host(s, nqkv), *again = st_host(s, nqkv);
    CUDA_CHECK(cudaMemcpyAsync(first, d_dqkv, nqkv * sizeof(float), cudaMemcpyDeviceToHost, s->ctx.compute));
    cu_attention_backward(&s->ctx, d_dqkv, d_datt, d_dout, d_qkv, d_att, B, T, C, NH);
    CUDA_CHECK(cudaMemcpyAsync(again, d_dqkv, nqkv * sizeof(float), cudaMemcpyDeviceToHost, s->ctx.compute));
    cu_ctx_sync(&s->ctx);
    if (memcmp(first, again, nqkv * sizeof(float))) {
        printf("FAIL %-30s dqkv differs between two runs\n", name);
        s->failed++;
        return;
    }
    st_report(s, name, bf16, &c);
}

static void flash_case(st_t *s, int bf16, int variant, int hs, int T) { flash_case_mix(s, bf16, variant, variant, hs, T); }

static void t_flash(st_t *s, int bf16)
{
    static const int sizes[] = {16, 32, 64, 128};
    const int chosen = s->ctx.attention; /* MP_ATTENTION's, put back for the tests after */
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        flash_case(s, bf16, CU_ATT_FA2, sizes[k], 2 * sizes[k] + 37);
        flash_case(s, bf16, CU_ATT_WMMA, sizes[k], 2 * sizes[k] + 37);
    }
    flash_case(s, bf16, CU_ATT_FA2, 64, 256);
    flash_case(s, bf16, CU_ATT_FA2, 64, 397);
    /* T = 165 at head size 64: att has room for the kept bf16 q, k, v (2.5·C <= NH·T), which the FA2
     * backward reads whichever forward ran; head size 128 at T = 293 has none (the scratch path) */
    flash_case_mix(s, bf16, CU_ATT_WMMA, CU_ATT_FA2, 64, 165);
    flash_case_mix(s, bf16, CU_ATT_FA2, CU_ATT_WMMA, 64, 165);
    s->ctx.attention = chosen;
}

static void t_gelu(st_t *s, int bf16)
{
    const size_t n = (size_t)SN * 4 * SC;
    float *inp = st_rand(s, n, -4, 4), *out = st_host(s, n), *dout = st_rand(s, n, -1, 1), *dinp = st_host(s, n);
    float *d_inp = st_dev(s, inp, n), *d_out = st_dev_nan(s, n), *d_dout = st_dev(s, dout, n);
    float *d_dinp = st_dev_nan(s, n);
    cmp_t c = {0, 0};
    gelu_forward(out, inp, n);
    cu_gelu_forward(&s->ctx, d_out, d_inp, n);
    cmp_add(s, &c, "out", d_out, out, n);
    st_report(s, "gelu_forward", bf16, &c);
    c = (cmp_t){0, 0};
    gelu_backward(dinp, inp, dout, n);
    cu_gelu_backward(&s->ctx, d_dinp, d_inp, d_dout, n);
    cmp_add(s, &c, "dinp", d_dinp, dinp, n);
    st_report(s, "gelu_backward", bf16, &c);
}

/* ---- the Llama family's kernels ---- */

/* One shape: forward, then backward from the CPU's rstd (this test sees backward errors only); with
 * rerun, the backward again from the same start must give the same bits (dw's chunk partials and
 * their tree, no atomics). */
static void rmsnorm_at(st_t *s, int bf16, int N, int C, int rerun, const char *fwd, const char *bwd)
{
    const size_t n = (size_t)N * C;
    const float eps = 1e-5f;
    float *inp = st_rand(s, n, -2, 2), *w = st_rand(s, C, 0.5f, 1.5f), *out = st_host(s, n), *rstd = st_host(s, N);
    float *d_inp = st_dev(s, inp, n), *d_w = st_dev(s, w, C), *d_out = st_dev_nan(s, n), *d_rstd = st_dev_nan(s, N);
    cmp_t c = {0, 0};
    rmsnorm_forward(out, rstd, inp, w, N, C, eps);
    cu_rmsnorm_forward(&s->ctx, d_out, d_rstd, d_inp, d_w, N, C, eps);
    cmp_add(s, &c, "out", d_out, out, n);
    cmp_add(s, &c, "rstd", d_rstd, rstd, N);
    st_report(s, fwd, bf16, &c);

    float *dout = st_rand(s, n, -1, 1), *dinp = st_rand(s, n, -1, 1), *dw = st_rand(s, C, -1, 1);
    float *d_dout = st_dev(s, dout, n), *d_dinp = st_dev(s, dinp, n), *d_dw = st_dev(s, dw, C);
    float *d_dinp2 = st_dev(s, dinp, n), *d_dw2 = st_dev(s, dw, C), *d_rstd_c = st_dev(s, rstd, N);
    c = (cmp_t){0, 0};
    rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
    cu_rmsnorm_backward(&s->ctx, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd_c, N, C);
    cmp_add(s, &c, "dinp", d_dinp, dinp, n);
    cmp_add(s, &c, "dw", d_dw, dw, C);
    st_report(s, bwd, bf16, &c);
    if (!rerun) return;
    cu_rmsnorm_backward(&s->ctx, d_dinp2, d_dw2, d_dout, d_inp, d_w, d_rstd_c, N, C);
    char name[64];
    snprintf(name, sizeof name, "rmsnorm_backward[rerun-bits,N=%d]", N);
    st_verdict(s, name, st_same_bits(s, d_dinp, d_dinp2, n) && st_same_bits(s, d_dw, d_dw2, (size_t)C),
               "dinp, dw bitwise equal over two runs");
}

static void t_rmsnorm(st_t *s, int bf16)
{
    rmsnorm_at(s, bf16, SN, SC, 0, "rmsnorm_forward", "rmsnorm_backward");
    /* widths not a multiple of the warp, a partial last block of rows */
    rmsnorm_at(s, bf16, 37, 1000, 0, "rmsnorm_forward(C=1000)", "rmsnorm_backward(C=1000)");
    /* 17 chunks of 64 rows: more partials than dw's tree has groups */
    rmsnorm_at(s, bf16, 1061, 96, 1, "rmsnorm_forward(N=1061)", "rmsnorm_backward(N=1061)");
}

/* In place on a qkv buffer with NH query and KVH key/value heads from position pos0: forward, then
 * backward on other values; v must come out untouched (compared with the rest). */
static void rope_at(st_t *s, int bf16, int NH, int KVH, int pos0, const char *fwd, const char *bwd)
{
    const int hs = SC / SNH;
    const size_t n = (size_t)SN * (NH + 2 * KVH) * hs, ncs = (size_t)(pos0 + ST) * hs;
    float *cs = st_host(s, ncs);
    rope_table_init(cs, pos0 + ST, hs, 10000.0f);
    float *d_cs = st_dev(s, cs, ncs);
    for (int back = 0; back < 2; back++) {
        float *x = st_rand(s, n, -1, 1), *d_x = st_dev(s, x, n);
        cmp_t c = {0, 0};
        if (back) {
            rope_backward(x, cs, pos0, SB, ST, NH, KVH, hs);
            cu_rope_backward(&s->ctx, d_x, d_cs, pos0, SB, ST, NH, KVH, hs);
        } else {
            rope_forward(x, cs, pos0, SB, ST, NH, KVH, hs);
            cu_rope_forward(&s->ctx, d_x, d_cs, pos0, SB, ST, NH, KVH, hs);
        }
        cmp_add(s, &c, back ? "dqkv" : "qkv", d_x, x, n);
        st_report(s, back ? bwd : fwd, bf16, &c);
    }
}

static void t_rope(st_t *s, int bf16)
{
    rope_at(s, bf16, SNH, SNH / 2, 3, "rope_forward(KVH<NH)", "rope_backward(KVH<NH)");
    rope_at(s, bf16, SNH, SNH, 0, "rope_forward(KVH=NH)", "rope_backward(KVH=NH)");
}

static void swiglu_at(st_t *s, int bf16, int N, int F, const char *fwd, const char *bwd)
{
    const size_t n = (size_t)N * F;
    float *inp = st_rand(s, 2 * n, -6, 6), *out = st_host(s, n), *dout = st_rand(s, n, -1, 1);
    float *dinp = st_host(s, 2 * n), *d_inp = st_dev(s, inp, 2 * n), *d_out = st_dev_nan(s, n);
    float *d_dout = st_dev(s, dout, n), *d_dinp = st_dev_nan(s, 2 * n);
    cmp_t c = {0, 0};
    swiglu_forward(out, inp, N, F);
    cu_swiglu_forward(&s->ctx, d_out, d_inp, N, F);
    cmp_add(s, &c, "out", d_out, out, n);
    st_report(s, fwd, bf16, &c);
    c = (cmp_t){0, 0};
    swiglu_backward(dinp, dout, inp, N, F);
    cu_swiglu_backward(&s->ctx, d_dinp, d_dout, d_inp, N, F);
    cmp_add(s, &c, "dinp", d_dinp, dinp, 2 * n);
    st_report(s, bwd, bf16, &c);
}

static void t_swiglu(st_t *s, int bf16)
{
    swiglu_at(s, bf16, SN, 4 * SC, "swiglu_forward", "swiglu_backward");
    swiglu_at(s, bf16, 31, 77, "swiglu_forward(odd)", "swiglu_backward(odd)"); /* rows off 16 bytes */
}

/* Grouped-query attention at NH = SNH query heads over KVH key/value heads of size hs, as
 * t_attention: out and att (the probabilities, on the cuBLAS path at every KVH < NH, bf16 and head
 * size 64 included), then dqkv from the CPU's att. KVH = NH: also bitwise the multi-head entry
 * points; KVH < NH: dk, dv (sums over a group) bitwise over two runs. */
static void gqa_at(st_t *s, int bf16, int KVH, int hs)
{
    const int C = SNH * hs, ld = C + 2 * KVH * hs;
    const size_t nqkv = (size_t)SN * ld, nout = (size_t)SN * C, natt = (size_t)SB * SNH * ST * ST;
    char fwd[64], bwd[64], bits[64];
    snprintf(fwd, sizeof fwd, "attention_gqa_forward(KVH=%d,hs=%d)", KVH, hs);
    snprintf(bwd, sizeof bwd, "attention_gqa_backward(KVH=%d,hs=%d)", KVH, hs);
    float *qkv = st_rand(s, nqkv, -1, 1), *out = st_host(s, nout), *att = st_host(s, natt);
    float *d_qkv = st_dev(s, qkv, nqkv), *d_out = st_dev_nan(s, nout), *d_att = st_dev_nan(s, natt);
    cmp_t c = {0, 0};
    attention_gqa_forward(out, att, qkv, SB, ST, C, SNH, KVH);
    cu_attention_gqa_forward(&s->ctx, d_out, d_att, d_qkv, SB, ST, C, SNH, KVH);
    cmp_add(s, &c, "out", d_out, out, nout);
    cmp_add(s, &c, "att", d_att, att, natt);
    st_report(s, fwd, bf16, &c);

    float *dout = st_rand(s, nout, -1, 1), *dqkv = st_host(s, nqkv), *datt = st_host(s, natt);
    float *d_dout = st_dev(s, dout, nout), *d_att_c = st_dev(s, att, natt);
    float *d_dqkv = st_dev_nan(s, nqkv), *d_datt = st_dev_nan(s, natt), *d_dqkv2 = st_dev_nan(s, nqkv);
    c = (cmp_t){0, 0};
    attention_gqa_backward(dqkv, datt, dout, qkv, att, SB, ST, C, SNH, KVH);
    cu_attention_gqa_backward(&s->ctx, d_dqkv, d_datt, d_dout, d_qkv, d_att_c, SB, ST, C, SNH, KVH);
    cmp_add(s, &c, "dqkv", d_dqkv, dqkv, nqkv);
    st_report(s, bwd, bf16, &c);
    if (KVH == SNH) {
        float *d_out2 = st_dev_nan(s, nout), *d_att2 = st_dev_nan(s, natt);
        cu_attention_forward(&s->ctx, d_out2, d_att2, d_qkv, SB, ST, C, SNH);
        cu_attention_backward(&s->ctx, d_dqkv2, d_datt, d_dout, d_qkv, d_att_c, SB, ST, C, SNH);
        snprintf(bits, sizeof bits, "attention_gqa[KVH=NH-bits,hs=%d]", hs);
        st_verdict(s, bits,
                   st_same_bits(s, d_out, d_out2, nout) && st_same_bits(s, d_att, d_att2, natt) &&
                       st_same_bits(s, d_dqkv, d_dqkv2, nqkv),
                   "out, att, dqkv bitwise as attention_forward/_backward");
    } else {
        cu_attention_gqa_backward(&s->ctx, d_dqkv2, d_datt, d_dout, d_qkv, d_att_c, SB, ST, C, SNH, KVH);
        snprintf(bits, sizeof bits, "attention_gqa[rerun-bits,KVH=%d,hs=%d]", KVH, hs);
        st_verdict(s, bits, st_same_bits(s, d_dqkv, d_dqkv2, nqkv), "dqkv bitwise equal over two runs");
    }
}

static void t_attention_gqa(st_t *s, int bf16)
{
    const int hs = SC / SNH;
    gqa_at(s, bf16, SNH / 2, hs); /* two query heads a kv head */
    gqa_at(s, bf16, 1, hs);       /* one kv head: batches of one item */
    gqa_at(s, bf16, SNH, hs);     /* multi-head */
    gqa_at(s, bf16, SNH / 2, 64); /* a head size the fused kernels take: grouped heads still unfused */
}

/* The MLP's fc product with GELU (saving gelu') and fcproj's backward through it: (SN,SC) -> (SN,SOC). */
/* One shape (N, C, OC); odd ones run the scalar kernels and the float4 ones' scalar tails. bias 0:
 * the forward without one; bwd NULL: the forward alone. */
static void matmul_gelu_at(st_t *s, int bf16, int N, int C, int OC, int bias_on, const char *fwd, const char *bwd)
{
    const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    float *inp = st_rand(s, nin, -1, 1), *w = st_rand(s, nw, -1, 1), *bias = bias_on ? st_rand(s, OC, -1, 1) : NULL;
    float *d_inp = st_dev(s, inp, nin), *d_w = st_dev(s, w, nw), *d_bias = bias_on ? st_dev(s, bias, OC) : NULL;
    float *out = st_host(s, nout), *dg = st_host(s, nout), *d_out = st_dev_nan(s, nout), *d_dg = st_dev_nan(s, nout);
    cmp_t c = {0, 0};
    matmul_gelu_forward(out, dg, inp, w, bias, N, C, OC);
    cu_matmul_gelu_forward(&s->ctx, d_out, d_dg, d_inp, d_w, d_bias, N, C, OC);
    float *d_out32 = st_dev_nan(s, nout); /* out in the backend's form (bf16 under the handoff), widened */
    cu_mlp_hidden_to_fp32(&s->ctx, d_out32, d_out, nout);
    cmp_add(s, &c, "out", d_out32, out, nout);
    cmp_add(s, &c, "dgelu", d_dg, dg, nout);
    st_report(s, fwd, bf16, &c);
    if (!bwd) return;

    /* fcproj: w2 (C,OC) takes the GELU output (N,OC) back to (N,C); dinp (N,OC) */
    float *w2 = st_rand(s, nw, -1, 1), *dout = st_rand(s, nin, -1, 1), *dinp = st_host(s, nout);
    float *dw = st_rand(s, nw, -1, 1), *dbias = st_rand(s, C, -1, 1);
    float *d_w2 = st_dev(s, w2, nw), *d_dout = st_dev(s, dout, nin), *d_dinp = st_dev_nan(s, nout);
    float *d_dw = st_dev(s, dw, nw), *d_dbias = st_dev(s, dbias, C), *d_g32 = st_dev(s, out, nout);
    float *d_dgc = st_dev(s, dg, nout), *d_g = st_dev_nan(s, nout);
    cu_mlp_hidden_from_fp32(&s->ctx, d_g, d_g32, nout); /* the CPU's GELU output in the backend's form */
    c = (cmp_t){0, 0};
    matmul_backward_gelu(dinp, dw, dbias, dout, out, w2, dg, N, OC, C);
    cu_matmul_backward_gelu(&s->ctx, d_dinp, d_dw, d_dbias, d_dout, d_g, d_w2, d_dgc, N, OC, C);
    float *d_dinp32 = st_dev_nan(s, nout); /* dinp in the backend's form (kept in bf16), widened */
    cu_mlp_dhidden_to_fp32(&s->ctx, d_dinp32, d_dinp, N, OC);
    cmp_add(s, &c, "dinp", d_dinp32, dinp, nout);
    cmp_add(s, &c, "dw", d_dw, dw, nw);
    cmp_add(s, &c, "dbias", d_dbias, dbias, C);
    st_report(s, bwd, bf16, &c);
}

static void matmul_gelu_shapes(st_t *s, int bf16)
{
    matmul_gelu_at(s, bf16, SN, SC, SOC, 1, "matmul_gelu_forward", "matmul_backward_gelu");
    /* N·OC = 2511: dinp's float4 product ends in a scalar tail of 3 */
    matmul_gelu_at(s, bf16, 31, 47, 81, 1, "matmul_gelu_forward(odd)", "matmul_backward_gelu(odd)");
    matmul_gelu_at(s, bf16, SN, SC, SOC, 0, "matmul_gelu_forward(nobias)", NULL);
}

/* The MLP's projection on the hidden activation in the backend's form (the CPU's fp32 values
 * converted by cu_mlp_hidden_from_fp32): with residual and bias, in place (out = res), and as a TP
 * peer's partial (no residual, no bias); then the weight half. */
static void mlp_proj_cases(st_t *s, int bf16, int N, int C, int OC, const char *fwd, const char *wgt)
{
    const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    float *inp = st_rand(s, nin, 0, 1), *w = st_rand(s, nw, -1, 1), *bias = st_rand(s, OC, -1, 1);
    float *res = st_rand(s, nout, -1, 1), *out = st_host(s, nout), *out2 = st_dup(s, res, nout);
    float *out3 = st_host(s, nout);
    float *d_inp32 = st_dev(s, inp, nin), *d_inp = st_dev_nan(s, nin), *d_w = st_dev(s, w, nw);
    float *d_bias = st_dev(s, bias, OC), *d_res = st_dev(s, res, nout), *d_out = st_dev_nan(s, nout);
    float *d_out2 = st_dev(s, res, nout), *d_out3 = st_dev_nan(s, nout);
    cu_mlp_hidden_from_fp32(&s->ctx, d_inp, d_inp32, nin);
    cmp_t c = {0, 0};
    mlp_proj_forward(out, res, inp, w, bias, N, C, OC);
    cu_mlp_proj_forward(&s->ctx, d_out, d_res, d_inp, d_w, d_bias, N, C, OC);
    cmp_add(s, &c, "out", d_out, out, nout);
    mlp_proj_forward(out2, out2, inp, w, bias, N, C, OC); /* in place, as the model calls it */
    cu_mlp_proj_forward(&s->ctx, d_out2, d_out2, d_inp, d_w, d_bias, N, C, OC);
    cmp_add(s, &c, "inplace", d_out2, out2, nout);
    mlp_proj_forward(out3, NULL, inp, w, NULL, N, C, OC);
    cu_mlp_proj_forward(&s->ctx, d_out3, NULL, d_inp, d_w, NULL, N, C, OC);
    cmp_add(s, &c, "partial", d_out3, out3, nout);
    st_report(s, fwd, bf16, &c);

    float *dout = st_rand(s, nout, -1, 1), *dw = st_rand(s, nw, -1, 1), *dbias = st_rand(s, OC, -1, 1);
    float *d_dout = st_dev(s, dout, nout), *d_dw = st_dev(s, dw, nw), *d_dbias = st_dev(s, dbias, OC);
    c = (cmp_t){0, 0};
    mlp_proj_backward_weight(dw, dbias, dout, inp, N, C, OC);
    cu_mlp_proj_backward_weight(&s->ctx, d_dw, d_dbias, d_dout, d_inp, N, C, OC);
    cmp_add(s, &c, "dw", d_dw, dw, nw);
    cmp_add(s, &c, "dbias", d_dbias, dbias, OC);
    st_report(s, wgt, bf16, &c);
}

/* The fc product's backward on the hidden activation's gradient in the backend's form (the CPU's
 * fp32 values converted by cu_mlp_dhidden_from_fp32), whole and its weight half; under the bf16
 * handoff also bitwise against cu_matmul_backward on the fp32 values (the kept form is what that
 * call's own rounding pass makes). dims: the gradient (N,OC), the fc input (N,C). */
static void mlp_fc_cases(st_t *s, int bf16, int N, int C, int OC, const char *whole, const char *wgt)
{
    const size_t nin = (size_t)N * C, nw = (size_t)OC * C, nd = (size_t)N * OC;
    float *dh = st_rand(s, nd, -1, 1), *inp = st_rand(s, nin, -1, 1), *w = st_rand(s, nw, -1, 1);
    float *dinp = st_host(s, nin), *dw = st_rand(s, nw, -1, 1), *dbias = st_rand(s, OC, -1, 1);
    float *d_dh32 = st_dev(s, dh, nd), *d_dh = st_dev_nan(s, nd), *d_inp = st_dev(s, inp, nin), *d_w = st_dev(s, w, nw);
    float *d_dinp = st_dev_nan(s, nin), *d_dw = st_dev(s, dw, nw), *d_dbias = st_dev(s, dbias, OC);
    float *d_dinp2 = st_dev_nan(s, nin), *d_dw2 = st_dev(s, dw, nw), *d_dbias2 = st_dev(s, dbias, OC);
    cu_mlp_dhidden_from_fp32(&s->ctx, d_dh, d_dh32, N, OC);
    cmp_t c = {0, 0};
    mlp_fc_backward(dinp, dw, dbias, dh, inp, w, N, C, OC);
    cu_mlp_fc_backward(&s->ctx, d_dinp, d_dw, d_dbias, d_dh, d_inp, d_w, N, C, OC);
    cmp_add(s, &c, "dinp", d_dinp, dinp, nin);
    cmp_add(s, &c, "dw", d_dw, dw, nw);
    cmp_add(s, &c, "dbias", d_dbias, dbias, OC);
    st_report(s, whole, bf16, &c);
    if (bf16 == 1 && cu_dhidden_kept(&s->ctx, N, OC)) {
        cu_matmul_backward(&s->ctx, d_dinp2, d_dw2, d_dbias2, d_dh32, d_inp, d_w, N, C, OC);
        char name[64];
        snprintf(name, sizeof name, "mlp_fc_backward[kept-bits,N=%d,OC=%d]", N, OC);
        st_verdict(s, name,
                   st_same_bits(s, d_dinp, d_dinp2, nin) && st_same_bits(s, d_dw, d_dw2, nw) &&
                       st_same_bits(s, d_dbias, d_dbias2, (size_t)OC),
                   "on the kept gradient bitwise as matmul_backward on its fp32 values");
    }
    c = (cmp_t){0, 0};
    mlp_fc_backward_weight(dw, dbias, dh, inp, N, C, OC);
    cu_mlp_fc_backward_weight(&s->ctx, d_dw, d_dbias, d_dh, d_inp, N, C, OC);
    cmp_add(s, &c, "dw", d_dw, dw, nw);
    cmp_add(s, &c, "dbias", d_dbias, dbias, OC);
    st_report(s, wgt, bf16, &c);
}

/* Every precision; bf16 with our rounding under both handoffs (the kept hidden activation, then
 * fp32's), whatever MP_BF16_HANDOFF chose for the rest. */
static void t_mlp_proj(st_t *s, int bf16)
{
    const int chosen = s->ctx.handoff;
    for (int h = 0; h < (bf16 == 1 ? 2 : 1); h++) {
        s->ctx.handoff = bf16 == 1 ? (h ? CU_HANDOFF_FP32 : CU_HANDOFF_BF16) : chosen;
        mlp_proj_cases(s, bf16, SN, 4 * SC, SC, "mlp_proj_forward", "mlp_proj_backward_weight");
        /* odd widths: hidden rows off 16 bytes, the pass path's scalar init */
        mlp_proj_cases(s, bf16, 31, 81, 47, "mlp_proj_forward(odd)", "mlp_proj_backward_weight(odd)");
        mlp_fc_cases(s, bf16, 203, SC, 4 * SC, "mlp_fc_backward", "mlp_fc_backward_weight");
        /* odd widths: the scalar kernels; 130 rows: a partial last 64-row chunk */
        mlp_fc_cases(s, bf16, 130, 47, 81, "mlp_fc_backward(odd)", "mlp_fc_backward_weight(odd)");
    }
    s->ctx.handoff = chosen;
}

/* bf16 with our rounding under both handoffs, set here whatever MP_BF16_HANDOFF chose for the rest:
 * bf16 (the products hand pre and dout · w to the element-wise kernels in bf16; the plain names),
 * then fp32 (the lines marked [fp32-handoff]). */
static void t_matmul_gelu(st_t *s, int bf16)
{
    if (bf16 != 1) {
        matmul_gelu_shapes(s, bf16);
        return;
    }
    const int chosen = s->ctx.handoff;
    s->ctx.handoff = CU_HANDOFF_BF16;
    matmul_gelu_shapes(s, bf16);
    s->ctx.handoff = CU_HANDOFF_FP32;
    matmul_gelu_shapes(s, bf16);
    s->ctx.handoff = chosen;
}

/* One vocabulary size V: odd sizes run the scalar kernels, multiples of 4 the float4 ones. */
static void xent_at(st_t *s, int bf16, int V, const char *fwd, const char *bwd)
{
    const size_t n = (size_t)SN * V;
    int *tgt = st_tokens(s, SN, V), *d_tgt = st_dev_int(s, tgt, SN);
    float *logits = st_rand(s, n, -4, 4), *losses = st_host(s, SN);
    float *d_probs = st_dev(s, logits, n), *d_losses = st_dev_nan(s, SN);
    cmp_t c = {0, 0};
    crossentropy_forward(losses, logits, tgt, SN, V); /* logits now hold the probabilities */
    cu_crossentropy_forward(&s->ctx, d_losses, d_probs, d_tgt, SN, V);
    cmp_add(s, &c, "losses", d_losses, losses, SN);
    cmp_add(s, &c, "probs", d_probs, logits, n);
    st_report(s, fwd, bf16, &c);

    float *dlogits = st_host(s, n), *d_probs_c = st_dev(s, logits, n), *d_dlogits = st_dev_nan(s, n);
    c = (cmp_t){0, 0};
    crossentropy_backward(dlogits, logits, tgt, 1.0f / SN, SN, V, 0);
    cu_crossentropy_backward(&s->ctx, d_dlogits, d_probs_c, d_tgt, 1.0f / SN, SN, V, 0);
    cmp_add(s, &c, "dlogits", d_dlogits, dlogits, n);
    st_report(s, bwd, bf16, &c);
}

static void t_crossentropy(st_t *s, int bf16)
{
    xent_at(s, bf16, SV, "crossentropy_forward", "crossentropy_backward");
    /* wide rows: several unrolled rounds of the block per row and a remainder */
    xent_at(s, bf16, 9004, "crossentropy_forward (float4)", "crossentropy_backward (float4)");
}

/* The head at one vocabulary size under one handoff: losses, then dinp and dw from the backward,
 * then dw accumulated a second time by the weight half alone. The state between them is each side's
 * own form (fp32 probabilities on the CPU, bf16 logits under the bf16 handoff), so only the outputs are
 * compared. dw starts at 0 so that its error is not hidden under random values; dloss 1 keeps the
 * gradients the size of the probabilities. */
static void head_at(st_t *s, int bf16, int V, int handoff, const char *fwd, const char *bwd, const char *wgt)
{
    const size_t nin = (size_t)SN * SC, nw = (size_t)V * SC, n = (size_t)SN * V;
    const int keep = s->ctx.handoff; /* the environment's choice, restored at the end */
    s->ctx.handoff = handoff;
    int *tgt = st_tokens(s, SN, V), *d_tgt = st_dev_int(s, tgt, SN);
    float *inp = st_rand(s, nin, -1, 1), *w = st_rand(s, nw, -1, 1);
    float *d_inp = st_dev(s, inp, nin), *d_w = st_dev(s, w, nw);
    float *losses = st_host(s, SN), *store = st_host(s, n), *d_losses = st_dev_nan(s, SN), *d_store = st_dev_nan(s, n);
    cmp_t c = {0, 0};
    head_forward(losses, store, inp, w, tgt, SN, SC, V);
    cu_head_forward(&s->ctx, d_losses, d_store, d_inp, d_w, d_tgt, SN, SC, V);
    cmp_add(s, &c, "losses", d_losses, losses, SN);
    st_report(s, fwd, bf16, &c);

    float *dinp = st_host(s, nin), *dw = st_host(s, nw), *d_dinp = st_dev_nan(s, nin), *d_dw = st_dev(s, dw, nw);
    c = (cmp_t){0, 0};
    head_backward(dinp, dw, store, inp, w, tgt, 1.0f, SN, SC, V);
    cu_head_backward(&s->ctx, d_dinp, d_dw, d_store, d_inp, d_w, d_tgt, 1.0f, SN, SC, V);
    cmp_add(s, &c, "dinp", d_dinp, dinp, nin);
    cmp_add(s, &c, "dw", d_dw, dw, nw);
    st_report(s, bwd, bf16, &c);

    c = (cmp_t){0, 0};
    head_backward_weight(dw, store, inp, SN, SC, V);
    cu_head_backward_weight(&s->ctx, d_dw, d_store, d_inp, SN, SC, V);
    cmp_add(s, &c, "dw", d_dw, dw, nw);
    st_report(s, wgt, bf16, &c);
    s->ctx.handoff = keep;
}

static void t_head(st_t *s, int bf16)
{
    /* V = 67: rows off 16 bytes (the scalar bf16 kernels); 9008: 8-wide loads, several unrolled rounds */
    head_at(s, bf16, SV, CU_HANDOFF_BF16, "head_forward", "head_backward", "head_backward_weight");
    head_at(s, bf16, 9008, CU_HANDOFF_BF16, "head_forward(V=9008)", "head_backward(V=9008)",
            "head_backward_weight(V=9008)");
    if (bf16 == 1) /* the fp32 handoff: the composition of the kernels above, in bf16 products */
        head_at(s, bf16, 9008, CU_HANDOFF_FP32, "head_forward(V=9008)", "head_backward(V=9008)",
                "head_backward_weight(V=9008)");
}

/* The vocab-parallel steps on one rank's slice: vocabulary [20, 60), of which 35 columns are real. */
static void t_xent_parallel(st_t *s, int bf16)
{
    enum { VL = 40, VALID = 35, V0 = 20 };
    const size_t n = (size_t)SN * VL;
    int *tgt = st_tokens(s, SN, SV), *d_tgt = st_dev_int(s, tgt, SN);
    float *logits = st_rand(s, n, -4, 4), *d_logits = st_dev(s, logits, n);
    float *max = st_host(s, SN), *tl = st_host(s, SN), *d_max = st_dev_nan(s, SN), *d_tl = st_dev_nan(s, SN);
    cmp_t c = {0, 0};
    xent_local_max(max, tl, logits, tgt, SN, VL, V0, VALID);
    cu_xent_local_max(&s->ctx, d_max, d_tl, d_logits, d_tgt, SN, VL, V0, VALID);
    cmp_add(s, &c, "max", d_max, max, SN);
    cmp_add(s, &c, "tlogit", d_tl, tl, SN);
    st_report(s, "xent_local_max", bf16, &c);

    float *sum = st_host(s, SN), *d_sum = st_dev_nan(s, SN), *d_max_c = st_dev(s, max, SN);
    c = (cmp_t){0, 0};
    xent_local_expsum(sum, logits, max, SN, VL, VALID);
    cu_xent_local_expsum(&s->ctx, d_sum, d_logits, d_max_c, SN, VL, VALID);
    cmp_add(s, &c, "sum", d_sum, sum, SN);
    cmp_add(s, &c, "exp", d_logits, logits, n);
    st_report(s, "xent_local_expsum", bf16, &c);

    float *losses = st_host(s, SN), *d_losses = st_dev_nan(s, SN);
    float *d_exp = st_dev(s, logits, n), *d_sum_c = st_dev(s, sum, SN), *d_tl_c = st_dev(s, tl, SN);
    c = (cmp_t){0, 0};
    xent_finish(losses, logits, max, sum, tl, SN, VL);
    cu_xent_finish(&s->ctx, d_losses, d_exp, d_max_c, d_sum_c, d_tl_c, SN, VL);
    cmp_add(s, &c, "losses", d_losses, losses, SN);
    cmp_add(s, &c, "probs", d_exp, logits, n);
    st_report(s, "xent_finish", bf16, &c);
}

/* adamw_each over NT tensors of odd sizes (some empty, one of many tiles) with gaps between them, so
 * tensors start on every 16-byte phase: bitwise the per-tensor cu_adamw_update (gaps untouched), and
 * near the CPU's adamw_each. gpad 1 shifts grad's buffer off the others' phase (the scalar path). */
static void adamw_each_at(st_t *s, int bf16, size_t gpad, const char *name)
{
    enum { NT = 150 };
    size_t off[NT], len[NT], total = 0;
    float wd[NT];
    for (int i = 0; i < NT; i++) {
        total += (size_t)(i % 5); /* the gap before tensor i */
        len[i] = i % 11 == 5 ? 0 : i == 77 ? 100003 : (size_t)(i * i * 37 + i * 7) % 9000 + (size_t)(i % 3);
        off[i] = total, wd[i] = i % 2 ? 0.1f : 0.0f;
        total += len[i];
    }
    total += 3;
    float *p = st_rand(s, total, -1, 1), *g = st_rand(s, total, -1, 1), *m = st_rand(s, total, -0.1f, 0.1f);
    float *v = st_rand(s, total, 0.0f, 0.01f);
    float *d_p = st_dev(s, p, total), *d_g = st_dev_at(s, g, total, gpad), *d_m = st_dev(s, m, total);
    float *d_v = st_dev(s, v, total);
    float *d_p1 = st_dev(s, p, total), *d_m1 = st_dev(s, m, total), *d_v1 = st_dev(s, v, total);
    cu_adamw_each(&s->ctx, d_p, d_g, d_m, d_v, off, len, wd, NT, 0.1f, 0.9f, 0.95f, 1e-8f, 3, 0.7f);
    for (int i = 0; i < NT; i++)
        cu_adamw_update(&s->ctx, d_p1 + off[i], d_g + off[i], d_m1 + off[i], d_v1 + off[i], len[i], 0.1f, 0.9f,
                        0.95f, 1e-8f, wd[i], 3, 0.7f);
    const int same = st_same_bits(s, d_p, d_p1, total) && st_same_bits(s, d_m, d_m1, total) &&
                     st_same_bits(s, d_v, d_v1, total);
    char label[64];
    snprintf(label, sizeof label, "%s_bits", name);
    st_verdict(s, label, same, "param, m, v: the bits of cu_adamw_update per tensor");
    cmp_t c = {0, 0};
    adamw_each(p, g, m, v, off, len, wd, NT, 0.1f, 0.9f, 0.95f, 1e-8f, 3, 0.7f);
    cmp_add(s, &c, "param", d_p, p, total);
    cmp_add(s, &c, "m", d_m, m, total);
    cmp_add(s, &c, "v", d_v, v, total);
    st_report(s, name, bf16, &c);
}

static void t_optim(st_t *s, int bf16)
{
    const size_t n = 1000;
    /* lr 0.1: updates large enough that comparing param itself checks the update. */
    float *p = st_rand(s, n, -1, 1), *g = st_rand(s, n, -1, 1), *m = st_rand(s, n, -0.1f, 0.1f);
    float *v = st_rand(s, n, 0.0f, 0.01f);
    float *d_p = st_dev(s, p, n), *d_g = st_dev(s, g, n), *d_m = st_dev(s, m, n), *d_v = st_dev(s, v, n);
    cmp_t c = {0, 0};
    adamw_update(p, g, m, v, n, 0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.7f);
    cu_adamw_update(&s->ctx, d_p, d_g, d_m, d_v, n, 0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.7f);
    cmp_add(s, &c, "param", d_p, p, n);
    cmp_add(s, &c, "m", d_m, m, n);
    cmp_add(s, &c, "v", d_v, v, n);
    st_report(s, "adamw_update", bf16, &c);
    adamw_each_at(s, bf16, 0, "adamw_each");
    adamw_each_at(s, bf16, 1, "adamw_each(scalar)");

    const size_t nsq = 3 * 4096 + 123; /* several chunks and a partial one */
    float *x = st_rand(s, nsq, -1, 1), *d_x = st_dev(s, x, nsq);
    const double cpu = sumsq(x, nsq), gpu = cu_sumsq(&s->ctx, d_x, nsq);
    c = (cmp_t){fabs(gpu - cpu) / cpu, isnan(gpu) ? 1u : 0u};
    if (s->verbose) printf("       cpu %.17g gpu %.17g\n", cpu, gpu);
    st_report(s, "sumsq", bf16, &c);

    /* many tensors at once (more than one batch of the kernel, some empty): each the bits of
     * cu_sumsq alone, and near the CPU's */
    enum { NT = 150 };
    const float *xs[NT];
    size_t ns[NT];
    double each[NT];
    for (int i = 0; i < NT; i++) ns[i] = i % 7 == 3 ? 0 : (size_t)(i * 977) % (nsq - 50), xs[i] = d_x + (i * 13) % 50;
    cu_sumsq_each(&s->ctx, each, xs, ns, NT);
    c = (cmp_t){0, 0};
    for (int i = 0; i < NT; i++) {
        const double one = cu_sumsq(&s->ctx, xs[i], ns[i]), ref = sumsq(x + (i * 13) % 50, ns[i]);
        const double rel = ref > 0 ? fabs(each[i] - ref) / ref : fabs(each[i]);
        if (memcmp(&one, &each[i], sizeof one) != 0) {
            printf("       sumsq_each: tensor %d differs from cu_sumsq alone (%.17g, %.17g)\n", i, each[i], one);
            c.rel = 1.0;
        }
        c.rel = rel > c.rel ? rel : c.rel;
    }
    st_report(s, "sumsq_each", bf16, &c);

    float *a = st_rand(s, n, -1, 1), *out = st_host(s, n), *d_a = st_dev(s, a, n), *d_out = st_dev_nan(s, n);
    c = (cmp_t){0, 0};
    vec_add(out, a, g, n);
    cu_vec_add(&s->ctx, d_out, d_a, d_g, n);
    cmp_add(s, &c, "out", d_out, out, n);
    st_report(s, "vec_add", bf16, &c);
}

/* NCCL through the grid's helpers on a one-rank communicator (MPI_COMM_SELF): all-reduce, all-gather
 * and reduce-scatter of one rank are copies, so each output must equal its input (to the fp32
 * tolerance, which a copy meets with error 0); send and
 * receive need a peer and are left to a multi-rank run (docs/GPU.md). */
static void t_nccl(st_t *s, int bf16)
{
    const size_t n = 1000;
    float *x = st_rand(s, n, -1, 1);
    float *d_x = st_dev(s, x, n), *d_sum = st_dev_nan(s, n), *d_gat = st_dev_nan(s, n), *d_scat = st_dev_nan(s, n);
    ncclComm_t comm;
    mp_nccl_comm_create(MPI_COMM_SELF, &comm);
    mp_nccl_allreduce_f32(d_x, d_sum, n, comm, s->ctx.compute);
    mp_nccl_allgather_f32(d_x, d_gat, n, comm, s->ctx.compute);
    mp_nccl_reduce_scatter_f32(d_x, d_scat, n, comm, s->ctx.compute);
    cu_ctx_sync(&s->ctx);
    cmp_t c = {0, 0};
    cmp_add(s, &c, "allreduce", d_sum, x, n);
    cmp_add(s, &c, "allgather", d_gat, x, n);
    cmp_add(s, &c, "reducescat", d_scat, x, n);
    st_report(s, "nccl_one_rank", bf16, &c);
    mp_nccl_comm_destroy(comm);
}

/* "cuda" or "cuda:N": the device ordinal, or -1 if the string is neither. */
static int st_device_ordinal(const char *device)
{
    if (!strcmp(device, "cuda")) return 0;
    if (strncmp(device, "cuda:", 5) || !device[5]) return -1;
    char *end = NULL;
    const long d = strtol(device + 5, &end, 10);
    return *end || d < 0 || d > 1024 ? -1 : (int)d;
}

static int selftest_cuda(int ordinal, int verbose)
{
    st_t s;
    memset(&s, 0, sizeof s);
    s.verbose = verbose;
    if (cu_ctx_init(&s.ctx, ordinal, CU_FP32) != MP_OK) return 1;
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
    printf("mindpipe: selftest on CUDA device %d: %s (sm_%d%d)\n", ordinal, prop.name, prop.major, prop.minor);
    /* the versions in force, for bring-up reports: the libraries found at run time may differ
     * from those the build saw */
    int rt = 0, drv = 0, blas_major = 0, blas_minor = 0, blas_patch = 0, nccl = 0;
    CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    CUDA_CHECK(cudaDriverGetVersion(&drv));
    CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &blas_major));
    CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &blas_minor));
    CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &blas_patch));
    NCCL_CHECK(ncclGetVersion(&nccl));
    printf("mindpipe: versions: cuda_runtime %d.%d driver_cuda %d.%d cublas %d.%d.%d nccl %d.%d.%d sms %d memory_mib %zu\n",
           rt / 1000, rt % 1000 / 10, drv / 1000, drv % 1000 / 10, blas_major, blas_minor, blas_patch,
           nccl / 10000, nccl % 10000 / 100, nccl % 100, prop.multiProcessorCount, prop.totalGlobalMem >> 20);
    if (cu_arena_init(&s.arena, (size_t)64 << 20, (size_t)64 << 20) != MP_OK) {
        cu_ctx_destroy(&s.ctx);
        return 1;
    }
    st_run(&s, t_encoder, 0);
    st_run(&s, t_layernorm, 0);
    for (int bf16 = 0; bf16 <= 2; bf16++) {
        st_run(&s, t_matmul, bf16);
        st_run(&s, t_attention, bf16);
    }
    if (prop.major >= 8) st_run(&s, t_flash, 1); /* bf16 tensor cores */
    st_run(&s, t_bf16_bits, 1);
    st_run(&s, t_gelu, 0);
    st_run(&s, t_rmsnorm, 0);
    st_run(&s, t_rope, 0);
    st_run(&s, t_swiglu, 0);
    for (int bf16 = 0; bf16 <= 2; bf16++) st_run(&s, t_attention_gqa, bf16);
    st_run(&s, t_matmul_gelu, 0);
    st_run(&s, t_matmul_gelu, 1); /* bf16 adds the bias in the GELU kernel; both handoffs */
    for (int bf16 = 0; bf16 <= 2; bf16++) st_run(&s, t_mlp_proj, bf16);
    st_run(&s, t_crossentropy, 0);
    st_run(&s, t_head, 0);
    st_run(&s, t_head, 1); /* the bf16 handoff: logits kept in bf16 between forward and backward */
    st_run(&s, t_xent_parallel, 0);
    st_run(&s, t_optim, 0);
    st_run(&s, t_nccl, 0);
    printf("mindpipe: selftest: %d passed, %d failed\n", s.passed, s.failed);
    cu_arena_destroy(&s.arena);
    cu_ctx_destroy(&s.ctx);
    return s.failed == 0 ? 0 : 1;
}
#endif /* MP_HAVE_CUDA */

int selftest_run(const char *device, int verbose)
{
    if (!strcmp(device, "cpu")) {
        printf("mindpipe: selftest: the CPU kernels are tested by `make check` (validation/unit/test_kernels)\n");
        return 0;
    }
    if (strncmp(device, "cuda", 4)) {
        fprintf(stderr, "mindpipe: selftest: unknown device '%s' (cpu, cuda or cuda:N)\n", device);
        return 2;
    }
#ifdef MP_HAVE_CUDA
    const int ordinal = st_device_ordinal(device);
    if (ordinal < 0) {
        fprintf(stderr, "mindpipe: selftest: bad device '%s' (cuda or cuda:N)\n", device);
        return 2;
    }
    return selftest_cuda(ordinal, verbose);
#else
    (void)verbose;
    fprintf(stderr, "mindpipe: selftest: this build has no CUDA backend (configure --with-cuda)\n");
    return 2;
#endif
}
