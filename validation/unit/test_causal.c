/* The causal scheduler (causal.h): for pp <= 8, 1 to 8 candidates, windows of 1 to 16 subnets and
 * many samplings, the lists run in the simulator with no deadlock and every message matched; no
 * stage runs a subnet's forward before an earlier conflicting subnet's backward there; backwards
 * in subnet order; never slower than one subnet at a time, exactly that when every subnet
 * conflicts everywhere. Prints the speedup table of docs/SUPERNET.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "causal.h"
#include "check.h"
#include "rng.h"
#include "sim.h"
#include "sim_nccl.h"
#include "tap.h"

enum { MAXL = 64, MAXN = 64 };

/* Subnets t0 .. t0+n-1 of a supernet of L layers, all choice blocks, K candidates: the sampler's
 * rule (supernet_sample). */
static void sample(int *sel, int n, int L, int K, unsigned long long seed, long t0)
{
    for (int j = 0; j < n; j++)
        for (int l = 0; l < L; l++) sel[j * L + l] = (int)(rng_key(seed, RNG_STREAM_SUBNET, (uint64_t)(t0 + j), (uint64_t)l) % (uint64_t)K);
}

static int pos_of(const instr_list_t *l, op_t op, int mb)
{
    for (int i = 0; i < l->n; i++)
        if (l->ins[i].op == op && l->ins[i].mb == mb) return i;
    return -1;
}

/* The rule, read off the lists: F(j) after B(i) on stage s whenever i < j conflict there. */
static int rule_holds(const causal_cfg_t *c, const instr_list_t *lists)
{
    for (int s = 0; s < c->pp; s++)
        for (int j = 0; j < c->n; j++)
            for (int i = 0; i < j; i++)
                if (causal_conflict(c, s, i, j) && pos_of(&lists[s], OP_FORWARD, j) < pos_of(&lists[s], OP_BACKWARD, i))
                    return 0;
    return 1;
}

static void setup(causal_cfg_t *c, int *layer0, int pp, int L)
{
    for (int s = 0; s <= pp; s++) layer0[s] = s * L / pp;
    c->layer0 = layer0, c->pp = pp, c->layers = L;
}

int main(void)
{
    static int sel[MAXN * MAXL];
    int layer0[SIM_MAX_STAGES + 1], all = 0, valid = 0, rule = 0, faster = 0, nccl = 0;
    unsigned char skip_last[8] = {0};
    for (int pp = 1; pp <= 8; pp++)
        for (int K = 1; K <= 8; K++)
            for (int n = 1; n <= 16; n *= 4)
                for (int seed = 1; seed <= 4; seed++) {
                    const int L = 2 * pp;
                    causal_cfg_t c = {0};
                    setup(&c, layer0, pp, L);
                    c.n = n, c.ncand = K, c.sel = sel;
                    memset(skip_last, 0, sizeof skip_last);
                    if (seed % 2 == 0 && K > 1) skip_last[K - 1] = 1; /* a skip candidate: never conflicts */
                    c.weightless = skip_last;
                    sample(sel, n, L, K, (unsigned long long)seed, 7L * seed);
                    instr_list_t lists[SIM_MAX_STAGES];
                    causal_result_t res;
                    all++;
                    if (causal_build(&c, lists, &res) != MP_OK) {
                        tap_diag("pp=%d K=%d n=%d seed=%d: no lists", pp, K, n, seed);
                        continue;
                    }
                    sim_result_t r;
                    if (sim_run_lists(lists, pp, n, 1, SIM_COST_TF, SIM_COST_TB, &r) == MP_OK) valid++;
                    else tap_diag("pp=%d K=%d n=%d seed=%d: %s", pp, K, n, seed, r.error);
                    nccl += sim_nccl_lists(lists, pp, n, 1, &r) == MP_OK;
                    rule += rule_holds(&c, lists);
                    faster += res.makespan <= res.sequential;
                    sim_free_lists(lists, pp);
                }
    tap_ok(valid == all && all == 8 * 8 * 3 * 4, "%d of %d windows (pp 1..8, 1..8 candidates, 1/4/16 subnets, 4 samplings) "
           "run in the simulator: no deadlock, every message matched, backwards in subnet order", valid, all);
    tap_ok(rule == all, "no stage runs a forward before an earlier conflicting subnet's backward there (%d/%d)", rule, all);
    tap_ok(faster == all, "never slower than one subnet at a time (%d/%d)", faster, all);
    tap_diag("the NCCL executor's in-order streams meet in %d of %d (reordered forwards need MPI's tags)", nccl, all);

    /* supernet.resident = host caps the subnets in flight on a stage (its slots − 1): read off each
     * stage's list, from a subnet's first forward to its step there, never more than the cap, and
     * the lists still run, keep the rule and keep the backwards in order */
    {
        int capped = 0, cap_ok = 0, cap_valid = 0, cap_rule = 0;
        for (int pp = 1; pp <= 8; pp++)
            for (int K = 2; K <= 8; K += 3)
                for (int cap = 1; cap <= 3; cap++)
                    for (int seed = 1; seed <= 2; seed++) {
                        const int L = 2 * pp, n = 8;
                        causal_cfg_t c = {0};
                        setup(&c, layer0, pp, L);
                        c.n = n, c.ncand = K, c.sel = sel, c.subnets_cap = cap;
                        memset(skip_last, 0, sizeof skip_last);
                        c.weightless = skip_last;
                        sample(sel, n, L, K, (unsigned long long)seed, 11L * seed);
                        instr_list_t lists[SIM_MAX_STAGES];
                        causal_result_t res;
                        capped++;
                        if (causal_build(&c, lists, &res) != MP_OK) continue;
                        sim_result_t r;
                        cap_valid += sim_run_lists(lists, pp, n, 1, SIM_COST_TF, SIM_COST_TB, &r) == MP_OK;
                        cap_rule += rule_holds(&c, lists);
                        int most = 0;
                        for (int st = 0; st < pp; st++) {
                            int now = 0;
                            for (int i = 0; i < lists[st].n; i++) {
                                const instr_t *in = &lists[st].ins[i];
                                if (in->op == OP_FORWARD) now++;
                                if (in->op == OP_OPTIMIZER_STEP && in->mb >= 0) now--;
                                if (now > most) most = now;
                            }
                        }
                        cap_ok += most <= cap;
                        if (most > cap) tap_diag("pp=%d K=%d cap=%d seed=%d: %d subnets in flight", pp, K, cap, seed, most);
                        sim_free_lists(lists, pp);
                    }
        tap_ok(cap_valid == capped, "capped lists (cap 1..3 subnets in flight, pp 1..8): %d of %d run in the simulator",
               cap_valid, capped);
        tap_ok(cap_rule == capped, "capped lists keep NASPipe's rule (%d/%d)", cap_rule, capped);
        tap_ok(cap_ok == capped, "no stage has more subnets in flight than the cap (%d/%d)", cap_ok, capped);
    }

    /* one candidate: every subnet conflicts with every other on every stage: one at a time */
    {
        causal_cfg_t c = {0};
        setup(&c, layer0, 4, 8);
        c.n = 8, c.ncand = 1, c.sel = sel;
        sample(sel, 8, 8, 1, 1, 0);
        instr_list_t lists[SIM_MAX_STAGES];
        causal_result_t res;
        const int ok = causal_build(&c, lists, &res) == MP_OK;
        tap_ok(ok && res.makespan == res.sequential, "one candidate at pp=4: makespan %g = one subnet at a time %g",
               res.makespan, res.sequential);
        if (ok) sim_free_lists(lists, 4);
    }

    /* the speedup table: 32 subnets per window, 2 choice blocks per stage, mean over 8 samplings */
    tap_diag("| pp | candidates | causal / one at a time (subnets/s) | conflict stalls per window |");
    tap_diag("|---:|---:|---:|---:|");
    int grows = 1;
    for (int pp = 4; pp <= 8; pp *= 2) {
        double prev = 0.0;
        for (int K = 2; K <= 8; K *= 2) {
            double sp = 0.0, st = 0.0;
            for (int seed = 1; seed <= 8; seed++) {
                causal_cfg_t c = {0};
                setup(&c, layer0, pp, 2 * pp);
                c.n = 32, c.ncand = K, c.sel = sel;
                sample(sel, 32, 2 * pp, K, (unsigned long long)seed, 0);
                instr_list_t lists[SIM_MAX_STAGES];
                causal_result_t res;
                if (causal_build(&c, lists, &res) != MP_OK) continue;
                sp += res.sequential / res.makespan, st += res.stalls;
                sim_free_lists(lists, pp);
            }
            tap_diag("| %d | %d | %.2f | %.1f |", pp, K, sp / 8, st / 8);
            grows &= sp / 8 >= prev;
            prev = sp / 8;
        }
    }
    tap_ok(grows, "more candidates, fewer conflicts: the speedup grows with the candidates at pp = 4 and 8");
    return tap_done();
}
