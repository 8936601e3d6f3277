/* The compute backend the model runs on (train.device, ARCHITECTURE.md §8): where its buffers live, which
 * kernels run on them, and how collectives and host copies reach them. The trainer calls be_* for
 * everything that touches model memory, so one code path drives all three. Each backend is one
 * table of operations (be_ops_t), filled by its own files; be_<op> calls the entry of the table
 * be_init chose and never knows which backend it runs:
 *
 *   cpu   (backend_cpu.c, backend_cpu_coll.c) the kernels of kernels.h on host memory. Copies
 *         between "host" and "device" are plain copies (none when both are the same buffer),
 *         collectives are MPI through wait.h.
 *   emu   (backend_emu.c) the cpu backend on a separate "device" region that host code cannot read:
 *         the region is mapped PROT_NONE except inside a be_* call, so a host access the CUDA path
 *         would make to device memory is a segmentation fault here, and every crossing of the
 *         boundary is an explicit be_to_host / be_to_device. Its collectives are the host-staged
 *         ones (backend_staged.c) that cuda runs where ranks share a GPU. This is how the CUDA
 *         path's data movement is tested on machines with no GPU; its results are bitwise those of
 *         cpu.
 *   cuda  (backend_cuda.c, backend_cuda_coll.c, backend_cuda_p2p.c; CUDA builds) the cu_* kernels
 *         on one cudaMalloc'd region, work enqueued on the compute stream; collectives through NCCL
 *         communicators twinned with the grid's MPI ones, or host-staged (backend_staged.c) on a
 *         communicator two of whose ranks share a GPU, which NCCL refuses (gpu_share.h); data
 *         parallel buckets on the collective stream, ordered by events. Run on one GPU
 *         (docs/GPU.md), never NCCL between GPUs.
 *
 * Pointers called "device" below are into the backend's region (cpu: ordinary host memory). Host
 * pointers are ordinary memory; be_host_alloc gives pinned memory on cuda. Collective failures and
 * device errors are fatal (MPI_Abort through check.h): they happen inside collective phases. */
#ifndef MP_BACKEND_H
#define MP_BACKEND_H

#include <mpi.h>
#include <stddef.h>

#include "arena.h"
#include "be_kernels.h"
#include "copier.h"
#include "ktime.h"
#include "wait.h"

typedef enum { BE_CPU = 0, BE_EMU = 1, BE_CUDA = 2 } be_kind_t;

typedef struct be_ops_s be_ops_t;

typedef struct backend_s {
    be_kind_t kind;
    const be_ops_t *ops;     /* the kind's table */
    const wait_cfg_t *wait;  /* every MPI wait of the cpu and emu collectives */
    /* the device region (emu, cuda): bump-allocated through the arena */
    char *base;
    size_t capacity;
    int open;                /* emu: nesting depth of be_* calls with the region readable */
    void *state;             /* cuda: the backend's CUDA state (backend_cuda.h) */
    MPI_Request *bucket_req; /* cpu: the started gradient buckets */
    MPI_Comm bucket_comm;    /* cpu: the communicator they go over (named at a timeout) */
    copier_t *copier;        /* cpu, emu: the copy engine (started by the first offload_start) */
    char *view;              /* emu: the copy engine's own always-readable mapping of the region */
    void **fence_at;         /* emu: the device ranges offload_fence keeps unreadable */
    size_t *fence_len;
    int nfences, max_fences;
    int nbuckets, max_buckets;
    int bucket_bf16;         /* parallel.grad_reduce_dtype = bf16: buckets travel as bf16 (be_buckets_reserve) */
    struct be_wire_s *wire;  /* cpu, host-staged: each bf16 bucket's host wire (backend_cpu_coll.c) */
    void *dev_wire;          /* cuda: the NCCL buckets' bf16 wire in the region (be_buckets_reserve) */
    size_t dev_wire_elems;
    ktime_t kt;              /* debug.kernel_times: the kernels' calls and seconds (ktime.h) */
    int att_fused;           /* emu: train.attention=fused, the CUDA bf16 path's fused attention emulated */
    struct be_staged_s *staged; /* emu, cuda: host buffers of the host-staged collectives (backend_staged.h) */
} backend_t;

/* Sets up the backend and binds `arena` to it: the arena's allocations then come from the device
 * region (emu, cuda) and are zeroed through the backend. capacity: bytes of the region (emu:
 * reserved address space; cuda: free device memory minus a margin, capped at capacity when > 0).
 * device: the CUDA ordinal (cuda only). precision: 0 fp32, 1 bf16 (products, cuda only).
 * MP_OK or MP_ERR (message printed; nothing left allocated). Not collective. */
int be_init(backend_t *be, be_kind_t kind, arena_t *arena, size_t capacity, int device, int precision,
            const wait_cfg_t *wait);
void be_destroy(backend_t *be);
/* Whether model buffers are host memory (cpu): host code may read them in place. */
static inline int be_host_visible(const backend_t *be) { return be->kind == BE_CPU; }
/* Which attention runs at a shape, the one place that says it (the model's kernels, its carving and
 * every memory plan ask here): 1 the fused kernels (be_attention_flash_*: att and datt hold what
 * kernels/attention_fused_layout.h says, no (T,T) probabilities), 0 the probabilities' path
 * (be_attention_forward / _gqa_: (B,NH,T,T) each). cpu: 0. emu: 1 with be->att_fused where the
 * shape fits the fused kernels. cuda: 1 where cu_attention_flash_fits (bf16, a head size its
 * kernels were set up for, the shape). Grouped-query attention (KVH < NH): 0 everywhere. be NULL:
 * 0. */
int be_attention_fused(const backend_t *be, int B, int T, int C, int NH, int KVH);
/* Whether the kernels run on the CPU (cpu, emu) and so read host buffers beside device ones: a
 * recomputation may hand them host memory (model_head_grad). */
static inline int be_kernels_read_host(const backend_t *be) { return be->kind != BE_CUDA; }

/* ---- the operations besides the kernels (those: be_kernels.h) ----
 * One entry each, X(return type, name, (parameters), (arguments)) as in be_kernels.h but with the
 * backend first, always named be: each makes be_<name> with those parameters and its table entry.
 * The lists are grouped by what the emu backend does with them: it runs cpu's memory operations
 * and kernels with its region open, the host-staged collectives and buckets (backend_staged.h), and
 * cpu's host operations and point-to-point as they are. */

/* Device memory:
 *   zero       dev (bytes) = 0
 *   copy       dev_dst (bytes) = dev_src
 *   to_device  dev_dst (bytes) = host_src
 *   to_host    host_dst (bytes) = dev_src, after the work before it: in host memory on return */
#define BE_MEMORY_OPS(X, XR)                                                                                        \
    X(void, zero, (backend_t *be, void *dev, size_t bytes), (be, dev, bytes))                                       \
    X(void, copy, (backend_t *be, void *dev_dst, const void *dev_src, size_t bytes), (be, dev_dst, dev_src, bytes)) \
    X(void, to_device, (backend_t *be, void *dev_dst, const void *host_src, size_t bytes),                          \
      (be, dev_dst, host_src, bytes))                                                                               \
    X(void, to_host, (backend_t *be, void *host_dst, const void *dev_src, size_t bytes),                            \
      (be, host_dst, dev_src, bytes))

/* The host side:
 *   host_alloc  host memory for copies that cross to the device often (pinned on cuda), zeroed;
 *               NULL when out of memory
 *   host_free   gives it back
 *   sync        waits until all work enqueued so far is done (cuda: the compute and collective
 *               streams)
 *   comm_add    cuda: gathers which GPU each rank of comm uses; when every rank has its own,
 *               creates comm's NCCL twin (rank 0 draws the id) and later collectives on comm go
 *               through it; when two share one (NCCL refuses that), comm gets no twin and its
 *               collectives are host-staged (backend_staged.h). Collective over comm. cpu and emu:
 *               nothing. Once per communicator, after be_init; MPI_COMM_NULL is ignored.
 *   scratch_plan   cuda: the kernels' device scratch sized now for the run's largest calls (shape),
 *                  before any communicator exists; fatal when it does not fit. cpu, emu: nothing
 *   scratch_freeze cuda: from now on (after step 0) growing that scratch is fatal, naming the
 *                  kernel: growing frees memory, and cudaFree waits for the whole device, other
 *                  ranks' NCCL calls included. cpu, emu: nothing
 *   p2p_comms      cuda with parallel.p2p = nccl: the pipeline boundaries' NCCL communicators of
 *                  p2p_setup (below) made now, before the region; p2p_setup then takes them (its
 *                  pp, stage and wrap must be these). Collective over pp_comm. cpu, emu: nothing */
typedef struct {
    int B, T, C, V, F, NH; /* sequences per call, tokens, width, vocabulary, widest MLP, heads */
} be_shape_t;
#define BE_HOST_OPS(X, XR)                                                                  \
    XR(void *, host_alloc, (backend_t *be, size_t bytes), (be, bytes))                      \
    X(void, host_free, (backend_t *be, void *p), (be, p))                                   \
    X(void, sync, (backend_t *be), (be))                                                    \
    X(void, comm_add, (backend_t *be, MPI_Comm comm), (be, comm))                           \
    X(void, scratch_plan, (backend_t *be, const be_shape_t *shape), (be, shape))            \
    X(void, scratch_freeze, (backend_t *be), (be))                                          \
    X(void, p2p_comms, (backend_t *be, MPI_Comm pp_comm, int pp, int stage, int wrap),      \
      (be, pp_comm, pp, stage, wrap))

/* Collectives on device buffers, ordered after the work before them and before the work after them
 * (cuda: on the compute stream); `what` names the call in a timeout:
 *   allreduce       buf (n) in place, op MPI_SUM or MPI_MAX over comm
 *   reduce_scatter  ZeRO-1: recv (count) = this rank's slice of Σ send (ranks·count)
 *   allgather       buf (ranks·count) in place = every rank's slice [r·count, (r+1)·count) of it,
 *                   gathered */
#define BE_COLL_OPS(X, XR)                                                                                \
    X(void, allreduce, (backend_t *be, float *buf, size_t n, MPI_Op op, MPI_Comm comm, const char *what), \
      (be, buf, n, op, comm, what))                                                                       \
    X(void, reduce_scatter,                                                                               \
      (backend_t *be, const float *send, float *recv, size_t count, MPI_Comm comm, const char *what),     \
      (be, send, recv, count, comm, what))                                                                \
    X(void, allgather, (backend_t *be, float *buf, size_t count, MPI_Comm comm, const char *what),        \
      (be, buf, count, comm, what))

/* Data-parallel gradient buckets:
 *   bucket_start      a bucket's sum over comm, started now and overlapping the work after it until
 *                     buckets_wait (cpu: MPI_Iallreduce; cuda: NCCL on the collective stream after
 *                     an event of the compute stream; emu, and cuda without an NCCL twin: copied to
 *                     a host buffer, then MPI_Iallreduce on it, copied back at buckets_wait). At
 *                     most be_buckets_reserve's max between waits.
 *   bucket_rs_start   ZeRO-1's bucket: recv (counts[rank]) = this rank's piece of the sum over comm of
 *                     send (Σ counts floats, rank r's piece counts[r] floats after ranks < r's), started
 *                     and finished like bucket_start (cpu: MPI_Ireduce_scatter; cuda: one NCCL reduce
 *                     per rank with a piece, grouped, on the collective stream; emu and cuda without
 *                     a twin: staged). counts must stay as they are until buckets_wait.
 *   buckets_progress  lets MPI progress the started buckets (cpu, host-staged); nothing for NCCL's
 *   buckets_wait      every started bucket is summed before the work after this call (cuda: the
 *                     compute stream waits on the collective stream's event; the host does not
 *                     block) */
#define BE_BUCKET_OPS(X, XR)                                                                        \
    X(void, bucket_start, (backend_t *be, float *buf, size_t n, MPI_Comm comm), (be, buf, n, comm)) \
    X(void, bucket_rs_start, (backend_t *be, const float *send, float *recv, const int *counts, MPI_Comm comm), \
      (be, send, recv, counts, comm))                                                                \
    X(void, buckets_progress, (backend_t *be), (be))                                                \
    X(void, buckets_wait, (backend_t *be, const char *what), (be, what))

/* Pipeline point-to-point on the device (cuda, parallel.p2p = nccl; elsewhere fatal, and run.c
 * refuses the setting; the schedule translation and why it cannot deadlock: sim_nccl.h). Each
 * pipeline boundary (stage b → b+1 mod pp) has a 2-rank NCCL communicator for activations and one
 * for gradients; this stage drives its four with one stream each. A receive lands in `slot`'s
 * event; the compute stream waits on it at be_p2p_wait, where the data is first read.
 *   p2p_setup  collective over pp_comm (ascending boundaries, so every rank creates them in one
 *              global order). wrap: the last stage sends to the first (interleaved). slots:
 *              receive events per direction.
 *   p2p_send   after the compute work enqueued so far: send n floats at buf
 *   p2p_recv   after the compute work enqueued so far: receive n floats into buf
 *   p2p_wait   the compute stream waits for slot's receive (dir ACT_IN or GRAD_IN)
 *   p2p_fence  the compute stream waits for everything enqueued so far on dir's stream */
enum { BE_P2P_ACT_IN, BE_P2P_ACT_OUT, BE_P2P_GRAD_IN, BE_P2P_GRAD_OUT, BE_P2P_DIRS };
#define BE_P2P_OPS(X, XR)                                                                                \
    X(void, p2p_setup, (backend_t *be, MPI_Comm pp_comm, int pp, int stage, int wrap, int slots),        \
      (be, pp_comm, pp, stage, wrap, slots))                                                             \
    X(void, p2p_send, (backend_t *be, int dir, const float *buf, size_t n), (be, dir, buf, n))           \
    X(void, p2p_recv, (backend_t *be, int dir, float *buf, size_t n, int slot), (be, dir, buf, n, slot)) \
    X(void, p2p_wait, (backend_t *be, int dir, int slot), (be, dir, slot))                               \
    X(void, p2p_fence, (backend_t *be, int dir), (be, dir))

/* Stash offload (memory.policy = offload, ARCHITECTURE.md §6): copies between device and host
 * memory on a copy engine beside compute, run in the order they are started (cpu and emu: the copy
 * thread of copier.h; cuda: the offload stream).
 *   offload_start  after the work enqueued so far, dst (bytes) = src; to_host: src is device
 *                  memory and dst host memory (be_host_alloc's), else the reverse. Returns its
 *                  ticket (> 0). Both buffers must stay untouched until the copy is waited for.
 *   offload_wait   the work after this call sees the copy of ticket and every one before it done
 *                  (cpu, emu: the host blocks until the copy thread is there, and the seconds it
 *                  waited are added to *waited; cuda: the compute stream waits for the ticket's
 *                  event and the host does not block)
 *   offload_fence  emu: while on, the page-aligned device range [dev, dev + bytes) stays
 *                  unreadable even inside be_* calls, so a kernel that touches an offloaded stash
 *                  faults; cpu, cuda: nothing
 *   offload_link   ranks of a node share its host link: with link non-NULL the copy engine takes
 *                  link's lock of a copy's direction for the copy (copier.h); cuda: not yet
 *                  (the offload stream cannot take a host lock without a host callback) */
#define BE_OFFLOAD_OPS(X, XR)                                                                        \
    XR(long, offload_start, (backend_t *be, void *dst, const void *src, size_t bytes, int to_host),  \
       (be, dst, src, bytes, to_host))                                                               \
    X(void, offload_wait, (backend_t *be, long ticket, double *waited), (be, ticket, waited))        \
    X(void, offload_fence, (backend_t *be, void *dev, size_t bytes, int on), (be, dev, bytes, on))   \
    X(void, offload_link, (backend_t *be, const copier_link_t *link), (be, link))

#define BE_OPS(X, XR)                                                                          \
    BE_MEMORY_OPS(X, XR) BE_HOST_OPS(X, XR) BE_COLL_OPS(X, XR) BE_BUCKET_OPS(X, XR) BE_P2P_OPS(X, XR) \
    BE_OFFLOAD_OPS(X, XR)

/* be_<name> for every operation above and every kernel of be_kernels.h (backend.c). */
#define BE_OP_DECL(ret, name, params, args) ret be_##name params;
#define BE_KERNEL_DECL(ret, name, params, args) ret be_##name(backend_t *be, BE_ARGS params);
BE_OPS(BE_OP_DECL, BE_OP_DECL)
BE_KERNELS(BE_KERNEL_DECL, BE_KERNEL_DECL)
#undef BE_OP_DECL
#undef BE_KERNEL_DECL

/* ---- kernel times (debug.kernel_times, ktime.h) ----
 * Between step_begin and step_end every be_<kernel> call is timed into be->kt and the step's wall
 * time added to kt.wall_s. ktime_flush harvests what the device has not reported yet (cuda: waits for
 * the pending events); read be->kt after it. ktime_timer names the clock: "cuda events" or "host
 * clock". Not collective. */
void be_ktime_step_begin(backend_t *be);
void be_ktime_step_end(backend_t *be);
void be_ktime_flush(backend_t *be);
const char *be_ktime_timer(const backend_t *be);

/* This rank's GPU as its PCI bus id (domain:bus:device.function, cudaDeviceGetPCIBusId's spelling)
 * into buf (n bytes), for NVML (src/obs/energy.h): 1 on a backend with a GPU, 0 and "" elsewhere
 * (cpu, emu). A failing query is fatal, as every device error. */
int be_gpu_bus_id(backend_t *be, char *buf, size_t n);

/* The device region, where be_init left it for later (cuda), made now and bound to `arena`: after
 * every communicator (be_comm_add, be_p2p_comms) and the scratch (be_scratch_plan). cpu and emu:
 * nothing (be_init made theirs). MP_OK or MP_ERR (message printed). Not collective. */
int be_region_open(backend_t *be, arena_t *arena);

/* Reserves room for `max` gradient buckets between waits; bf16: they travel as bf16
 * (parallel.grad_reduce_dtype: each rank's floats rounded to bf16, summed with every partial sum
 * rounded, widened back where the sum lands). MP_OK or MP_ERR (out of memory). */
int be_buckets_reserve(backend_t *be, int max, int bf16);
/* Floats of device memory bf16 buckets of at most `piece` floats need from the arena: the cuda
 * backend's NCCL buckets round into one wire, as they run one after another on the collective stream
 * (a ZeRO-1 bucket and its piece: 2·piece bf16, piece floats); 0 without bf16 buckets and on cpu and
 * emu, whose MPI buckets keep a host wire each (backend_cpu_coll.c). be_bucket_wire hands it over. */
size_t be_bucket_wire_floats(const backend_t *be, size_t piece);
void be_bucket_wire(backend_t *be, float *wire, size_t floats);

/* ---- the tables ---- */

/* One backend: an entry for every operation and every kernel (be_init refuses a table with a
 * missing one), and its set-up. */
struct be_ops_s {
    const char *device; /* its train.device name */
    /* Sets up the region (be->base, be->capacity) and be->state from be_init's arguments. MP_OK or
     * MP_ERR (message printed; nothing left allocated). NULL: nothing to set up. */
    int (*init)(backend_t *be, size_t capacity, int device, int precision);
    /* Makes the region (be->base, be->capacity) when init left it for later (cuda: after the NCCL
     * communicators, which take device memory of their own, so the region's measure of the free
     * memory counts them). MP_OK or MP_ERR (message printed). NULL: init made it. */
    int (*region_open)(backend_t *be);
    /* Undoes init; NULL: nothing to undo. */
    void (*destroy)(backend_t *be);
    /* Kernel timing hooks around each timed be_<kernel> call, with the kernel's BE_K_ index: begin
     * before it, end after it; flush adds what end left pending into be->kt. NULL (all three): the
     * host clock around the call, which is the kernel's time where calls are synchronous. timer names
     * the clock for kernel_times.json (NULL: "host clock"). */
    void (*time_begin)(backend_t *be, int kernel);
    void (*time_end)(backend_t *be, int kernel);
    void (*time_flush)(backend_t *be);
    const char *timer;
    /* be_attention_fused for multi-head attention; NULL: never (the probabilities' path). */
    int (*attention_fused)(const backend_t *be, int B, int T, int C, int NH);
    /* be_gpu_bus_id; NULL: no GPU. */
    int (*gpu_bus_id)(backend_t *be, char *buf, size_t n);
#define BE_OP_FIELD(ret, name, params, args) ret (*name) params;
#define BE_KERNEL_FIELD(ret, name, params, args) ret (*name)(backend_t *be, BE_ARGS params);
    BE_OPS(BE_OP_FIELD, BE_OP_FIELD)
    BE_KERNELS(BE_KERNEL_FIELD, BE_KERNEL_FIELD)
#undef BE_OP_FIELD
#undef BE_KERNEL_FIELD
};

extern const be_ops_t be_ops_cpu;  /* backend_cpu.c */
extern const be_ops_t be_ops_emu;  /* backend_emu.c */
extern const be_ops_t be_ops_cuda; /* backend_cuda.c, CUDA builds only */

/* For the backends' bucket_start (cpu, cuda): counts a started bucket and returns its index; fatal
 * beyond be_buckets_reserve's max. */
int be_bucket_claim(backend_t *be);

#endif
