/* The emu backend: the cpu backend on a separate "device" region that host code cannot read. The
 * region is mapped PROT_NONE and opened (PROT_READ | PROT_WRITE) only for the duration of an
 * operation that touches it: every kernel, memory operation and blocking collective is cpu's with
 * the region open around it, generated from the lists of be_kernels.h and backend.h. Buckets are
 * summed at once; the host side and point-to-point are cpu's as they are. */
#include "config.h"

#include "backend_cpu.h"

#include <sys/mman.h>

#include "check.h"
#include "kernels.h"

/* The region's default size: address space only (MAP_NORESERVE), pages appear as they are touched. */
#define EMU_DEFAULT_CAPACITY ((size_t)8 << 30)

static int emu_init(backend_t *be, size_t capacity, int device, int precision)
{
    /* with a limit, the arena's accounting refuses first (the slack covers the 256-byte rounding) */
    size_t cap = capacity ? capacity + ((size_t)1 << 20) : EMU_DEFAULT_CAPACITY;
    cap = (cap + 4095) / 4096 * 4096;
    void *p = mmap(NULL, cap, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return MP_FAIL("train.device=emu: cannot reserve %zu bytes of address space", cap);
    be->base = p;
    be->capacity = cap;
    return MP_OK;
}

static void emu_destroy(backend_t *be)
{
    if (be->base) munmap(be->base, be->capacity);
}

static void emu_protect(backend_t *be, int prot)
{
    if (mprotect(be->base, be->capacity, prot) != 0) MP_ABORT("mprotect of the emulated device region failed");
}

/* The region readable for the duration of an operation; nested operations keep it open. */
static void emu_open(backend_t *be)
{
    if (be->open++ == 0) emu_protect(be, PROT_READ | PROT_WRITE);
}

static void emu_close(backend_t *be)
{
    if (--be->open == 0) emu_protect(be, PROT_NONE);
}

/* ---- the kernels, and cpu's memory operations and collectives, with the region open ---- */

#define EMU_KERNEL(ret, name, params, args)              \
    static ret emu_##name(backend_t *be, BE_ARGS params) \
    {                                                    \
        emu_open(be);                                    \
        name args;                                       \
        emu_close(be);                                   \
    }
#define EMU_KERNEL_R(ret, name, params, args)            \
    static ret emu_##name(backend_t *be, BE_ARGS params) \
    {                                                    \
        emu_open(be);                                    \
        ret result_ = name args;                         \
        emu_close(be);                                   \
        return result_;                                  \
    }
BE_KERNELS(EMU_KERNEL, EMU_KERNEL_R)

#define EMU_OP(ret, name, params, args) \
    static ret emu_##name params        \
    {                                   \
        emu_open(be);                   \
        be_cpu_##name args;             \
        emu_close(be);                  \
    }
#define EMU_OP_R(ret, name, params, args) \
    static ret emu_##name params          \
    {                                     \
        emu_open(be);                     \
        ret result_ = be_cpu_##name args; \
        emu_close(be);                    \
        return result_;                   \
    }
BE_MEMORY_OPS(EMU_OP, EMU_OP_R)
BE_COLL_OPS(EMU_OP, EMU_OP_R)

/* ---- buckets: MPI progresses a started one inside later calls, where the region is closed, so each
 * is summed when it starts and there is nothing to progress or wait for ---- */

static void emu_bucket_start(backend_t *be, float *buf, size_t n, MPI_Comm comm)
{
    emu_allreduce(be, buf, n, MPI_SUM, comm, "a data-parallel gradient bucket");
}

static void emu_buckets_progress(backend_t *be) {}

static void emu_buckets_wait(backend_t *be, const char *what) {}

/* ---- the table ---- */

#define EMU_ENTRY(ret, name, params, args) .name = emu_##name,
#define EMU_CPU_ENTRY(ret, name, params, args) .name = be_cpu_##name,
const be_ops_t be_ops_emu = {
    .device = "emu",
    .init = emu_init,
    .destroy = emu_destroy,
    BE_MEMORY_OPS(EMU_ENTRY, EMU_ENTRY)
    BE_HOST_OPS(EMU_CPU_ENTRY, EMU_CPU_ENTRY)
    BE_COLL_OPS(EMU_ENTRY, EMU_ENTRY)
    .bucket_start = emu_bucket_start,
    .buckets_progress = emu_buckets_progress,
    .buckets_wait = emu_buckets_wait,
    BE_P2P_OPS(EMU_CPU_ENTRY, EMU_CPU_ENTRY)
    BE_KERNELS(EMU_ENTRY, EMU_ENTRY)
};
