/* Live migration's arithmetic (src/sched/rebalance.h), linked like test_sim_nompi: the schedule layer
 * and core alone, no MPI. Cases worked out by hand (the issue's 1,5 split at pp = 2, a skewed pp = 4
 * split, a balanced split that must stay), the measured-cost attribution, and the dynamic programme
 * against exhaustive search over every split of random costs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rebalance.h"
#include "tap.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1.0, fmax(fabs(a), fabs(b))); }

/* The slowest stage of sizes (pp stages) under the costs, by direct summation. */
static double slowest(int pp, const int *sizes, const double *cost, double embed, double head)
{
    double worst = 0.0;
    for (int s = 0, l0 = 0; s < pp; l0 += sizes[s], s++) {
        double t = (s == 0 ? embed : 0.0) + (s == pp - 1 ? head : 0.0);
        for (int l = l0; l < l0 + sizes[s]; l++) t += cost[l];
        worst = t > worst ? t : worst;
    }
    return worst;
}

/* Exhaustive: the least slowest stage over every split of L into pp parts of at least one. */
static double brute(int L, int pp, const double *cost, double embed, double head, int *sizes, int s, int left)
{
    if (s == pp - 1) {
        sizes[s] = left;
        return slowest(pp, sizes, cost, embed, head);
    }
    double best = -1.0;
    for (int k = 1; k <= left - (pp - 1 - s); k++) {
        sizes[s] = k;
        const double v = brute(L, pp, cost, embed, head, sizes, s + 1, left - k);
        if (best < 0.0 || v < best) best = v;
    }
    return best;
}

static void test_issue_case(void)
{
    /* pp = 2, layers 1,5: uniform blocks of 1, embedding 0.5 on stage 0, head 1 on the last, measured
     * exactly as modelled: stage times 1.5 and 6. Best: 3,3 (3.5 and 4), predicted gain 1 − 4/6. */
    const int sizes[2] = {1, 5};
    const double w[6] = {1, 1, 1, 1, 1, 1}, t[2] = {1.5, 6.0};
    const rebalance_in_t in = {6, 2, sizes, t, w, 0.5, 1.0};
    int out[2];
    double old, now;
    const double gain = rebalance_plan(&in, out, &old, &now);
    tap_ok(out[0] == 3 && out[1] == 3, "pp=2 from 1,5: the split is 3,3 (got %d,%d)", out[0], out[1]);
    tap_ok(near(old, 6.0) && near(now, 4.0), "pp=2: measured slowest 6, predicted 4 (got %g, %g)", old, now);
    tap_ok(near(gain, 1.0 - 4.0 / 6.0), "pp=2: predicted gain 1/3 (got %.6f)", gain);
    const int bal[2] = {3, 3};
    const double tb[2] = {3.5, 4.0};
    const rebalance_in_t in2 = {6, 2, bal, tb, w, 0.5, 1.0};
    tap_ok(rebalance_plan(&in2, out, &old, &now) == 0.0 && out[0] == 3 && out[1] == 3,
           "pp=2 at 3,3: no better split, gain 0");
}

static void test_skewed_pp4(void)
{
    /* 6 uniform layers on 3,1,1,1, no embedding or head cost: the best slowest stage is 2 layers */
    const int sizes[4] = {3, 1, 1, 1};
    const double w[6] = {1, 1, 1, 1, 1, 1}, t[4] = {0.3, 0.1, 0.1, 0.1};
    const rebalance_in_t in = {6, 4, sizes, t, w, 0.0, 0.0};
    int out[4];
    double old, now;
    const double gain = rebalance_plan(&in, out, &old, &now);
    int sum = 0, ok = 1;
    for (int s = 0; s < 4; s++) sum += out[s], ok &= out[s] >= 1 && out[s] <= 2;
    tap_ok(ok && sum == 6, "pp=4 from 3,1,1,1: every stage 1 or 2 layers (%d,%d,%d,%d)", out[0], out[1], out[2], out[3]);
    tap_ok(near(now, 0.2) && near(gain, 1.0 - 0.2 / 0.3), "pp=4: predicted 0.2 s, gain 1/3 (got %g, %.6f)", now, gain);
}

static void test_costs(void)
{
    /* stage 1 measured twice its modelled work: its layers cost twice as much; the head's share of
     * the last stage follows its modelled share */
    const int sizes[2] = {2, 2};
    const double w[4] = {1, 1, 1, 3}, t[2] = {2.0, 12.0};
    const rebalance_in_t in = {4, 2, sizes, t, w, 0.0, 2.0};
    double c[4], e, h;
    rebalance_costs(&in, c, &e, &h);
    tap_ok(near(c[0], 1) && near(c[1], 1) && near(c[2], 2) && near(c[3], 6) && near(e, 0) && near(h, 4),
           "measured costs: stage time dealt out by modelled share (%g %g %g %g, head %g)", c[0], c[1], c[2], c[3], h);
    const double z[4] = {0, 0, 0, 0};
    const rebalance_in_t in0 = {4, 2, sizes, t, z, 0.0, 0.0};
    rebalance_costs(&in0, c, &e, &h);
    tap_ok(c[0] == 0 && c[3] == 0 && e == 0 && h == 0, "a stage with no modelled work: costs 0, no division by 0");
}

static void test_brute(void)
{
    srand(7);
    int bad = 0, cases = 0;
    for (int L = 2; L <= 9; L++)
        for (int pp = 1; pp <= L && pp <= 5; pp++)
            for (int rep = 0; rep < 6; rep++) {
                double cost[9];
                for (int l = 0; l < L; l++) cost[l] = (rand() % 1000 + 1) / 100.0;
                const double embed = (rand() % 300) / 100.0, head = (rand() % 500) / 100.0;
                int sz[9], sb[9];
                const double dp = rebalance_split(L, pp, cost, embed, head, sz);
                const double bf = brute(L, pp, cost, embed, head, sb, 0, L);
                int sum = 0, pos = 1;
                for (int s = 0; s < pp; s++) sum += sz[s], pos &= sz[s] >= 1;
                /* the returned figure is the split's own slowest stage, and no split is better */
                if (!near(dp, bf) || !near(slowest(pp, sz, cost, embed, head), dp) || sum != L || !pos) bad++;
                cases++;
            }
    tap_ok(bad == 0, "dynamic programme = exhaustive search over %d random cases (%d differ)", cases, bad);
    int sz[3];
    const double one[2] = {1, 1};
    tap_ok(rebalance_split(2, 3, one, 0, 0, sz) < 0, "more stages than layers: refused (-1)");
}

int main(void)
{
    test_issue_case();
    test_skewed_pp4();
    test_costs();
    test_brute();
    return tap_done();
}
