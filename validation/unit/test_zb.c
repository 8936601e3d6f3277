/* The zero-bubble schedules (zerobubble.h) and what they brought to the lists: the split backward
 * (BACKWARD_B, BACKWARD_W) and the V placement (instr.h). Every zb1p, zbv and dualpipev list for
 * pp <= 8, m <= 16 (and a few other times) is valid under MPI's tags and NCCL's order and lowers
 * to its lane's streams; the bubbles and stash peaks at p in {2, 4}, m in {4, 8} are the ones the
 * docs give, against lower bounds and 1F1B's with the same total work; hand-broken lists are caught
 * naming what is wrong. Like test_sim_nompi: the schedule layer and core alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower.h"
#include "memlists.h"
#include "schedule.h"
#include "sim.h"
#include "sim_nccl.h"
#include "tap.h"

static const sched_kind_t ZB[3] = {SCHED_ZB1P, SCHED_ZBV, SCHED_DUALPIPEV};

static void test_placement(void)
{
    int good = 1;
    for (int pp = 1; pp <= 8; pp++)
        for (int k = 0; k < 2 * pp; k++) {
            const int s = sched_place_stage(SCHED_PLACE_V, k, pp), c = sched_place_local(SCHED_PLACE_V, k, pp);
            good &= s == (k < pp ? k : 2 * pp - 1 - k) && c == (k >= pp) &&
                    sched_place_chunk(SCHED_PLACE_V, s, c, pp) == k &&
                    sched_place_edge_local(SCHED_PLACE_V, k, pp) == (k == pp - 1) &&
                    sched_place_lane(SCHED_PLACE_V, k, 2 * pp) == (k >= pp) &&
                    sched_chunk_stage(SCHED_ZBV, k, pp) == s && sched_stage_chunk(SCHED_DUALPIPEV, s, c, pp) == k;
            for (int v = 1; v <= 3; v++) /* the loop: k mod pp, k div pp, never a local boundary */
                good &= sched_place_stage(SCHED_PLACE_LOOP, k, pp) == k % pp && sched_place_local(SCHED_PLACE_LOOP, k, pp) == k / pp &&
                        sched_place_chunk(SCHED_PLACE_LOOP, k % pp, k / pp, pp) == k &&
                        !sched_place_edge_local(SCHED_PLACE_LOOP, k, pp) && !sched_place_lane(SCHED_PLACE_LOOP, k, pp * v) &&
                        sched_chunk_stage(SCHED_INTERLEAVED, k, pp) == k % pp;
        }
    tap_ok(good, "V placement for pp <= 8: stage s holds chunks s and 2pp-1-s (local 0, 1), the turn pp-1 -> pp is "
                 "local, lane 1 from chunk pp on, the last chunk on stage 0; the loop unchanged (k mod pp)");
}

/* Whether l (placement l->place, K chunks) lowered to streams keeps lower.h's rules for messages:
 * every forward and backward (or B) that crosses a boundary waits for its receive on its lane's
 * stream, every message is on its lane's stream, W waits on nothing but its stream's order. */
static int lanes_ok(const instr_list_t *l, const lower_prog_t *p, int K)
{
    const int pp = l->place == SCHED_PLACE_V ? K / 2 : K;
    int ok = 1;
    for (int i = 0; i < l->n; i++) {
        const instr_t *in = &l->ins[i];
        const lower_op_t *o = lower_op_of(p, i);
        const int k = in->chunk, x = o ? p->stream_of[i] : -1;
        if (in->op == OP_BACKWARD_W) ok &= o && x == LS_COMPUTE && o->ndeps == 0;
        if (in->op == OP_SEND_ACT || in->op == OP_RECV_GRAD) {
            const int lane = sched_place_lane(l->place, k, K);
            ok &= x == (in->op == OP_SEND_ACT ? (lane ? LS_ACT_OUT_V : LS_ACT_OUT) : (lane ? LS_GRAD_IN_V : LS_GRAD_IN));
        }
        if (in->op == OP_RECV_ACT || in->op == OP_SEND_GRAD) {
            const int lane = sched_place_lane(l->place, k - 1, K);
            ok &= x == (in->op == OP_RECV_ACT ? (lane ? LS_ACT_IN_V : LS_ACT_IN) : (lane ? LS_GRAD_OUT_V : LS_GRAD_OUT));
        }
        const int fwd = in->op == OP_FORWARD, bwd = in->op == OP_BACKWARD || in->op == OP_BACKWARD_B;
        const int edge = fwd ? k - 1 : k;
        if ((fwd || bwd) && edge >= 0 && edge < K - 1 && !sched_place_edge_local(l->place, edge, pp)) {
            const int lane = sched_place_lane(l->place, edge, K);
            const int want = fwd ? (lane ? LS_ACT_IN_V : LS_ACT_IN) : (lane ? LS_GRAD_IN_V : LS_GRAD_IN);
            int found = 0;
            for (int d = 0; o && d < o->ndeps; d++) found |= o->dep_stream[d] == want;
            ok &= found;
        }
    }
    return ok;
}

typedef struct {
    int runs, bad, bad_nccl, bad_lanes;
} zb_tally_t;

/* One (kind, pp, m) for the given times: valid under both rules, lowered to its lanes. */
static void zb_one(sched_kind_t kk, int pp, int m, const sched_costs_t *t, zb_tally_t *y)
{
    const int v = sched_kind_default_v(kk);
    instr_list_t lists[SIM_MAX_STAGES];
    sim_result_t r;
    y->runs++;
    if (sim_build_lists_costs(lists, kk, pp, m, v, t, &r) != 0) {
        if (y->bad++ < 5) tap_diag("%s pp=%d m=%d: %s", sched_kind_names[kk], pp, m, r.error);
        return;
    }
    if (sim_run_lists_costs(lists, pp, m, v, t, &r) != 0 && y->bad++ < 5)
        tap_diag("%s pp=%d m=%d: %s", sched_kind_names[kk], pp, m, r.error);
    if (sim_nccl_lists(lists, pp, m, v, &r) != 0 && y->bad_nccl++ < 5)
        tap_diag("nccl: %s pp=%d m=%d: %s", sched_kind_names[kk], pp, m, r.error);
    for (int s = 0; s < pp; s++) {
        lower_prog_t p;
        if (lower_stage(&lists[s], pp * v, m, LOWER_STREAMS, &p) != 0) {
            y->bad_lanes++;
            continue;
        }
        if (!lanes_ok(&lists[s], &p, pp * v) && y->bad_lanes++ < 3)
            tap_diag("lanes: %s pp=%d m=%d stage %d", sched_kind_names[kk], pp, m, s);
        lower_free(&p);
    }
    sim_free_lists(lists, pp);
}

static void test_all_valid(void)
{
    zb_tally_t y = {0};
    for (int i = 0; i < 3; i++)
        for (int pp = 1; pp <= 8; pp++)
            for (int m = 1; m <= 16; m++) {
                char why[256];
                if (sched_check(ZB[i], pp, m, sched_kind_default_v(ZB[i]), why, sizeof why) == 0) zb_one(ZB[i], pp, m, NULL, &y);
            }
    /* zb1p, zbv: every (pp, m); dualpipev: m >= 2pp */
    int want = 0;
    for (int pp = 1; pp <= 8; pp++)
        for (int m = 1; m <= 16; m++) want += 2 + (m >= 2 * pp);
    tap_ok(y.bad == 0 && y.runs == want,
           "%d zero-bubble schedules (zb1p, zbv every pp<=8, m<=16; dualpipev m>=2pp) with unit times: no deadlock under "
           "MPI's tags, sends matched, each (mb, chunk) F, B and W once, B's and W's in micro-batch order", y.runs);
    tap_ok(y.bad_nccl == 0 && y.runs == want, "the same %d under NCCL's order (blocking sends, per-lane streams): no "
                                             "deadlock, no crossed message", y.runs);
    tap_ok(y.bad_lanes == 0, "the same lowered: every message on its lane's stream, each forward and B waits for its "
                             "receive there (none across V's turn), W on compute with no wait of its own");
    /* 1, 2.25, 0.5 at pp = 2, m = 6: zbv's first play fills stage 1 with first-arm forwards and is
     * played again keeping a stash for the second arm (zerobubble.c) */
    static const sched_costs_t T[] = {{1, 2, 1}, {1, 1, 2}, {2, 1, 1}, {1, 1.5, 0.5}, {1, 2.25, 0.75}, {1, 2.25, 0.5}};
    zb_tally_t c = {0};
    for (int i = 0; i < 3; i++)
        for (size_t j = 0; j < sizeof T / sizeof T[0]; j++)
            for (int pp = 2; pp <= 8; pp += 2)
                for (int m = 2 * pp; m <= 3 * pp; m += pp) zb_one(ZB[i], pp, m, &T[j], &c);
    tap_ok(c.bad == 0 && c.bad_nccl == 0 && c.bad_lanes == 0 && c.runs == 3 * 6 * 4 * 2,
           "%d more built for other times (tf, tb, tw: 1,2,1  1,1,2  2,1,1  1,1.5,0.5  1,2.25,0.75  1,2.25,0.5; pp 2, 4, "
           "6, 8, m 2pp and 3pp): valid under both rules, lowered to their lanes", c.runs);
}

static void test_refusals(void)
{
    char why[256];
    tap_ok(sched_check(SCHED_DUALPIPEV, 4, 7, 2, why, sizeof why) != 0 && strstr(why, "at least 2 × parallel.pp = 8"),
           "dualpipev with m < 2pp is refused naming the rule (%s)", why);
    tap_ok(sched_check(SCHED_ZBV, 4, 8, 1, why, sizeof why) != 0 && strstr(why, "two chunks per stage in a V (v = 2)"),
           "zbv with v != 2 is refused naming the rule (%s)", why);
    tap_ok(sched_check(SCHED_ZB1P, 4, 8, 2, why, sizeof why) != 0 && strstr(why, "needs schedule = interleaved"),
           "zb1p with virtual stages is refused (%s)", why);
    instr_list_t l;
    tap_ok(sched_build(&l, SCHED_ZB1P, 4, 4, 8, 1) != 0, "zb1p: a stage outside the pipeline is refused");
}

/* The unit-time bubbles and stashes of the docs' table (p in {2, 4}, m in {4, 8}). Every stage
 * does m·(tf + tb + tw) = 3m units; bubble = 1 − 3m / makespan. */
static void test_bubbles(void)
{
    int zb1p_third = 1, zb1p_bound = 1, zbv_bound = 1, zbv_mem = 1, dpv_mem = 1, order = 1;
    for (int pp = 2; pp <= 4; pp += 2)
        for (int m = 4; m <= 8; m += 4) {
            sim_result_t f, z, v, d;
            sim_run_costs(SCHED_1F1B, pp, m, 1, NULL, &f); /* a fused backward: tb + tw = 2 units, 1F1B's same work */
            sim_run_costs(SCHED_ZB1P, pp, m, 1, NULL, &z);
            sim_run_costs(SCHED_ZBV, pp, m, 2, NULL, &v);
            const int has_d = m >= 2 * pp && sim_run_costs(SCHED_DUALPIPEV, pp, m, 2, NULL, &d) == 0;
            /* bubble time: 1F1B idles (p−1)(tf + tb + tw), ZB-H1 (p−1)(tf + tb − tw) = a third */
            zb1p_third &= z.makespan - z.busy <= (f.makespan - f.busy) / 3.0 + 1e-9;
            /* and no list can do better: the last stage starts after p−1 forwards and then works 3m */
            zb1p_bound &= fabs(z.makespan - (3.0 * m + (pp - 1))) < 1e-9;
            /* zbv: its last stage waits for p−1 forwards of half a stage each */
            zbv_bound &= fabs(v.makespan - (3.0 * m + (pp - 1) * 0.5)) < 1e-9;
            zbv_mem &= v.peak_units_max <= f.peak_units_max + 1e-12 && z.peak_units_max <= f.peak_units_max + 1e-12;
            for (int s = 0; has_d && s < pp; s++) dpv_mem &= d.peak_stash[s] == 2 * pp + 1;
            order &= v.bubble < z.bubble && z.bubble < f.bubble;
            tap_diag("pp=%d m=%d: bubble 1f1b %.4f, zb1p %.4f, zbv %.4f%s; peak stash (stage units) 1f1b %.2f, zb1p %.2f, "
                     "zbv %.2f", pp, m, f.bubble, z.bubble, v.bubble, has_d ? "" : " (dualpipev needs m >= 2pp)",
                     f.peak_units_max, z.peak_units_max, v.peak_units_max);
            if (has_d) tap_diag("  dualpipev %.4f, peak %.2f stage units", d.bubble, d.peak_units_max);
        }
    tap_ok(zb1p_third, "zb1p's bubble time is at most a third of 1F1B's with the same work (B + W = 1F1B's backward), "
                       "p in {2, 4}, m in {4, 8}");
    tap_ok(zb1p_bound, "zb1p's makespan is 3m + (p-1): the lower bound (its last stage cannot start earlier), so "
                       "p=4 m=8 has bubble 3/27 = 0.1111 against 1F1B's 9/33 = 0.2727");
    tap_ok(zbv_bound, "zbv's makespan is 3m + (p-1)/2, its lower bound (p=4 m=8: bubble 1.5/25.5 = 0.0588; 0.05 is "
                      "below what any list can reach with the step starting at 0)");
    tap_ok(zbv_mem, "zb1p's and zbv's peak stash (stage units, a V chunk's stash weighing 1/2) are at most 1F1B's "
                    "(its stage 0: p)");
    tap_ok(dpv_mem, "dualpipev holds 2p+1 chunk stashes on every stage: PP+1 with PP = 2p chunks, the DualPipe "
                    "README's activation per device for DualPipeV");
    tap_ok(order, "bubble zbv < zb1p < 1f1b at every one of them");
    sim_result_t a, b;
    sim_run(SCHED_1F1B, 4, 8, 1, SIM_COST_TF, SIM_COST_TB, &a);
    sim_run_costs(SCHED_INTERLEAVED, 4, 8, 2, NULL, &b);
    tap_ok(fabs(a.bubble - 3.0 / 11) < 1e-12 && a.peak_stash[0] == 4 && fabs(b.bubble - 3.0 / 19) < 1e-12,
           "the fused schedules keep their results (1f1b 3/11, interleaved v=2 3/19 at p=4 m=8, tb = 2 tf = B + W)");
}

/* Each zb1p and zbv stage at unit times, for all pp <= 8 and m <= 16: stashes within 1F1B's peak; and
 * the greedy is a pure function of its arguments. */
static void test_memory_and_determinism(void)
{
    int mem = 1, same = 1;
    for (int pp = 1; pp <= 8; pp++)
        for (int m = 1; m <= 16; m++) {
            sim_result_t z, v;
            if (sim_run_costs(SCHED_ZB1P, pp, m, 1, NULL, &z) || sim_run_costs(SCHED_ZBV, pp, m, 2, NULL, &v)) {
                mem = 0;
                continue;
            }
            const int one = pp < m ? pp : m; /* 1F1B's stage 0 */
            mem &= z.peak_units_max <= one && v.peak_units_max <= pp;
            for (int s = 0; s < pp && pp <= 4; s++) {
                instr_list_t a, b;
                sched_build(&a, SCHED_ZBV, s, pp, m, 2), sched_build(&b, SCHED_ZBV, s, pp, m, 2);
                same &= a.n == b.n && !memcmp(a.ins, b.ins, (size_t)a.n * sizeof *a.ins) && a.place == SCHED_PLACE_V;
                sched_free(&a), sched_free(&b);
            }
        }
    tap_ok(mem, "zb1p holds at most min(p, m) stashes and zbv at most p stage units on any stage (pp<=8, m<=16)");
    tap_ok(same, "building a zbv list twice gives the same list (deterministic greedy)");
}

/* A list of stage s from instructions (a hand-broken one). */
static instr_list_t hand(instr_t *ins, int n, sched_place_t place) { return (instr_list_t){ins, n, n, place}; }

/* Two stages, one micro-batch, split: stage 0 F0, B0, W0; stage 1 F1, B1, W1. i: which W of stage 0
 * to plant where. */
static void test_planted(void)
{
    sim_result_t r;
    instr_t s1[] = {{OP_RECV_ACT, 0, 1, 0}, {OP_FORWARD, 0, 1, -1}, {OP_BACKWARD_B, 0, 1, -1}, {OP_SEND_GRAD, 0, 1, 0},
                    {OP_BACKWARD_W, 0, 1, -1}};
    instr_t good[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_SEND_ACT, 0, 0, 1}, {OP_RECV_GRAD, 0, 0, 1},
                      {OP_BACKWARD_B, 0, 0, -1}, {OP_BACKWARD_W, 0, 0, -1}};
    instr_list_t l[2] = {hand(good, 6, SCHED_PLACE_LOOP), hand(s1, 5, SCHED_PLACE_LOOP)};
    tap_ok(sim_run_lists(l, 2, 1, 1, 1.0, 2.0, &r) == 0 && sim_nccl_lists(l, 2, 1, 1, &r) == 0,
           "a hand-written split list of two stages is valid (control)");
    instr_t w_first[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_SEND_ACT, 0, 0, 1}, {OP_BACKWARD_W, 0, 0, -1},
                         {OP_RECV_GRAD, 0, 0, 1}, {OP_BACKWARD_B, 0, 0, -1}};
    l[0] = hand(w_first, 6, SCHED_PLACE_LOOP);
    tap_ok(sim_run_lists(l, 2, 1, 1, 1.0, 2.0, &r) != 0 && strstr(r.error, "W of micro-batch 0 chunk 0 before its B"),
           "a W before its B is caught (%s)", r.error);
    l[0] = hand(good, 5, SCHED_PLACE_LOOP); /* its W cut off */
    tap_ok(sim_run_lists(l, 2, 1, 1, 1.0, 2.0, &r) != 0 && strstr(r.error, "B) 1 and W 0 times"),
           "a missing W is caught (%s)", r.error);
    instr_t twice[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_SEND_ACT, 0, 0, 1}, {OP_RECV_GRAD, 0, 0, 1},
                       {OP_BACKWARD_B, 0, 0, -1}, {OP_BACKWARD_W, 0, 0, -1}, {OP_BACKWARD_W, 0, 0, -1}};
    l[0] = hand(twice, 7, SCHED_PLACE_LOOP);
    tap_ok(sim_run_lists(l, 2, 1, 1, 1.0, 2.0, &r) != 0 && strstr(r.error, "runs the W of micro-batch 0 chunk 0 twice"),
           "a W run twice is caught (%s)", r.error);
    instr_t fused_too[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_SEND_ACT, 0, 0, 1}, {OP_RECV_GRAD, 0, 0, 1},
                           {OP_BACKWARD_B, 0, 0, -1}, {OP_BACKWARD, 0, 0, -1}};
    l[0] = hand(fused_too, 6, SCHED_PLACE_LOOP);
    tap_ok(sim_run_lists(l, 2, 1, 1, 1.0, 2.0, &r) != 0 && strstr(r.error, "backward of micro-batch 0 chunk 0 twice"),
           "a B and a fused BACKWARD of one micro-batch are caught (%s)", r.error);
}

/* One stage, two micro-batches: W's (or B's) swapped out of micro-batch order. */
static void test_planted_order(void)
{
    sim_result_t r;
    instr_t w_swapped[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_LOAD_BATCH, 1, 0, -1},
                           {OP_FORWARD, 1, 0, -1},    {OP_BACKWARD_B, 0, 0, -1}, {OP_BACKWARD_B, 1, 0, -1},
                           {OP_BACKWARD_W, 1, 0, -1}, {OP_BACKWARD_W, 0, 0, -1}};
    instr_list_t l = hand(w_swapped, 8, SCHED_PLACE_LOOP);
    tap_ok(sim_run_lists(&l, 1, 2, 1, 1.0, 2.0, &r) != 0 && strstr(r.error, "W of micro-batch 1 out of micro-batch order"),
           "W's out of micro-batch order are caught: gradients must sum as one rank sums them (%s)", r.error);
    instr_t b_swapped[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_LOAD_BATCH, 1, 0, -1},
                           {OP_FORWARD, 1, 0, -1},    {OP_BACKWARD_B, 1, 0, -1}, {OP_BACKWARD_B, 0, 0, -1},
                           {OP_BACKWARD_W, 0, 0, -1}, {OP_BACKWARD_W, 1, 0, -1}};
    l = hand(b_swapped, 8, SCHED_PLACE_LOOP);
    tap_ok(sim_run_lists(&l, 1, 2, 1, 1.0, 2.0, &r) != 0 && strstr(r.error, "backward of micro-batch 1 out of order"),
           "B's out of micro-batch order are caught (%s)", r.error);
    tap_ok(sched_list_peak(&l, 0) == 2 && sched_list_peak_b(&l, 0) == 2, "its stash peaks: 2 to W, 2 to B");
    instr_t spread[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_BACKWARD_B, 0, 0, -1},
                        {OP_LOAD_BATCH, 1, 0, -1}, {OP_FORWARD, 1, 0, -1}, {OP_BACKWARD_B, 1, 0, -1},
                        {OP_BACKWARD_W, 0, 0, -1}, {OP_BACKWARD_W, 1, 0, -1}};
    l = hand(spread, 8, SCHED_PLACE_LOOP);
    tap_ok(sim_run_lists(&l, 1, 2, 1, 1.0, 2.0, &r) == 0 && sched_list_peak(&l, 0) == 2 && sched_list_peak_b(&l, 0) == 1 &&
               r.peak_stash[0] == 2 && r.peak_stash_b[0] == 1,
           "F B F B W W: a stash is counted to its W (peak 2), to its B only once (peak 1)");
    tap_ok(sched_list_peak_w(&l) == 2, "F B F B W W: two weight-gradient stashes between their B and W at once");
    instr_t serial[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_BACKWARD_B, 0, 0, -1},
                        {OP_BACKWARD_W, 0, 0, -1}, {OP_LOAD_BATCH, 1, 0, -1}, {OP_FORWARD, 1, 0, -1},
                        {OP_BACKWARD_B, 1, 0, -1}, {OP_BACKWARD_W, 1, 0, -1}, {OP_BACKWARD, 1, 0, -1}};
    l = hand(serial, 8, SCHED_PLACE_LOOP);
    tap_ok(sched_list_peak_w(&l) == 1, "F B W F B W: one weight-gradient stash");
    l = hand(serial + 8, 1, SCHED_PLACE_LOOP);
    tap_ok(sched_list_peak_w(&l) == 0, "a fused BACKWARD needs no weight-gradient stash");
}

/* The V on one stage (pp = 1: chunks 0 and 1 meet at the turn) and on two. */
static void test_planted_v(void)
{
    sim_result_t r;
    instr_t turn_early[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 1, -1}, {OP_FORWARD, 0, 0, -1},
                            {OP_BACKWARD, 0, 1, -1},   {OP_BACKWARD, 0, 0, -1}};
    instr_list_t l = hand(turn_early, 5, SCHED_PLACE_V);
    tap_ok(sim_run_lists(&l, 1, 1, 2, 1.0, 2.0, &r) != 0 && strstr(r.error, "before its input's, chunk 0"),
           "V: the turn's second chunk forwarded before the first is caught (%s)", r.error);
    instr_t b_early[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_FORWARD, 0, 1, -1},
                         {OP_BACKWARD_B, 0, 0, -1}, {OP_BACKWARD_B, 0, 1, -1}, {OP_BACKWARD_W, 0, 1, -1},
                         {OP_BACKWARD_W, 0, 0, -1}};
    l = hand(b_early, 7, SCHED_PLACE_V);
    tap_ok(sim_run_lists(&l, 1, 1, 2, 1.0, 2.0, &r) != 0 && strstr(r.error, "before its gradient's, chunk 1"),
           "V: the turn's first chunk's B before the second's is caught (%s)", r.error);
    instr_t msg[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_SEND_ACT, 0, 0, 0}, {OP_RECV_ACT, 0, 1, 0},
                     {OP_FORWARD, 0, 1, -1},   {OP_BACKWARD, 0, 1, -1}, {OP_BACKWARD, 0, 0, -1}};
    l = hand(msg, 7, SCHED_PLACE_V);
    tap_ok(sim_run_lists(&l, 1, 1, 2, 1.0, 2.0, &r) != 0 && strstr(r.error, "across V's turn"),
           "V: a message across the turn is caught (%s)", r.error);
    /* zbv pp=2 m=2: stage 1's last W removed, then put back right before its own B */
    instr_list_t lists[SIM_MAX_STAGES];
    sim_build_lists(lists, SCHED_ZBV, 2, 2, 2, &r);
    instr_list_t *s1 = &lists[1];
    int w = -1, b = -1;
    for (int i = 0; i < s1->n; i++)
        if (s1->ins[i].op == OP_BACKWARD_W) w = i;
    const instr_t kept = s1->ins[w];
    memmove(&s1->ins[w], &s1->ins[w + 1], (size_t)(s1->n - w - 1) * sizeof *s1->ins), s1->n--;
    const int missing = sim_run_lists(lists, 2, 2, 2, 1.0, 2.0, &r) != 0 && strstr(r.error, "and W 0 times");
    char why1[256];
    memcpy(why1, r.error, sizeof why1);
    for (int i = 0; i < s1->n; i++)
        if (s1->ins[i].op == OP_BACKWARD_B && s1->ins[i].mb == kept.mb && s1->ins[i].chunk == kept.chunk) b = i;
    memmove(&s1->ins[b + 1], &s1->ins[b], (size_t)(s1->n - b) * sizeof *s1->ins), s1->n++;
    s1->ins[b] = kept;
    const int early = sim_run_lists(lists, 2, 2, 2, 1.0, 2.0, &r) != 0 && strstr(r.error, "before its B");
    tap_ok(missing && early, "zbv pp=2 m=2 with stage 1's last W removed (%s), then put before its B (%s): both caught",
           why1, r.error);
    sim_free_lists(lists, 2);
}

/* Memory policies around split lists: offload places each PREFETCH before its B and counts the
 * stash on the device until its W; balance is refused, naming why. */
static void test_policies(void)
{
    instr_list_t l;
    sched_build(&l, SCHED_ZB1P, 0, 4, 8, 1);
    tap_ok(sched_list_device_peak(&l, 0) == sched_list_peak(&l, 0), "the device peak of a split list without offload "
                                                                    "is its stash peak (a stash leaves at its W)");
    sched_free(&l);
    /* every zb1p and zbv list of pp 2..6, m 1..12, prefetch 0..2 with offload: valid in the simulator,
     * each key offloaded after its forward and prefetched after that and before its B, its W after
     * its B, and a device peak no higher than the stash peak */
    int lists = 0, good = 0;
    for (int kind = SCHED_ZB1P; kind <= SCHED_ZBV; kind++)
        for (int pp = 2; pp <= 6; pp++)
            for (int m = 1; m <= 12; m++)
                for (int pf = 0; pf <= 2; pf++) {
                    const int v = kind == SCHED_ZBV ? 2 : 1;
                    char why[256];
                    if (sched_check((sched_kind_t)kind, pp, m, v, why, sizeof why) != MP_OK) continue;
                    instr_list_t ls[8];
                    sim_result_t r;
                    if (sim_build_lists(ls, (sched_kind_t)kind, pp, m, v, &r) != MP_OK) continue;
                    int ok = 1;
                    for (int s = 0; s < pp; s++) {
                        const int peak = sched_list_peak(&ls[s], 0);
                        ok &= sched_add_offload(&ls[s], pf) == MP_OK && sched_list_device_peak(&ls[s], 0) <= peak;
                        for (int i = 0; ok && i < ls[s].n; i++) {
                            const instr_t *x = &ls[s].ins[i];
                            if (x->op != OP_BACKWARD_B) continue;
                            int off = -1, pre = -1, w = -1;
                            for (int j = 0; j < ls[s].n; j++) {
                                const instr_t *y = &ls[s].ins[j];
                                if (y->mb != x->mb || y->chunk != x->chunk) continue;
                                if (y->op == OP_OFFLOAD) off = j;
                                if (y->op == OP_PREFETCH) pre = j;
                                if (y->op == OP_BACKWARD_W) w = j;
                            }
                            ok &= off >= 0 && off < pre && pre < i && i < w;
                        }
                    }
                    ok &= sim_run_lists(ls, pp, m, v, 1.0, 2.0, &r) == MP_OK;
                    sim_free_lists(ls, pp);
                    lists++, good += ok;
                }
    tap_ok(lists > 100 && good == lists, "offload around split lists: %d of %d zb1p and zbv lists (pp 2..6, m 1..12, "
           "prefetch 0..2) valid, each stash offloaded after its forward, back before its B, held to its W", good, lists);
    char why[256];
    tap_ok(sched_balance_check(SCHED_ZBV, 4, 8, 2, why, sizeof why) == MP_ERR && strstr(why, "weight gradient"),
           "balance refuses zbv: %s", why);
}

/* The data-parallel bucket hook fires at each chunk's gradient writes of micro-batch m − 1 (the
 * executor's `last`: W, or the fused BACKWARD): in every list that must be the chunk's last write, or
 * a bucket would be reduced before an earlier micro-batch's W had added to it. dualpipev mixes fused
 * and split backwards, so a fused m − 1 after a deferred W of the same chunk would break it. */
static void test_bucket_last(void)
{
    int lists = 0, good = 0;
    for (int i = 0; i < 3; i++)
        for (int pp = 2; pp <= 8; pp++)
            for (int m = 1; m <= 16; m++) {
                char why[256];
                if (sched_check(ZB[i], pp, m, 2, why, sizeof why) != 0 && sched_check(ZB[i], pp, m, 1, why, sizeof why) != 0)
                    continue;
                for (int s = 0; s < pp; s++) {
                    instr_list_t l;
                    if (sched_build(&l, ZB[i], s, pp, m, sched_kind_default_v(ZB[i])) != 0) continue;
                    int last[16], ok = 1;
                    for (int c = 0; c < 16; c++) last[c] = -1;
                    for (int j = 0; j < l.n; j++)
                        if (l.ins[j].op == OP_BACKWARD || l.ins[j].op == OP_BACKWARD_W) last[l.ins[j].chunk] = l.ins[j].mb;
                    for (int c = 0; c < 16; c++) ok &= last[c] == -1 || last[c] == m - 1;
                    lists++, good += ok;
                    if (!ok) tap_diag("%s pp=%d m=%d stage %d: a chunk's last gradient write is not micro-batch %d's",
                                      sched_kind_names[ZB[i]], pp, m, s, m - 1);
                    sched_free(&l);
                }
            }
    tap_ok(lists > 500 && good == lists, "%d of %d zb1p, zbv and dualpipev lists (pp 2..8, m 1..16): each chunk's last "
           "gradient write (W or fused backward) is micro-batch m-1's, where the bucket hook fires", good, lists);
}

int main(void)
{
    test_placement();
    test_all_valid();
    test_refusals();
    test_bubbles();
    test_memory_and_determinism();
    test_planted();
    test_planted_order();
    test_planted_v();
    test_policies();
    test_bucket_last();
    return tap_done();
}
