#include "lower.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

const char *const lower_stream_names[LS_STREAMS] = {
    "compute",          "activation-in",     "activation-out",   "gradient-in",     "gradient-out", "offload",
    "activation-in-V",  "activation-out-V",  "gradient-in-V",    "gradient-out-V"};
const lower_stream_t lower_partner[LS_STREAMS] = {LS_COMPUTE,    LS_ACT_OUT,   LS_ACT_IN,     LS_GRAD_OUT,
                                                  LS_GRAD_IN,    LS_OFFLOAD,   LS_ACT_OUT_V,  LS_ACT_IN_V,
                                                  LS_GRAD_OUT_V, LS_GRAD_IN_V};

/* The stream of a message over the boundary between chunk edge and edge+1: its lane's. */
static lower_stream_t lower_msg_stream(const instr_list_t *l, int K, int edge, int act, int in)
{
    static const lower_stream_t x[2][2][2] = {{{LS_GRAD_OUT, LS_GRAD_IN}, {LS_ACT_OUT, LS_ACT_IN}},
                                              {{LS_GRAD_OUT_V, LS_GRAD_IN_V}, {LS_ACT_OUT_V, LS_ACT_IN_V}}};
    return x[sched_place_lane(l->place, edge, K)][act][in];
}

static lower_op_t *lower_push(lower_prog_t *p, lower_stream_t x, lower_kind_t kind, int instr)
{
    if (p->target == LOWER_HOST) x = LS_COMPUTE; /* one in-order stream: its order is every wait */
    lower_seq_t *s = &p->s[x];
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        lower_op_t *ops = realloc(s->ops, (size_t)cap * sizeof *ops);
        if (!ops) return NULL;
        s->ops = ops, s->cap = cap;
    }
    lower_op_t *o = &s->ops[s->n++];
    memset(o, 0, sizeof *o);
    o->kind = kind, o->instr = instr, o->wait_chan = -1;
    p->stream_of[instr] = x, p->index_of[instr] = s->n - 1;
    return o;
}

static void lower_dep(const lower_prog_t *p, lower_op_t *o, int stream, int idx)
{
    if (idx < 0 || p->target == LOWER_HOST) return;
    o->dep_stream[o->ndeps] = stream;
    o->dep_idx[o->ndeps++] = idx;
}

/* The rules of lower.h for one instruction of l. ref: [act|grad][k][mb] → index of its receive;
 * last_sa: the newest activation send (the loop's one lane). */
static int lower_instr(lower_prog_t *p, const instr_list_t *l, int i, int K, int M, int *ref, int *last_c, int *last_sa)
{
    const instr_t *in = &l->ins[i];
    const int k = in->chunk, mb = in->mb;
    lower_op_t *o;
    switch (in->op) {
    case OP_RECV_ACT:
    case OP_RECV_GRAD: {
        const int act = in->op == OP_RECV_ACT;
        const lower_stream_t x = lower_msg_stream(l, K, act ? k - 1 : k, act, 1);
        if (!(o = lower_push(p, x, p->target == LOWER_HOST ? LK_POST : LK_RECV, i))) return MP_ERR;
        o->peer = in->peer, o->k = act ? k - 1 : k + 1, o->mb = mb, o->chan = !act;
        lower_dep(p, o, LS_COMPUTE, *last_c);
        ref[((size_t)!act * K + k) * M + mb] = p->index_of[i]; /* host: on the one stream */
        break;
    }
    case OP_SEND_ACT:
    case OP_SEND_GRAD: {
        const int act = in->op == OP_SEND_ACT, edge = act ? k : k - 1;
        const lower_stream_t x = lower_msg_stream(l, K, edge, act, 0);
        if (!(o = lower_push(p, x, LK_SEND, i))) return MP_ERR;
        o->peer = in->peer, o->k = k, o->mb = mb, o->chan = !act;
        lower_dep(p, o, LS_COMPUTE, *last_c);
        if (act) *last_sa = p->s[x].n - 1;
        break;
    }
    case OP_FORWARD:
    case OP_BACKWARD:
    case OP_BACKWARD_B: {
        const int act = in->op == OP_FORWARD, edge = act ? k - 1 : k;
        if (!(o = lower_push(p, LS_COMPUTE, LK_COMPUTE, i))) return MP_ERR;
        o->k = k, o->mb = mb;
        if (edge >= 0 && edge < K - 1) /* chunk 0's forward and the last chunk's backward receive nothing */
            lower_dep(p, o, lower_msg_stream(l, K, edge, act, 1), ref[((size_t)!act * K + k) * M + mb]);
        /* host: the message posted by its receive, waited for here (none across V's turn) */
        if (p->target == LOWER_HOST && ref[((size_t)!act * K + k) * M + mb] >= 0)
            o->wait_chan = !act, o->wait_k = act ? k - 1 : k + 1, o->wait_mb = mb;
        /* V: its activation sends read a per-key copy (lower.h), so a forward waits on no send */
        if (act && l->place == SCHED_PLACE_LOOP) lower_dep(p, o, LS_ACT_OUT, *last_sa);
        *last_c = p->s[LS_COMPUTE].n - 1;
        break;
    }
    case OP_BACKWARD_W: /* its B is earlier on this stream: the order is its wait */
        if (!(o = lower_push(p, LS_COMPUTE, LK_COMPUTE, i))) return MP_ERR;
        o->k = k, o->mb = mb;
        *last_c = p->s[LS_COMPUTE].n - 1;
        break;
    case OP_OFFLOAD:
    case OP_PREFETCH:
        if (!(o = lower_push(p, LS_OFFLOAD, LK_COMPUTE, i))) return MP_ERR;
        o->k = k, o->mb = mb;
        lower_dep(p, o, LS_COMPUTE, *last_c);
        break;
    case OP_EVICT:
    case OP_RETURN:
    case OP_RECLAIM:
        /* balance messages are host MPI: on the host stream a send (chan 2 out, 3 back) or a blocking
         * receive where its data is first needed (RETURN: the evicted stash; RECLAIM: earlier than
         * the executor, which waits at the backward: stricter, so proving it proves the executor).
         * The device streams do not carry them. */
        if (p->target != LOWER_HOST) return MP_OK;
        if (in->op == OP_RETURN) {
            if (!(o = lower_push(p, LS_COMPUTE, LK_RECV, i))) return MP_ERR;
            o->peer = in->peer, o->k = k, o->mb = mb, o->chan = 2, o->op = in->op;
        }
        if (!(o = lower_push(p, LS_COMPUTE, in->op == OP_RECLAIM ? LK_RECV : LK_SEND, i))) return MP_ERR;
        o->peer = in->peer, o->k = k, o->mb = mb, o->chan = in->op == OP_EVICT ? 2 : 3;
        break;
    case OP_REDUCE_GRADS:
        if (!(o = lower_push(p, LS_COMPUTE, LK_COMPUTE, i))) return MP_ERR;
        o->k = -1, o->mb = -1;
        for (int x = LS_ACT_IN; x < LS_STREAMS; x++) lower_dep(p, o, x, p->s[x].n - 1);
        *last_c = p->s[LS_COMPUTE].n - 1;
        break;
    default:
        return MP_OK;
    }
    o->op = in->op;
    return MP_OK;
}

int lower_stage(const instr_list_t *l, int K, int M, lower_target_t target, lower_prog_t *out)
{
    memset(out, 0, sizeof *out);
    out->target = target;
    int last_c = -1, last_sa = -1, rc = MP_ERR;
    int *ref = malloc((size_t)2 * K * M * sizeof(int));
    out->ninstr = l->n;
    out->stream_of = malloc(((size_t)l->n + 1) * sizeof(int));
    out->index_of = malloc(((size_t)l->n + 1) * sizeof(int));
    if (!ref || !out->stream_of || !out->index_of) goto out;
    for (int i = 0; i < 2 * K * M; i++) ref[i] = -1;
    for (int i = 0; i < l->n; i++) out->stream_of[i] = out->index_of[i] = -1;
    for (int i = 0; i < l->n; i++)
        if (lower_instr(out, l, i, K, M, ref, &last_c, &last_sa) != MP_OK) goto out;
    rc = MP_OK;
out:
    free(ref);
    if (rc != MP_OK) lower_free(out);
    return rc;
}

void lower_free(lower_prog_t *p)
{
    for (int x = 0; x < LS_STREAMS; x++) free(p->s[x].ops);
    free(p->stream_of);
    free(p->index_of);
    memset(p, 0, sizeof *p);
}

lower_stream_t lower_partner_stream(const lower_prog_t *peer, lower_stream_t x)
{
    return peer->target == LOWER_HOST ? LS_COMPUTE : lower_partner[x];
}

const lower_op_t *lower_op_of(const lower_prog_t *p, int instr)
{
    if (instr < 0 || instr >= p->ninstr || p->stream_of[instr] < 0) return NULL;
    return &p->s[p->stream_of[instr]].ops[p->index_of[instr]];
}
