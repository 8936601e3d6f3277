#include "devmodel.h"

#include <math.h>
#include <stdio.h>

#include "check.h"

const char *const dev_prec_names[DEV_PRECS] = {"bf16", "tf32", "fp32"};

double dev_eff(const dev_kind_t *d, double s)
{
    if (d->neff <= 0) return 1.0;
    if (s <= d->eff_size[0]) return d->eff[0];
    for (int i = 1; i < d->neff; i++)
        if (s <= d->eff_size[i]) {
            /* linear in log s: GEMM efficiency rises roughly with the log of the tile count */
            const double a = log(d->eff_size[i - 1]), b = log(d->eff_size[i]), x = log(s);
            return d->eff[i - 1] + (d->eff[i] - d->eff[i - 1]) * (x - a) / (b - a);
        }
    return d->eff[d->neff - 1];
}

double dev_gemm_time(const dev_kind_t *d, dev_prec_t p, double M, double N, double K)
{
    if (M <= 0 || N <= 0 || K <= 0) return 0.0;
    const double s = cbrt(M * N * K);
    return 2.0 * M * N * K / (d->peak[p] * dev_eff(d, s));
}

double dev_mem_time(const dev_kind_t *d, double bytes)
{
    return bytes > 0 ? bytes / d->mem_bw : 0.0;
}

const dev_link_t *dev_group_link(const dev_kind_t *d, int g, int stride)
{
    if (g <= 1) return &d->intra;
    return (double)stride * g <= d->per_node ? &d->intra : &d->inter;
}

double dev_allreduce_time(const dev_link_t *l, int g, double bytes)
{
    if (g <= 1 || bytes <= 0) return 0.0;
    const double ring = 2.0 * (g - 1) / g * bytes / l->bw + 2.0 * (g - 1) * l->lat;
    const double tree = 2.0 * ceil(log2((double)g)) * (l->lat + bytes / l->bw);
    return ring < tree ? ring : tree;
}

double dev_allgather_time(const dev_link_t *l, int g, double bytes)
{
    if (g <= 1 || bytes <= 0) return 0.0;
    return (double)(g - 1) / g * bytes / l->bw + (g - 1) * l->lat;
}

double dev_p2p_time(const dev_link_t *l, double bytes)
{
    return bytes > 0 ? l->lat + bytes / l->bw : 0.0;
}

int dev_kind_check(const dev_kind_t *d, char *why, int why_len)
{
    for (int p = 0; p < DEV_PRECS; p++)
        if (!(d->peak[p] > 0)) return snprintf(why, (size_t)why_len, "peak_%s must be > 0", dev_prec_names[p]), MP_ERR;
    if (!(d->mem_bw > 0) || !(d->mem_bytes > 0))
        return snprintf(why, (size_t)why_len, "mem_bw and memory must be > 0"), MP_ERR;
    if (!(d->intra.bw > 0) || !(d->inter.bw > 0) || d->intra.lat < 0 || d->inter.lat < 0 || !(d->host_bw > 0))
        return snprintf(why, (size_t)why_len, "link bandwidths must be > 0 and latencies >= 0"), MP_ERR;
    if (d->per_node < 1) return snprintf(why, (size_t)why_len, "per_node must be >= 1"), MP_ERR;
    if (d->idle_w < 0 || d->busy_w < d->idle_w)
        return snprintf(why, (size_t)why_len, "power: 0 <= idle_w <= busy_w"), MP_ERR;
    for (int i = 0; i < d->neff; i++) {
        if (!(d->eff[i] > 0 && d->eff[i] <= 1) || !(d->eff_size[i] > 0))
            return snprintf(why, (size_t)why_len, "efficiency point %d: size > 0 and eff in (0, 1]", i + 1), MP_ERR;
        if (i && d->eff_size[i] <= d->eff_size[i - 1])
            return snprintf(why, (size_t)why_len, "efficiency sizes must increase (point %d)", i + 1), MP_ERR;
    }
    return MP_OK;
}
