#include "grad_norm.h"

#include <mpi.h>
#include <stdlib.h>

#include "check.h"

double grad_sumsq(run_t *r, const float *grads, size_t s0, size_t s1, int zero, int stages,
                  int (*keep)(const param_entry_t *, void *))
{
    const param_table_t *t = &r->st.model.tab;
    const int n = r->st.gtab.count;
    double *sq = MP_CALLOC((size_t)n, sizeof(double)), total = 0.0;
    /* the ranges to sum, listed first and summed in one call (a device backend waits for the host
     * once, not once per tensor), then added into sq in the order of the loop: the bits of summing
     * them one by one */
    const float **x = MP_CALLOC((size_t)t->count + 1, sizeof *x);
    size_t *len = MP_CALLOC((size_t)t->count + 1, sizeof *len);
    double *part = MP_CALLOC((size_t)t->count + 1, sizeof *part);
    int *dst = MP_CALLOC((size_t)t->count + 1, sizeof *dst), m = 0;
    if (!sq || !x || !len || !part || !dst) MP_ABORT("out of memory computing the gradient norm");
    /* one sum per canonical tensor, added in canonical order at the end: the same bits whatever
     * stage holds which tensor (the last stage's copy of wte is counted on the first stage) */
    for (int i = 0; i < t->count; i++) {
        const param_entry_t *e = &t->entries[i];
        size_t lo = e->offset > s0 ? e->offset : s0, hi = e->offset + e->numel < s1 ? e->offset + e->numel : s1;
        if (lo >= hi || (e->split == SPLIT_NONE && t->tp_rank != 0) || (keep && !keep(e, r))) continue;
        if (e->kind == PK_WTE && !t->has_embed) continue;
        x[m] = grads + (lo - s0), len[m] = hi - lo, dst[m++] = r->st.gidx[i];
    }
    if (m > 0) be_sumsq_each(&r->st.be, part, x, len, m);
    for (int k = 0; k < m; k++) sq[dst[k]] += part[k];
    free(x), free(len), free(part), free(dst);
    if (t->tp > 1) wait_allreduce_sum(&r->lay.wait, sq, n, MPI_DOUBLE, r->lay.grid.comm[GRID_TP], "the gradient-norm all-reduce");
    if (stages && r->lay.pp > 1)
        wait_allreduce_sum(&r->lay.wait, sq, n, MPI_DOUBLE, r->lay.grid.comm[GRID_PP], "the gradient-norm all-reduce");
    if (zero) wait_allreduce_sum(&r->lay.wait, sq, n, MPI_DOUBLE, r->lay.grid.replica, "the gradient-norm all-reduce");
    for (int i = 0; i < n; i++) total += sq[i];
    free(sq);
    return total;
}

double grad_sumsq_of(run_t *r, const float *grads, int (*keep)(const param_entry_t *, void *))
{
    return grad_sumsq(r, grads, 0, r->st.model.tab.total, 0, 1, keep);
}
