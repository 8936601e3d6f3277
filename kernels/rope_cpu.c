/* Rotary position embeddings on the CPU, in place on the q and k heads of a packed qkv buffer;
 * per-pair math in math_rope.h. Legend in kernels.h. Every element is rotated on its own, so the
 * result does not depend on the thread count. */
#include "kernels.h"
#include "math_rope.h"

void rope_table_init(float *cs, int Tmax, int hs, float theta)
{
    const int h2 = hs / 2;
    for (int t = 0; t < Tmax; t++)
        for (int i = 0; i < h2; i++) {
            const double a = mp_rope_angle(t, i, hs, theta);
            cs[(size_t)t * hs + i] = (float)cos(a);
            cs[(size_t)t * hs + h2 + i] = (float)sin(a);
        }
}

/* The q and k heads of every row rotated by sign·angle: sign −1 is the backward's transpose. */
static void rope_apply(float *qkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs, float sign)
{
    const int h2 = hs / 2, heads = NH + KVH, ld = (NH + 2 * KVH) * hs;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)B * T; r++) {
        const float *c = cs + (size_t)(pos0 + r % T) * hs, *s = c + h2;
        for (int h = 0; h < heads; h++) { /* q's NH heads, then k's KVH: contiguous in the row */
            float *lo = qkv + (size_t)r * ld + (size_t)h * hs, *hi = lo + h2;
#pragma omp simd
            for (int i = 0; i < h2; i++) {
                const float x0 = lo[i], x1 = hi[i], si = sign * s[i];
                lo[i] = mp_rope_lo(x0, x1, c[i], si);
                hi[i] = mp_rope_hi(x0, x1, c[i], si);
            }
        }
    }
}

void rope_forward(float *qkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs)
{
    rope_apply(qkv, cs, pos0, B, T, NH, KVH, hs, 1.0f);
}

void rope_backward(float *dqkv, const float *cs, int pos0, int B, int T, int NH, int KVH, int hs)
{
    rope_apply(dqkv, cs, pos0, B, T, NH, KVH, hs, -1.0f);
}
