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

int bal_init(bal_t *b, stash_t *st, MPI_Comm pp_comm, int stage, int pp, int nguest, int naccept, int tag0,
             const wait_cfg_t *wait)
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
        b->staged = MP_CALLOC((size_t)b->nkeys, sizeof *b->staged);
        b->evict_req = MP_CALLOC((size_t)st->nslots, sizeof *b->evict_req);
        if (!b->reclaim_req || !b->evict_req || !b->staged) return MP_FAIL("out of memory for the balance bookkeeping");
        for (int k = 0; k < b->nkeys; k++) b->reclaim_req[k] = MPI_REQUEST_NULL;
        for (int i = 0; i < st->nslots; i++) b->evict_req[i] = MPI_REQUEST_NULL;
        return MP_OK;
    }
    b->nguest = bal_host_visible(b) ? nguest : 0;
    b->naccept = naccept;
    b->guest = MP_CALLOC((size_t)b->nguest + 1, sizeof *b->guest);
    b->guest_alloc = MP_CALLOC((size_t)b->nguest + 1, sizeof *b->guest_alloc);
    b->guest_key = MP_CALLOC((size_t)b->nguest + 1, sizeof *b->guest_key);
    b->hbuf = MP_CALLOC((size_t)naccept + 1, sizeof *b->hbuf);
    b->recv_req = MP_CALLOC((size_t)naccept + 1, sizeof *b->recv_req);
    b->send_req = MP_CALLOC((size_t)naccept + 1, sizeof *b->send_req);
    b->host_of = MP_CALLOC((size_t)b->nkeys, sizeof *b->host_of);
    b->guest_of = MP_CALLOC((size_t)b->nkeys, sizeof *b->guest_of);
    if (!b->guest || !b->guest_alloc || !b->guest_key || !b->hbuf || !b->recv_req || !b->send_req || !b->host_of ||
        !b->guest_of)
        return MP_FAIL("out of memory for the balance bookkeeping");
    for (int k = 0; k < b->nkeys; k++) b->host_of[k] = b->guest_of[k] = -1;
    for (int i = 0; i < naccept; i++) {
        b->recv_req[i] = b->send_req[i] = MPI_REQUEST_NULL;
        if (!(b->hbuf[i] = be_host_alloc(st->be, b->bytes ? b->bytes : 1)))
            return MP_FAIL("out of host memory for the balance guests (%d of %zu bytes)", naccept, b->bytes);
        b->host_bytes += b->bytes;
    }
    for (int g = 0; g < b->nguest; g++) {
        b->guest_key[g] = -1;
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
    for (int i = 0; i < b->naccept; i++)
        if (b->hbuf[i]) be_host_free(b->st->be, b->hbuf[i]);
    for (int g = b->nguest - 1; g >= 0; g--)
        if (b->guest_alloc[g]) arena_free(b->st->arena, b->guest_alloc[g], (b->bytes + PAGE) / sizeof(float) * sizeof(float));
    free(b->reclaim_req), free(b->evict_req), free(b->staged);
    free(b->guest), free(b->guest_alloc), free(b->guest_key), free(b->hbuf), free(b->recv_req), free(b->send_req);
    free(b->host_of), free(b->guest_of);
    memset(b, 0, sizeof *b);
}

static int bal_tag(const bal_t *b, int key, int back) { return b->tag0 + 2 * key + back; }

void bal_evict(bal_t *b, int key)
{
    stash_t *st = b->st;
    if (b->role != BAL_EVICTOR) return;
    const int p = st->mov_bytes ? st->pool_of[key] : -1, slot = st->slot_of[key];
    st->moved.evicted += (double)b->bytes;
    /* the slot's last send left long ago: its stash came back before its backward freed the slot */
    wait_all(b->wait, 1, &b->evict_req[slot], "a balance send to the acceptor");
    if (p < 0) { /* nothing balanced on this stage */
        MPI_CHECK(MPI_Isend(&bal_nothing, 0, MPI_BYTE, b->peer, bal_tag(b, key, 0), b->comm, &b->evict_req[slot]));
        return;
    }
    /* through the slot's host copy, so the device buffer is free now, whenever the acceptor posts */
    void *h = st->host[slot];
    be_to_host(st->be, h, st->pool[p], b->bytes);
    MPI_CHECK(MPI_Isend(h, (int)b->bytes, MPI_BYTE, b->peer, bal_tag(b, key, 0), b->comm, &b->evict_req[slot]));
    stash_pool_release(st, key);
    be_offload_fence(st->be, st->pool[p], st->mov_bytes, 1);
    st->slots[slot].mov = NULL;
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
    const int p = stash_pool_take(st, key, 1), slot = st->slot_of[key];
    st->slots[slot].mov = st->pool[p];
    void *dst = st->pool[p];
    b->staged[key] = !bal_host_visible(b);
    if (b->staged[key]) { /* into the slot's host copy, once its eviction's send from there is done */
        wait_all(b->wait, 1, &b->evict_req[slot], "a balance send to the acceptor");
        dst = st->host[slot];
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
    if (b->next >= b->naccept)
        MP_ABORT("balance: ACCEPT number %d of a step, the list has %d (a bug)", b->next + 1, b->naccept);
    const int i = b->next++;
    void *dst = b->hbuf[i];
    if (b->nguest) {
        int g = -1;
        for (int j = 0; j < b->nguest && g < 0; j++)
            if (b->guest_key[j] < 0) g = j;
        if (g < 0) MP_ABORT("all %d balance guest buffers are in use: the list holds more than its guest peak (a bug)", b->nguest);
        b->guest_key[g] = key, b->guest_of[key] = g;
        dst = b->guest[g];
    }
    b->host_of[key] = i;
    MPI_CHECK(MPI_Irecv(dst, (int)b->bytes, MPI_BYTE, b->peer, bal_tag(b, key, 0), b->comm, &b->recv_req[i]));
    b->st->moved.accepted += (double)b->bytes;
}

void bal_return(bal_t *b, int key)
{
    if (b->role != BAL_ACCEPTOR) return;
    const int i = b->host_of[key], g = b->guest_of[key];
    if (i < 0) MP_ABORT("RETURN of micro-batch key %d that was never accepted (a bug in the lists)", key);
    char what[96];
    snprintf(what, sizeof what, "the stash of micro-batch key %d from the evictor (stage %d)", key, b->peer);
    const double t0 = perf_now();
    wait_all(b->wait, 1, &b->recv_req[i], what);
    b->st->moved.wait_s += perf_now() - t0;
    if (g >= 0) { /* out of the arena: the guest is free whenever the evictor posts its receive */
        be_to_host(b->st->be, b->hbuf[i], b->guest[g], b->bytes);
        b->guest_key[g] = -1, b->guest_of[key] = -1;
    }
    MPI_CHECK(MPI_Isend(b->hbuf[i], (int)b->bytes, MPI_BYTE, b->peer, bal_tag(b, key, 1), b->comm, &b->send_req[i]));
    b->host_of[key] = -1;
}

void bal_drain(bal_t *b)
{
    if (b->role == BAL_EVICTOR)
        for (int i = 0; i < b->st->nslots; i++) wait_all(b->wait, 1, &b->evict_req[i], "the step's balance sends");
    if (b->role == BAL_ACCEPTOR) {
        wait_all(b->wait, b->naccept, b->send_req, "the step's balance returns");
        b->next = 0;
    }
}

double bal_guest_bytes_in_use(const bal_t *b)
{
    int n = 0;
    for (int g = 0; g < b->nguest; g++) n += b->guest_key[g] >= 0;
    return n ? (double)bal_guest_bytes(b->bytes, n) : 0.0;
}
