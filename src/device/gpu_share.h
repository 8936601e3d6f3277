/* Which ranks use the same GPU (train.device = cuda; ARCHITECTURE.md §8, docs/GPU.md).
 *
 * Ranks take GPU node rank mod the node's GPUs, so a node that runs more ranks than it has GPUs puts
 * two ranks on one GPU (two MPI ranks on a one-GPU machine, to test pp = 2). NCCL refuses a
 * communicator in which two ranks use one GPU: ncclCommInitRank returns ncclInvalidUsage ("Duplicate
 * GPU detected"). So the cuda backend gives such a communicator no NCCL twin (its collectives go
 * through host memory and MPI: backend_staged.h), and parallel.p2p = auto does not pick NCCL for a
 * pipeline whose neighbouring stages share a GPU.
 *
 * A GPU is named as NCCL tells them apart: the host (its name and its boot id, which NCCL hashes
 * together) and the device's PCI bus id. The decisions are pure functions of the gathered names, so
 * every rank that gathers the same names decides alike, and the tests check them on the CPU. */
#ifndef MP_GPU_SHARE_H
#define MP_GPU_SHARE_H

#include <mpi.h>

#include "wait.h"

enum { GPU_HOST_LEN = 80, GPU_BOOT_LEN = 40, GPU_BUS_LEN = 32 };

/* One rank's GPU; every field a NUL-terminated string (gathered as bytes). */
typedef struct {
    char host[GPU_HOST_LEN]; /* gethostname */
    char boot[GPU_BOOT_LEN]; /* /proc/sys/kernel/random/boot_id ("" where unreadable) */
    char bus[GPU_BUS_LEN];   /* cudaDeviceGetPCIBusId, "0000:41:00.0" */
} gpu_id_t;

/* The GPU of CUDA device `ordinal` on this host. MP_OK, or MP_ERR in a build without CUDA (message
 * printed). A CUDA error is fatal (CUDA_CHECK). Not collective. */
int gpu_share_id(int ordinal, gpu_id_t *id_p);

/* Whether the NCCL this process loaded is MindPipe's stand-in (validation/nccl_standin/, put in
 * libnccl's place with LD_LIBRARY_PATH), which takes ranks that share a GPU: then every communicator
 * gets its NCCL twin and parallel.p2p may be nccl whatever the GPUs, so one GPU runs the NCCL paths
 * of several ranks. It carries NCCL over MPI from a thread of its own, so MPI must be initialised
 * with MPI_THREAD_MULTIPLE (main.c asks for it then). 0 in a build without CUDA. */
int gpu_share_nccl_standin(void);

/* Every rank's id, in comm's rank order: an all-gather through wait.h. Collective over comm; the
 * caller frees the array. Out of memory is fatal (the peers are in the gather). */
gpu_id_t *gpu_share_gather(const gpu_id_t *mine, MPI_Comm comm, const wait_cfg_t *wait);

/* Whether a and b name the same GPU: same host (name and boot id) and same bus id. */
int gpu_share_same(const gpu_id_t *a, const gpu_id_t *b);

/* Whether two of the n ids name one GPU: 1 with the first such pair in (*a_p, *b_p) (the least a,
 * then the least b > a), 0 when every GPU is distinct (outputs untouched), MP_ERR when out of
 * memory (message printed). O(n log n): a world of thousands of ranks is checked at start. */
int gpu_share_find(const gpu_id_t *ids, int n, int *a_p, int *b_p);

/* The first pipeline boundary whose two ranks share a GPU: stage_rank[s] is the index into ids of
 * stage s (0 ≤ s < pp); boundary b joins stages b and b + 1, and with wrap (the interleaved
 * schedule) boundary pp − 1 joins the last stage to the first. Returns b, or -1 when none does. */
int gpu_share_boundary(const gpu_id_t *ids, const int *stage_rank, int pp, int wrap);

#endif
