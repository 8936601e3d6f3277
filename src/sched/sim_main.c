/* `mindpipe sim` (ARCHITECTURE.md §5): the schedule simulator on one schedule, its report and each
 * stage's list, or the swap simulator's tables (--swap). Beside the simulators it reports on, as plan
 * and profile have their own *_main; the command line only fills sim_opts_t. */
#include "sim_main.h"

#include <stdio.h>

#include "check.h"
#include "schedule.h"
#include "sim.h"
#include "sim_nccl.h"
#include "swapsim.h"

/* `mindpipe sim --swap`: docs/MEMORY.md's tables from the swap simulator's default costs (swapsim.h). */
static int sim_swap(const sim_opts_t *c)
{
    static const char *const names[] = {"pipeline (rank r = stage r of a pp = R pipeline)",
                                        "replicas (R data-parallel replicas of stage 0 of a pp = 4 pipeline)"};
    for (int l = 0; l < 2; l++) {
        swapsim_cfg_t cfg;
        swapsim_cfg_default(&cfg, l ? SWAPSIM_REPLICAS : SWAPSIM_PIPELINE, 2);
        if (c->alpha >= 0.0) cfg.alpha = c->alpha;
        printf("%s%s; m = %d, tf = %g ms, tb = %g ms, %g MB each way per micro-batch, %g GB/s per direction, "
               "alpha = %g (assumed)\n\n",
               l ? "\n" : "", names[l], cfg.m, 1e3 * cfg.tf, 1e3 * cfg.tb, cfg.bytes / 1e6, cfg.bw / 1e9, cfg.alpha);
        if (swapsim_table(stdout, &cfg) != MP_OK) return 1;
    }
    return 0;
}

/* --costs "TF,TB,TW" (or "unit"), in the deck's parallel.schedule_costs syntax. MP_OK, or MP_ERR
 * naming the option. */
static int sim_parse_costs(const char *text, sched_costs_t *c)
{
    char why[160];
    if (sched_costs_parse(text, c, why, sizeof why) != MP_OK) return MP_FAIL("sim --costs: '%s' is %s", text, why);
    if (c->tf == 0.0) *c = sched_costs_unit;
    return MP_OK;
}

/* Stage s's list on one line after " |". */
static void sim_print_list(sched_kind_t kind, int s, const sim_opts_t *c, int v, const sched_costs_t *t)
{
    instr_list_t l;
    if (sched_build_costs(&l, kind, s, c->pp, c->m, v, t) != MP_OK) return;
    printf(" |");
    for (int i = 0; i < l.n; i++)
        l.ins[i].mb >= 0 ? printf(" %s(%d.%d)", op_names[l.ins[i].op], l.ins[i].mb, l.ins[i].chunk)
                         : printf(" %s", op_names[l.ins[i].op]);
    sched_free(&l);
}

/* The rest of `mindpipe sim`'s report on a valid schedule r: 1f1b's for the same pp, m and times
 * beside it, then each stage's stash (and list). */
static void sim_report(sched_kind_t kind, const sim_opts_t *c, int v, const sched_costs_t *t, const sim_result_t *r)
{
    const int split = sched_kind_split(kind);
    printf("  makespan %.2f tf, busy %.2f tf per stage, bubble %.4f", r->makespan / t->tf, r->busy / t->tf, r->bubble);
    if (split) printf(" (from each stage's first work, the Zero Bubble paper's rate: %.4f)", r->span_bubble);
    printf("\n");
    sim_result_t f;
    if (kind != SCHED_1F1B && sim_run_costs(SCHED_1F1B, c->pp, c->m, 1, t, &f) == MP_OK)
        printf("  1f1b, same pp, m and times: bubble %.4f, peak stash %.2f stage units; %s: bubble %.4f, peak stash %.2f\n",
               f.bubble, f.peak_units_max, c->schedule, r->bubble, r->peak_units_max);
    for (int s = 0; s < c->pp; s++) {
        printf("  stage %d: peak stashed micro-batches %d", s, r->peak_stash[s]);
        if (split || v > 1)
            printf(" (%.2f stage units; %d awaiting their B)", r->peak_units[s], r->peak_stash_b[s]);
        if (c->list) sim_print_list(kind, s, c, v, t);
        printf("\n");
    }
}

/* `mindpipe sim`: the schedule simulator on one (kind, pp, m, v); exit 0 iff the schedule is valid
 * under both matching rules (MPI's tags, NCCL's order). */
int sim_main(const sim_opts_t *c)
{
    if (c->swap) return sim_swap(c);
    sched_kind_t kind;
    if (!c->schedule || sched_kind_parse(c->schedule, &kind) != MP_OK || c->pp < 1 || c->m < 1)
        return MP_ERROR("sim needs --schedule gpipe|1f1b|interleaved|2bw|zb1p|zbv|dualpipev, --pp P >= 1 and --m M >= 1"),
               2;
    const int v = c->v > 0 ? c->v : sched_kind_default_v(kind);
    sched_costs_t t = sched_costs_unit;
    if (c->costs && sim_parse_costs(c->costs, &t) != MP_OK) return 2;
    sim_result_t r, n;
    int rc = sim_run_costs(kind, c->pp, c->m, v, &t, &r);
    if (rc != MP_OK) {
        printf("%s pp=%d m=%d v=%d: INVALID: %s\n", c->schedule, c->pp, c->m, v, r.error);
        return 1;
    }
    instr_list_t lists[SIM_MAX_STAGES];
    if (sim_build_lists_costs(lists, kind, c->pp, c->m, v, &t, &n) == MP_OK) {
        rc = sim_nccl_lists(lists, c->pp, c->m, v, &n);
        sim_free_lists(lists, c->pp);
    }
    if (rc != MP_OK) {
        printf("%s pp=%d m=%d v=%d: INVALID under NCCL's order: %s\n", c->schedule, c->pp, c->m, v, n.error);
        return 1;
    }
    printf("%s pp=%d m=%d v=%d: valid (no deadlock, every send matched, under MPI's tags and NCCL's order); times tf %g, "
           "B %g, W %g per stage (a fused backward B + W%s):\n", c->schedule, c->pp, c->m, v, t.tf, t.tb, t.tw,
           c->costs ? "" : ": the cost model tb = 2 tf");
    sim_report(kind, c, v, &t, &r);
    return 0;
}
