/* The NCCL simulator (sim_nccl.h): every stage's list lowered to its streams (lower.h), run with
 * NCCL's matching rule. A send or receive blocks its stream until the peer's matching call reaches
 * the head of the peer's matching stream (NCCL point-to-point at its most conservative), and NCCL
 * matches the calls of one communicator by order, so the n-th send must carry the message the n-th
 * receive expects. With one stream per direction instead of one per boundary and direction, the
 * interleaved schedule deadlocks (a stage sends its next activation while its peer's stream waits to
 * send one back: 78 of the 104 interleaved cases of the unit test, found with this simulator before
 * the streams were split). */
#include "sim_nccl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lower.h"

/* Whether op o of stage s has its event waits satisfied. */
static int sn_deps_done(const lower_op_t *o, const int *pos)
{
    for (int d = 0; d < o->ndeps; d++)
        if (pos[o->dep_stream[d]] <= o->dep_idx[d]) return 0;
    return 1;
}

int sim_nccl_lists(const instr_list_t *lists, int pp, int m, int v, sim_result_t *res)
{
    memset(res, 0, sizeof *res);
    if (pp > SIM_MAX_STAGES) return sim_fail(res, "more than %d stages", SIM_MAX_STAGES);
    const int K = pp * v;
    int M = m;
    for (int s = 0; s < pp; s++)
        for (int i = 0; i < lists[s].n; i++)
            if (lists[s].ins[i].mb + 1 > M) M = lists[s].ins[i].mb + 1;
    lower_prog_t *st = calloc((size_t)pp, sizeof *st);
    int (*pos)[LS_STREAMS] = calloc((size_t)pp, sizeof *pos);
    int rc = MP_ERR;
    if (!st || !pos) {
        sim_fail(res, "out of memory");
        goto out;
    }
    for (int s = 0; s < pp; s++)
        if (lower_stage(&lists[s], K, M, &st[s]) != MP_OK) {
            sim_fail(res, "out of memory");
            goto out;
        }
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < pp; s++)
            for (int x = 0; x < LS_STREAMS; x++)
                while (pos[s][x] < st[s].s[x].n) {
                    const lower_op_t *o = &st[s].s[x].ops[pos[s][x]];
                    if (!sn_deps_done(o, pos[s])) break;
                    if (o->kind == LK_COMPUTE) {
                        pos[s][x]++, progress = 1;
                        continue;
                    }
                    /* a message: its partner must be at the head of the peer's matching stream, ready */
                    const int q = o->peer, y = lower_partner[x];
                    if (q < 0 || q >= pp || pos[q][y] >= st[q].s[y].n) break;
                    const lower_op_t *p = &st[q].s[y].ops[pos[q][y]];
                    if (p->kind == LK_COMPUTE || p->kind == o->kind || p->peer != s || !sn_deps_done(p, pos[q])) break;
                    if (p->k != o->k || p->mb != o->mb) {
                        sim_fail(res, "stage %d's %s of micro-batch %d chunk %d meets stage %d's %s of micro-batch %d "
                                     "chunk %d on the %s stream: NCCL would deliver it to the wrong buffer",
                                s, op_names[o->op], o->mb, o->k, q, op_names[p->op], p->mb, p->k, lower_stream_names[x]);
                        goto out;
                    }
                    pos[s][x]++, pos[q][y]++, progress = 1;
                }
    }
    for (int s = 0; s < pp; s++)
        for (int x = 0; x < LS_STREAMS; x++)
            if (pos[s][x] < st[s].s[x].n) {
                const lower_op_t *o = &st[s].s[x].ops[pos[s][x]];
                sim_fail(res, "deadlock: stage %d's %s stream waits forever at %s of micro-batch %d chunk %d", s,
                        lower_stream_names[x], op_names[o->op], o->mb, o->k);
                goto out;
            }
    rc = MP_OK;
out:
    for (int s = 0; st && s < pp; s++) lower_free(&st[s]);
    free(st);
    free(pos);
    return rc;
}

int sim_nccl_run(sched_kind_t kind, int pp, int m, int v, sim_result_t *res)
{
    instr_list_t lists[SIM_MAX_STAGES];
    if (sim_build_lists(lists, kind, pp, m, v, res) != MP_OK) return MP_ERR;
    int rc = sim_nccl_lists(lists, pp, m, v, res);
    sim_free_lists(lists, pp);
    return rc;
}
