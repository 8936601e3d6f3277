/* The swap simulator (src/sched/swapsim.h), linked like test_sim_nompi: the schedule layer and core
 * alone. Checks the cost model on cases worked out by hand, the arbiter's promise (one copy per
 * direction at a time), conservation of bytes, determinism and the zero-byte and one-rank limits,
 * then prints the tables of docs/MEMORY.md as TAP diagnostics: run
 *   make -j2 check TESTS=validation/unit/test_swapsim && cat validation/unit/test_swapsim.log
 * (or ./validation/unit/test_swapsim in the build tree) to reproduce them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"
#include "sim.h"
#include "swapsim.h"
#include "tap.h"

static const char *const layout_names[] = {"pipeline", "replicas"};

static int near(double a, double b)
{
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-15;
}

/* The step with no copies: sim.h's makespan of the same 1F1B pipeline. */
static double compute_only(const swapsim_cfg_t *c)
{
    sim_result_t s;
    const int pp = c->layout == SWAPSIM_PIPELINE ? c->ranks : c->pp;
    if (sim_run(SCHED_1F1B, pp, c->m, 1, c->tf, c->tb, &s) != MP_OK) return -1;
    return s.makespan;
}

/* Two ranks running one micro-batch after another (pp = 1: F, OFF, PRE, B), where every time is
 * known: c = bytes/bw, one copy alone takes c. Uncoordinated, both copy at once, each at
 * bw·eff(2)/2: a micro-batch takes tf + tb + 4c/eff(2). Coordinated, rank 0 copies first each
 * time and rank 1 follows c later: rank 0 takes tf + tb + 2c per micro-batch, rank 1 ends c after
 * it, and the directions never wait for each other. */
static void check_by_hand(void)
{
    swapsim_cfg_t c;
    swapsim_cfg_default(&c, SWAPSIM_REPLICAS, 1);
    c.pp = 1;
    const double cp = c.bytes / c.bw, one = c.m * (c.tf + c.tb + 2 * cp);
    swapsim_result_t u, o;
    int rc = swapsim_run(&c, 0, &u) | swapsim_run(&c, 1, &o);
    tap_ok(rc == MP_OK && near(u.step_max, one) && near(o.step_max, one),
           "1 rank, pp 1: step = m(tf + tb + 2·bytes/bw) = %.4f s (uncoordinated %.4f, coordinated %.4f)", one,
           u.step_max, o.step_max);
    c.ranks = 2;
    rc = swapsim_run(&c, 0, &u) | swapsim_run(&c, 1, &o);
    const double un = c.m * (c.tf + c.tb + 4 * cp / swapsim_eff(c.alpha, 2));
    tap_ok(rc == MP_OK && near(u.step[0], un) && near(u.step[1], un),
           "2 ranks, pp 1, uncoordinated: both end at m(tf + tb + 4c/eff(2)) = %.4f s (got %.4f, %.4f)", un,
           u.step[0], u.step[1]);
    tap_ok(rc == MP_OK && near(o.step[0], one) && near(o.step[1], one + cp),
           "2 ranks, pp 1, coordinated: rank 0 ends at %.4f s, rank 1 one copy later at %.4f (got %.4f, %.4f)", one,
           one + cp, o.step[0], o.step[1]);
    tap_ok(near(swapsim_eff(0.05, 1), 1) && near(swapsim_eff(0.05, 3), 1 / 1.1) && swapsim_eff(0.05, 8) < swapsim_eff(0.05, 4),
           "eff(1) = 1, eff(3) = 1/(1 + 2·alpha), eff decreasing");
}

/* The arbiter's promise, the uncoordinated overlap, the order of the two and the conservation of
 * bytes, for one layout at the default parameters and R = 2, 4, 8. */
static void check_modes(swapsim_layout_t lay)
{
    const char *ln = layout_names[lay];
    for (int R = 2; R <= 8; R *= 2) {
        swapsim_cfg_t c;
        swapsim_cfg_default(&c, lay, R);
        swapsim_result_t u, o;
        int rc = swapsim_run(&c, 0, &u) | swapsim_run(&c, 1, &o);
        tap_ok(rc == MP_OK, "%s R=%d: both modes run (%s%s)", ln, R, u.error, o.error);
        tap_ok(o.max_same_dir[0] == 1 && o.max_same_dir[1] == 1,
               "%s R=%d coordinated: at most one copy per direction at once (d2h %d, h2d %d)", ln, R,
               o.max_same_dir[0], o.max_same_dir[1]);
        tap_ok(u.max_same_dir[0] >= 2 || u.max_same_dir[1] >= 2,
               "%s R=%d uncoordinated: copies of one direction overlap (d2h %d, h2d %d)", ln, R, u.max_same_dir[0],
               u.max_same_dir[1]);
        const double speedup = u.step_max / o.step_max;
        tap_diag("%s R=%d: uncoordinated %.1f ms, coordinated %.1f ms, speedup %.3f", ln, R, 1e3 * u.step_max,
                 1e3 * o.step_max, speedup);
        /* Plausible: coordination does not lose at these parameters, and a gain beyond removing
         * all contention loss (1/eff(R)) times overlapping the two directions fully (2) would
         * mean the model counts something twice. */
        tap_ok(o.step_max <= u.step_max && speedup <= 2.0 / swapsim_eff(c.alpha, R),
               "%s R=%d: coordinated <= uncoordinated, speedup %.3f in [1, %.2f]", ln, R, speedup,
               2.0 / swapsim_eff(c.alpha, R));
        const double asked = (double)R * c.m * c.bytes, alone = asked / c.bw;
        int conserved = 1;
        for (int d = 0; d < 2; d++)
            conserved &= near(u.bytes_asked[d], asked) && near(o.bytes_asked[d], asked) &&
                         near(u.bytes_moved[d], asked) && near(o.bytes_moved[d], asked);
        tap_ok(conserved, "%s R=%d: bytes moved = bytes asked = R·m·bytes = %.4g per direction (d2h %.6g, h2d %.6g)",
               ln, R, asked, u.bytes_moved[0], u.bytes_moved[1]);
        /* One copy at a time at full bandwidth: the link is busy exactly as long as the bytes take
         * alone; sharing it with contention takes longer. */
        tap_ok(near(o.busy[0], alone) && near(o.busy[1], alone) && u.busy[0] >= alone * (1 - 1e-9) &&
                   u.busy[1] >= alone * (1 - 1e-9),
               "%s R=%d: link busy coordinated = bytes/bw = %.4f s, uncoordinated >= it (%.4f, %.4f)", ln, R, alone,
               u.busy[0], u.busy[1]);
    }
}

/* R = 1 has nothing to coordinate; zero bytes leave pure compute in both modes. */
static void check_limits(swapsim_layout_t lay)
{
    const char *ln = layout_names[lay];
    swapsim_cfg_t c;
    swapsim_cfg_default(&c, lay, 1);
    swapsim_result_t u, o;
    int rc = swapsim_run(&c, 0, &u) | swapsim_run(&c, 1, &o);
    tap_ok(rc == MP_OK && u.step_max == o.step_max && u.wait[0] == o.wait[0] &&
               u.step_max >= compute_only(&c) * (1 - 1e-12),
           "%s R=1: both modes equal (%.4f s, %.4f s), none faster than compute alone (%.4f s)", ln, u.step_max,
           o.step_max, compute_only(&c));
    int all = 1;
    for (int R = 1; R <= 8; R *= 2) {
        swapsim_cfg_default(&c, lay, R);
        c.bytes = 0;
        const double pure = compute_only(&c);
        rc = swapsim_run(&c, 0, &u) | swapsim_run(&c, 1, &o);
        const int ok = rc == MP_OK && pure > 0 && near(u.step_max, pure) && near(o.step_max, pure) &&
                       u.wait_max == 0 && o.wait_max == 0;
        if (!ok)
            tap_diag("%s R=%d zero bytes: %.6f, %.6f s, waits %g, %g; compute alone %.6f s", ln, R, u.step_max,
                     o.step_max, u.wait_max, o.wait_max, pure);
        all &= ok;
    }
    tap_ok(all, "%s R=1,2,4,8 with zero bytes: both modes take the 1F1B makespan of sim.h, no exposed wait", ln);
}

static void check_determinism_and_refusals(void)
{
    swapsim_cfg_t c;
    swapsim_cfg_default(&c, SWAPSIM_REPLICAS, 8);
    swapsim_result_t *a = calloc(4, sizeof *a);
    if (!a) return;
    swapsim_run(&c, 0, &a[0]);
    swapsim_run(&c, 0, &a[1]);
    swapsim_run(&c, 1, &a[2]);
    swapsim_run(&c, 1, &a[3]);
    tap_ok(!memcmp(&a[0], &a[1], sizeof *a) && !memcmp(&a[2], &a[3], sizeof *a),
           "deterministic: two runs of each mode give the same result to the bit");
    c.buffers = 1; /* a forward's stash and a prefetched one are on the device at once */
    int r1 = swapsim_run(&c, 1, &a[0]);
    swapsim_cfg_default(&c, SWAPSIM_PIPELINE, 2);
    c.engines = 3;
    int r2 = swapsim_run(&c, 1, &a[1]);
    tap_ok(r1 == MP_ERR && strstr(a[0].error, "buffers") && r2 == MP_ERR && strstr(a[1].error, "engines"),
           "refused: fewer buffers than the list needs (%s); 3 engines (%s)", a[0].error, a[1].error);
    free(a);
}

/* The tables of docs/MEMORY.md, as diagnostics. */
static void print_tables(void)
{
    for (int lay = 0; lay < 2; lay++) {
        const double alphas[] = {0.05, 0, 0.1};
        for (int i = 0; i < 3; i++) {
            swapsim_cfg_t c;
            swapsim_cfg_default(&c, (swapsim_layout_t)lay, 2);
            c.alpha = alphas[i];
            char *buf = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&buf, &len);
            if (!f) return;
            int rc = swapsim_table(f, &c);
            fclose(f);
            tap_diag("");
            tap_diag("%s, alpha = %g%s:", layout_names[lay], c.alpha, i == 0 ? " (default)" : "");
            for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) tap_diag("%s", line);
            tap_ok(rc == MP_OK, "swapsim_table prints the %s table at alpha = %g", layout_names[lay], c.alpha);
            free(buf);
        }
    }
}

int main(void)
{
    check_by_hand();
    check_modes(SWAPSIM_PIPELINE);
    check_modes(SWAPSIM_REPLICAS);
    check_limits(SWAPSIM_PIPELINE);
    check_limits(SWAPSIM_REPLICAS);
    check_determinism_and_refusals();
    print_tables();
    return tap_done();
}
