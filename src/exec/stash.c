#include "stash.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "perf.h"

const stash_policy_t stash_policy_keep = {.name = "keep"};

static void offload_out(stash_t *st, int key, acts_t *a);
static void offload_in(stash_t *st, int key, acts_t *a);
static void offload_ready(stash_t *st, int key, acts_t *a);
const stash_policy_t stash_policy_offload = {
    .name = "offload", .offload = offload_out, .prefetch = offload_in, .before_backward = offload_ready};

enum { PAGE = 4096 };

int stash_init_movable(stash_t *st, backend_t *be, int npool)
{
    size_t mov = 0;
    for (int i = 0; i < st->nslots; i++)
        if (st->slots[i].mov_floats * sizeof(float) > mov) mov = st->slots[i].mov_floats * sizeof(float);
    st->be = be;
    if (mov == 0) return MP_OK;
    st->mov_bytes = (mov + PAGE - 1) / PAGE * PAGE;
    st->npool = npool;
    st->pool = MP_CALLOC((size_t)npool, sizeof *st->pool);
    st->pool_alloc = MP_CALLOC((size_t)npool, sizeof *st->pool_alloc);
    st->pool_ticket = MP_CALLOC((size_t)npool, sizeof *st->pool_ticket);
    st->pool_key = MP_CALLOC((size_t)npool, sizeof *st->pool_key);
    st->host = MP_CALLOC((size_t)st->nslots, sizeof *st->host);
    st->pool_of = MP_CALLOC((size_t)st->nkeys, sizeof *st->pool_of);
    st->pref = MP_CALLOC((size_t)st->nkeys, sizeof *st->pref);
    if (!st->pool || !st->pool_alloc || !st->pool_ticket || !st->pool_key || !st->host ||
        !st->pool_of || !st->pref)
        return MP_FAIL("out of memory for the offload buffers' bookkeeping");
    for (int k = 0; k < st->nkeys; k++) st->pool_of[k] = -1;
    const size_t nf = (st->mov_bytes + PAGE) / sizeof(float); /* a page of slack to align the start */
    for (int i = 0; i < npool; i++) {
        st->pool_key[i] = -1;
        if (!(st->pool_alloc[i] = arena_floats(st->arena, nf, "offloadable activations (memory.prefetch window)")))
            return MP_ERR;
        st->pool[i] = (float *)(((uintptr_t)st->pool_alloc[i] + PAGE - 1) / PAGE * PAGE);
        be_offload_fence(be, st->pool[i], st->mov_bytes, 1); /* nothing lives there yet */
    }
    for (int i = 0; i < st->nslots; i++)
        if (!(st->host[i] = be_host_alloc(be, st->mov_bytes)))
            return MP_FAIL("out of host memory for the offloaded activations (%zu bytes per micro-batch)", st->mov_bytes);
    return MP_OK;
}

static void stash_free_movable(stash_t *st)
{
    if (st->mov_bytes == 0) return;
    const size_t nf = (st->mov_bytes + PAGE) / sizeof(float);
    for (int i = 0; i < st->npool; i++) /* the copies reading them first */
        if (st->pool_ticket && st->pool_ticket[i]) be_offload_wait(st->be, st->pool_ticket[i], NULL);
    be_sync(st->be);
    for (int i = 0; st->host && i < st->nslots; i++)
        if (st->host[i]) be_host_free(st->be, st->host[i]);
    for (int i = st->npool - 1; st->pool_alloc && i >= 0; i--)
        if (st->pool_alloc[i]) {
            be_offload_fence(st->be, st->pool[i], st->mov_bytes, 0);
            arena_free(st->arena, st->pool_alloc[i], nf * sizeof(float));
        }
    free(st->pool), free(st->pool_alloc), free(st->pool_ticket), free(st->pool_key);
    free(st->host), free(st->pool_of), free(st->pref);
}

/* A free buffer of the pool for key: one no copy reads if there is one, else the one whose
 * offload started first. A forward (for_forward) writes it at once, so it waits for that copy; a
 * prefetch's copy is ordered after it by the copy engine. */
static int pool_get(stash_t *st, int key, int for_forward)
{
    int best = -1;
    for (int i = 0; i < st->npool; i++)
        if (st->pool_key[i] < 0 &&
            (best < 0 || (st->pool_ticket[best] && (!st->pool_ticket[i] || st->pool_ticket[i] < st->pool_ticket[best]))))
            best = i;
    if (best < 0)
        MP_ABORT("all %d offload buffers are in use: the lists need more than their device peak (a bug)", st->npool);
    if (for_forward && st->pool_ticket[best]) {
        be_offload_wait(st->be, st->pool_ticket[best], &st->moved.wait_s);
        st->pool_ticket[best] = 0;
    }
    be_offload_fence(st->be, st->pool[best], st->mov_bytes, 0);
    st->pool_key[best] = key;
    st->pool_of[key] = best;
    if (++st->pool_used > st->pool_peak) st->pool_peak = st->pool_used;
    return best;
}

static void pool_put(stash_t *st, int key)
{
    const int b = st->pool_of[key];
    if (b < 0) return;
    st->pool_key[b] = -1;
    st->pool_of[key] = -1;
    st->pool_used--;
}

int stash_pool_take(stash_t *st, int key, int for_write) { return pool_get(st, key, for_write); }

void stash_pool_release(stash_t *st, int key) { pool_put(st, key); }

static void offload_out(stash_t *st, int key, acts_t *a)
{
    const int b = st->pool_of[key];
    if (!st->mov_bytes || b < 0) return;
    st->pool_ticket[b] = be_offload_start(st->be, st->host[st->slot_of[key]], st->pool[b], st->mov_bytes, 1);
    st->moved.offloaded += (double)st->mov_bytes;
    pool_put(st, key);
    be_offload_fence(st->be, st->pool[b], st->mov_bytes, 1); /* its stash is on the host now */
    a->mov = NULL;
}

static void offload_in(stash_t *st, int key, acts_t *a)
{
    if (!st->mov_bytes || st->pool_of[key] >= 0) return; /* never offloaded */
    const int b = pool_get(st, key, 0);
    st->pref[key] = be_offload_start(st->be, st->pool[b], st->host[st->slot_of[key]], st->mov_bytes, 0);
    st->moved.prefetched += (double)st->mov_bytes;
    a->mov = st->pool[b];
}

static void offload_ready(stash_t *st, int key, acts_t *a)
{
    if (!st->mov_bytes) return;
    if (st->pool_of[key] < 0) /* offloaded with no PREFETCH before its backward: fetch it now */
        offload_in(st, key, a);
    if (st->pref[key]) be_offload_wait(st->be, st->pref[key], &st->moved.wait_s);
    st->pref[key] = 0;
}

void stash_bind_eval(stash_t *st, acts_t *a)
{
    if (!st->mov_bytes) return;
    const int key = 0; /* the pipeline is drained: every key's buffer is free */
    a->mov = st->pool[pool_get(st, key, 1)];
}

void stash_unbind_eval(stash_t *st, acts_t *a)
{
    if (!st->mov_bytes) return;
    pool_put(st, 0);
    be_offload_fence(st->be, a->mov, st->mov_bytes, 1);
    a->mov = NULL;
}

int stash_init(stash_t *st, const stash_policy_t *policy, int nslots, int nkeys, acts_t *slot0, const model_t *model,
               int B, int biggest, int final, arena_t *arena, const wait_cfg_t *wait)
{
    memset(st, 0, sizeof *st);
    st->policy = policy;
    st->nslots = nslots, st->nkeys = nkeys, st->arena = arena, st->wait = wait;
    st->slots = MP_CALLOC((size_t)nslots, sizeof *st->slots);
    st->free_slots = MP_CALLOC((size_t)nslots, sizeof *st->free_slots);
    st->reader = MP_CALLOC((size_t)nslots, sizeof *st->reader);
    st->slot_of = MP_CALLOC((size_t)nkeys, sizeof *st->slot_of);
    if (!st->slots || !st->free_slots || !st->reader || !st->slot_of) goto err_free;
    for (int i = 0; i < nslots; i++) st->reader[i] = MPI_REQUEST_NULL, st->free_slots[i] = nslots - 1 - i;
    st->nfree = nslots;
    for (int i = 0; i < nkeys; i++) st->slot_of[i] = -1;
    st->slots[0] = *slot0;
    for (int i = 1; i < nslots; i++)
        if (acts_create_part(&st->slots[i], model, B, biggest, final, arena) != MP_OK) goto err_free;
    return MP_OK;
err_free:
    stash_free(st);
    return MP_ERR;
}

void stash_free(stash_t *st)
{
    stash_free_movable(st);
    for (int i = 1; i < st->nslots && st->slots; i++)
        if (st->slots[i].buf) acts_destroy(&st->slots[i], st->arena);
    free(st->slots);
    free(st->free_slots);
    free(st->reader);
    free(st->slot_of);
    memset(st, 0, sizeof *st);
}

acts_t *stash_take(stash_t *st, int key)
{
    if (st->nfree == 0) MP_ABORT("pipeline stash exhausted (%d slots): the schedule needs more", st->nslots);
    int s = st->free_slots[--st->nfree];
    wait_all(st->wait, 1, &st->reader[s], "a pipeline activation send");
    st->slot_of[key] = s;
    if (st->nslots - st->nfree > st->peak) st->peak = st->nslots - st->nfree;
    return &st->slots[s];
}

acts_t *stash_get(const stash_t *st, int key) { return st->slot_of[key] >= 0 ? &st->slots[st->slot_of[key]] : NULL; }

MPI_Request *stash_reader(stash_t *st, int key) { return &st->reader[st->slot_of[key]]; }

void stash_give(stash_t *st, int key)
{
    if (st->mov_bytes) {
        const int b = st->pool_of[key];
        pool_put(st, key);
        if (b >= 0) be_offload_fence(st->be, st->pool[b], st->mov_bytes, 1);
        st->pref[key] = 0;
        st->slots[st->slot_of[key]].mov = NULL;
    }
    st->free_slots[st->nfree++] = st->slot_of[key];
    st->slot_of[key] = -1;
}

void stash_wait_readers(stash_t *st, const char *what)
{
    for (int s = 0; s < st->nslots; s++) wait_all(st->wait, 1, &st->reader[s], what);
}

double stash_bytes_in_use(const stash_t *st)
{
    double b = 0.0;
    for (int k = 0; k < st->nkeys; k++) {
        const int s = st->slot_of[k];
        if (s >= 0) b += (double)st->slots[s].nfloats * sizeof(float) + 2.0 * st->slots[s].B * st->slots[s].T * sizeof(int);
    }
    return b + (double)st->pool_used * (double)(st->mov_bytes + PAGE);
}

void stash_before_forward(stash_t *st, int key)
{
    if (st->mov_bytes && st->pool_of[key] < 0) st->slots[st->slot_of[key]].mov = st->pool[pool_get(st, key, 1)];
}

void stash_after_forward(stash_t *st, int key)
{
    if (st->policy->after_forward) st->policy->after_forward(st, key, stash_get(st, key));
}

void stash_offload(stash_t *st, int key)
{
    if (st->policy->offload) st->policy->offload(st, key, stash_get(st, key));
}

void stash_prefetch(stash_t *st, int key)
{
    if (st->policy->prefetch) st->policy->prefetch(st, key, stash_get(st, key));
}

void stash_before_backward(stash_t *st, int key)
{
    if (st->policy->before_backward) st->policy->before_backward(st, key, stash_get(st, key));
}
