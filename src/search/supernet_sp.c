/* Supernet parallelism in the executor (parallel.sp > 1, DESIGN §4 "SP", docs/SUPERNET.md "SP
 * replicas"): sp replicas of the pipeline run one window's subnets under NASPipe's causal rule. Every
 * rank builds the lists of all sp × pp ranks (csp_build_best, a function of the sampling alone) and
 * runs its own: rank r·pp + s of the lists is the grid's (sp r, pp s). The pipeline's instructions
 * (LOAD, FORWARD, BACKWARD, STEP, ACT and GRAD messages) go one at a time through the executor
 * (exec_window_instr) exactly as a causal window's do; this file runs the rest:
 *   CAND, SYNC  a candidate's weights and AdamW moments to the same stage of another replica (its step
 *               counter is the sampling's: every rank recomputes it, supernet_sp_counts);
 *   ADD         the subnet's shared gradients of the stage, kept in their own slot since its STEP, join
 *               the window's running sum (sn->acc, sn->acc_head), which SUM brings from the previous
 *               subnet's replica and FINAL from the last one: the sum is formed in subnet order, the
 *               bits of one rank;
 *   SHARED_STEP the window's end: the pipeline sends done, every replica's copy steps with the same sum.
 * SP messages are point-to-point on the stage's replica communicator (GRID_SP, ranked by replica)
 * with one tag per (kind, subnet, candidate); each send goes from its own host copy, waited for at the
 * window's end; every receive waits through wait_all (deadline, phase name, the core yielded). */
#include <stdlib.h>
#include <string.h>

#include "causal_sp.h"
#include "check.h"
#include "optim.h"
#include "supernet.h"
#include "sim.h"
#include "train.h"

typedef struct {
    run_t *r;
    MPI_Comm comm;          /* this stage's replicas, rank = replica */
    int pp, me;             /* this rank in the lists: replica·pp + stage */
    int tags;               /* (L·ncand + 1) tags per (kind, subnet) */
    long tag_ub;            /* MPI_TAG_UB of comm */
    int nsend, cap;         /* the window's SP sends in flight, their host copies */
    MPI_Request *req;
    float **buf;
} sp_run_t;

static void sp_select(void *ctx, long t)
{
    run_t *r = ctx;
    model_select(&r->st.model, supernet_of(r)->wsel + (size_t)(t - supernet_of(r)->t0) * r->deck.model.layers);
}

/* Step counters as the sequential order leaves them after subnets 0 .. upto − 1 of the window: upto's
 * own candidates only (its step adds its own), or every candidate (upto = window, the window's end). */
static void sp_counts(run_t *r, int upto)
{
    supernet_t *sn = supernet_of(r);
    const int L = r->deck.model.layers, K = sn->ncand, W = sn->window;
    for (int l = 0; l < L; l++)
        for (int k = 0; k < K; k++) {
            if (upto < W && sn->wsel[(size_t)upto * L + l] != k) continue;
            long c = sn->base[(size_t)l * K + k];
            for (int i = 0; i < upto && !supernet_weightless(&r->deck, k); i++) c += sn->wsel[(size_t)i * L + l] == k;
            sn->count[(size_t)l * K + k] = c;
        }
}

/* The two ends of a slot's life: the stage's shared gradients (the tensors with cand < 0, in table
 * order, then the LM head's part) copied in after the subnet's step, added to the running sum at its ADD. */
static void sp_slot_save(run_t *r, float *slot)
{
    model_t *m = &r->st.model;
    size_t pos = 0;
    for (int i = 0; i < m->tab.count; i++) {
        const param_entry_t *e = &m->tab.entries[i];
        if (e->cand >= 0) continue;
        be_copy(&r->st.be, slot + pos, m->grads + e->offset, e->numel * sizeof(float));
        pos += e->numel;
    }
    if (supernet_of(r)->acc_head) be_copy(&r->st.be, slot + pos, m->grad_head, (supernet_of(r)->slot_len - pos) * sizeof(float));
}

static void sp_slot_add(run_t *r, const float *slot)
{
    model_t *m = &r->st.model;
    supernet_t *sn = supernet_of(r);
    size_t pos = 0;
    for (int i = 0; i < m->tab.count; i++) {
        const param_entry_t *e = &m->tab.entries[i];
        if (e->cand >= 0) continue;
        be_vec_add(&r->st.be, sn->acc + e->offset, sn->acc + e->offset, slot + pos, e->numel);
        pos += e->numel;
    }
    if (sn->acc_head) be_vec_add(&r->st.be, sn->acc_head, sn->acc_head, slot + pos, sn->slot_len - pos);
}

/* After subnet t's last backward on this stage: its candidates step with the counters of the
 * sequential order, its shared gradients wait in its slot for its ADD. */
static void sp_step(void *ctx, long t)
{
    run_t *r = ctx;
    supernet_t *sn = supernet_of(r);
    const int j = (int)(t - sn->t0);
    const size_t row = (size_t)j * r->deck.model.layers;
    sp_counts(r, j);
    supernet_replica_sum(&r->lay, &r->st); /* data parallelism inside the replica: the subnet's whole batch */
    PROF(&r->prof, PROF_OPTIMIZER, supernet_subnet_cands(r, sn->wsel + row, optim_lr(&r->optim, t), 1, sn->wcn2 + row));
    sp_slot_save(r, sn->slots + (size_t)j * sn->slot_len);
    model_grads_zero(&r->st.model); /* the next backward here is the next subnet's */
}

/* An SP message's payload: CAND and SYNC the tensors of candidate x = l·ncand + k of this stage
 * (weights, then both moments, tensor by tensor); SUM and FINAL the running sum (slot order). pack = 1
 * copies the model's state into host buf, 0 back from it. Returns its floats (buf NULL: only counts). */
static size_t sp_payload(run_t *r, csp_msg_t kind, int x, float *buf, int pack)
{
    model_t *m = &r->st.model;
    supernet_t *sn = supernet_of(r);
    size_t n = 0;
    for (int i = 0; i < m->tab.count; i++) {
        const param_entry_t *e = &m->tab.entries[i];
        const int cand = kind == CSP_MSG_CAND || kind == CSP_MSG_SYNC;
        if (cand ? e->cand < 0 || e->layer * sn->ncand + e->cand != x : e->cand >= 0) continue;
        float *src[3] = {cand ? m->params + e->offset : sn->acc + e->offset, m->m + e->offset, m->v + e->offset};
        for (int b = 0; b < (cand ? 3 : 1); b++, n += e->numel) {
            if (!buf) continue;
            if (pack) be_to_host(&r->st.be, buf + n, src[b], e->numel * sizeof(float));
            else be_to_device(&r->st.be, src[b], buf + n, e->numel * sizeof(float));
        }
    }
    if ((kind == CSP_MSG_SUM || kind == CSP_MSG_FINAL) && sn->acc_head) {
        const size_t h = sn->slot_len - n;
        if (buf && pack) be_to_host(&r->st.be, buf + n, sn->acc_head, h * sizeof(float));
        else if (buf) be_to_device(&r->st.be, sn->acc_head, buf + n, h * sizeof(float));
        n += h;
    }
    return n;
}

static const char *const sp_msg_what[CSP_MSGS] = {"", "", "a candidate's state", "the running shared sum",
                                                   "the window's full shared sum", "a candidate's final state"};
static const char *const sp_msg_span[CSP_MSGS] = {"", "", "receive candidate", "receive shared sum",
                                                   "receive final shared sum", "receive candidate sync"};

/* One tag per (kind, subnet, candidate); MPI guarantees tags up to 32767, MPICH far more. */
static int sp_tag(const sp_run_t *x, const csp_instr_t *in)
{
    const long tag = ((long)(in->msg - CSP_MSG_CAND) * supernet_of(x->r)->window + in->id) * x->tags + in->what + 1;
    if (tag > x->tag_ub)
        MP_ABORT("supernet replicas: message tag %ld exceeds MPI_TAG_UB %ld (supernet.window × layers × candidates too "
                 "large for this MPI)", tag, x->tag_ub);
    return (int)tag;
}

static void sp_send(sp_run_t *x, const csp_instr_t *in)
{
    run_t *r = x->r;
    if (x->nsend == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 16;
        x->req = realloc(x->req, (size_t)x->cap * sizeof *x->req), x->buf = realloc(x->buf, (size_t)x->cap * sizeof *x->buf);
        if (!x->req || !x->buf) MP_ABORT("out of memory for the supernet replicas' messages");
    }
    const size_t n = sp_payload(r, in->msg, in->what, NULL, 1);
    float *buf = MP_MALLOC((n ? n : 1) * sizeof(float));
    if (!buf) MP_ABORT("out of memory for a supernet replicas' message of %zu floats", n);
    sp_payload(r, in->msg, in->what, buf, 1);
    x->buf[x->nsend] = buf;
    MPI_CHECK(MPI_Isend(buf, (int)n, MPI_FLOAT, in->peer / x->pp, sp_tag(x, in), x->comm, &x->req[x->nsend]));
    x->nsend++;
}

static void sp_recv(sp_run_t *x, const csp_instr_t *in)
{
    run_t *r = x->r;
    const size_t n = sp_payload(r, in->msg, in->what, NULL, 0);
    float *buf = MP_MALLOC((n ? n : 1) * sizeof(float));
    if (!buf) MP_ABORT("out of memory for a supernet replicas' message of %zu floats", n);
    char what[200];
    snprintf(what, sizeof what, "%s (subnet %ld, candidate %d) from replica %d of stage %d", sp_msg_what[in->msg],
             supernet_of(r)->t0 + in->id, in->what, in->peer / x->pp, r->lay.stage);
    MPI_Request q;
    const double t0 = perf_now();
    MPI_CHECK(MPI_Irecv(buf, (int)n, MPI_FLOAT, in->peer / x->pp, sp_tag(x, in), x->comm, &q));
    wait_all(&r->lay.wait, 1, &q, what);
    r->st.exec.idle += perf_now() - t0;
    sp_payload(r, in->msg, in->what, buf, 0);
    trace_span(&r->files.trace, sp_msg_span[in->msg], supernet_of(r)->t0 + in->id, -1, t0);
    free(buf);
}

/* csp instruction → the executor's (v = 1: chunk = stage, peers by stage). */
static instr_t sp_pipeline_instr(const sp_run_t *x, const csp_instr_t *in)
{
    static const op_t send[2] = {OP_SEND_ACT, OP_SEND_GRAD}, recv[2] = {OP_RECV_ACT, OP_RECV_GRAD};
    const int per = x->r->lay.micro_batches, stage = x->r->lay.stage;
    switch (in->op) {
    case CSP_LOAD: return (instr_t){OP_LOAD_BATCH, in->id, stage, -1};
    case CSP_FORWARD: return (instr_t){OP_FORWARD, in->id, stage, -1};
    case CSP_BACKWARD: return (instr_t){OP_BACKWARD, in->id, stage, -1};
    case CSP_STEP: return (instr_t){OP_OPTIMIZER_STEP, in->id * per + per - 1, stage, -1}; /* its last unit */
    case CSP_SEND: return (instr_t){send[in->msg == CSP_MSG_GRAD], in->id, stage, in->peer % x->pp};
    default: return (instr_t){recv[in->msg == CSP_MSG_GRAD], in->id, stage, in->peer % x->pp};
    }
}

/* This rank's list of the window (and every subnet's replica in sn->rep). */
static csp_list_t sp_list(run_t *r, int me)
{
    int layer0[SIM_MAX_STAGES + 1];
    unsigned char weightless[DECK_LIST_MAX];
    csp_cfg_t g = {.sp = r->lay.grid.size[GRID_SP]};
    supernet_window_cfg(r, &g.c, layer0, weightless);
    const csp_costs_t costs = {.tf = 1.0, .tb = 2.0}; /* the unit model, messages free */
    const int R = g.sp * r->lay.pp;
    csp_list_t *lists = MP_CALLOC((size_t)R, sizeof *lists);
    csp_result_t res;
    if (!lists || csp_build_best(&g, &costs, supernet_of(r)->rep, lists, &res) != MP_OK)
        MP_ABORT("out of memory building the supernet replicas' lists of the window of subnet %ld", supernet_of(r)->t0);
    const csp_list_t mine = lists[me];
    lists[me] = (csp_list_t){0};
    csp_free_lists(lists, R);
    free(lists);
    return mine;
}

void supernet_sp_window(run_t *r, const exec_batch_t *src)
{
    supernet_t *sn = supernet_of(r);
    const long t0 = sn->t0;
    const int L = r->deck.model.layers;
    const float dloss = (float)(1.0 / ((double)r->deck.train.batch * r->deck.model.seq_len));
    sp_run_t x = {.r = r, .comm = r->lay.grid.comm[GRID_SP], .pp = r->lay.pp, .me = r->lay.grid.coord[GRID_SP] * r->lay.pp + r->lay.stage,
                  .tags = L * sn->ncand + 1};
    int *ub, flag = 0;
    MPI_CHECK(MPI_Comm_get_attr(x.comm, MPI_TAG_UB, &ub, &flag));
    x.tag_ub = flag ? *ub : 32767;
    csp_list_t list = sp_list(r, x.me);
    memcpy(sn->base, sn->count, (size_t)L * sn->ncand * sizeof *sn->base);
    const exec_subnets_t subs = {sp_select, sp_step, r};
    exec_window_begin(&r->st.exec);
    for (int i = 0; i < list.n; i++) {
        const csp_instr_t *in = &list.ins[i];
        const double ts = perf_now();
        const int sp_msg = (in->op == CSP_SEND || in->op == CSP_RECV) && in->msg >= CSP_MSG_CAND;
        if (sp_msg && in->op == CSP_SEND) {
            sp_send(&x, in);
        } else if (sp_msg) {
            sp_recv(&x, in);
        } else if (in->op == CSP_ADD) {
            sp_slot_add(r, sn->slots + (size_t)in->id * sn->slot_len);
            trace_span(&r->files.trace, "shared sum add", t0 + in->id, -1, ts);
        } else if (in->op == CSP_SHARED_STEP) {
            exec_window_end(&r->st.exec, t0);
            sp_counts(r, sn->window);
            PROF(&r->prof, PROF_OPTIMIZER, supernet_window_end(r, t0 + sn->window - 1));
        } else {
            const instr_t e = sp_pipeline_instr(&x, in);
            exec_window_instr(&r->st.exec, t0, &e, dloss, src, &subs);
        }
    }
    wait_all(&r->lay.wait, x.nsend, x.req, "the supernet replicas' sends of the window");
    for (int i = 0; i < x.nsend; i++) free(x.buf[i]);
    free(x.req), free(x.buf);
    free(list.ins);
}
