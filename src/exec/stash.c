#include "stash.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

const stash_policy_t stash_policy_keep = {.name = "keep"};

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
    st->free_slots[st->nfree++] = st->slot_of[key];
    st->slot_of[key] = -1;
}

void stash_wait_readers(stash_t *st, const char *what)
{
    for (int s = 0; s < st->nslots; s++) wait_all(st->wait, 1, &st->reader[s], what);
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
