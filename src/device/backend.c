/* What every backend shares: the choice of table, set-up and teardown, the gradient bucket count,
 * and be_<op>, each a call through the table. The backends themselves: backend_cpu.c,
 * backend_emu.c, backend_cuda.c. */
#include "config.h"

#include "backend.h"

#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "backend_staged.h"
#include "check.h"
#include "perf.h"

/* The table of kind; NULL when this build has none. */
static const be_ops_t *be_table(be_kind_t kind)
{
    switch (kind) {
    case BE_CPU: return &be_ops_cpu;
    case BE_EMU: return &be_ops_emu;
#ifdef MP_HAVE_CUDA
    case BE_CUDA: return &be_ops_cuda;
#else
    case BE_CUDA: return NULL;
#endif
    }
    return NULL;
}

/* MP_OK when ops has every entry; otherwise a message naming the first missing one and MP_ERR. */
static int be_table_check(const be_ops_t *ops)
{
#define BE_CHECK_ENTRY(ret, name, params, args) \
    if (!ops->name) return MP_FAIL("train.device=%s: the backend has no " #name " (a bug)", ops->device);
    BE_OPS(BE_CHECK_ENTRY, BE_CHECK_ENTRY)
    BE_KERNELS(BE_CHECK_ENTRY, BE_CHECK_ENTRY)
#undef BE_CHECK_ENTRY
    return MP_OK;
}

static void zero_cb(void *ctx, void *p, size_t bytes) { be_zero(ctx, p, bytes); }

int be_init(backend_t *be, be_kind_t kind, arena_t *arena, size_t capacity, int device, int precision,
            const wait_cfg_t *wait)
{
    memset(be, 0, sizeof *be);
    be->kind = kind;
    be->wait = wait;
    const be_ops_t *ops = be_table(kind);
    if (!ops) return MP_FAIL("train.device=cuda: this build has only the CPU backend (configure --with-cuda)");
    if (be_table_check(ops) != MP_OK) return MP_ERR;
    if (ops->init && ops->init(be, capacity, device, precision) != MP_OK) return MP_ERR;
    be->ops = ops;
    if (be->base) arena_bind_region(arena, be->base, be->capacity, zero_cb, be);
    return MP_OK;
}

int be_attention_fused(const backend_t *be, int B, int T, int C, int NH, int KVH)
{
    if (!be || !be->ops || !be->ops->attention_fused || KVH != NH) return 0;
    return be->ops->attention_fused(be, B, T, C, NH);
}

int be_region_open(backend_t *be, arena_t *arena)
{
    if (be->base || !be->ops->region_open) return MP_OK;
    if (be->ops->region_open(be) != MP_OK) return MP_ERR;
    arena_bind_region(arena, be->base, be->capacity, zero_cb, be);
    return MP_OK;
}

void be_destroy(backend_t *be)
{
    free(be->bucket_req);
    be->bucket_req = NULL;
    copier_destroy(be->copier); /* its copies are done before the region goes */
    be->copier = NULL;
    free(be->fence_at), free(be->fence_len);
    be->fence_at = NULL, be->fence_len = NULL, be->nfences = be->max_fences = 0;
    be_cpu_wire_free(be);
    if (be->ops) be_staged_free(be); /* the backend's host memory: before the backend goes */
    if (be->ops && be->ops->destroy) be->ops->destroy(be);
    be->base = NULL;
}

int be_buckets_reserve(backend_t *be, int max, int bf16)
{
    free(be->bucket_req);
    be->bucket_req = MP_CALLOC((size_t)(max > 0 ? max : 1), sizeof *be->bucket_req);
    be->max_buckets = max;
    be->nbuckets = 0;
    be->bucket_bf16 = bf16;
    be->dev_wire = NULL, be->dev_wire_elems = 0;
    return be->bucket_req ? MP_OK : MP_ERR;
}

size_t be_bucket_wire_floats(const backend_t *be, size_t piece)
{
    return be->bucket_bf16 && be->kind == BE_CUDA ? piece : 0;
}

void be_bucket_wire(backend_t *be, float *wire, size_t floats)
{
    be->dev_wire = wire;
    be->dev_wire_elems = 2 * floats;
}

int be_bucket_claim(backend_t *be)
{
    if (be->nbuckets == be->max_buckets) MP_ABORT("more gradient buckets than planned (%d)", be->max_buckets);
    return be->nbuckets++;
}

/* ---- be_<op>: the table's entry ---- */

#define BE_OP_CALL(ret, name, params, args) \
    ret be_##name params { be->ops->name args; }
#define BE_OP_RETURN(ret, name, params, args) \
    ret be_##name params { return be->ops->name args; }
BE_OPS(BE_OP_CALL, BE_OP_RETURN)

/* A kernel's call, timed when be->kt.on (ktime.h): through the backend's hooks, or the host clock
 * around the call. The branch is all an untimed call costs. */
static void be_time_begin(backend_t *be, int k)
{
    if (be->ops->time_begin) be->ops->time_begin(be, k);
    else be->kt.t0 = perf_now();
}

static void be_time_end(backend_t *be, int k)
{
    if (be->ops->time_end) {
        be->ops->time_end(be, k);
    } else {
        be->kt.seconds[k] += perf_now() - be->kt.t0;
        be->kt.calls[k]++;
    }
}

#define BE_KERNEL_CALL(ret, name, params, args)          \
    ret be_##name(backend_t *be, BE_ARGS params)         \
    {                                                    \
        if (!be->kt.on) {                                \
            be->ops->name(be, BE_ARGS args);             \
            return;                                      \
        }                                                \
        be_time_begin(be, BE_K_##name);                  \
        be->ops->name(be, BE_ARGS args);                 \
        be_time_end(be, BE_K_##name);                    \
    }
#define BE_KERNEL_RETURN(ret, name, params, args)        \
    ret be_##name(backend_t *be, BE_ARGS params)         \
    {                                                    \
        if (!be->kt.on) return be->ops->name(be, BE_ARGS args); \
        be_time_begin(be, BE_K_##name);                  \
        ret result_ = be->ops->name(be, BE_ARGS args);   \
        be_time_end(be, BE_K_##name);                    \
        return result_;                                  \
    }
BE_KERNELS(BE_KERNEL_CALL, BE_KERNEL_RETURN)

/* ---- kernel times and the GPU's identity ---- */

void be_ktime_step_begin(backend_t *be)
{
    be->kt.on = 1;
    be->kt.step_t0 = perf_now();
}

void be_ktime_step_end(backend_t *be)
{
    be->kt.on = 0;
    be->kt.wall_s += perf_now() - be->kt.step_t0;
    be->kt.steps++;
}

void be_ktime_flush(backend_t *be)
{
    if (be->ops && be->ops->time_flush) be->ops->time_flush(be);
}

const char *be_ktime_timer(const backend_t *be)
{
    return be->ops && be->ops->timer ? be->ops->timer : "host clock";
}

int be_gpu_bus_id(backend_t *be, char *buf, size_t n)
{
    if (n) buf[0] = 0;
    return be->ops && be->ops->gpu_bus_id ? be->ops->gpu_bus_id(be, buf, n) : 0;
}
