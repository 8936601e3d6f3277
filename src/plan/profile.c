#include "profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "backend.h"
#include "check.h"
#include "deck.h"
#include "block_kind.h"
#include "deck_model.h"
#include "kernels.h"
#include "model.h"
#include "perf.h"
#include "probe.h"
#include "wait.h"

/* Repetitions of each timed pass; the fastest is kept: on a shared host (ENVIRONMENT.md) other work
 * only ever slows a pass down, so the minimum is the best estimate of the machine's own speed.
 * On one thread the passes are timed by that thread's CPU clock, which a preemption does not
 * advance: on a dedicated core it reads what the wall clock would, and on a loaded host the deeper
 * model still measures slower (with the wall clock a 2-core host running other ranks could time
 * every deep pass preempted and none of the shallow ones). With more threads the wall clock: the
 * main thread's CPU time would miss the others' work and count none of their waits. */
#define PROFILE_REPS 7

typedef struct {
    double fwd, bwd;         /* the fastest passes, seconds, one micro-batch through the whole model */
    double bwd_b, bwd_w;     /* the same backward split (model_backward_b, _w); 0 when not timed */
    double wbytes;           /* W's stash of the whole model (model_wstash_bytes) */
    double bytes;            /* activation bytes of one micro-batch (acts_part_bytes) */
    double params;           /* parameters */
} profile_run_t;

static double fastest(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

/* One model of `layers` layers of the deck's shape, every block in `mode`, on the CPU backend:
 * forward and backward of one micro-batch timed `reps` times (at most PROFILE_REPS) after a warm-up;
 * with `split` each rep also times a second forward's backward as B then W (the zero-bubble
 * schedules' halves: timed apart from the fused one, so what splitting costs shows). */
static int profile_model_reps(const deck_t *d, int layers, block_mode_t mode, int reps, int split,
                              int cpu_clock, const wait_cfg_t *w, profile_run_t *out)
{
    double (*const now)(void) = cpu_clock ? perf_thread_cpu_now : perf_now;
    const int B = d->train.micro_batch, T = d->model.seq_len;
    /* `layers` uniform blocks h{heads}m{mlp_ratio} and no supernet candidates, whatever the deck's
     * depth: model.blocks' shapes enter the plan as scales of a uniform block (autosplit_layer_costs) */
    model_cfg_t cfg = deck_model_cfg(d, NULL);
    cfg.layers = layers, cfg.shape = NULL;
    arena_t arena;
    backend_t be;
    model_t m;
    acts_t a;
    scratch_t s;
    wstash_t ws;
    memset(&ws, 0, sizeof ws);
    int rc = MP_ERR, l0 = 0;
    arena_init(&arena, 0);
    if (be_init(&be, BE_CPU, &arena, 0, 0, 0, w) != MP_OK) return MP_ERR;
    if (model_create(&m, &cfg, &be, &arena, 1, &l0, &layers, 1, 1, 1, 1, 0) != MP_OK) goto err_be;
    unsigned char *modes = malloc((size_t)layers);
    if (!modes) goto err_model;
    memset(modes, mode, (size_t)layers);
    if (model_set_modes(&m, modes) != MP_OK) goto err_modes;
    size_t mov = 0;
    out->bytes = (double)acts_part_bytes(&m, B, layers, 1, &mov);
    out->params = (double)m.tab.total;
    if (acts_create(&a, &m, B, &arena) != MP_OK) goto err_modes;
    if (scratch_create(&s, &m, B, &arena) != MP_OK) goto err_acts;
    for (int i = 0; i < B * T; i++) a.inputs[i] = a.targets[i] = (i * 7 + 3) % d->model.vocab;
    const model_part_t pt = model_whole(&m);
    out->wbytes = (double)model_wstash_bytes(&m, &pt, B);
    if (split && wstash_create(&ws, &m, B, model_wstash_bytes(&m, &pt, B), &arena) != MP_OK) goto err_scratch;
    acts_bind(&a, &m, &pt, NULL, &s);
    double tf[PROFILE_REPS], tb[PROFILE_REPS], tbb[PROFILE_REPS], tbw[PROFILE_REPS];
    reps = reps < 1 ? 1 : reps > PROFILE_REPS ? PROFILE_REPS : reps;
    const float dloss = 1.0f / (float)(B * T);
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up (first touch of every buffer) */
        const double t0 = now();
        model_forward_part(&m, &pt, &a, &s, NULL);
        const double t1 = now();
        model_backward_part(&m, &pt, &a, &s, dloss, NULL, NULL);
        const double t2 = now();
        if (r >= 0) tf[r] = t1 - t0, tb[r] = t2 - t1;
        if (!split) continue;
        model_forward_part(&m, &pt, &a, &s, NULL);
        const double t3 = now();
        model_backward_b(&m, &pt, &a, &s, dloss, NULL, &ws);
        const double t4 = now();
        model_backward_w(&m, &pt, &a, &s, NULL, &ws, NULL);
        const double t5 = now();
        if (r >= 0) tbb[r] = t4 - t3, tbw[r] = t5 - t4;
    }
    out->fwd = fastest(tf, reps), out->bwd = fastest(tb, reps);
    out->bwd_b = split ? fastest(tbb, reps) : 0.0, out->bwd_w = split ? fastest(tbw, reps) : 0.0;
    rc = MP_OK;
    if (split) wstash_destroy(&ws, &arena);
err_scratch:
    scratch_destroy(&s, &arena);
err_acts:
    acts_destroy(&a, &arena);
err_modes:
    free(modes);
err_model:
    model_destroy(&m);
err_be:
    be_destroy(&be);
    return rc;
}

static int profile_model(const deck_t *d, int layers, block_mode_t mode, int cpu_clock, const wait_cfg_t *w,
                         profile_run_t *out)
{
    return profile_model_reps(d, layers, mode, PROFILE_REPS, mode == MODE_KEEP, cpu_clock, w, out);
}

int profile_time_model(const deck_t *d, int layers, block_mode_t mode, int reps, const wait_cfg_t *w, double *fwd,
                       double *bwd)
{
    profile_run_t run;
    if (profile_model_reps(d, layers, mode, reps, 0, 0, w, &run) != MP_OK) return MP_ERR;
    *fwd = run.fwd, *bwd = run.bwd;
    return MP_OK;
}

/* Per-layer costs from two depths: a block is the difference of L and 1 layers ÷ (L − 1); what a
 * one-layer model takes beyond a block is the embedding and the head. */
static int profile_compute(const deck_t *d, int threads, const wait_cfg_t *w, profile_t *p)
{
    const int cpu_clock = threads == 1;
    const int L = d->model.layers;
    if (L < 2) return MP_FAIL("profile needs model.layers >= 2 (per-layer costs come from two depths)");
    profile_run_t deep[3], one[3];
    static const block_mode_t modes[3] = {MODE_KEEP, MODE_RECOMPUTE, MODE_SELECTIVE};
    for (int i = 0; i < 3; i++)
        if (profile_model(d, L, modes[i], cpu_clock, w, &deep[i]) != MP_OK ||
            profile_model(d, 1, modes[i], cpu_clock, w, &one[i]) != MP_OK)
            return MP_ERR;
    cm_costs_t *c = &p->c;
    memset(c, 0, sizeof *c);
    const double n = L - 1.0, B = d->train.micro_batch, T = d->model.seq_len, C = d->model.dim;
    c->B = d->train.micro_batch, c->tp = 1;
    c->fwd = (deep[0].fwd - one[0].fwd) / n, c->bwd = (deep[0].bwd - one[0].bwd) / n;
    if (c->fwd <= 0 || c->bwd <= 0) return MP_FAIL("profile: the deeper model was not slower (a noisy host? run again)");
    /* a block under recompute/selective: its backward's growth over keep's is the re-run forward */
    const double rec = (deep[1].bwd - one[1].bwd) / n - c->bwd, sel = (deep[2].bwd - one[2].bwd) / n - c->bwd;
    c->extra[POLICY_RECOMPUTE] = rec > 0 ? rec : 0.0, c->extra[POLICY_SELECTIVE] = sel > 0 ? sel : 0.0;
    /* B and W per block as the fused backward is (keep; the policies' re-run forward is B's); the
     * one-layer model's W beyond a block is the head's product (the embedding's gradient is B's) */
    c->bwd_b = (deep[0].bwd_b - one[0].bwd_b) / n, c->bwd_w = (deep[0].bwd_w - one[0].bwd_w) / n;
    if (c->bwd_b <= 0 || c->bwd_w <= 0)
        return MP_FAIL("profile: the deeper model's B or W was not slower (a noisy host? run again)");
    /* the one-layer model's remainder is embedding + head; the embedding is a gather (B·T·C floats
     * read, written and, backward, accumulated), taken as 2% of the remainder */
    /* clamped: at tiny shapes the difference of two noisy times can dip below zero */
    const double rest_f = fmax(one[0].fwd - c->fwd, 0.0), rest_b = fmax(one[0].bwd - c->bwd, 0.0);
    c->embed_fwd = 0.02 * rest_f, c->head_fwd = 0.98 * rest_f;
    c->embed_bwd = 0.02 * rest_b, c->head_bwd = 0.98 * rest_b;
    c->head_bwd_w = fmin(fmax(one[0].bwd_w - c->bwd_w, 0.0), c->head_bwd);
    for (int i = 0; i < 3; i++) {
        const policy_t pol = i == 0 ? POLICY_KEEP : i == 1 ? POLICY_RECOMPUTE : POLICY_SELECTIVE;
        c->stash[pol] = (deep[i].bytes - one[i].bytes) / n;
        c->wstash[pol] = (deep[i].wbytes - one[i].wbytes) / n;
    }
    c->stash[POLICY_OFFLOAD] = 0.0, c->offload_bytes = c->stash[POLICY_KEEP], c->wstash[POLICY_OFFLOAD] = c->wstash[POLICY_KEEP];
    c->act_bytes = B * T * C * 4.0;
    c->block_params = (deep[0].params - one[0].params) / n;
    c->embed_params = one[0].params - c->block_params, c->head_params = 0.0;
    c->work_bytes = one[0].bytes - c->stash[POLICY_KEEP];
    c->state_bytes_per_param = 16.0, c->opt_bytes_per_param = 8.0;
    c->optimizer_s_per_param = 28.0 / 30e9; /* not timed here: DRAM's measured 30 GB/s (inputs/devices.ini) */
    const model_cfg_t cfg = deck_model_cfg(d, NULL);
    const cm_model_t mo = block_kind_cost_model(&cfg, d->train.batch);
    c->flops_per_token = cm_model_flops_per_token(&mo);
    p->layers = L, p->dim = d->model.dim, p->seq_len = d->model.seq_len;
    return MP_OK;
}

static int profile_write(const char *path, const profile_t *p)
{
    FILE *f = fopen(path, "w");
    if (!f) return MP_FAIL("cannot write %s", path);
    const cm_costs_t *c = &p->c;
    fprintf(f, "{\"layers\": %d, \"dim\": %d, \"seq_len\": %d, \"micro_batch\": %d, \"threads\": %d, \"ranks\": %d,\n",
            p->layers, p->dim, p->seq_len, c->B, c->cpu_threads, p->ranks);
    fprintf(f, " \"block_fwd_s\": %.9g, \"block_bwd_s\": %.9g, \"recompute_extra_s\": %.9g, \"selective_extra_s\": %.9g,\n",
            c->fwd, c->bwd, c->extra[POLICY_RECOMPUTE], c->extra[POLICY_SELECTIVE]);
    fprintf(f, " \"embed_fwd_s\": %.9g, \"embed_bwd_s\": %.9g, \"head_fwd_s\": %.9g, \"head_bwd_s\": %.9g,\n",
            c->embed_fwd, c->embed_bwd, c->head_fwd, c->head_bwd);
    fprintf(f, " \"block_bwd_b_s\": %.9g, \"block_bwd_w_s\": %.9g, \"head_bwd_w_s\": %.9g, "
               "\"wstash_keep_bytes\": %.9g, \"wstash_recompute_bytes\": %.9g,\n",
            c->bwd_b, c->bwd_w, c->head_bwd_w, c->wstash[POLICY_KEEP], c->wstash[POLICY_RECOMPUTE]);
    fprintf(f, " \"stash_keep_bytes\": %.9g, \"stash_selective_bytes\": %.9g, \"stash_recompute_bytes\": %.9g, "
               "\"stash_offload_bytes\": %.9g, \"offload_moved_bytes\": %.9g,\n",
            c->stash[POLICY_KEEP], c->stash[POLICY_SELECTIVE], c->stash[POLICY_RECOMPUTE], c->stash[POLICY_OFFLOAD], c->offload_bytes);
    fprintf(f, " \"act_message_bytes\": %.9g, \"work_bytes\": %.9g, \"block_params\": %.9g, \"embed_params\": %.9g,\n",
            c->act_bytes, c->work_bytes, c->block_params, c->embed_params);
    fprintf(f, " \"param_bytes\": %.9g, \"optimizer_bytes\": %.9g, \"optimizer_s_per_param\": %.9g, "
               "\"flops_per_token\": %.9g,\n",
            (c->block_params * p->layers + c->embed_params) * 4.0, (c->block_params * p->layers + c->embed_params) * 8.0,
            c->optimizer_s_per_param, c->flops_per_token);
    fprintf(f, " \"p2p_lat_s\": %.9g, \"p2p_bw_bytes_per_s\": %.9g, \"allreduce_lat_s\": %.9g, "
               "\"allreduce_bw_bytes_per_s\": %.9g}\n",
            p->p2p_lat, p->p2p_bw, p->ar_lat, p->ar_bw);
    return fclose(f) == 0 ? MP_OK : MP_FAIL("cannot write %s", path);
}

int profile_main(const run_opts_t *o, const char *out)
{
    int rank, world;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    deck_t *d = malloc(sizeof *d);
    profile_t *p = calloc(1, sizeof *p);
    int rc = MP_ERR;
    if (d && p && deck_load_model(d, o->deck_path, o->sets, o->nsets) == MP_OK) rc = MP_OK;
    else if (d && p) MP_ERROR("profile: the deck does not load");
    int bad = rc != MP_OK;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (bad) goto out;
    wait_cfg_t w;
    wait_cfg_init(&w, d->parallel.wait, d->parallel.timeout, world);
    probe_t pr;
    probe_run(&w, PROFILE_REPS, &pr);
    p->ranks = pr.ranks, p->p2p_lat = pr.p2p_lat, p->p2p_bw = pr.p2p_bw, p->ar_lat = pr.ar_lat, p->ar_bw = pr.ar_bw;
    if (rank == 0) { /* the others wait in the barrier below, yielding their cores */
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        const int threads = d->train.threads > 0 ? d->train.threads : (int)(cores > 0 ? cores : 1);
        kernels_set_threads(threads);
        rc = profile_compute(d, threads, &w, p);
        p->c.cpu_threads = threads;
        if (rc == MP_OK) rc = profile_write(out, p);
        if (rc == MP_OK)
            printf("profile: %d layers, micro-batch %d, %d thread%s (%s clock): block forward %.4g ms, backward %.4g ms "
                   "(split: B %.4g ms, W %.4g ms); p2p %.3g us, %.3g GB/s over %d ranks -> %s\n",
                   p->layers, p->c.B, threads, threads == 1 ? "" : "s", threads == 1 ? "its CPU" : "wall", 1e3 * p->c.fwd, 1e3 * p->c.bwd, 1e3 * p->c.bwd_b, 1e3 * p->c.bwd_w,
                   1e6 * p->p2p_lat, p->p2p_bw / 1e9, world, out);
    }
    bad = rc != MP_OK;
    wait_allreduce(&w, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the profile's status");
    rc = bad ? MP_ERR : MP_OK;
out:
    free(d), free(p);
    return rc == MP_OK ? 0 : 1;
}

/* The number after "key": in text (flat JSON, as profile_write writes it). */
static int profile_num(const char *text, const char *path, const char *key, double *out)
{
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *s = strstr(text, pat);
    char *end;
    if (s) *out = strtod(s + strlen(pat), &end);
    if (!s || end == s + strlen(pat)) return MP_FAIL("%s: no number for \"%s\" (write it with mindpipe profile)", path, key);
    return MP_OK;
}

int profile_load(const char *path, profile_t *p)
{
    FILE *f = fopen(path, "r");
    if (!f) return MP_FAIL("cannot read the profile %s", path);
    char *text = calloc(1, 65536);
    const size_t n = text ? fread(text, 1, 65535, f) : 0;
    fclose(f);
    if (!text || !n) return free(text), MP_FAIL("cannot read the profile %s", path);
    memset(p, 0, sizeof *p);
    cm_costs_t *c = &p->c;
    double v[7];
    static const char *const ints[7] = {"layers", "dim", "seq_len", "micro_batch", "threads", "ranks", "flops_per_token"};
    struct { const char *k; double *x; } keys[] = {
        {"block_fwd_s", &c->fwd}, {"block_bwd_s", &c->bwd}, {"recompute_extra_s", &c->extra[POLICY_RECOMPUTE]},
        {"selective_extra_s", &c->extra[POLICY_SELECTIVE]}, {"embed_fwd_s", &c->embed_fwd}, {"embed_bwd_s", &c->embed_bwd},
        {"head_fwd_s", &c->head_fwd}, {"head_bwd_s", &c->head_bwd}, {"stash_keep_bytes", &c->stash[POLICY_KEEP]},
        {"stash_selective_bytes", &c->stash[POLICY_SELECTIVE]}, {"stash_recompute_bytes", &c->stash[POLICY_RECOMPUTE]},
        {"stash_offload_bytes", &c->stash[POLICY_OFFLOAD]}, {"offload_moved_bytes", &c->offload_bytes},
        {"act_message_bytes", &c->act_bytes}, {"work_bytes", &c->work_bytes}, {"block_params", &c->block_params},
        {"embed_params", &c->embed_params}, {"optimizer_s_per_param", &c->optimizer_s_per_param},
        {"p2p_lat_s", &p->p2p_lat}, {"p2p_bw_bytes_per_s", &p->p2p_bw}, {"allreduce_lat_s", &p->ar_lat},
        {"allreduce_bw_bytes_per_s", &p->ar_bw}};
    int rc = MP_OK;
    for (int i = 0; i < 7 && rc == MP_OK; i++) rc = profile_num(text, path, ints[i], &v[i]);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && rc == MP_OK; i++) rc = profile_num(text, path, keys[i].k, keys[i].x);
    /* optional: a profile from before the split loads, and the planner leaves zb1p out (B = W = 0) */
    struct { const char *k; double *x; } split[] = {
        {"block_bwd_b_s", &c->bwd_b}, {"block_bwd_w_s", &c->bwd_w}, {"head_bwd_w_s", &c->head_bwd_w},
        {"wstash_keep_bytes", &c->wstash[POLICY_KEEP]}, {"wstash_recompute_bytes", &c->wstash[POLICY_RECOMPUTE]}};
    for (size_t i = 0; i < sizeof split / sizeof split[0] && rc == MP_OK; i++) {
        const char *at = strstr(text, split[i].k);
        if (at) rc = profile_num(text, path, split[i].k, split[i].x);
    }
    c->wstash[POLICY_SELECTIVE] = c->wstash[POLICY_OFFLOAD] = c->wstash[POLICY_KEEP];
    free(text);
    if (rc != MP_OK) return MP_ERR;
    p->layers = (int)v[0], p->dim = (int)v[1], p->seq_len = (int)v[2], c->B = (int)v[3], c->cpu_threads = (int)v[4];
    p->ranks = (int)v[5], c->flops_per_token = v[6], c->tp = 1;
    c->state_bytes_per_param = 16.0, c->opt_bytes_per_param = 8.0;
    if (c->B < 1 || c->cpu_threads < 1 || !(c->fwd > 0) || !(c->bwd > 0))
        return MP_FAIL("%s: micro_batch, threads and the block times must be positive", path);
    return MP_OK;
}
