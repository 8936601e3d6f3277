#include "pipe.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "perf.h"
#include "sim.h"

int pipe_init(pipe_t *p, run_t *r)
{
    memset(p, 0, sizeof *p);
    sched_kind_t kind;
    const int pp = r->pp, m = r->deck.train.batch / (r->deck.train.micro_batch * r->grid.replica_size);
    if (sched_kind_parse(r->deck.parallel.schedule, &kind) != MP_OK)
        return MP_FAIL("unknown parallel.schedule %s", r->deck.parallel.schedule);
    sim_result_t sim;
    if (sim_run(kind, pp, m, 1, 1.0, 2.0, &sim) != MP_OK)
        return MP_FAIL("parallel.schedule=%s with pp=%d and %d micro-batches: %s", r->deck.parallel.schedule, pp, m,
                       sim.error);
    if (sched_build(&p->list, kind, r->stage, pp, m, 1) != MP_OK) return MP_ERR;
    p->m = m;
    p->theory = sim.bubble;
    p->nslots = sim.peak_stash[r->stage];
    p->n_act = (size_t)r->deck.train.micro_batch * r->deck.model.seq_len * r->deck.model.dim;
    p->slots = MP_CALLOC((size_t)p->nslots, sizeof *p->slots);
    p->sends = MP_CALLOC(2 * (size_t)m, sizeof *p->sends);
    if (!p->slots || !p->sends) return MP_ERR;
    for (int i = 0; i < 2 * m; i++) p->sends[i] = MPI_REQUEST_NULL;
    /* slot 0 is the run's own activations; the others come from the arena */
    p->slots[0] = r->acts;
    for (int i = 1; i < p->nslots; i++)
        if (acts_create(&p->slots[i], &r->model, r->deck.train.micro_batch, &r->arena) != MP_OK) return MP_ERR;
    if (!(p->gsend = arena_floats(&r->arena, (size_t)m * p->n_act, "pipeline gradient send buffers"))) return MP_ERR;
    return MP_OK;
}

void pipe_free(pipe_t *p, run_t *r)
{
    for (int i = 1; i < p->nslots && p->slots; i++)
        if (p->slots[i].buf) acts_destroy(&p->slots[i], &r->arena);
    if (p->gsend) arena_free(&r->arena, p->gsend, (size_t)p->m * p->n_act * sizeof(float));
    free(p->slots);
    free(p->sends);
    sched_free(&p->list);
}

static void pipe_recv(pipe_t *p, run_t *r, float *buf, size_t n, int peer, int tag, const char *what)
{
    MPI_Request q;
    double t0 = perf_now();
    MPI_CHECK(MPI_Irecv(buf, (int)n, MPI_FLOAT, peer, tag, r->grid.comm[GRID_PP], &q));
    wait_all(&r->wait, 1, &q, what);
    p->idle += perf_now() - t0;
}

/* The tied embedding: the first stage holds the embedding's gradient part, the last the head's;
 * both need their sum (a + b is the same bits either way round, as on one rank). */
static void pipe_tied_sum(run_t *r)
{
    if (r->pp == 1 || r->grid.embed == MPI_COMM_NULL) return;
    const param_entry_t *e = param_table_find(&r->model.tab, "wte");
    wait_allreduce_sum(&r->wait, r->model.grads + e->offset, (int)e->numel, MPI_FLOAT, r->grid.embed,
                       "the tied-embedding gradient sum between the first and the last stage");
}

double pipe_step(pipe_t *p, run_t *r, long t, pipe_fill_fn fill, float dloss, void (*bucket)(void *ctx, int layer))
{
    double loss = 0.0;
    model_grads_zero(&r->model);
    for (int i = 0; i < p->list.n; i++) {
        const instr_t *in = &p->list.ins[i];
        acts_t *a = in->mb >= 0 ? &p->slots[in->mb % p->nslots] : NULL;
        const int tag = 2 * (in->mb >= 0 ? in->mb : 0);
        double t0 = perf_now();
        switch (in->op) {
        case OP_RECV_ACT:
            if (in->mb >= p->nslots) /* the slot's previous activation must have left */
                wait_all(&r->wait, 1, &p->sends[2 * (in->mb - p->nslots)], "a pipeline activation send");
            pipe_recv(p, r, a->encoded, p->n_act, in->peer, tag, "a pipeline activation");
            break;
        case OP_LOAD_BATCH:
            if (in->mb >= p->nslots) wait_all(&r->wait, 1, &p->sends[2 * (in->mb - p->nslots)], "a pipeline activation send");
            break;
        case OP_FORWARD:
            fill(r, a, t, in->mb);
            loss += model_forward(&r->model, a, &r->scratch);
            trace_span(&r->trace, "forward", t, in->mb, t0);
            break;
        case OP_SEND_ACT:
            MPI_CHECK(MPI_Isend(model_stage_output(&r->model, a), (int)p->n_act, MPI_FLOAT, in->peer, tag,
                                r->grid.comm[GRID_PP], &p->sends[2 * in->mb]));
            break;
        case OP_RECV_GRAD:
            pipe_recv(p, r, r->scratch.dres, p->n_act, in->peer, tag + 1, "a pipeline gradient");
            break;
        case OP_BACKWARD:
            r->model.grads_ready = bucket && in->mb == p->m - 1 ? bucket : NULL;
            r->model.grads_ctx = r;
            model_backward(&r->model, a, &r->scratch, dloss);
            r->model.grads_ready = NULL;
            trace_span(&r->trace, "backward", t, in->mb, t0);
            break;
        case OP_SEND_GRAD: {
            float *g = p->gsend + (size_t)in->mb * p->n_act;
            memcpy(g, r->scratch.dres, p->n_act * sizeof(float));
            MPI_CHECK(MPI_Isend(g, (int)p->n_act, MPI_FLOAT, in->peer, tag + 1, r->grid.comm[GRID_PP],
                                &p->sends[2 * in->mb + 1]));
            break;
        }
        case OP_REDUCE_GRADS:
            wait_all(&r->wait, 2 * p->m, p->sends, "the step's pipeline sends");
            model_grads_finish(&r->model);
            pipe_tied_sum(r);
            trace_span(&r->trace, "pipeline flush", t, -1, t0);
            break;
        default:
            break;
        }
    }
    return loss;
}

double pipe_forward_only(pipe_t *p, run_t *r, int valid_rows)
{
    acts_t *a = &p->slots[0];
    const int first = r->stage == 0, last = r->stage == r->pp - 1;
    if (!first) pipe_recv(p, r, a->encoded, p->n_act, r->stage - 1, 0, "an evaluation activation");
    double sum = 0.0;
    model_forward(&r->model, a, &r->scratch); /* its sum covers padding rows too: recounted below */
    if (!last) {
        MPI_Request q;
        MPI_CHECK(MPI_Isend(model_stage_output(&r->model, a), (int)p->n_act, MPI_FLOAT, r->stage + 1, 0,
                            r->grid.comm[GRID_PP], &q));
        wait_all(&r->wait, 1, &q, "an evaluation activation send");
        return 0.0;
    }
    for (long i = 0; i < (long)valid_rows * r->deck.model.seq_len; i++) sum += a->losses[i];
    return sum;
}
