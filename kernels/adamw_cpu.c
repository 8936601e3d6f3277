/* AdamW, the squared norm and a vector add on the CPU.
 *
 * The optimizer is called once per tensor (src/model/optim.c), so these loops see anything from a
 * LayerNorm's C floats to the embedding's V·C. AdamW streams 28 bytes per element (read grad, p,
 * m, v; write p, m, v): vectorised it runs at the memory's speed, scalar its divisions and square
 * root cost more than the memory does. Small tensors stay on one thread: waking a passive OpenMP
 * pool costs more than updating a few thousand floats. */
#include <math.h>

#ifdef __AVX__
#include <immintrin.h>
#endif

#include "kernels.h"
#include "math_adamw.h"

/* Below this many elements a loop runs on the calling thread (about 10 µs of work at memory speed,
 * the order of a pool wake-up). */
enum { PAR_MIN = 1 << 15 };

/* mp_adamw's operations in its order on a vector of floats, so every lane gets the bits the scalar
 * code gives (the kernels build as ISO C, where gcc contracts nothing into FMAs; test_kernels checks
 * it). Written with intrinsics because gcc cannot vectorise mp_adamw itself: sqrtf may set errno,
 * the call that does so is a branch in the loop, and the build keeps -fmath-errno. */
#if defined(__AVX512F__)
#define VL 16
typedef __m512 vf_t;
#define vf_load _mm512_loadu_ps
#define vf_store _mm512_storeu_ps
#define vf_set1 _mm512_set1_ps
#define vf_add _mm512_add_ps
#define vf_sub _mm512_sub_ps
#define vf_mul _mm512_mul_ps
#define vf_div _mm512_div_ps
#define vf_sqrt _mm512_sqrt_ps
#elif defined(__AVX__)
#define VL 8
typedef __m256 vf_t;
#define vf_load _mm256_loadu_ps
#define vf_store _mm256_storeu_ps
#define vf_set1 _mm256_set1_ps
#define vf_add _mm256_add_ps
#define vf_sub _mm256_sub_ps
#define vf_mul _mm256_mul_ps
#define vf_div _mm256_div_ps
#define vf_sqrt _mm256_sqrt_ps
#endif

typedef struct {
    float lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale;
} adamw_k_t;

/* Elements [i0, i1) of one tensor. */
static void adamw_range(float *restrict param, const float *restrict grad, float *restrict m, float *restrict v,
                        size_t i0, size_t i1, const adamw_k_t *k)
{
    size_t i = i0;
#ifdef VL /* else scalar only */
    const vf_t b1 = vf_set1(k->beta1), b2 = vf_set1(k->beta2), omb1 = vf_set1(1.0f - k->beta1),
               omb2 = vf_set1(1.0f - k->beta2), bc1 = vf_set1(k->bc1), bc2 = vf_set1(k->bc2), eps = vf_set1(k->eps),
               lr = vf_set1(k->lr), wd = vf_set1(k->wd), sc = vf_set1(k->grad_scale);
    for (; i + VL <= i1; i += VL) {
        const vf_t g = vf_mul(vf_load(grad + i), sc), p = vf_load(param + i);
        const vf_t mm = vf_add(vf_mul(b1, vf_load(m + i)), vf_mul(omb1, g));
        const vf_t vv = vf_add(vf_mul(b2, vf_load(v + i)), vf_mul(vf_mul(omb2, g), g));
        vf_store(m + i, mm);
        vf_store(v + i, vv);
        const vf_t mhat = vf_div(mm, bc1), vhat = vf_div(vv, bc2);
        const vf_t step = vf_add(vf_div(mhat, vf_add(vf_sqrt(vhat), eps)), vf_mul(wd, p));
        vf_store(param + i, vf_sub(p, vf_mul(lr, step)));
    }
#endif
    for (; i < i1; i++)
        mp_adamw(&param[i], &m[i], &v[i], grad[i] * k->grad_scale, k->lr, k->beta1, k->beta2, k->eps, k->wd, k->bc1,
                 k->bc2);
}

void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, int t, float grad_scale)
{
    const adamw_k_t k = {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .wd = wd,
                         .bc1 = 1.0f - powf(beta1, (float)t), .bc2 = 1.0f - powf(beta2, (float)t),
                         .grad_scale = grad_scale};
    if (n < PAR_MIN) {
        adamw_range(param, grad, m, v, 0, n, &k);
        return;
    }
    /* 1024-element blocks (a multiple of every vector length) dealt out statically: each thread
     * gets a contiguous run of whole blocks, and the scalar tail is the tensor's last few floats */
    enum { BLK = 1024 };
    const long nblk = (long)((n + BLK - 1) / BLK);
#pragma omp parallel for schedule(static)
    for (long b = 0; b < nblk; b++) {
        const size_t i0 = (size_t)b * BLK, i1 = i0 + BLK < n ? i0 + BLK : n;
        adamw_range(param, grad, m, v, i0, i1, &k);
    }
}

void adamw_each(float *param, const float *grad, float *m, float *v, const size_t *off, const size_t *n,
                const float *wd, int count, float lr, float beta1, float beta2, float eps, int t, float grad_scale)
{
    for (int i = 0; i < count; i++)
        adamw_update(param + off[i], grad + off[i], m + off[i], v + off[i], n[i], lr, beta1, beta2, eps, wd[i], t,
                     grad_scale);
}

/* Σ x² of one chunk in LANES partial sums (element i goes to lane i mod LANES), the lanes added in
 * order at the end: the same bits whatever the vector width (AVX2, AVX-512 or scalar code), while
 * a single running sum would be a chain of dependent double additions, 4 cycles each. */
enum { LANES = 8 };
static double sumsq_chunk(const float *restrict x, size_t n)
{
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0, a4 = 0.0, a5 = 0.0, a6 = 0.0, a7 = 0.0;
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        a0 += (double)x[i] * x[i];
        a1 += (double)x[i + 1] * x[i + 1];
        a2 += (double)x[i + 2] * x[i + 2];
        a3 += (double)x[i + 3] * x[i + 3];
        a4 += (double)x[i + 4] * x[i + 4];
        a5 += (double)x[i + 5] * x[i + 5];
        a6 += (double)x[i + 6] * x[i + 6];
        a7 += (double)x[i + 7] * x[i + 7];
    }
    double tail = 0.0;
    for (; i < n; i++) tail += (double)x[i] * x[i];
    return ((((((a0 + a1) + a2) + a3) + a4) + a5) + a6) + a7 + tail;
}

/* Chunks of a fixed size, summed in chunk order: the result does not depend on the thread count. */
double sumsq(const float *x, size_t n)
{
    enum { CHUNK = 4096, MAXC = 1024 };
    double total = 0.0;
    for (size_t base = 0; base < n; base += (size_t)CHUNK * MAXC) {
        double part[MAXC];
        size_t left = n - base;
        int chunks = (int)((left + CHUNK - 1) / CHUNK);
        if (chunks > MAXC) chunks = MAXC;
#pragma omp parallel for schedule(static) if (left >= PAR_MIN)
        for (int c = 0; c < chunks; c++) {
            size_t i0 = base + (size_t)c * CHUNK, i1 = i0 + CHUNK < n ? i0 + CHUNK : n;
            part[c] = sumsq_chunk(x + i0, i1 - i0);
        }
        for (int c = 0; c < chunks; c++) total += part[c];
    }
    return total;
}

void sumsq_each(double *out, const float *const *x, const size_t *n, int count)
{
    for (int i = 0; i < count; i++) out[i] = sumsq(x[i], n[i]);
}

void vec_add(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
