/* The end-of-training reports: time and energy (train_report.h). */
#include "train_report.h"

#include <stdio.h>

#include "check.h"
#include "publish.h"

/* How the energy was obtained, for the "done:" line's parentheses: the host part's source, and the
 * GPU part's when there is one. */
static void train_energy_how(const energy_use_t *u, char *buf, size_t n)
{
    char host[128];
    if (u->host_measured) snprintf(host, sizeof host, "measured by RAPL");
    else snprintf(host, sizeof host, "estimate: %.0f W per busy core, from CPU time; RAPL not readable here",
                  ENERGY_WATTS_PER_CORE);
    if (u->gpu_measured)
        snprintf(buf, n, "host %.3g kWh %s + GPU %.3g kWh measured by NVML on %d GPU%s", u->host_j / 3.6e6, host,
                 u->gpu_j / 3.6e6, u->gpus, u->gpus == 1 ? "" : "s");
    else if (u->gpu_wanted)
        snprintf(buf, n, "%s; GPU not measured: host only", host);
    else
        snprintf(buf, n, "%s", host);
}

int train_report_energy(run_t *r, const energy_use_t *u, long steps, double seconds)
{
    const deck_t *d = &r->deck;
    const double kwh = energy_total_j(u) / 3.6e6;
    char how[400], path[4300], text[1024];
    if (u->gpu_wanted && !u->gpu_measured)
        runlog_printf(&r->log, "energy: the GPUs' energy is not measured (NVML: %s); the energy below is the host's "
                      "alone", u->gpu_why);
    train_energy_how(u, how, sizeof how);
    runlog_printf(&r->log, "done: %ld steps in %.1f s | energy %.3g kWh (%s) | CO2 %.3g g at %.0f gCO2/kWh", steps,
                  seconds, kwh, how, kwh * d->cost.grid_gco2_per_kwh, d->cost.grid_gco2_per_kwh);
    if (r->rank != 0) return MP_OK;
    const long long tokens = (long long)steps * d->train.batch * d->model.seq_len;
    snprintf(path, sizeof path, "%s/energy.json", r->out_dir);
    if (energy_json(u, seconds, steps, tokens, d->cost.grid_gco2_per_kwh, text, sizeof text) != MP_OK)
        return MP_FAIL("%s: the report does not fit its buffer (a bug)", path);
    return publish_text(path, text);
}
