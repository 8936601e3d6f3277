/* Pipeline schedules through the simulator: every schedule for pp <= 8, m <= 16, v <= 4 is free of
 * deadlock with matched sends and receives; bubbles and activation stashes are the textbook ones;
 * broken lists are caught. */
#include <math.h>
#include <string.h>

#include "schedule.h"
#include "sim.h"
#include "tap.h"

static void test_all_valid(void)
{
    const char *names[] = {"gpipe", "1f1b", "interleaved", "2bw"};
    int runs = 0, bad = 0;
    for (int kk = 0; kk < 4; kk++)
        for (int pp = 1; pp <= 8; pp++)
            for (int m = 1; m <= 16; m++)
                for (int v = 1; v <= (kk == SCHED_INTERLEAVED ? 4 : 1); v++) {
                    char why[256];
                    if (sched_check((sched_kind_t)kk, pp, m, v, why, sizeof why) != 0) continue;
                    sim_result_t r;
                    runs++;
                    if (sim_run((sched_kind_t)kk, pp, m, v, 1.0, 2.0, &r) != 0) {
                        if (bad++ < 5) tap_diag("%s pp=%d m=%d v=%d: %s", names[kk], pp, m, v, r.error);
                    }
                }
    int expect = 0; /* gpipe, 1f1b, 2bw: every (pp, m); interleaved: v = 1..4 when pp divides m */
    for (int pp = 1; pp <= 8; pp++)
        for (int m = 1; m <= 16; m++) expect += 3 + (m % pp == 0 ? 4 : 0);
    tap_ok(bad == 0 && runs == expect, "%d schedules (all kinds, pp<=8, m<=16, v<=4): no deadlock, sends and receives "
                                   "matched, each forward and backward once, backwards in micro-batch order", runs);
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
    /* Two stages, one micro-batch; stage 0 waits for the gradient before it sends its activation. */
    instr_t s0[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_RECV_GRAD, 0, 0, 1},
                    {OP_SEND_ACT, 0, 0, 1}, {OP_BACKWARD, 0, 0, -1}};
    instr_t s1[] = {{OP_RECV_ACT, 0, 1, 0}, {OP_FORWARD, 0, 1, -1}, {OP_BACKWARD, 0, 1, -1}, {OP_SEND_GRAD, 0, 1, 0}};
    instr_list_t l[2] = {{s0, 5, 5}, {s1, 4, 4}};
    sim_result_t r;
    int rc = sim_run_lists(l, 2, 1, 1, 1.0, 2.0, &r);
    tap_ok(rc != 0 && strstr(r.error, "deadlock"), "a list that receives before it sends is a deadlock (%s)", r.error);
    instr_t s0b[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_SEND_ACT, 0, 0, 0},
                     {OP_RECV_GRAD, 0, 0, 1}, {OP_BACKWARD, 0, 0, -1}};
    l[0] = (instr_list_t){s0b, 5, 5};
    rc = sim_run_lists(l, 2, 1, 1, 1.0, 2.0, &r);
    tap_ok(rc != 0 && strstr(r.error, "peer"), "a send to the wrong stage is caught (%s)", r.error);
    instr_t s0c[] = {{OP_LOAD_BATCH, 0, 0, -1}, {OP_FORWARD, 0, 0, -1}, {OP_SEND_ACT, 0, 0, 1}};
    instr_t s1c[] = {{OP_RECV_ACT, 0, 1, 0}, {OP_FORWARD, 0, 1, -1}, {OP_BACKWARD, 0, 1, -1}};
    instr_list_t lc[2] = {{s0c, 3, 3}, {s1c, 3, 3}};
    rc = sim_run_lists(lc, 2, 1, 1, 1.0, 2.0, &r);
    tap_ok(rc != 0, "a micro-batch whose backward never runs on one stage is caught (%s)", r.error);
}

static void test_refusals(void)
{
    char why[256];
    tap_ok(sched_check(SCHED_INTERLEAVED, 4, 6, 2, why, sizeof why) != 0 && strstr(why, "multiple of parallel.pp"),
           "interleaved with m not a multiple of pp is refused (%s)", why);
    tap_ok(sched_check(SCHED_1F1B, 4, 8, 2, why, sizeof why) != 0 && strstr(why, "virtual_stages"),
           "virtual stages without the interleaved schedule are refused (%s)", why);
}

int main(void)
{
    test_all_valid();
    test_bubbles_and_stashes();
    test_broken_lists();
    test_refusals();
    return tap_done();
}
