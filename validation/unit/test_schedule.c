/* Pipeline schedules through the simulator: every schedule for pp <= 8, m <= 16, v <= 4 is free of
 * deadlock with matched sends and receives; bubbles and activation stashes are the textbook ones;
 * broken lists are caught. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower.h"
#include "schedule.h"
#include "sim.h"
#include "sim_nccl.h"
#include "tap.h"

/* Calls fn for every schedule we can build: all kinds, pp <= 8, m <= 16, v <= 4 (interleaved), v = 2
 * (the V kinds). */
typedef struct {
    int runs, bad, bad_nccl, lists;
} sched_tally_t;
static void for_each_schedule(void (*fn)(sched_kind_t kind, int pp, int m, int v, sched_tally_t *t), sched_tally_t *t)
{
    for (int kk = 0; kk < SCHED_KINDS; kk++)
        for (int pp = 1; pp <= 8; pp++)
            for (int m = 1; m <= 16; m++)
                for (int v = 1; v <= (kk == SCHED_INTERLEAVED ? 4 : sched_kind_default_v((sched_kind_t)kk)); v++) {
                    char why[256];
                    if (sched_check((sched_kind_t)kk, pp, m, v, why, sizeof why) == 0) fn((sched_kind_t)kk, pp, m, v, t);
                }
}

static void valid_one(sched_kind_t kk, int pp, int m, int v, sched_tally_t *t)
{
    sim_result_t r;
    t->runs++;
    if (sim_run(kk, pp, m, v, 1.0, 2.0, &r) != 0 && t->bad++ < 5)
        tap_diag("%s pp=%d m=%d v=%d: %s", sched_kind_names[kk], pp, m, v, r.error);
    if (sim_nccl_run(kk, pp, m, v, &r) != 0 && t->bad_nccl++ < 5)
        tap_diag("nccl: %s pp=%d m=%d v=%d: %s", sched_kind_names[kk], pp, m, v, r.error);
}

static void test_all_valid(void)
{
    sched_tally_t t = {0};
    for_each_schedule(valid_one, &t);
    const int runs = t.runs, bad = t.bad, bad_nccl = t.bad_nccl;
    /* gpipe, 1f1b, 2bw, zb1p, zbv: every (pp, m); interleaved: v = 1..4 when pp divides m; dualpipev: m >= 2pp */
    int expect = 0;
    for (int pp = 1; pp <= 8; pp++)
        for (int m = 1; m <= 16; m++) expect += 5 + (m % pp == 0 ? 4 : 0) + (m >= 2 * pp);
    tap_ok(bad == 0 && runs == expect, "%d schedules (all kinds, pp<=8, m<=16, v<=4): no deadlock, sends and receives "
                                   "matched, each forward, B and W once, B's and W's in micro-batch order", runs);
    tap_ok(bad_nccl == 0 && runs == expect, "the same %d under NCCL point-to-point (streams per boundary and "
                                            "direction, blocking sends, order-matched): no deadlock, no crossed message",
           runs);
}

static void test_bubbles_and_stashes(void)
{
    int good_b = 1, good_s = 1, good_i = 1;
    for (int pp = 1; pp <= 8; pp++)
        for (int m = 1; m <= 16; m++) {
            sim_result_t g, f;
            sim_run(SCHED_GPIPE, pp, m, 1, 1.0, 2.0, &g);
            sim_run(SCHED_1F1B, pp, m, 1, 1.0, 2.0, &f);
            const double theory = (double)(pp - 1) / (m + pp - 1);
            good_b &= fabs(g.bubble - theory) < 1e-12 && fabs(f.bubble - theory) < 1e-12;
            for (int s = 0; s < pp; s++) {
                int want = pp - s < m ? pp - s : m;
                good_s &= f.peak_stash[s] == want && g.peak_stash[s] == m;
            }
            for (int v = 2; v <= 4 && m % pp == 0; v++) {
                sim_result_t it;
                sim_run(SCHED_INTERLEAVED, pp, m, v, 1.0, 2.0, &it);
                const double ti = (double)(pp - 1) / (v * m + pp - 1);
                if (pp > 1 && fabs(it.bubble - ti) > 1e-12) {
                    if (good_i) tap_diag("interleaved pp=%d m=%d v=%d: bubble %.4f, theory %.4f", pp, m, v, it.bubble, ti);
                    good_i = 0;
                }
            }
        }
    tap_ok(good_b, "gpipe and 1f1b bubble = (p-1)/(m+p-1) for every pp<=8, m<=16 (tb = 2 tf)");
    tap_ok(good_s, "peak stashed micro-batches: 1f1b stage s holds min(p-s, m), gpipe holds m");
    tap_ok(good_i, "interleaved bubble = (p-1)/(v m + p-1) for v in 2..4 (m a multiple of p)");
}

static void test_broken_lists(void)
{
    /* Two stages, one micro-batch; stage 0 waits for the gradient (its backward reads it) before it
     * sends its activation. */
    instr_t s0[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_RECV_GRAD, 0, 0, 1},
                    {OP_BACKWARD, 0, 0, -1}, {OP_SEND_ACT, 0, 0, 1}};
    instr_t s1[] = {{OP_RECV_ACT, 0, 1, 0}, {OP_FORWARD, 0, 1, -1}, {OP_BACKWARD, 0, 1, -1}, {OP_SEND_GRAD, 0, 1, 0}};
    instr_list_t l[2] = {{s0, 5, 5, SCHED_PLACE_LOOP}, {s1, 4, 4, SCHED_PLACE_LOOP}};
    sim_result_t r;
    int rc = sim_run_lists(l, 2, 1, 1, 1.0, 2.0, &r);
    tap_ok(rc != 0 && strstr(r.error, "deadlock"), "a list that reads a gradient before it sends is a deadlock (%s)",
           r.error);
    /* The receive posted before the send and read after it (MPI's Irecv; dualpipev's pairs post both
     * receives before either computation): no deadlock, under the host rule. */
    instr_t p0[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_RECV_GRAD, 0, 0, 1},
                    {OP_SEND_ACT, 0, 0, 1}, {OP_BACKWARD, 0, 0, -1}};
    instr_list_t lp[2] = {{p0, 5, 5, SCHED_PLACE_LOOP}, {s1, 4, 4, SCHED_PLACE_LOOP}};
    rc = sim_run_lists(lp, 2, 1, 1, 1.0, 2.0, &r);
    tap_ok(rc == 0 && r.makespan == 1.0 + 1.0 + 2.0 + 2.0,
           "a receive posted before the send that its reader waits for is no deadlock: makespan 6 tf (%s)", r.error);
    instr_t s0b[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_SEND_ACT, 0, 0, 0},
                     {OP_RECV_GRAD, 0, 0, 1}, {OP_BACKWARD, 0, 0, -1}};
    l[0] = (instr_list_t){s0b, 5, 5, SCHED_PLACE_LOOP};
    rc = sim_run_lists(l, 2, 1, 1, 1.0, 2.0, &r);
    tap_ok(rc != 0 && strstr(r.error, "peer"), "a send to the wrong stage is caught (%s)", r.error);
    instr_t s0c[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_SEND_ACT, 0, 0, 1}};
    instr_t s1c[] = {{OP_RECV_ACT, 0, 1, 0}, {OP_FORWARD, 0, 1, -1}, {OP_BACKWARD, 0, 1, -1}};
    instr_list_t lc[2] = {{s0c, 3, 3, SCHED_PLACE_LOOP}, {s1c, 3, 3, SCHED_PLACE_LOOP}};
    rc = sim_run_lists(lc, 2, 1, 1, 1.0, 2.0, &r);
    tap_ok(rc != 0, "a micro-batch whose backward never runs on one stage is caught (%s)", r.error);
}

/* 2bw run without flushes: S steps of sched_build_2bw joined into one list per stage (step j's
 * micro-batch x renumbered j·m + x, so the next batch's m + x is (j+1)·m + x), through the
 * simulator: free of deadlock, every micro-batch of every step forward and backward once. */
static int twobw_run(int pp, int m, const int *drains, int S, sim_result_t *r)
{
    instr_list_t joined[SIM_MAX_STAGES] = {{0}};
    int ok = -1;
    for (int s = 0; s < pp; s++) {
        for (int j = 0, first = 1; j < S; first = drains[j], j++) {
            instr_list_t l;
            if (sched_build_2bw(&l, s, pp, m, first, drains[j]) != 0) goto out;
            joined[s].ins = realloc(joined[s].ins, (size_t)(joined[s].n + l.n) * sizeof(instr_t));
            for (int i = 0; i < l.n; i++) {
                instr_t in = l.ins[i];
                if (in.mb >= 0) in.mb += j * m;
                joined[s].ins[joined[s].n++] = in;
            }
            joined[s].cap = joined[s].n;
            sched_free(&l);
        }
    }
    ok = sim_run_lists(joined, pp, S * m, 1, 1.0, 2.0, r) == 0;
    if (ok) {
        sim_result_t rn;
        if (sim_nccl_lists(joined, pp, S * m, 1, &rn) != 0) {
            ok = 0;
            memcpy(r->error, rn.error, sizeof r->error);
        }
    }
out:
    for (int s = 0; s < pp; s++) free(joined[s].ins);
    return ok;
}

static void test_2bw_stream(void)
{
    const int drains[4] = {0, 0, 1, 1}; /* steps 2 and 3 drained: an evaluation, the end */
    int runs = 0, bad = 0, stash_ok = 1;
    for (int pp = 1; pp <= 8; pp++)
        for (int m = 1; m <= 16; m++) {
            sim_result_t r;
            runs++;
            if (twobw_run(pp, m, drains, 4, &r) != 1) {
                if (bad++ < 5) tap_diag("2bw pp=%d m=%d over 4 steps: %s", pp, m, r.error);
                continue;
            }
            for (int s = 0; s < pp; s++) stash_ok &= r.peak_stash[s] == (pp - s < m + 1 ? pp - s : m + 1);
        }
    tap_ok(bad == 0 && runs == 128, "2bw without flushes: %d runs of 4 joined steps (pp<=8, m<=16, drained at steps "
                                    "2 and 3): no deadlock, every micro-batch forward and backward once, also under NCCL "
                                    "point-to-point", runs);
    tap_ok(stash_ok, "2bw stage s's peak stash across step boundaries is min(p-s, m+1) micro-batches (the executor sizes its slots so)");
    sim_result_t flush, joined;
    const int nodrain[4] = {0, 0, 0, 1};
    twobw_run(4, 8, nodrain, 4, &joined);
    sim_run(SCHED_1F1B, 4, 32, 1, 1.0, 2.0, &flush);
    tap_ok(fabs(joined.bubble - flush.bubble) < 1e-12,
           "4 joined 2bw steps (m=8, pp=4) have the bubble of one 1f1b step of 32 micro-batches (%.4f): no flush "
           "between steps", joined.bubble);
}

/* Tags let MPI deliver messages in any order; NCCL matches them by order. Stage 0 sends micro-batch
 * 1 before 0, stage 1 receives 0 first: fine for the MPI simulator, a crossed message for NCCL's. */
static void test_crossed_messages(void)
{
    instr_t s0[] = {{OP_FORWARD, 0, 0, -1}, {OP_FORWARD, 1, 0, -1}, {OP_SEND_ACT, 1, 0, 1}, {OP_SEND_ACT, 0, 0, 1},
                    {OP_RECV_GRAD, 0, 0, 1}, {OP_BACKWARD, 0, 0, -1}, {OP_RECV_GRAD, 1, 0, 1},
                    {OP_BACKWARD, 1, 0, -1}};
    instr_t s1[] = {{OP_RECV_ACT, 0, 1, 0}, {OP_FORWARD, 0, 1, -1}, {OP_BACKWARD, 0, 1, -1}, {OP_SEND_GRAD, 0, 1, 0},
                    {OP_RECV_ACT, 1, 1, 0}, {OP_FORWARD, 1, 1, -1}, {OP_BACKWARD, 1, 1, -1}, {OP_SEND_GRAD, 1, 1, 0}};
    instr_list_t l[2] = {{s0, 8, 8, SCHED_PLACE_LOOP}, {s1, 8, 8, SCHED_PLACE_LOOP}};
    sim_result_t r, rn;
    int mpi = sim_run_lists(l, 2, 2, 1, 1.0, 2.0, &r), nccl = sim_nccl_lists(l, 2, 2, 1, &rn);
    tap_ok(mpi == 0 && nccl != 0 && strstr(rn.error, "wrong buffer"),
           "sends out of order: valid with MPI tags, caught for NCCL (%s)", rn.error);
}

static void test_refusals(void)
{
    char why[256];
    tap_ok(sched_check(SCHED_INTERLEAVED, 4, 6, 2, why, sizeof why) != 0 && strstr(why, "multiple of parallel.pp"),
           "interleaved with m not a multiple of pp is refused (%s)", why);
    tap_ok(sched_check(SCHED_1F1B, 4, 8, 2, why, sizeof why) != 0 && strstr(why, "virtual_stages"),
           "virtual stages without the interleaved schedule are refused (%s)", why);
}

/* Whether instruction i's lowered op waits on stream x's op with message key (k, mb). */
static int lower_waits_for(const lower_prog_t *p, int i, int x, int k, int mb)
{
    const lower_op_t *o = lower_op_of(p, i);
    for (int d = 0; o && d < o->ndeps; d++)
        if (o->dep_stream[d] == x) {
            const lower_op_t *r = &p->s[x].ops[o->dep_idx[d]];
            if (r->k == k && r->mb == mb) return 1;
        }
    return 0;
}

/* Whether list l of stage s lowered to streams keeps the rules of lower.h: every forward, backward
 * and B that crosses a boundary between stages waits for its receive, on its lane's stream. */
static int lowering_ok(const instr_list_t *l, const lower_prog_t *p, int K)
{
    int n_ops = 0, want = 0, ok = 1;
    const int pp = l->place == SCHED_PLACE_V ? K / 2 : K; /* only V's turn is local: the loop's pp is not needed */
    for (int x = 0; x < LS_STREAMS; x++) n_ops += p->s[x].n;
    for (int i = 0; i < l->n; i++) {
        const instr_t *in = &l->ins[i];
        const lower_op_t *o = lower_op_of(p, i);
        const int msg = in->op == OP_SEND_ACT || in->op == OP_SEND_GRAD || in->op == OP_RECV_ACT || in->op == OP_RECV_GRAD;
        const int k = in->chunk, bwd = in->op == OP_BACKWARD || in->op == OP_BACKWARD_B;
        want += in->op != OP_LOAD_BATCH && in->op != OP_OPTIMIZER_STEP;
        if (o && o->instr != i) ok = 0;
        if (in->op == OP_FORWARD && k > 0 && !sched_place_edge_local(l->place, k - 1, pp) &&
            !lower_waits_for(p, i, sched_place_lane(l->place, k - 1, K) ? LS_ACT_IN_V : LS_ACT_IN, k - 1, in->mb))
            ok = 0;
        if (bwd && k < K - 1 && !sched_place_edge_local(l->place, k, pp) &&
            !lower_waits_for(p, i, sched_place_lane(l->place, k, K) ? LS_GRAD_IN_V : LS_GRAD_IN, k + 1, in->mb))
            ok = 0;
        if (msg && (!o || o->kind == LK_COMPUTE)) ok = 0;
        for (int x = LS_ACT_IN; in->op == OP_REDUCE_GRADS && o && x < LS_STREAMS; x++) {
            const lower_op_t *last = p->s[x].n > 0 ? &p->s[x].ops[p->s[x].n - 1] : NULL;
            if (last && !lower_waits_for(p, i, x, last->k, last->mb)) ok = 0;
        }
    }
    return ok && n_ops == want;
}

static void lower_one(sched_kind_t kk, int pp, int m, int v, sched_tally_t *t)
{
    for (int s = 0; s < pp; s++)
        for (int f = 0; f < (kk == SCHED_2BW ? 4 : 1); f++) {
            instr_list_t l;
            lower_prog_t p;
            int rc = kk == SCHED_2BW ? sched_build_2bw(&l, s, pp, m, f >> 1, f & 1) : sched_build(&l, kk, s, pp, m, v);
            if (rc != 0 || lower_stage(&l, pp * v, 2 * m, LOWER_STREAMS, &p) != 0) {
                t->bad++;
                continue;
            }
            t->lists++;
            if (!lowering_ok(&l, &p, pp * v) && t->bad++ < 3)
                tap_diag("lowering of %s pp=%d m=%d v=%d stage %d list %d", sched_kind_names[kk], pp, m, v, s, f);
            lower_free(&p);
            sched_free(&l);
        }
}

/* The lowering the executor's NCCL path takes its waits from: every forward of a received
 * activation waits for that receive, every backward of a received gradient for that receive,
 * every send and receive comes after the compute before it, REDUCE_GRADS after every message. */
static void test_lowering(void)
{
    sched_tally_t t = {0};
    for_each_schedule(lower_one, &t);
    const int bad = t.bad, lists = t.lists;
    tap_ok(bad == 0 && lists > 0, "%d stage lists lowered to streams (every schedule, 2bw's four lists): each forward "
                                  "and backward waits for its receive, messages on their streams, the flush waits for "
                                  "every stream", lists);
}

int main(void)
{
    test_all_valid();
    test_bubbles_and_stashes();
    test_broken_lists();
    test_2bw_stream();
    test_crossed_messages();
    test_refusals();
    test_lowering();
    return tap_done();
}
