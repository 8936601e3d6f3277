#include "balance.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mpi_check.h"
#include "perf.h"

enum { PAGE = 4096 };

size_t bal_guest_bytes(size_t bytes, int nguest)
{
    return bytes ? (size_t)nguest * ((bytes + PAGE) / sizeof(float) * sizeof(float)) : 0;
}

/* A stage with no balanced block still runs its pair's lists: its messages carry 0 bytes. */
static char bal_nothing;

static int bal_host_visible(const bal_t *b) { return be_host_visible(b->st->be) && b->bytes; }

int bal_init(bal_t *b, stash_t *st, MPI_Comm pp_comm, int stage, int pp, int nguest, int tag0, const wait_cfg_t *wait)
{
    memset(b, 0, sizeof *b);
    b->st = st, b->comm = pp_comm, b->tag0 = tag0, b->wait = wait, b->nkeys = st->nkeys;
    const int partner = pp - 1 - stage;
    if (partner == stage) return MP_OK; /* the middle stage of an odd pipeline keeps its stashes */
    b->role = stage < partner ? BAL_EVICTOR : BAL_ACCEPTOR;
    b->peer = partner;
    /* the acceptor sizes its guests by the evictor's movable region */
    unsigned long long mine = st->mov_bytes, theirs = 0;
    MPI_Request q[2];
    MPI_CHECK(MPI_Irecv(&theirs, 1, MPI_UNSIGNED_LONG_LONG, partner, tag0 - 1, pp_comm, &q[0]));
    MPI_CHECK(MPI_Isend(&mine, 1, MPI_UNSIGNED_LONG_LONG, partner, tag0 - 1, pp_comm, &q[1]));
    wait_all(wait, 2, q, "the balance partners' stash sizes");
    b->bytes = b->role == BAL_EVICTOR ? mine : theirs;
    if (b->role == BAL_EVICTOR) {
        b->reclaim_req = MP_CALLOC((size_t)b->nkeys, sizeof *b->reclaim_req);
        b->evict_req = MP_CALLOC((size_t)b->nkeys, sizeof *b->evict_req);
        b->staged = MP_CALLOC((size_t)b->nkeys, sizeof *b->staged);
        if (!b->reclaim_req || !b->evict_req || !b->staged) return MP_FAIL("out of memory for the balance bookkeeping");
        for (int k = 0; k < b->nkeys; k++) b->reclaim_req[k] = b->evict_req[k] = MPI_REQUEST_NULL;
        return MP_OK;
    }
    b->nguest = nguest;
    b->guest = MP_CALLOC((size_t)b->nguest + 1, sizeof *b->guest);
    b->guest_alloc = MP_CALLOC((size_t)b->nguest + 1, sizeof *b->guest_alloc);
    b->guest_host = MP_CALLOC((size_t)b->nguest + 1, sizeof *b->guest_host);
    b->guest_key = MP_CALLOC((size_t)b->nguest + 1, sizeof *b->guest_key);
    b->guest_recv = MP_CALLOC((size_t)b->nguest + 1, sizeof *b->guest_recv);
    b->guest_send = MP_CALLOC((size_t)b->nguest + 1, sizeof *b->guest_send);
    b->guest_of = MP_CALLOC((size_t)b->nkeys, sizeof *b->guest_of);
    if (!b->guest || !b->guest_alloc || !b->guest_host || !b->guest_key || !b->guest_recv || !b->guest_send ||
        !b->guest_of)
        return MP_FAIL("out of memory for the balance bookkeeping");
    for (int k = 0; k < b->nkeys; k++) b->guest_of[k] = -1;
    for (int g = 0; g < b->nguest; g++) {
        b->guest_key[g] = -1;
        b->guest_recv[g] = b->guest_send[g] = MPI_REQUEST_NULL;
        if (!bal_host_visible(b) || !b->bytes) { /* MPI moves host memory: the guests stay there (with NCCL they could stay on the device: not built) */
            if (!(b->guest_host[g] = be_host_alloc(st->be, b->bytes ? b->bytes : 1)))
                return MP_FAIL("out of host memory for the balance guests");
            continue;
        }
        b->guest_alloc[g] = arena_floats(st->arena, (b->bytes + PAGE) / sizeof(float), "balance guests (stashes of stage p-1-s)");
        if (!b->guest_alloc[g]) return MP_ERR;
        b->guest[g] = (float *)(((uintptr_t)b->guest_alloc[g] + PAGE - 1) / PAGE * PAGE);
    }
    return MP_OK;
}

void bal_free(bal_t *b)
{
    if (b->role == BAL_NONE) return;
    bal_drain(b);
    for (int g = b->nguest - 1; g >= 0; g--) {
        if (b->guest_host && b->guest_host[g]) be_host_free(b->st->be, b->guest_host[g]);
        if (b->guest_alloc && b->guest_alloc[g]) arena_free(b->st->arena, b->guest_alloc[g], (b->bytes + PAGE) / sizeof(float) * sizeof(float));
    }
    free(b->reclaim_req), free(b->evict_req), free(b->staged);
    free(b->guest), free(b->guest_alloc), free(b->guest_host), free(b->guest_key), free(b->guest_recv);
    free(b->guest_send), free(b->guest_of);
    memset(b, 0, sizeof *b);
}

static int bal_tag(const bal_t *b, int key, int back) { return b->tag0 + 2 * key + back; }

void bal_evict(bal_t *b, int key)
{
    stash_t *st = b->st;
    if (b->role != BAL_EVICTOR) return;
    const int p = st->pool_of[key];
    st->moved.evicted += (double)b->bytes;
    if (p < 0) { /* nothing balanced on this stage */
        MPI_CHECK(MPI_Isend(&bal_nothing, 0, MPI_BYTE, b->peer, bal_tag(b, key, 0), b->comm, &b->evict_req[key]));
        return;
    }
    if (bal_host_visible(b)) {
        MPI_CHECK(MPI_Isend(st->pool[p], (int)b->bytes, MPI_BYTE, b->peer, bal_tag(b, key, 0), b->comm, &st->pool_req[p]));
    } else { /* MPI reads host memory: the slot's host copy, sent from there */
        void *h = st->host[st->slot_of[key]];
        be_to_host(st->be, h, st->pool[p], b->bytes);
        MPI_CHECK(MPI_Isend(h, (int)b->bytes, MPI_BYTE, b->peer, bal_tag(b, key, 0), b->comm, &b->evict_req[key]));
    }
    stash_pool_release(st, key);
    be_offload_fence(st->be, st->pool[p], st->mov_bytes, 1);
    st->slots[st->slot_of[key]].mov = NULL;
}

void bal_reclaim(bal_t *b, int key)
{
    stash_t *st = b->st;
    if (b->role != BAL_EVICTOR || b->reclaim_req[key] != MPI_REQUEST_NULL) return;
    if (!st->mov_bytes) {
        MPI_CHECK(MPI_Irecv(&bal_nothing, 0, MPI_BYTE, b->peer, bal_tag(b, key, 1), b->comm, &b->reclaim_req[key]));
        return;
    }
    if (st->pool_of[key] >= 0) return;
    const int p = stash_pool_take(st, key, 1);
    st->slots[st->slot_of[key]].mov = st->pool[p];
    void *dst = st->pool[p];
    b->staged[key] = !bal_host_visible(b);
    if (b->staged[key]) { /* into the slot's host copy, once its eviction's send from there is done */
        wait_all(b->wait, 1, &b->evict_req[key], "a balance send to the acceptor");
        dst = st->host[st->slot_of[key]];
    }
    MPI_CHECK(MPI_Irecv(dst, (int)b->bytes, MPI_BYTE, b->peer, bal_tag(b, key, 1), b->comm, &b->reclaim_req[key]));
}

void bal_ready(bal_t *b, int key)
{
    stash_t *st = b->st;
    if (b->role != BAL_EVICTOR || b->reclaim_req[key] == MPI_REQUEST_NULL) return;
    const double t0 = perf_now();
    char what[96];
    snprintf(what, sizeof what, "the stash of micro-batch key %d back from the acceptor (stage %d)", key, b->peer);
    wait_all(b->wait, 1, &b->reclaim_req[key], what);
    st->moved.wait_s += perf_now() - t0;
    if (st->mov_bytes && b->staged[key])
        be_to_device(st->be, st->pool[st->pool_of[key]], st->host[st->slot_of[key]], b->bytes);
    b->staged[key] = 0;
}

void bal_accept(bal_t *b, int key)
{
    if (b->role != BAL_ACCEPTOR) return;
    int g = -1; /* a free guest no return send still reads, else one that is only waiting for that */
    for (int i = 0; i < b->nguest && g < 0; i++)
        if (b->guest_key[i] < 0 && b->guest_send[i] == MPI_REQUEST_NULL) g = i;
    for (int i = 0; i < b->nguest && g < 0; i++)
        if (b->guest_key[i] < 0) g = i;
    if (g < 0) MP_ABORT("all %d balance guest buffers are in use: the lists need more than their guest peak (a bug)", b->nguest);
    wait_all(b->wait, 1, &b->guest_send[g], "a balance stash going back to its evictor");
    b->guest_key[g] = key, b->guest_of[key] = g;
    void *dst = bal_host_visible(b) ? (void *)b->guest[g] : b->guest_host[g];
    MPI_CHECK(MPI_Irecv(dst, (int)b->bytes, MPI_BYTE, b->peer, bal_tag(b, key, 0), b->comm, &b->guest_recv[g]));
    b->st->moved.accepted += (double)b->bytes;
}

void bal_return(bal_t *b, int key)
{
    if (b->role != BAL_ACCEPTOR) return;
    const int g = b->guest_of[key];
    if (g < 0) MP_ABORT("RETURN of micro-batch key %d that was never accepted (a bug in the lists)", key);
    char what[96];
    snprintf(what, sizeof what, "the stash of micro-batch key %d from the evictor (stage %d)", key, b->peer);
    const double t0 = perf_now();
    wait_all(b->wait, 1, &b->guest_recv[g], what);
    b->st->moved.wait_s += perf_now() - t0;
    const void *src = bal_host_visible(b) ? (const void *)b->guest[g] : b->guest_host[g];
    MPI_CHECK(MPI_Isend(src, (int)b->bytes, MPI_BYTE, b->peer, bal_tag(b, key, 1), b->comm, &b->guest_send[g]));
    b->guest_key[g] = -1, b->guest_of[key] = -1;
}

void bal_drain(bal_t *b)
{
    stash_t *st = b->st;
    if (b->role == BAL_EVICTOR) {
        for (int i = 0; i < st->npool; i++) wait_all(b->wait, 1, &st->pool_req[i], "the step's balance sends");
        for (int k = 0; k < b->nkeys; k++) wait_all(b->wait, 1, &b->evict_req[k], "the step's balance sends");
    }
    for (int g = 0; g < b->nguest; g++) wait_all(b->wait, 1, &b->guest_send[g], "the step's balance returns");
}
