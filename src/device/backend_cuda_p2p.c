/* The cuda backend's pipeline point-to-point (parallel.p2p = nccl): per boundary two 2-rank NCCL
 * communicators (activations, gradients), per direction a stream; sends and receives start after
 * the compute work enqueued before them, and the compute stream waits for a receive only where its
 * data is first read (be_p2p_wait). The contract: backend.h's BE_P2P_OPS. */
#include "config.h"

#include "backend_cuda.h"

#include <stdlib.h>

#include "check.h"
#include "cuda_check.h"
#include "nccl_grid.h"

/* The 2-rank MPI communicator of boundary bnd (stage bnd, then stage bnd+1 mod pp) out of pp_comm. */
static MPI_Comm boundary_comm(MPI_Comm pp_comm, int pp, int bnd)
{
    MPI_Group all, two;
    const int ranks[2] = {bnd, (bnd + 1) % pp};
    MPI_Comm c;
    MPI_CHECK(MPI_Comm_group(pp_comm, &all));
    MPI_CHECK(MPI_Group_incl(all, 2, ranks, &two));
    MPI_CHECK(MPI_Comm_create_group(pp_comm, two, bnd, &c)); /* collective over the two only */
    MPI_CHECK(MPI_Group_free(&two));
    MPI_CHECK(MPI_Group_free(&all));
    return c;
}

/* The boundaries' communicators, in ascending boundary order on every rank: one global order for
 * the blocking creations. */
static void p2p_comms_create(bcu_t *b, MPI_Comm pp_comm, int pp, int stage, int wrap)
{
    b->p2p_mpi[0] = b->p2p_mpi[1] = MPI_COMM_NULL;
    const int before = (stage + pp - 1) % pp, after = stage;
    const int has_before = stage > 0 || wrap, has_after = stage < pp - 1 || wrap;
    int order[2] = {before, after}, have[2] = {has_before, has_after};
    if (before > after) order[0] = after, order[1] = before, have[0] = has_after, have[1] = has_before;
    for (int i = 0; i < 2; i++) {
        if (!have[i]) continue;
        const int side = order[i] == before ? 0 : 1; /* pp >= 2: the two boundaries differ */
        b->p2p_mpi[side] = boundary_comm(pp_comm, pp, order[i]);
        mp_nccl_comm_create(b->p2p_mpi[side], &b->p2p_own[2 * side]);     /* activations */
        mp_nccl_comm_create(b->p2p_mpi[side], &b->p2p_own[2 * side + 1]); /* gradients */
    }
    /* before: this stage is rank 1 (receives activations, sends gradients); after: rank 0 */
    b->p2p_comm[BE_P2P_ACT_IN] = b->p2p_own[0], b->p2p_peer[BE_P2P_ACT_IN] = 0;
    b->p2p_comm[BE_P2P_GRAD_OUT] = b->p2p_own[1], b->p2p_peer[BE_P2P_GRAD_OUT] = 0;
    b->p2p_comm[BE_P2P_ACT_OUT] = b->p2p_own[2], b->p2p_peer[BE_P2P_ACT_OUT] = 1;
    b->p2p_comm[BE_P2P_GRAD_IN] = b->p2p_own[3], b->p2p_peer[BE_P2P_GRAD_IN] = 1;
}

void be_cuda_p2p_comms(backend_t *be, MPI_Comm pp_comm, int pp, int stage, int wrap)
{
    bcu_t *b = be->state;
    if (b->p2p_made) return;
    p2p_comms_create(b, pp_comm, pp, stage, wrap);
    b->p2p_made = 1, b->p2p_wrap = wrap;
}

void be_cuda_p2p_setup(backend_t *be, MPI_Comm pp_comm, int pp, int stage, int wrap, int slots)
{
    bcu_t *b = be->state;
    if (b->p2p_made && b->p2p_wrap != wrap)
        MP_ABORT("pipeline point-to-point: the communicators were made for wrap=%d, the executor asks for %d (a bug)",
                 b->p2p_wrap, wrap);
    be_cuda_p2p_comms(be, pp_comm, pp, stage, wrap);
    b->p2p_slots = slots;
    for (int d = 0; d < BE_P2P_DIRS; d++) {
        CUDA_CHECK(cudaStreamCreateWithFlags(&b->p2p_stream[d], cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&b->p2p_last[d], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(b->p2p_last[d], b->p2p_stream[d]));
        b->p2p_recv_ev[d] = NULL;
        if (d != BE_P2P_ACT_IN && d != BE_P2P_GRAD_IN) continue;
        if (!(b->p2p_recv_ev[d] = MP_CALLOC((size_t)slots, sizeof(cudaEvent_t))))
            MP_ABORT("out of memory for pipeline receive events");
        for (int i = 0; i < slots; i++)
            CUDA_CHECK(cudaEventCreateWithFlags(&b->p2p_recv_ev[d][i], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&b->compute_now, cudaEventDisableTiming));
    b->p2p_on = 1;
}

void bcu_p2p_destroy(bcu_t *b)
{
    if (b->p2p_on) {
        for (int d = 0; d < BE_P2P_DIRS; d++) {
            CUDA_CHECK(cudaStreamSynchronize(b->p2p_stream[d]));
            for (int i = 0; b->p2p_recv_ev[d] && i < b->p2p_slots; i++)
                CUDA_CHECK(cudaEventDestroy(b->p2p_recv_ev[d][i]));
            free(b->p2p_recv_ev[d]);
            CUDA_CHECK(cudaEventDestroy(b->p2p_last[d]));
            CUDA_CHECK(cudaStreamDestroy(b->p2p_stream[d]));
        }
        CUDA_CHECK(cudaEventDestroy(b->compute_now));
    }
    /* the communicators: made by p2p_comms even where p2p_setup never ran */
    for (int i = 0; i < 4; i++)
        if (b->p2p_own[i]) mp_nccl_comm_destroy(b->p2p_own[i]), b->p2p_own[i] = NULL;
    for (int i = 0; i < 2; i++)
        if ((b->p2p_on || b->p2p_made) && b->p2p_mpi[i] != MPI_COMM_NULL) MPI_Comm_free(&b->p2p_mpi[i]);
    b->p2p_on = b->p2p_made = 0;
}

/* dir's stream waits for the compute work enqueued so far. */
static cudaStream_t p2p_after_compute(bcu_t *b, int dir)
{
    if (!b->p2p_on || !b->p2p_comm[dir]) MP_ABORT("pipeline point-to-point in direction %d was not set up", dir);
    CUDA_CHECK(cudaEventRecord(b->compute_now, b->ctx.compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->p2p_stream[dir], b->compute_now, 0));
    return b->p2p_stream[dir];
}

void be_cuda_p2p_send(backend_t *be, int dir, const float *buf, size_t n)
{
    bcu_t *b = be->state;
    cudaStream_t s = p2p_after_compute(b, dir);
    mp_nccl_send_f32(buf, n, b->p2p_peer[dir], b->p2p_comm[dir], s);
    CUDA_CHECK(cudaEventRecord(b->p2p_last[dir], s));
}

void be_cuda_p2p_recv(backend_t *be, int dir, float *buf, size_t n, int slot)
{
    bcu_t *b = be->state;
    if (slot < 0 || slot >= b->p2p_slots) MP_ABORT("pipeline receive slot %d out of range", slot);
    cudaStream_t s = p2p_after_compute(b, dir);
    mp_nccl_recv_f32(buf, n, b->p2p_peer[dir], b->p2p_comm[dir], s);
    CUDA_CHECK(cudaEventRecord(b->p2p_recv_ev[dir][slot], s));
    CUDA_CHECK(cudaEventRecord(b->p2p_last[dir], s));
}

void be_cuda_p2p_wait(backend_t *be, int dir, int slot)
{
    bcu_t *b = be->state;
    CUDA_CHECK(cudaStreamWaitEvent(b->ctx.compute, b->p2p_recv_ev[dir][slot], 0));
}

void be_cuda_p2p_fence(backend_t *be, int dir)
{
    bcu_t *b = be->state;
    if (b->p2p_comm[dir]) CUDA_CHECK(cudaStreamWaitEvent(b->ctx.compute, b->p2p_last[dir], 0));
}
