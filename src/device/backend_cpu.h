/* The cpu backend's operations by name (backend.h's lists), for its table, for emu, which runs
 * them on its region (backend_emu.c), and for the host-staged collectives (backend_staged.c).
 * Defined in backend_cpu.c (memory, host side, point-to-point) and backend_cpu_coll.c
 * (collectives, buckets). */
#ifndef MP_BACKEND_CPU_H
#define MP_BACKEND_CPU_H

#include "backend.h"

#define BE_CPU_DECL(ret, name, params, args) ret be_cpu_##name params;
BE_OPS(BE_CPU_DECL, BE_CPU_DECL)
#undef BE_CPU_DECL

/* bucket_start's MPI part: buf (n, host memory) summed over comm in place, non-blocking, into
 * be->bucket_req[i] (an index be_bucket_claim gave); buckets_progress and buckets_wait finish it. */
void be_cpu_bucket_post(backend_t *be, int i, float *buf, size_t n, MPI_Comm comm);
/* bucket_rs_start's MPI call on host buffers into bucket request i (the staged buckets post theirs so). */
void be_cpu_bucket_rs_post(backend_t *be, int i, const float *send, float *recv, const int *counts, MPI_Comm comm);
/* Both post the bucket as bf16 when be->bucket_bf16: rounded into bucket i's host wire, summed there
 * with a bf16 MPI operation, widened into buf (recv) when buckets_wait has it. */
/* The host wires and the bf16 sum operation freed (be_destroy; MPI still up). */
void be_cpu_wire_free(backend_t *be);

#endif
