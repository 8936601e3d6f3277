/* The single-rank training loop. A step is train.batch sequences run as batch ÷ micro_batch
 * micro-batches whose gradients accumulate in a fixed order: the reference every layout matches. */
#include "train.h"

#include <hdf5.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ckpt.h"
#include "energy.h"
#include "grad_norm.h"
#include "h5util.h"
#include "optim.h"
#include "perf.h"
#include "publish.h"
#include "autosplit.h"
#include "migrate.h"
#include "recovery.h"
#include "run_ckpt.h"
#include "signals.h"
#include "sim.h"
#include "train_report.h"

/* Fills micro-batch mb of step t on this replica. Replica q of dp takes the global samples
 * [q·batch/dp, (q+1)·batch/dp), micro-batch mb of them in order: every sample of the global batch
 * is used once whatever the layout, and sample i is always the same window. (A supernet replica, sp,
 * runs whole subnets: all of them.) */
static void train_fill(void *ctx, acts_t *a, long t, int mb)
{
    run_t *r = ctx;
    const int B = a->B, T = r->deck.model.seq_len;
    const long base = (long)r->lay.grid.coord[GRID_DP] * r->lay.replica_batch;
    for (int b = 0; b < B; b++) {
        long i = base + (long)mb * B + b;
        data_train_sample(&r->data, r->deck.train.seed, t, i, r->deck.train.batch, T, a->inputs + (size_t)b * T,
                          a->targets + (size_t)b * T);
    }
}

exec_batch_t train_batches(run_t *r)
{
    return (exec_batch_t){train_fill, r};
}

/* Data parallelism: a bucket's gradients are final on the last micro-batch; start its sum. */
static void train_grads_ready(void *ctx, int layer)
{
    run_t *r = ctx;
    size_t off, n;
    param_table_range(&r->st.model.tab, layer, &off, &n);
    if (n) dp_bucket_start(&r->st.dp, r->st.model.grads, off, n);
    dp_progress(&r->st.dp);
}

/* Whether a checkpoint is due once `step` steps are done: every checkpoint.every, and the last step's
 * under checkpoint.final (the loop after each step, and a recovery that lands on such a step). */
static int train_ckpt_due(const deck_t *d, long step)
{
    return (step >= d->train.steps && d->checkpoint.final) || (d->checkpoint.every > 0 && step % d->checkpoint.every == 0);
}

/* Whether the loop evaluates, checkpoints, stops or may move layers (pipeline.replan_every) after step t
 * (2bw drains its pipeline there). */
static int train_boundary(const run_t *r, long t)
{
    const deck_t *d = &r->deck;
    const long next = t + 1;
    /* 2bw with recovery.log: every step drains, so every step's end is a state a survivor's snapshot
     * holds whole (no next batch's forwards in flight); the same bits, since each micro-batch reads
     * the same weight version either way (test_zero_loss), at the price of the flush */
    if (d->recovery.log && sched_kind_versions(d->parallel.schedule_kind) == 2) return 1;
    return r->stop || next >= d->train.steps || (d->train.eval_every > 0 && next % d->train.eval_every == 0) ||
           (d->checkpoint.every > 0 && next % d->checkpoint.every == 0) ||
           (d->pipeline.replan_every > 0 && next % d->pipeline.replan_every == 0); /* a move may follow */
}

/* The step's buckets after its backward: every one when none overlapped it (in the same order), then
 * the embeddings' (final once the tied sum is made), and the wait for them all. Their pieces are the
 * same MPI calls either way, so the sums are the same bits (test_dp). */
static void train_buckets_rest(run_t *r, int overlapped)
{
    if (!overlapped) {
        train_grads_ready(r, PARAM_RANGE_FINAL);
        for (int i = r->st.model.tab.nlayers - 1; i >= 0; i--) train_grads_ready(r, param_block_layer(&r->st.model.tab, i));
    }
    train_grads_ready(r, PARAM_RANGE_EMBED);
    dp_buckets_wait(&r->st.dp);
}

double train_step_grads(run_t *r, long t, const exec_batch_t *src)
{
    const double tokens = (double)r->deck.train.batch * r->deck.model.seq_len;
    /* a plug-in sums over the replicas itself (a supernet: the buckets would leave out the LM head's
     * part of d wte, which it keeps apart in grad_head); ZeRO-1's buckets reduce-scatter (dp.h) */
    const int buckets = r->st.dp_on && !r->plug;
    const int overlap = buckets && r->deck.parallel.overlap;
    const model_ready_t ready = {train_grads_ready, r};
    double loss = exec_step(&r->st.exec, t, (float)(1.0 / tokens), src, overlap ? &ready : NULL, train_boundary(r, t));
    if (r->lay.pp > 1)
        wait_allreduce_sum(&r->lay.wait, &loss, 1, MPI_DOUBLE, r->lay.grid.comm[GRID_PP], "the loss from the last stage");
    if (buckets) {
        double t0 = perf_now();
        train_buckets_rest(r, overlap);
        trace_span(&r->files.trace, "gradient all-reduce wait", t, -1, t0);
    }
    if (r->st.dp_on) wait_allreduce_sum(&r->lay.wait, &loss, 1, MPI_DOUBLE, r->lay.grid.replica, "the loss all-reduce");
    return loss / tokens;
}

/* AdamW's step of [s0, s1) clipped by the gradient norm gnorm: the plain step's, and a replay's with
 * the norm the survivors logged (recovery.h). */
static void train_apply(run_t *r, double lr, double gnorm, size_t s0, size_t s1)
{
    model_t *m = &r->st.model;
    r->adam_t++;
    model_versions_advance(m); /* 2bw: W(t) becomes the previous version; params become W(t+1) */
    optim_step(&r->st.be, &m->tab, m->params + s0, m->grads, m->m, m->v, &r->optim, (float)lr, r->adam_t,
               optim_clip_scale(gnorm, r->optim.grad_clip), s0, s1);
}

/* Global gradient norm, clipping and AdamW; with ZeRO-1 on this replica's shard, then the
 * parameters are all-gathered. Returns the gradient norm before clipping. */
static double train_update(run_t *r, double lr)
{
    model_t *m = &r->st.model;
    size_t s0 = 0, s1 = m->tab.total;
    const int zero = r->st.dp_on && r->deck.parallel.zero;
    if (zero) {
        /* the step's buckets reduce-scattered the gradients into the shard (train_step_grads), but
         * where a plug-in summed them itself */
        if (r->plug) dp_reduce_scatter(&r->st.dp, m->grads);
        else dp_shard_take(&r->st.dp, m->grads);
        dp_shard_range(&r->st.dp, &s0, &s1);
    }
    const double gnorm = sqrt(grad_sumsq(r, m->grads, s0, s1, zero, 1, NULL));
    train_apply(r, lr, gnorm, s0, s1);
    if (zero) dp_allgather(&r->st.dp, m->params);
    return gnorm;
}

/* debug.fail_at = RANK:STEP:replay: this rank dies in the recovery if its replay covers STEP (steps
 * counted as the log counts them): a replaying rank as it begins that step (t, the steps done), one
 * that does not (t < 0) as it starts waiting for the replay. :replay-stop: it stops there instead
 * (SIGSTOP, for good: its peers must find it by their deadline; its pid said for whoever ends it). */
static void train_fail_in_replay(const run_t *r, const recovery_plan_t *p, long t)
{
    const deck_fail_at_t *f = &r->deck.debug.fail;
    const int stop = f->mode == DECK_FAIL_REPLAY_STOP;
    if ((f->mode != DECK_FAIL_REPLAY && !stop) || !deck_fail_names(f, r->lay.rank) || f->step <= p->from ||
        f->step > p->target || (t >= 0 && f->step != t + 1))
        return;
    fprintf(stderr, "mindpipe: debug.fail_at=%s: rank %d %s %s step %ld (pid %ld)\n", r->deck.debug.fail_at, r->lay.rank,
            stop ? "stops (SIGSTOP)" : "kills itself", t >= 0 ? "as its replay begins" : "waiting for the replay of", f->step,
            (long)getpid());
    fflush(stderr);
    if (stop) mp_stop_for_good();
    raise(SIGKILL);
}

/* debug.fail_at = RANK:STEP:recovered: this rank dies as the recovery to STEP (the survivors' step)
 * ends, past recovery_finish, before the start-up's last agreements (the window recovery_done closes).
 * :recovered-stop: it stops there instead (SIGSTOP, for good), so its peers meet it inside those
 * agreements, which end at parallel.timeout (run_agree_wait). */
static void train_fail_recovered(const run_t *r, const recovery_plan_t *p)
{
    const deck_fail_at_t *f = &r->deck.debug.fail;
    const int stop = f->mode == DECK_FAIL_RECOVERED_STOP;
    if ((f->mode != DECK_FAIL_RECOVERED && !stop) || !deck_fail_names(f, r->lay.rank) || f->step != p->target) return;
    fprintf(stderr, "mindpipe: debug.fail_at=%s: rank %d %s as the recovery to step %ld ends (pid %ld)\n",
            r->deck.debug.fail_at, r->lay.rank, stop ? "stops (SIGSTOP)" : "kills itself", p->target, (long)getpid());
    fflush(stderr);
    if (stop) mp_stop_for_good();
    raise(SIGKILL);
}

/* recovery: this rank's steps p->from .. p->target − 1 alone, every message from its neighbours'
 * logs and each step's gradient norm from theirs; its own sends logged again (recovery.h). */
static int train_replay(run_t *r, const recovery_plan_t *p, double *secs_p)
{
    const double t0 = perf_now(), tokens = (double)r->deck.train.batch * r->deck.model.seq_len;
    const exec_batch_t src = train_batches(r);
    if (recovery_open(r) != MP_OK) return MP_ERR;
    recovery_replay_mode(r, 1);
    /* a group (tp peers, ZeRO-1's replicas) runs every step's collectives together: a member that met
     * a damaged message goes on with zeros to the last step, its result void (recovery_finish agrees) */
    model_t *m = &r->st.model;
    const int zero = r->st.dp_on && r->deck.parallel.zero;
    for (long t = p->from; t < p->target && (p->group || !recovery_replay_failed(r)); t++) {
        double v[2] = {0.0, 0.0};
        train_fail_in_replay(r, p, t);
        if (recovery_replay_scalars(r, t, v) != MP_OK && !p->group) break;
        exec_step(&r->st.exec, t, (float)(1.0 / tokens), &src, NULL, 1);
        if (recovery_replay_failed(r) && !p->group) break;
        size_t s0 = 0, s1 = m->tab.total;
        if (zero) { /* the replicas' reduce-scatter as the run made it, then this replica's shard */
            train_buckets_rest(r, 0);
            dp_shard_take(&r->st.dp, m->grads);
            dp_shard_range(&r->st.dp, &s0, &s1);
        } else if (r->st.dp_on && !r->plug) { /* every replica replays (recovery.c): the all-reduce as the run made it */
            train_buckets_rest(r, 0);
        }
        train_apply(r, optim_lr(&r->optim, t), v[0], s0, s1);
        if (zero) dp_allgather(&r->st.dp, m->params);
        r->step = t + 1;
        recovery_step_done(r, t, v[0], v[1]);
    }
    recovery_replay_mode(r, 0);
    *secs_p = perf_now() - t0;
    if (recovery_replay_failed(r))
        return MP_FAIL("replay: rank %d stopped at step %ld: a message it needed is missing or damaged (above)", r->lay.rank,
                       r->step + 1);
    return MP_OK;
}

/* Mean next-token loss over the first eval_windows windows of /val (stride T from 0). */
double train_val_loss(run_t *r)
{
    const int B = r->st.acts.B, T = r->deck.model.seq_len;
    long n = r->deck.train.eval_windows, avail = data_val_windows(&r->data, T);
    if (n > avail) n = avail;
    if (n <= 0) return NAN;
    double sum = 0.0;
    for (long w0 = 0; w0 < n; w0 += B) {
        int valid = (int)(n - w0 < B ? n - w0 : B);
        for (int b = 0; b < B; b++) /* rows past the end repeat the last window; not counted */
            data_val_sample(&r->data, w0 + (b < valid ? b : valid - 1), T, r->st.acts.inputs + (size_t)b * T,
                            r->st.acts.targets + (size_t)b * T);
        sum += exec_forward_only(&r->st.exec, valid);
    }
    if (r->lay.pp > 1) wait_allreduce_sum(&r->lay.wait, &sum, 1, MPI_DOUBLE, r->lay.grid.comm[GRID_PP], "the validation loss");
    return sum / ((double)n * T);
}

/* debug.fail_at = RANK:STEP[:write|:stall|:hang] (parsed by the deck): how this rank fails in the step
 * that begins at t steps done, the log's step t + 1 (STEP counts as the log does). kill dies at its
 * start; hang stops answering there (SIGSTOP), which its peers must turn into a timeout naming it;
 * write dies, stall stops, midway through writing the checkpoint of that step. NONE: not here. */
static deck_fail_mode_t train_fail_mode(const deck_t *d, const run_layout_t *lay, long t)
{
    const deck_fail_at_t *f = &d->debug.fail;
    return deck_fail_names(f, lay->rank) && f->step == t + 1 ? f->mode : DECK_FAIL_NONE;
}

typedef struct {
    double t_last;    /* time of the last progress line */
    long step_last;   /* steps completed then */
    long moved_step;  /* step of the last metrics line: the per-step transfer figures average since */
    double t_start;   /* when this process began training, and the step it began at: elapsed time and */
    long step_start;  /* the ETA (the average pace since, evaluations and checkpoints included) */
    int moves;        /* live migration's moves so far (the metrics line) */
} progress_t;

/* Seconds as "42s", "3m07s" or "2h05m" for the progress line. */
static void train_duration(double s, char *buf, size_t n)
{
    const long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t < 60) snprintf(buf, n, "%lds", t);
    else if (t < 3600) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%ldh%02ldm", t / 3600, t % 3600 / 60);
}

static void train_log_step(run_t *r, progress_t *pg, double loss, double lr, double gnorm, double val_loss, double now)
{
    const deck_t *d = &r->deck;
    double dt = now - pg->t_last;
    double tok_s = dt > 0 ? (double)(r->step - pg->step_last) * d->train.batch * d->model.seq_len / dt : 0.0;
    /* bubble: the share of this interval rank 0 spent blocked on pipeline receives */
    double bubble = dt > 0 ? r->st.exec.idle / dt : 0.0, theory = r->st.exec.theory;
    r->st.exec.idle = 0.0;
    double mfu = r->peak_gflops > 0 ? tok_s * model_flops_per_token(&r->st.model.cfg) / (r->peak_gflops * 1e9) : 0.0;
    pg->t_last = now;
    pg->step_last = r->step;
    char val[64] = "", el[32], eta[32];
    if (!isnan(val_loss)) snprintf(val, sizeof val, " | val_loss %.4f", val_loss);
    const double elapsed = now - pg->t_start, done = (double)(r->step - pg->step_start);
    const double eta_s = done > 0 ? elapsed / done * (double)(d->train.steps - r->step) : NAN;
    train_duration(elapsed, el, sizeof el);
    if (isnan(eta_s)) snprintf(eta, sizeof eta, "?");
    else train_duration(eta_s, eta, sizeof eta);
    runlog_printf(&r->files.log, "step %6ld/%d | loss %.4f%s | lr %.3e | grad_norm %.3f | %.0f tok/s | mfu %.1f%% | mem %.1f MiB"
                  " | elapsed %s | eta %s",
                  r->step, d->train.steps, loss, val, lr, gnorm, tok_s, 100.0 * mfu,
                  (double)r->st.arena.peak / 1048576.0, el, eta);
    /* per stage (the pp group of rank 0), gathered for the metrics line: peak memory, its plan, the
     * activations' share of the peak, the most micro-batches stashed and offload buffers in use,
     * host memory held for offloads and balance, and bytes moved (offload, balance) and seconds
     * waited for them per step since the last line */
    /* a unit run whole (a causal supernet's window) moves its bytes when it runs, at its first step:
     * per step is then per step of the units run since the last line */
    const long W = r->unit.whole ? r->unit.window : 1, ran = (r->step + W - 1) / W * W - (pg->moved_step + W - 1) / W * W;
    const long nsteps = ran > 0 ? ran : 1;
    const stash_t *st = &r->st.exec.stash;
    enum { NM = 11 };
    /* activations: the peak above what the plan calls fixed (weights, gradients, optimizer state) */
    const double act_peak = r->st.arena.peak > r->st.plan.fixed ? (double)(r->st.arena.peak - r->st.plan.fixed) : 0.0;
    double mine[NM] = {(double)r->st.arena.peak, (double)r->st.plan.total, act_peak, exec_stash_peak(&r->st.exec),
                       exec_pool_peak(&r->st.exec),
                       (double)st->mov_bytes * (st->mov_bytes ? st->nslots : 0) + (double)r->st.exec.bal.host_bytes,
                       st->moved.offloaded / (double)nsteps, st->moved.prefetched / (double)nsteps,
                       st->moved.evicted / (double)nsteps, st->moved.accepted / (double)nsteps,
                       st->moved.wait_s / (double)nsteps};
    if (r->step % W == 0) { /* mid-window, the next subnet's line reports the same window */
        r->st.exec.stash.moved = (stash_moved_t){0};
        pg->moved_step = r->step;
    }
    double all[NM * SIM_MAX_STAGES] = {0};
    MPI_Request q;
    MPI_CHECK(MPI_Igather(mine, NM, MPI_DOUBLE, all, NM, MPI_DOUBLE, 0, r->lay.grid.comm[GRID_PP], &q));
    wait_all_over(&r->lay.wait, 1, &q, r->lay.grid.comm[GRID_PP], "the per-stage memory report");
    static const char *const names[NM] = {"peak_mem_bytes", "planned_mem_bytes", "activation_peak_bytes", "stash_peak",
                                          "offload_buffers_peak", "host_bytes", "offloaded_bytes_per_step",
                                          "prefetched_bytes_per_step", "evicted_bytes_per_step",
                                          "accepted_bytes_per_step", "transfer_wait_s_per_step"};
    char per_stage[NM * (SIM_MAX_STAGES * 24 + 40)] = "";
    for (int k = 0, o = 0; k < NM; k++) {
        o += snprintf(per_stage + o, sizeof per_stage - (size_t)o, ",\"%s\":[", names[k]);
        for (int s = 0; s < r->lay.pp && s < SIM_MAX_STAGES; s++)
            o += snprintf(per_stage + o, sizeof per_stage - (size_t)o, k == NM - 1 ? "%s%.6f" : "%s%.0f", s ? "," : "",
                          all[NM * s + k]);
        o += snprintf(per_stage + o, sizeof per_stage - (size_t)o, "]");
    }
    char valj[64] = "", etaj[48] = "", split[SIM_MAX_STAGES * 12 + 64] = "";
    if (d->pipeline.replan_every > 0) { /* live migration: the split in force after this step, and moves so far */
        int sizes[SIM_MAX_STAGES];
        migrate_sizes(&r->deck, &r->lay, sizes);
        int o = snprintf(split, sizeof split, ",\"pipeline_layers\":[");
        for (int s = 0; s < r->lay.pp && s < SIM_MAX_STAGES; s++)
            o += snprintf(split + o, sizeof split - (size_t)o, "%s%d", s ? "," : "", sizes[s]);
        snprintf(split + o, sizeof split - (size_t)o, "],\"layer_moves\":%d", pg->moves);
    }
    if (!isnan(val_loss)) snprintf(valj, sizeof valj, ",\"val_loss\":%.17g", val_loss);
    if (!isnan(eta_s)) snprintf(etaj, sizeof etaj, ",\"eta_s\":%.1f", eta_s);
    runlog_metrics(&r->files.log, "\"step\":%ld,\"loss\":%.17g%s,\"lr\":%.17g,\"grad_norm\":%.17g,\"tokens_per_s\":%.1f,"
                   "\"mfu\":%.5f%s,\"bubble\":%.4f,\"bubble_theory\":%.4f,\"elapsed_s\":%.3f%s%s",
                   r->step, loss, valj, lr, gnorm, tok_s, mfu, per_stage, bubble, theory, elapsed, etaj, split);
}

/* [debug] fail_at = RANK:STEP: that rank dies (SIGKILL, no chance to clean up) as step STEP
 * begins, as a node failure would take it; RANK:STEP:hang stops it (SIGSTOP) once the step's
 * stop-request agreement is behind it, so its pipeline peers wait for it: for the recovery tests. */
static void train_fail_at(const deck_t *d, const run_layout_t *lay, long t, int agreed)
{
    const deck_fail_mode_t mode = train_fail_mode(d, lay, t);
    if (mode == (agreed ? DECK_FAIL_HANG : DECK_FAIL_KILL)) {
        if (t < 0)
            fprintf(stderr, "mindpipe: debug.fail_at=%s: rank %d kills itself as its start-up ends\n",
                    d->debug.fail_at, lay->rank);
        else
            fprintf(stderr, "mindpipe: debug.fail_at=%s: rank %d %s step %ld\n", d->debug.fail_at, lay->rank,
                    agreed ? "stops answering (SIGSTOP) in" : "kills itself as it begins", t + 1);
        fflush(stderr);
        if (agreed) mp_stop_for_good();
        raise(SIGKILL);
    }
}

/* The checkpoint of r->step steps (collective), the boundary log paused around its HDF5 calls and
 * pruned after it: a replay starts from it. */
static int train_checkpoint(run_t *r, int fail_midway)
{
    recovery_pause(r);
    const int rc = run_ckpt_write(r, fail_midway);
    recovery_resume(r);
    if (rc == MP_OK) recovery_prune(r);
    return rc;
}

/* MP_OK, MP_ERR, or MP_STOPPED: a stop signal arrived; the checkpoint of the last step is written. */
#define MP_STOPPED 2
static int train_loop(run_t *r, const train_ops_t *ops, migrate_t *mg)
{
    const deck_t *d = &r->deck;
    progress_t pg = {perf_now(), r->step, r->step, perf_now(), r->step, 0};
    const long first = r->step;
    const int W = r->unit.window; /* 1 without a plug-in */
    const exec_batch_t src = train_batches(r);
    int stop_wanted = 0;
    while (r->step < d->train.steps) {
        long t = r->step;
        train_fail_at(&r->deck, &r->lay, t, 0);
        /* every rank agrees to stop at the same step, whichever got the signal */
        int sig = signals_pending();
        wait_allreduce(&r->lay.wait, &sig, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, "the stop-request agreement");
        train_fail_at(&r->deck, &r->lay, t, 1);
        /* a unit (a supernet's window) stops where it ends: a checkpoint holds no half-summed window */
        stop_wanted |= sig != 0;
        r->stop = stop_wanted && (t + 1) % W == 0;
        /* debug.kernel_times: the step's kernels, from the log's step kernel_times on (evaluations and
         * checkpoints after the step are not timed, so every timed step makes the same calls) */
        const int timed = d->debug.kernel_times > 0 && t + 1 >= d->debug.kernel_times;
        if (timed) be_ktime_step_begin(&r->st.be);
        double t0 = perf_now();
        const double lr = optim_lr(&r->optim, t);
        train_step_t st = {0.0, 0.0, NAN};
        if (ops && ops->step) {
            ops->step(r, t, lr, &src, &st);
        } else {
            st.loss = train_step_grads(r, t, &src);
            double t1 = perf_now();
            PROF(&r->prof, PROF_OPTIMIZER, st.gnorm = train_update(r, lr));
            trace_span(&r->files.trace, "optimizer", t, -1, t1);
            recovery_step_done(r, t, st.gnorm, st.loss); /* the step whole in the boundary log */
        }
        if (timed) be_ktime_step_end(&r->st.be);
        r->prof.total += perf_now() - t0;
        r->prof.steps++;
        if (t == r->files.dump.step) {
            recovery_pause(r); /* the thread rule: the log's writer stays out of HDF5 */
            const int rc = actdump_write(&r->files.dump, MPI_COMM_WORLD, r->files.out_dir, &r->lay.wait);
            recovery_resume(r);
            if (rc != MP_OK) return MP_ERR;
        }
        if (t == first + (r->unit.whole ? W - 1 : 0)) { /* the first step (unit) warms caches and pools */
            memset(&r->prof, 0, sizeof r->prof);
            r->st.dp.comm_seconds = 0.0;
            be_scratch_freeze(&r->st.be); /* no device allocation after it (backend.h) */
        }
        r->step++;
        int last = r->step == d->train.steps;
        /* a unit evaluates at its end when an evaluation falls inside it: a supernet's shared tensors
         * have not moved before */
        int eval = last || (d->train.eval_every > 0 && r->step % W == 0 &&
                            r->step / d->train.eval_every != (r->step - W) / d->train.eval_every);
        double t2 = perf_now(), val = NAN;
        if (eval) {
            if (ops && ops->eval_begin) ops->eval_begin(r);
            val = train_val_loss(r);
            if (ops && ops->eval_end) ops->eval_end(r);
            trace_span(&r->files.trace, "evaluation", t, -1, t2);
        }
        pg.moves = mg->moves;
        if (eval || last || r->step == 1 || r->step % d->train.log_every == 0)
            train_log_step(r, &pg, st.loss, lr, st.gnorm, val, isnan(st.at) ? perf_now() : st.at);
        if (!isfinite(st.loss)) return MP_FAIL("loss is %f at step %ld: diverged (lower train.lr?)", st.loss, r->step);
        const deck_fail_mode_t fm = train_fail_mode(&r->deck, &r->lay, t);
        const int fail_midway = fm == DECK_FAIL_WRITE ? CKPT_FAIL_KILL : fm == DECK_FAIL_STALL ? CKPT_FAIL_STOP : 0;
        if (train_ckpt_due(d, r->step) || r->stop) {
            double t3 = perf_now();
            if (train_checkpoint(r, fail_midway) != MP_OK) return MP_ERR;
            trace_span(&r->files.trace, "checkpoint", t, -1, t3);
        }
        if (r->stop && !last) {
            runlog_printf(&r->files.log, "stop requested by signal %d: checkpoint of step %ld written; exiting with status %d "
                          "(resume with --resume auto)", sig, r->step, MP_EXIT_REQUEUE);
            return MP_STOPPED;
        }
        migrate_after_step(r, mg); /* on a drained pipeline, after the step's checkpoint (which holds the old split) */
    }
    return MP_OK;
}

/* The profile as a table in the log and, by rank 0, as profile.json (validation/bench reads it),
 * published (publish.h: never through a link). MP_OK, or MP_ERR naming the file. */
static int train_report_profile(run_t *r)
{
    const prof_t *p = &r->prof;
    if (p->steps == 0 || p->total <= 0) return MP_OK;
    double known = 0.0;
    char path[4200], text[4096];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/profile.json", r->files.out_dir);
#define PROF_JSON(...) (n += n < sizeof text ? (size_t)snprintf(text + n, sizeof text - n, __VA_ARGS__) : 0)
    PROF_JSON("{\"steps\":%ld,\"step_seconds\":%.6f", p->steps, p->total / p->steps);
    runlog_printf(&r->files.log, "profile over %ld steps (%.1f ms/step):", p->steps, 1e3 * p->total / p->steps);
    for (int c = 0; c < PROF_COUNT; c++) {
        known += p->seconds[c];
        runlog_printf(&r->files.log, "  %-24s %8.2f ms/step %5.1f%%", prof_names[c], 1e3 * p->seconds[c] / p->steps,
                      100.0 * p->seconds[c] / p->total);
        PROF_JSON(",\"%s\":%.6f", prof_names[c], p->seconds[c] / p->steps);
    }
    runlog_printf(&r->files.log, "  %-24s %8.2f ms/step %5.1f%%", "framework_overhead", 1e3 * (p->total - known) / p->steps,
                  100.0 * (p->total - known) / p->total);
    if (p->recompute > 0) {
        runlog_printf(&r->files.log, "  %-24s %8.2f ms/step (of the above: forwards re-run by memory.policy)", "recompute",
                      1e3 * p->recompute / p->steps);
        PROF_JSON(",\"recompute\":%.6f", p->recompute / p->steps);
    }
    if (r->st.dp_on) {
        runlog_printf(&r->files.log, "  %-24s %8.2f ms/step (waiting for gradient buckets after the backward)", "dp_wait",
                      1e3 * r->st.dp.comm_seconds / p->steps);
        PROF_JSON(",\"dp_wait\":%.6f", r->st.dp.comm_seconds / p->steps);
    }
    PROF_JSON(",\"framework_overhead\":%.6f}\n", (p->total - known) / p->steps);
#undef PROF_JSON
    if (r->lay.rank != 0) return MP_OK;
    if (n >= sizeof text) return MP_FAIL("%s: the report does not fit its buffer (a bug)", path);
    return publish_text(path, text);
}

/* "layers 0-11, heads 0-5, vocab 0-127, samples 0-3": this rank's part of the model and batch. */
static void train_describe_holdings(const deck_t *d, const run_layout_t *lay, const run_stage_t *st, char *buf, size_t n)
{
    const param_table_t *t = &st->model.tab;
    const int hl = d->model.heads / t->tp, vl = t->vocab_pad / t->tp;
    const int per = lay->replica_batch, s0 = lay->grid.coord[GRID_DP] * per;
    char layers[GRID_HOLDS_MAX / 2] = "";
    for (int c = 0, o = 0; c < t->nchunks && o < (int)sizeof layers - 16; c++)
        o += snprintf(layers + o, sizeof layers - (size_t)o, "%s%d-%d", c ? "," : "", t->chunk_layer0[c],
                      t->chunk_layer0[c] + t->chunk_nlayers[c] - 1);
    snprintf(buf, n, "layers %s, heads %d-%d, vocab rows %d-%d, samples %d-%d", layers, t->tp_rank * hl,
             (t->tp_rank + 1) * hl - 1, t->tp_rank * vl, (t->tp_rank + 1) * vl - 1, s0, s0 + per - 1);
}

/* pipeline.layers = auto: the split the planner chose at start (every rank the same) and from what;
 * live migration: the timings it deals stage times by. */
static void train_log_auto_split(run_t *r)
{
    const autosplit_t *a = &r->autosplit;
    const deck_t *d = &r->deck;
    char text[DECK_STR] = "", from[320], rest[96];
    if (a->rest_s > 0) snprintf(rest, sizeof rest, "embedding and head %.2f ms", 1e3 * a->rest_s);
    else snprintf(rest, sizeof rest, "embedding and head too short to time (the model's ratio to a block)");
    if (a->measured && d->debug.autosplit_pass_s[0] > 0)
        snprintf(from, sizeof from, "debug.autosplit_passes's timings: a block %.2f ms, %s per micro-batch",
                 1e3 * a->block_s, rest);
    else if (a->measured)
        snprintf(from, sizeof from, "this run's timings, taken in %.1f s: a block %.2f ms, %s per micro-batch",
                 a->took_s, 1e3 * a->block_s, rest);
    else if (a->pass_s > 0 && a->pass_s < AUTOSPLIT_MIN_PASS_S)
        snprintf(from, sizeof from, "the nominal device's modelled times (a 2-layer pass took %.2f ms, too short to "
                 "time against the host's noise)", 1e3 * a->pass_s);
    else if (a->pass_s > 0) /* a busy host: two layers timed no slower than one */
        snprintf(from, sizeof from, "the nominal device's modelled times (a 2-layer pass took %.2f ms, no longer than "
                 "a 1-layer pass: the host's noise)", 1e3 * a->pass_s);
    else if (d->parallel.pp < 2)
        snprintf(from, sizeof from, "nothing: one stage holds every layer");
    else
        snprintf(from, sizeof from, "the nominal device's modelled times (train.device = %s is not timed at start)",
                 deck_device_names[d->train.device]);
    if (d->pipeline.replan_every > 0) /* live migration's per-layer costs (migrate.c) */
        runlog_printf(&r->files.log, "pipeline.replan_every=%d: stage times are dealt over layers by %s",
                      d->pipeline.replan_every, from);
    if (!a->on) return;
    for (int s = 0, n = 0; s < d->parallel.pp && n < (int)sizeof text; s++)
        n += snprintf(text + n, sizeof text - (size_t)n, "%s%d", s ? "," : "", d->pipeline.chunks.layers[s]);
    runlog_printf(&r->files.log, "pipeline.layers=auto: %s (the planner's split by %s; embedding on stage 0 and head on "
                  "the last: the slowest stage carries %.1f%% of the step's compute, %.1f%% would be even)",
                  text, from, 100 * a->share, 100.0 / d->parallel.pp);
}

/* memory.policy = auto: what each stage chose and why, one log line per stage (every rank of a
 * stage chose alike: the same plan from the same sizes; collective over MPI_COMM_WORLD). */
static void train_log_auto_policy(run_t *r)
{
    if (r->deck.memory.policy != POLICY_AUTO || r->deck.memory.per_layer.n) return;
    const int pp = r->lay.pp;
    double *v = calloc((size_t)3 * pp, sizeof(double));
    if (!v) MP_ABORT("out of memory logging memory.policy=auto");
    v[3 * r->lay.stage] = r->st.auto_policy, v[3 * r->lay.stage + 1] = r->st.auto_bytes, v[3 * r->lay.stage + 2] = r->st.auto_keep_bytes;
    wait_allreduce(&r->lay.wait, v, 3 * pp, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, "memory.policy=auto's choices");
    const double limit = (double)r->deck.memory.device_limit;
    for (int s = 0; s < pp; s++) {
        const int pol = (int)v[3 * s];
        if (pol == POLICY_KEEP)
            runlog_printf(&r->files.log, "memory.policy=auto: stage %d keeps every stash: planned %.0f bytes%s", s, v[3 * s + 1],
                          limit > 0 ? " within memory.device_limit" : " (no memory.device_limit)");
        else
            runlog_printf(&r->files.log, "memory.policy=auto: stage %d chose %s: keep would plan %.0f bytes, over "
                          "memory.device_limit=%.0f; %s plans %.0f (the fastest policy that fits: keep, selective, "
                          "recompute in that order)", s, policy_names[pol], v[3 * s + 2], limit,
                          policy_names[pol], v[3 * s + 1]);
    }
    free(v);
}

int train_main(const run_opts_t *opts, const train_ops_t *ops_offered)
{
    run_t r;
    if (run_setup(&r, opts, 1) != MP_OK) return 1;
    const train_ops_t *ops = r.plug ? ops_offered : NULL;
    const deck_t *d = &r.deck;
    /* the family's shape: GPT-2's MLP ratio R, or llama's key/value heads and SwiGLU width F */
    char fam[96];
    if (d->model.arch_kind == ARCH_LLAMA)
        snprintf(fam, sizeof fam, "llama L%d C%d H%d KV%d T%d V%d F%d%s", d->model.layers, d->model.dim,
                 d->model.heads, cfg_kv_heads(&r.st.model.cfg), d->model.seq_len, d->model.vocab, d->model.ffn_dim,
                 d->model.tie_embeddings ? "" : " untied");
    else
        snprintf(fam, sizeof fam, "L%d C%d H%d T%d V%d R%d", d->model.layers, d->model.dim, d->model.heads,
                 d->model.seq_len, d->model.vocab, d->model.mlp_ratio);
    runlog_printf(&r.files.log, "mindpipe train: %s | model %s (%zu parameters) | batch %d = "
                  "dp %d x %d micro-batches x %d | %d thread(s) per rank | job's sgemm peak %.1f GFLOP/s | out %s",
                  opts->deck_path ? opts->deck_path : "(defaults)", fam, param_count_model(&r.st.model.cfg),
                  d->train.batch, r.lay.grid.size[GRID_DP], r.lay.micro_batches, d->train.micro_batch, r.lay.threads,
                  r.peak_gflops, r.files.out_dir);
    if (r.st.gpu_note[0]) runlog_printf(&r.files.log, "%s", r.st.gpu_note);
    if (r.st.p2p_note[0]) runlog_printf(&r.files.log, "%s", r.st.p2p_note);
    if (r.st.play_note[0]) runlog_printf(&r.files.log, "%s", r.st.play_note);
    if (ops && ops->announce) ops->announce(&r);
    train_log_auto_split(&r);
    train_log_auto_policy(&r);
    char holds[GRID_HOLDS_MAX];
    train_describe_holdings(&r.deck, &r.lay, &r.st, holds, sizeof holds);
    train_fail_at(&r.deck, &r.lay, -1, 0); /* debug.fail_at = RANK:0: as the start-up ends */
    grid_print_layout(&r.lay.grid, &r.lay.wait, r.files.log.quiet ? NULL : stdout, r.files.log.log, holds);
    watchdog_arm(&r.wd, "the resume (choosing and reading a checkpoint)", "checkpoint.timeout", d->checkpoint.timeout);
    int rc = run_agree(run_ckpt_resume(&r));
    if (rc == MP_OK) rc = run_ckpt_init_from(&r);
    /* --init-from with no step to take: the imported weights as a checkpoint of step 0 (a conversion) */
    if (rc == MP_OK && opts->init_from && d->train.steps == 0 && d->checkpoint.final) rc = train_checkpoint(&r, 0);
    watchdog_disarm(&r.wd);
    if (ops && ops->resume) ops->resume(&r);
    /* recovery.log: the survivors' snapshots, the lost rank's replay, then this rank's log */
    recovery_plan_t rp = {0};
    int replay_failed = 0;
    recovery_arm_resume(&r); /* a peer lost from here to the end of the recovery: exit 75, tried again */
    if (rc == MP_OK) rc = recovery_plan(&r, &rp);
    if (rc == MP_OK && rp.on) {
        double took = 0.0;
        const int ok = !rp.replay || train_replay(&r, &rp, &took) == MP_OK;
        if (!rp.replay) train_fail_in_replay(&r, &rp, -1);
        rc = recovery_finish(&r, &rp, ok, took);
        /* the snapshots are aside: the next --resume auto restarts from the checkpoint, so the exit
         * is 75, and a batch job requeues itself instead of ending FAILED on a damaged log entry */
        replay_failed = rc != MP_OK;
        if (rc == MP_OK) train_fail_recovered(&r, &rp);
    }
    /* still under the recovery's handler: a peer lost in these agreements or the due checkpoint
     * leaves every snapshot for the next --resume auto (recovery_done removes them only later) */
    if (rc == MP_OK) rc = run_agree_wait(&r.lay, recovery_open(&r), "the agreement on the boundary logs' opening");
    if (rc == MP_OK) rc = run_agree_wait(&r.lay, trace_init(&r.files.trace), "the agreement on the trace's start");
    /* the survivors' step was one whose checkpoint was due (a rank lost inside that write): the loop
     * writes a checkpoint only after a step it runs, so the recovered state is written here — at the
     * last step nothing else would ever hold the run's end once the snapshots are removed */
    if (rc == MP_OK && rp.on && train_ckpt_due(d, r.step)) rc = train_checkpoint(&r, 0);
    double t0 = perf_now();
    long s0 = r.step;
    energy_t en;
    char bus[NVML_BUS_ID_LEN]; /* cuda: this rank's GPU, whose NVML energy counter is read */
    be_gpu_bus_id(&r.st.be, bus, sizeof bus);
    energy_start(&en, bus);
    signals_install();
    migrate_t mg = {0};
    recovery_disarm(&r.lay);
    recovery_arm(&r); /* a wait past parallel.timeout: this rank's state written, exit 75 */
    if (rc == MP_OK) recovery_done(&r, &rp); /* no wait since the last agreement: a loss from here writes anew */
    if (rc == MP_OK) rc = train_loop(&r, ops, &mg);
    recovery_disarm(&r.lay);
    migrate_free(&mg);
    if (recovery_close(&r) != MP_OK && rc == MP_OK) rc = MP_ERR;
    const int stopped = rc == MP_STOPPED;
    if (stopped) rc = MP_OK;
    if (r.files.trace.ev) {
        char path[4300], label[128];
        snprintf(path, sizeof path, "%s/trace.json", r.files.out_dir);
        snprintf(label, sizeof label, "rank %d: dp%d tp%d pp%d sp%d", r.lay.rank, r.lay.grid.coord[GRID_DP], r.lay.grid.coord[GRID_TP],
                 r.lay.grid.coord[GRID_PP], r.lay.grid.coord[GRID_SP]);
        /* gathered to rank 0 and written: file-system work, under the file-system phases' deadline */
        watchdog_arm(&r.wd, "writing the trace", "checkpoint.timeout", d->checkpoint.timeout);
        if (rc == MP_OK) rc = run_agree(trace_write(&r.files.trace, path, label, MPI_COMM_WORLD));
        watchdog_disarm(&r.wd);
        trace_free(&r.files.trace);
    }
    if (rc == MP_OK) {
        energy_use_t use;
        const double seconds = perf_now() - t0;
        /* blocking collectives (a node split, all-reduces): a rank that died after its last step
         * must not leave the others inside them without a deadline */
        watchdog_arm(&r.wd, "the energy report", "parallel.timeout", d->parallel.timeout);
        energy_finish(&en, MPI_COMM_WORLD, &use);
        watchdog_disarm(&r.wd);
        /* a report not written (a link or a device under its name: refused, publish.h) fails the run */
        int rep = train_report_energy(&r.deck, &r.files, &r.lay, &use, r.step - s0, seconds);
        if (train_report_kernels(&r) != MP_OK) rep = MP_ERR;
        if (train_report_profile(&r) != MP_OK) rep = MP_ERR;
        if (ops && ops->report) ops->report(&r);
        rc = run_agree(rep);
    }
    energy_release(&en); /* NVML, when a failed run did not reach energy_finish */
    const int status = rc != MP_OK ? (replay_failed ? MP_EXIT_REQUEUE : 1) : stopped ? MP_EXIT_REQUEUE : 0;
    if (r.lay.rank == 0) {
        char text[600];
        if (replay_failed)
            snprintf(text, sizeof text, "%d stopped: the replay of the lost rank's steps failed (the log says why), the "
                     "snapshots moved aside; --resume auto restarts from the checkpoint of step %ld", status, r.step);
        else if (status == MP_EXIT_REQUEUE)
            snprintf(text, sizeof text, "%d stopped: by signal at step %ld, its checkpoint written; resume with "
                     "--resume auto", status, r.step);
        else
            snprintf(text, sizeof text, "%d %s at step %ld", status, status ? "failed (the log says why)" : "done",
                     r.step);
        rundir_exit_status(r.files.out_dir, text); /* a failure to write it is reported; the status stands */
    }
    run_teardown(&r);
    return status;
}

/* /grad, /batch and the loss, added to the checkpoint file that debug-grads wrote. */
static int train_dump_extra(run_t *r, const char *path, double loss)
{
    const int batch = r->deck.train.batch, T = r->deck.model.seq_len;
    int rc = MP_ERR;
    int *tok = MP_MALLOC(sizeof(int) * 2 * (size_t)batch * T);
    if (!tok) return MP_ERR;
    for (int i = 0; i < batch; i++)
        data_train_sample(&r->data, r->deck.train.seed, 0, i, batch, T, tok + (size_t)i * T, tok + ((size_t)batch + i) * T);
    float *grads = run_ckpt_host_copy(&r->st, r->st.model.grads, r->st.model.alloc);
    hid_t f = -1, g = -1, s = -1, d = -1;
    H5_TRY(f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), out, path);
    H5_TRY(g = H5Gcreate2(f, "grad", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), out, path);
    for (int i = 0; i < r->st.model.tab.count; i++) {
        const param_entry_t *e = &r->st.model.tab.entries[i];
        hsize_t dims[2] = {(hsize_t)e->shape[0], (hsize_t)e->shape[1]};
        H5_TRY(s = H5Screate_simple(e->ndim, dims, NULL), out, path);
        H5_TRY(d = H5Dcreate2(g, e->name, H5T_NATIVE_FLOAT, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), out, path);
        H5_TRY(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, grads + e->offset), out, path);
        H5Dclose(d), d = -1;
        H5Sclose(s), s = -1;
    }
    H5Gclose(g), g = -1;
    H5_TRY(g = H5Gcreate2(f, "batch", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), out, path);
    hsize_t bd[2] = {(hsize_t)batch, (hsize_t)T};
    for (int k = 0; k < 2; k++) {
        H5_TRY(s = H5Screate_simple(2, bd, NULL), out, path);
        H5_TRY(d = H5Dcreate2(g, k ? "targets" : "inputs", H5T_NATIVE_INT, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
               out, path);
        H5_TRY(H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok + (size_t)k * batch * T), out, path);
        H5Dclose(d), d = -1;
        H5Sclose(s), s = -1;
    }
    H5Gclose(g), g = -1;
    H5_TRY(g = H5Gopen2(f, "state", H5P_DEFAULT), out, path);
    rc = h5_attr_write(g, "loss", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &loss, path);
out:
    if (d >= 0) H5Dclose(d);
    if (s >= 0) H5Sclose(s);
    if (g >= 0) H5Gclose(g);
    if (f >= 0 && H5Fclose(f) < 0) rc = MP_FAIL("cannot close %s", path);
    if (rc == MP_OK) rc = ckpt_reseal(path); /* the file checksum covers what was added */
    run_ckpt_host_release(&r->st, grads, r->st.model.grads);
    free(tok);
    return rc;
}

int train_debug_grads(const run_opts_t *opts, const train_ops_t *ops_offered, const char *out_file)
{
    run_t r;
    if (run_setup(&r, opts, 0) != MP_OK) return 1;
    if (r.lay.world != 1) {
        MP_ERROR("debug-grads runs on one rank (the PyTorch check's reference); this job has %d", r.lay.world);
        run_teardown(&r);
        return 1;
    }
    const train_ops_t *ops = r.plug ? ops_offered : NULL;
    if (ops && ops->begin) ops->begin(&r, 0);
    const exec_batch_t src = train_batches(&r);
    double loss = train_step_grads(&r, 0, &src);
    if (r.plug) model_grads_finish(&r.st.model); /* a plug-in's step (a supernet's) keeps the LM head's part apart */
    ckpt_state_t st = {.step = 0, .adam_t = 0, .seed = r.deck.train.seed, .deck = NULL, .tok = r.data_tok};
    snprintf(st.layout, sizeof st.layout, "dp=1 tp=1 pp=1 sp=1");
    float *params = run_ckpt_host_copy(&r.st, r.st.model.params, r.st.model.alloc);
    int rc = ckpt_write(out_file, &r.st.gtab, params, NULL, NULL, &st, r.files.deck_text);
    run_ckpt_host_release(&r.st, params, r.st.model.params);
    if (rc == MP_OK) rc = train_dump_extra(&r, out_file, loss);
    if (rc == MP_OK && !opts->quiet) printf("debug-grads: step-0 loss %.9f, gradients in %s\n", loss, out_file);
    run_teardown(&r);
    return rc == MP_OK ? 0 : 1;
}
