/* Collectives and data-parallel buckets through host memory and MPI, for a backend whose device
 * memory MPI is not handed (backend.h's BE_COLL_OPS and BE_BUCKET_OPS, same contracts):
 *
 *   emu   every collective: MPI never touches the region, and each crossing of the boundary is a
 *         be_to_host / be_to_device, as on cuda;
 *   cuda  a communicator without an NCCL twin, because two of its ranks share a GPU and NCCL
 *         refuses such a communicator (gpu_share.h).
 *
 * Written once, on the backend's own operations: a call copies its device operand to a host buffer
 * (be_host_alloc's, pinned on cuda) with be_to_host, which comes after the work enqueued before it
 * (cuda: the compute stream is waited for), runs the cpu backend's MPI collective on that buffer
 * (wait.h: the core is yielded, the wait bounded by parallel.timeout), and copies the result back
 * with be_to_device, before the work after it. The same MPI reduction on the same bytes as the cpu
 * backend's: results bitwise equal to cpu's.
 *
 * A bucket is copied to the host when it starts and its sum copied back at be_buckets_wait; MPI
 * progresses it in between (be_buckets_progress), while the region is closed (emu) or the compute
 * stream runs on (cuda). The host buffers are kept from call to call (a bucket's by its index among
 * the step's buckets, so the next step reuses them) and freed by be_destroy. */
#ifndef MP_BACKEND_STAGED_H
#define MP_BACKEND_STAGED_H

#include "backend.h"

#define BE_STAGED_DECL(ret, name, params, args) ret be_staged_##name params;
BE_COLL_OPS(BE_STAGED_DECL, BE_STAGED_DECL)
BE_BUCKET_OPS(BE_STAGED_DECL, BE_STAGED_DECL)
#undef BE_STAGED_DECL

/* Frees the host buffers (be_destroy: before the backend's own teardown, since they are its host
 * memory). Nothing when no staged call was made. */
void be_staged_free(backend_t *be);

#endif
