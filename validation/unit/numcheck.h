/* Numerical checking for the unit tests: random inputs keyed like the rest of the house (rng.h),
 * errors relative to a double reference, central differences in double. */
#ifndef MP_NUMCHECK_H
#define MP_NUMCHECK_H

#include <stddef.h>
#include <stdint.h>

/* n floats, scale · N(0,1), a pure function of key. malloc'd. */
float *nc_rnd(size_t n, uint64_t key, float scale);
/* A double copy of x (n). malloc'd. */
double *nc_dbl(const float *x, size_t n);
/* max |a − b| / max |b|: the error relative to the reference's scale. */
double nc_max_rel(const float *a, const double *b, size_t n);
double nc_max_rel_d(const double *a, const double *b, size_t n);
double nc_dot(const double *a, const double *b, size_t n);
/* g (n) = central differences (step h) of f with respect to x (n), which f reads through ctx;
 * x is restored. */
typedef double (*nc_obj_fn)(void *ctx);
void nc_fd_grad(double *g, nc_obj_fn f, void *ctx, double *x, size_t n, double h);
/* 1 when a and b (n floats) are the same bits. */
int nc_same(const float *a, const float *b, size_t n);

#endif
