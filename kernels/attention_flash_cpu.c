/* The fused (flash) attention's contract on the CPU: what the emu backend runs where it emulates
 * the CUDA bf16 path's memory (train.attention=fused), and what the CUDA kernels of
 * attention_flash_cuda.cu and attention_fa2_cuda.cu keep in att and datt
 * (attention_fused_layout.h): the log-sum-exps and a copy of the output, never the (T,T)
 * probabilities. Legend in kernels.h; multi-head only (qkv rows [q | k | v], 3C).
 *
 * The arithmetic is fp32 and the products are attention_cpu.c's (row blocks of RB queries, keys
 * [0, r1) only), with the probabilities of one row block in a per-thread buffer: the forward's out
 * is the probabilities' path's bit for bit; the backward recomputes P = exp(S − lse) from the
 * saved log-sum-exps, as the CUDA kernels do, so its gradients differ from attention_backward's in
 * rounding only. The bf16 planes the CUDA forward keeps (mp_att_fused_keeps_qkv16) are carved in
 * att for the same accounting but neither written nor read here: these products read fp32 qkv. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_fused_layout.h"
#include "kern_check.h"
#include "kernels.h"
#include "math_softmax.h"

enum { RB = 64 };

/* One (b, h): out's head columns, its rows' log-sum-exps, with p a RB·T buffer. */
static void flash_head_forward(float *out, float *lse, const float *qkv, float *p, int b, int h, int T, int C, int NH)
{
    const int hs = C / NH, ld = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
    float *o = out + (size_t)b * T * C + (size_t)h * hs;
    for (int r0 = 0; r0 < T; r0 += RB) {
        const int r1 = r0 + RB < T ? r0 + RB : T, rb = r1 - r0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, r1, hs, scale, q + (size_t)r0 * ld, ld, k, ld, 0.0f,
                    p, T);
        for (int i = r0; i < r1; i++) { /* attention_cpu.c's row softmax, keeping max + log Σ */
            float *row = p + (size_t)(i - r0) * T, max = row[0], sum = 0.0f;
#pragma omp simd reduction(max : max)
            for (int j = 1; j <= i; j++) max = row[j] > max ? row[j] : max;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j <= i; j++) {
                row[j] = mp_softmax_exp(row[j], max);
                sum += row[j];
            }
            const float inv = 1.0f / sum;
#pragma omp simd
            for (int j = 0; j <= i; j++) row[j] *= inv;
            for (int j = i + 1; j < r1; j++) row[j] = 0.0f;
            lse[i] = max + logf(sum);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rb, hs, r1, 1.0f, p, T, v, ld, 0.0f,
                    o + (size_t)r0 * C, C);
    }
}

void attention_flash_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    if (NH <= 0 || C % NH) KERN_ABORT("attention_flash_forward: C = %d is not a multiple of NH = %d", C, NH);
    int oom = 0;
#pragma omp parallel reduction(| : oom)
    {
        float *p = malloc((size_t)RB * T * sizeof *p);
        oom = !p;
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++)
            if (p) flash_head_forward(out, att + (size_t)bh * T, qkv, p, bh / NH, bh % NH, T, C, NH);
        free(p);
    }
    if (oom) KERN_ABORT("attention_flash_forward: out of memory for a %d-row block of %d keys", RB, T);
    memcpy(att + mp_att_fused_o_offset(B, T, NH), out, (size_t)B * T * C * sizeof *out);
}

/* One (b, h): dq = ; dk, dv = (the head's own, multi-head), from P = exp(S − lse) and D. */
static void flash_head_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *D,
                                float *p, float *ds, int b, int h, int T, int C, int NH)
{
    const int hs = C / NH, ld = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
    const float *dO = dout + (size_t)b * T * C + (size_t)h * hs;
    float *dq = dqkv + (size_t)b * T * ld + (size_t)h * hs, *dk = dq + C, *dv = dq + 2 * C;
    for (int t = 0; t < T; t++) {
        memset(dk + (size_t)t * ld, 0, (size_t)hs * sizeof(float));
        memset(dv + (size_t)t * ld, 0, (size_t)hs * sizeof(float));
    }
    for (int r0 = 0; r0 < T; r0 += RB) {
        const int r1 = r0 + RB < T ? r0 + RB : T, rb = r1 - r0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, r1, hs, scale, q + (size_t)r0 * ld, ld, k, ld, 0.0f,
                    p, T);
        for (int i = r0; i < r1; i++) { /* P again from the log-sum-exp: exp(S − lse), 0 above the diagonal */
            float *row = p + (size_t)(i - r0) * T;
            for (int j = 0; j <= i; j++) row[j] = mp_softmax_exp(row[j], lse[i]);
            for (int j = i + 1; j < r1; j++) row[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rb, r1, hs, 1.0f, dO + (size_t)r0 * C, C, v, ld, 0.0f,
                    ds, T); /* dP = dO vᵀ */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rb, 1.0f, p, T, dO + (size_t)r0 * C, C, 1.0f, dv,
                    ld); /* dv += Pᵀ dO */
        for (int i = r0; i < r1; i++) { /* dS = scale · P ∘ (dP − D) */
            const float *pr = p + (size_t)(i - r0) * T;
            float *dr = ds + (size_t)(i - r0) * T;
            for (int j = 0; j <= i; j++) dr[j] = scale * mp_softmax_dx(pr[j], dr[j], D[i]);
            for (int j = i + 1; j < r1; j++) dr[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rb, hs, r1, 1.0f, ds, T, k, ld, 0.0f,
                    dq + (size_t)r0 * ld, ld); /* dq = dS k */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rb, 1.0f, ds, T, q + (size_t)r0 * ld, ld, 1.0f,
                    dk, ld); /* dk += dSᵀ q */
    }
}

/* D_i = Σ_d dO_id O_id per (b, h, query) row, into datt (the CUDA kernels' first pass). */
static void flash_dot(float *D, const float *dout, const float *o, int B, int T, int C, int NH)
{
    const int hs = C / NH;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        for (int t = 0; t < T; t++) {
            const size_t at = ((size_t)b * T + t) * C + (size_t)h * hs;
            float dot = 0.0f;
            for (int d = 0; d < hs; d++) dot += dout[at + d] * o[at + d];
            D[(size_t)bh * T + t] = dot;
        }
    }
}

void attention_flash_backward(float *dqkv, float *datt, const float *dout, const float *qkv, const float *att, int B,
                              int T, int C, int NH)
{
    if (NH <= 0 || C % NH) KERN_ABORT("attention_flash_backward: C = %d is not a multiple of NH = %d", C, NH);
    flash_dot(datt, dout, att + mp_att_fused_o_offset(B, T, NH), B, T, C, NH);
    int oom = 0;
#pragma omp parallel reduction(| : oom)
    {
        float *p = malloc(2 * (size_t)RB * T * sizeof *p);
        oom = !p;
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++)
            if (p)
                flash_head_backward(dqkv, dout, qkv, att + (size_t)bh * T, datt + (size_t)bh * T, p, p + (size_t)RB * T,
                                    bh / NH, bh % NH, T, C, NH);
        free(p);
    }
    if (oom) KERN_ABORT("attention_flash_backward: out of memory for two %d-row blocks of %d keys", RB, T);
}
