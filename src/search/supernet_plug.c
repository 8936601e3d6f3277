/* The supernet plugged into the run and the training loop: the two tables a command offers
 * (run_opts_t.plug, train_ops_t) so that neither the run's set-up nor the loop names a supernet.
 * Every hook here runs only while the plug-in is active: the deck has supernet.enabled. */
#include "supernet.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "deck_model.h"
#include "perf.h"

static int plug_wants(const deck_t *d)
{
    return d->supernet.enabled;
}

const char *supernet_serial_why(const deck_t *d, const run_stage_t *st)
{
    /* The causal lists are 1F1B-like lists of one chunk per stage over MPI messages; the memory
     * policies that rewrite lists (offload, balance) and NCCL's in-order streams (test_causal: 562 of
     * 768 windows meet them) are not built into them. */
    if (deck_chunks_per_stage(d) > 1) return "the interleaved schedule's chunks";
    if (st->p2p_nccl) return "NCCL messages (parallel.p2p=mpi runs causally)";
    for (int l = 0; l < d->model.layers; l++)
        if (run_layer_policy(d, l) == POLICY_BALANCE) return "the balance memory policy";
    return NULL;
}

/* The choice blocks and their candidates in the model; host-resident candidates' device slots in
 * training (eval, export and search hold every candidate); whether windows run causally (training
 * only: eval, export, search and debug-grads run one subnet at a time). */
static int plug_model_cfg(run_t *r, model_cfg_t *cfg)
{
    if (supernet_layers(r) != MP_OK) return MP_ERR;
    supernet_t *sn = supernet_of(r);
    const deck_t *d = &r->deck;
    *cfg = deck_model_cfg(d, sn->choice);
    cfg->cand_slots = r->training && r->lay.grid.size[GRID_SP] == 1 ? supernet_device_slots(d, r->lay.pp) : 0;
    sn->causal = r->training && !supernet_serial_why(&r->deck, &r->st);
    r->unit = (run_unit_t){.on = 1, .window = sn->window, .whole = sn->causal};
    return MP_OK;
}

static int plug_init(run_t *r)
{
    if (supernet_init(r) != MP_OK) return MP_ERR;
    return supernet_home_init(r);
}

static float *plug_home(run_t *r, int which)
{
    return supernet_of(r) ? supernet_home_buf(r, which) : NULL;
}

const run_plug_t supernet_plug = {
    .name = "supernet",
    .wants = plug_wants,
    .model_cfg = plug_model_cfg,
    .init = plug_init,
    .free = supernet_free,
    .home = plug_home,
    .home_flush = supernet_home_flush,
    .home_forget = supernet_home_forget,
};

static void ops_announce(run_t *r)
{
    const supernet_t *sn = supernet_of(r);
    const deck_t *d = &r->deck;
    const char *why = supernet_serial_why(&r->deck, &r->st);
    const int serial = d->supernet.schedule == DECK_SUBNETS_SERIAL;
    char on[64] = "";
    if (r->lay.grid.size[GRID_SP] > 1) snprintf(on, sizeof on, " on %d supernet replicas", r->lay.grid.size[GRID_SP]);
    runlog_printf(&r->files.log, "supernet: %d candidates, window %d, subnets run %s%s%s%s", sn->ncand, sn->window,
                  why ? "one at a time, one executor step each"
                  : serial ? "one at a time through the window's lists"
                           : "causally (several in flight, NASPipe's rule)",
                  why ? ": " : serial ? " (supernet.schedule=serial)" : "", why ? why : "", on);
    supernet_home_announce(r);
}

/* Serial: subnet t's one executor step, then its update. Causal: the whole window at its first
 * subnet; each subnet's figures are read out of it, and the window's time and pipeline idle are
 * dealt out evenly to its subnets, so each progress line's rates are the window's. */
static void ops_step(run_t *r, long t, double lr, const exec_batch_t *src, train_step_t *out)
{
    supernet_t *sn = supernet_of(r);
    const int W = sn->window;
    if (!sn->causal) {
        supernet_begin(r, t);
        out->loss = train_step_grads(r, t, src);
        const double t1 = perf_now();
        PROF(&r->prof, PROF_OPTIMIZER, out->gnorm = supernet_update(r, t, lr));
        trace_span(&r->files.trace, "optimizer", t, -1, t1);
        return;
    }
    if (t % W == 0) {
        const double t0 = perf_now();
        sn->wstart = t0;
        supernet_window(r, t, src);
        sn->wtime = perf_now() - t0, sn->widle = r->st.exec.idle, r->st.exec.idle = 0.0;
    }
    r->st.exec.idle += sn->widle / W;
    out->loss = sn->wloss[t % W], out->gnorm = sn->wgnorm[t % W];
    out->at = sn->wstart + sn->wtime * (double)(t % W + 1) / W;
}

/* The evaluation runs the last subnet's candidates (host-resident: brought back if they left their
 * slots). */
static void ops_eval_begin(run_t *r)
{
    supernet_home_acquire(r, r->st.model.sel);
}

static void ops_eval_end(run_t *r)
{
    supernet_home_release(r, r->st.model.sel, 0);
}

static int ops_select(run_t *r, const char *text)
{
    supernet_t *sn = supernet_of(r);
    if (!text) return MP_FAIL("eval of a supernet evaluates one subnet: give --subnet (e.g. 0,2,1,0)");
    if (supernet_parse_subnet(r, text, sn->sel) != MP_OK) return MP_ERR;
    model_select(&r->st.model, sn->sel);
    return MP_OK;
}

const train_ops_t supernet_train_ops = {
    .announce = ops_announce,
    .resume = supernet_resume,
    .step = ops_step,
    .eval_begin = ops_eval_begin,
    .eval_end = ops_eval_end,
    .report = supernet_home_report,
    .begin = supernet_begin,
    .select = ops_select,
};
