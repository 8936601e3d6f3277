#include "rebalance.h"

#include <stdlib.h>
#include <string.h>

void rebalance_costs(const rebalance_in_t *in, double *cost_p, double *embed_p, double *head_p)
{
    *embed_p = *head_p = 0.0;
    for (int s = 0, l0 = 0; s < in->pp; l0 += in->sizes[s], s++) {
        double work = 0.0;
        for (int l = l0; l < l0 + in->sizes[s]; l++) work += in->w[l];
        if (s == 0) work += in->w_embed;
        if (s == in->pp - 1) work += in->w_head;
        /* seconds per unit of modelled work on this stage: what the model got wrong about these
         * layers (and their rank's speed) is what the measurement corrects */
        const double f = work > 0.0 ? in->stage_s[s] / work : 0.0;
        for (int l = l0; l < l0 + in->sizes[s]; l++) cost_p[l] = f * in->w[l];
        if (s == 0) *embed_p = f * in->w_embed;
        if (s == in->pp - 1) *head_p = f * in->w_head;
    }
}

double rebalance_split(int L, int pp, const double *cost, double embed, double head, int *sizes_p)
{
    if (pp < 1 || L < pp) return -1.0;
    const size_t W = (size_t)L + 1;
    double *pre = malloc(W * sizeof *pre), *best = malloc((size_t)pp * W * sizeof *best);
    int *cut = malloc((size_t)pp * W * sizeof *cut);
    if (!pre || !best || !cut) {
        free(pre), free(best), free(cut);
        return -1.0;
    }
    pre[0] = 0.0;
    for (int l = 0; l < L; l++) pre[l + 1] = pre[l] + cost[l];
    /* best[s·W + j]: the least slowest-stage cost of layers [0, j) on stages 0..s, stage s ending at
     * j; cut[s·W + j]: where stage s begins in it. Ties keep the earliest cut: deterministic. */
    for (int j = 1; j <= L; j++) best[j] = embed + pre[j] + (pp == 1 ? head : 0.0), cut[j] = 0;
    for (int s = 1; s < pp; s++) {
        const double extra = s == pp - 1 ? head : 0.0;
        for (int j = s + 1; j <= L - (pp - 1 - s); j++) {
            double b = -1.0;
            int c = s;
            for (int i = s; i < j; i++) {
                const double prev = best[(size_t)(s - 1) * W + i], here = pre[j] - pre[i] + extra;
                const double v = prev > here ? prev : here;
                if (b < 0.0 || v < b) b = v, c = i;
            }
            best[(size_t)s * W + j] = b, cut[(size_t)s * W + j] = c;
        }
    }
    const double slowest = best[(size_t)(pp - 1) * W + L];
    for (int s = pp - 1, j = L; s >= 0; s--) {
        const int i = cut[(size_t)s * W + j];
        sizes_p[s] = j - i;
        j = i;
    }
    free(pre), free(best), free(cut);
    return slowest;
}

double rebalance_plan(const rebalance_in_t *in, int *sizes_p, double *old_p, double *new_p)
{
    double *cost = malloc((size_t)(in->L > 0 ? in->L : 1) * sizeof *cost), embed, head, old = 0.0;
    if (!cost) return -1.0;
    rebalance_costs(in, cost, &embed, &head);
    for (int s = 0; s < in->pp; s++) old = in->stage_s[s] > old ? in->stage_s[s] : old;
    const double now = rebalance_split(in->L, in->pp, cost, embed, head, sizes_p);
    free(cost);
    if (now < 0.0) return -1.0;
    *old_p = old, *new_p = now;
    if (old <= 0.0 || !memcmp(sizes_p, in->sizes, (size_t)in->pp * sizeof *sizes_p)) return 0.0;
    return 1.0 - now / old;
}
