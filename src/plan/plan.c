#include "plan.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "block_kind.h"
#include "deck.h"
#include "deck_model.h"
#include "devices.h"
#include "numparse.h"
#include "planner.h"
#include "profile.h"

#define PLAN_MAX_TOP 64

typedef struct {
    const cm_model_t *mo;
    const dev_kind_t *d;
    dev_prec_t prec;
    const profile_t *prof;     /* NULL: the device model's compute */
} plan_costs_ctx_t;

/* The profile's costs for micro-batches of B sequences at tp: scaled linearly in B (its rows are
 * independent) and divided by tp for compute and stash; tp's all-reduces are the caller's. */
static void plan_profile_scaled(const profile_t *prof, int B, int tp, cm_costs_t *c_p)
{
    const cm_costs_t *p = &prof->c;
    const double k = (double)B / p->B, t = (double)tp;
    cm_costs_t c = *p;
    c.B = B, c.tp = tp;
    c.fwd *= k / t, c.bwd *= k / t, c.embed_fwd *= k, c.embed_bwd *= k, c.head_fwd *= k / t, c.head_bwd *= k / t;
    c.bwd_b *= k / t, c.bwd_w *= k / t, c.head_bwd_w *= k / t;
    for (int i = 0; i < POLICY_STAGE_CHOICES; i++) c.extra[i] *= k / t, c.stash[i] *= k / t, c.wstash[i] *= k / t;
    c.offload_bytes *= k / t, c.act_bytes *= k, c.work_bytes *= k / t;
    c.block_params /= t, c.embed_params /= t;
    c.tp_fwd = c.tp_bwd = 0.0;
    *c_p = c;
}

/* Costs of (B, tp): the device model's, or the profile's (plan_profile_scaled) with the device
 * model's tp all-reduces. */
static int plan_costs(void *vctx, int B, int tp, cm_costs_t *c_p)
{
    const plan_costs_ctx_t *x = vctx;
    cm_costs_from_device(c_p, x->mo, x->d, x->prec, B, tp);
    if (!x->prof) return MP_OK;
    cm_costs_t c;
    plan_profile_scaled(x->prof, B, tp, &c);
    c.tp_fwd = c_p->tp_fwd, c.tp_bwd = c_p->tp_bwd;
    *c_p = c;
    return MP_OK;
}

static int plan_policy_of(policy_t p, policy_t *out)
{
    if (p < POLICY_STAGE_CHOICES) return *out = p, MP_OK;
    if (p == POLICY_BALANCE) return *out = POLICY_KEEP, MP_OK; /* keep, and the layout's balance flag */
    return MP_ERR;
}

/* One number of --layout, whole or refused: atoi took "pp=2x" as 2 and "pp=" as 0. Read as the
 * deck and the other options read theirs (numparse.h). MP_OK with *x_p set, or MP_ERR having said
 * which key and value. */
static int plan_layout_int(const char *k, const char *v, int *x_p)
{
    long long x;
    if (num_parse_long(v, &x) != MP_OK || x < INT_MIN || x > INT_MAX)
        return MP_FAIL("--layout %s: '%s' is not an integer", k, v);
    *x_p = (int)x;
    return MP_OK;
}

/* --layout's "key=value,..." over the deck's parallel keys. */
static int plan_parse_layout(const char *text, const deck_t *dk, cm_layout_t *lay, int *policy_auto_p)
{
    lay->tp = dk->parallel.tp, lay->pp = dk->parallel.pp, lay->dp = dk->parallel.dp;
    lay->v = deck_chunks_per_stage(dk), lay->mb = dk->train.micro_batch, lay->zero = dk->parallel.zero;
    lay->kind = (sched_kind_t)dk->parallel.schedule_kind, lay->prefetch = dk->memory.prefetch;
    policy_t pol = dk->memory.policy;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", text ? text : "");
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) return MP_FAIL("--layout: '%s' is not key=value", tok);
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        int *num = !strcmp(k, "tp") ? &lay->tp : !strcmp(k, "pp") ? &lay->pp : !strcmp(k, "dp") ? &lay->dp
                 : !strcmp(k, "v") ? &lay->v : !strcmp(k, "micro_batch") ? &lay->mb : !strcmp(k, "zero") ? &lay->zero
                 : NULL;
        if (num) {
            if (plan_layout_int(k, v, num) != MP_OK) return MP_ERR;
        } else if (!strcmp(k, "schedule")) {
            if (sched_kind_parse(v, &lay->kind) != MP_OK) return MP_FAIL("--layout: unknown schedule '%s'", v);
        } else if (!strcmp(k, "policy")) {
            int found = 0;
            for (int i = 0; i < POLICY_COUNT; i++)
                if (!strcmp(v, policy_names[i])) pol = (policy_t)i, found = 1;
            if (!found) return MP_FAIL("--layout: unknown policy '%s'", v);
        } else return MP_FAIL("--layout: unknown key '%s' (tp, pp, dp, v, micro_batch, schedule, zero, policy)", k);
    }
    /* a V kind keeps its name (v = 2 is its placement): cm_check_layout refuses it, naming why */
    if (lay->v > 1 && lay->kind != SCHED_INTERLEAVED && sched_kind_place(lay->kind) == SCHED_PLACE_LOOP)
        lay->kind = SCHED_INTERLEAVED;
    if (sched_kind_place(lay->kind) == SCHED_PLACE_V && lay->v == 1) lay->v = 2; /* the V's only v */
    if (lay->kind == SCHED_2BW) lay->kind = SCHED_1F1B; /* one step of 2bw is 1f1b's list (schedule.h) */
    if (lay->tp < 1 || lay->pp < 1 || lay->dp < 1 || lay->v < 1 || lay->mb < 1)
        return MP_FAIL("--layout: tp, pp, dp, v and micro_batch must be >= 1");
    *policy_auto_p = pol == POLICY_AUTO;
    policy_t cp = POLICY_KEEP;
    if (!*policy_auto_p && plan_policy_of(pol, &cp) != MP_OK) return MP_FAIL("memory.policy: no such policy (%d)", (int)pol);
    for (int s = 0; s < lay->pp && s < SIM_MAX_STAGES; s++) lay->policy[s] = cp;
    lay->balance = pol == POLICY_BALANCE, lay->balance_keep = dk->memory.balance_keep;
    return MP_OK;
}

static void plan_print_table(const plan_t *p, int n, const dev_kind_t *d, double tokens, double gco2, double deadline_h)
{
    for (int i = 0; i < n; i++) {
        const cm_layout_t *l = &p[i].lay;
        const cm_result_t *r = &p[i].res;
        const double j_tok = r->energy_j / (r->tokens_per_s * r->step_s);
        double mm = r->stage_mem[0];
        for (int s = 1; s < l->pp; s++) mm = r->stage_mem[s] > mm ? r->stage_mem[s] : mm;
        printf("plan %d: tp=%d pp=%d dp=%d v=%d micro_batch=%d schedule=%s zero=%d (m=%d)\n", i + 1, l->tp, l->pp, l->dp,
               l->v, l->mb, sched_kind_names[l->kind], l->zero, r->m);
        printf("  step %.4g s  tokens/s %.4g  TFLOP/s per rank %.4g  MFU %.1f%%  bubble %.1f%%  exposed comm %.4g s\n",
               r->step_s, r->tokens_per_s, r->flops_per_gpu / 1e12, 100 * r->mfu, 100 * r->bubble, r->exposed_comm_s);
        printf("  peak memory %.3g GB of %.3g  energy %.4g J/token", mm / 1e9, d->mem_bytes / 1e9, j_tok);
        if (tokens > 0)
            printf("  run of %.3g tokens: %.4g h, %.4g kWh, %.4g kg CO2", tokens, tokens / r->tokens_per_s / 3600,
                   j_tok * tokens / 3.6e6, j_tok * tokens / 3.6e6 * gco2 / 1000);
        if (deadline_h > 0) printf("  %s the %.4g h deadline", p[i].meets ? "meets" : "MISSES", deadline_h);
        printf("\n");
        for (int s = 0; s < l->pp; s++) {
            int layers = 0;
            for (int local = 0; local < l->v; local++) layers += l->chunk_layers[sched_stage_chunk(l->kind, s, local, l->pp)];
            const int K = l->pp * l->v; /* the embedding with chunk 0, the head with chunk K − 1 (a V: stage 0) */
            printf("  stage %d: %d layers%s%s, %s, busy %.4g s, peak %.3g GB\n", s, layers,
                   sched_chunk_stage(l->kind, 0, l->pp) == s ? " + embedding" : "",
                   sched_chunk_stage(l->kind, K - 1, l->pp) == s ? " + head" : "", l->balance ? "balance" : policy_names[l->policy[s]], r->stage_busy_s[s],
                   r->stage_mem[s] / 1e9);
        }
    }
}

static void plan_print_json(const plan_t *p, int n, double tokens, double gco2, double deadline_h)
{
    for (int i = 0; i < n; i++) {
        const cm_layout_t *l = &p[i].lay;
        const cm_result_t *r = &p[i].res;
        const double j_tok = r->energy_j / (r->tokens_per_s * r->step_s);
        printf("{\"rank\": %d, \"tp\": %d, \"pp\": %d, \"dp\": %d, \"v\": %d, \"micro_batch\": %d, \"schedule\": \"%s\", "
               "\"zero\": %d, \"m\": %d, \"step_time_s\": %.6g, \"tokens_per_s\": %.6g, \"tflops_per_gpu\": %.6g, "
               "\"mfu\": %.6g, \"bubble\": %.6g, \"exposed_comm_s\": %.6g, \"energy_j_per_token\": %.6g, "
               "\"fits\": %s, \"layers\": [",
               i + 1, l->tp, l->pp, l->dp, l->v, l->mb, sched_kind_names[l->kind], l->zero, r->m, r->step_s,
               r->tokens_per_s, r->flops_per_gpu / 1e12, r->mfu, r->bubble, r->exposed_comm_s, j_tok,
               r->fits ? "true" : "false");
        for (int k = 0; k < l->pp * l->v; k++) printf("%s%d", k ? ", " : "", l->chunk_layers[k]);
        printf("], \"policy\": [");
        for (int s = 0; s < l->pp; s++)
            printf("%s\"%s\"", s ? ", " : "", l->balance ? "balance" : policy_names[l->policy[s]]);
        printf("], \"stage_time_s\": [");
        for (int s = 0; s < l->pp; s++) printf("%s%.6g", s ? ", " : "", r->stage_busy_s[s]);
        printf("], \"peak_mem_bytes\": [");
        for (int s = 0; s < l->pp; s++) printf("%s%.6g", s ? ", " : "", r->stage_mem[s]);
        printf("]");
        if (tokens > 0)
            printf(", \"run_hours\": %.6g, \"run_kwh\": %.6g, \"run_kg_co2\": %.6g", tokens / r->tokens_per_s / 3600,
                   j_tok * tokens / 3.6e6, j_tok * tokens / 3.6e6 * gco2 / 1000);
        if (deadline_h > 0) printf(", \"deadline_h\": %.6g, \"meets_deadline\": %s", deadline_h, p[i].meets ? "true" : "false");
        printf("}\n");
    }
}

/* The schedules the search does not propose, and why (the zero-bubble ones the runtime cannot run
 * here): a reader comparing with `mindpipe sim` should not think they were ranked and lost. */
static void plan_print_left_out(plan_costs_ctx_t *cx, const dev_kind_t *d)
{
    cm_costs_t c;
    char why[640];
    if (plan_costs(cx, 1, 1, &c) != MP_OK) return;
    for (int k = 0; k < SCHED_KINDS; k++) /* at pp = 2: the kinds' refusals do not depend on pp beyond 1 */
        if (sched_kind_split((sched_kind_t)k) && !plan_split_usable((sched_kind_t)k, 2, &c, d, why, sizeof why))
            printf("not searched: %s (%s)\n", sched_kind_names[k], why);
}

static double plan_fastest_tps(const plan_t *p, int n)
{
    double best = 0.0;
    for (int i = 0; i < n; i++) best = p[i].res.tokens_per_s > best ? p[i].res.tokens_per_s : best;
    return best;
}

/* The deck with the plan's layout set, written to path. */
/* profile: the plan's --profile (NULL: none), which a zb1p or zbv deck plays its lists from, as
 * the plan did (cm_play_costs). */
static int plan_emit(const deck_t *dk0, const plan_t *p, const char *path, const char *profile)
{
    deck_t *dk = malloc(sizeof *dk);
    if (!dk) return MP_FAIL("out of memory");
    *dk = *dk0;
    const cm_layout_t *l = &p->lay;
    char set[DECK_STR + 64], layers[DECK_STR] = "", pols[DECK_STR] = "";
    int rc = MP_ERR, len = 0, plen = 0;
    for (int k = 0; k < l->pp * l->v; k++) len += snprintf(layers + len, sizeof layers - (size_t)len, "%s%d", k ? "," : "", l->chunk_layers[k]);
    const char *letters = policy_letters;
    for (int k = 0, layer = 0; k < l->pp * l->v; k++)
        for (int j = 0; j < l->chunk_layers[k]; j++, layer++)
            plen += snprintf(pols + plen, sizeof pols - (size_t)plen, "%s%c", layer ? "," : "",
                             l->balance ? 'b' : letters[l->policy[sched_chunk_stage(l->kind, k, l->pp)]]);
    const char *fmt[] = {"parallel.tp=%d", "parallel.pp=%d", "parallel.dp=%d", "parallel.zero=%d", "train.micro_batch=%d"};
    const int val[] = {l->tp, l->pp, l->dp, l->zero, l->mb};
    for (int i = 0; i < 5; i++) {
        snprintf(set, sizeof set, fmt[i], val[i]);
        if (deck_set(dk, set) != MP_OK) goto out;
    }
    snprintf(set, sizeof set, "parallel.schedule=%s", sched_kind_names[l->kind]);
    if (deck_set(dk, set) != MP_OK) goto out;
    /* a V's two chunks are its kind's (the deck refuses virtual_stages > 1 beside it) */
    snprintf(set, sizeof set, "parallel.virtual_stages=%d", sched_kind_place(l->kind) == SCHED_PLACE_V ? 1 : l->v);
    if (deck_set(dk, set) != MP_OK) goto out;
    snprintf(set, sizeof set, "pipeline.layers=%s", layers);
    if (deck_set(dk, set) != MP_OK) goto out;
    snprintf(set, sizeof set, "memory.layers=%s", pols);
    if (deck_set(dk, set) != MP_OK) goto out;
    /* the times the lists are played out with: the profile's, as planned (zb1p, zbv), else none */
    char *abs = sched_kind_played(l->kind) && profile ? realpath(profile, NULL) : NULL, pset[DECK_PATH + 32];
    const int cut = snprintf(pset, sizeof pset, "parallel.schedule_profile=%s", abs ? abs : "") >= (int)sizeof pset;
    free(abs);
    if (cut || deck_set(dk, "parallel.schedule_costs=unit") != MP_OK || deck_set(dk, pset) != MP_OK) goto out;
    FILE *f = fopen(path, "w");
    if (!f) {
        MP_ERROR("cannot write %s", path);
        goto out;
    }
    fprintf(f, "; written by mindpipe plan: tp=%d pp=%d dp=%d v=%d micro_batch=%d %s, predicted %.4g s per step\n",
            l->tp, l->pp, l->dp, l->v, l->mb, sched_kind_names[l->kind], p->res.step_s);
    rc = deck_write(dk, f);
    if (fclose(f) != 0) rc = MP_FAIL("cannot write %s", path);
    /* the cross-key rules (pipeline.layers against pp × v, ...) hold for what was written */
    if (rc == MP_OK && deck_load_model(dk, path, NULL, 0) != MP_OK) rc = MP_FAIL("the deck written to %s does not load", path);
out:
    free(dk);
    return rc;
}

/* Ranks per node: a GPU kind's devices per node; on a CPU kind the whole job shares this node. */
static int plan_per_node(const plan_cli_t *o, const dev_kind_t *d, int ranks)
{
    if (o->per_node > 0) return o->per_node;
    return d->node_cores > 0 ? ranks : d->per_node;
}

/* memory.layers (one policy per layer, as --emit writes it): the planner models one policy per
 * stage, so every layer of a stage must share it. */
static int plan_stage_policies(const deck_t *dk, cm_layout_t *lay)
{
    const int K = lay->pp * lay->v;
    int first[SIM_MAX_STAGES];
    for (int s = 0; s < lay->pp; s++) first[s] = -1;
    for (int k = 0, layer = 0; k < K; k++)
        for (int j = 0; j < lay->chunk_layers[k]; j++, layer++) {
            const int s = sched_chunk_stage(lay->kind, k, lay->pp), p = (int)dk->memory.per_layer.policy[layer];
            if (first[s] < 0) first[s] = p;
            if (p != first[s])
                return MP_FAIL("memory.layers: stage %d mixes %s and %s; the planner models one policy per stage", s,
                               policy_names[first[s]], policy_names[p]);
        }
    /* balance pairs stages: all of them or none */
    int nb = 0;
    for (int s = 0; s < lay->pp; s++) nb += first[s] == POLICY_BALANCE;
    if (nb && nb != lay->pp) return MP_FAIL("memory.layers: balance on some stages only; the planner models it on all");
    lay->balance = nb > 0, lay->balance_keep = dk->memory.balance_keep;
    for (int s = 0; s < lay->pp; s++) {
        policy_t cp;
        if (plan_policy_of((policy_t)first[s], &cp) != MP_OK)
            return MP_FAIL("memory.layers: %s is not modelled by the planner yet (docs/PLAN.md \"Not built yet\")",
                           policy_names[first[s]]);
        lay->policy[s] = cp;
    }
    return MP_OK;
}

/* One given layout: the deck's pipeline.layers when it matches, else the DP's boundaries (v = 1,
 * memory.policy auto) or balanced chunks. */
static int plan_one(const plan_cli_t *o, const deck_t *dk, const cm_model_t *mo, const dev_kind_t *d,
                    plan_costs_ctx_t *cx, dev_prec_t prec, plan_t *p)
{
    int pol_auto = 0;
    memset(p, 0, sizeof *p);
    cm_layout_t *lay = &p->lay;
    if (plan_parse_layout(o->layout, dk, lay, &pol_auto) != MP_OK) return MP_ERR;
    lay->prec = prec, lay->threads = dk->train.threads;
    lay->nodes_ranks = plan_per_node(o, d, lay->tp * lay->pp * lay->dp);
    if (o->ranks && o->ranks != lay->tp * lay->pp * lay->dp)
        return MP_FAIL("--ranks %d but the layout has tp × pp × dp = %d", o->ranks, lay->tp * lay->pp * lay->dp);
    const char *why = cm_tp_indivisible(mo, lay->tp);
    if (why) {
        const cm_model_t fam = cm_model_family(*mo);
        return MP_FAIL("--layout tp=%d: %s (%d heads, %d key/value heads, MLP width %d, vocabulary %d)", lay->tp, why,
                       fam.NH, cm_model_kv_heads(mo), fam.F, fam.V);
    }
    const int K = lay->pp * lay->v;
    if (K > CM_MAX_CHUNKS || lay->pp > SIM_MAX_STAGES || K > mo->L)
        return MP_FAIL("the layout has %d chunks for %d layers (at most %d stages)", K, mo->L, SIM_MAX_STAGES);
    if (mo->batch % (lay->mb * lay->dp)) return MP_FAIL("train.batch %d is not a multiple of micro_batch × dp", mo->batch);
    cm_costs_t c;
    if (plan_costs(cx, lay->mb, lay->tp, &c) != MP_OK) return MP_ERR;
    const int m = mo->batch / (lay->mb * lay->dp);
    if (dk->pipeline.chunks.n == K)
        for (int k = 0; k < K; k++) lay->chunk_layers[k] = dk->pipeline.chunks.layers[k];
    else if (lay->v == 1 && (pol_auto || dk->pipeline.chunks.automatic)) {
        /* the DP's boundaries (pipeline.layers = auto here uses the device kind, not train's nominal
         * one); its per-stage policies are kept only under memory.policy = auto */
        policy_t given[SIM_MAX_STAGES];
        memcpy(given, lay->policy, sizeof given);
        if (plan_partition(mo, &c, d, lay, m) < 0) return MP_FAIL("no stage boundaries and policies fit the device memory");
        if (!pol_auto) memcpy(lay->policy, given, sizeof given);
    } else cm_layout_balanced(lay, mo->L);
    if (pol_auto && lay->v > 1) return MP_FAIL("memory.policy = auto with v > 1: give a policy (docs/PLAN.md)");
    if (dk->memory.per_layer.n == mo->L && plan_stage_policies(dk, lay) != MP_OK) return MP_ERR;
    if (cm_evaluate(mo, &c, d, lay, &p->res) != MP_OK) return MP_FAIL("cannot simulate the layout: %s", p->res.error);
    return MP_OK;
}

int plan_main(const plan_cli_t *o)
{
    deck_t *dk = malloc(sizeof *dk);
    profile_t *prof = NULL;
    plan_t *plans = calloc(PLAN_MAX_TOP, sizeof *plans);
    int rc = 1, n = 0;
    if (!dk || !plans) goto out;
    if (deck_load_model(dk, o->deck_path, o->sets, o->nsets) != MP_OK) goto out;
    dev_kind_t d;
    if (devices_load(o->devices ? o->devices : devices_default_path(), o->device ? o->device : "cpu", &d) != MP_OK)
        goto out;
    dev_prec_t prec = dk->train.precision == DECK_PRECISION_BF16 ? DEV_PREC_BF16 : DEV_PREC_FP32;
    if (o->precision) {
        int found = 0;
        for (int i = 0; i < DEV_PRECS; i++)
            if (!strcmp(o->precision, dev_prec_names[i])) prec = (dev_prec_t)i, found = 1;
        if (!found) { rc = 2, MP_ERROR("--precision %s: bf16, tf32 or fp32", o->precision); goto out; }
    }
    plan_objective_t obj = PLAN_TIME;
    if (o->objective) {
        int found = 0;
        for (int i = 0; i < PLAN_OBJECTIVES; i++)
            if (!strcmp(o->objective, plan_objective_names[i])) obj = (plan_objective_t)i, found = 1;
        if (!found) { rc = 2, MP_ERROR("--objective %s: time, energy or carbon", o->objective); goto out; }
    }
    if (o->deadline_h < 0 || (o->deadline_h > 0 && o->tokens <= 0)) {
        rc = 2, MP_ERROR("--deadline HOURS needs --tokens N and HOURS > 0 (the run it bounds)");
        goto out;
    }
    const double min_tps = o->deadline_h > 0 ? o->tokens / (3600.0 * o->deadline_h) : 0.0;
    const model_cfg_t dcfg = deck_model_cfg(dk, NULL);
    cm_model_t mo = block_kind_cost_model(&dcfg, dk->train.batch);
    if (o->profile) {
        if (!(prof = malloc(sizeof *prof)) || profile_load(o->profile, prof) != MP_OK) goto out;
        if (prof->layers != mo.L || prof->dim != mo.C || prof->seq_len != mo.T) {
            MP_ERROR("%s profiles a model of %d layers, width %d, sequence %d; the deck has %d, %d, %d", o->profile,
                     prof->layers, prof->dim, prof->seq_len, mo.L, mo.C, mo.T);
            goto out;
        }
        if (d.node_cores > 0 && prof->p2p_bw > 0) /* the probe's figures replace the kind's links */
            d.intra.bw = d.inter.bw = prof->p2p_bw, d.intra.lat = d.inter.lat = prof->p2p_lat;
    }
    plan_costs_ctx_t cx = {&mo, &d, prec, prof};
    const int top = o->top > 0 ? (o->top < PLAN_MAX_TOP - 1 ? o->top : PLAN_MAX_TOP - 1) : (o->layout ? 1 : 5);
    plan_opts_t po = {0};
    if (o->layout) {
        if (plan_one(o, dk, &mo, &d, &cx, prec, &plans[0]) != MP_OK) { rc = 2; goto out; }
        plans[0].meets = plan_meets(&plans[0].res, min_tps);
        n = 1;
    } else {
        if (o->ranks < 1) { rc = 2, MP_ERROR("plan needs --ranks N (or --layout tp=..,pp=..,dp=..)"); goto out; }
        po = (plan_opts_t){o->ranks, plan_per_node(o, &d, o->ranks), prec, obj, 16, dk->memory.prefetch,
                          dk->train.threads, min_tps};
        if (plan_search(&mo, &d, plan_costs, &cx, &po, plans, top, &n) != MP_OK) goto out;
        if (n == 0) {
            MP_ERROR("no layout of %d ranks of %s fits the model in %.3g GB per device", o->ranks, d.name, d.mem_bytes / 1e9);
            goto out;
        }
    }
    const double gco2 = dk->cost.grid_gco2_per_kwh;
    if (o->json) plan_print_json(plans, n, o->tokens, gco2, o->deadline_h);
    else {
        printf("%s: %d layers, width %d, batch %d × %d tokens on %s (%s peak %.4g TFLOP/s)%s\n",
               o->deck_path ? o->deck_path : "(defaults)", mo.L, mo.C, mo.batch, mo.T, d.name, dev_prec_names[prec],
               d.peak[prec] / 1e12, prof ? ", per-layer costs from the profile" : "");
        plan_print_table(plans, n, &d, o->tokens, gco2, o->deadline_h);
        if (!o->layout) plan_print_left_out(&cx, &d);
    }
    if (o->emit && plan_emit(dk, &plans[0], o->emit, o->profile) != MP_OK) goto out;
    rc = n > 0 && plans[0].res.fits && plans[0].meets ? 0 : 1;
    if (n > 0 && !plans[0].meets) {
        /* the plans shown are ranked by the objective; what the user needs now is the fastest of all */
        double best = plan_fastest_tps(plans, n);
        if (!o->layout) {
            plan_opts_t fo = po;
            fo.objective = PLAN_TIME, fo.min_tokens_per_s = 0;
            int nf = 0;
            if (plan_search(&mo, &d, plan_costs, &cx, &fo, &plans[PLAN_MAX_TOP - 1], 1, &nf) == MP_OK && nf == 1)
                best = plans[PLAN_MAX_TOP - 1].res.tokens_per_s > best ? plans[PLAN_MAX_TOP - 1].res.tokens_per_s : best;
        }
        fprintf(o->json ? stderr : stdout, "no plan finishes %.3g tokens within %.4g h: the fastest needs %.4g h\n",
                o->tokens, o->deadline_h, o->tokens / best / 3600);
    }
    if (o->layout && !plans[0].res.fits)
        fprintf(o->json ? stderr : stdout, "the layout does not fit: a stage needs more than %.3g GB\n", d.mem_bytes / 1e9);
out:
    free(dk), free(prof), free(plans);
    return rc;
}

int plan_schedule_costs(const deck_t *dk, int K, const int *chunk_layers, sched_costs_t *out)
{
    const char *path = dk->parallel.schedule_profile;
    profile_t *prof = malloc(sizeof *prof);
    if (!prof) return MP_FAIL("out of memory");
    int rc = profile_load(path, prof);
    if (rc == MP_OK && (prof->layers != dk->model.layers || prof->dim != dk->model.dim || prof->seq_len != dk->model.seq_len))
        rc = MP_FAIL("parallel.schedule_profile=%s profiles a model of %d layers, width %d, sequence %d; the deck has "
                     "%d, %d, %d", path, prof->layers, prof->dim, prof->seq_len, dk->model.layers, dk->model.dim,
                     dk->model.seq_len);
    if (rc == MP_OK && !(prof->c.bwd_b > 0.0 && prof->c.bwd_w > 0.0))
        rc = MP_FAIL("parallel.schedule_profile=%s has no split of the backward into B and W (a profile older than "
                     "the zero-bubble schedules): profile the model again", path);
    policy_t pol[CM_MAX_CHUNKS];
    for (int k = 0, layer = 0; rc == MP_OK && k < K; layer += chunk_layers[k], k++)
        if (plan_policy_of(dk->memory.per_layer.n ? dk->memory.per_layer.policy[layer] : dk->memory.policy, &pol[k]) != MP_OK)
            pol[k] = POLICY_KEEP; /* auto: keep, the policy it starts from */
    if (rc == MP_OK) {
        cm_costs_t c;
        plan_profile_scaled(prof, dk->train.micro_batch, dk->parallel.tp, &c);
        *out = cm_play_costs(&c, K, chunk_layers, pol, 0.0);
        if (!(out->tf > 0.0 && out->tb > 0.0 && out->tw > 0.0))
            rc = MP_FAIL("parallel.schedule_profile=%s gives times %g, %g, %g: each must be positive", path, out->tf,
                         out->tb, out->tw);
    }
    free(prof);
    return rc;
}
