/* Host-resident candidates (supernet.resident = host, ARCHITECTURE.md §4): every candidate of a
 * choice block has its home in host memory (weights and both AdamW moments, the table's layout);
 * the device holds the shared tensors and `slots` slots per choice block (model.h). A subnet's
 * candidates are in slots from its first forward on the stage to its step there (pinned), written
 * home right after the step and kept in their slot until the slot is wanted (a later subnet that
 * uses them again finds them there). After each step the candidates of the subnets that come next
 * on the stage are brought into free slots through the offload path (be_offload_start: the copy
 * engine beside compute), so a subnet rarely waits for its own.
 *
 * Every decision follows the order of the stage's instructions, never the copies' timing: the data-
 * and tensor-parallel peers of a stage place the same candidates in the same slots, and the
 * arithmetic reads the same bits as with every candidate on the device (the tests check bitwise).
 * The causal lists cap the subnets in flight on a stage at slots − 1 (causal_cfg_t.subnets_cap) when
 * a block has more candidates than slots, so a slot is always free for the next subnet's.
 * The copy engine runs copies in the order they are started: a slot's fetch after its write home
 * reads the written data. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "perf.h"
#include "supernet.h"
#include "runlog.h"

struct supernet_home_s {
    int slots, ncand;
    float *hp, *hm, *hv;      /* host: tab.total floats each, the table's layout (shared part: staging) */
    int *owner;               /* local block × slot: its candidate, -1 empty */
    int *pin;                 /* local block × slot: the subnets in flight that use it */
    long *ticket;             /* local block × slot: its last copy (0: none) */
    long *used;               /* local block × slot: when it was last acquired (least recently used goes first) */
    unsigned char *keep;      /* local block × slot: wanted by a subnet earlier in the prefetch walk */
    long clock, last_ticket;
    /* what it cost, for the log */
    double wait_s;
    long fetched, reused, late;
    size_t bytes_in, bytes_out;
};

int supernet_device_slots(const deck_t *d, int pp)
{
    if (!d->supernet.enabled || d->supernet.resident != DECK_RESIDENT_HOST) return 0;
    int real = 0;
    for (int k = 0; k < d->supernet.cands.n; k++) real += !supernet_weightless(d, k);
    int s = d->supernet.device_slots;
    if (s == 0) s = (d->supernet.window < pp ? d->supernet.window : pp) + 1;
    return s < real ? s : real > 0 ? real : 1;
}


#define AT(a, b, s) ((a)[(size_t)(b) * h->slots + (s)])

/* The floats of candidate k of local block b: its table offset c0 and count. */
static void cand_range(const run_stage_t *st, int b, int k, size_t *c0, size_t *n)
{
    param_cand_range(&st->model.tab, b, k, c0, n);
}

/* Copies candidate k of block b between its home and slot s (to_host: home := slot). */
static void move(struct supernet_home_s *h, run_stage_t *st, int b, int k, int s, int to_host)
{
    model_t *m = &st->model;
    size_t c0, n;
    cand_range(st, b, k, &c0, &n);
    const size_t d = model_slot_at(m, b, k, s), bytes = n * sizeof(float);
    float *dev[3] = {m->params + d, m->m + d, m->v + d}, *home[3] = {h->hp + c0, h->hm + c0, h->hv + c0};
    for (int i = 0; i < 3; i++)
        h->last_ticket = AT(h->ticket, b, s) =
            to_host ? be_offload_start(&st->be, home[i], dev[i], bytes, 1) : be_offload_start(&st->be, dev[i], home[i], bytes, 0);
    if (to_host) h->bytes_out += 3 * bytes;
    else h->bytes_in += 3 * bytes, h->fetched++;
}

/* A slot of block b for candidate k: an empty one, else the least recently used one that no subnet
 * in flight pins and no earlier subnet of the walk wants; -1 when there is none. */
static int victim(const struct supernet_home_s *h, int b)
{
    int best = -1;
    for (int s = 0; s < h->slots; s++) {
        if (AT(h->pin, b, s) || AT(h->keep, b, s)) continue;
        if (AT(h->owner, b, s) < 0) return s;
        if (best < 0 || AT(h->used, b, s) < AT(h->used, b, best)) best = s;
    }
    return best;
}

/* Brings candidate k of block b into a slot (returns it), or -1 when every slot is taken. */
static int bring(struct supernet_home_s *h, run_stage_t *st, int b, int k)
{
    const int s = victim(h, b);
    if (s < 0) return -1;
    const int old = AT(h->owner, b, s);
    if (old >= 0) model_place(&st->model, b, old, -1); /* its home is current: written after its step */
    AT(h->owner, b, s) = k;
    model_place(&st->model, b, k, s);
    move(h, st, b, k, s, 0);
    return s;
}

int supernet_home_init(run_t *r)
{
    model_t *m = &r->st.model;
    if (!m->slots) return MP_OK;
    struct supernet_home_s *h = MP_CALLOC(1, sizeof *h);
    if (!h) return MP_FAIL("out of memory for the candidates' homes");
    supernet_of(r)->home = h;
    h->slots = m->slots, h->ncand = supernet_of(r)->ncand;
    const size_t nb = (size_t)(m->tab.nlayers > 0 ? m->tab.nlayers : 1) * h->slots, n = m->tab.total * sizeof(float);
    h->owner = MP_MALLOC(nb * sizeof *h->owner), h->pin = MP_CALLOC(nb, sizeof *h->pin);
    h->ticket = MP_CALLOC(nb, sizeof *h->ticket), h->used = MP_CALLOC(nb, sizeof *h->used);
    h->keep = MP_CALLOC(nb, 1);
    if (!h->owner || !h->pin || !h->ticket || !h->used || !h->keep) return MP_FAIL("out of memory for the slot map");
    for (size_t i = 0; i < nb; i++) h->owner[i] = -1;
    h->hp = be_host_alloc(&r->st.be, n), h->hm = be_host_alloc(&r->st.be, n), h->hv = be_host_alloc(&r->st.be, n);
    if (!h->hp || !h->hm || !h->hv)
        return MP_FAIL("out of host memory for the candidates' homes (3 × %.1f MB)", (double)n / 1e6);
    memset(h->hm, 0, n), memset(h->hv, 0, n);
    return MP_OK;
}

void supernet_home_free(run_t *r)
{
    struct supernet_home_s *h = supernet_of(r)->home;
    if (!h) return;
    if (h->last_ticket) be_offload_wait(&r->st.be, h->last_ticket, NULL);
    if (h->hp) be_host_free(&r->st.be, h->hp);
    if (h->hm) be_host_free(&r->st.be, h->hm);
    if (h->hv) be_host_free(&r->st.be, h->hv);
    free(h->owner), free(h->pin), free(h->ticket), free(h->used), free(h->keep);
    free(h);
    supernet_of(r)->home = NULL;
}

float *supernet_home_buf(run_t *r, int which)
{
    struct supernet_home_s *h = supernet_of(r)->home;
    return !h ? NULL : which == 0 ? h->hp : which == 1 ? h->hm : h->hv;
}

void supernet_home_acquire(run_t *r, const int *sel)
{
    struct supernet_home_s *h = supernet_of(r)->home;
    model_t *m = &r->st.model;
    if (h) {
        h->clock++;
        for (int b = 0; b < m->tab.nlayers; b++) {
            const int l = param_block_layer(&m->tab, b), k = sel[l];
            if (k < 0 || supernet_weightless(&r->deck, k)) continue;
            int s = m->placed[(size_t)b * h->ncand + k];
            if (s >= 0) {
                h->reused++;
            } else {
                memset(h->keep, 0, (size_t)m->tab.nlayers * h->slots);
                if ((s = bring(h, &r->st, b, k)) < 0)
                    MP_ABORT("layer %d: no device slot free for candidate %d (%d slots, all in use: a slot bug)", l, k,
                             h->slots);
                h->late++; /* not prefetched: the subnet waits for the whole copy */
            }
            const double t0 = perf_now();
            if (AT(h->ticket, b, s)) be_offload_wait(&r->st.be, AT(h->ticket, b, s), NULL);
            h->wait_s += perf_now() - t0;
            AT(h->pin, b, s)++;
            AT(h->used, b, s) = h->clock;
        }
    }
    model_select(m, sel);
}

void supernet_home_release(run_t *r, const int *sel, int written)
{
    struct supernet_home_s *h = supernet_of(r)->home;
    model_t *m = &r->st.model;
    if (!h) return;
    for (int b = 0; b < m->tab.nlayers; b++) {
        const int l = param_block_layer(&m->tab, b), k = sel[l];
        if (k < 0 || supernet_weightless(&r->deck, k)) continue;
        const int s = m->placed[(size_t)b * h->ncand + k];
        if (s < 0 || AT(h->pin, b, s) <= 0) MP_ABORT("layer %d: candidate %d released while not acquired", l, k);
        AT(h->pin, b, s)--;
        if (written) move(h, &r->st, b, k, s, 1); /* its step changed it: home is current again once this lands */
    }
}

void supernet_home_prefetch(run_t *r, const int *sels, int n, int stride)
{
    struct supernet_home_s *h = supernet_of(r)->home;
    model_t *m = &r->st.model;
    if (!h) return;
    memset(h->keep, 0, (size_t)m->tab.nlayers * h->slots);
    for (int b = 0; b < m->tab.nlayers; b++) {
        const int l = param_block_layer(&m->tab, b);
        for (int j = 0; j < n; j++) { /* in the order they come: an earlier subnet's candidate is never evicted for a later one */
            const int k = sels[(size_t)j * stride + l];
            if (k < 0 || supernet_weightless(&r->deck, k)) continue;
            int s = m->placed[(size_t)b * h->ncand + k];
            if (s < 0 && (s = bring(h, &r->st, b, k)) < 0) break; /* no slot: the later subnets' come later */
            AT(h->keep, b, s) = 1;
        }
    }
}

void supernet_home_flush(run_t *r)
{
    struct supernet_home_s *h = supernet_of(r)->home;
    if (h && h->last_ticket) {
        const double t0 = perf_now();
        be_offload_wait(&r->st.be, h->last_ticket, NULL);
        h->wait_s += perf_now() - t0;
    }
}

void supernet_home_forget(run_t *r)
{
    struct supernet_home_s *h = supernet_of(r)->home;
    model_t *m = &r->st.model;
    if (!h) return;
    supernet_home_flush(r);
    for (int b = 0; b < m->tab.nlayers; b++)
        for (int s = 0; s < h->slots; s++) {
            if (AT(h->owner, b, s) >= 0) model_place(m, b, AT(h->owner, b, s), -1);
            AT(h->owner, b, s) = -1, AT(h->pin, b, s) = 0, AT(h->ticket, b, s) = 0;
        }
}

void supernet_home_sizes(const run_stage_t *st, size_t sizes[4])
{
    const model_t *m = &st->model;
    /* parameters, gradients and both moments (4 floats per parameter): the device's whole model and
     * its candidates' slots, against every candidate of the stage on the device */
    sizes[0] = 4 * m->alloc * sizeof(float);
    sizes[1] = 4 * param_padded(m->tab.total, 1) * sizeof(float);
    sizes[2] = 4 * (size_t)m->nchoice * m->slots * m->slot_stride * sizeof(float);
    sizes[3] = 4 * (m->tab.total - m->tab.cand_off) * sizeof(float);
}

void supernet_home_report(run_t *r)
{
    struct supernet_home_s *h = supernet_of(r)->home;
    if (!h || r->lay.rank != 0) return;
    runlog_printf(&r->files.log, "supernet candidates from host memory (rank 0): %ld brought in (%ld late, waited for), %ld "
                  "found in their slot; %.1f MB in, %.1f MB home; %.3f s waited for copies",
                  h->fetched, h->late, h->reused, (double)h->bytes_in / 1e6, (double)h->bytes_out / 1e6, h->wait_s);
}

void supernet_home_announce(run_t *r)
{
    if (!supernet_of(r)->home) return;
    size_t z[4];
    supernet_home_sizes(&r->st, z);
    double sum[4] = {(double)z[0], (double)z[1], (double)z[2], (double)z[3]};
    /* the whole job: every rank's device (a stage's data-parallel and tensor-parallel peers each hold
     * theirs); a deadline wait, so a rank that never arrives is named */
    wait_allreduce_sum(&r->lay.wait, sum, 4, MPI_DOUBLE, MPI_COMM_WORLD, "the supernet's device-bytes report");
    if (r->lay.rank == 0)
        runlog_printf(&r->files.log, "supernet.resident=host: %d device slots per choice block of %d candidates: the devices "
                      "hold %.2f MB of the candidates' %.2f MB (%.0f%%), %.2f MB of the supernet's %.2f MB (%.0f%%) "
                      "with the shared tensors (parameters, gradients, AdamW moments; the rest at home in host memory)",
                      r->st.model.slots, supernet_of(r)->ncand, sum[2] / 1e6, sum[3] / 1e6, 100.0 * sum[2] / sum[3], sum[0] / 1e6,
                      sum[1] / 1e6, 100.0 * sum[0] / sum[1]);
}
