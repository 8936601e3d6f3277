/* The emu backend: the cpu backend on a separate "device" region that host code cannot read. The
 * region is mapped PROT_NONE and opened (PROT_READ | PROT_WRITE) only for the duration of an
 * operation that touches it: every kernel and memory operation is cpu's with the region open around
 * it, generated from the lists of be_kernels.h and backend.h. Collectives and buckets are the
 * host-staged ones (backend_staged.c), which cuda runs on a communicator whose ranks share a GPU:
 * MPI gets host copies made through this backend's own to_host / to_device, so that code is run,
 * and checked bitwise against cpu, on machines with no GPU. The host side and point-to-point are
 * cpu's as they are. */
#define _GNU_SOURCE /* memfd_create */
#include "config.h"

#include "backend_cpu.h"
#include "backend_staged.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attention_fused_layout.h"
#include "check.h"
#include "kernels.h"

/* The region's default size: address space only (MAP_NORESERVE), pages appear as they are touched. */
#define EMU_DEFAULT_CAPACITY ((size_t)8 << 30)

/* The region is a memory file mapped twice: the guarded view every be_* call opens and closes, and
 * the copy engine's view (be->view), always readable, through which the copy thread moves offloaded
 * stashes while the main thread runs with the guarded view closed, as a GPU's copy engine reads
 * device memory whatever the host does. */
static int emu_init(backend_t *be, size_t capacity, int device, int precision)
{
    /* with a limit, the arena's accounting refuses first (the slack covers the 256-byte rounding) */
    size_t cap = capacity ? capacity + ((size_t)1 << 20) : EMU_DEFAULT_CAPACITY;
    cap = (cap + 4095) / 4096 * 4096;
    int fd = memfd_create("mindpipe-emu-device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)cap) != 0) {
        if (fd >= 0) close(fd);
        return MP_FAIL("train.device=emu: cannot create a memory file of %zu bytes for the device region", cap);
    }
    void *p = mmap(NULL, cap, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    void *v = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd); /* the mappings keep the file */
    if (p == MAP_FAILED || v == MAP_FAILED) {
        if (p != MAP_FAILED) munmap(p, cap);
        if (v != MAP_FAILED) munmap(v, cap);
        return MP_FAIL("train.device=emu: cannot map %zu bytes of address space twice", cap);
    }
    be->base = p;
    be->view = v;
    be->capacity = cap;
    return MP_OK;
}

static void emu_destroy(backend_t *be)
{
    if (be->base) munmap(be->base, be->capacity);
    if (be->view) munmap(be->view, be->capacity);
    be->view = NULL;
}

static void emu_protect(backend_t *be, int prot)
{
    if (mprotect(be->base, be->capacity, prot) != 0) MP_ABORT("mprotect of the emulated device region failed");
}

/* The region readable for the duration of an operation, but for the fenced (offloaded) ranges;
 * nested operations keep it open. */
static void emu_open(backend_t *be)
{
    if (be->open++ > 0) return;
    emu_protect(be, PROT_READ | PROT_WRITE);
    for (int i = 0; i < be->nfences; i++)
        if (mprotect(be->fence_at[i], be->fence_len[i], PROT_NONE) != 0)
            MP_ABORT("mprotect of an offloaded stash in the emulated device region failed");
}

static void emu_close(backend_t *be)
{
    if (--be->open == 0) emu_protect(be, PROT_NONE);
}

/* ---- the kernels, and cpu's memory operations, with the region open ---- */

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

/* ---- offload: cpu's copy thread on the copy engine's view of the region ---- */

/* p's address in the copy engine's view when p is in the region; host pointers as they are. */
static void *emu_view(const backend_t *be, const void *p)
{
    const char *c = p;
    return c >= be->base && c < be->base + be->capacity ? be->view + (c - be->base) : (void *)c;
}

static long emu_offload_start(backend_t *be, void *dst, const void *src, size_t bytes, int to_host)
{
    return be_cpu_offload_start(be, emu_view(be, dst), emu_view(be, src), bytes, to_host);
}

static void emu_offload_fence(backend_t *be, void *dev, size_t bytes, int on)
{
    if ((uintptr_t)dev % 4096 || bytes % 4096) MP_ABORT("offload_fence of a range that is not page-aligned (a bug)");
    int i = 0;
    while (i < be->nfences && be->fence_at[i] != dev) i++;
    if (!on) {
        if (i == be->nfences) return;
        be->fence_at[i] = be->fence_at[--be->nfences], be->fence_len[i] = be->fence_len[be->nfences];
        return;
    }
    if (i < be->nfences) return;
    if (be->nfences == be->max_fences) {
        const int max = be->max_fences ? 2 * be->max_fences : 16;
        void **at = realloc(be->fence_at, (size_t)max * sizeof *at);
        if (at) be->fence_at = at;
        size_t *len = realloc(be->fence_len, (size_t)max * sizeof *len);
        if (len) be->fence_len = len;
        if (!at || !len) MP_ABORT("out of memory fencing an offloaded stash");
        be->max_fences = max;
    }
    be->fence_at[be->nfences] = dev, be->fence_len[be->nfences++] = bytes;
}

/* The fused attention emulated (attention_flash_cpu.c) where train.attention=fused asks for it and
 * the shape is one the CUDA fused kernels take: the same buffers as cuda's bf16 path carves. */
static int emu_attention_fused(const backend_t *be, int B, int T, int C, int NH)
{
    return be->att_fused && mp_att_fused_shape_fits(B, T, C, NH);
}

/* ---- the table ---- */

#define EMU_ENTRY(ret, name, params, args) .name = emu_##name,
#define EMU_CPU_ENTRY(ret, name, params, args) .name = be_cpu_##name,
#define EMU_STAGED_ENTRY(ret, name, params, args) .name = be_staged_##name,
const be_ops_t be_ops_emu = {
    .device = "emu",
    .init = emu_init,
    .destroy = emu_destroy,
    .attention_fused = emu_attention_fused,
    BE_MEMORY_OPS(EMU_ENTRY, EMU_ENTRY)
    BE_HOST_OPS(EMU_CPU_ENTRY, EMU_CPU_ENTRY)
    BE_COLL_OPS(EMU_STAGED_ENTRY, EMU_STAGED_ENTRY)
    BE_BUCKET_OPS(EMU_STAGED_ENTRY, EMU_STAGED_ENTRY)
    BE_P2P_OPS(EMU_CPU_ENTRY, EMU_CPU_ENTRY)
    .offload_start = emu_offload_start,
    .offload_wait = be_cpu_offload_wait,
    .offload_fence = emu_offload_fence,
    .offload_link = be_cpu_offload_link,
    BE_KERNELS(EMU_ENTRY, EMU_ENTRY)
};
