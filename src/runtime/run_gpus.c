/* train.device = cuda with ranks that share a GPU: the run's decisions (see run_gpus.h). */
#include "run_gpus.h"

#include <stdio.h>
#include <stdlib.h>

#include "check.h"

/* The first pipeline (by its stage 0's world rank) with a boundary whose two ranks share a GPU:
 * its two world ranks and the boundary's first stage; -1 when there is none. */
static int run_gpus_boundary(const deck_t *d, const run_layout_t *lay, const gpu_id_t *ids, int *a_p, int *b_p)
{
    const grid_t *g = &lay->grid;
    const int pp = g->size[GRID_PP], step = g->stride[GRID_PP];
    /* the interleaved loop's chunks cross from the last stage back to the first (the V's do not:
     * their way back up uses the same boundaries, sched_place_lane) */
    const int wrap = deck_chunks_per_stage(d) > 1 && d->parallel.schedule_kind == SCHED_INTERLEAVED;
    int *stage_rank = MP_CALLOC((size_t)pp, sizeof *stage_rank);
    if (!stage_rank) MP_ABORT("out of memory listing %d pipeline stages", pp);
    int found = -1;
    for (int w = 0; w < g->world && found < 0; w++) {
        if ((w / step) % pp != 0) continue; /* one pipeline per stage-0 rank */
        for (int s = 0; s < pp; s++) stage_rank[s] = w + s * step;
        if ((found = gpu_share_boundary(ids, stage_rank, pp, wrap)) >= 0)
            *a_p = stage_rank[found], *b_p = stage_rank[(found + 1) % pp];
    }
    free(stage_rank);
    return found;
}

/* parallel.p2p on this layout: NCCL unless a boundary's ranks share a GPU (refused when asked for). */
static int run_gpus_p2p(const deck_t *d, const run_layout_t *lay, run_stage_t *st, const gpu_id_t *ids)
{
    const deck_p2p_t p2p = d->parallel.p2p;
    int a = -1, b = -1;
    /* the stand-in takes a boundary whose ranks share a GPU (gpu_share.h) */
    const int bnd = p2p == DECK_P2P_MPI || gpu_share_nccl_standin() ? -1 : run_gpus_boundary(d, lay, ids, &a, &b);
    st->p2p_nccl = p2p != DECK_P2P_MPI && bnd < 0;
    if (bnd < 0) return MP_OK;
    const int pp = lay->grid.size[GRID_PP];
    if (p2p == DECK_P2P_NCCL)
        return MP_FAIL("parallel.p2p=nccl: ranks %d and %d (pipeline stages %d and %d) share GPU %s on %s, and NCCL "
                       "refuses a communicator with two ranks on one GPU; set parallel.p2p=mpi (or auto, which picks "
                       "mpi here), or run one rank per GPU", a, b, bnd, (bnd + 1) % pp, ids[a].bus, ids[a].host);
    snprintf(st->p2p_note, sizeof st->p2p_note, "parallel.p2p=auto: pipeline messages go through MPI from pinned host "
             "buffers, not NCCL: ranks %d and %d (pipeline stages %d and %d) share GPU %s on %s, and NCCL refuses a "
             "communicator with two ranks on one GPU", a, b, bnd, (bnd + 1) % pp, ids[a].bus, ids[a].host);
    return MP_OK;
}

int run_gpus_decide(const deck_t *d, const run_layout_t *lay, run_stage_t *st, const gpu_id_t *ids)
{
    st->p2p_nccl = 0;
    st->gpu_note[0] = st->p2p_note[0] = '\0';
    int a = -1, b = -1;
    const int shared = gpu_share_find(ids, lay->world, &a, &b);
    if (shared == MP_ERR) return MP_ERR;
    if (run_gpus_p2p(d, lay, st, ids) != MP_OK) return MP_ERR;
    if (!shared) return MP_OK;
    if (!d->memory.device_limit)
        return MP_FAIL("train.device=cuda: ranks %d and %d share GPU %s on %s, and with memory.device_limit=0 each "
                       "rank's arena takes the GPU's free memory less a margin (4 GiB or 1/16 of the GPU) at start, "
                       "leaving the next rank on it none; set memory.device_limit to at most the GPU's memory over the ranks on it, less about "
                       "2 GiB each (30G for two ranks on an 80 GB GPU), or run one rank per GPU", a, b, ids[a].bus,
                       ids[a].host);
    if (gpu_share_nccl_standin())
        snprintf(st->gpu_note, sizeof st->gpu_note, "train.device=cuda: ranks %d and %d share GPU %s on %s, and the "
                 "NCCL loaded is MindPipe's stand-in (validation/nccl_standin): every communicator gets its NCCL "
                 "twin, carried over MPI", a, b, ids[a].bus, ids[a].host);
    else
        snprintf(st->gpu_note, sizeof st->gpu_note, "train.device=cuda: ranks %d and %d share GPU %s on %s (more ranks "
                 "than GPUs on a node): a communicator with two ranks on one GPU gets no NCCL twin, and its "
                 "collectives go through pinned host memory and MPI", a, b, ids[a].bus, ids[a].host);
    return MP_OK;
}

int run_gpus_resolve(const deck_t *d, const run_layout_t *lay, run_stage_t *st, int ordinal)
{
    gpu_id_t me;
    if (run_agree(gpu_share_id(ordinal, &me)) != MP_OK) return MP_ERR;
    gpu_id_t *ids = gpu_share_gather(&me, MPI_COMM_WORLD, &lay->wait);
    const int rc = run_gpus_decide(d, lay, st, ids); /* the same names on every rank: the same outcome */
    free(ids);
    return run_agree(rc);
}
