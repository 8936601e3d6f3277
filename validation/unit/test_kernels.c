/* Every CPU kernel: forward against a naive double-precision reference, backward against central
 * finite differences of the float forward, and determinism of the reductions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "math_adamw.h"
#include "math_exp.h"
#include "math_gelu.h"
#include "rng.h"
#include "tap.h"

enum { B = 2, T = 5, C = 8, NH = 2, V = 11, OC = 6, N = B * T };

static float *rnd(size_t n, uint64_t key, float scale)
{
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(key, 77, i);
    return x;
}

static double max_rel(const float *a, const double *b, size_t n)
{
    double num = 0, den = 1e-12;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs(a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return num / den;
}

/* A kernel under test seen as f(x) -> scalar objective Σ out·R; the harness perturbs x. */
typedef double (*objective_fn)(void *ctx);

/* max |analytic − fd| / max |fd| over all elements of x (central differences, step h). */
static double fd_check(objective_fn f, void *ctx, float *x, const float *grad, size_t n, float h)
{
    double err = 0, scale = 1e-12;
    for (size_t i = 0; i < n; i++) {
        float save = x[i];
        x[i] = save + h;
        double fp = f(ctx);
        x[i] = save - h;
        double fm = f(ctx);
        x[i] = save;
        double fd = (fp - fm) / (2.0 * h);
        err = fmax(err, fabs(fd - grad[i]));
        scale = fmax(scale, fabs(fd));
    }
    return err / scale;
}

static double dot(const float *a, const float *r, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * r[i];
    return s;
}

/* ---- matmul ---- */
typedef struct { float *inp, *w, *bias, *out, *R; } mm_t;
static double mm_obj(void *p)
{
    mm_t *c = p;
    matmul_forward(c->out, c->inp, c->w, c->bias, N, C, OC);
    return dot(c->out, c->R, (size_t)N * OC);
}
static void test_matmul(void)
{
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        mm_t c = {rnd(N * C, 1, 1), rnd(OC * C, 2, 1), with_bias ? rnd(OC, 3, 1) : NULL, malloc(N * OC * 4),
                  rnd(N * OC, 4, 1)};
        double *ref = calloc(N * OC, sizeof(double));
        for (int i = 0; i < N; i++)
            for (int o = 0; o < OC; o++) {
                double s = with_bias ? c.bias[o] : 0;
                for (int k = 0; k < C; k++) s += (double)c.inp[i * C + k] * c.w[o * C + k];
                ref[i * OC + o] = s;
            }
        mm_obj(&c);
        tap_ok(max_rel(c.out, ref, N * OC) < 1e-5, "matmul forward%s = naive reference", with_bias ? " with bias" : "");
        float *dinp = calloc(N * C, 4), *dw = calloc(OC * C, 4), *db = calloc(OC, 4);
        matmul_backward(dinp, dw, with_bias ? db : NULL, c.R, c.inp, c.w, N, C, OC);
        double e1 = fd_check(mm_obj, &c, c.inp, dinp, N * C, 1e-2f), e2 = fd_check(mm_obj, &c, c.w, dw, OC * C, 1e-2f);
        double e3 = with_bias ? fd_check(mm_obj, &c, c.bias, db, OC, 1e-2f) : 0;
        tap_ok(e1 < 1e-3 && e2 < 1e-3 && e3 < 1e-3, "matmul backward%s vs finite differences (%.1e %.1e %.1e)",
               with_bias ? " with bias" : "", e1, e2, e3);
        /* dw and dbias accumulate: a second call doubles them */
        float *dw2 = malloc(OC * C * 4);
        memcpy(dw2, dw, OC * C * 4);
        matmul_backward(NULL, dw, NULL, c.R, c.inp, c.w, N, C, OC);
        int doubled = 1;
        for (int i = 0; i < OC * C; i++) doubled &= fabsf(dw[i] - 2 * dw2[i]) <= 1e-5f * (1 + fabsf(dw2[i]));
        if (!with_bias) tap_ok(doubled, "matmul backward accumulates dw (+=)");
        free(dw2), free(dinp), free(dw), free(db), free(ref);
        free(c.inp), free(c.w), free(c.bias), free(c.out), free(c.R);
    }
}

/* ---- layernorm ---- */
typedef struct { float *inp, *w, *b, *out, *mean, *rstd, *R; } ln_t;
static double ln_obj(void *p)
{
    ln_t *c = p;
    layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, N, C);
    return dot(c->out, c->R, N * C);
}
static void test_layernorm(void)
{
    ln_t c = {rnd(N * C, 5, 2), rnd(C, 6, 1), rnd(C, 7, 1), malloc(N * C * 4), malloc(N * 4), malloc(N * 4),
              rnd(N * C, 8, 1)};
    double *ref = malloc(N * C * sizeof(double));
    for (int i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int k = 0; k < C; k++) m += c.inp[i * C + k];
        m /= C;
        for (int k = 0; k < C; k++) v += (c.inp[i * C + k] - m) * (c.inp[i * C + k] - m);
        v /= C;
        for (int k = 0; k < C; k++) ref[i * C + k] = (c.inp[i * C + k] - m) / sqrt(v + 1e-5) * c.w[k] + c.b[k];
    }
    ln_obj(&c);
    tap_ok(max_rel(c.out, ref, N * C) < 1e-5, "layernorm forward = naive reference");
    float *dinp = calloc(N * C, 4), *dw = calloc(C, 4), *db = calloc(C, 4);
    layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, N, C);
    double e1 = fd_check(ln_obj, &c, c.inp, dinp, N * C, 1e-2f), e2 = fd_check(ln_obj, &c, c.w, dw, C, 1e-2f),
           e3 = fd_check(ln_obj, &c, c.b, db, C, 1e-2f);
    tap_ok(e1 < 2e-3 && e2 < 2e-3 && e3 < 2e-3, "layernorm backward vs finite differences (%.1e %.1e %.1e)", e1, e2, e3);
    free(dinp), free(dw), free(db), free(ref);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.R);
}

/* The one-pass backward over several row chunks and two channel tiles (C > 1024), against a double
 * reference of the same formula, and the same bits with 1 and 2 threads (the chunks depend on N
 * alone). dinp, dw and db accumulate onto what they held. */
static void test_layernorm_chunks(void)
{
    enum { LN = 37, LC = 1100 };
    float *inp = rnd(LN * LC, 40, 2), *w = rnd(LC, 41, 1), *b = rnd(LC, 42, 1), *dout = rnd(LN * LC, 43, 1);
    float *out = malloc(LN * LC * 4), *mean = malloc(LN * 4), *rstd = malloc(LN * 4);
    float *dx[2], *dw[2], *db[2];
    layernorm_forward(out, mean, rstd, inp, w, b, LN, LC);
    for (int t = 0; t < 2; t++) {
        dx[t] = rnd(LN * LC, 44, 1), dw[t] = rnd(LC, 45, 1), db[t] = rnd(LC, 46, 1);
        kernels_set_threads(t + 1);
        layernorm_backward(dx[t], dw[t], db[t], dout, inp, w, mean, rstd, LN, LC);
    }
    kernels_set_threads(2);
    double *rx = malloc(LN * LC * sizeof(double)), *rw = calloc(LC, sizeof(double)), *rb = calloc(LC, sizeof(double));
    float *x0 = rnd(LN * LC, 44, 1), *w0 = rnd(LC, 45, 1), *b0 = rnd(LC, 46, 1);
    for (int c = 0; c < LC; c++) rw[c] = w0[c], rb[c] = b0[c];
    for (int i = 0; i < LN; i++) {
        double a = 0, e = 0;
        for (int c = 0; c < LC; c++) {
            double n = (inp[i * LC + c] - mean[i]) * (double)rstd[i], dn = (double)dout[i * LC + c] * w[c];
            a += dn, e += dn * n;
            rw[c] += dout[i * LC + c] * n, rb[c] += dout[i * LC + c];
        }
        a /= LC, e /= LC;
        for (int c = 0; c < LC; c++) {
            double n = (inp[i * LC + c] - mean[i]) * (double)rstd[i];
            rx[i * LC + c] = x0[i * LC + c] + rstd[i] * ((double)dout[i * LC + c] * w[c] - a - n * e);
        }
    }
    const double ex = max_rel(dx[1], rx, LN * LC), ew = max_rel(dw[1], rw, LC), eb = max_rel(db[1], rb, LC);
    tap_ok(ex < 1e-5 && ew < 1e-5 && eb < 1e-5, "layernorm backward, 37 rows x 1100 channels (chunks, two tiles), += "
           "= double reference (%.1e %.1e %.1e)", ex, ew, eb);
    tap_ok(!memcmp(dx[0], dx[1], LN * LC * 4) && !memcmp(dw[0], dw[1], LC * 4) && !memcmp(db[0], db[1], LC * 4),
           "layernorm backward: identical bits with 1 and 2 threads");
    for (int t = 0; t < 2; t++) free(dx[t]), free(dw[t]), free(db[t]);
    free(inp), free(w), free(b), free(dout), free(out), free(mean), free(rstd);
    free(rx), free(rw), free(rb), free(x0), free(w0), free(b0);
}

/* ---- attention ---- */
typedef struct { float *qkv, *out, *att, *R; } at_t;
static double at_obj(void *p)
{
    at_t *c = p;
    attention_forward(c->out, c->att, c->qkv, B, T, C, NH);
    return dot(c->out, c->R, N * C);
}
static void test_attention(void)
{
    at_t c = {rnd(N * 3 * C, 9, 1), malloc(N * C * 4), calloc((size_t)B * NH * T * T, 4), rnd(N * C, 10, 1)};
    const int hs = C / NH;
    double *ref = calloc(N * C, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                double s[T], mx = -1e300, sum = 0;
                const float *q = c.qkv + (size_t)(b * T + i) * 3 * C + h * hs;
                for (int j = 0; j <= i; j++) {
                    const float *k = c.qkv + (size_t)(b * T + j) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int e = 0; e < hs; e++) d += (double)q[e] * k[e];
                    s[j] = d / sqrt(hs);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= i; j++) sum += (s[j] = exp(s[j] - mx));
                for (int j = 0; j <= i; j++)
                    for (int e = 0; e < hs; e++)
                        ref[(b * T + i) * C + h * hs + e] += s[j] / sum * c.qkv[(size_t)(b * T + j) * 3 * C + 2 * C + h * hs + e];
            }
    at_obj(&c);
    tap_ok(max_rel(c.out, ref, N * C) < 1e-5, "attention forward = naive causal reference");
    int causal = 1;
    double worst_sum = 0;
    for (int r = 0; r < B * NH * T; r++) {
        double s = 0;
        for (int j = 0; j < T; j++) {
            s += c.att[(size_t)r * T + j];
            if (j > r % T) causal &= c.att[(size_t)r * T + j] == 0.0f;
        }
        worst_sum = fmax(worst_sum, fabs(s - 1));
    }
    tap_ok(causal && worst_sum < 1e-6, "attention probabilities: zero above the diagonal, rows sum to 1");
    float *dqkv = malloc(N * 3 * C * 4), *datt = malloc((size_t)B * NH * T * T * 4);
    attention_backward(dqkv, datt, c.R, c.qkv, c.att, B, T, C, NH);
    double e = fd_check(at_obj, &c, c.qkv, dqkv, N * 3 * C, 1e-2f);
    tap_ok(e < 2e-3, "attention backward vs finite differences (%.1e)", e);
    free(dqkv), free(datt), free(ref), free(c.qkv), free(c.out), free(c.att), free(c.R);
}

/* ---- GELU, residual, encoder ---- */
typedef struct { float *inp, *out, *R; size_t n; } el_t;
static double gelu_obj(void *p)
{
    el_t *c = p;
    gelu_forward(c->out, c->inp, c->n);
    return dot(c->out, c->R, c->n);
}
static void test_gelu(void)
{
    el_t c = {rnd(64, 11, 2), malloc(64 * 4), rnd(64, 12, 1), 64};
    gelu_obj(&c);
    double *ref = malloc(64 * sizeof(double));
    for (int i = 0; i < 64; i++) {
        double x = c.inp[i];
        ref[i] = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    tap_ok(max_rel(c.out, ref, 64) < 1e-6, "gelu forward = tanh formula");
    float *d = malloc(64 * 4);
    memcpy(d, c.R, 64 * 4);
    gelu_backward(d, c.inp, d, 64); /* in place: dinp aliases dout */
    double e = fd_check(gelu_obj, &c, c.inp, d, 64, 1e-2f);
    tap_ok(e < 1e-3, "gelu backward (in place) vs finite differences (%.1e)", e);
    free(d), free(ref), free(c.inp), free(c.out), free(c.R);
}

static void test_encoder(void)
{
    int tok[N];
    for (int i = 0; i < N; i++) tok[i] = i % 3; /* repeated tokens: the accumulation must not race */
    float *wte = rnd(V * C, 14, 1), *wpe = rnd(T * C, 15, 1), *out = malloc(N * C * 4), *dout = rnd(N * C, 16, 1);
    encoder_forward(out, tok, wte, wpe, B, T, C, 0, V);
    int good = 1;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < C; k++) good &= out[i * C + k] == wte[tok[i] * C + k] + wpe[(i % T) * C + k];
    tap_ok(good, "encoder forward = wte[token] + wpe[position]");
    float *dwte = calloc(V * C, 4), *dwpe = calloc(T * C, 4);
    encoder_backward(dwte, dwpe, dout, tok, B, T, C, 0, V);
    double *rte = calloc(V * C, sizeof(double)), *rpe = calloc(T * C, sizeof(double));
    for (int i = 0; i < N; i++)
        for (int k = 0; k < C; k++) rte[tok[i] * C + k] += dout[i * C + k], rpe[(i % T) * C + k] += dout[i * C + k];
    tap_ok(max_rel(dwte, rte, V * C) < 1e-6 && max_rel(dwpe, rpe, T * C) < 1e-6,
           "encoder backward = scatter-add of the output gradient (the exact derivative of a gather)");
    free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe), free(rte), free(rpe);
}

/* ---- cross-entropy ---- */
typedef struct { float *logits, *work, *losses; int *tgt; } ce_t;
static double ce_obj(void *p)
{
    ce_t *c = p;
    memcpy(c->work, c->logits, N * V * 4);
    crossentropy_forward(c->losses, c->work, c->tgt, N, V);
    double s = 0;
    for (int i = 0; i < N; i++) s += c->losses[i];
    return s;
}
static void test_crossentropy(void)
{
    int tgt[N];
    for (int i = 0; i < N; i++) tgt[i] = (i * 7) % V;
    ce_t c = {rnd(N * V, 17, 3), malloc(N * V * 4), malloc(N * 4), tgt};
    ce_obj(&c);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double mx = -1e300, s = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, c.logits[i * V + j]);
        for (int j = 0; j < V; j++) s += exp(c.logits[i * V + j] - mx);
        worst = fmax(worst, fabs(c.losses[i] - (log(s) + mx - c.logits[i * V + tgt[i]])));
    }
    tap_ok(worst < 1e-5, "cross-entropy forward = logsumexp - logit[target] (%.1e)", worst);
    float *d = malloc(N * V * 4);
    crossentropy_backward(d, c.work, tgt, 1.0f, N, V, 0);
    double e = fd_check(ce_obj, &c, c.logits, d, N * V, 1e-2f);
    tap_ok(e < 1e-3, "cross-entropy backward vs finite differences (%.1e)", e);
    ce_obj(&c); /* fd_check left perturbed probabilities in work */
    crossentropy_backward(d, c.work, tgt, 1.0f, N, V, 0);
    crossentropy_backward(c.work, c.work, tgt, 1.0f, N, V, 0); /* in place */
    tap_ok(memcmp(c.work, d, N * V * 4) == 0, "cross-entropy backward in place = out of place");
    free(d), free(c.logits), free(c.work), free(c.losses);
}

/* The fused classifier: losses and dlogits in one call, bitwise crossentropy_forward then
 * crossentropy_backward's (rows of 1003 logits: the vector loops' tails too). */
static void test_crossentropy_fused(void)
{
    enum { FN = 24, FV = 1003 };
    int tgt[FN];
    for (int i = 0; i < FN; i++) tgt[i] = (i * 389 + 5) % FV;
    tgt[1] = 0, tgt[2] = FV - 1; /* the row's ends */
    float *x = rnd((size_t)FN * FV, 23, 4), *y = malloc((size_t)FN * FV * 4), *l1 = malloc(FN * 4), *l2 = malloc(FN * 4);
    memcpy(y, x, (size_t)FN * FV * 4);
    const float dloss = 1.0f / 96;
    crossentropy_forward(l1, x, tgt, FN, FV);
    crossentropy_backward(x, x, tgt, dloss, FN, FV, 0);
    crossentropy_fused(l2, y, tgt, dloss, FN, FV);
    tap_ok(memcmp(l1, l2, FN * 4) == 0 && memcmp(x, y, (size_t)FN * FV * 4) == 0,
           "fused classifier: losses and dlogits bitwise crossentropy_forward + crossentropy_backward's");
    free(x), free(y), free(l1), free(l2);
}

/* The MLP's projection on the CPU: the plain products, the same bits (a device backend may keep the
 * hidden activation in its own form; kernels.h). */
static void test_mlp_proj(void)
{
    float *inp = rnd(N * OC, 51, 1), *w = rnd(C * OC, 52, 1), *bias = rnd(C, 53, 1), *res = rnd(N * C, 54, 1);
    float *a = malloc(N * C * 4), *b = malloc(N * C * 4), *dw = calloc(C * OC, 4), *dw2 = calloc(C * OC, 4);
    float *db = calloc(C, 4), *db2 = calloc(C, 4), *dout = rnd(N * C, 55, 1);
    mlp_proj_forward(a, res, inp, w, bias, N, OC, C);
    matmul_residual_forward(b, res, inp, w, bias, N, OC, C);
    int same = !memcmp(a, b, N * C * 4);
    mlp_proj_forward(a, NULL, inp, w, NULL, N, OC, C);
    matmul_forward(b, inp, w, NULL, N, OC, C);
    same = same && !memcmp(a, b, N * C * 4);
    mlp_proj_backward_weight(dw, db, dout, inp, N, OC, C);
    matmul_backward_weight(dw2, db2, dout, inp, N, OC, C);
    same = same && !memcmp(dw, dw2, C * OC * 4) && !memcmp(db, db2, C * 4);
    tap_ok(same, "mlp_proj_forward / _backward_weight = matmul_residual_forward, matmul_forward, "
                 "matmul_backward_weight, bit for bit");
    /* the fc product's backward: dout (N,OC) = the hidden gradient, inp (N,C) */
    float *dh = rnd(N * OC, 56, 1), *x = rnd(N * C, 57, 1), *wf = rnd(OC * C, 58, 1);
    float *di = malloc(N * C * 4), *di2 = malloc(N * C * 4), *dwf = calloc(OC * C, 4), *dwf2 = calloc(OC * C, 4);
    float *dbf = calloc(OC, 4), *dbf2 = calloc(OC, 4);
    mlp_fc_backward(di, dwf, dbf, dh, x, wf, N, C, OC);
    matmul_backward(di2, dwf2, dbf2, dh, x, wf, N, C, OC);
    same = !memcmp(di, di2, N * C * 4) && !memcmp(dwf, dwf2, OC * C * 4) && !memcmp(dbf, dbf2, OC * 4);
    mlp_fc_backward_weight(dwf, dbf, dh, x, N, C, OC);
    matmul_backward_weight(dwf2, dbf2, dh, x, N, C, OC);
    same = same && !memcmp(dwf, dwf2, OC * C * 4) && !memcmp(dbf, dbf2, OC * 4);
    tap_ok(same, "mlp_fc_backward / _backward_weight = matmul_backward, matmul_backward_weight, bit for bit");
    free(dh), free(x), free(wf), free(di), free(di2), free(dwf), free(dwf2), free(dbf), free(dbf2);
    free(inp), free(w), free(bias), free(res), free(a), free(b), free(dw), free(dw2), free(db), free(db2), free(dout);
}

/* ---- the head (product + cross-entropy as one unit) ---- */
typedef struct { float *inp, *w, *store, *losses; int *tgt; } hd_t;
static double hd_obj(void *p)
{
    hd_t *c = p;
    head_forward(c->losses, c->store, c->inp, c->w, c->tgt, N, C, V);
    double s = 0;
    for (int i = 0; i < N; i++) s += c->losses[i];
    return s;
}
/* Its gradients against finite differences of its summed loss, the weight half alone against the
 * whole backward's dw, and the split (dinp first, dw later) against the whole. */
static void test_head(void)
{
    int tgt[N];
    for (int i = 0; i < N; i++) tgt[i] = (i * 5 + 3) % V;
    hd_t c = {rnd(N * C, 41, 1), rnd(V * C, 42, 1), malloc(N * V * 4), malloc(N * 4), tgt};
    float *dinp = malloc(N * C * 4), *dw = calloc(V * C, 4), *dw2 = calloc(V * C, 4), *dinp2 = malloc(N * C * 4);
    hd_obj(&c);
    head_backward(dinp, dw, c.store, c.inp, c.w, tgt, 1.0f, N, C, V);
    double e1 = fd_check(hd_obj, &c, c.inp, dinp, N * C, 1e-2f), e2 = fd_check(hd_obj, &c, c.w, dw, V * C, 1e-2f);
    tap_ok(e1 < 1e-3 && e2 < 1e-3, "head backward vs finite differences of its loss (dinp %.1e, dw %.1e)", e1, e2);
    hd_obj(&c); /* the split: B's input gradient, then W's weight half from the dlogits B left */
    head_backward(dinp2, NULL, c.store, c.inp, c.w, tgt, 1.0f, N, C, V);
    head_backward_weight(dw2, c.store, c.inp, N, C, V);
    tap_ok(!memcmp(dinp, dinp2, N * C * 4) && !memcmp(dw, dw2, V * C * 4),
           "head split backward (dinp, then the weight half) = the whole, bit for bit");
    free(dinp), free(dw), free(dw2), free(dinp2), free(c.inp), free(c.w), free(c.store), free(c.losses);
}

/* Vocab-parallel cross-entropy over 2 shards of V = 11 padded to 12 (6 columns each, the last one
 * padding), with the all-reduces done by hand: the same losses and probabilities as the one-rank
 * kernel, and the backward's onehot lands on the shard that holds the target. */
static void test_crossentropy_vocab_parallel(void)
{
    enum { VL = 6 };
    int tgt[N];
    for (int i = 0; i < N; i++) tgt[i] = (i * 5 + 3) % V;
    float *logits = rnd(N * V, 24, 3), *full = malloc(N * V * 4), *loss1 = malloc(N * 4);
    memcpy(full, logits, N * V * 4);
    crossentropy_forward(loss1, full, tgt, N, V);
    float *sh[2], mx[2][N], sm[2][N], tl[2][N], loss2[2][N];
    for (int r = 0; r < 2; r++) {
        sh[r] = calloc(N * VL, 4);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < VL && r * VL + j < V; j++) sh[r][i * VL + j] = logits[i * V + r * VL + j];
        xent_local_max(mx[r], tl[r], sh[r], tgt, N, VL, r * VL, r == 0 ? VL : V - VL);
    }
    for (int i = 0; i < N; i++) mx[0][i] = mx[1][i] = fmaxf(mx[0][i], mx[1][i]);
    for (int r = 0; r < 2; r++) xent_local_expsum(sm[r], sh[r], mx[r], N, VL, r == 0 ? VL : V - VL);
    for (int i = 0; i < N; i++) {
        sm[0][i] = sm[1][i] = sm[0][i] + sm[1][i];
        tl[0][i] = tl[1][i] = tl[0][i] + tl[1][i];
    }
    double werr = 0, perr = 0;
    for (int r = 0; r < 2; r++) {
        xent_finish(loss2[r], sh[r], mx[r], sm[r], tl[r], N, VL);
        for (int i = 0; i < N; i++) {
            werr = fmax(werr, fabs(loss2[r][i] - loss1[i]));
            for (int j = 0; j < VL; j++) {
                int g = r * VL + j;
                perr = fmax(perr, fabs(sh[r][i * VL + j] - (g < V ? full[i * V + g] : 0.0f)));
            }
        }
    }
    tap_ok(werr < 1e-5 && perr < 1e-6, "vocab-parallel cross-entropy over 2 shards = one rank (loss %.1e, probs %.1e)",
           werr, perr);
    float *d1 = malloc(N * V * 4);
    crossentropy_backward(d1, full, tgt, 0.5f, N, V, 0);
    double derr = 0;
    for (int r = 0; r < 2; r++) {
        crossentropy_backward(sh[r], sh[r], tgt, 0.5f, N, VL, r * VL);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < VL; j++) {
                int g = r * VL + j;
                derr = fmax(derr, fabs(sh[r][i * VL + j] - (g < V ? d1[i * V + g] : 0.0f)));
            }
    }
    tap_ok(derr < 1e-6, "vocab-parallel cross-entropy backward: each shard's columns, padding zero (%.1e)", derr);
    int tok[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 3) % V;
    float *wte = rnd(V * C, 25, 1), *wpe = rnd(T * C, 26, 1), *o1 = malloc(N * C * 4), *o2 = calloc(N * C, 4);
    float *part = malloc(N * C * 4);
    encoder_forward(o1, tok, wte, wpe, B, T, C, 0, V);
    for (int r = 0; r < 2; r++) {
        int vn = r == 0 ? VL : V - VL;
        encoder_forward(part, tok, wte + (size_t)r * VL * C, NULL, B, T, C, r * VL, vn);
        for (int i = 0; i < N * C; i++) o2[i] += part[i];
    }
    position_forward(o2, wpe, B, T, C);
    tap_ok(memcmp(o1, o2, N * C * 4) == 0, "vocab-parallel embedding: shards summed, then positions = one rank, bitwise");
    free(logits), free(full), free(loss1), free(sh[0]), free(sh[1]), free(d1), free(wte), free(wpe), free(o1), free(o2),
        free(part);
}

/* ---- AdamW, norms ---- */
static void test_adamw(void)
{
    float p[2] = {0.5f, -1.0f}, g[2] = {0.2f, -0.4f}, m[2] = {0.01f, 0.0f}, v[2] = {0.001f, 0.0f};
    const double lr = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, sc = 0.5;
    double ref[2];
    for (int i = 0; i < 2; i++) {
        double gg = g[i] * sc, mm = b1 * m[i] + (1 - b1) * gg, vv = b2 * v[i] + (1 - b2) * gg * gg;
        double mh = mm / (1 - b1 * b1 * b1), vh = vv / (1 - b2 * b2 * b2);
        ref[i] = p[i] - lr * (mh / (sqrt(vh) + eps) + wd * p[i]);
    }
    adamw_update(p, g, m, v, 2, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, 3, (float)sc);
    tap_ok(fabs(p[0] - ref[0]) < 1e-6 && fabs(p[1] - ref[1]) < 1e-6, "AdamW step 3 with clipping scale = hand computation");
}

/* The vectorised and threaded update gives, element for element, the bits of the scalar mp_adamw the
 * CUDA kernel also runs: a tensor long enough for threads, whole vectors and a scalar tail. */
static void test_adamw_bits(void)
{
    enum { NA = 100003 };
    float *p = malloc(NA * sizeof *p), *g = malloc(NA * sizeof *g), *m = malloc(NA * sizeof *m), *v = malloc(NA * sizeof *v);
    float *p2 = malloc(NA * sizeof *p2), *m2 = malloc(NA * sizeof *m2), *v2 = malloc(NA * sizeof *v2);
    for (int i = 0; i < NA; i++) {
        p[i] = p2[i] = sinf(0.37f * (float)i);
        g[i] = 0.01f * cosf(0.11f * (float)i) * (float)(i % 7 - 3);
        m[i] = m2[i] = 1e-3f * sinf(0.05f * (float)i);
        v[i] = v2[i] = 1e-6f * (float)(i % 13);
    }
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, sc = 0.7f;
    const int t = 5;
    const float bc1 = 1.0f - powf(b1, (float)t), bc2 = 1.0f - powf(b2, (float)t);
    for (int i = 0; i < NA; i++) mp_adamw(&p2[i], &m2[i], &v2[i], g[i] * sc, lr, b1, b2, eps, wd, bc1, bc2);
    adamw_update(p, g, m, v, NA, lr, b1, b2, eps, wd, t, sc);
    tap_ok(!memcmp(p, p2, NA * sizeof *p) && !memcmp(m, m2, NA * sizeof *m) && !memcmp(v, v2, NA * sizeof *v),
           "AdamW over %d floats (threads, vectors, a tail) = the scalar mp_adamw, bit for bit", NA);
    free(p), free(g), free(m), free(v), free(p2), free(m2), free(v2);
}

static void test_sumsq_determinism(void)
{
    const size_t n = 3 * 4096 * 1024 + 123; /* more than one outer block of chunks */
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    kernels_set_threads(1);
    double s1 = sumsq(x, n);
    kernels_set_threads(2);
    double s2 = sumsq(x, n);
    double ref = 0;
    for (size_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
    tap_ok(memcmp(&s1, &s2, sizeof s1) == 0, "sumsq: identical bits with 1 and 2 threads");
    tap_ok(fabs(s1 - ref) <= 1e-9 * ref, /* two orders of rounding of ~1.2e7 terms: about n·eps apart */ "sumsq = sequential double sum (%.3e rel)", fabs(s1 - ref) / ref);
    float *y = malloc(n * sizeof(float));
    vec_add(y, x, x, n);
    int good = 1;
    for (size_t i = 0; i < n; i += 997) good &= y[i] == 2 * x[i];
    tap_ok(good, "vec_add");
    free(x), free(y);
}

/* A longer sequence than the attention row block, so the blocked causal path is exercised. */
static void test_attention_blocks(void)
{
    enum { TT = 150, CC = 16, HH = 2 };
    float *qkv = rnd((size_t)TT * 3 * CC, 18, 1), *out = malloc(TT * CC * 4), *att = calloc((size_t)HH * TT * TT, 4);
    attention_forward(out, att, qkv, 1, TT, CC, HH);
    const int hs = CC / HH;
    double worst = 0;
    for (int h = 0; h < HH; h++)
        for (int i = 0; i < TT; i += 37) {
            double s[TT], mx = -1e300, sum = 0;
            for (int j = 0; j <= i; j++) {
                double d = 0;
                for (int e = 0; e < hs; e++) d += (double)qkv[i * 3 * CC + h * hs + e] * qkv[j * 3 * CC + CC + h * hs + e];
                s[j] = d / sqrt(hs);
                mx = fmax(mx, s[j]);
            }
            for (int j = 0; j <= i; j++) sum += (s[j] = exp(s[j] - mx));
            for (int e = 0; e < hs; e++) {
                double o = 0;
                for (int j = 0; j <= i; j++) o += s[j] / sum * qkv[j * 3 * CC + 2 * CC + h * hs + e];
                worst = fmax(worst, fabs(out[i * CC + h * hs + e] - o));
            }
        }
    tap_ok(worst < 1e-5, "attention over several row blocks (T=150) = naive reference (%.1e)", worst);
    free(qkv), free(out), free(att);
}

/* The decode step's attention (one query row against a key/value cache) equals row i of the
 * training kernel's causal attention, for rows of several positions decoded together. */
static void test_attention_decode(void)
{
    enum { TT = 150, CC = 16, HH = 2, RB = 4 };
    float *qkv = rnd((size_t)TT * 3 * CC, 24, 1), *out = malloc(TT * CC * 4), *att = calloc((size_t)HH * TT * TT, 4);
    float *kc = malloc(TT * CC * 4), *vc = malloc(TT * CC * 4), *q = malloc(RB * 3 * CC * 4), *o = malloc(RB * CC * 4);
    float *sc = malloc((size_t)RB * HH * TT * 4);
    attention_forward(out, att, qkv, 1, TT, CC, HH);
    for (int t = 0; t < TT; t++) /* the cache: k and v of every position, rows of C */
        memcpy(kc + t * CC, qkv + t * 3 * CC + CC, CC * 4), memcpy(vc + t * CC, qkv + t * 3 * CC + 2 * CC, CC * 4);
    const int pos[RB] = {0, 37, 149, 64};
    const float *kp[RB] = {kc, kc, kc, kc}, *vp[RB] = {vc, vc, vc, vc};
    for (int r = 0; r < RB; r++) memcpy(q + r * 3 * CC, qkv + pos[r] * 3 * CC, 3 * CC * 4);
    attention_decode_forward(o, sc, q, 3 * CC, kp, vp, pos, RB, CC, HH, HH, TT);
    double worst = 0;
    for (int r = 0; r < RB; r++)
        for (int c = 0; c < CC; c++) worst = fmax(worst, fabs(o[r * CC + c] - out[pos[r] * CC + c]));
    tap_ok(worst < 1e-5, "attention_decode_forward: rows at positions 0, 37, 149, 64 together = attention_forward's "
           "rows (%.1e)", worst);
    free(qkv), free(out), free(att), free(kc), free(vc), free(q), free(o), free(sc);
}

/* The polynomial exp/tanh that GELU and softmax use on both backends. */
static void test_exp_tanh(void)
{
    double we = 0, wt = 0;
    for (float x = -87.0f; x < 88.0f; x += 0.000731f) {
        double e = exp((double)x);
        we = fmax(we, fabs(mp_expf(x) - e) / e);
    }
    for (float u = -12.0f; u < 12.0f; u += 0.0001f) wt = fmax(wt, fabs(mp_tanhf(u) - tanh((double)u)));
    tap_ok(we < 1.2e-7, "mp_expf within 1.2e-7 relative of exp over [-87, 88] (%.2e)", we);
    tap_ok(wt < 3e-7 && mp_tanhf(40.0f) == 1.0f && mp_tanhf(-40.0f) == -1.0f,
           "mp_tanhf within 3e-7 absolute of tanh, exact limits (%.2e)", wt);
    double ws = 0;
    for (float x = -20.0f; x <= 20.0f; x += 0.0001f) {
        double e = exp((double)x);
        ws = fmax(ws, fabs(mp_expf_small(x) - e) / e);
    }
    tap_ok(ws < 1.2e-7, "mp_expf_small within 1.2e-7 relative of exp over [-20, 20] (%.2e)", ws);
    /* the clamp at ±10 must not show: the last values below it are already ±1 */
    const float inf = INFINITY;
    tap_ok(mp_tanhf(9.5f) == 1.0f && mp_tanhf(-9.5f) == -1.0f && mp_tanhf(inf) == 1.0f &&
               mp_tanhf(-inf) == -1.0f && mp_tanhf(3e38f) == 1.0f && isnan(mp_tanhf(NAN)) &&
               isnan(mp_gelu(NAN)) && isnan(mp_gelu_grad(NAN)),
           "mp_tanhf: ±1 from |u| = 9.5 on and at ±inf, NaN stays NaN through tanh and GELU");
}

/* The fused residual product equals residual + product. */
static void test_matmul_residual(void)
{
    float *inp = rnd(N * C, 20, 1), *w = rnd(OC * C, 21, 1), *bias = rnd(OC, 22, 1), *res = rnd(N * OC, 23, 1);
    float *out = malloc(N * OC * 4), *ref = malloc(N * OC * 4);
    matmul_forward(ref, inp, w, bias, N, C, OC);
    matmul_residual_forward(out, res, inp, w, bias, N, C, OC);
    double worst = 0;
    for (int i = 0; i < N * OC; i++) worst = fmax(worst, fabs(out[i] - (ref[i] + res[i])));
    memcpy(out, res, N * OC * 4);
    matmul_residual_forward(out, out, inp, w, bias, N, C, OC); /* in place on the residual */
    double worst2 = 0;
    for (int i = 0; i < N * OC; i++) worst2 = fmax(worst2, fabs(out[i] - (ref[i] + res[i])));
    tap_ok(worst < 1e-5 && worst2 < 1e-5, "matmul_residual_forward = residual + matmul_forward, also in place (%.1e)", worst);
    free(inp), free(w), free(bias), free(res), free(out), free(ref);
}

/* The MLP's fused kernels against the unfused ones: matmul_forward then GELU, and matmul_backward
 * then gelu_backward, over enough rows for several row blocks and a short last one. */
static void test_matmul_gelu(void)
{
    enum { MN = 300, MC = 24, MO = 40 }; /* fc: (MN,MC) -> (MN,MO); fcproj: (MN,MO) -> (MN,MC) */
    float *inp = rnd(MN * MC, 30, 1), *w = rnd(MO * MC, 31, 0.5f), *bias = rnd(MO, 32, 1);
    float *pre = malloc(MN * MO * 4), *g = malloc(MN * MO * 4), *dg = malloc(MN * MO * 4);
    double wg = 0, wd = 0, scale = 1e-12;
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        matmul_forward(pre, inp, w, with_bias ? bias : NULL, MN, MC, MO);
        matmul_gelu_forward(g, dg, inp, w, with_bias ? bias : NULL, MN, MC, MO);
        for (int i = 0; i < MN * MO; i++) {
            wg = fmax(wg, fabs(g[i] - mp_gelu(pre[i]))), wd = fmax(wd, fabs(dg[i] - mp_gelu_grad(pre[i])));
            scale = fmax(scale, fabs(mp_gelu(pre[i])));
        }
    }
    int pair = 1; /* the shared tanh gives the very bits of the separate functions */
    for (int i = 0; i < MN * MO; i++) {
        float d, v = mp_gelu_pair(pre[i], &d);
        pair &= v == mp_gelu(pre[i]) && d == mp_gelu_grad(pre[i]);
    }
    /* the products may round differently (row blocks against one call): gelu' is that rounding
     * times gelu'' (up to 0.8 at 0), about 1e-6 at these sums of 24 terms */
    tap_ok(wg / scale < 1e-6 && wd < 1e-5 && pair,
           "matmul_gelu_forward = matmul_forward then gelu, gelu' (%.1e %.1e), mp_gelu_pair bitwise", wg / scale, wd);
    /* fcproj's backward: w2 (MC,MO), dout (MN,MC); its input gradient (MN,MO) through GELU */
    float *w2 = rnd(MC * MO, 33, 0.5f), *dout = rnd(MN * MC, 34, 1);
    float *d1 = malloc(MN * MO * 4), *d2 = malloc(MN * MO * 4);
    float *dw1 = calloc(MC * MO, 4), *dw2 = calloc(MC * MO, 4), *db1 = calloc(MC, 4), *db2 = calloc(MC, 4);
    matmul_backward(d1, dw1, db1, dout, g, w2, MN, MO, MC);
    gelu_backward(d1, pre, d1, MN * MO);
    matmul_backward_gelu(d2, dw2, db2, dout, g, w2, dg, MN, MO, MC);
    double wdi = 0, sdi = 1e-12;
    for (int i = 0; i < MN * MO; i++) wdi = fmax(wdi, fabs(d1[i] - d2[i])), sdi = fmax(sdi, fabs(d1[i]));
    tap_ok(wdi / sdi < 1e-6 && !memcmp(dw1, dw2, MC * MO * 4) && !memcmp(db1, db2, MC * 4),
           "matmul_backward_gelu = matmul_backward then gelu_backward (%.1e; dw, dbias bitwise)", wdi / sdi);
    /* a split backward (model_backward_b, then _w): each half alone, with NULL for the other's
     * outputs, is the same bits as the whole call (dw1, db1 accumulate a second time) */
    float *d3 = malloc(MN * MO * 4), *d4 = malloc(MN * MO * 4), *dw3 = malloc(MC * MO * 4), *db3 = malloc(MC * 4);
    float *dw4 = malloc(MC * MO * 4), *db4 = malloc(MC * 4);
    memcpy(dw3, dw1, MC * MO * 4), memcpy(db3, db1, MC * 4), memcpy(dw4, dw1, MC * MO * 4), memcpy(db4, db1, MC * 4);
    matmul_backward_gelu(d2, dw1, db1, dout, g, w2, dg, MN, MO, MC);
    matmul_backward_gelu(d3, NULL, NULL, dout, g, w2, dg, MN, MO, MC);
    matmul_backward_weight(dw3, db3, dout, g, MN, MO, MC);
    tap_ok(!memcmp(d2, d3, MN * MO * 4) && !memcmp(dw1, dw3, MC * MO * 4) && !memcmp(db1, db3, MC * 4),
           "matmul_backward_gelu with NULL dw, dbias, then matmul_backward_weight: the whole call's bits");
    matmul_backward(d3, dw4, db4, dout, g, w2, MN, MO, MC); /* dw4, db4: a second accumulation */
    matmul_backward(d4, NULL, NULL, dout, g, w2, MN, MO, MC);
    memcpy(dw3, dw1, MC * MO * 4), memcpy(db3, db1, MC * 4);
    matmul_backward_gelu(NULL, dw3, db3, dout, g, w2, dg, MN, MO, MC); /* the third, through the fused kernel */
    matmul_backward_weight(dw4, db4, dout, g, MN, MO, MC);
    tap_ok(!memcmp(d3, d4, MN * MO * 4) && !memcmp(dw3, dw4, MC * MO * 4) && !memcmp(db3, db4, MC * 4),
           "matmul_backward with NULL dw, dbias, and the fused kernel with NULL dinp: the same bits");
    free(inp), free(w), free(bias), free(pre), free(g), free(dg), free(w2), free(dout);
    free(d1), free(d2), free(d3), free(d4), free(dw1), free(dw2), free(dw3), free(dw4), free(db1), free(db2), free(db3),
        free(db4);
}

/* The decode step's product: against a double reference; each row of a batch of 7 the same bits as
 * that row alone (so a completion does not depend on its batch), in place on a residual, with 1 and
 * 2 threads; widths with a tail past the vector lanes and outputs past the tiles of 4. */
static void test_matmul_decode(void)
{
    enum { DN = 7 };
    const int shapes[][2] = {{128, 384}, {37, 10}, {300, 5}};
    for (int s = 0; s < 3; s++) {
        const int DC = shapes[s][0], DO = shapes[s][1];
        float *inp = rnd(DN * DC, 40 + s, 1), *w = rnd(DO * DC, 50 + s, 0.5f), *bias = rnd(DO, 60 + s, 1);
        float *res = rnd(DN * DO, 70 + s, 1), *all = malloc(DN * DO * 4), *one = malloc(DN * DO * 4);
        float *inpl = malloc(DN * DO * 4), *t1 = malloc(DN * DO * 4);
        double worst = 0, scale = 0;
        matmul_decode_forward(all, NULL, inp, w, bias, DN, DC, DO);
        for (int r = 0; r < DN; r++) {
            matmul_decode_forward(one + (size_t)r * DO, NULL, inp + (size_t)r * DC, w, bias, 1, DC, DO);
            for (int o = 0; o < DO; o++) {
                double ref = bias[o];
                for (int c = 0; c < DC; c++) ref += (double)inp[r * DC + c] * w[o * DC + c];
                worst = fmax(worst, fabs(all[r * DO + o] - ref)), scale = fmax(scale, fabs(ref));
            }
        }
        const int alone = !memcmp(all, one, DN * DO * 4);
        memcpy(inpl, res, DN * DO * 4);
        matmul_decode_forward(inpl, inpl, inp, w, bias, DN, DC, DO);
        int resid = 1;
        for (int i = 0; i < DN * DO; i++) resid &= inpl[i] == res[i] + all[i];
        kernels_set_threads(1);
        matmul_decode_forward(t1, NULL, inp, w, bias, DN, DC, DO);
        kernels_set_threads(2);
        tap_ok(worst <= 1e-6 * DC * scale && alone && resid && !memcmp(t1, all, DN * DO * 4),
               "matmul_decode_forward (%d rows, C %d, OC %d): the reference within %.1e; each row the same bits alone "
               "(%s), in place on a residual (%s), with 1 and 2 threads", DN, DC, DO, worst / scale,
               alone ? "yes" : "no", resid ? "yes" : "no");
        free(inp), free(w), free(bias), free(res), free(all), free(one), free(inpl), free(t1);
    }
}

int main(void)
{
    kernels_set_threads(2);
    test_matmul();
    test_matmul_residual();
    test_exp_tanh();
    test_layernorm();
    test_layernorm_chunks();
    test_crossentropy_fused();
    test_attention();
    test_attention_blocks();
    test_attention_decode();
    test_matmul_decode();
    test_gelu();
    test_matmul_gelu();
    test_encoder();
    test_crossentropy();
    test_crossentropy_vocab_parallel();
    test_head();
    test_mlp_proj();
    test_adamw();
    test_adamw_bits();
    test_sumsq_determinism();
    return tap_done();
}
