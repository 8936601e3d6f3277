/* The NCCL simulator (sim_nccl.h): every stage's list lowered to its streams (lower.h), run with
 * NCCL's matching rule. A send or receive blocks its stream until the peer's matching call reaches
 * the head of the peer's matching stream (NCCL point-to-point at its most conservative), and NCCL
 * matches the calls of one communicator by order, so the n-th send must carry the message the n-th
 * receive expects. With one stream per direction instead of one per boundary and direction, the
 * interleaved schedule deadlocks (a stage sends its next activation while its peer's stream waits to
 * send one back: 78 of the 104 interleaved cases of the unit test, found with this simulator before
 * the streams were split). */
#include "sim_nccl.h"

#include "check.h"
#include "lower.h"

int sim_nccl_lists(const instr_list_t *lists, int pp, int m, int v, sim_result_t *res)
{
    const sched_costs_t unit = sim_costs_fused(SIM_COST_TF, SIM_COST_TB);
    return sim_lower_and_run(lists, pp, m, v, LOWER_STREAMS, SIM_MATCH_ORDER, &unit, res);
}

int sim_nccl_run(sched_kind_t kind, int pp, int m, int v, sim_result_t *res)
{
    instr_list_t lists[SIM_MAX_STAGES];
    if (sim_build_lists(lists, kind, pp, m, v, res) != MP_OK) return MP_ERR;
    int rc = sim_nccl_lists(lists, pp, m, v, res);
    sim_free_lists(lists, pp);
    return rc;
}
