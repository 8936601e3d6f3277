/* The end-of-training reports: time and energy, kernel times (train_report.h). */
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

int train_report_energy(const deck_t *d, run_files_t *files, const run_layout_t *lay, const energy_use_t *u, long steps, double seconds)
{
    const double kwh = energy_total_j(u) / 3.6e6;
    char how[400], path[4300], text[1024];
    if (u->gpu_wanted && !u->gpu_measured)
        runlog_printf(&files->log, "energy: the GPUs' energy is not measured (NVML: %s); the energy below is the host's "
                      "alone", u->gpu_why);
    train_energy_how(u, how, sizeof how);
    runlog_printf(&files->log, "done: %ld steps in %.1f s | energy %.3g kWh (%s) | CO2 %.3g g at %.0f gCO2/kWh", steps,
                  seconds, kwh, how, kwh * d->cost.grid_gco2_per_kwh, d->cost.grid_gco2_per_kwh);
    if (lay->rank != 0) return MP_OK;
    const long long tokens = (long long)steps * d->train.batch * d->model.seq_len;
    snprintf(path, sizeof path, "%s/energy.json", files->out_dir);
    if (energy_json(u, seconds, steps, tokens, d->cost.grid_gco2_per_kwh, text, sizeof text) != MP_OK)
        return MP_FAIL("%s: the report does not fit its buffer (a bug)", path);
    return publish_text(path, text);
}

/* Rank 0's top 8 kernels: calls, seconds and share of the timed steps' wall time. */
static void train_log_kernels(const deck_t *d, run_files_t *files, run_stage_t *st)
{
    const ktime_t *kt = &st->be.kt;
    const double wall = kt->wall_s, total = ktime_total(kt);
    int order[BE_K_COUNT];
    ktime_order(kt, order);
    runlog_printf(&files->log, "kernel times (debug.kernel_times=%d, rank 0, %s): %ld steps, %.3f s wall, kernels %.3f s "
                  "(%.1f%%); RUN/kernel_times.r<rank>.json has every rank's", d->debug.kernel_times,
                  be_ktime_timer(&st->be), kt->steps, wall, total, wall > 0 ? 100.0 * total / wall : 0.0);
    for (int i = 0; i < 8 && i < BE_K_COUNT && kt->calls[order[i]] > 0; i++) {
        const int k = order[i];
        runlog_printf(&files->log, "  %-24s %9ld calls %10.4f s %5.1f%%", ktime_names[k], kt->calls[k], kt->seconds[k],
                      wall > 0 ? 100.0 * kt->seconds[k] / wall : 0.0);
    }
}

int train_report_kernels(run_t *r)
{
    if (r->deck.debug.kernel_times <= 0) return MP_OK;
    be_ktime_flush(&r->st.be);
    if (r->lay.rank == 0) train_log_kernels(&r->deck, &r->files, &r->st);
    char path[4300], text[8192];
    snprintf(path, sizeof path, "%s/kernel_times.r%d.json", r->files.out_dir, r->lay.rank);
    if (ktime_json(&r->st.be.kt, r->st.be.ops->device, be_ktime_timer(&r->st.be), r->lay.rank, r->deck.debug.kernel_times, text,
                   sizeof text) != MP_OK)
        return MP_FAIL("%s: the report does not fit its buffer (a bug)", path);
    return publish_text(path, text);
}
