/* Lowering (src/sched/lower.h), beyond what test_schedule checks of it: a hand-written list with
 * every kind of instruction (offload and prefetch included, which no schedule emits yet) lowered to
 * exactly the ops and waits lower.h's table gives, field by field; the host target (one in-order
 * stream, no event waits, receives posted and waited for by their readers); and for every schedule's lists: each op waits only on work earlier in its
 * list, on the newest compute before it where the table says so, forwards on the newest activation
 * send, and each boundary's sends leave in the order its peer receives them (what NCCL's order
 * matching needs). */
#include <stdlib.h>
#include <string.h>

#include "lower.h"
#include "schedule.h"
#include "sim.h"
#include "tap.h"

/* Stage 1 of 3 (K = 3 chunks, M = 2 micro-batches): two forwards, an offload and a prefetch, two
 * backwards, the flush and the optimizer. */
static const instr_t HAND[] = {
    {OP_LOAD_BATCH, 0, 1, -1},  {OP_RECV_ACT, 0, 1, 0},    {OP_FORWARD, 0, 1, -1},  {OP_SEND_ACT, 0, 1, 2},
    {OP_OFFLOAD, 0, 1, -1},     {OP_RECV_ACT, 1, 1, 0},    {OP_FORWARD, 1, 1, -1},  {OP_SEND_ACT, 1, 1, 2},
    {OP_PREFETCH, 0, 1, -1},    {OP_RECV_GRAD, 0, 1, 2},   {OP_BACKWARD, 0, 1, -1}, {OP_SEND_GRAD, 0, 1, 0},
    {OP_RECV_GRAD, 1, 1, 2},    {OP_BACKWARD, 1, 1, -1},   {OP_SEND_GRAD, 1, 1, 0}, {OP_REDUCE_GRADS, -1, -1, -1},
    {OP_OPTIMIZER_STEP, -1, -1, -1},
};
enum { NHAND = sizeof HAND / sizeof HAND[0] };

/* What lower.h's table makes of HAND, per instruction: stream (-1: nothing), index on it, kind,
 * message key (k, mb), channel, and the waits as (stream, index) pairs. */
typedef struct {
    int stream, index, kind, k, mb, chan, ndeps, dep[LS_STREAMS][2];
} want_t;

static const want_t WANT[NHAND] = {
    {-1, 0, 0, 0, 0, 0, 0, {{0}}},                                              /* LOAD_BATCH: nothing */
    {LS_ACT_IN, 0, LK_RECV, 0, 0, 0, 0, {{0}}},                                 /* no compute yet: no wait */
    {LS_COMPUTE, 0, LK_COMPUTE, 1, 0, 0, 1, {{LS_ACT_IN, 0}}},                  /* its receive; no send yet */
    {LS_ACT_OUT, 0, LK_SEND, 1, 0, 0, 1, {{LS_COMPUTE, 0}}},                    /* after its forward */
    {LS_OFFLOAD, 0, LK_COMPUTE, 1, 0, 0, 1, {{LS_COMPUTE, 0}}},
    {LS_ACT_IN, 1, LK_RECV, 0, 1, 0, 1, {{LS_COMPUTE, 0}}},                     /* its slot is free */
    {LS_COMPUTE, 1, LK_COMPUTE, 1, 1, 0, 2, {{LS_ACT_IN, 1}, {LS_ACT_OUT, 0}}}, /* + the newest send */
    {LS_ACT_OUT, 1, LK_SEND, 1, 1, 0, 1, {{LS_COMPUTE, 1}}},
    {LS_OFFLOAD, 1, LK_COMPUTE, 1, 0, 0, 1, {{LS_COMPUTE, 1}}},
    {LS_GRAD_IN, 0, LK_RECV, 2, 0, 1, 1, {{LS_COMPUTE, 1}}},
    {LS_COMPUTE, 2, LK_COMPUTE, 1, 0, 0, 1, {{LS_GRAD_IN, 0}}},
    {LS_GRAD_OUT, 0, LK_SEND, 1, 0, 1, 1, {{LS_COMPUTE, 2}}},
    {LS_GRAD_IN, 1, LK_RECV, 2, 1, 1, 1, {{LS_COMPUTE, 2}}},
    {LS_COMPUTE, 3, LK_COMPUTE, 1, 1, 0, 1, {{LS_GRAD_IN, 1}}},
    {LS_GRAD_OUT, 1, LK_SEND, 1, 1, 1, 1, {{LS_COMPUTE, 3}}},
    {LS_COMPUTE, 4, LK_COMPUTE, -1, -1, 0, 5,                                   /* every other stream's last */
     {{LS_ACT_IN, 1}, {LS_ACT_OUT, 1}, {LS_GRAD_IN, 1}, {LS_GRAD_OUT, 1}, {LS_OFFLOAD, 1}}},
    {-1, 0, 0, 0, 0, 0, 0, {{0}}},                                              /* OPTIMIZER_STEP: nothing */
};

static int hand_op_right(const lower_prog_t *p, int i, char *why, size_t nwhy)
{
    const lower_op_t *o = lower_op_of(p, i);
    const want_t *w = &WANT[i];
    const char *op = op_names[HAND[i].op];
    if (w->stream < 0) return o ? (snprintf(why, nwhy, "%s lowered to an op", op), 0) : 1;
    if (!o || p->stream_of[i] != w->stream || p->index_of[i] != w->index)
        return snprintf(why, nwhy, "%s: not op %d of the %s stream", op, w->index, lower_stream_names[w->stream]), 0;
    int good = o->instr == i && o->op == HAND[i].op && (int)o->kind == w->kind && o->ndeps == w->ndeps &&
               o->k == w->k && o->mb == w->mb;
    if (w->kind != LK_COMPUTE) good &= o->chan == w->chan && o->peer == HAND[i].peer;
    for (int d = 0; good && d < w->ndeps; d++) {
        int found = 0;
        for (int e = 0; e < o->ndeps; e++) found |= o->dep_stream[e] == w->dep[d][0] && o->dep_idx[e] == w->dep[d][1];
        good &= found;
    }
    if (!good)
        snprintf(why, nwhy, "%s: kind %d k %d mb %d chan %d peer %d, %d waits (want kind %d k %d mb %d chan %d, %d waits)",
                 op, o->kind, o->k, o->mb, o->chan, o->peer, o->ndeps, w->kind, w->k, w->mb, w->chan, w->ndeps);
    return good;
}

static void test_hand_list(void)
{
    const instr_list_t l = {(instr_t *)HAND, NHAND, NHAND, SCHED_PLACE_LOOP};
    lower_prog_t p;
    if (lower_stage(&l, 3, 2, LOWER_STREAMS, &p) != 0) {
        tap_ok(0, "lower_stage of the hand-written list");
        return;
    }
    char why[256] = "";
    int good = 1;
    for (int i = 0; i < NHAND && good; i++) good &= hand_op_right(&p, i, why, sizeof why);
    const int counts[LS_STREAMS] = {5, 2, 2, 2, 2, 2};
    for (int x = 0; x < LS_STREAMS; x++) good &= p.s[x].n == counts[x];
    tap_ok(good, "a hand-written stage list (17 instructions, every op) lowers to lower.h's table: streams, order, "
                 "message keys, channels and every wait%s%s", why[0] ? ": " : "", why);
    tap_ok(lower_op_of(&p, -1) == NULL && lower_op_of(&p, NHAND) == NULL && lower_op_of(&p, 0) == NULL &&
               lower_op_of(&p, NHAND - 1) == NULL,
           "lower_op_of: NULL outside the list and for what lowers to nothing (LOAD_BATCH, OPTIMIZER_STEP)");
    lower_free(&p);
    tap_ok(p.s[LS_COMPUTE].ops == NULL && p.stream_of == NULL && p.s[LS_ACT_IN].n == 0, "lower_free clears the program");

    lower_prog_t h;
    if (lower_stage(&l, 3, 2, LOWER_HOST, &h) != 0) {
        tap_ok(0, "lower_stage of the hand-written list to the host");
        return;
    }
    good = h.s[LS_COMPUTE].n == NHAND - 2;
    for (int x = 1; x < LS_STREAMS; x++) good &= h.s[x].n == 0 && lower_partner_stream(&h, (lower_stream_t)x) == LS_COMPUTE;
    for (int i = 0, next = 0; i < NHAND; i++) {
        const lower_op_t *o = lower_op_of(&h, i);
        if (WANT[i].stream < 0) {
            good &= o == NULL;
            continue;
        }
        /* a receive is posted (LK_POST) and the computation that reads it waits for its message */
        const int kind = WANT[i].kind == LK_RECV ? LK_POST : WANT[i].kind;
        const int reads = HAND[i].op == OP_FORWARD || HAND[i].op == OP_BACKWARD, grad = HAND[i].op == OP_BACKWARD;
        good &= o && h.stream_of[i] == LS_COMPUTE && h.index_of[i] == next++ && o->ndeps == 0 && o->op == HAND[i].op &&
                (int)o->kind == kind;
        if (o && reads) good &= o->wait_chan == grad && o->wait_k == (grad ? 2 : 0) && o->wait_mb == HAND[i].mb;
        else if (o) good &= o->wait_chan == -1;
    }
    tap_ok(good, "host lowering: every op on one stream in list order, no event waits, partners on that stream; each "
                 "receive posted, its message waited for by the forward or backward that reads it");
    lower_free(&h);
}

/* Every schedule: waits point to earlier work only, sends and receives after the newest compute
 * before them, forwards after the newest activation send; lower_partner pairs the streams. */
static int stage_rules_hold(const instr_list_t *l, const lower_prog_t *p)
{
    int good = 1, last_c = -1, last_sa = -1;
    for (int x = 0; x < LS_STREAMS; x++)
        for (int j = 1; j < p->s[x].n; j++) good &= p->s[x].ops[j - 1].instr < p->s[x].ops[j].instr;
    for (int i = 0; i < l->n; i++) {
        const lower_op_t *o = lower_op_of(p, i);
        if (!o) continue;
        for (int d = 0; d < o->ndeps; d++) {
            const int x = o->dep_stream[d], j = o->dep_idx[d];
            good &= x >= 0 && x < LS_STREAMS && j >= 0 && j < p->s[x].n && p->s[x].ops[j].instr < i;
        }
        int waits_c = 0, waits_sa = 0;
        for (int d = 0; d < o->ndeps; d++) {
            waits_c |= o->dep_stream[d] == LS_COMPUTE && o->dep_idx[d] == last_c;
            waits_sa |= o->dep_stream[d] == LS_ACT_OUT && o->dep_idx[d] == last_sa;
        }
        if (o->kind != LK_COMPUTE && last_c >= 0) good &= waits_c;
        if (o->op == OP_FORWARD && last_sa >= 0) good &= waits_sa;
        if (p->stream_of[i] == LS_COMPUTE) last_c = p->index_of[i];
        if (o->op == OP_SEND_ACT) last_sa = p->index_of[i];
    }
    return good;
}

/* Stage s's sends to q on `out` carry, in order, the keys q's receives from s on `in` expect. */
static int order_matched(const lower_prog_t *ps, int s, const lower_prog_t *pq, int q, int out, int in)
{
    const lower_seq_t *a = &ps->s[out], *b = &pq->s[in];
    int i = 0, j = 0;
    for (;;) {
        while (i < a->n && a->ops[i].peer != q) i++;
        while (j < b->n && b->ops[j].peer != s) j++;
        if (i == a->n || j == b->n) return i == a->n && j == b->n;
        if (a->ops[i].k != b->ops[j].k || a->ops[i].mb != b->ops[j].mb || a->ops[i].chan != b->ops[j].chan) return 0;
        i++, j++;
    }
}

static void test_schedules(void)
{
    int good_p = 1;
    for (int x = 0; x < LS_STREAMS; x++) good_p &= lower_partner[lower_partner[x]] == (lower_stream_t)x;
    good_p &= lower_partner[LS_ACT_OUT] == LS_ACT_IN && lower_partner[LS_GRAD_OUT] == LS_GRAD_IN &&
              lower_partner[LS_COMPUTE] == LS_COMPUTE && lower_partner[LS_OFFLOAD] == LS_OFFLOAD;
    tap_ok(good_p, "lower_partner pairs activation out/in and gradient out/in; compute and offload are their own");
    int runs = 0, bad_rules = 0, bad_order = 0;
    for (int kk = 0; kk < SCHED_KINDS; kk++)
        for (int pp = 1; pp <= 6; pp++)
            for (int m = 1; m <= 8; m++)
                for (int v = 1; v <= (kk == SCHED_INTERLEAVED ? 3 : 1); v++) {
                    char why[256];
                    if (sched_check((sched_kind_t)kk, pp, m, v, why, sizeof why) != 0) continue;
                    instr_list_t lists[SIM_MAX_STAGES];
                    sim_result_t r;
                    if (sim_build_lists(lists, (sched_kind_t)kk, pp, m, v, &r) != 0) {
                        bad_rules++;
                        continue;
                    }
                    lower_prog_t p[SIM_MAX_STAGES];
                    int built = 0;
                    for (; built < pp; built++)
                        if (lower_stage(&lists[built], pp * v, m, LOWER_STREAMS, &p[built]) != 0) break;
                    runs++;
                    int rules = built == pp, order = built == pp;
                    for (int s = 0; s < built; s++) rules &= stage_rules_hold(&lists[s], &p[s]);
                    for (int s = 0; s < built; s++)
                        for (int q = 0; q < built; q++)
                            order &= order_matched(&p[s], s, &p[q], q, LS_ACT_OUT, LS_ACT_IN) &&
                                     order_matched(&p[s], s, &p[q], q, LS_GRAD_OUT, LS_GRAD_IN);
                    if (!rules && bad_rules++ < 3)
                        tap_diag("%s pp=%d m=%d v=%d: a wait breaks lower.h's rules", sched_kind_names[kk], pp, m, v);
                    if (!order && bad_order++ < 3)
                        tap_diag("%s pp=%d m=%d v=%d: sends and receives of a boundary in different orders",
                                 sched_kind_names[kk], pp, m, v);
                    for (int s = 0; s < built; s++) lower_free(&p[s]);
                    sim_free_lists(lists, pp);
                }
    tap_ok(bad_rules == 0 && runs > 0, "%d schedules (all kinds, pp<=6, m<=8, v<=3): every wait on earlier work, "
                                       "messages after the newest compute, forwards after the newest activation send",
           runs);
    tap_ok(bad_order == 0 && runs > 0, "the same %d: on every boundary the sends leave in the order the peer receives "
                                       "them (key and channel), as NCCL's order matching needs", runs);
}

int main(void)
{
    test_hand_list();
    test_schedules();
    return tap_done();
}
