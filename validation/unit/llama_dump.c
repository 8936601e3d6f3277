/* Writes the Llama kernels' inputs, outputs and gradients to a folder for
 * validation/llama_kernels_torch.py to recompute with PyTorch (validation/test_llama_kernels_torch.sh):
 * one raw little-endian float32 file per tensor (NAME.f32) and dims.txt (KEY VALUE lines).
 * Usage: llama_dump DIR. Exit 0 when every file was written, 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "numcheck.h"

enum { B = 2, T = 9, NH = 4, KVH = 2, HS = 6, C = NH * HS, W = (NH + 2 * KVH) * HS, F = 11, N = B * T, POS0 = 3 };
static const float EPS = 1e-6f, THETA = 10000.0f;

static int put(const char *dir, const char *name, const float *x, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.f32", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return perror(path), 1;
    const int bad = fwrite(x, sizeof *x, n, f) != n;
    return (fclose(f) != 0 || bad) ? (perror(path), 1) : 0;
}

static int dump_rmsnorm(const char *dir)
{
    float *x = nc_rnd(N * C, 1, 1.5f), *w = nc_rnd(C, 2, 1), *dy = nc_rnd(N * C, 3, 1), *y = malloc(N * C * 4);
    float *rstd = malloc(N * 4), *dx = calloc(N * C, 4), *dw = calloc(C, 4);
    rmsnorm_forward(y, rstd, x, w, N, C, EPS);
    rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
    const int bad = put(dir, "rms_x", x, N * C) | put(dir, "rms_w", w, C) | put(dir, "rms_dy", dy, N * C) |
                    put(dir, "rms_y", y, N * C) | put(dir, "rms_dx", dx, N * C) | put(dir, "rms_dw", dw, C);
    free(x), free(w), free(dy), free(y), free(rstd), free(dx), free(dw);
    return bad;
}

static int dump_rope(const char *dir)
{
    float *cs = malloc((POS0 + T) * HS * 4), *x = nc_rnd(N * W, 4, 1), *y = malloc(N * W * 4),
          *dy = nc_rnd(N * W, 5, 1);
    rope_table_init(cs, POS0 + T, HS, THETA);
    int bad = put(dir, "rope_x", x, N * W) | put(dir, "rope_dy", dy, N * W);
    for (int i = 0; i < N * W; i++) y[i] = x[i];
    rope_forward(y, cs, POS0, B, T, NH, KVH, HS);
    rope_backward(dy, cs, POS0, B, T, NH, KVH, HS);
    bad |= put(dir, "rope_y", y, N * W) | put(dir, "rope_dx", dy, N * W);
    free(cs), free(x), free(y), free(dy);
    return bad;
}

static int dump_swiglu(const char *dir)
{
    float *x = nc_rnd(N * 2 * F, 6, 2), *dh = nc_rnd(N * F, 7, 1), *h = malloc(N * F * 4), *dx = malloc(N * 2 * F * 4);
    swiglu_forward(h, x, N, F);
    swiglu_backward(dx, dh, x, N, F);
    const int bad = put(dir, "swiglu_x", x, N * 2 * F) | put(dir, "swiglu_dh", dh, N * F) | put(dir, "swiglu_h", h, N * F) |
                    put(dir, "swiglu_dx", dx, N * 2 * F);
    free(x), free(dh), free(h), free(dx);
    return bad;
}

static int dump_gqa(const char *dir)
{
    float *qkv = nc_rnd(N * W, 8, 1), *dout = nc_rnd(N * C, 9, 1), *out = malloc(N * C * 4);
    float *att = calloc((size_t)B * NH * T * T, 4), *datt = malloc((size_t)B * NH * T * T * 4), *dqkv = malloc(N * W * 4);
    attention_gqa_forward(out, att, qkv, B, T, C, NH, KVH);
    attention_gqa_backward(dqkv, datt, dout, qkv, att, B, T, C, NH, KVH);
    const int bad = put(dir, "gqa_qkv", qkv, N * W) | put(dir, "gqa_dout", dout, N * C) | put(dir, "gqa_out", out, N * C) |
                    put(dir, "gqa_att", att, (size_t)B * NH * T * T) | put(dir, "gqa_dqkv", dqkv, N * W);
    free(qkv), free(dout), free(out), free(att), free(datt), free(dqkv);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 2) return fprintf(stderr, "usage: %s DIR\n", argv[0]), 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/dims.txt", argv[1]);
    FILE *f = fopen(path, "w");
    if (!f) return perror(path), 1;
    fprintf(f, "B %d\nT %d\nNH %d\nKVH %d\nHS %d\nF %d\nPOS0 %d\nEPS %.9g\nTHETA %.9g\n", B, T, NH, KVH, HS, F, POS0,
            EPS, THETA);
    if (fclose(f) != 0) return perror(path), 1;
    return dump_rmsnorm(argv[1]) | dump_rope(argv[1]) | dump_swiglu(argv[1]) | dump_gqa(argv[1]);
}
