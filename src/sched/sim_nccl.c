/* The executor's NCCL translation of a schedule (sim_nccl.h), simulated. Every pipeline boundary
 * (stage b to stage b+1 mod pp) has two 2-rank communicators, one for activations and one for
 * gradients, and each stage drives each of its four with a stream of its own, so no communicator is
 * ever used from two streams. Each stage's list becomes five in-order streams — compute (C),
 * activations in from the previous stage (AR) and out to the next (AS), gradients in from the next
 * (GR) and out to the previous (GS) — with the event waits the executor records:
 *   RECV_ACT   on AR, after C so far (the slot it lands in is free)
 *   FORWARD    on C, after its RECV_ACT and after the newest SEND_ACT enqueued on AS (a slot's output
 *              buffer is rewritten only once the send that read it is done)
 *   SEND_ACT   on AS, after C so far (its forward)
 *   RECV_GRAD  on GR, after C so far (the gradient buffer is free)
 *   BACKWARD   on C, after its RECV_GRAD
 *   SEND_GRAD  on GS, after C so far (its backward and the copy into the send buffer)
 *   REDUCE_GRADS on C, after everything on the four message streams.
 * A send or receive blocks its stream until the peer's matching call reaches the head of the peer's
 * matching stream (NCCL point-to-point at its most conservative), and NCCL matches the calls of one
 * communicator by order, so the n-th send must carry the message the n-th receive expects. With one
 * stream per direction instead, the interleaved schedule deadlocks (a stage sends its next
 * activation while its peer's stream waits to send one back: 78 of the 104 interleaved cases of the
 * unit test, found with this simulator before the streams were split). */
#include "sim_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { SN_C, SN_AR, SN_AS, SN_GR, SN_GS, SN_STREAMS };
/* the stream on the other side of a message stream */
static const int sn_partner[SN_STREAMS] = {SN_C, SN_AS, SN_AR, SN_GS, SN_GR};
enum { SN_COMPUTE, SN_SEND, SN_RECV };

typedef struct {
    int kind, peer, k, mb; /* message key (k, mb): the sending chunk and the micro-batch */
    int ndeps, dep_stream[SN_STREAMS], dep_idx[SN_STREAMS];
    op_t op;               /* for messages */
} sn_op_t;

typedef struct {
    sn_op_t *ops;
    int n, cap;
} sn_stream_t;

static const char *const sn_names[SN_STREAMS] = {"compute", "activation-in", "activation-out", "gradient-in",
                                                  "gradient-out"};

static sn_op_t *sn_push(sn_stream_t *s, int kind)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        sn_op_t *p = realloc(s->ops, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        s->ops = p, s->cap = cap;
    }
    sn_op_t *o = &s->ops[s->n++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    return o;
}

static void sn_dep(sn_op_t *o, int stream, int idx)
{
    if (idx < 0) return;
    o->dep_stream[o->ndeps] = stream;
    o->dep_idx[o->ndeps++] = idx;
}

/* One stage's list → its five streams. */
static int sn_translate(const instr_list_t *l, sn_stream_t st[SN_STREAMS], int K, int M)
{
    int last_c = -1, last_send_a = -1;
    int *ref = malloc((size_t)2 * K * M * sizeof(int)); /* [act|grad][k][mb] → index on AR or GR */
    if (!ref) return MP_ERR;
    for (int i = 0; i < 2 * K * M; i++) ref[i] = -1;
    int rc = MP_ERR;
    for (int i = 0; i < l->n; i++) {
        const instr_t *in = &l->ins[i];
        const int k = in->chunk, mb = in->mb;
        sn_op_t *o = NULL;
        switch (in->op) {
        case OP_RECV_ACT:
        case OP_RECV_GRAD: {
            const int act = in->op == OP_RECV_ACT, x = act ? SN_AR : SN_GR;
            if (!(o = sn_push(&st[x], SN_RECV))) goto out;
            o->peer = in->peer, o->k = act ? k - 1 : k + 1, o->mb = mb, o->op = in->op;
            sn_dep(o, SN_C, last_c);
            ref[((size_t)!act * K + k) * M + mb] = st[x].n - 1;
            break;
        }
        case OP_SEND_ACT:
        case OP_SEND_GRAD: {
            const int act = in->op == OP_SEND_ACT, x = act ? SN_AS : SN_GS;
            if (!(o = sn_push(&st[x], SN_SEND))) goto out;
            o->peer = in->peer, o->k = k, o->mb = mb, o->op = in->op;
            sn_dep(o, SN_C, last_c);
            if (act) last_send_a = st[x].n - 1;
            break;
        }
        case OP_FORWARD:
        case OP_BACKWARD: {
            const int act = in->op == OP_FORWARD;
            if (!(o = sn_push(&st[SN_C], SN_COMPUTE))) goto out;
            o->k = k, o->mb = mb, o->op = in->op;
            sn_dep(o, act ? SN_AR : SN_GR, ref[((size_t)!act * K + k) * M + mb]);
            if (act) sn_dep(o, SN_AS, last_send_a);
            last_c = st[SN_C].n - 1;
            break;
        }
        case OP_REDUCE_GRADS:
            if (!(o = sn_push(&st[SN_C], SN_COMPUTE))) goto out;
            o->op = in->op, o->mb = -1, o->k = -1;
            for (int x = SN_AR; x < SN_STREAMS; x++) sn_dep(o, x, st[x].n - 1);
            last_c = st[SN_C].n - 1;
            break;
        default:
            break;
        }
    }
    rc = MP_OK;
out:
    free(ref);
    return rc;
}

/* Whether op o of stage s has its event waits satisfied. */
static int sn_deps_done(const sn_op_t *o, const int *pos)
{
    for (int d = 0; d < o->ndeps; d++)
        if (pos[o->dep_stream[d]] <= o->dep_idx[d]) return 0;
    return 1;
}

int sim_nccl_lists(const instr_list_t *lists, int pp, int m, int v, sim_result_t *res)
{
    memset(res, 0, sizeof *res);
    if (pp > SIM_MAX_STAGES) return sim_fail(res, "more than %d stages", SIM_MAX_STAGES);
    const int K = pp * v;
    int M = m;
    for (int s = 0; s < pp; s++)
        for (int i = 0; i < lists[s].n; i++)
            if (lists[s].ins[i].mb + 1 > M) M = lists[s].ins[i].mb + 1;
    sn_stream_t (*st)[SN_STREAMS] = calloc((size_t)pp, sizeof *st);
    int (*pos)[SN_STREAMS] = calloc((size_t)pp, sizeof *pos);
    int rc = MP_ERR;
    if (!st || !pos) {
        sim_fail(res, "out of memory");
        goto out;
    }
    for (int s = 0; s < pp; s++)
        if (sn_translate(&lists[s], st[s], K, M) != MP_OK) {
            sim_fail(res, "out of memory");
            goto out;
        }
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < pp; s++)
            for (int x = 0; x < SN_STREAMS; x++)
                while (pos[s][x] < st[s][x].n) {
                    const sn_op_t *o = &st[s][x].ops[pos[s][x]];
                    if (!sn_deps_done(o, pos[s])) break;
                    if (o->kind == SN_COMPUTE) {
                        pos[s][x]++, progress = 1;
                        continue;
                    }
                    /* a message: its partner must be at the head of the peer's matching stream, ready */
                    const int q = o->peer, y = sn_partner[x];
                    if (q < 0 || q >= pp || pos[q][y] >= st[q][y].n) break;
                    const sn_op_t *p = &st[q][y].ops[pos[q][y]];
                    if (p->kind == SN_COMPUTE || p->kind == o->kind || p->peer != s || !sn_deps_done(p, pos[q])) break;
                    if (p->k != o->k || p->mb != o->mb) {
                        sim_fail(res, "stage %d's %s of micro-batch %d chunk %d meets stage %d's %s of micro-batch %d "
                                     "chunk %d on the %s stream: NCCL would deliver it to the wrong buffer",
                                s, op_names[o->op], o->mb, o->k, q, op_names[p->op], p->mb, p->k, sn_names[x]);
                        goto out;
                    }
                    pos[s][x]++, pos[q][y]++, progress = 1;
                }
    }
    for (int s = 0; s < pp; s++)
        for (int x = 0; x < SN_STREAMS; x++)
            if (pos[s][x] < st[s][x].n) {
                const sn_op_t *o = &st[s][x].ops[pos[s][x]];
                sim_fail(res, "deadlock: stage %d's %s stream waits forever at %s of micro-batch %d chunk %d", s,
                        sn_names[x], op_names[o->op], o->mb, o->k);
                goto out;
            }
    rc = MP_OK;
out:
    for (int s = 0; st && s < pp; s++)
        for (int x = 0; x < SN_STREAMS; x++) free(st[s][x].ops);
    free(st);
    free(pos);
    return rc;
}

int sim_nccl_run(sched_kind_t kind, int pp, int m, int v, sim_result_t *res)
{
    instr_list_t lists[SIM_MAX_STAGES];
    if (sim_build_lists(lists, kind, pp, m, v, res) != MP_OK) return MP_ERR;
    int rc = sim_nccl_lists(lists, pp, m, v, res);
    sim_free_lists(lists, pp);
    return rc;
}
