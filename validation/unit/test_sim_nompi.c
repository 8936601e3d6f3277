/* The schedule layer without MPI: validation/test_layers.sh compiles this with plain cc, against
 * only src/sched/libmp_sched.a and src/core/libmp_core.a, and runs it. If sched or core ever needs
 * MPI or HDF5, this does not link. Checks 1f1b at pp = 4, m = 8 through both simulators. */
#include <math.h>
#include <string.h>

#include "schedule.h"
#include "sim.h"
#include "sim_nccl.h"
#include "tap.h"

int main(void)
{
    sim_result_t r;
    int rc = sim_run(SCHED_1F1B, 4, 8, 1, SIM_COST_TF, SIM_COST_TB, &r);
    tap_ok(rc == MP_OK, "sim_run 1f1b pp=4 m=8 is valid (%s)", r.error);
    tap_ok(r.peak_stash[0] == 4 && r.peak_stash[1] == 3 && r.peak_stash[2] == 2 && r.peak_stash[3] == 1,
           "1f1b pp=4 m=8: peak stash per stage [4,3,2,1] (got [%d,%d,%d,%d])", r.peak_stash[0], r.peak_stash[1],
           r.peak_stash[2], r.peak_stash[3]);
    tap_ok(fabs(r.bubble - 3.0 / 11.0) < 1e-12, "1f1b pp=4 m=8: bubble (p-1)/(m+p-1) = 3/11 (got %.6f)", r.bubble);
    sim_result_t n;
    rc = sim_nccl_run(SCHED_1F1B, 4, 8, 1, &n);
    tap_ok(rc == MP_OK && n.error[0] == 0, "sim_nccl_run 1f1b pp=4 m=8 passes (%s)", n.error);
    rc = sim_run(SCHED_INTERLEAVED, 4, 6, 2, SIM_COST_TF, SIM_COST_TB, &r);
    tap_ok(rc != MP_OK && strstr(r.error, "multiple"), "an invalid schedule is refused with a reason (%s)", r.error);
    return tap_done();
}
