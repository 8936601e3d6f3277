/* The cuda backend's state and its operations by name (backend.h's lists; CUDA builds only), for
 * its table. Defined in backend_cuda.c (set-up, memory, host side, kernels, the table),
 * backend_cuda_coll.c (collectives and buckets on the NCCL twins, or host-staged where ranks share
 * a GPU) and backend_cuda_p2p.c (pipeline point-to-point).
 *
 * Every kernel, copy and tensor-parallel collective is enqueued on the compute stream, so their
 * order is program order without host synchronisation. Data-parallel buckets run on the collective
 * stream: each starts after an event recorded on the compute stream (its gradients are final there)
 * and the compute stream waits on the collective stream's event before the optimizer reads them.
 * The host blocks only where a value comes back (be_to_host, be_sumsq_each). */
#ifndef MP_BACKEND_CUDA_H
#define MP_BACKEND_CUDA_H

#include <nccl.h>

#include "backend.h"
#include "gpu_share.h"
#include "kernels_cuda.h"

enum { BCU_MAX_COMMS = 16, BCU_OFFLOAD_EVENTS = 256, BCU_TIME_PAIRS = 4096 };
/* The kernels' scratch at least (be_cuda_scratch_plan raises it to the run's bound). */
#define BCU_SCRATCH_MIN ((size_t)64 << 20)

/* be->state */
typedef struct {
    cu_ctx_t ctx;
    cu_arena_t arena;         /* the region (region_open, after the communicators) */
    size_t limit;             /* memory.device_limit: the region's cap (0: free memory less a margin) */
    size_t free_at_init;      /* free device memory once the context and scratch were made */
    size_t comms_bytes;       /* what the NCCL communicators took between init and region_open */
    gpu_id_t gpu;             /* this rank's GPU, as comm_add compares it with its peers' */
    /* the MPI communicators comm_add was given and their NCCL twins (NULL: two of its ranks share a
     * GPU, and its collectives are host-staged) */
    MPI_Comm mpi[BCU_MAX_COMMS];
    ncclComm_t nccl[BCU_MAX_COMMS];
    int single[BCU_MAX_COMMS]; /* one rank: no twin, collectives are the identity */
    int ncomms;
    cudaEvent_t grads_final;  /* compute stream: the bucket's gradients are written */
    cudaEvent_t buckets_done; /* collective stream: every started bucket is summed */
    /* pipeline point-to-point (p2p_setup): per direction a stream, the boundary's 2-rank
     * communicators (and their MPI twins), the peer's rank in it, receive events per slot, the
     * event after the newest call */
    int p2p_on, p2p_slots;
    int p2p_made, p2p_wrap;   /* the boundaries' communicators exist (p2p_comms), made with wrap */
    cudaStream_t p2p_stream[BE_P2P_DIRS];
    ncclComm_t p2p_comm[BE_P2P_DIRS];
    MPI_Comm p2p_mpi[2];      /* the boundaries before and after this stage */
    ncclComm_t p2p_own[4];    /* created here: [before act, before grad, after act, after grad] */
    int p2p_peer[BE_P2P_DIRS];
    cudaEvent_t *p2p_recv_ev[BE_P2P_DIRS];
    cudaEvent_t p2p_last[BE_P2P_DIRS];
    cudaEvent_t compute_now;
    /* stash offload (backend_cuda_offload.c): copies on ctx.offload after an event of the compute
     * stream; copy t records off_done[t % BCU_OFFLOAD_EVENTS] (a wait on a ticket whose event was
     * recorded again waits for a later copy: later, never wrong) */
    int off_on;
    long off_issued;
    cudaEvent_t off_after, off_done[BCU_OFFLOAD_EVENTS];
    /* kernel times (debug.kernel_times, backend_cuda_time.c): a pool of BCU_TIME_PAIRS (start, end)
     * event pairs recorded on the compute stream around timed kernels, made at the first timed call;
     * pair i timed kernel time_kernel[i]; time_n pairs await harvesting */
    cudaEvent_t *time_ev;
    int *time_kernel;
    int time_n;
} bcu_t;

#define BE_CUDA_DECL(ret, name, params, args) ret be_cuda_##name params;
BE_OPS(BE_CUDA_DECL, BE_CUDA_DECL)
#undef BE_CUDA_DECL

/* Waits until stream s has run everything enqueued on it, as every MPI wait is waited (wait.h:
 * yielding, parallel.timeout): meanwhile every NCCL communicator is asked for an asynchronous error.
 * An error or the deadline aborts the NCCL communicators (ncclCommAbort) and the job, naming this
 * rank, `what` and the communicator. */
void bcu_wait(backend_t *be, cudaStream_t s, const char *what);
/* Destroys what be_cuda_p2p_setup created (nothing when it was not called); waits for its streams. */
void bcu_p2p_destroy(bcu_t *b);
/* Waits for the offload stream and destroys its events (nothing when no copy was started). */
void bcu_offload_destroy(bcu_t *b);
/* Destroys the NCCL twins (collective over each). */
void bcu_comms_destroy(bcu_t *b);

/* Kernel timing hooks of the table (be_ops_t's time_begin, time_end, time_flush): CUDA events on
 * the compute stream, harvested when the pool fills and at flush; the host waits only then. */
void bcu_time_begin(backend_t *be, int kernel);
void bcu_time_end(backend_t *be, int kernel);
void bcu_time_flush(backend_t *be);
/* Destroys the pool (nothing when timing never ran); its events must be complete (after a sync). */
void bcu_time_destroy(bcu_t *b);

#endif
