#include "pipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "perf.h"
#include "sim.h"

/* Most forwards awaiting their backward at any point of a run of `list` steps (2bw: the lists
 * joined as a run joins them: first then steady steps, each possibly drained). */
static int lists_peak(const instr_list_t *l, int carried)
{
    int live = carried, peak = carried;
    for (int i = 0; i < l->n; i++) {
        if (l->ins[i].op == OP_FORWARD && ++live > peak) peak = live;
        if (l->ins[i].op == OP_BACKWARD) live--;
    }
    return peak;
}

/* Where the gradient send buffers live: NCCL sends device memory, MPI host memory (cpu: the same). */
static int gsend_on_device(const pipe_t *p, const run_t *r) { return be_host_visible(&r->be) || p->nccl; }

int pipe_init(pipe_t *p, run_t *r)
{
    memset(p, 0, sizeof *p);
    const int pp = r->pp, v = r->model.tab.nchunks, s = r->stage;
    const int m = r->deck.train.batch / (r->deck.train.micro_batch * r->grid.replica_size);
    if (sched_kind_parse(r->deck.parallel.schedule, &p->kind) != MP_OK)
        return MP_FAIL("unknown parallel.schedule %s", r->deck.parallel.schedule);
    sim_result_t sim;
    if (sim_run(p->kind, pp, m, v, 1.0, 2.0, &sim) != MP_OK)
        return MP_FAIL("parallel.schedule=%s with pp=%d, %d micro-batches per step and %d chunk(s) per stage: %s",
                       r->deck.parallel.schedule, pp, m, v, sim.error);
    p->m = m, p->v = v, p->K = pp * v;
    p->theory = sim.bubble;
    p->nslots = sim.peak_stash[s];
    if (p->kind == SCHED_2BW) {
        for (int f = 0; f < 2; f++)
            for (int d = 0; d < 2; d++)
                if (sched_build_2bw(&p->l2bw[f][d], s, pp, m, f, d) != MP_OK) return MP_ERR;
        const int w = pp - s - 1 < m ? pp - s - 1 : m;
        for (int d = 0; d < 2; d++) {
            int a = lists_peak(&p->l2bw[1][d], 0), b = lists_peak(&p->l2bw[0][d], w);
            if (a > p->nslots) p->nslots = a;
            if (b > p->nslots) p->nslots = b;
        }
        p->theory = 0.0; /* no flush: the steady state has no bubble (the run's first step fills once) */
    } else if (sched_build(&p->list, p->kind, s, pp, m, v) != MP_OK) {
        return MP_ERR;
    }
    p->nkeys = (p->kind == SCHED_2BW ? 2 : 1) * m * v;
    int biggest = 0;
    for (int c = 0; c < v; c++) {
        p->part[c] = model_chunk(&r->model, c);
        if (p->part[c].n > biggest) biggest = p->part[c].n;
    }
    const int tag_ub_need = 2 * p->nkeys * p->K + 2;
    int *tag_ub, flag;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag));
    if (flag && *tag_ub < tag_ub_need)
        return MP_FAIL("the pipeline needs MPI tags up to %d, this MPI allows %d: fewer micro-batches per step",
                       tag_ub_need, *tag_ub);
    p->n_act = (size_t)r->deck.train.micro_batch * r->deck.model.seq_len * r->deck.model.dim;
    p->slots = MP_CALLOC((size_t)p->nslots, sizeof *p->slots);
    p->free_slots = MP_CALLOC((size_t)p->nslots, sizeof *p->free_slots);
    p->slot_send = MP_CALLOC((size_t)p->nslots, sizeof *p->slot_send);
    p->slot_of = MP_CALLOC((size_t)p->nkeys, sizeof *p->slot_of);
    p->gsend_req = MP_CALLOC((size_t)p->nkeys, sizeof *p->gsend_req);
    if (!p->slots || !p->free_slots || !p->slot_send || !p->slot_of || !p->gsend_req) return MP_ERR;
    for (int i = 0; i < p->nslots; i++) p->slot_send[i] = MPI_REQUEST_NULL, p->free_slots[i] = p->nslots - 1 - i;
    p->nfree = p->nslots;
    for (int i = 0; i < p->nkeys; i++) p->gsend_req[i] = MPI_REQUEST_NULL, p->slot_of[i] = -1;
    /* slot 0 is the run's own activations (every block the stage holds); the others are sized for
     * the largest chunk, with the head where the stage has it */
    p->slots[0] = r->acts;
    for (int i = 1; i < p->nslots; i++)
        if (acts_create_part(&p->slots[i], &r->model, r->deck.train.micro_batch, biggest, r->model.tab.has_final,
                             &r->arena) != MP_OK)
            return MP_ERR;
    p->nccl = r->be.kind == BE_CUDA && strcmp(r->deck.parallel.p2p, "mpi") != 0;
    const size_t ng = (size_t)p->nkeys * p->n_act;
    p->gsend = gsend_on_device(p, r) ? arena_floats(&r->arena, ng, "pipeline gradient send buffers")
                                     : be_host_alloc(&r->be, ng * sizeof(float));
    if (!p->gsend) return MP_FAIL("no memory for the pipeline's gradient send buffers");
    if (be_host_visible(&r->be)) return MP_OK;
    if (p->nccl) be_p2p_setup(&r->be, r->grid.comm[GRID_PP], pp, s, v > 1, p->nkeys); /* events per key */
    /* MPI reads host memory: parallel.p2p=mpi and the evaluation's messages cross through these */
    p->hsend = be_host_alloc(&r->be, (size_t)p->nslots * p->n_act * sizeof(float));
    p->hrecv = be_host_alloc(&r->be, p->n_act * sizeof(float));
    if (!p->hsend || !p->hrecv) return MP_FAIL("out of host memory for the pipeline's message buffers");
    return MP_OK;
}

void pipe_free(pipe_t *p, run_t *r)
{
    for (int i = 1; i < p->nslots && p->slots; i++)
        if (p->slots[i].buf) acts_destroy(&p->slots[i], &r->arena);
    if (gsend_on_device(p, r)) arena_free(&r->arena, p->gsend, (size_t)p->nkeys * p->n_act * sizeof(float));
    else be_host_free(&r->be, p->gsend);
    if (!be_host_visible(&r->be)) {
        be_host_free(&r->be, p->hsend);
        be_host_free(&r->be, p->hrecv);
    }
    free(p->slots);
    free(p->free_slots);
    free(p->slot_send);
    free(p->slot_of);
    free(p->gsend_req);
    sched_free(&p->list);
    for (int f = 0; f < 2; f++)
        for (int d = 0; d < 2; d++) sched_free(&p->l2bw[f][d]);
}

/* One activation or gradient into dev, through the host landing buffer off the cpu backend. */
static void pipe_recv_wait(pipe_t *p, run_t *r, float *dev, int peer, int tag, const char *where)
{
    MPI_Request q;
    float *land = p->hrecv ? p->hrecv : dev;
    MPI_CHECK(MPI_Irecv(land, (int)p->n_act, MPI_FLOAT, peer, tag, r->grid.comm[GRID_PP], &q));
    wait_all(&r->wait, 1, &q, where);
    be_to_device(&r->be, dev, land, p->n_act * sizeof(float));
}

/* What MPI sends for the activation or gradient at dev: dev itself on the cpu backend, else its
 * copy in the host buffer `host`. */
static const float *pipe_send_src(pipe_t *p, run_t *r, const float *dev, float *host)
{
    if (!host) return dev;
    be_to_host(&r->be, host, dev, p->n_act * sizeof(float));
    return host;
}

static void pipe_recv(pipe_t *p, run_t *r, float *buf, int peer, int tag, const char *what, long t, int mb)
{
    double t0 = perf_now();
    /* A hung or dead peer ends in wait_all's timeout: its message names the rank to look at. */
    int coord[GRID_NDIMS];
    memcpy(coord, r->grid.coord, sizeof coord);
    coord[GRID_PP] = peer;
    char where[160];
    snprintf(where, sizeof where, "%s of micro-batch %d of step %ld from rank %d (stage %d)", what, mb, t,
             grid_rank_of(&r->grid, coord), peer);
    pipe_recv_wait(p, r, buf, peer, tag, where);
    p->idle += perf_now() - t0;
    trace_span(&r->trace, what, t, mb, t0);
}

/* The tied embedding: the first stage holds the embedding's gradient part, the last the head's;
 * both need their sum (a + b is the same bits either way round, as on one rank). */
static void pipe_tied_sum(run_t *r)
{
    if (r->pp == 1 || r->grid.embed == MPI_COMM_NULL) return;
    const param_entry_t *e = param_table_find(&r->model.tab, "wte");
    be_allreduce(&r->be, r->model.grads + e->offset, e->numel, MPI_SUM, r->grid.embed,
                 "the tied-embedding gradient sum between the first and the last stage");
}

/* Message tags: one per (micro-batch key, chunk boundary, direction), so no two messages in flight
 * between two stages share one. Boundary b lies between chunks b and b+1. */
static int pipe_tag(const pipe_t *p, int key_mb, int boundary, int grad)
{
    return 2 * (key_mb * p->K + boundary) + grad;
}

/* Takes a free slot for (key, chunk); waits for the activation send still reading it. */
static acts_t *slot_take(pipe_t *p, run_t *r, int key)
{
    if (p->nfree == 0) MP_ABORT("pipeline stash exhausted (%d slots): the schedule needs more", p->nslots);
    int s = p->free_slots[--p->nfree];
    wait_all(&r->wait, 1, &p->slot_send[s], "a pipeline activation send");
    p->slot_of[key] = s;
    if (p->nslots - p->nfree > p->stash_peak) p->stash_peak = p->nslots - p->nfree;
    return &p->slots[s];
}

static void slot_give(pipe_t *p, int key)
{
    p->free_slots[p->nfree++] = p->slot_of[key];
    p->slot_of[key] = -1;
}

double pipe_step(pipe_t *p, run_t *r, long t, pipe_fill_fn fill, float dloss, void (*bucket)(void *ctx, int layer),
                 int drain)
{
    const int two = p->kind == SCHED_2BW, m = p->m;
    const instr_list_t *list = two ? &p->l2bw[!p->carried][drain] : &p->list;
    double loss = two ? p->carried_loss : 0.0;
    p->carried_loss = 0.0;
    model_grads_zero(&r->model);
    for (int i = 0; i < list->n; i++) {
        const instr_t *in = &list->ins[i];
        /* 2bw: micro-batch m + j is the next batch's j (schedule.h) */
        const int next = in->mb >= m, mb = in->mb >= 0 ? in->mb % m : -1;
        const long bt = t + next;
        const int c = in->chunk >= 0 ? in->chunk / r->pp : 0;
        const int key_mb = two ? (int)(bt & 1) * m + mb : mb, key = key_mb * p->v + c;
        const model_part_t *pt = &p->part[c];
        acts_t *a = mb >= 0 && p->slot_of[key] >= 0 ? &p->slots[p->slot_of[key]] : NULL;
        if (two) model_use_version(&r->model, !next); /* batch t on W(t-1), batch t+1 on W(t) */
        double t0 = perf_now();
        switch (in->op) {
        case OP_LOAD_BATCH:
            a = slot_take(p, r, key);
            fill(r, a, bt, mb);
            break;
        case OP_RECV_ACT:
            a = slot_take(p, r, key);
            if (p->nccl) be_p2p_recv(&r->be, BE_P2P_ACT_IN, a->encoded, p->n_act, key);
            else pipe_recv(p, r, a->encoded, in->peer, pipe_tag(p, key_mb, in->chunk - 1, 0), "receive activation", bt, mb);
            if (pt->final) fill(r, a, bt, mb); /* the targets */
            break;
        case OP_FORWARD: {
            if (p->nccl) { /* sim_nccl.c: after its input arrived and the newest activation send left */
                if (in->chunk > 0) be_p2p_wait(&r->be, BE_P2P_ACT_IN, key);
                be_p2p_fence(&r->be, BE_P2P_ACT_OUT);
            }
            double l = model_forward_part(&r->model, pt, a, &r->scratch);
            actdump_capture(&r->dump, &r->model, pt, a, bt, mb);
            if (next) p->carried_loss += l;
            else loss += l;
            trace_span(&r->trace, "forward", bt, mb, t0);
            break;
        }
        case OP_SEND_ACT:
            if (p->nccl) {
                be_p2p_send(&r->be, BE_P2P_ACT_OUT, model_part_output(pt, a), p->n_act);
                trace_span(&r->trace, "send activation", bt, mb, t0);
                break;
            }
            MPI_CHECK(MPI_Isend(pipe_send_src(p, r, model_part_output(pt, a),
                                              p->hsend ? p->hsend + (size_t)p->slot_of[key] * p->n_act : NULL),
                                (int)p->n_act, MPI_FLOAT, in->peer,
                                pipe_tag(p, key_mb, in->chunk, 0), r->grid.comm[GRID_PP],
                                &p->slot_send[p->slot_of[key]]));
            trace_span(&r->trace, "send activation", bt, mb, t0);
            break;
        case OP_RECV_GRAD:
            if (p->nccl) be_p2p_recv(&r->be, BE_P2P_GRAD_IN, r->scratch.dres, p->n_act, key);
            else pipe_recv(p, r, r->scratch.dres, in->peer, pipe_tag(p, key_mb, in->chunk, 1), "receive gradient", bt, mb);
            break;
        case OP_BACKWARD:
            r->model.grads_ready = bucket && mb == m - 1 ? bucket : NULL; /* each chunk's last */
            r->model.grads_ctx = r;
            if (p->nccl && in->chunk < p->K - 1) be_p2p_wait(&r->be, BE_P2P_GRAD_IN, key);
            model_backward_part(&r->model, pt, a, &r->scratch, dloss);
            r->model.grads_ready = NULL;
            slot_give(p, key);
            trace_span(&r->trace, "backward", bt, mb, t0);
            break;
        case OP_SEND_GRAD: {
            float *g = p->gsend + (size_t)key * p->n_act;
            if (p->nccl) { /* g is device memory; its send two steps ago is done (REDUCE_GRADS' fence) */
                be_copy(&r->be, g, r->scratch.dres, p->n_act * sizeof(float));
                be_p2p_send(&r->be, BE_P2P_GRAD_OUT, g, p->n_act);
                trace_span(&r->trace, "send gradient", bt, mb, t0);
                break;
            }
            wait_all(&r->wait, 1, &p->gsend_req[key], "a pipeline gradient send");
            be_to_host(&r->be, g, r->scratch.dres, p->n_act * sizeof(float));
            MPI_CHECK(MPI_Isend(g, (int)p->n_act, MPI_FLOAT, in->peer, pipe_tag(p, key_mb, in->chunk - 1, 1),
                                r->grid.comm[GRID_PP], &p->gsend_req[key]));
            trace_span(&r->trace, "send gradient", bt, mb, t0);
            break;
        }
        case OP_REDUCE_GRADS:
            /* this batch's gradient sends; activation sends are waited for when their slot is reused */
            for (int j = 0; j < m * p->v; j++)
                wait_all(&r->wait, 1, &p->gsend_req[(two ? (int)(t & 1) * m * p->v : 0) + j], "the step's gradient sends");
            if (!two || drain)
                for (int s = 0; s < p->nslots; s++) wait_all(&r->wait, 1, &p->slot_send[s], "the step's activation sends");
            for (int d = 0; p->nccl && d < BE_P2P_DIRS; d++) be_p2p_fence(&r->be, d);
            model_grads_finish(&r->model);
            pipe_tied_sum(r);
            trace_span(&r->trace, two && !drain ? "gradients final" : "pipeline flush", t, -1, t0);
            break;
        default:
            break;
        }
    }
    if (two) {
        model_use_version(&r->model, 0);
        p->carried = !drain;
    }
    return loss;
}

double pipe_forward_only(pipe_t *p, run_t *r, int valid_rows)
{
    acts_t *a = &p->slots[0];
    const int pp = r->pp, s = r->stage;
    double sum = 0.0;
    for (int c = 0; c < p->v; c++) {
        const int k = c * pp + s;
        const model_part_t *pt = &p->part[c];
        if (k > 0) pipe_recv_wait(p, r, a->encoded, (k - 1) % pp, k, "an evaluation activation");
        model_forward_part(&r->model, pt, a, &r->scratch); /* its sum covers padding rows too: recounted below */
        if (k < p->K - 1) {
            MPI_Request q;
            MPI_CHECK(MPI_Isend(pipe_send_src(p, r, model_part_output(pt, a), p->hsend), (int)p->n_act, MPI_FLOAT,
                                (k + 1) % pp, k + 1, r->grid.comm[GRID_PP], &q));
            wait_all(&r->wait, 1, &q, "an evaluation activation send");
        } else {
            for (long i = 0; i < (long)valid_rows * r->deck.model.seq_len; i++) sum += a->host_losses[i];
        }
    }
    return sum;
}
