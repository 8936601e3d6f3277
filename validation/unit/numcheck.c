/* Numerical checking for the unit tests; see numcheck.h. */
#include "numcheck.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

float *nc_rnd(size_t n, uint64_t key, float scale)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = scale * (float)rng_normal(key, 47, i);
    return x;
}

double *nc_dbl(const float *x, size_t n)
{
    double *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

double nc_max_rel_d(const double *a, const double *b, size_t n)
{
    double num = 0, den = 1e-300;
    for (size_t i = 0; i < n; i++) {
        /* a NaN anywhere must fail, and fmax drops NaNs */
        if (a[i] != a[i] || b[i] != b[i]) return INFINITY;
        num = fmax(num, fabs(a[i] - b[i]));
        den = fmax(den, fabs(b[i]));
    }
    return num / den;
}

double nc_max_rel(const float *a, const double *b, size_t n)
{
    double *d = nc_dbl(a, n);
    const double e = nc_max_rel_d(d, b, n);
    free(d);
    return e;
}

double nc_dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void nc_fd_grad(double *g, nc_obj_fn f, void *ctx, double *x, size_t n, double h)
{
    for (size_t i = 0; i < n; i++) {
        const double save = x[i];
        x[i] = save + h;
        const double fp = f(ctx);
        x[i] = save - h;
        const double fm = f(ctx);
        x[i] = save;
        g[i] = (fp - fm) / (2 * h);
    }
}

int nc_same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof *a); }
