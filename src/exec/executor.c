#include "executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compose.h"
#include "gpu_share.h"
#include "memlists.h"

/* Where the gradient send buffers live: NCCL sends device memory, MPI host memory (cpu: the same). */
static int gsend_on_device(const exec_t *e) { return be_host_visible(e->c.be) || e->c.nccl; }

/* balance: every stage's 1F1B list with BPipe's transfers (memlists.h), checked matched and run in
 * the simulator (no deadlock) before this stage keeps its own. */
static int exec_balance_lists(exec_t *e)
{
    const exec_ctx_t *c = &e->c;
    char why[256];
    if (sched_balance_check(c->kind, c->pp, c->m, e->v, why, sizeof why) != MP_OK)
        return MP_FAIL("memory.policy=balance: %s", why);
    instr_list_t lists[SIM_MAX_STAGES];
    sim_result_t sim;
    if (sim_build_lists(lists, c->kind, c->pp, c->m, e->v, &sim) != MP_OK) return MP_FAIL("%s", sim.error);
    int rc = MP_ERR;
    if (sched_add_balance(lists, c->pp, c->m, c->balance_keep) != MP_OK) {
        MP_ERROR("out of memory adding the balance transfers to the lists");
        goto out;
    }
    if (sched_balance_check_lists(lists, c->pp, why, sizeof why) != MP_OK) {
        MP_ERROR("memory.policy=balance: the lists are not matched (a bug): %s", why);
        goto out;
    }
    if (sim_run_lists(lists, c->pp, c->m, e->v, SIM_COST_TF, SIM_COST_TB, &sim) != MP_OK) {
        MP_ERROR("memory.policy=balance: the simulator refuses the lists (a bug): %s", sim.error);
        goto out;
    }
    e->nguest = sched_balance_guest_peak(&lists[c->stage]);
    e->list = lists[c->stage];
    lists[c->stage] = (instr_list_t){0};
    rc = MP_OK;
out:
    sim_free_lists(lists, c->pp);
    return rc;
}

static int exec_movable(const exec_t *e);

/* The run features of this stage's context (compose.h), NCCL as resolved at start. The stand-in
 * (gpu_share.h) runs the split backward's NCCL path for the bring-up's ranks_nccl part, which is the
 * check that path still lacks: there NCCL is not counted against it. */
unsigned exec_compose_have(const exec_ctx_t *c)
{
    unsigned have = 0;
    if (c->per > 0 || c->supernet) have |= 1u << COMPOSE_SUPERNET;
    if (c->balance) have |= 1u << COMPOSE_BALANCE;
    if (c->nccl && !gpu_share_nccl_standin()) have |= 1u << COMPOSE_NCCL_P2P;
    return have;
}

/* The lists of the stage and the stash slots they need. */
static int exec_lists(exec_t *e, int *nslots_p)
{
    const exec_ctx_t *c = &e->c;
    const int pp = c->pp, s = c->stage, m = c->m;
    /* one stage: every schedule is the same arithmetic; 1f1b's list stashes one micro-batch */
    /* causal: the window's lists keep at most pp − s micro-batches in flight, as 1F1B's over m do */
    const sched_kind_t kind = c->per > 0 ? SCHED_1F1B : compose_run_kind(c->kind, pp);
    sim_result_t sim;
    char why[640];
    if (compose_refused(kind, pp, exec_compose_have(c), why, sizeof why) != MP_OK) return MP_FAIL("%s", why);
    /* zb1p and zbv are played out from times (c->play; none: unit); the rest have fixed lists */
    const sched_costs_t *play = c->play.tf > 0.0 ? &c->play : NULL;
    const sched_costs_t fused = sim_costs_fused(SIM_COST_TF, SIM_COST_TB);
    if (sim_run_costs(kind, pp, m, e->v, play && sched_kind_split(kind) ? play : &fused, &sim) != MP_OK)
        return MP_FAIL("parallel.schedule=%s with pp=%d, %d micro-batches per step and %d chunk(s) per stage: %s",
                       sched_kind_names[c->kind], pp, m, e->v, sim.error);
    e->theory = sim.bubble;
    int nslots = sim.peak_stash[s];
    if (c->balance) {
        if (exec_balance_lists(e) != MP_OK) return MP_ERR;
    } else if (sched_kind_versions(kind) == 2) {
        for (int f = 0; f < 2; f++)
            for (int d = 0; d < 2; d++)
                if (sched_build_2bw(&e->l2bw[f][d], s, pp, m, f, d) != MP_OK) return MP_ERR;
        const int w = pp - s - 1 < m ? pp - s - 1 : m;
        for (int d = 0; d < 2; d++) {
            int a = sched_list_peak(&e->l2bw[1][d], 0), b = sched_list_peak(&e->l2bw[0][d], w);
            if (a > nslots) nslots = a;
            if (b > nslots) nslots = b;
        }
        e->theory = 0.0; /* no flush: the steady state has no bubble (the run's first step fills once) */
    } else if (sched_build_costs(&e->list, kind, s, pp, m, e->v, play) != MP_OK) {
        return MP_ERR;
    }
    *nslots_p = nslots;
    return MP_OK;
}

/* Whether any block of the stage keeps its stash in the movable region (offload, balance). */
static int exec_movable(const exec_t *e)
{
    for (int i = 0; i < e->c.model->tab.nlayers; i++)
        if (model_block_mode(e->c.model, i) == MODE_OFFLOAD || model_block_mode(e->c.model, i) == MODE_BALANCE) return 1;
    return 0;
}

/* offload: OFFLOAD after every forward and PREFETCH memory.prefetch instructions before its
 * backward (memsched.h), and the device buffers the movable regions need: the lists' device peak. */
static int exec_offload_lists(exec_t *e, int *npool_p)
{
    const int two = sched_kind_versions(e->c.kind) == 2, pp = e->c.pp, s = e->c.stage, m = e->c.m;
    int npool = 0;
    for (int f = 0; f < (two ? 2 : 1); f++)
        for (int d = 0; d < (two ? 2 : 1); d++) {
            instr_list_t *l = two ? &e->l2bw[f][d] : &e->list;
            if (sched_add_offload(l, e->c.prefetch) != MP_OK) return MP_FAIL("out of memory adding offloads to the lists");
            /* 2bw: a list run after a step that did not drain starts with the next batch's first
             * forwards done (and offloaded) */
            const int carried = two && !f ? (pp - s - 1 < m ? pp - s - 1 : m) : 0;
            const int p = sched_list_device_peak(l, carried);
            if (p > npool) npool = p;
        }
    *npool_p = npool;
    return MP_OK;
}

/* Split lists: how many weight-gradient stashes e->list needs at once (its peak between a B and its
 * W), and the bytes of each, the largest of the stage's chunks at micro-batch size B, so any one
 * serves every chunk. 0 for a fused list. */
static int exec_wstash_need(const exec_t *e, int B, size_t *bytes_p)
{
    const int n = sched_list_peak_w(&e->list);
    *bytes_p = 0;
    for (int c = 0; n > 0 && c < e->v; c++) {
        const model_part_t pt = model_chunk(e->c.model, c);
        const size_t b = model_wstash_bytes(e->c.model, &pt, B);
        if (b > *bytes_p) *bytes_p = b;
    }
    return n;
}

/* V placement: whether this stage holds the turn (chunk pp−1 hands over to chunk pp on itself). */
static int exec_has_turn(const exec_ctx_t *c)
{
    return c->pp > 1 && sched_kind_place(c->kind) == SCHED_PLACE_V && c->stage == c->pp - 1;
}

/* The turn's gradient buffers: one activation per micro-batch (exec_turn_grad). */
static size_t exec_turn_bytes(const exec_ctx_t *c, size_t n_act)
{
    return exec_has_turn(c) ? (size_t)c->m * n_act * sizeof(float) : 0;
}

int exec_plan(const exec_ctx_t *ctx, int B, size_t fixed, exec_plan_t *p)
{
    exec_t e;
    memset(&e, 0, sizeof e);
    memset(p, 0, sizeof *p);
    e.c = *ctx;
    const model_t *md = ctx->model;
    e.v = md->tab.nchunks, e.K = ctx->pp * e.v;
    int nslots = 0, npool = 0, rc = MP_ERR;
    if (exec_lists(&e, &nslots) != MP_OK) goto out;
    npool = nslots;
    if (exec_movable(&e) && !ctx->balance && exec_offload_lists(&e, &npool) != MP_OK) goto out;
    if (ctx->balance) npool = sched_list_device_peak(&e.list, 0);
    int biggest = 0;
    for (int c = 0; c < e.v; c++)
        if (model_chunk(md, c).n > biggest) biggest = model_chunk(md, c).n;
    size_t mov0, mov;
    p->nslots = nslots;
    p->slot0 = acts_part_bytes(md, B, md->tab.nlayers, md->tab.has_final, &mov0);
    p->slot = acts_part_bytes(md, B, biggest, md->tab.has_final, &mov);
    if (mov0 > mov) mov = mov0;
    p->npool = mov ? npool : 0;
    p->mov = mov ? (mov + 4095) / 4096 * 4096 + 4096 : 0; /* stash_init_movable's page rounding and slack */
    if (ctx->balance) {
        /* the acceptor's guests are the evictor's movable regions: sized by the evictor's model,
         * which this rank does not hold; exec_init learns it from the partner (bal_init) */
        p->nguest = e.nguest;
        p->guests = be_host_visible(ctx->be) ? bal_guest_bytes(ctx->partner_mov, p->nguest) : 0;
    }
    p->stash = p->slot0 + (size_t)(nslots - 1) * p->slot + (size_t)p->npool * p->mov + p->guests;
    p->nwstash = exec_wstash_need(&e, B, &p->wstash_each);
    p->wstash = (size_t)p->nwstash * p->wstash_each;
    p->scratch = scratch_bytes(md, B);
    const int nkeys = (sched_kind_versions(ctx->kind) == 2 ? 2 : 1) * ctx->m * e.v;
    const size_t n_act = (size_t)B * md->cfg.seq_len * md->cfg.dim;
    p->messages = ctx->pp > 1 && gsend_on_device(&e) ? (size_t)nkeys * n_act * sizeof(float) : 0;
    p->messages += exec_turn_bytes(ctx, n_act); /* the V's turn gradients (device memory) */
    p->fixed = fixed;
    p->total = fixed + p->stash + p->wstash + p->scratch + p->messages;
    rc = MP_OK;
out:
    sched_free(&e.list);
    for (int f = 0; f < 2; f++)
        for (int d = 0; d < 2; d++) sched_free(&e.l2bw[f][d]);
    return rc;
}

/* nccl: the lists lowered to streams; the executor's event waits come from there (lower.h). */
static int exec_lower(exec_t *e)
{
    const int M = (sched_kind_versions(e->c.kind) == 2 ? 2 : 1) * e->c.m;
    if (sched_kind_versions(e->c.kind) != 2) return lower_stage(&e->list, e->K, M, LOWER_STREAMS, &e->prog);
    for (int f = 0; f < 2; f++)
        for (int d = 0; d < 2; d++)
            if (lower_stage(&e->l2bw[f][d], e->K, M, LOWER_STREAMS, &e->prog2bw[f][d]) != MP_OK) return MP_ERR;
    return MP_OK;
}

/* Gradient send buffers and, off the cpu backend, the host buffers MPI messages cross through. */
static int exec_buffers(exec_t *e, int nslots)
{
    const exec_ctx_t *c = &e->c;
    e->gsend_req = MP_CALLOC((size_t)e->nkeys, sizeof *e->gsend_req);
    if (!e->gsend_req) return MP_ERR;
    for (int i = 0; i < e->nkeys; i++) e->gsend_req[i] = MPI_REQUEST_NULL;
    if (c->pp == 1) return MP_OK; /* no messages */
    const size_t ng = (size_t)e->nkeys * e->n_act;
    e->gsend = gsend_on_device(e) ? arena_floats(c->arena, ng, "pipeline gradient send buffers")
                                  : be_host_alloc(c->be, ng * sizeof(float));
    if (!e->gsend) return MP_FAIL("no memory for the pipeline's gradient send buffers");
    if (exec_has_turn(c) && !(e->turn = arena_floats(c->arena, (size_t)c->m * e->n_act, "the V's turn gradients")))
        return MP_FAIL("no memory for the V's turn gradients");
    if (be_host_visible(c->be)) return MP_OK;
    if (c->nccl) be_p2p_setup(c->be, c->pp_comm, c->pp, c->stage, e->v > 1, e->nkeys); /* events per key */
    /* MPI reads host memory: parallel.p2p=mpi and the evaluation's messages cross through these */
    e->hsend = be_host_alloc(c->be, (size_t)nslots * e->n_act * sizeof(float));
    e->hrecv = be_host_alloc(c->be, 2 * e->n_act * sizeof(float));
    if (!e->hsend || !e->hrecv) return MP_FAIL("out of host memory for the pipeline's message buffers");
    return MP_OK;
}

int exec_init(exec_t *e, const exec_ctx_t *ctx)
{
    memset(e, 0, sizeof *e);
    e->c = *ctx;
    e->posted[0].req = e->posted[1].req = MPI_REQUEST_NULL;
    if (!e->c.policy) e->c.policy = &stash_policy_keep;
    const model_t *md = ctx->model;
    e->v = md->tab.nchunks, e->K = ctx->pp * e->v;
    int nslots = 0;
    if (exec_lists(e, &nslots) != MP_OK) return MP_ERR;
    e->nkeys = (sched_kind_versions(ctx->kind) == 2 ? 2 : 1) * ctx->m * e->v;
    int biggest = 0;
    for (int c = 0; c < e->v; c++) {
        e->part[c] = model_chunk(md, c);
        if (e->part[c].n > biggest) biggest = e->part[c].n;
    }
    const int tag_ub_need = 2 * e->nkeys * e->K + 2;
    int *tag_ub, flag;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag));
    if (flag && *tag_ub < tag_ub_need)
        return MP_FAIL("the pipeline needs MPI tags up to %d, this MPI allows %d: fewer micro-batches per step",
                       tag_ub_need, *tag_ub);
    e->n_act = (size_t)ctx->acts->B * md->cfg.seq_len * md->cfg.dim;
    int npool = nslots;
    if (exec_movable(e) && !ctx->balance) {
        if (exec_offload_lists(e, &npool) != MP_OK) return MP_ERR;
        e->c.policy = &stash_policy_offload;
    }
    if (ctx->balance) npool = sched_list_device_peak(&e->list, 0);
    const int bal_tag0 = tag_ub_need + 2;
    if (ctx->balance && flag && *tag_ub < bal_tag0 + 2 * e->nkeys + 2)
        return MP_FAIL("balance needs MPI tags up to %d, this MPI allows %d", bal_tag0 + 2 * e->nkeys + 2, *tag_ub);
    if (ctx->nccl && exec_lower(e) != MP_OK) return MP_FAIL("out of memory lowering the pipeline's lists");
    if (stash_init(&e->stash, e->c.policy, nslots, e->nkeys, ctx->acts, md, ctx->acts->B, biggest, md->tab.has_final,
                   ctx->arena, ctx->wait) != MP_OK)
        return MP_ERR;
    if (stash_init_movable(&e->stash, ctx->be, npool) != MP_OK) return MP_ERR;
    if (ctx->balance && bal_init(&e->bal, &e->stash, ctx->pp_comm, ctx->stage, ctx->pp, e->nguest, sched_list_guests(&e->list),
                                 bal_tag0, ctx->wait) != MP_OK)
        return MP_ERR;
    if (e->bal.role == BAL_ACCEPTOR && e->bal.bytes != ctx->partner_mov)
        return MP_FAIL("balance: the evictor's stash is %zu bytes, the memory plan counted %zu (a bug)", e->bal.bytes,
                       ctx->partner_mov);
    size_t ws_bytes;
    const int nws = exec_wstash_need(e, ctx->acts->B, &ws_bytes);
    if (nws > 0) {
        e->ws = MP_CALLOC((size_t)nws, sizeof *e->ws);
        e->ws_key = MP_CALLOC((size_t)nws, sizeof *e->ws_key);
        if (!e->ws || !e->ws_key) return MP_FAIL("out of memory for the weight-gradient stashes");
        for (; e->nws < nws; e->nws++) { /* e->nws: the ones made, which exec_free destroys */
            e->ws_key[e->nws] = -1;
            if (wstash_create(&e->ws[e->nws], md, ctx->acts->B, ws_bytes, ctx->arena) != MP_OK) return MP_ERR;
        }
    }
    if (ctx->per > 0 && !(e->sub_loss = MP_CALLOC((size_t)(ctx->m / ctx->per), sizeof *e->sub_loss)))
        return MP_FAIL("out of memory for the window's subnet losses");
    return exec_buffers(e, nslots);
}

void exec_free(exec_t *e)
{
    const exec_ctx_t *c = &e->c;
    bal_free(&e->bal);
    stash_free(&e->stash);
    for (int i = 0; i < e->nws; i++) wstash_destroy(&e->ws[i], c->arena);
    free(e->ws);
    free(e->ws_key);
    if (e->gsend && gsend_on_device(e)) arena_free(c->arena, e->gsend, (size_t)e->nkeys * e->n_act * sizeof(float));
    else if (e->gsend) be_host_free(c->be, e->gsend);
    if (e->turn) arena_free(c->arena, e->turn, (size_t)c->m * e->n_act * sizeof(float));
    if (e->hsend) be_host_free(c->be, e->hsend);
    if (e->hrecv) be_host_free(c->be, e->hrecv);
    free(e->gsend_req);
    free(e->sub_loss);
    free(e->head_sum);
    free(e->head_in);
    free(e->bnd_host);
    e->bnd_host = NULL, e->bnd_host_n = 0;
    sched_free(&e->list);
    lower_free(&e->prog);
    for (int f = 0; f < 2; f++)
        for (int d = 0; d < 2; d++) {
            sched_free(&e->l2bw[f][d]);
            lower_free(&e->prog2bw[f][d]);
        }
}

void exec_set_bnd(exec_t *e, const exec_bnd_t *bnd, int replay, const unsigned char *live)
{
    e->bnd = bnd;
    e->replay = bnd && replay;
    memset(e->live, 0, sizeof e->live);
    if (e->replay && live) memcpy(e->live, live, (size_t)e->c.pp * sizeof *live);
    if (!e->replay) {
        free(e->head_sum);
        free(e->head_in);
        e->head_sum = e->head_in = NULL;
    }
}

/* Whether stage s's messages come from the log: a replay, and s does not replay with this stage. */
static int exec_logged(const exec_t *e, int s)
{
    return e->replay && !e->live[s];
}

/* Whether this stage is one end of the tied embedding between the first and the last stage. Under
 * the V placement stage 0 holds both ends (chunk 0 and chunk K−1), so wte is one tensor there as on
 * one rank, and the last stage holds neither: no sum to make. */
static int exec_tied(const exec_t *e)
{
    const param_table_t *tab = &e->c.model->tab;
    return e->c.pp > 1 && e->c.embed_comm != MPI_COMM_NULL && tab->has_embed != tab->has_final && !tab->cfg.untied;
}

/* dev (n floats) where the log's host-side code can read and write it: dev itself on the cpu backend,
 * else a host copy (bnd_host, kept for the next). The copy is synchronous: the tied part once a step,
 * a head input once a micro-batch on the last stage. */
static float *exec_bnd_host(exec_t *e, const float *dev, size_t n)
{
    if (be_host_visible(e->c.be)) return (float *)dev;
    if (n > e->bnd_host_n) {
        free(e->bnd_host);
        if (!(e->bnd_host = MP_MALLOC(n * sizeof(float)))) MP_ABORT("out of host memory for the boundary log's copies");
        e->bnd_host_n = n;
    }
    be_to_host(e->c.be, e->bnd_host, dev, n * sizeof(float));
    return e->bnd_host;
}

/* A replay's message from the log (into host memory x; a failure is the log's to record). */
static void exec_replay_recv(exec_t *e, long t, int mb, int chunk, int kind, float *x, size_t n)
{
    e->bnd->recv(e->bnd->ctx, t, mb, chunk, kind, x, n);
}

/* The evaluation's activation into dev, at once (no timers, no log), through the host landing buffer
 * off the cpu backend. The steps' receives are posted and finished apart (exec_recv_post). */
static void exec_recv_wait(exec_t *e, float *dev, int peer, int tag, const char *where)
{
    float *land = e->hrecv ? e->hrecv : dev;
    MPI_Request q;
    MPI_CHECK(MPI_Irecv(land, (int)e->n_act, MPI_FLOAT, peer, tag, e->c.pp_comm, &q));
    wait_all(e->c.wait, 1, &q, where);
    be_to_device(e->c.be, dev, land, e->n_act * sizeof(float));
}

/* What MPI sends for the activation or gradient at dev: dev itself on the cpu backend, else its
 * copy in the host buffer `host`. */
static const float *exec_send_src(exec_t *e, const float *dev, float *host)
{
    if (!host) return dev;
    be_to_host(e->c.be, host, dev, e->n_act * sizeof(float));
    return host;
}

/* Posts the receive of an activation (grad 0) or a gradient (grad 1) into dev for the computation of
 * `key` that will read it (exec_posted_t); a replay takes it from the log at once. from_chunk and
 * kind: the sender's entry in the boundary log. */
static void exec_recv_post(exec_t *e, int grad, int key, float *dev, int peer, int tag, const char *what, long t, int mb,
                           int from_chunk, int kind)
{
    exec_posted_t *p = &e->posted[grad];
    if (p->req != MPI_REQUEST_NULL)
        MP_ABORT("stage %d: a second %s is posted before the first was read (a bug in the list)", e->c.stage, what);
    float *land = e->hrecv ? e->hrecv + (size_t)grad * e->n_act : dev;
    if (exec_logged(e, peer)) {
        const double t0 = perf_now();
        exec_replay_recv(e, t, mb, from_chunk, kind, land, e->n_act);
        be_to_device(e->c.be, dev, land, e->n_act * sizeof(float));
        trace_span(e->c.trace, what, t, mb, t0);
        return;
    }
    /* A hung or dead peer ends in wait_all's timeout: its message names the rank to look at. */
    snprintf(p->where, sizeof p->where, "%s of micro-batch %d of step %ld from rank %d (stage %d)", what, mb, t,
             e->c.stage_rank[peer], peer);
    p->dev = dev, p->land = land, p->key = key, p->t = t, p->mb = mb, p->what = what;
    MPI_CHECK(MPI_Irecv(land, (int)e->n_act, MPI_FLOAT, peer, tag, e->c.pp_comm, &p->req));
}

/* The reader of `key`: waits for its posted receive, if one is pending, and lands it on the device.
 * The time it waits is the stage's idle time and the receive's span on the timeline. */
static void exec_recv_finish(exec_t *e, int grad, int key)
{
    exec_posted_t *p = &e->posted[grad];
    if (p->req == MPI_REQUEST_NULL) return;
    if (p->key != key)
        MP_ABORT("stage %d: the %s posted for key %d is pending at the computation of key %d (a bug in the list)",
                 e->c.stage, p->what, p->key, key);
    const double t0 = perf_now();
    wait_all(e->c.wait, 1, &p->req, p->where);
    be_to_device(e->c.be, p->dev, p->land, e->n_act * sizeof(float));
    e->idle += perf_now() - t0;
    trace_span(e->c.trace, p->what, p->t, p->mb, t0);
}

/* The tied embedding: the first stage holds the embedding's gradient part, the last the head's;
 * both need their sum (a + b is the same bits either way round, as on one rank). The log keeps
 * the first stage's part (by rows) and, per micro-batch, the last stage's head input (exec_instr):
 * a replay of the last stage reads the first's part, a replay of the first recomputes the last's. */
static void exec_tied_sum(exec_t *e, long t)
{
    if (!exec_tied(e)) return;
    model_t *md = e->c.model;
    const param_entry_t *p = param_table_find(&md->tab, "wte");
    float *g = md->grads + p->offset;
    const int first = md->tab.has_embed;
    /* the other end replays too (both ends' stages lost): the sum as in the step */
    const int logged = exec_logged(e, first ? e->c.pp - 1 : 0);
    /* the log (the first stage's part) and the replay's sum work on a host view of g (g itself on
     * cpu); a last stage that only logs copies nothing */
    const int host_view = e->bnd && ((e->bnd->sent && first) || logged);
    float *gh = host_view ? exec_bnd_host(e, g, p->numel) : g;
    if (e->bnd && e->bnd->sent && first) e->bnd->sent(e->bnd->ctx, t, -1, -1, EXEC_BND_TIED, gh, p->numel);
    if (logged) { /* the other end's part, as the all-reduce would have added it (a + b either way round) */
        if (first) {
            if (!e->head_sum) MP_ABORT("replay of step %ld: the tied head's gradient was not recomputed (a bug)", t);
            /* the last stage's wte gradient is 0 + its head's part (model_grads_finish): +0.0 for −0.0 */
            for (size_t i = 0; i < p->numel; i++) gh[i] += 0.0f + e->head_sum[i];
            memset(e->head_sum, 0, p->numel * sizeof(float));
        } else {
            float *other = MP_MALLOC(p->numel * sizeof(float));
            if (!other) MP_ABORT("out of memory replaying the tied-embedding gradient sum");
            exec_replay_recv(e, t, -1, -1, EXEC_BND_TIED, other, p->numel);
            for (size_t i = 0; i < p->numel; i++) gh[i] += other[i];
            free(other);
        }
        if (gh != g) be_to_device(e->c.be, g, gh, p->numel * sizeof(float));
        return;
    }
    be_allreduce(e->c.be, g, p->numel, MPI_SUM, e->c.embed_comm,
                 "the tied-embedding gradient sum between the first and the last stage");
}

/* A replay of the first stage, micro-batch mb just loaded into a: the last stage's head gradient
 * of mb, from its logged input, added to head_sum in micro-batch order as the last stage added it. */
static void exec_replay_head(exec_t *e, acts_t *a, long t, int mb, float dloss)
{
    model_t *md = e->c.model;
    const param_entry_t *p = param_table_find(&md->tab, "wte");
    if (!e->head_sum && !(e->head_sum = calloc(p->numel, sizeof(float))))
        MP_ABORT("out of memory replaying the tied head's gradient");
    if (!e->head_in && !(e->head_in = MP_MALLOC(e->n_act * sizeof(float))))
        MP_ABORT("out of memory replaying the tied head's gradient");
    exec_replay_recv(e, t, mb, e->K - 1, EXEC_BND_HEAD, e->head_in, e->n_act);
    if (model_head_grad(md, e->head_in, a->targets, a->B, dloss, e->head_sum) != MP_OK)
        MP_ABORT("replay of step %ld: the tied head's gradient of micro-batch %d could not be recomputed", t, mb);
}

/* Message tags: one per (micro-batch key, chunk boundary, direction), so no two messages in flight
 * between two stages share one. Boundary b lies between chunks b and b+1. */
static int exec_tag(const exec_t *e, int key_mb, int boundary, int grad)
{
    return 2 * (key_mb * e->K + boundary) + grad;
}

/* What one instruction is about: its batch, micro-batch, chunk and stash key. */
typedef struct {
    long bt;        /* the batch it belongs to (2bw: t + 1 for the next batch's forwards) */
    int next;       /* 2bw: of the next batch */
    int mb, key_mb, key;
    const model_part_t *pt;
} exec_at_t;

static exec_at_t exec_at(const exec_t *e, const instr_t *in, long t)
{
    const int two = sched_kind_versions(e->c.kind) == 2, m = e->c.m;
    exec_at_t at;
    /* 2bw: micro-batch m + j is the next batch's j (schedule.h) */
    at.next = in->mb >= m;
    at.mb = in->mb >= 0 ? in->mb % m : -1;
    at.bt = t + at.next;
    const int c = in->chunk >= 0 ? sched_chunk_local(e->c.kind, in->chunk, e->c.pp) : 0;
    at.key_mb = two ? (int)(at.bt & 1) * m + at.mb : at.mb;
    if (e->c.per > 0 && in->mb >= 0) { /* causal: subnet t + j's micro-batch k */
        at.bt = t + in->mb / e->c.per, at.mb = in->mb % e->c.per, at.key_mb = in->mb;
    }
    at.key = at.key_mb * e->v + c;
    at.pt = &e->part[c];
    return at;
}

/* The list a step runs and, on nccl, its lowered program (NULL on MPI). */
typedef struct {
    const instr_list_t *list;
    const lower_prog_t *prog;
} exec_run_t;

static void exec_send_act(exec_t *e, const instr_t *in, const exec_at_t *at, acts_t *a)
{
    const exec_ctx_t *c = &e->c;
    const float *out = model_part_output(at->pt, a);
    if (c->nccl) {
        be_p2p_send(c->be, BE_P2P_ACT_OUT, out, e->n_act);
        return;
    }
    float *host = e->hsend ? e->hsend + (size_t)e->stash.slot_of[at->key] * e->n_act : NULL;
    const float *src = exec_send_src(e, out, host);
    if (e->bnd && e->bnd->sent) e->bnd->sent(e->bnd->ctx, at->bt, at->mb, in->chunk, EXEC_BND_ACT, src, e->n_act);
    if (exec_logged(e, in->peer)) return; /* its reader request stays null: the slot is free when the stash wants it */
    MPI_CHECK(MPI_Isend(src, (int)e->n_act, MPI_FLOAT, in->peer, exec_tag(e, at->key_mb, in->chunk, 0), c->pp_comm,
                        stash_reader(&e->stash, at->key)));
}

static void exec_send_grad(exec_t *e, const instr_t *in, const exec_at_t *at)
{
    const exec_ctx_t *c = &e->c;
    float *g = e->gsend + (size_t)at->key * e->n_act;
    if (c->nccl) { /* g is device memory; its send two steps ago is done (REDUCE_GRADS' fence) */
        be_copy(c->be, g, c->scratch->dres, e->n_act * sizeof(float));
        be_p2p_send(c->be, BE_P2P_GRAD_OUT, g, e->n_act);
        return;
    }
    wait_all(c->wait, 1, &e->gsend_req[at->key], "a pipeline gradient send");
    be_to_host(c->be, g, c->scratch->dres, e->n_act * sizeof(float));
    if (e->bnd && e->bnd->sent) e->bnd->sent(e->bnd->ctx, at->bt, at->mb, in->chunk, EXEC_BND_GRAD, g, e->n_act);
    if (exec_logged(e, in->peer)) return;
    MPI_CHECK(MPI_Isend(g, (int)e->n_act, MPI_FLOAT, in->peer, exec_tag(e, at->key_mb, in->chunk - 1, 1), c->pp_comm,
                        &e->gsend_req[at->key]));
}

/* The backend's p2p direction of each lowered stream; -1: none (compute, offload, and V's second lane:
 * the backend has no communicators for it yet, so zbv runs on MPI messages only: compose.c refuses
 * NCCL and cuda under it). */
static const int exec_p2p_dir[LS_STREAMS] = {
    [LS_COMPUTE] = -1,  [LS_ACT_IN] = BE_P2P_ACT_IN, [LS_ACT_OUT] = BE_P2P_ACT_OUT, [LS_GRAD_IN] = BE_P2P_GRAD_IN,
    [LS_GRAD_OUT] = BE_P2P_GRAD_OUT, [LS_OFFLOAD] = -1, [LS_ACT_IN_V] = -1, [LS_ACT_OUT_V] = -1, [LS_GRAD_IN_V] = -1,
    [LS_GRAD_OUT_V] = -1};

/* nccl: the compute stream waits for what the lowered op of instruction i waits for: a receive's
 * event (per key), or everything so far on a send stream. */
static void exec_stream_waits(exec_t *e, const exec_run_t *run, int i, long t)
{
    const lower_op_t *o = run->prog ? lower_op_of(run->prog, i) : NULL;
    for (int d = 0; o && d < o->ndeps; d++) {
        const int x = o->dep_stream[d], dir = exec_p2p_dir[x];
        if (x == LS_ACT_IN || x == LS_GRAD_IN) {
            const lower_op_t *r = &run->prog->s[x].ops[o->dep_idx[d]];
            be_p2p_wait(e->c.be, dir, exec_at(e, &run->list->ins[r->instr], t).key);
        } else if (dir >= 0) {
            be_p2p_fence(e->c.be, dir);
        }
    }
}

/* The end of a step's backwards: sends done, gradients final and the tied parts summed. */
static void exec_reduce_grads(exec_t *e, const exec_run_t *run, int i, long t, int drain, double t0)
{
    const exec_ctx_t *c = &e->c;
    const int two = sched_kind_versions(c->kind) == 2, n = c->m * e->v;
    for (int g = 0; g < 2; g++)
        if (e->posted[g].req != MPI_REQUEST_NULL)
            MP_ABORT("stage %d: step %ld ends with its %s for key %d never read (a bug in the list)", c->stage, t,
                     e->posted[g].what, e->posted[g].key);
    /* this batch's gradient sends; activation sends are waited for when their slot is reused */
    for (int j = 0; j < n; j++)
        wait_all(c->wait, 1, &e->gsend_req[(two ? (int)(t & 1) * n : 0) + j], "the step's gradient sends");
    if (!two || drain) stash_wait_readers(&e->stash, "the step's activation sends");
    exec_stream_waits(e, run, i, t);
    if (!c->supernet) { /* a supernet adds them over its window (supernet.h) */
        model_grads_finish(c->model);
        exec_tied_sum(e, t);
    }
    trace_span(c->trace, two && !drain ? "gradients final" : "pipeline flush", t, -1, t0);
}

/* The model's own spans (a recomputation) on the timeline, as part of the instruction running. */
static void exec_model_span(void *ctx, const char *name, double t0)
{
    const exec_t *e = ctx;
    trace_span(e->c.trace, name, e->span_step, e->span_mb, t0);
}

/* The copy engine's finished copies on the timeline's copy row (cpu, emu: the copy thread's; on
 * cuda the offload stream's times are not read back). */
static void exec_copy_spans(exec_t *e, long t)
{
    copier_t *cp = e->c.be->copier;
    if (!cp || !e->c.trace) return;
    int dir[64], n;
    double t0[64], t1[64];
    while ((n = copier_take_spans(cp, dir, t0, t1, 64)) > 0)
        for (int i = 0; i < n; i++)
            trace_span_at(e->c.trace, dir[i] ? "prefetch copy" : "offload copy", t, -1, t0[i], t1[i], TRACE_LANE_COPY);
}

/* The weight-gradient stash of key: take a free one (B; there are the list's peak of them, so one is
 * free) or the one its B filled (W). Aborts when there is none (a bug in the count or the list). */
static wstash_t *exec_wstash(exec_t *e, int key, int take)
{
    for (int i = 0; i < e->nws; i++)
        if (e->ws_key[i] == (take ? -1 : key)) {
            e->ws_key[i] = key;
            return &e->ws[i];
        }
    MP_ABORT("stage %d: no weight-gradient stash %s for key %d (a bug: the list's B-to-W peak is %d)", e->c.stage,
             take ? "free" : "filled", key, e->nws);
}

/* The V's turn (sched_place_edge_local): chunk pp−1 and chunk pp sit on this stage, so what would be
 * a message between them is a device copy here, in the list's order (no RECV_ACT/SEND_GRAD is
 * emitted for that boundary). Forward: chunk pp takes its slot and its input is chunk pp−1's output
 * of the same micro-batch (still in that one's slot: its W has not run). */
static void exec_turn_act(exec_t *e, const instr_t *in, const exec_at_t *at)
{
    const exec_ctx_t *c = &e->c;
    if (in->chunk <= 0 || !sched_place_edge_local(sched_kind_place(c->kind), in->chunk - 1, c->pp)) return;
    const int below = sched_chunk_local(c->kind, in->chunk - 1, c->pp), key0 = at->key_mb * e->v + below;
    acts_t *a = stash_take(&e->stash, at->key);
    const float *out = model_part_output(&e->part[below], stash_get(&e->stash, key0));
    be_copy(c->be, a->encoded, out, e->n_act * sizeof(float));
}

/* Backward across the turn: chunk pp's B leaves its input gradient (scratch->dres) in the turn buffer
 * of its micro-batch (other B's may run before chunk pp−1's and overwrite dres: the zbv lists
 * interleave them); chunk pp−1's B starts from it. before: 1 ahead of chunk pp−1's B, 0 after
 * chunk pp's. */
static void exec_turn_grad(exec_t *e, const instr_t *in, const exec_at_t *at, int before)
{
    const exec_ctx_t *c = &e->c;
    const sched_place_t place = sched_kind_place(c->kind);
    const size_t bytes = e->n_act * sizeof(float);
    float *slot = e->turn ? e->turn + (size_t)at->mb * e->n_act : NULL;
    if (before && sched_place_edge_local(place, in->chunk, c->pp)) be_copy(c->be, c->scratch->dres, slot, bytes);
    if (!before && in->chunk > 0 && sched_place_edge_local(place, in->chunk - 1, c->pp))
        be_copy(c->be, slot, c->scratch->dres, bytes);
}

/* One forward or backward instruction (fused, or a split one's B or W). Returns the forward's Σ of
 * token losses. */
static double exec_compute(exec_t *e, const exec_run_t *run, int i, const exec_at_t *at, long t, float dloss,
                           const model_ready_t *ready)
{
    const exec_ctx_t *c = &e->c;
    const instr_t *in = &run->list->ins[i];
    acts_t *a = stash_get(&e->stash, at->key);
    const double t0 = perf_now();
    exec_stream_waits(e, run, i, t); /* nccl: its input arrived (and, forward, the newest activation send left) */
    if (c->prof) {
        e->span_step = at->bt, e->span_mb = at->mb;
        c->prof->span = exec_model_span, c->prof->span_ctx = e;
    }
    if (in->op == OP_FORWARD) {
        stash_before_forward(&e->stash, at->key);
        double l = model_forward_part(c->model, at->pt, a, c->scratch, c->prof);
        if (c->dump) actdump_capture(c->dump, c->model, at->pt, a, at->bt, at->mb);
        stash_after_forward(&e->stash, at->key);
        trace_span(c->trace, "forward", at->bt, at->mb, t0);
        e->busy += perf_now() - t0;
        return l;
    }
    const int last = ready && at->mb == c->m - 1; /* the bucket hook: each chunk's last micro-batch */
    if (in->op == OP_BACKWARD_B) { /* the slot stays taken: W reads it */
        stash_before_backward(&e->stash, at->key);
        bal_ready(&e->bal, at->key);
        model_backward_b(c->model, at->pt, a, c->scratch, dloss, c->prof, exec_wstash(e, at->key, 1));
        trace_span(c->trace, "backward B", at->bt, at->mb, t0);
        e->busy += perf_now() - t0;
        return 0.0;
    }
    if (in->op == OP_BACKWARD_W) { /* the gradients' last writes: the hook fires here, B fires nothing */
        wstash_t *ws = exec_wstash(e, at->key, 0);
        model_backward_w(c->model, at->pt, a, c->scratch, c->prof, ws, last ? ready : NULL);
        e->ws_key[ws - e->ws] = -1;
        stash_give(&e->stash, at->key);
        trace_span(c->trace, "backward W", at->bt, at->mb, t0);
        e->busy += perf_now() - t0;
        return 0.0;
    }
    stash_before_backward(&e->stash, at->key);
    bal_ready(&e->bal, at->key);
    model_backward_part(c->model, at->pt, a, c->scratch, dloss, c->prof, last ? ready : NULL);
    stash_give(&e->stash, at->key);
    trace_span(c->trace, "backward", at->bt, at->mb, t0);
    e->busy += perf_now() - t0;
    return 0.0;
}

/* The instructions that move a stash (memory policies): what each does, and its span's name. */
static const char *const exec_move_span[OP_COUNT] = {[OP_OFFLOAD] = "offload", [OP_PREFETCH] = "prefetch",
                                                     [OP_EVICT] = "evict", [OP_RECLAIM] = "reclaim",
                                                     [OP_ACCEPT] = "accept", [OP_RETURN] = "return"};

static void exec_move(exec_t *e, op_t op, int key)
{
    switch (op) {
    case OP_OFFLOAD: stash_offload(&e->stash, key); break;
    case OP_PREFETCH: stash_prefetch(&e->stash, key); break;
    case OP_EVICT: bal_evict(&e->bal, key); break;
    case OP_RECLAIM: bal_reclaim(&e->bal, key); break;
    case OP_ACCEPT: bal_accept(&e->bal, key); break;
    case OP_RETURN: bal_return(&e->bal, key); break;
    default: break;
    }
}

/* Instruction i of run's list for step t (causal: window t; subs its hooks, else NULL); a forward's
 * Σ of token losses goes to *loss (2bw's next batch: e->carried_loss; causal: e->sub_loss, and loss
 * may be NULL). */
static void exec_instr(exec_t *e, const exec_run_t *rp, int i, long t, float dloss, const exec_batch_t *src,
                       const model_ready_t *ready, int drain, const exec_subnets_t *subs, double *loss)
{
    const exec_ctx_t *c = &e->c;
    const int two = sched_kind_versions(c->kind) == 2;
    const exec_run_t run = *rp;
    const instr_t *in = &run.list->ins[i];
    const exec_at_t at = exec_at(e, in, t);
    if (two) model_use_version(c->model, !at.next); /* batch t on W(t-1), batch t+1 on W(t) */
    /* MPI: the computation waits for its posted input here (before the turn's copies, which on
     * the cpu backend write where a gradient lands) */
    if (in->op == OP_FORWARD || in->op == OP_BACKWARD || in->op == OP_BACKWARD_B)
        exec_recv_finish(e, in->op != OP_FORWARD, at.key);
    double t0 = perf_now();
    acts_t *a;
    switch (in->op) {
    case OP_LOAD_BATCH:
        a = stash_take(&e->stash, at.key);
        src->fill(src->ctx, a, at.bt, at.mb);
        if (exec_tied(e) && exec_logged(e, c->pp - 1)) exec_replay_head(e, a, t, at.mb, dloss);
        break;
    case OP_RECV_ACT:
        a = stash_take(&e->stash, at.key);
        if (c->nccl) be_p2p_recv(c->be, BE_P2P_ACT_IN, a->encoded, e->n_act, at.key);
        else exec_recv_post(e, 0, at.key, a->encoded, in->peer, exec_tag(e, at.key_mb, in->chunk - 1, 0),
                            "receive activation", at.bt, at.mb, in->chunk - 1, EXEC_BND_ACT);
        if (at.pt->final) src->fill(src->ctx, a, at.bt, at.mb); /* the targets */
        break;
    case OP_FORWARD:
        exec_turn_act(e, in, &at);
        if (subs) {
            subs->select(subs->ctx, at.bt);
            e->sub_loss[in->mb / c->per] += exec_compute(e, &run, i, &at, t, dloss, NULL);
        } else if (at.next) {
            e->carried_loss += exec_compute(e, &run, i, &at, t, dloss, ready);
        } else {
            *loss += exec_compute(e, &run, i, &at, t, dloss, ready);
        }
        if (at.pt->final && exec_tied(e) && e->bnd && e->bnd->sent)
            e->bnd->sent(e->bnd->ctx, t, at.mb, in->chunk, EXEC_BND_HEAD,
                         exec_bnd_host(e, model_head_input(stash_get(&e->stash, at.key)), e->n_act), e->n_act);
        break;
    case OP_BACKWARD:
        if (subs) subs->select(subs->ctx, at.bt);
        exec_turn_grad(e, in, &at, 1);
        exec_compute(e, &run, i, &at, t, dloss, ready);
        exec_turn_grad(e, in, &at, 0);
        break;
    case OP_OPTIMIZER_STEP:
        if (subs && in->mb >= 0) { /* causal: subnet at.bt's last backward here is done */
            subs->step(subs->ctx, at.bt);
            trace_span(c->trace, "subnet step", at.bt, -1, t0);
        }
        break;
    case OP_SEND_ACT:
        exec_send_act(e, in, &at, stash_get(&e->stash, at.key));
        trace_span(c->trace, "send activation", at.bt, at.mb, t0);
        break;
    case OP_RECV_GRAD:
        /* on the cpu backend it lands in dres itself: nothing before its reader (a forward in
         * dualpipev's pair, a PREFETCH) writes dres */
        if (c->nccl) be_p2p_recv(c->be, BE_P2P_GRAD_IN, c->scratch->dres, e->n_act, at.key);
        else exec_recv_post(e, 1, at.key, c->scratch->dres, in->peer, exec_tag(e, at.key_mb, in->chunk, 1),
                            "receive gradient", at.bt, at.mb, in->chunk + 1, EXEC_BND_GRAD);
        break;
    case OP_SEND_GRAD:
        exec_send_grad(e, in, &at);
        trace_span(c->trace, "send gradient", at.bt, at.mb, t0);
        break;
    case OP_OFFLOAD:
    case OP_PREFETCH:
    case OP_EVICT:
    case OP_RECLAIM:
    case OP_ACCEPT:
    case OP_RETURN:
        exec_move(e, in->op, at.key);
        trace_span(c->trace, exec_move_span[in->op], at.bt, at.mb, t0);
        break;
    case OP_REDUCE_GRADS:
        bal_drain(&e->bal);
        exec_reduce_grads(e, &run, i, t, drain, t0);
        break;
    case OP_BACKWARD_B:
        exec_turn_grad(e, in, &at, 1);
        exec_compute(e, &run, i, &at, t, dloss, ready);
        exec_turn_grad(e, in, &at, 0);
        break;
    case OP_BACKWARD_W:
        exec_compute(e, &run, i, &at, t, dloss, ready);
        break;
    default:
        break;
    }
    if (in->op == OP_FORWARD || in->op == OP_BACKWARD || in->op == OP_BACKWARD_W || in->op == OP_OFFLOAD ||
        in->op == OP_PREFETCH || in->op >= OP_EVICT) /* the balance ops */
        trace_counter(c->trace, "stash bytes", stash_bytes_in_use(&e->stash) + bal_guest_bytes_in_use(&e->bal));
}

/* Runs run's list for step t. */
static double exec_run(exec_t *e, const exec_run_t *rp, long t, float dloss, const exec_batch_t *src,
                       const model_ready_t *ready, int drain)
{
    const int two = sched_kind_versions(e->c.kind) == 2;
    double loss = two ? e->carried_loss : 0.0;
    e->carried_loss = 0.0;
    model_grads_zero(e->c.model);
    for (int i = 0; i < rp->list->n; i++) exec_instr(e, rp, i, t, dloss, src, ready, drain, NULL, &loss);
    if (two) {
        model_use_version(e->c.model, 0);
        e->carried = !drain;
    }
    exec_copy_spans(e, t);
    return loss;
}

double exec_step(exec_t *e, long t, float dloss, const exec_batch_t *src, const model_ready_t *ready, int drain)
{
    const int two = sched_kind_versions(e->c.kind) == 2;
    const lower_prog_t *prog = two ? &e->prog2bw[!e->carried][drain] : &e->prog;
    const exec_run_t run = {two ? &e->l2bw[!e->carried][drain] : &e->list, e->c.nccl ? prog : NULL};
    return exec_run(e, &run, t, dloss, src, ready, drain);
}

void exec_window_begin(exec_t *e)
{
    memset(e->sub_loss, 0, (size_t)(e->c.m / e->c.per) * sizeof *e->sub_loss);
    model_grads_zero(e->c.model);
}

void exec_window(exec_t *e, long t, const instr_list_t *list, float dloss, const exec_batch_t *src,
                 const exec_subnets_t *subs)
{
    const exec_run_t run = {list, NULL}; /* causal runs on MPI messages only (run.c) */
    exec_window_begin(e);
    for (int i = 0; i < list->n; i++) exec_instr(e, &run, i, t, dloss, src, NULL, 1, subs, NULL);
    exec_copy_spans(e, t);
}

void exec_window_instr(exec_t *e, long t, const instr_t *in, float dloss, const exec_batch_t *src,
                       const exec_subnets_t *subs)
{
    const instr_list_t one = {.ins = (instr_t *)in, .n = 1, .cap = 1};
    const exec_run_t run = {&one, NULL};
    exec_instr(e, &run, 0, t, dloss, src, NULL, 1, subs, NULL);
}

void exec_window_end(exec_t *e, long t)
{
    const instr_t flush = {.op = OP_REDUCE_GRADS, .mb = -1, .chunk = -1, .peer = -1};
    exec_window_instr(e, t, &flush, 0.0f, NULL, NULL);
    exec_copy_spans(e, t);
}

double exec_forward_only(exec_t *e, int valid_rows)
{
    const exec_ctx_t *c = &e->c;
    acts_t *a = c->acts;
    const int pp = c->pp, s = c->stage;
    double sum = 0.0;
    stash_bind_eval(&e->stash, a);
    for (int ch = 0; ch < e->v; ch++) {
        const int k = sched_stage_chunk(c->kind, s, ch, pp);
        const model_part_t *pt = &e->part[ch];
        const sched_place_t place = sched_kind_place(c->kind);
        /* the V's turn: chunk k−1 ran just before on this stage and left its output in a itself */
        if (k > 0 && sched_place_edge_local(place, k - 1, pp))
            be_copy(c->be, a->encoded, model_part_output(&e->part[ch - 1], a), e->n_act * sizeof(float));
        else if (k > 0)
            exec_recv_wait(e, a->encoded, sched_chunk_stage(c->kind, k - 1, pp), k, "an evaluation activation");
        model_forward_part(c->model, pt, a, c->scratch, NULL); /* its sum covers padding rows too: recounted below */
        if (k < e->K - 1 && !sched_place_edge_local(place, k, pp)) {
            MPI_Request q;
            MPI_CHECK(MPI_Isend(exec_send_src(e, model_part_output(pt, a), e->hsend), (int)e->n_act, MPI_FLOAT,
                                sched_chunk_stage(c->kind, k + 1, pp), k + 1, c->pp_comm, &q));
            wait_all(c->wait, 1, &q, "an evaluation activation send");
        } else if (k == e->K - 1) {
            for (long i = 0; i < (long)valid_rows * c->model->cfg.seq_len; i++) sum += a->host_losses[i];
        }
    }
    stash_unbind_eval(&e->stash, a);
    return sum;
}
