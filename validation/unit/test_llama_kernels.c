/* The Llama family's CPU kernels (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention):
 * forward against a naive double reference (llama_ref.c), backward against that reference's
 * backward and against central differences of its forward (in double), the same bits with 1 and 2
 * threads, and the properties kernels.h promises. Sizes are odd and not multiples of a SIMD width. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "llama_ref.h"
#include "numcheck.h"
#include "tap.h"

/* Float against double: an elementwise forward rounds a few times per element; backwards and
 * attention sum rows of up to 1100 float products. */
#define TOL_FWD 2e-6
#define TOL_BWD 1e-5
#define FD_H 1e-5 /* in double: truncation ~h², rounding ~1e-16/h, both far below the tolerances */

/* ---- RMSNorm ---- */
typedef struct { double *x, *w, *R, *out, *rstd; int N, C; double eps; } rms_t;
static double rms_obj(void *p)
{
    rms_t *c = p;
    ref_rmsnorm_forward(c->out, c->rstd, c->x, c->w, c->N, c->C, c->eps);
    return nc_dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_rmsnorm(void)
{
    enum { RN = 21, RC = 13 };
    const float eps = 1e-6f;
    float *x = nc_rnd(RN * RC, 1, 1.5f), *w = nc_rnd(RC, 2, 1), *dy = nc_rnd(RN * RC, 3, 1);
    float *y = malloc(RN * RC * 4), *rstd = malloc(RN * 4), *dx = calloc(RN * RC, 4), *dw = calloc(RC, 4);
    rms_t c = {nc_dbl(x, RN * RC), nc_dbl(w, RC), nc_dbl(dy, RN * RC), malloc(RN * RC * 8), malloc(RN * 8), RN, RC, eps};
    rmsnorm_forward(y, rstd, x, w, RN, RC, eps);
    rms_obj(&c);
    const double ey = nc_max_rel(y, c.out, RN * RC), er = nc_max_rel(rstd, c.rstd, RN);
    tap_ok(ey < TOL_FWD && er < TOL_FWD, "rmsnorm forward 21x13 = double reference (out %.1e, rstd %.1e)", ey, er);
    rmsnorm_backward(dx, dw, dy, x, w, rstd, RN, RC);
    double *rdx = malloc(RN * RC * 8), *rdw = malloc(RC * 8), *fdx = malloc(RN * RC * 8), *fdw = malloc(RC * 8);
    ref_rmsnorm_backward(rdx, rdw, c.R, c.x, c.w, RN, RC, eps);
    const double e1 = nc_max_rel(dx, rdx, RN * RC), e2 = nc_max_rel(dw, rdw, RC);
    tap_ok(e1 < TOL_BWD && e2 < TOL_BWD, "rmsnorm backward = double reference backward (dinp %.1e, dw %.1e)", e1, e2);
    nc_fd_grad(fdx, rms_obj, &c, c.x, RN * RC, FD_H);
    nc_fd_grad(fdw, rms_obj, &c, c.w, RC, FD_H);
    const double f1 = nc_max_rel(dx, fdx, RN * RC), f2 = nc_max_rel(dw, fdw, RC);
    const double g1 = nc_max_rel_d(rdx, fdx, RN * RC), g2 = nc_max_rel_d(rdw, fdw, RC);
    tap_ok(f1 < TOL_BWD && f2 < TOL_BWD && g1 < 1e-8 && g2 < 1e-8,
           "rmsnorm backward vs central differences (kernel %.1e %.1e, reference %.1e %.1e)", f1, f2, g1, g2);
    free(x), free(w), free(dy), free(y), free(rstd), free(dx), free(dw);
    free(c.x), free(c.w), free(c.R), free(c.out), free(c.rstd), free(rdx), free(rdw), free(fdx), free(fdw);
}

/* Several row chunks and two channel tiles (C > 1024); dinp and dw accumulate onto what they held;
 * the same bits with 1 and 2 threads. */
static void test_rmsnorm_chunks(void)
{
    enum { RN = 37, RC = 1100 };
    const float eps = 1e-5f;
    float *x = nc_rnd(RN * RC, 4, 2), *w = nc_rnd(RC, 5, 1), *dy = nc_rnd(RN * RC, 6, 1);
    float *y[2], *rstd[2], *dx[2], *dw[2];
    for (int t = 0; t < 2; t++) {
        kernels_set_threads(t + 1);
        y[t] = malloc(RN * RC * 4), rstd[t] = malloc(RN * 4), dx[t] = nc_rnd(RN * RC, 7, 1), dw[t] = nc_rnd(RC, 8, 1);
        rmsnorm_forward(y[t], rstd[t], x, w, RN, RC, eps);
        rmsnorm_backward(dx[t], dw[t], dy, x, w, rstd[t], RN, RC);
    }
    kernels_set_threads(2);
    double *X = nc_dbl(x, RN * RC), *W = nc_dbl(w, RC), *DY = nc_dbl(dy, RN * RC);
    double *ry = malloc(RN * RC * 8), *rr = malloc(RN * 8), *rdx = malloc(RN * RC * 8), *rdw = malloc(RC * 8);
    float *dx0 = nc_rnd(RN * RC, 7, 1), *dw0 = nc_rnd(RC, 8, 1);
    ref_rmsnorm_forward(ry, rr, X, W, RN, RC, eps);
    ref_rmsnorm_backward(rdx, rdw, DY, X, W, RN, RC, eps);
    for (int i = 0; i < RN * RC; i++) rdx[i] += dx0[i];
    for (int i = 0; i < RC; i++) rdw[i] += dw0[i];
    const double ey = nc_max_rel(y[1], ry, RN * RC), ex = nc_max_rel(dx[1], rdx, RN * RC), ew = nc_max_rel(dw[1], rdw, RC);
    tap_ok(ey < TOL_FWD && ex < TOL_BWD && ew < TOL_BWD,
           "rmsnorm 37x1100 (chunks, two tiles): forward, and backward += onto dinp and dw = double reference "
           "(%.1e %.1e %.1e)", ey, ex, ew);
    tap_ok(nc_same(y[0], y[1], RN * RC) && nc_same(rstd[0], rstd[1], RN) && nc_same(dx[0], dx[1], RN * RC) &&
           nc_same(dw[0], dw[1], RC), "rmsnorm forward and backward: identical bits with 1 and 2 threads");
    for (int t = 0; t < 2; t++) free(y[t]), free(rstd[t]), free(dx[t]), free(dw[t]);
    free(x), free(w), free(dy), free(X), free(W), free(DY), free(ry), free(rr), free(rdx), free(rdw), free(dx0), free(dw0);
}

/* ---- rotary embeddings ---- */
typedef struct { double *x, *R, *out; int pos0, B, T, NH, KVH, hs; double theta; } rope_t;
static double rope_obj(void *p)
{
    rope_t *c = p;
    ref_rope(c->out, c->x, c->pos0, c->B, c->T, c->NH, c->KVH, c->hs, c->theta, 1);
    return nc_dot(c->out, c->R, (size_t)c->B * c->T * (c->NH + 2 * c->KVH) * c->hs);
}

/* Largest relative change of a rotated pair's norm over the q and k heads. */
static double rope_norm_change(const float *x, const float *y, int N, int NH, int KVH, int hs)
{
    const int W = (NH + 2 * KVH) * hs, h2 = hs / 2;
    double worst = 0;
    for (int r = 0; r < N; r++)
        for (int h = 0; h < NH + KVH; h++)
            for (int i = 0; i < h2; i++) {
                const size_t o = (size_t)r * W + (size_t)h * hs + i;
                const double a = hypot(x[o], x[o + h2]), b = hypot(y[o], y[o + h2]);
                worst = fmax(worst, fabs(b - a) / fmax(a, 1e-30));
            }
    return worst;
}

static void test_rope(int NH, int KVH, int hs, float theta, int pos0)
{
    enum { B = 3, T = 7 };
    const int W = (NH + 2 * KVH) * hs;
    const size_t n = (size_t)B * T * W;
    float *cs = malloc((size_t)(pos0 + T) * hs * 4), *x = nc_rnd(n, 10 + hs, 1), *y = malloc(n * 4);
    float *R = nc_rnd(n, 11 + hs, 1), *dx = malloc(n * 4), *z = malloc(n * 4);
    rope_t c = {nc_dbl(x, n), nc_dbl(R, n), malloc(n * 8), pos0, B, T, NH, KVH, hs, theta};
    rope_table_init(cs, pos0 + T, hs, theta);
    memcpy(y, x, n * 4);
    rope_forward(y, cs, pos0, B, T, NH, KVH, hs);
    rope_obj(&c);
    int v_kept = 1;
    for (int r = 0; r < B * T; r++) v_kept &= nc_same(y + (size_t)r * W + (NH + KVH) * hs, x + (size_t)r * W + (NH + KVH) * hs, KVH * hs);
    const double ef = nc_max_rel(y, c.out, n), en = rope_norm_change(x, y, B * T, NH, KVH, hs);
    tap_ok(ef < TOL_FWD && v_kept, "rope NH=%d KVH=%d hs=%d theta=%g pos0=%d: forward = double reference (%.1e), "
           "v untouched", NH, KVH, hs, theta, pos0, ef);
    tap_ok(en < TOL_FWD, "rope NH=%d KVH=%d hs=%d: each pair's norm kept (%.1e)", NH, KVH, hs, en);
    /* the objective Σ rope(x)·R is linear: its gradient is rope_backward(R) */
    double *rdx = malloc(n * 8), *fdx = malloc(n * 8);
    memcpy(dx, R, n * 4);
    rope_backward(dx, cs, pos0, B, T, NH, KVH, hs);
    ref_rope(rdx, c.R, pos0, B, T, NH, KVH, hs, theta, -1);
    nc_fd_grad(fdx, rope_obj, &c, c.x, n, FD_H);
    const double e1 = nc_max_rel(dx, rdx, n), e2 = nc_max_rel(dx, fdx, n), e3 = nc_max_rel_d(rdx, fdx, n);
    tap_ok(e1 < TOL_FWD && e2 < TOL_FWD && e3 < 1e-8, "rope NH=%d KVH=%d hs=%d: backward = reference transpose (%.1e), "
           "= central differences (%.1e; reference %.1e)", NH, KVH, hs, e1, e2, e3);
    memcpy(z, y, n * 4);
    rope_backward(z, cs, pos0, B, T, NH, KVH, hs);
    double *X = nc_dbl(x, n);
    const double ei = nc_max_rel(z, X, n);
    tap_ok(ei < TOL_FWD, "rope NH=%d KVH=%d hs=%d: backward undoes forward (%.1e)", NH, KVH, hs, ei);
    /* positions pos0+3.. of the sequences alone, with the offset: the same rows, the same bits */
    enum { S = 3 };
    float *tail = malloc((size_t)B * (T - S) * W * 4);
    for (int b = 0; b < B; b++) memcpy(tail + (size_t)b * (T - S) * W, x + ((size_t)b * T + S) * W, (size_t)(T - S) * W * 4);
    rope_forward(tail, cs, pos0 + S, B, T - S, NH, KVH, hs);
    int sliced = 1;
    for (int b = 0; b < B; b++) sliced &= nc_same(tail + (size_t)b * (T - S) * W, y + ((size_t)b * T + S) * W, (size_t)(T - S) * W);
    tap_ok(sliced, "rope NH=%d KVH=%d hs=%d: positions %d.. with pos0 = the longer sequence's rows, bitwise", NH, KVH, hs,
           pos0 + S);
    kernels_set_threads(1);
    memcpy(z, x, n * 4);
    rope_forward(z, cs, pos0, B, T, NH, KVH, hs);
    float *d1 = malloc(n * 4);
    memcpy(d1, R, n * 4);
    rope_backward(d1, cs, pos0, B, T, NH, KVH, hs);
    kernels_set_threads(2);
    tap_ok(nc_same(z, y, n) && nc_same(d1, dx, n), "rope NH=%d KVH=%d hs=%d: identical bits with 1 and 2 threads", NH, KVH, hs);
    free(cs), free(x), free(y), free(R), free(dx), free(z), free(c.x), free(c.R), free(c.out);
    free(rdx), free(fdx), free(X), free(tail), free(d1);
}

/* ---- SwiGLU ---- */
typedef struct { double *x, *R, *out; int N, F; } sw_t;
static double sw_obj(void *p)
{
    sw_t *c = p;
    ref_swiglu_forward(c->out, c->x, c->N, c->F);
    return nc_dot(c->out, c->R, (size_t)c->N * c->F);
}

static void test_swiglu(void)
{
    enum { SN = 21, SF = 13 };
    float *x = nc_rnd(SN * 2 * SF, 20, 3), *dh = nc_rnd(SN * SF, 21, 1), *h[2], *dx[2];
    for (int t = 0; t < 2; t++) {
        kernels_set_threads(t + 1);
        h[t] = malloc(SN * SF * 4), dx[t] = malloc(SN * 2 * SF * 4);
        swiglu_forward(h[t], x, SN, SF);
        swiglu_backward(dx[t], dh, x, SN, SF);
    }
    kernels_set_threads(2);
    sw_t c = {nc_dbl(x, SN * 2 * SF), nc_dbl(dh, SN * SF), malloc(SN * SF * 8), SN, SF};
    double *rdx = malloc(SN * 2 * SF * 8), *fdx = malloc(SN * 2 * SF * 8);
    sw_obj(&c);
    const double ef = nc_max_rel(h[1], c.out, SN * SF);
    tap_ok(ef < TOL_FWD, "swiglu forward 21x(2x13) = silu(gate)·up in double (%.1e)", ef);
    ref_swiglu_backward(rdx, c.R, c.x, SN, SF);
    nc_fd_grad(fdx, sw_obj, &c, c.x, SN * 2 * SF, FD_H);
    const double e1 = nc_max_rel(dx[1], rdx, SN * 2 * SF), e2 = nc_max_rel(dx[1], fdx, SN * 2 * SF),
                 e3 = nc_max_rel_d(rdx, fdx, SN * 2 * SF);
    tap_ok(e1 < TOL_FWD && e2 < TOL_FWD && e3 < 1e-8, "swiglu backward = double reference (%.1e), = central "
           "differences (%.1e; reference %.1e)", e1, e2, e3);
    tap_ok(nc_same(h[0], h[1], SN * SF) && nc_same(dx[0], dx[1], SN * 2 * SF),
           "swiglu forward and backward: identical bits with 1 and 2 threads");
    for (int t = 0; t < 2; t++) free(h[t]), free(dx[t]);
    free(x), free(dh), free(c.x), free(c.R), free(c.out), free(rdx), free(fdx);
}

/* Gates far out on both sides (mp_expf clamps its argument): finite, and the reference's values. */
static void test_swiglu_extremes(void)
{
    enum { EF = 9 };
    const float g[EF] = {-300, -100, -88, -40, -17, 17, 40, 100, 300};
    float x[2 * EF], h[EF], dh[EF], dx[2 * EF];
    double X[2 * EF], DH[EF], rh[EF], rdx[2 * EF];
    for (int f = 0; f < EF; f++) x[f] = g[f], x[EF + f] = 0.75f, dh[f] = 1.25f, DH[f] = dh[f];
    for (int f = 0; f < 2 * EF; f++) X[f] = x[f];
    swiglu_forward(h, x, 1, EF);
    swiglu_backward(dx, dh, x, 1, EF);
    ref_swiglu_forward(rh, X, 1, EF);
    ref_swiglu_backward(rdx, DH, X, 1, EF);
    /* far below zero the true silu is below float's range (−300·e^−300) while σ from the clamped
     * exponential stays a tiny number: there an absolute 1e-30 is zero for any training */
    int good = 1;
    double worst = 0;
    for (int f = 0; f < 2 * EF; f++) {
        const double ek = f < EF ? fabs(h[f] - rh[f]) : 0, ed = fabs(dx[f] - rdx[f]);
        good &= f < EF ? isfinite(h[f]) && ek <= TOL_FWD * fabs(rh[f]) + 1e-30 : 1;
        good &= isfinite(dx[f]) && ed <= TOL_FWD * fabs(rdx[f]) + 1e-30;
        if (f < EF && fabs(rh[f]) > 1e-30) worst = fmax(worst, ek / fabs(rh[f]));
        if (fabs(rdx[f]) > 1e-30) worst = fmax(worst, ed / fabs(rdx[f]));
    }
    tap_ok(good, "swiglu at gates ±17..±300: finite, = reference (%.1e relative where it is above 1e-30)", worst);
}

/* ---- grouped-query attention ---- */
typedef struct { double *qkv, *R, *out; int B, T, C, NH, KVH; } gqa_t;
static double gqa_obj(void *p)
{
    gqa_t *c = p;
    ref_gqa_forward(c->out, NULL, c->qkv, c->B, c->T, c->C, c->NH, c->KVH);
    return nc_dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

/* KVH = NH: attention_forward's packed [q | k | v] layout, and its bits. */
static void test_gqa_mha_bits(int B, int T, int NH, int hs)
{
    const int C = NH * hs;
    const size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = nc_rnd(nq, 30 + T, 1), *dout = nc_rnd(no, 31 + T, 1);
    /* att's entries past a row's block of 64 are never written (attention_cpu.c's contract too): zeroed here */
    float *o1 = malloc(no * 4), *o2 = malloc(no * 4), *a1 = calloc(na, 4), *a2 = calloc(na, 4);
    float *d1 = malloc(nq * 4), *d2 = malloc(nq * 4), *s1 = malloc(na * 4), *s2 = malloc(na * 4);
    attention_forward(o1, a1, qkv, B, T, C, NH);
    attention_gqa_forward(o2, a2, qkv, B, T, C, NH, NH);
    attention_backward(d1, s1, dout, qkv, a1, B, T, C, NH);
    attention_gqa_backward(d2, s2, dout, qkv, a2, B, T, C, NH, NH);
    tap_ok(nc_same(o1, o2, no) && nc_same(a1, a2, na) && nc_same(d1, d2, nq),
           "gqa B=%d T=%d NH=KVH=%d hs=%d: out, att, dqkv = attention_forward/_backward's bits", B, T, NH, hs);
    double *Q = nc_dbl(qkv, nq), *DO = nc_dbl(dout, no), *ro = malloc(no * 8), *rd = malloc(nq * 8);
    ref_gqa_forward(ro, NULL, Q, B, T, C, NH, NH);
    ref_gqa_backward(rd, DO, Q, B, T, C, NH, NH);
    const double e1 = nc_max_rel(o1, ro, no), e2 = nc_max_rel(d1, rd, nq);
    tap_ok(e1 < TOL_BWD && e2 < TOL_BWD, "gqa T=%d: attention_forward/_backward = the GQA reference at KVH = NH, so "
           "their [q | k | v] is the documented layout (%.1e %.1e)", T, e1, e2);
    free(qkv), free(dout), free(o1), free(o2), free(a1), free(a2), free(d1), free(d2), free(s1), free(s2);
    free(Q), free(DO), free(ro), free(rd);
}

/* KVH < NH against the reference (out, att, dqkv) and, when fd, central differences; the same bits
 * with 1 and 2 threads. */
static void test_gqa(int B, int T, int NH, int KVH, int hs, int fd)
{
    const int C = NH * hs, W = C + 2 * KVH * hs;
    const size_t nq = (size_t)B * T * W, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = nc_rnd(nq, 40 + KVH, 1), *dout = nc_rnd(no, 41 + KVH, 1), *o[2], *a[2], *d[2];
    float *scratch = malloc(na * 4);
    for (int t = 0; t < 2; t++) {
        kernels_set_threads(t + 1);
        o[t] = malloc(no * 4), a[t] = calloc(na, 4), d[t] = malloc(nq * 4); /* calloc: see above */
        attention_gqa_forward(o[t], a[t], qkv, B, T, C, NH, KVH);
        attention_gqa_backward(d[t], scratch, dout, qkv, a[t], B, T, C, NH, KVH);
    }
    kernels_set_threads(2);
    gqa_t c = {nc_dbl(qkv, nq), nc_dbl(dout, no), malloc(no * 8), B, T, C, NH, KVH};
    double *ra = malloc(na * 8), *rd = malloc(nq * 8), *fdd = malloc(nq * 8);
    ref_gqa_forward(c.out, ra, c.qkv, B, T, C, NH, KVH);
    ref_gqa_backward(rd, c.R, c.qkv, B, T, C, NH, KVH);
    const double eo = nc_max_rel(o[1], c.out, no), ea = nc_max_rel(a[1], ra, na), ed = nc_max_rel(d[1], rd, nq);
    tap_ok(eo < TOL_BWD && ea < TOL_BWD, "gqa B=%d T=%d NH=%d KVH=%d hs=%d: forward = double reference (out %.1e, "
           "att %.1e)", B, T, NH, KVH, hs, eo, ea);
    tap_ok(ed < TOL_BWD, "gqa NH=%d KVH=%d T=%d: backward = double reference backward (%.1e)", NH, KVH, T, ed);
    if (fd) {
        nc_fd_grad(fdd, gqa_obj, &c, c.qkv, nq, FD_H);
        const double e1 = nc_max_rel(d[1], fdd, nq), e2 = nc_max_rel_d(rd, fdd, nq);
        tap_ok(e1 < TOL_BWD && e2 < 1e-8, "gqa NH=%d KVH=%d T=%d: backward vs central differences (kernel %.1e, "
               "reference %.1e)", NH, KVH, T, e1, e2);
    }
    tap_ok(nc_same(o[0], o[1], no) && nc_same(a[0], a[1], na) && nc_same(d[0], d[1], nq),
           "gqa NH=%d KVH=%d T=%d: identical bits with 1 and 2 threads", NH, KVH, T);
    for (int t = 0; t < 2; t++) free(o[t]), free(a[t]), free(d[t]);
    free(qkv), free(dout), free(scratch), free(c.qkv), free(c.R), free(c.out), free(ra), free(rd), free(fdd);
}

int main(void)
{
    kernels_set_threads(2);
    test_rmsnorm();
    test_rmsnorm_chunks();
    test_rope(6, 2, 6, 10000.0f, 0);  /* hs/2 = 3 */
    test_rope(4, 4, 10, 500000.0f, 5); /* Llama 3's theta, an offset */
    test_rope(3, 1, 2, 10000.0f, 1);   /* one pair per head */
    test_swiglu();
    test_swiglu_extremes();
    test_gqa_mha_bits(2, 7, 6, 5);
    test_gqa_mha_bits(1, 150, 4, 8); /* several row blocks of 64 */
    test_gqa(3, 7, 6, 3, 5, 1);      /* KVH = NH/2 */
    test_gqa(3, 7, 6, 1, 5, 1);      /* multi-query */
    test_gqa(2, 150, 4, 2, 8, 0);    /* several row blocks */
    test_gqa(2, 150, 4, 1, 8, 0);
    return tap_done();
}
