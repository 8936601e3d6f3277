/* Memory instructions in the lists (memlists.h): offload's OFFLOAD/PREFETCH in every schedule and
 * BPipe's balance in 1F1B are valid lists (every forward and backward once, messages matched, no
 * deadlock in the simulator) for pp <= 8 and m <= 16; the device peaks they leave; which schedules
 * balance refuses and why. No MPI: the schedule layer and core alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "memlists.h"
#include "schedule.h"
#include "sim.h"
#include "sim_nccl.h"
#include "tap.h"

static int count_op(const instr_list_t *l, op_t op)
{
    int n = 0;
    for (int i = 0; i < l->n; i++) n += l->ins[i].op == op;
    return n;
}

/* Every FORWARD has its OFFLOAD after it, every BACKWARD its PREFETCH before it and after its OFFLOAD. */
static int offload_well_placed(const instr_list_t *l)
{
    for (int i = 0; i < l->n; i++) {
        const instr_t *x = &l->ins[i];
        if (x->op != OP_BACKWARD) continue;
        int pre = -1, off = -1;
        for (int j = 0; j < i; j++) {
            if (l->ins[j].mb != x->mb || l->ins[j].chunk != x->chunk) continue;
            if (l->ins[j].op == OP_PREFETCH) pre = j;
            if (l->ins[j].op == OP_OFFLOAD) off = j;
        }
        if (pre < 0 || pre < off) return 0;
    }
    return count_op(l, OP_FORWARD) == count_op(l, OP_OFFLOAD);
}

static void test_offload(void)
{
    int lists_ok = 0, lists_all = 0, placed = 0, below = 0;
    for (int kind = 0; kind < SCHED_KINDS; kind++)
        for (int pp = 1; pp <= 8; pp++)
            for (int m = 1; m <= 16; m++)
                for (int v = 1; v <= (kind == SCHED_INTERLEAVED ? 2 : 1); v++)
                    for (int pf = 0; pf <= 3; pf++) {
                        instr_list_t lists[SIM_MAX_STAGES];
                        sim_result_t r;
                        if (kind == SCHED_2BW) continue; /* below: its joined lists */
                        if (sched_kind_split((sched_kind_t)kind)) continue; /* refused: test_zb.c */
                        if (sim_build_lists(lists, (sched_kind_t)kind, pp, m, v, &r) != MP_OK) continue;
                        int good = 1, lower = 1;
                        for (int s = 0; s < pp; s++) {
                            const int keep_peak = sched_list_peak(&lists[s], 0);
                            good &= sched_add_offload(&lists[s], pf) == MP_OK && offload_well_placed(&lists[s]);
                            lower &= sched_list_device_peak(&lists[s], 0) <= keep_peak;
                        }
                        lists_all++;
                        lists_ok += sim_run_lists(lists, pp, m, v, SIM_COST_TF, SIM_COST_TB, &r) == MP_OK;
                        placed += good, below += lower;
                        sim_free_lists(lists, pp);
                    }
    tap_ok(lists_ok == lists_all && lists_all > 500, "offload: %d of %d lists (gpipe, 1f1b, interleaved; pp<=8, m<=16, "
           "prefetch 0..3) valid in the simulator", lists_ok, lists_all);
    tap_ok(placed == lists_all, "offload: every forward offloads after it and every backward prefetches after that (%d/%d)",
           placed, lists_all);
    tap_ok(below == lists_all, "offload: no list's device peak exceeds its stash peak (%d/%d)", below, lists_all);

    /* 2bw's joined lists: a backward whose forward ran in the previous step prefetches at the start */
    int good = 1;
    for (int pp = 1; pp <= 6; pp++)
        for (int m = 1; m <= 8; m++)
            for (int s = 0; s < pp; s++) {
                instr_list_t l;
                if (sched_build_2bw(&l, s, pp, m, 0, 0) != MP_OK) continue;
                good &= sched_add_offload(&l, 1) == MP_OK && count_op(&l, OP_PREFETCH) == count_op(&l, OP_BACKWARD) &&
                        count_op(&l, OP_OFFLOAD) == count_op(&l, OP_FORWARD);
                sched_free(&l);
            }
    tap_ok(good, "2bw's joined lists: one PREFETCH per backward (carried ones too), one OFFLOAD per forward");

    /* 1f1b pp = 4 m = 8 stage 0 with prefetch 1: four stashes in flight; each leaves right after
     * its forward and comes back one instruction before its backward, which in the steady state
     * follows that forward's offload, so one stash at a time is on the device */
    instr_list_t l;
    sched_build(&l, SCHED_1F1B, 0, 4, 8, 1);
    const int before = sched_list_peak(&l, 0);
    sched_add_offload(&l, 1);
    const int after = sched_list_device_peak(&l, 0);
    tap_ok(before == 4 && after == 1, "1f1b pp=4 m=8 stage 0: stash peak %d, device peak with offload %d (want 4, 1)",
           before, after);
    sched_free(&l);
}

static void test_balance(void)
{
    char why[256];
    tap_ok(sched_balance_check(SCHED_GPIPE, 4, 8, 1, why, sizeof why) == MP_ERR && strstr(why, "no stage has room"),
           "balance refuses gpipe: %s", why);
    tap_ok(sched_balance_check(SCHED_2BW, 4, 8, 1, why, sizeof why) == MP_ERR && strstr(why, "2bw"), "balance refuses 2bw: %s", why);
    tap_ok(sched_balance_check(SCHED_INTERLEAVED, 4, 8, 2, why, sizeof why) == MP_ERR, "balance refuses interleaved: %s", why);
    tap_ok(sched_balance_check(SCHED_1F1B, 1, 8, 1, why, sizeof why) == MP_ERR && strstr(why, "pp >= 2"),
           "balance refuses one stage: %s", why);

    int all = 0, matched = 0, valid = 0, nccl = 0, evicted_any = 0, within = 0;
    for (int pp = 2; pp <= 8; pp++)
        for (int m = 1; m <= 16; m++)
            for (int keep = 0; keep <= 3; keep++) {
                instr_list_t lists[SIM_MAX_STAGES];
                sim_result_t r;
                if (sim_build_lists(lists, SCHED_1F1B, pp, m, 1, &r) != MP_OK) continue;
                all++;
                if (sched_add_balance(lists, pp, m, keep) != MP_OK) continue;
                matched += sched_balance_check_lists(lists, pp, why, sizeof why) == MP_OK;
                if (sim_run_lists(lists, pp, m, 1, SIM_COST_TF, SIM_COST_TB, &r) == MP_OK) valid++;
                else tap_diag("pp=%d m=%d keep=%d: %s", pp, m, keep, r.error);
                nccl += sim_nccl_lists(lists, pp, m, 1, &r) == MP_OK;
                int ok = 1;
                for (int s = 0; s < pp - 1 - s; s++) {
                    /* the default is chosen per pair, never above 1F1B's pp − s */
                    const int k = keep <= 0 ? pp - s : keep < 2 ? 2 : keep;
                    evicted_any += count_op(&lists[s], OP_EVICT) > 0;
                    ok &= sched_list_device_peak(&lists[s], 0) <= k;
                }
                within += ok;
                sim_free_lists(lists, pp);
            }
    tap_ok(matched == all && all == 7 * 16 * 4, "balance: %d of %d list sets (pp 2..8, m 1..16, keep default and 1..3) matched", matched, all);
    tap_ok(valid == all, "balance: %d of %d run in the simulator with no deadlock and every message matched (MPI tags)", valid, all);
    tap_ok(nccl == all, "balance: the NCCL executor's streams still meet in order with the balance lists (%d/%d)", nccl, all);
    tap_ok(within == all && evicted_any > 100, "balance: every evictor keeps at most `keep` stashes on its device (%d/%d; %d evicting lists)",
           within, all, evicted_any);

    /* pp = 4, m = 8, the default: stash counts per stage on the device, own and guests */
    instr_list_t lists[SIM_MAX_STAGES];
    sim_result_t r;
    sim_build_lists(lists, SCHED_1F1B, 4, 8, 1, &r);
    int keep_peak[4], dev[4], guests[4];
    for (int s = 0; s < 4; s++) keep_peak[s] = sched_list_peak(&lists[s], 0);
    sched_add_balance(lists, 4, 8, 0);
    int most_keep = 0, most_bal = 0;
    for (int s = 0; s < 4; s++) {
        dev[s] = sched_list_device_peak(&lists[s], 0);
        guests[s] = sched_balance_guest_peak(&lists[s]);
        most_keep = keep_peak[s] > most_keep ? keep_peak[s] : most_keep;
        most_bal = dev[s] + guests[s] > most_bal ? dev[s] + guests[s] : most_bal;
    }
    tap_diag("pp=4 m=8: stashes on the device per stage, keep %d %d %d %d; balance own %d %d %d %d + guests %d %d %d %d",
             keep_peak[0], keep_peak[1], keep_peak[2], keep_peak[3], dev[0], dev[1], dev[2], dev[3], guests[0], guests[1],
             guests[2], guests[3]);
    /* the goal: stage 0's stashes cut by at least 30% and the fullest stage's by at least 25% */
    tap_ok(most_keep == 4 && keep_peak[0] == 4 && 10 * dev[0] <= 7 * keep_peak[0] && 4 * most_bal <= 3 * most_keep,
           "balance pp=4 m=8: stage 0 keeps %d of %d stashes, the fullest stage holds %d (keep: %d)", dev[0], keep_peak[0],
           most_bal, most_keep);
    sim_free_lists(lists, 4);

    sim_free_lists(lists, 4);
}

int main(void)
{
    test_offload();
    test_balance();
    return tap_done();
}
