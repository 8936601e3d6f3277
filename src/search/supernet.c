#include "supernet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "optim.h"
#include "perf.h"
#include "rng.h"
#include "grad_norm.h"

int supernet_sample(unsigned long long seed, long t, int l, int ncand)
{
    return (int)(rng_key(seed, RNG_STREAM_SUBNET, (uint64_t)t, (uint64_t)l) % (uint64_t)ncand);
}

int supernet_layers(run_t *r)
{
    const deck_t *d = &r->deck;
    if (!d->supernet.enabled) return MP_OK;
    supernet_t *sn = MP_CALLOC(1, sizeof *sn);
    if (!sn) return MP_FAIL("out of memory for the supernet's bookkeeping");
    r->plug_state = sn;
    const int L = d->model.layers;
    sn->on = 1, sn->window = d->supernet.window, sn->ncand = d->supernet.cands.n;
    sn->choice = MP_CALLOC((size_t)L, 1);
    sn->sel = MP_CALLOC((size_t)L, sizeof *sn->sel);
    sn->count = MP_CALLOC((size_t)L * sn->ncand, sizeof *sn->count);
    if (!sn->choice || !sn->sel || !sn->count) return MP_FAIL("out of memory for the supernet's bookkeeping");
    for (int l = 0; l < L; l++) sn->choice[l] = d->supernet.choice.n == 0;
    for (int i = 0; i < d->supernet.choice.n; i++) sn->choice[d->supernet.choice.layers[i]] = 1;
    return MP_OK;
}

int supernet_init(run_t *r)
{
    supernet_t *sn = supernet_of(r);
    if (!sn->on) return MP_OK;
    const model_t *m = &r->st.model;
    const int L = r->deck.model.layers, W = sn->window;
    if (!(sn->acc = arena_floats(&r->st.arena, m->alloc, "supernet window gradients"))) return MP_ERR;
    be_zero(&r->st.be, sn->acc, m->alloc * sizeof(float));
    if (m->grad_head) {
        const size_t n = param_table_find(&m->tab, "wte")->numel;
        if (!(sn->acc_head = arena_floats(&r->st.arena, n, "supernet window gradients of the LM head"))) return MP_ERR;
        be_zero(&r->st.be, sn->acc_head, n * sizeof(float));
    }
    sn->held = MP_CALLOC((size_t)L, 1);
    sn->wsel = MP_CALLOC((size_t)W * L, sizeof *sn->wsel);
    sn->wloss = MP_CALLOC((size_t)W, sizeof *sn->wloss), sn->wgnorm = MP_CALLOC((size_t)W, sizeof *sn->wgnorm);
    sn->wcn2 = MP_CALLOC((size_t)W * L, sizeof *sn->wcn2);
    if (!sn->held || !sn->wsel || !sn->wloss || !sn->wgnorm || !sn->wcn2)
        return MP_FAIL("out of memory for the supernet's window");
    for (int b = 0; b < m->tab.nlayers; b++) sn->held[param_block_layer(&m->tab, b)] = 1;
    if (r->lay.grid.size[GRID_SP] > 1) { /* fixed memory too: before the plan */
        for (int i = 0; i < m->tab.count; i++)
            if (m->tab.entries[i].cand < 0) sn->slot_len += m->tab.entries[i].numel;
        if (m->grad_head) sn->slot_len += param_table_find(&m->tab, "wte")->numel;
        if (!(sn->slots = arena_floats(&r->st.arena, (size_t)W * sn->slot_len, "supernet replicas' per-subnet shared gradients")))
            return MP_ERR;
        sn->base = MP_CALLOC((size_t)L * sn->ncand, sizeof *sn->base), sn->rep = MP_CALLOC((size_t)W, sizeof *sn->rep);
        if (!sn->base || !sn->rep) return MP_FAIL("out of memory for the supernet replicas' window");
    }
    return MP_OK;
}

void supernet_free(run_t *r)
{
    supernet_t *sn = supernet_of(r);
    if (!sn) return;
    supernet_home_free(r);
    if (sn->acc) arena_free(&r->st.arena, sn->acc, r->st.model.alloc * sizeof(float));
    if (sn->acc_head) arena_free(&r->st.arena, sn->acc_head, param_table_find(&r->st.model.tab, "wte")->numel * sizeof(float));
    free(sn->choice), free(sn->sel), free(sn->count), free(sn->held), free(sn->wsel);
    free(sn->wloss), free(sn->wgnorm), free(sn->wcn2);
    if (sn->slots) arena_free(&r->st.arena, sn->slots, (size_t)sn->window * sn->slot_len * sizeof(float));
    free(sn->base), free(sn->rep);
    free(sn);
    r->plug_state = NULL;
}

static void supernet_pick(const run_t *r, long t, int *sel)
{
    for (int l = 0; l < r->deck.model.layers; l++)
        sel[l] = supernet_of(r)->choice[l] ? supernet_sample(r->deck.train.seed, t, l, supernet_of(r)->ncand) : -1;
}

/* The steps subnet t gives: one to each non-skip candidate it activates. */
static void supernet_count(run_t *r, const int *sel)
{
    for (int l = 0; l < r->deck.model.layers; l++)
        if (sel[l] >= 0 && !supernet_weightless(&r->deck, sel[l])) supernet_of(r)->count[(size_t)l * supernet_of(r)->ncand + sel[l]]++;
}

void supernet_begin(run_t *r, long t)
{
    if (!supernet_of(r)->on) return;
    supernet_pick(r, t, supernet_of(r)->sel);
    supernet_home_acquire(r, supernet_of(r)->sel); /* without host-resident candidates: model_select */
}

void supernet_resume(run_t *r)
{
    supernet_t *sn = supernet_of(r);
    if (!sn->on) return;
    memset(sn->count, 0, (size_t)r->deck.model.layers * sn->ncand * sizeof *sn->count);
    for (long t = 0; t < r->step; t++) { /* the counters are the sampler's history: replayed */
        supernet_pick(r, t, sn->sel);
        supernet_count(r, sn->sel);
    }
    sn->shared_t = r->adam_t;
}

/* The candidate whose step is being taken (supernet_update sets it). */
static int entry_this(const param_entry_t *e, void *ctx)
{
    const run_t *r = ctx;
    return e->cand >= 0 && e->layer == supernet_of(r)->cur_layer && e->cand == supernet_of(r)->sel[e->layer];
}

static int entry_shared(const param_entry_t *e, void *ctx)
{
    (void)ctx;
    return e->cand < 0;
}

/* AdamW on the entries keep() picks, each its own range of the flat buffers. */
static void supernet_step(run_t *r, const float *grads, int (*keep)(const param_entry_t *, void *), float lr,
                          float scale, int shared)
{
    model_t *m = &r->st.model;
    for (int i = 0; i < m->tab.count; i++) {
        const param_entry_t *e = &m->tab.entries[i];
        if (!keep(e, r)) continue;
        const long adam_t = shared ? supernet_of(r)->shared_t : supernet_of(r)->count[(size_t)e->layer * supernet_of(r)->ncand + e->cand];
        const size_t d = model_entry_at(m, e); /* its table offset, or in its candidate's slot */
        optim_step(&r->st.be, &m->tab, m->params + d, grads + d, m->m + d, m->v + d, &r->optim, lr, adam_t, scale, e->offset,
                   e->offset + e->numel);
    }
}

int supernet_local_block(const model_t *m, int l)
{
    for (int b = 0; b < m->tab.nlayers; b++)
        if (param_block_layer(&m->tab, b) == l) return b;
    return -1;
}

const param_entry_t *supernet_first_entry(const model_t *m, int b, int k)
{
    const param_entry_t *first = NULL;
    for (int i = 0; i < m->tab.count; i++) {
        const param_entry_t *e = &m->tab.entries[i];
        if (e->block == b && e->cand == k && (!first || e->offset < first->offset)) first = e;
    }
    return first;
}


/* Data parallelism: subnet t's global batch is split over the replicas, so its gradient on this stage
 * is the sum of theirs (each already scaled by 1/tokens of the global batch), taken before anything
 * reads it: every replica of the stage then steps the same candidates on the same bits and adds the
 * same bits to the window's sums. The LM head's part of d wte (last stage) is summed apart, as it is
 * kept apart. Every replica of a stage calls this for the same subnets in the same order (the serial
 * loop; the causal lists, alike on every replica of a stage). Collective over the data-parallel
 * group (with supernet replicas, each replica's own: they run different subnets). */
void supernet_replica_sum(const run_layout_t *lay, run_stage_t *st)
{
    model_t *m = &st->model;
    if (!st->dp_on) return;
    const double t0 = perf_now();
    be_allreduce(&st->be, m->grads, m->slots ? m->alloc : m->tab.total, MPI_SUM, lay->grid.comm[GRID_DP],
                 "a subnet's gradient sum over the data-parallel replicas");
    if (m->grad_head)
        be_allreduce(&st->be, m->grad_head, param_table_find(&m->tab, "wte")->numel, MPI_SUM, lay->grid.comm[GRID_DP],
                     "a subnet's LM-head gradient sum over the data-parallel replicas");
    st->dp.comm_seconds += perf_now() - t0;
}

void supernet_subnet_cands(run_t *r, const int *sel, double lr, int stage_only, double *cn2)
{
    model_t *m = &r->st.model;
    supernet_t *sn = supernet_of(r);
    memcpy(sn->sel, sel, (size_t)r->deck.model.layers * sizeof *sel);
    supernet_count(r, sel);
    /* each candidate clipped by its own norm: a block lives on one stage, so a pipeline steps it
     * there right after its backward, whatever the other stages do */
    for (int l = 0; l < r->deck.model.layers; l++) {
        if (stage_only && !sn->held[l]) continue;
        cn2[l] = 0.0;
        if (sel[l] < 0 || supernet_weightless(&r->deck, sel[l])) continue;
        sn->cur_layer = l;
        /* the candidate's range alone, where it lies (a slot with host-resident candidates); a
         * stage without the layer adds zeros to the pipeline's sum */
        size_t c0 = 0, cn = 0, d0 = 0;
        const int b = supernet_local_block(m, l);
        if (b >= 0) {
            param_cand_range(&m->tab, b, sel[l], &c0, &cn);
            if (cn) d0 = model_entry_at(m, supernet_first_entry(m, b, sel[l]));
        }
        cn2[l] = grad_sumsq(r, m->grads + d0, c0, c0 + cn, 0, !stage_only, entry_this);
        supernet_step(r, m->grads, entry_this, (float)lr, optim_clip_scale(sqrt(cn2[l]), r->optim.grad_clip), 0);
    }
}

void supernet_subnet_step(run_t *r, long t, const int *sel, double lr, int stage_only, double *cn2)
{
    model_t *m = &r->st.model;
    supernet_t *sn = supernet_of(r);
    (void)t;
    supernet_replica_sum(&r->lay, &r->st);
    supernet_subnet_cands(r, sel, lr, stage_only, cn2);
    /* the shared tensors join the window's sums; the tied head's part apart from the embedding's */
    for (int i = 0; i < m->tab.count; i++) {
        const param_entry_t *e = &m->tab.entries[i];
        if (e->cand < 0) be_vec_add(&r->st.be, sn->acc + e->offset, sn->acc + e->offset, m->grads + e->offset, e->numel);
    }
    if (sn->acc_head) {
        const size_t n = param_table_find(&m->tab, "wte")->numel;
        be_vec_add(&r->st.be, sn->acc_head, sn->acc_head, m->grad_head, n);
    }
}

void supernet_window_end(run_t *r, long t)
{
    model_t *m = &r->st.model;
    supernet_t *sn = supernet_of(r);
    const param_entry_t *wte = param_table_find(&m->tab, "wte");
    /* the tied embedding's two parts, each summed over the window: added once (a + b, the same bits
     * on one rank and between the first and the last stage, whose own embedding part is zero) */
    if (wte && sn->acc_head) be_vec_add(&r->st.be, sn->acc + wte->offset, sn->acc + wte->offset, sn->acc_head, wte->numel);
    if (wte && r->lay.pp > 1 && r->lay.grid.embed != MPI_COMM_NULL) {
        be_allreduce(&r->st.be, sn->acc + wte->offset, wte->numel, MPI_SUM, r->lay.grid.embed,
                     "the window's tied-embedding gradient sum between the first and the last stage");
    }
    const double snorm = sqrt(grad_sumsq_of(r, sn->acc, entry_shared));
    r->adam_t = ++sn->shared_t;
    supernet_step(r, sn->acc, entry_shared, (float)optim_lr(&r->optim, t), optim_clip_scale(snorm, r->optim.grad_clip), 1);
    be_zero(&r->st.be, sn->acc, m->alloc * sizeof(float));
    if (sn->acc_head) be_zero(&r->st.be, sn->acc_head, wte->numel * sizeof(float));
}

double supernet_update(run_t *r, long t, double lr)
{
    const int L = r->deck.model.layers;
    double *cn2 = supernet_of(r)->wcn2, g2 = 0.0; /* the serial path uses the window's first row as scratch */
    int *sel = supernet_of(r)->wsel;
    memcpy(sel, supernet_of(r)->sel, (size_t)L * sizeof *sel);
    supernet_subnet_step(r, t, sel, lr, 0, cn2);
    supernet_home_release(r, sel, 1);
    /* the next subnets' candidates start coming while this step's shared work and the next
     * forward's first blocks run */
    if (supernet_of(r)->home) {
        const int n = t + 2 < r->deck.train.steps ? 2 : t + 1 < r->deck.train.steps ? 1 : 0;
        int *next = MP_MALLOC((size_t)(n ? n : 1) * L * sizeof *next);
        if (!next) MP_ABORT("out of memory choosing the next subnets' candidates");
        for (int j = 0; j < n; j++) supernet_pick(r, t + 1 + j, next + (size_t)j * L);
        supernet_home_prefetch(r, next, n, L);
        free(next);
    }
    for (int l = 0; l < L; l++) g2 += cn2[l];
    if ((t + 1) % supernet_of(r)->window == 0) supernet_window_end(r, t);
    return sqrt(g2);
}

int supernet_parse_subnet(run_t *r, const char *text, int *sel)
{
    const supernet_t *sn = supernet_of(r);
    const char *p = text;
    for (int l = 0; l < r->deck.model.layers; l++) {
        sel[l] = -1;
        if (!sn->choice[l]) continue;
        char *end;
        const long k = strtol(p, &end, 10);
        if (end == p || k < 0 || k >= sn->ncand)
            return MP_FAIL("--subnet '%s': the choice block of layer %d needs a candidate index from 0 to %d (%s)", text,
                           l, sn->ncand - 1, r->deck.supernet.candidates);
        sel[l] = (int)k;
        p = *end == ',' ? end + 1 : end;
    }
    if (*p) return MP_FAIL("--subnet '%s': more entries than choice blocks (supernet.blocks)", text);
    return MP_OK;
}

void supernet_window_cfg(const run_t *r, causal_cfg_t *c_p, int *layer0, unsigned char *weightless)
{
    const deck_t *d = &r->deck;
    const int pp = r->lay.pp, K = supernet_of(r)->ncand;
    int l0[PARAM_MAX_CHUNKS], nl[PARAM_MAX_CHUNKS];
    for (int s = 0; s < pp; s++) {
        run_stage_chunks(d, s, l0, nl);
        layer0[s] = l0[0];
    }
    layer0[pp] = d->model.layers;
    for (int k = 0; k < K; k++) weightless[k] = (unsigned char)supernet_weightless(d, k);
    *c_p = (causal_cfg_t){.pp = pp, .n = supernet_of(r)->window, .layers = d->model.layers, .ncand = K, .layer0 = layer0,
                          .sel = supernet_of(r)->wsel, .weightless = weightless, .per = r->lay.micro_batches,
                          .serial = d->supernet.schedule == DECK_SUBNETS_SERIAL};
    /* host-resident candidates: with fewer slots than candidates, one slot of each choice block
     * stays free for the next subnet's (every rank knows the deck: the same lists everywhere) */
    int real = 0;
    for (int k = 0; k < K; k++) real += !weightless[k];
    const int slots = r->training && r->lay.grid.size[GRID_SP] == 1 ? supernet_device_slots(d, pp) : 0;
    if (slots && slots < real) c_p->subnets_cap = slots - 1;
}
