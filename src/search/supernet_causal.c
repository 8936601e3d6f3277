/* A supernet's window run causally (NASPipe's causal synchronous parallelism, ARCHITECTURE.md §4):
 * every rank builds the same lists for the window's subnets (causal.h; the sampler makes future
 * subnets known to all), runs its own stage's through the executor, and steps a subnet's candidates
 * of the stage right after that subnet's last backward there. Data-parallel replicas of a stage run
 * the same list on their shares of each subnet's batch and sum the subnet's gradients there, before
 * the step (supernet_subnet_step). The arithmetic is the serial path's
 * (supernet.c) operation for operation, so the results are the same bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "causal.h"
#include "memlists.h"
#include "check.h"
#include "optim.h"
#include "supernet.h"
#include "sim.h"
#include "train.h"

/* Host-resident candidates (supernet_home.c): the window's subnets in the order of their first
 * forward on this stage, and which have their candidates in slots. */
typedef struct {
    int *order, n, next;     /* order[next ..] have not started here */
    unsigned char *started;
    int *sels;               /* scratch: the candidates of the subnets still to come, in that order */
} window_home_t;

static void window_select(void *ctx, long t)
{
    run_t *r = ctx;
    const int j = (int)(t - supernet_of(r)->t0);
    const int *sel = supernet_of(r)->wsel + (size_t)j * r->deck.model.layers;
    window_home_t *wh = supernet_of(r)->home_window;
    if (wh && !wh->started[j]) { /* its first instruction here */
        wh->started[j] = 1;
        supernet_home_acquire(r, sel);
        return;
    }
    model_select(&r->st.model, sel);
}

/* The candidates of the window's subnets that have not started here, in the order they will. */
static void window_prefetch(run_t *r)
{
    window_home_t *wh = supernet_of(r)->home_window;
    const int L = r->deck.model.layers;
    int n = 0;
    for (int i = 0; i < wh->n; i++) {
        const int j = wh->order[i];
        if (!wh->started[j]) memcpy(wh->sels + (size_t)n++ * L, supernet_of(r)->wsel + (size_t)j * L, (size_t)L * sizeof(int));
    }
    supernet_home_prefetch(r, wh->sels, n, L);
}

static void window_step(void *ctx, long t)
{
    run_t *r = ctx;
    const size_t row = (size_t)(t - supernet_of(r)->t0) * r->deck.model.layers;
    PROF(&r->prof, PROF_OPTIMIZER, supernet_subnet_step(r, t, supernet_of(r)->wsel + row, optim_lr(&r->optim, t), 1, supernet_of(r)->wcn2 + row));
    model_grads_zero(&r->st.model); /* the next backward here is the next subnet's */
    if (supernet_of(r)->home_window) {
        supernet_home_release(r, supernet_of(r)->wsel + row, 1);
        window_prefetch(r);
    }
}

/* The window's host-resident bookkeeping from this stage's list (NULL without homes). */
static window_home_t *window_home(run_t *r, const instr_list_t *list)
{
    if (!supernet_of(r)->home) return NULL;
    const int W = supernet_of(r)->window, L = r->deck.model.layers, per = r->lay.micro_batches > 1 ? r->lay.micro_batches : 1;
    window_home_t *wh = MP_CALLOC(1, sizeof *wh);
    if (!wh || !(wh->order = MP_MALLOC((size_t)W * sizeof *wh->order)) || !(wh->started = MP_CALLOC((size_t)W, 1)) ||
        !(wh->sels = MP_MALLOC((size_t)W * L * sizeof *wh->sels)))
        MP_ABORT("out of memory for the window's candidate bookkeeping");
    unsigned char *seen = wh->started; /* borrowed while the order is read off the list */
    for (int i = 0; i < list->n; i++) {
        const instr_t *in = &list->ins[i];
        if (in->op != OP_FORWARD || seen[in->mb / per]) continue;
        seen[in->mb / per] = 1;
        wh->order[wh->n++] = in->mb / per;
    }
    memset(wh->started, 0, (size_t)W);
    return wh;
}

static void window_home_free(window_home_t *wh)
{
    if (!wh) return;
    free(wh->order), free(wh->started), free(wh->sels);
    free(wh);
}

/* This stage's list of the window: every stage's is built (they depend on each other's timing), the
 * others dropped. MP_OK or MP_ERR (allocation). */
static int window_list(run_t *r, instr_list_t *mine)
{
    const int pp = r->lay.pp;
    int layer0[SIM_MAX_STAGES + 1];
    unsigned char weightless[DECK_LIST_MAX];
    causal_cfg_t c;
    supernet_window_cfg(r, &c, layer0, weightless);
    instr_list_t lists[SIM_MAX_STAGES];
    causal_result_t res;
    if (causal_build(&c, lists, &res) != MP_OK) return MP_FAIL("out of memory building the window's causal lists");
    /* the bubble the causal order leaves in unit costs (forward 1, backward 2), for metrics.jsonl */
    r->st.exec.theory = res.makespan > 0 ? 1.0 - 3.0 * c.n * (c.per > 0 ? c.per : 1) / res.makespan : 0.0;
    *mine = lists[r->lay.stage];
    lists[r->lay.stage] = (instr_list_t){0};
    sim_free_lists(lists, pp);
    /* offload: the same OFFLOAD/PREFETCH pass as a step's list; the window keeps at most 1F1B's
     * micro-batches in flight per stage, so its device peak fits the plan's movable buffers */
    if (run_stage_offloads(&r->st)) {
        if (sched_add_offload(mine, r->deck.memory.prefetch) != MP_OK) {
            sched_free(mine);
            return MP_FAIL("out of memory adding offloads to the window's list");
        }
        const int peak = sched_list_device_peak(mine, 0);
        if (peak > r->st.plan.npool)
            MP_ABORT("the window of subnet %ld needs %d movable buffers on stage %d, the plan has %d (a planning bug)",
                     supernet_of(r)->t0, peak, r->lay.stage, r->st.plan.npool);
    }
    return MP_OK;
}

void supernet_window(run_t *r, long t0, const exec_batch_t *src)
{
    supernet_t *sn = supernet_of(r);
    const int W = sn->window, L = r->deck.model.layers;
    const double tokens = (double)r->deck.train.batch * r->deck.model.seq_len;
    sn->t0 = t0;
    for (int j = 0; j < W; j++)
        for (int l = 0; l < L; l++)
            sn->wsel[(size_t)j * L + l] = sn->choice[l] ? supernet_sample(r->deck.train.seed, t0 + j, l, sn->ncand) : -1;
    memset(sn->wcn2, 0, (size_t)W * L * sizeof *sn->wcn2);
    const int sp = r->lay.grid.size[GRID_SP];
    if (sp > 1) { /* replicas: the window's end (the shared step) is in their lists */
        supernet_sp_window(r, src);
    } else {
        instr_list_t list;
        if (window_list(r, &list) != MP_OK) MP_ABORT("the supernet window of subnet %ld could not be built", t0);
        const exec_subnets_t subs = {window_select, window_step, r};
        if ((supernet_of(r)->home_window = window_home(r, &list))) window_prefetch(r);
        exec_window(&r->st.exec, t0, &list, (float)(1.0 / tokens), src, &subs);
        window_home_free(supernet_of(r)->home_window);
        supernet_of(r)->home_window = NULL;
        sched_free(&list);
    }
    /* losses from the last stage of the subnet's replica, norms from each candidate's stage there:
     * every other rank adds zeros */
    memcpy(sn->wloss, r->st.exec.sub_loss, (size_t)W * sizeof *sn->wloss);
    if (r->lay.pp > 1) {
        wait_allreduce_sum(&r->lay.wait, sn->wloss, W, MPI_DOUBLE, r->lay.grid.comm[GRID_PP], "the window's subnet losses");
        wait_allreduce_sum(&r->lay.wait, sn->wcn2, W * L, MPI_DOUBLE, r->lay.grid.comm[GRID_PP], "the window's candidate norms");
    }
    if (sp > 1) {
        wait_allreduce_sum(&r->lay.wait, sn->wloss, W, MPI_DOUBLE, r->lay.grid.comm[GRID_SP], "the window's subnet losses over "
                           "the supernet replicas");
        wait_allreduce_sum(&r->lay.wait, sn->wcn2, W * L, MPI_DOUBLE, r->lay.grid.comm[GRID_SP], "the window's candidate norms "
                           "over the supernet replicas");
    }
    /* each replica ran its share of every subnet's batch: the losses are their sum (the norms were taken
     * after the gradients' sum over the replicas, the same on each) */
    if (r->st.dp_on)
        wait_allreduce_sum(&r->lay.wait, sn->wloss, W, MPI_DOUBLE, r->lay.grid.comm[GRID_DP], "the window's subnet losses over the "
                           "replicas");
    for (int j = 0; j < W; j++) {
        double g2 = 0.0;
        for (int l = 0; l < L; l++) g2 += sn->wcn2[(size_t)j * L + l];
        sn->wloss[j] /= tokens, sn->wgnorm[j] = sqrt(g2);
    }
    if (sp == 1) PROF(&r->prof, PROF_OPTIMIZER, supernet_window_end(r, t0 + W - 1));
}
