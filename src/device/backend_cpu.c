/* The cpu backend: the kernels of kernels.h on host memory. "Device" and host memory are one, so a
 * copy between them is a plain copy (none when both are the same buffer), pinned memory is ordinary
 * memory and nothing runs asynchronously. Its collectives and buckets: backend_cpu_coll.c. */
#include "config.h"

#include "backend_cpu.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels.h"

/* ---- kernels: each line of be_kernels.h calls its kernels.h function, whose type it must name ---- */

#define CPU_KERNEL_CHECK(ret, name, params) \
    _Static_assert(_Generic(&name, ret (*) params: 1, default: 0), #name ": be_kernels.h differs from kernels.h");
#define CPU_KERNEL(ret, name, params, args) \
    CPU_KERNEL_CHECK(ret, name, params)     \
    static ret cpu_##name(backend_t *be, BE_ARGS params) { name args; }
#define CPU_KERNEL_R(ret, name, params, args) \
    CPU_KERNEL_CHECK(ret, name, params)       \
    static ret cpu_##name(backend_t *be, BE_ARGS params) { return name args; }
BE_KERNELS(CPU_KERNEL, CPU_KERNEL_R)

/* ---- memory ---- */

void be_cpu_zero(backend_t *be, void *dev, size_t bytes) { memset(dev, 0, bytes); }

void be_cpu_copy(backend_t *be, void *dev_dst, const void *dev_src, size_t bytes)
{
    memmove(dev_dst, dev_src, bytes);
}

void be_cpu_to_device(backend_t *be, void *dev_dst, const void *host_src, size_t bytes)
{
    if (dev_dst != host_src) memcpy(dev_dst, host_src, bytes);
}

void be_cpu_to_host(backend_t *be, void *host_dst, const void *dev_src, size_t bytes)
{
    if (host_dst != dev_src) memcpy(host_dst, dev_src, bytes);
}

/* ---- the host side: nothing to pin, wait for or twin ---- */

void *be_cpu_host_alloc(backend_t *be, size_t bytes) { return mem_zalloc(bytes); }

void be_cpu_host_free(backend_t *be, void *p) { free(p); }

void be_cpu_sync(backend_t *be) {}

void be_cpu_comm_add(backend_t *be, MPI_Comm comm) {}

void be_cpu_scratch_plan(backend_t *be, const be_shape_t *shape) {}

void be_cpu_scratch_freeze(backend_t *be) {}

void be_cpu_p2p_comms(backend_t *be, MPI_Comm pp_comm, int pp, int stage, int wrap) {}

/* ---- offload: the copy thread (copier.h), started by the first copy ---- */

long be_cpu_offload_start(backend_t *be, void *dst, const void *src, size_t bytes, int to_host)
{
    if (!be->copier && !(be->copier = copier_create())) MP_ABORT("memory.policy=offload: no copy thread");
    return copier_start(be->copier, dst, src, bytes, to_host ? 0 : 1);
}

void be_cpu_offload_wait(backend_t *be, long ticket, double *waited)
{
    if (be->copier) copier_wait(be->copier, ticket, waited);
}

void be_cpu_offload_fence(backend_t *be, void *dev, size_t bytes, int on) {}

void be_cpu_offload_link(backend_t *be, const copier_link_t *link)
{
    if (!be->copier && !(be->copier = copier_create())) MP_ABORT("memory.policy=offload: no copy thread");
    copier_set_link(be->copier, link);
}

/* ---- no point-to-point on the device: run.c refuses parallel.p2p=nccl without train.device=cuda ---- */

static void cpu_no_p2p(void)
{
#ifdef MP_HAVE_CUDA
    MP_ABORT("NCCL point-to-point needs train.device=cuda");
#else
    MP_ABORT("NCCL point-to-point needs a CUDA build and train.device=cuda");
#endif
}

#define CPU_NO_P2P(ret, name, params, args) \
    ret be_cpu_##name params { cpu_no_p2p(); }
BE_P2P_OPS(CPU_NO_P2P, CPU_NO_P2P)

/* ---- the table ---- */

#define CPU_OP_ENTRY(ret, name, params, args) .name = be_cpu_##name,
#define CPU_KERNEL_ENTRY(ret, name, params, args) .name = cpu_##name,
const be_ops_t be_ops_cpu = {
    .device = "cpu",
    BE_OPS(CPU_OP_ENTRY, CPU_OP_ENTRY)
    BE_KERNELS(CPU_KERNEL_ENTRY, CPU_KERNEL_ENTRY)
};
