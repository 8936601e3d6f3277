/* Naive double references for the Llama kernels; see llama_ref.h. */
#include "llama_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_rmsnorm_forward(double *out, double *rstd, const double *inp, const double *w, int N, int C, double eps)
{
    for (int i = 0; i < N; i++) {
        const double *x = inp + (size_t)i * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        rstd[i] = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = w[c] * x[c] * rstd[i];
    }
}

/* y_j = w_j x_j r with r = (Σx²/C + eps)^(-1/2), ∂r/∂x_k = −r³ x_k / C. */
void ref_rmsnorm_backward(double *dinp, double *dw, const double *dout, const double *inp, const double *w, int N,
                          int C, double eps)
{
    memset(dw, 0, (size_t)C * sizeof *dw);
    for (int i = 0; i < N; i++) {
        const double *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        double ss = 0, wdyx = 0;
        for (int c = 0; c < C; c++) ss += x[c] * x[c], wdyx += w[c] * dy[c] * x[c];
        const double r = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) {
            dinp[(size_t)i * C + c] = r * w[c] * dy[c] - x[c] * r * r * r * wdyx / C;
            dw[c] += dy[c] * x[c] * r;
        }
    }
}

void ref_rope(double *out, const double *qkv, int pos0, int B, int T, int NH, int KVH, int hs, double theta, int sign)
{
    const int W = (NH + 2 * KVH) * hs, h2 = hs / 2;
    memcpy(out, qkv, (size_t)B * T * W * sizeof *out);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH + KVH; h++) {
                const size_t o = ((size_t)b * T + t) * W + (size_t)h * hs;
                for (int i = 0; i < h2; i++) {
                    const double inv_freq = 1.0 / pow(theta, (2.0 * i) / hs), a = sign * (pos0 + t) * inv_freq;
                    const double x0 = qkv[o + i], x1 = qkv[o + i + h2];
                    out[o + i] = x0 * cos(a) - x1 * sin(a);
                    out[o + i + h2] = x1 * cos(a) + x0 * sin(a);
                }
            }
}

static double sigmoid(double g) { return 1.0 / (1.0 + exp(-g)); }

void ref_swiglu_forward(double *out, const double *inp, int N, int F)
{
    for (int i = 0; i < N; i++)
        for (int f = 0; f < F; f++) {
            const double g = inp[(size_t)i * 2 * F + f], u = inp[(size_t)i * 2 * F + F + f];
            out[(size_t)i * F + f] = g * sigmoid(g) * u;
        }
}

void ref_swiglu_backward(double *dinp, const double *dout, const double *inp, int N, int F)
{
    for (int i = 0; i < N; i++)
        for (int f = 0; f < F; f++) {
            const double g = inp[(size_t)i * 2 * F + f], u = inp[(size_t)i * 2 * F + F + f], dh = dout[(size_t)i * F + f];
            const double s = sigmoid(g);
            dinp[(size_t)i * 2 * F + f] = dh * u * (s + g * s * (1 - s)); /* d(g·σ(g))/dg */
            dinp[(size_t)i * 2 * F + F + f] = dh * g * s;
        }
}

/* Row i of head h's probabilities over keys 0..i into p (T). */
static void gqa_probs(double *p, const double *qkv, int b, int h, int i, int T, int C, int NH, int KVH)
{
    const int hs = C / NH, W = C + 2 * KVH * hs, kvh = h / (NH / KVH);
    const double *q = qkv + ((size_t)b * T + i) * W + (size_t)h * hs;
    double mx = -INFINITY, sum = 0;
    for (int j = 0; j <= i; j++) {
        const double *k = qkv + ((size_t)b * T + j) * W + C + (size_t)kvh * hs;
        double d = 0;
        for (int e = 0; e < hs; e++) d += q[e] * k[e];
        p[j] = d / sqrt(hs);
        mx = fmax(mx, p[j]);
    }
    for (int j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
    for (int j = 0; j <= i; j++) p[j] /= sum;
    for (int j = i + 1; j < T; j++) p[j] = 0;
}

void ref_gqa_forward(double *out, double *att, const double *qkv, int B, int T, int C, int NH, int KVH)
{
    const int hs = C / NH, W = C + 2 * KVH * hs;
    double *p = malloc((size_t)T * sizeof *p);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const int kvh = h / (NH / KVH);
                gqa_probs(p, qkv, b, h, i, T, C, NH, KVH);
                for (int e = 0; e < hs; e++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++) o += p[j] * qkv[((size_t)b * T + j) * W + C + (size_t)(KVH + kvh) * hs + e];
                    out[((size_t)b * T + i) * C + (size_t)h * hs + e] = o;
                }
                if (att) memcpy(att + (((size_t)b * NH + h) * T + i) * T, p, (size_t)T * sizeof *p);
            }
    free(p);
}

/* o_i = Σ_j p_ij v_j, p_ij = softmax_j(s_ij), s_ij = q_i·k_j/√hs. */
void ref_gqa_backward(double *dqkv, const double *dout, const double *qkv, int B, int T, int C, int NH, int KVH)
{
    const int hs = C / NH, W = C + 2 * KVH * hs;
    double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
    memset(dqkv, 0, (size_t)B * T * W * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const int kvh = h / (NH / KVH);
                const size_t qo = ((size_t)b * T + i) * W + (size_t)h * hs;
                const double *dO = dout + ((size_t)b * T + i) * C + (size_t)h * hs;
                gqa_probs(p, qkv, b, h, i, T, C, NH, KVH);
                double pdp = 0;
                for (int j = 0; j <= i; j++) {
                    const size_t vo = ((size_t)b * T + j) * W + C + (size_t)(KVH + kvh) * hs;
                    dp[j] = 0;
                    for (int e = 0; e < hs; e++) {
                        dp[j] += dO[e] * qkv[vo + e];
                        dqkv[vo + e] += p[j] * dO[e];
                    }
                    pdp += p[j] * dp[j];
                }
                for (int j = 0; j <= i; j++) {
                    const size_t ko = ((size_t)b * T + j) * W + C + (size_t)kvh * hs;
                    const double ds = p[j] * (dp[j] - pdp) / sqrt(hs);
                    for (int e = 0; e < hs; e++) {
                        dqkv[qo + e] += ds * qkv[ko + e];
                        dqkv[ko + e] += ds * qkv[qo + e];
                    }
                }
            }
    free(p), free(dp);
}
