#include "run.h"

#include <errno.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "mpi_check.h"
#include "block_kind.h"
#include "deck_model.h"
#include "hf_deck.h"
#include "device.h"
#include "kernels.h"
#include "perf.h"
#include "autosplit.h"
#include "costmodel.h"
#include "plan.h"
#include "publish.h"
#include "run_gpus.h"
#include "signals.h"
#include "tok_files.h"


/* Whether `stage` holds the first chunk (the embedding) or the last (the loss and the tied head). */
static int run_holds_first(const deck_t *d, int stage) { return sched_chunk_stage(d->parallel.schedule_kind, 0, d->parallel.pp) == stage; }
static int run_holds_last(const deck_t *d, int stage)
{
    const int pp = d->parallel.pp;
    return sched_chunk_stage(d->parallel.schedule_kind, pp * deck_chunks_per_stage(d) - 1, pp) == stage;
}

policy_t run_layer_policy(const deck_t *d, int l)
{
    const policy_t p = d->memory.per_layer.n ? d->memory.per_layer.policy[l] : d->memory.policy;
    return p == POLICY_AUTO ? POLICY_KEEP : p;
}

/* Whether some layer is balanced (BPipe): every stage then runs the balance lists. */
static int run_balance(const deck_t *d)
{
    for (int l = 0; l < d->model.layers; l++)
        if (run_layer_policy(d, l) == POLICY_BALANCE) return 1;
    return 0;
}

/* The memory mode of each block this stage holds (its chunks' layers in order). */
static const block_mode_t run_mode_of[POLICY_AUTO] = {
    [POLICY_KEEP] = MODE_KEEP, [POLICY_RECOMPUTE] = MODE_RECOMPUTE, [POLICY_SELECTIVE] = MODE_SELECTIVE,
    [POLICY_OFFLOAD] = MODE_OFFLOAD, [POLICY_BALANCE] = MODE_BALANCE};

static int run_block_modes(const deck_t *d, run_stage_t *st, int v, const int *l0, const int *nl)
{
    unsigned char modes[4096]; /* model.layers ≤ 4096 (the deck's bound) */
    int n = 0;
    for (int c = 0; c < v; c++)
        for (int l = l0[c]; l < l0[c] + nl[c]; l++) modes[n++] = (unsigned char)run_mode_of[run_layer_policy(d, l)];
    return model_set_modes(&st->model, modes);
}

/* balance: the movable bytes of the partner stage's stash (what this stage accepts, if it is the
 * acceptor), from the partner's layers and modes, as its stash_init_movable rounds them. */
static size_t run_partner_mov(const deck_t *d, const run_layout_t *lay, run_stage_t *st)
{
    const int partner = lay->pp - 1 - lay->stage;
    if (!run_balance(d) || partner == lay->stage) return 0;
    model_t shadow;
    memset(&shadow, 0, sizeof shadow);
    shadow.cfg = st->model.cfg, shadow.be = st->model.be;
    int l0[PARAM_MAX_CHUNKS], nl[PARAM_MAX_CHUNKS];
    const int v = run_stage_chunks(d, partner, l0, nl);
    if (param_table_build_chunks(&shadow.tab, &shadow.cfg, v, l0, nl, run_holds_first(d, partner), run_holds_last(d, partner),
                                 st->model.tab.tp, st->model.tab.tp_rank) != MP_OK)
        MP_ABORT("out of memory planning the balance partner's stash");
    unsigned char modes[4096];
    int n = 0;
    for (int c = 0; c < v; c++)
        for (int l = l0[c]; l < l0[c] + nl[c]; l++) modes[n++] = (unsigned char)run_mode_of[run_layer_policy(d, l)];
    if (model_set_modes(&shadow, modes) != MP_OK) MP_ABORT("out of memory planning the balance partner's stash");
    int biggest = 0;
    for (int c = 0; c < v; c++) biggest = nl[c] > biggest ? nl[c] : biggest;
    size_t mov0, mov;
    acts_part_bytes(&shadow, d->train.micro_batch, shadow.tab.nlayers, shadow.tab.has_final, &mov0);
    acts_part_bytes(&shadow, d->train.micro_batch, biggest, shadow.tab.has_final, &mov);
    free(shadow.mode);
    param_table_free(&shadow.tab);
    if (mov0 > mov) mov = mov0;
    return (mov + 4095) / 4096 * 4096;
}

/* Supernet parallelism (parallel.sp > 1, supernet_sp.c) runs a causal supernet's windows on replicas
 * of one pipeline: what it needs of the rest of the layout. */
static int run_refuse_sp(const deck_t *d)
{
    const int sp = d->parallel.sp;
    if (!d->supernet.enabled)
        return MP_FAIL("parallel.sp=%d: supernet parallelism runs a supernet's subnets on replicas: it needs "
                       "supernet.enabled=1", sp);
    if (d->supernet.schedule != DECK_SUBNETS_CAUSAL)
        return MP_FAIL("parallel.sp=%d with supernet.schedule=serial: the replicas run the causal lists; serial is "
                       "the one-pipeline baseline (set parallel.sp=1)", sp);
    if (d->train.device == DECK_DEVICE_CUDA && d->parallel.p2p != DECK_P2P_MPI)
        return MP_FAIL("parallel.sp=%d: the replicas' lists run on MPI messages: set parallel.p2p=mpi", sp);
    return MP_OK;
}

/* Features whose keys the deck accepts but whose implementation lands in later issues: refused
 * with a message rather than silently ignored. (What does not combine with what, live migration's and
 * the recovery log's rules among it, the deck refused at load: src/sched/compose.c.) */
static int run_refuse_unimplemented(const deck_t *d)
{
    const int sp = d->parallel.sp;
    if (sp > 1 && run_refuse_sp(d) != MP_OK) return MP_ERR;
    if (device_check(d->train.device, d->train.precision) != MP_OK) return MP_ERR;
    if (d->train.attention == DECK_ATTENTION_FUSED && d->train.device == DECK_DEVICE_CPU)
        return MP_FAIL("train.attention=fused: train.device=cpu runs the probabilities' path; the fused path is "
                       "emulated on train.device=emu (cuda takes it by itself in bf16)");
    if (d->parallel.p2p == DECK_P2P_NCCL && d->train.device != DECK_DEVICE_CUDA)
        return MP_FAIL("parallel.p2p=nccl: NCCL moves device memory and needs train.device=cuda (this deck: %s); set "
                       "parallel.p2p=mpi or auto", deck_device_names[d->train.device]);
    return MP_OK;
}

/* Ranks of this node share its cores: the default thread count divides them. */
static int run_threads(const deck_t *d, int local)
{
    if (d->train.threads > 0) return d->train.threads;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int t = (int)(cores / local);
    return t > 0 ? t : 1;
}

/* MFU's peak: the sgemm rate of the cores the whole job runs on, since tokens/s is the whole
 * job's: every rank measures with its own threads at once (after a barrier of its node) and the
 * rates add up. Ranks that share cores share them during the probe too, so a node's sum is what it
 * gives the job; one rank measuring while the others waited would have them polling on cores the
 * probe needs (measured: 93 against 180 GFLOP/s for 2 ranks on 2 cores). train.peak_gflops is per
 * rank. Collective over MPI_COMM_WORLD. */
static double run_job_peak(const deck_t *d, const run_layout_t *lay)
{
    if (d->train.peak_gflops > 0) return d->train.peak_gflops * lay->world;
    wait_barrier(&lay->wait, lay->grid.node, "the start of the peak measurement");
    double peak = perf_sgemm_peak_gflops();
    wait_allreduce_sum(&lay->wait, &peak, 1, MPI_DOUBLE, MPI_COMM_WORLD, "the job's peak");
    return peak;
}

/* Rank 0 makes and claims the directory (rundir_claim); the others learn its path and the run id.
 * On failure the lock is released and the logs closed. */
static int run_out_dir(run_t *r)
{
    const char *dir = r->opts.out_dir ? r->opts.out_dir : "run";
    int rc = MP_OK;
    r->files.log.quiet = r->opts.quiet || r->lay.rank != 0;
    if (r->lay.rank == 0) {
        if (rundir_mkdir_p(dir) != MP_OK) rc = MP_ERR;
        else if (!realpath(dir, r->files.out_dir)) rc = MP_FAIL("cannot resolve %s: %s", dir, strerror(errno));
        if (rc == MP_OK) rc = rundir_lock(&r->files.lock, r->files.out_dir);
        if (rc == MP_OK)
            rc = rundir_claim(r->files.out_dir, r->opts.resume != NULL, r->opts.restart, r->opts.quiet, &r->deck, &r->files.log,
                              r->files.run_id);
        r->files.log.quiet = r->opts.quiet;
        if (rc != MP_OK) {
            runlog_close(&r->files.log);
            rundir_unlock(&r->files.lock);
        }
    }
    if (run_agree(rc) != MP_OK) return MP_ERR;
    MPI_CHECK(MPI_Bcast(r->files.out_dir, sizeof r->files.out_dir, MPI_CHAR, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Bcast(r->files.run_id, sizeof r->files.run_id, MPI_CHAR, 0, MPI_COMM_WORLD));
    char status[4200];
    snprintf(status, sizeof status, "%s/exit_status", r->files.out_dir);
    watchdog_status_file(&r->wd, status);
    return MP_OK;
}

int run_stage_chunks(const deck_t *d, int stage, int *layer0s, int *nlayers_s)
{
    const int L = d->model.layers, pp = d->parallel.pp, v = deck_chunks_per_stage(d), K = pp * v;
    const deck_layer_list_t *given = &d->pipeline.chunks; /* K entries, or none (deck_validate) */
    int size[K], start[K], split[K];
    double share;
    /* auto: the planner's sizes (v = 1, deck_validate); an allocation failure falls back to balanced */
    const int automatic = given->automatic && autosplit_layers(d, NULL, split, &share) == MP_OK;
    for (int k = 0, at = 0; k < K; k++) {
        size[k] = automatic ? split[k] : given->n ? given->layers[k] : L / K + (k < L % K ? 1 : 0);
        start[k] = at;
        at += size[k];
    }
    const sched_kind_t kind = d->parallel.schedule_kind;
    for (int c = 0; c < v; c++) {
        const int k = sched_stage_chunk(kind, stage, c, pp);
        layer0s[c] = start[k], nlayers_s[c] = size[k];
    }
    return v;
}

/* The times zb1p's and zbv's lists are played out with (parallel.schedule_costs, or
 * parallel.schedule_profile: rank 0 reads the profile, every rank takes its figures), so that every
 * stage builds its list from the same times: lists played from different ones would not match each
 * other's messages. Collective over the job. */
static int run_play_costs(const deck_t *d, const run_layout_t *lay, run_stage_t *st)
{
    const sched_kind_t kind = d->parallel.schedule_kind;
    st->play = sched_costs_unit, st->play_note[0] = 0;
    if (!sched_kind_split(kind)) return MP_OK;
    const char *name = sched_kind_names[kind];
    if (d->parallel.schedule_profile[0]) {
        double t[4] = {0.0, 0.0, 0.0, 0.0}; /* rank 0's status (0: read), then TF, TB, TW */
        if (lay->rank == 0) {
            const int pp = d->parallel.pp, v = deck_chunks_per_stage(d), K = pp * v;
            int size[CM_MAX_CHUNKS], l0[PARAM_MAX_CHUNKS], nl[PARAM_MAX_CHUNKS];
            for (int s = 0; s < pp; s++)
                for (int c = 0, n = run_stage_chunks(d, s, l0, nl); c < n; c++) size[sched_stage_chunk(kind, s, c, pp)] = nl[c];
            sched_costs_t c;
            if (plan_schedule_costs(d, K, size, &c) == MP_OK) t[1] = c.tf, t[2] = c.tb, t[3] = c.tw;
            else t[0] = 1.0;
        }
        MPI_CHECK(MPI_Bcast(t, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD));
        if (t[0] != 0.0) return MP_ERR; /* rank 0 said why, naming the file */
        st->play = (sched_costs_t){t[1], t[2], t[3]};
        snprintf(st->play_note, sizeof st->play_note, "parallel.schedule=%s: lists played out with the times of "
                 "parallel.schedule_profile=%s for this run's chunks: TF %.9g s, TB %.9g s, TW %.9g s", name,
                 d->parallel.schedule_profile, t[1], t[2], t[3]);
    } else if (d->parallel.costs.tf > 0.0) {
        st->play = d->parallel.costs;
        snprintf(st->play_note, sizeof st->play_note, "parallel.schedule=%s: lists played out with "
                 "parallel.schedule_costs TF %g, TB %g, TW %g", name, st->play.tf, st->play.tb, st->play.tw);
    } else {
        snprintf(st->play_note, sizeof st->play_note, "parallel.schedule=%s: lists played out with unit times (set "
                 "parallel.schedule_profile to a mindpipe profile of this model to play its measured ones)", name);
    }
    return MP_OK;
}

static void run_stage_layers(run_layout_t *lay)
{
    lay->pp = lay->grid.size[GRID_PP];
    lay->stage = lay->grid.coord[GRID_PP];
}

/* r->st.gidx: where each of this rank's tensors sits in the whole model's canonical table. */
static int run_global_index(run_stage_t *st)
{
    st->gidx = MP_CALLOC((size_t)st->model.tab.count, sizeof(int));
    if (!st->gidx) return MP_ERR;
    for (int i = 0; i < st->model.tab.count; i++) {
        const param_entry_t *g = param_table_find(&st->gtab, st->model.tab.entries[i].name);
        st->gidx[i] = (int)(g - st->gtab.entries);
    }
    return MP_OK;
}

/* The largest calls the kernels see in this run: a micro-batch of the whole model (a tensor-parallel
 * shard's calls are smaller), the widest MLP of the model's blocks and supernet candidates. */
static be_shape_t run_kernel_shape(const deck_t *d)
{
    int ratio = d->model.mlp_ratio;
    for (int i = 0; i < d->model.shapes.n; i++)
        if (d->model.shapes.shape[i].mlp_ratio > ratio) ratio = d->model.shapes.shape[i].mlp_ratio;
    for (int i = 0; i < d->supernet.cands.n; i++)
        if (d->supernet.cands.shape[i].mlp_ratio > ratio) ratio = d->supernet.cands.shape[i].mlp_ratio;
    const int tp = d->parallel.tp > 0 ? d->parallel.tp : 1;
    /* the MLP's widest product: llama's [gate | up] is two hidden widths (the cost model's FC) */
    const model_cfg_t cfg = deck_model_cfg(d, NULL);
    const cm_model_t cm = block_kind_cost_model(&cfg, d->train.batch);
    const int F = cm.FC / (cfg.mlp_ratio > 0 ? cfg.mlp_ratio : 1) * ratio;
    return (be_shape_t){.B = d->train.micro_batch, .T = d->model.seq_len, .C = d->model.dim,
                        .V = d->model.vocab + tp, .F = F, .NH = d->model.heads};
}

/* train.device: the backend, its memory behind the arena, and (cuda) the NCCL twins of the grid's
 * communicators. One GPU per rank: node rank mod the devices the node has, so a node with more
 * ranks than GPUs puts several on one (run_gpus.h). cuda: every step is agreed on by every rank,
 * since each next one is collective. */
static int run_backend(const deck_t *d, const run_layout_t *lay, run_stage_t *st)
{
    static const be_kind_t kind_of[DECK_DEVICE_COUNT] = {
        [DECK_DEVICE_CPU] = BE_CPU, [DECK_DEVICE_EMU] = BE_EMU, [DECK_DEVICE_CUDA] = BE_CUDA};
    const be_kind_t kind = kind_of[d->train.device];
    int ordinal = 0;
    if (kind == BE_CUDA) {
        const int n = device_count();
        if (run_agree(n > 0 ? MP_OK : MP_ERR) != MP_OK) return MP_ERR;
        ordinal = lay->grid.node_rank % n;
        if (run_gpus_resolve(d, lay, st, ordinal) != MP_OK) return MP_ERR;
    }
    const int rc = be_init(&st->be, kind, &st->arena, d->memory.device_limit, ordinal,
                           d->train.precision == DECK_PRECISION_BF16, &lay->wait);
    st->be.att_fused = rc == MP_OK && kind == BE_EMU && d->train.attention == DECK_ATTENTION_FUSED;
    if (kind != BE_CUDA) return rc;
    if (run_agree(rc) != MP_OK) {
        if (rc == MP_OK) be_destroy(&st->be);
        return MP_ERR;
    }
    /* the kernels' scratch sized before any communicator exists (no device allocation after step 0) */
    const be_shape_t shape = run_kernel_shape(d);
    be_scratch_plan(&st->be, &shape);
    /* only the communicators the device's collectives use (the model's tensor-parallel sums, the
     * data-parallel buckets and ZeRO-1 over replica, the tied embedding's sum, a supernet's sums over
     * dp; pp's and sp's messages are MPI or the boundaries' own), in the same order on every rank:
     * each is collective over its group. A collective on another is refused naming it (twin()). */
    be_comm_add(&st->be, lay->grid.comm[GRID_TP]);
    be_comm_add(&st->be, lay->grid.replica);
    be_comm_add(&st->be, lay->grid.embed);
    if (d->supernet.enabled) be_comm_add(&st->be, lay->grid.comm[GRID_DP]);
    /* the pipeline's NCCL communicators too (the executor's, wrapping as its chunks do), then the
     * region: its measure of the free memory counts every communicator */
    if (st->p2p_nccl && lay->pp > 1)
        be_p2p_comms(&st->be, lay->grid.comm[GRID_PP], lay->pp, lay->stage, deck_chunks_per_stage(d) > 1);
    const int region = be_region_open(&st->be, &st->arena);
    if (run_agree(region) != MP_OK) {
        be_destroy(&st->be);
        return MP_ERR;
    }
    return MP_OK;
}

/* Parameters from the seed, drawn on the host and copied to the device. */
static int run_param_init(run_t *r)
{
    model_t *m = &r->st.model;
    float *home = run_home(r, 0);
    if (home) { /* host-resident candidates: every tensor at home, the shared ones on the device too */
        param_init(&m->tab, home, r->deck.train.seed);
        be_to_device(&r->st.be, m->params, home, m->tab.cand_off * sizeof(float));
        return MP_OK;
    }
    if (be_host_visible(&r->st.be)) {
        param_init(&m->tab, m->params, r->deck.train.seed);
        return MP_OK;
    }
    float *h = be_host_alloc(&r->st.be, m->alloc * sizeof(float));
    if (!h) return MP_FAIL("out of host memory initialising the parameters");
    param_init(&m->tab, h, r->deck.train.seed);
    be_to_device(&r->st.be, m->params, h, m->alloc * sizeof(float));
    be_host_free(&r->st.be, h);
    return MP_OK;
}

static exec_ctx_t run_exec_ctx(run_t *r);
static int run_exec(run_t *r);

/* The stage's plan under its blocks' current modes (exec_plan): the model the arena holds so far,
 * 2bw's second version and the ZeRO-1 gradient shard, and what the executor will allocate. */
static int run_plan_now(run_t *r, exec_plan_t *p)
{
    const deck_t *d = &r->deck;
    size_t fixed = r->st.arena.in_use;
    if (sched_kind_versions(d->parallel.schedule_kind) == 2) fixed += r->st.model.alloc * sizeof(float);
    if (d->parallel.zero && r->lay.grid.replica_size > 1)
        fixed += param_padded(r->st.model.tab.total, r->lay.grid.replica_size) / (size_t)r->lay.grid.replica_size * sizeof(float);
    const exec_ctx_t c = run_exec_ctx(r);
    return exec_plan(&c, d->train.micro_batch, fixed, p);
}

/* memory.policy = auto (DESIGN.md §6, docs/PLAN.md "auto at run time"): this stage takes the first of
 * keep, selective, recompute — fastest first, as the planner ranks them — whose exact memory plan
 * fits memory.device_limit (keep when there is no limit). Offload and balance are not chosen: they
 * rewrite the instruction lists every stage must agree on. Every policy gives the same weights, so
 * the choice changes memory and time only. Records the choice in r->st.auto_policy; MP_ERR when none
 * fits (run_memory_plan then explains). */
static int run_auto_policy(run_t *r)
{
    static const block_mode_t try[] = {MODE_KEEP, MODE_SELECTIVE, MODE_RECOMPUTE};
    static const policy_t pol[] = {POLICY_KEEP, POLICY_SELECTIVE, POLICY_RECOMPUTE};
    const uint64_t limit = r->deck.memory.device_limit;
    unsigned char modes[4096];
    exec_plan_t p;
    for (size_t i = 0; i < sizeof try / sizeof try[0]; i++) {
        memset(modes, try[i], sizeof modes);
        if (model_set_modes(&r->st.model, modes) != MP_OK || run_plan_now(r, &p) != MP_OK) return MP_ERR;
        if (i == 0) r->st.auto_keep_bytes = (double)p.total;
        if (!limit || p.total <= limit) {
            r->st.auto_policy = (int)pol[i], r->st.auto_bytes = (double)p.total;
            return MP_OK;
        }
    }
    memset(modes, MODE_KEEP, sizeof modes); /* none fits: keep's plan is the one explained */
    model_set_modes(&r->st.model, modes);
    return MP_ERR;
}

/* memory.device_limit: the stage's planned peak must fit, else the run is refused before anything
 * else is allocated, naming the stage, the plan, the limit and the uniform policy that would fit
 * (the cheapest in time first: selective, offload, recompute). */
static int run_memory_plan(run_t *r)
{
    const deck_t *d = &r->deck;
    r->st.auto_policy = -1;
    if (d->memory.policy == POLICY_AUTO && d->memory.per_layer.n == 0) run_auto_policy(r);
    if (run_plan_now(r, &r->st.plan) != MP_OK) return MP_ERR;
    const uint64_t limit = d->memory.device_limit;
    if (!limit || r->st.plan.total <= limit) return MP_OK;
    static const block_mode_t try[] = {MODE_KEEP, MODE_SELECTIVE, MODE_OFFLOAD, MODE_RECOMPUTE};
    static const char *const try_name[] = {"keep", "selective", "offload", "recompute"};
    char fits[160] = "";
    unsigned char *saved = NULL, modes[4096];
    if (r->st.model.mode && !(saved = malloc((size_t)r->st.model.tab.nlayers))) return MP_FAIL("out of memory planning");
    if (saved) memcpy(saved, r->st.model.mode, (size_t)r->st.model.tab.nlayers);
    for (size_t i = 0; i < sizeof try / sizeof try[0] && !fits[0]; i++) {
        exec_plan_t p;
        memset(modes, try[i], sizeof modes);
        if (model_set_modes(&r->st.model, modes) != MP_OK || run_plan_now(r, &p) != MP_OK) break;
        if (p.total <= limit)
            snprintf(fits, sizeof fits, "memory.policy=%s would fit (planned %zu bytes)", try_name[i], p.total);
    }
    model_set_modes(&r->st.model, saved);
    free(saved);
    const exec_plan_t *p = &r->st.plan;
    return MP_FAIL("memory.device_limit=%llu bytes: stage %d (rank %d) plans a peak of %zu bytes under its memory "
                   "policy: %zu for the model, its gradients and optimizer state, %zu for %d stash slot(s)%s, %zu "
                   "for %d weight-gradient stash(es) (split backward, B to W), %zu scratch, %zu message buffers. %s",
                   (unsigned long long)limit, r->lay.stage, r->lay.rank, p->total, p->fixed, p->stash, p->nslots,
                   p->npool ? " and the offload buffers" : "", p->wstash, p->nwstash, p->scratch, p->messages,
                   fits[0] ? fits : "No memory policy fits: more pipeline stages, ZeRO-1 or a smaller micro-batch");
}

int run_stage_offloads(const run_stage_t *st)
{
    for (int i = 0; i < st->model.tab.nlayers; i++)
        if (model_block_mode(&st->model, i) == MODE_OFFLOAD) return 1;
    return 0;
}

static void run_plug_free(run_t *r);

static int run_model(run_t *r)
{
    const deck_t *d = &r->deck;
    model_cfg_t cfg = deck_model_cfg(d, NULL);
    arena_init(&r->st.arena, d->memory.device_limit);
    if (run_backend(&r->deck, &r->lay, &r->st) != MP_OK) return MP_ERR;
    run_stage_layers(&r->lay);
    r->unit = (run_unit_t){.on = r->plug != NULL, .window = 1, .whole = 0};
    if (r->plug && r->plug->model_cfg && r->plug->model_cfg(r, &cfg) != MP_OK) goto err_be;
    const int shards = d->parallel.zero ? r->lay.grid.replica_size : 1;
    const int tp = r->lay.grid.size[GRID_TP], tp_rank = r->lay.grid.coord[GRID_TP];
    const int first = run_holds_first(d, r->lay.stage), last = run_holds_last(d, r->lay.stage);
    int l0[PARAM_MAX_CHUNKS], nl[PARAM_MAX_CHUNKS];
    const int v = run_stage_chunks(d, r->lay.stage, l0, nl);
    if (model_create(&r->st.model, &cfg, &r->st.be, &r->st.arena, v, l0, nl, first, last, shards, tp, tp_rank) != MP_OK)
        goto err_be;
    if (r->plug && r->plug->init && r->plug->init(r) != MP_OK) goto err_model; /* before the plan: fixed memory */
    r->st.model.tp_comm = r->lay.grid.comm[GRID_TP];
    r->st.model.wait = &r->lay.wait;
    if (run_block_modes(&r->deck, &r->st, v, l0, nl) != MP_OK) goto err_model;
    if (run_memory_plan(r) != MP_OK) goto err_model;
    if (param_table_build(&r->st.gtab, &cfg, 0, cfg.layers, 1, 1, 1, 0) != MP_OK) goto err_model;
    if (run_global_index(&r->st) != MP_OK) goto err_gtab;
    if (acts_create(&r->st.acts, &r->st.model, d->train.micro_batch, &r->st.arena) != MP_OK) goto err_gidx;
    if (scratch_create(&r->st.scratch, &r->st.model, d->train.micro_batch, &r->st.arena) != MP_OK) goto err_acts;
    if (run_param_init(r) != MP_OK) goto err_scratch;
    if (sched_kind_versions(d->parallel.schedule_kind) == 2 && model_versions_create(&r->st.model) != MP_OK) goto err_scratch;
    /* the activations of micro-batch 0 of replica 0: its tensor-parallel rank 0 of each stage keeps them */
    if (actdump_init(&r->files.dump, d->debug.dump_activations, r->lay.grid.replica_rank == 0 && tp_rank == 0, cfg.layers,
                     d->train.micro_batch, cfg.seq_len, cfg.dim) != MP_OK)
        goto err_versions;
    return MP_OK;
err_versions:
    actdump_free(&r->files.dump);
    model_versions_destroy(&r->st.model);
err_scratch:
    scratch_destroy(&r->st.scratch, &r->st.arena);
err_acts:
    acts_destroy(&r->st.acts, &r->st.arena);
err_gidx:
    free(r->st.gidx);
err_gtab:
    param_table_free(&r->st.gtab);
err_model:
    run_plug_free(r);
    model_destroy(&r->st.model);
err_be:
    be_destroy(&r->st.be);
    run_plug_free(r);
    return MP_ERR;
}

static void run_plug_free(run_t *r)
{
    if (r->plug && r->plug->free) r->plug->free(r);
}

float *run_home(run_t *r, int which)
{
    return r->plug && r->plug->home ? r->plug->home(r, which) : NULL;
}

void run_home_flush(run_t *r)
{
    if (r->plug && r->plug->home_flush) r->plug->home_flush(r);
}

void run_home_forget(run_t *r)
{
    if (r->plug && r->plug->home_forget) r->plug->home_forget(r);
}

/* The plug-in the command offers, active when the deck is its. A supernet deck needs one: no other
 * command knows its candidates. */
static int run_plug_choose(run_t *r, const run_opts_t *o)
{
    const run_plug_t *p = o->plug;
    r->plug = p && p->wants && p->wants(&r->deck) ? p : NULL;
    if (!r->plug && r->deck.supernet.enabled)
        return MP_FAIL("supernet.enabled=1: this command does not run a supernet's subnets");
    return MP_OK;
}

/* The tokenizer of the training shards into *ident_p: an HDF5 token file's attributes
 * (tok_of_data_file), "none" for a .bin shard (llm.c's carry none). Every shard must say the same:
 * tokens of two tokenizers in one stream would train on nonsense. MP_OK, or MP_ERR naming both files. */
static int run_data_tokenizer(const dataset_t *ds, tok_ident_t *ident_p)
{
    tok_ident_t first = {{0}, {0}};
    for (int i = 0; i < ds->train.n; i++) {
        const data_shard_t *sh = &ds->train.shard[i];
        tok_ident_t id = {{0}, {0}};
        int vocab = 0;
        char why[200];
        if (!sh->bin) {
            if (tok_of_data_file(sh->path, &id, &vocab) != MP_OK) return MP_ERR;
        } else if (tok_ident_set(&id, "none", NULL, why, sizeof why) != MP_OK) {
            return MP_FAIL("%s: %s", sh->path, why);
        }
        if (i == 0) {
            first = id;
        } else if (!tok_ident_same(&first, &id)) {
            char a[TOK_SHA256_HEX + 40], b[TOK_SHA256_HEX + 40];
            return MP_FAIL("data.path: %s has tokenizer %s, %s has %s: one run trains on one tokenizer's tokens",
                           ds->train.shard[0].path, tok_ident_text(&first, a, sizeof a), sh->path,
                           tok_ident_text(&id, b, sizeof b));
        }
    }
    *ident_p = first;
    return MP_OK;
}

/* The data file against the deck (its tokenizer into r->data_tok): the model's vocabulary holds
 * every token, the splits hold a window. MP_OK, or MP_ERR naming the file and the deck key. */
static int run_check_data(run_t *r)
{
    const deck_t *d = &r->deck;
    char tok[TOK_SHA256_HEX + 40];
    if (run_data_tokenizer(&r->data, &r->data_tok) != MP_OK) return MP_ERR;
    int declared = 0; /* the token files' vocab attributes (a .bin shard declares none: its tokens say) */
    for (int i = 0; i < r->data.train.n; i++)
        if (r->data.train.shard[i].vocab > declared) declared = r->data.train.shard[i].vocab;
    if (declared > d->model.vocab)
        return MP_FAIL("%s (data.path) has vocab %d (tokenizer %s), more than model.vocab=%d: set model.vocab to at "
                       "least %d", d->data.path, declared, tok_ident_text(&r->data_tok, tok, sizeof tok),
                       d->model.vocab, declared);
    /* a token >= model.vocab would index past the embedding table; rank 0 scanned them (run_setup) */
    if (r->data.scanned && r->data.max_token >= (unsigned)d->model.vocab)
        return MP_FAIL("%s: token %u at index %llu is >= model.vocab=%d", r->data.max_file, r->data.max_token,
                       (unsigned long long)r->data.max_at, d->model.vocab);
    if (r->data.n_train < (size_t)d->model.seq_len + 2)
        return MP_FAIL("%s: /train has %zu tokens, fewer than model.seq_len+2 = %d", d->data.path, r->data.n_train,
                       d->model.seq_len + 2);
    /* a /val too short for one window: a warning (once), and no val_loss (issue 15) */
    if (r->lay.rank == 0 && data_check_windows(&r->data, d->model.seq_len) != MP_OK) return MP_ERR;
    return MP_OK;
}

int run_stage_rebuild(run_t *r, float *const state[4])
{
    const deck_t *d = &r->deck;
    /* newest first: the emu and cuda arenas give region memory back only from its top */
    exec_free(&r->st.exec);
    if (r->st.dp_on) dp_free(&r->st.dp);
    model_versions_destroy(&r->st.model);
    scratch_destroy(&r->st.scratch, &r->st.arena);
    acts_destroy(&r->st.acts, &r->st.arena);
    free(r->st.gidx);
    r->st.gidx = NULL;
    const model_cfg_t cfg = r->st.model.cfg;
    model_destroy(&r->st.model);
    const int shards = d->parallel.zero ? r->lay.grid.replica_size : 1;
    const int tp = r->lay.grid.size[GRID_TP], tp_rank = r->lay.grid.coord[GRID_TP];
    int l0[PARAM_MAX_CHUNKS], nl[PARAM_MAX_CHUNKS];
    const int v = run_stage_chunks(d, r->lay.stage, l0, nl);
    if (model_create(&r->st.model, &cfg, &r->st.be, &r->st.arena, v, l0, nl, run_holds_first(d, r->lay.stage),
                     run_holds_last(d, r->lay.stage), shards, tp, tp_rank) != MP_OK)
        return MP_ERR;
    model_t *m = &r->st.model;
    m->tp_comm = r->lay.grid.comm[GRID_TP];
    m->wait = &r->lay.wait;
    if (run_block_modes(&r->deck, &r->st, v, l0, nl) != MP_OK || run_memory_plan(r) != MP_OK || run_global_index(&r->st) != MP_OK ||
        acts_create(&r->st.acts, m, d->train.micro_batch, &r->st.arena) != MP_OK ||
        scratch_create(&r->st.scratch, m, d->train.micro_batch, &r->st.arena) != MP_OK)
        return MP_ERR;
    const size_t bytes = m->tab.total * sizeof(float);
    be_to_device(&r->st.be, m->params, state[0], bytes);
    be_to_device(&r->st.be, m->m, state[2], bytes);
    be_to_device(&r->st.be, m->v, state[3], bytes);
    if (sched_kind_versions(d->parallel.schedule_kind) == 2) {
        if (model_versions_create(m) != MP_OK) return MP_ERR;
        be_to_device(&r->st.be, m->params_old, state[1], bytes);
    }
    if (r->st.dp_on && dp_init(&r->st.dp, r->lay.grid.replica, &r->st.be, &r->st.arena, m->tab.total, d->parallel.zero,
                            d->parallel.grad_reduce_dtype == DECK_PRECISION_BF16, m->tab.nlayers + 2) != MP_OK)
        return MP_ERR;
    return run_exec(r);
}

/* Undoes run_model. */
static void run_model_free(run_t *r)
{
    actdump_free(&r->files.dump);
    scratch_destroy(&r->st.scratch, &r->st.arena);
    acts_destroy(&r->st.acts, &r->st.arena);
    free(r->st.gidx);
    param_table_free(&r->st.gtab);
    run_plug_free(r);
    model_destroy(&r->st.model);
    be_destroy(&r->st.be);
}


/* The executor's context: what it may touch of the run. */
static exec_ctx_t run_exec_ctx(run_t *r)
{
    const deck_t *d = &r->deck;
    exec_ctx_t c = {.model = &r->st.model, .be = &r->st.be, .arena = &r->st.arena, .acts = &r->st.acts, .scratch = &r->st.scratch,
                    .wait = &r->lay.wait, .pp_comm = r->lay.grid.comm[GRID_PP], .embed_comm = r->lay.grid.embed,
                    .stage = r->lay.stage, .pp = r->lay.pp, .kind = d->parallel.schedule_kind,
                    .m = r->lay.micro_batches * (r->unit.whole ? r->unit.window : 1), .per = r->unit.whole ? r->lay.micro_batches : 0,
                    .supernet = r->unit.on, .nccl = r->st.p2p_nccl,
                    .play = r->st.play, .prefetch = d->memory.prefetch, .balance = run_balance(d), .balance_keep = d->memory.balance_keep,
                    .partner_mov = run_partner_mov(&r->deck, &r->lay, &r->st), .trace = &r->files.trace, .prof = &r->prof, .dump = &r->files.dump};
    int coord[GRID_NDIMS];
    memcpy(coord, r->lay.grid.coord, sizeof coord);
    for (int s = 0; s < r->lay.pp && s < SIM_MAX_STAGES; s++) {
        coord[GRID_PP] = s;
        c.stage_rank[s] = grid_rank_of(&r->lay.grid, coord);
    }
    return c;
}

/* The executor of this stage, and (memory.coordinate, when some rank copies to or from the host:
 * offloaded activations, or host-resident supernet candidates) its copy engine on the node's shared
 * host-link locks. Collective over the node. */
static int run_exec(run_t *r)
{
    const exec_ctx_t c = run_exec_ctx(r);
    if (exec_init(&r->st.exec, &c) != MP_OK) return MP_ERR;
    int offloads = r->st.exec.stash.mov_bytes > 0 || run_home(r, 0) != NULL, any = 0;
    MPI_CHECK(MPI_Allreduce(&offloads, &any, 1, MPI_INT, MPI_MAX, r->lay.grid.node));
    if (!any || !r->deck.memory.coordinate) return MP_OK;
    if (nodelink_init(&r->st.link, r->lay.grid.node) != MP_OK) return MP_ERR;
    const copier_link_t link = {nodelink_lock, nodelink_unlock, &r->st.link};
    if (offloads) be_offload_link(&r->st.be, &link);
    return MP_OK;
}

/* The deck; with --init-from hf:DIR, the model keys it does not set taken from DIR/config.json (read
 * by rank 0 and broadcast, so every rank loads the same deck; hf_deck.h), their list in
 * r->files.init_keys. MP_OK or MP_ERR on every rank alike. */
static int run_deck(run_t *r, const run_opts_t *o)
{
    if (!o->init_from) return run_agree(deck_load(&r->deck, o->deck_path, o->sets, o->nsets));
    deck_imports_t *imp = MP_CALLOC(1, sizeof *imp);
    const size_t n = DECK_IMPORTS_MAX * 160;
    char *taken = MP_CALLOC(n, 1);
    if (!imp || !taken) MP_ABORT("out of memory loading the deck");
    int rc = r->lay.rank == 0 ? hf_deck_imports(o->init_from + 3, imp) : MP_OK; /* after "hf:" (cli_parse) */
    MPI_CHECK(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Bcast(imp, (int)sizeof *imp, MPI_BYTE, 0, MPI_COMM_WORLD));
    if (rc == MP_OK) rc = deck_load_imports(&r->deck, o->deck_path, o->sets, o->nsets, imp, taken, n);
    free(imp);
    if (run_agree(rc) != MP_OK) return free(taken), MP_ERR;
    r->files.init_keys = taken;
    return MP_OK;
}

/* Deck, grid, threads: everything before memory is committed. */
static int run_layout(run_t *r, const run_opts_t *o)
{
    if (run_deck(r, o) != MP_OK) return MP_ERR;
    const deck_t *d = &r->deck;
    const grid_cfg_t grid = grid_cfg_from_deck(d);
    if (run_agree(grid_build(&r->lay.grid, &grid, MPI_COMM_WORLD)) != MP_OK) return MP_ERR;
    if (run_agree(run_refuse_unimplemented(d)) != MP_OK) goto err_grid;
    if (!(r->files.deck_text = deck_to_string(d))) MP_ABORT("out of memory formatting the deck");
    wait_cfg_init(&r->lay.wait, d->parallel.wait, d->parallel.timeout, r->lay.grid.node_size);
    char who[96];
    snprintf(who, sizeof who, "rank %d (dp %d, tp %d, pp %d, sp %d)", r->lay.rank, r->lay.grid.coord[GRID_DP],
             r->lay.grid.coord[GRID_TP], r->lay.grid.coord[GRID_PP], r->lay.grid.coord[GRID_SP]);
    if (run_agree(watchdog_start(&r->wd, who, d->train.stop_grace, MP_EXIT_REQUEUE)) != MP_OK) goto err_grid;
    /* a wait past parallel.timeout writes RUN/exit_status as the watchdog does (its path, set with the
     * run directory; "" until then) */
    r->lay.wait.who = r->wd.who, r->lay.wait.status = r->wd.status;
    /* the set-up's agreements are blocking MPI calls: a peer that never arrives is this deadline's.
     * checkpoint.timeout's, not parallel.timeout's: the start-up is file-system work (the data, the
     * run directory, HDF5) as a checkpoint is, and a deadline of a few seconds, right for a wait on a
     * peer, ended healthy start-ups on a busy host (test_zero_loss_slurm in a CI beside other work) */
    watchdog_arm(&r->wd, "the start-up (data, model, memory plan, run directory)", "checkpoint.timeout",
                 d->checkpoint.timeout);
    mpi_startup_deadline_end(); /* the watchdog holds the start-up from here (main armed MPI_Init's) */
    r->optim = optim_cfg_from_deck(d);
    /* deck_validate: batch is a multiple of micro_batch × dp; a supernet replica (sp) runs each of its
     * subnets' whole batches */
    r->lay.replica_batch = d->train.batch / r->lay.grid.size[GRID_DP];
    r->lay.micro_batches = r->lay.replica_batch / d->train.micro_batch;
    r->lay.threads = run_threads(d, r->lay.grid.node_size);
    kernels_set_threads(r->lay.threads);
    /* after the threads: the split is timed as the run will compute */
    if (run_agree(autosplit_resolve(&r->deck, &r->lay.wait, r->lay.rank, &r->autosplit)) != MP_OK) goto err_grid;
    return MP_OK;
err_grid:
    watchdog_end(&r->wd);
    grid_free(&r->lay.grid);
    return MP_ERR;
}

int run_setup(run_t *r, const run_opts_t *o, int with_out_dir)
{
    memset(r, 0, sizeof *r);
    r->opts = *o;
    r->files.lock.fd = -1;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r->lay.rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &r->lay.world));
    r->training = with_out_dir;
    if (run_layout(r, o) != MP_OK) return MP_ERR;
    if (run_agree(run_plug_choose(r, o)) != MP_OK) goto err_layout;
    /* rank 0 reads every token once (run_check_data's vocab check); the others only map */
    const data_opts_t dopts = {.val_path = r->deck.data.val_path, .scan = r->lay.rank == 0,
                               .order = r->deck.data.order == DECK_ORDER_SEQUENTIAL ? DATA_ORDER_SEQUENTIAL : DATA_ORDER_RANDOM};
    if (run_agree(data_open(&r->data, r->deck.data.path, &dopts)) != MP_OK) goto err_layout;
    if (run_agree(run_check_data(r)) != MP_OK) goto err_data;
    if (run_play_costs(&r->deck, &r->lay, &r->st) != MP_OK) goto err_data;
    if (run_agree(run_model(r)) != MP_OK) goto err_data;
    r->st.dp_on = r->lay.grid.size[GRID_DP] > 1; /* supernet replicas (sp) share no gradients */
    if (r->st.dp_on && run_agree(dp_init(&r->st.dp, r->lay.grid.replica, &r->st.be, &r->st.arena, r->st.model.tab.total, r->deck.parallel.zero,
                                      r->deck.parallel.grad_reduce_dtype == DECK_PRECISION_BF16,
                                      r->st.model.tab.nlayers + 2)) != MP_OK)
        goto err_model;
    if (run_agree(run_exec(r)) != MP_OK) goto err_dp;
    r->peak_gflops = run_job_peak(&r->deck, &r->lay);
    if (with_out_dir && run_out_dir(r) != MP_OK) goto err_exec;
    watchdog_disarm(&r->wd);
    return MP_OK;
err_exec:
    exec_free(&r->st.exec);
err_dp:
    if (r->st.dp_on) dp_free(&r->st.dp);
err_model:
    run_model_free(r);
    nodelink_free(&r->st.link); /* after the copy engine, which takes its locks, is gone */
err_data:
    data_free(&r->data);
err_layout:
    watchdog_end(&r->wd);
    free(r->files.deck_text);
    free(r->files.init_keys);
    grid_free(&r->lay.grid);
    return MP_ERR;
}

void run_teardown(run_t *r)
{
    runlog_close(&r->files.log);
    exec_free(&r->st.exec);
    if (r->st.dp_on) dp_free(&r->st.dp);
    grid_free(&r->lay.grid);
    run_model_free(r);
    nodelink_free(&r->st.link); /* after the copy engine, which takes its locks, is gone */
    data_free(&r->data);
    free(r->files.deck_text);
    free(r->files.init_keys);
    ckpt_verdicts_free(&r->files.verdicts);
    rundir_unlock(&r->files.lock); /* last: the directory is ours until everything is written and closed */
    watchdog_end(&r->wd);
}
