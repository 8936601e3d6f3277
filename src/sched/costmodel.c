#include "costmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_fused_layout.h"
#include "check.h"
#include "compose.h"
#include "memlists.h"


cm_model_t cm_model_family(cm_model_t mo)
{
    if (mo.QKV || mo.FC || mo.F) return mo;
    mo.QKV = 3 * mo.C, mo.F = mo.FC = mo.R * mo.C;
    mo.bias = 1, mo.norm = 2, mo.wpe = 1, mo.untied = 0;
    return mo;
}

int cm_model_kv_heads(const cm_model_t *m0)
{
    const cm_model_t mo = cm_model_family(*m0);
    const int hd = mo.NH > 0 ? mo.C / mo.NH : 0;
    return hd > 0 ? (mo.QKV - mo.C) / 2 / hd : 0;
}

const char *cm_tp_indivisible(const cm_model_t *m0, int tp)
{
    const cm_model_t mo = cm_model_family(*m0);
    const int kv = cm_model_kv_heads(m0);
    if (tp < 1) return "tp is below 1";
    if (mo.NH % tp) return "the heads are not a multiple of tp";
    if (kv % tp) return "the key/value heads are not a multiple of tp (each rank holds whole ones)";
    if (mo.F % tp) return "the MLP's hidden width is not a multiple of tp";
    if (mo.V % tp) return "the vocabulary is not a multiple of tp (the head's rows)";
    return NULL;
}

double cm_model_flops_per_token(const cm_model_t *m0)
{
    /* the same count as model_flops_per_token (model.c): 6 × matmul weights + 12·L·C·T attention */
    const cm_model_t mo = cm_model_family(*m0);
    const double C = mo.C, T = mo.T, V = mo.V;
    return 6.0 * (V * C + mo.L * ((double)mo.QKV * C + C * C + (double)mo.FC * C + C * mo.F)) + 12.0 * mo.L * C * T;
}

/* Forward GEMMs and attention of one block, the attention core alone (selective's re-run), and the
 * four products alone (their weight gradients are W's: one product of the same size each). */
static void cm_block_compute(const cm_model_t *mo, const dev_kind_t *d, dev_prec_t p, int B, int tp, double *fwd_p,
                             double *core_p, double *gemm_p)
{
    const double N = (double)B * mo->T, C = mo->C, T = mo->T, hd = (double)mo->C / mo->NH;
    const double heads = (double)mo->NH / tp, F = (double)mo->F / tp, FC = (double)mo->FC / tp;
    const double gemm = dev_gemm_time(d, p, N, (double)mo->QKV / tp, C) + dev_gemm_time(d, p, N, C, C / tp) +
                        dev_gemm_time(d, p, N, FC, C) + dev_gemm_time(d, p, N, C, F);
    const double batched = B * heads * (dev_gemm_time(d, p, T, T, hd) + dev_gemm_time(d, p, T, hd, T));
    const double elem = p == DEV_PREC_BF16 ? 2.0 : 4.0;
    /* softmax reads and writes the T×T scores of every head; LNs, residuals and GELU stream rows */
    const double softmax = dev_mem_time(d, 2.0 * N * heads * T * elem);
    const double stream = dev_mem_time(d, N * elem * (4 * C + 6 * C + FC + F));
    *fwd_p = gemm + batched + softmax + stream;
    *core_p = batched + softmax;
    *gemm_p = gemm;
}

/* The bytes a block's attention saves for its backward: in bf16, where the shape is one the CUDA
 * fused kernels take (multi-head), their fp32 layout (kernels/attention_fused_layout.h: log-sum-exps,
 * the output's copy, the bf16 planes where kept), as the model carves it on cuda (be_attention_fused;
 * the device half of that rule, the head sizes a GPU's shared memory allows, is taken as met: every
 * size is on an H100); else the (T,T) probabilities of the rank's heads. */
static double cm_att_bytes(const cm_model_t *mo, dev_prec_t p, int B, int tp)
{
    const int T = mo->T, Cl = mo->C / tp, NHl = mo->NH / tp;
    const int multihead = mo->QKV == 3 * mo->C;
    if (p == DEV_PREC_BF16 && multihead && mp_att_fused_shape_fits(B, T, Cl, NHl))
        return 4.0 * (double)mp_att_fused_floats(B, T, Cl, NHl);
    return (p == DEV_PREC_BF16 ? 2.0 : 4.0) * (double)B * NHl * T * T;
}

void cm_costs_from_device(cm_costs_t *c, const cm_model_t *m0, const dev_kind_t *d, dev_prec_t p, int B, int tp)
{
    memset(c, 0, sizeof *c);
    const cm_model_t fam = cm_model_family(*m0), *mo = &fam;
    const double N = (double)B * mo->T, C = mo->C, T = mo->T, V = mo->V, F = (double)mo->F / tp;
    const double FC = (double)mo->FC / tp, QKV = (double)mo->QKV / tp;
    const double elem = p == DEV_PREC_BF16 ? 2.0 : 4.0;
    c->B = B, c->tp = tp, c->cpu_threads = d->node_cores > 0 ? 1 : 0;
    double core, gemm;
    cm_block_compute(mo, d, p, B, tp, &c->fwd, &core, &gemm);
    c->bwd = 2.0 * c->fwd; /* a product's backward is two products of its size (input and weight gradients) */
    /* W is half the products' backward; attention's backward and the streamed passes feed the
     * input gradient, so they are B's */
    c->bwd_w = gemm, c->bwd_b = c->bwd - gemm;
    c->extra[POLICY_RECOMPUTE] = c->fwd, c->extra[POLICY_SELECTIVE] = core;
    c->embed_fwd = dev_mem_time(d, 3.0 * N * C * elem), c->embed_bwd = 2.0 * c->embed_fwd;
    const double head = dev_gemm_time(d, p, N, V / tp, C), xent = dev_mem_time(d, 3.0 * N * (V / tp) * 4.0);
    c->head_fwd = head + xent, c->head_bwd = 2.0 * head + xent, c->head_bwd_w = head;
    const dev_link_t *tl = dev_group_link(d, tp, 1);
    c->tp_fwd = 2.0 * dev_allreduce_time(tl, tp, N * C * elem), c->tp_bwd = c->tp_fwd;
    /* per token: LN1 out, residual, LN2 out (replicated over tp); q, k, v, attention out, fc and its
     * activation's out (split over tp); and the attention's saved buffer, which selective drops */
    const double keep = N * elem * (3 * C + QKV + C / tp + FC + F) + cm_att_bytes(mo, p, B, tp);
    c->stash[POLICY_KEEP] = keep, c->stash[POLICY_SELECTIVE] = keep - cm_att_bytes(mo, p, B, tp);
    c->stash[POLICY_RECOMPUTE] = N * C * elem, c->stash[POLICY_OFFLOAD] = 0.0;
    c->offload_bytes = keep;
    /* W's stash is fp32 whatever the precision (model_wstash_bytes): the douts of qkv, proj, fc and
     * fcproj; under recompute also their inputs, which B's re-run forward wrote */
    const double douts = 4.0 * N * (2 * C + FC + QKV);
    c->wstash[POLICY_KEEP] = c->wstash[POLICY_SELECTIVE] = c->wstash[POLICY_OFFLOAD] = douts;
    c->wstash[POLICY_RECOMPUTE] = douts + 4.0 * N * (2 * C + C / tp + F);
    c->act_bytes = N * C * elem;
    c->block_params = (((double)mo->QKV + C + mo->FC + mo->F) * C + mo->bias * ((double)mo->QKV + mo->FC)) / tp +
                      2.0 * mo->norm * C + 2.0 * mo->bias * C;
    c->embed_params = V * C / tp + (mo->wpe ? T * C : 0.0);
    c->head_params = mo->norm * C + (mo->untied ? V * C / tp : 0.0);
    c->work_bytes = N * (V / tp) * 4.0 * 2.0; /* the last stage's logits and their gradient */
    c->state_bytes_per_param = 16.0 + (p == DEV_PREC_BF16 ? 2.0 : 0.0);
    c->opt_bytes_per_param = 8.0;
    c->optimizer_s_per_param = 28.0 / d->mem_bw; /* read w, g, m, v; write w, m, v (fp32) */
    c->flops_per_token = cm_model_flops_per_token(mo);
}

void cm_layout_balanced(cm_layout_t *lay, int L)
{
    const int K = lay->pp * lay->v;
    for (int k = 0; k < K && k < CM_MAX_CHUNKS; k++) lay->chunk_layers[k] = L / K + (k < L % K);
}

/* ---- the simulator's costs for one layout ---- */

typedef struct {
    const cm_costs_t *c;
    const dev_kind_t *d;           /* &dk */
    dev_kind_t dk;                 /* the kind with per_node = the layout's ranks per node */
    const cm_layout_t *lay;
    int K;
    double slow;                   /* CPU: time multiplier of this rank's share of the node's cores */
    int free_comm;                 /* 1: messages, tp and dp collectives cost nothing (exposed comm) */
    double fwd[CM_MAX_CHUNKS], bwd[CM_MAX_CHUNKS], moved[CM_MAX_CHUNKS];
    double bwd_b[CM_MAX_CHUNKS], bwd_w[CM_MAX_CHUNKS]; /* split kinds: the backward's B and W */
    double reduce[SIM_MAX_STAGES]; /* REDUCE_GRADS: the exposed part of the dp all-reduce */
    double wire[SIM_MAX_STAGES];   /* an activation or gradient message from stage s to its neighbour */
    double guest[SIM_MAX_STAGES];  /* balance: one of stage s's stashes on the wire to its partner (either way) */
} cm_ctx_t;

static double cm_compute(const void *vctx, int stage, const instr_t *in)
{
    const cm_ctx_t *x = vctx;
    switch (in->op) {
    case OP_FORWARD: return x->fwd[in->chunk];
    case OP_BACKWARD: return x->bwd[in->chunk];
    case OP_BACKWARD_B: return x->bwd_b[in->chunk];
    case OP_BACKWARD_W: return x->bwd_w[in->chunk];
    case OP_REDUCE_GRADS: return x->free_comm ? 0.0 : x->reduce[stage];
    case OP_OFFLOAD:
    case OP_PREFETCH:
        /* a CPU "offload" is a copy through DRAM on the rank's own thread; a GPU's crosses PCIe */
        return x->d->node_cores > 0 ? x->slow * x->moved[in->chunk] * 2.0 / x->d->mem_bw
                                    : x->moved[in->chunk] / x->d->host_bw;
    default: return 0.0;
    }
}

static double cm_wire(const void *vctx, int stage, const instr_t *in)
{
    const cm_ctx_t *x = vctx;
    if (x->free_comm) return 0.0;
    /* balance: the evictor sends its stash out, the acceptor sends it back (the owner's size) */
    if (in->op == OP_EVICT) return x->guest[stage];
    if (in->op == OP_RETURN) return x->guest[in->peer];
    /* wire[s] is the boundary s -> s+1 (mod pp); a V's way back up sends from s to s−1, over the
     * boundary s−1 -> s */
    const int pp = x->lay->pp;
    return x->wire[in->peer == (stage + 1) % pp ? stage : in->peer];
}

static int cm_stage_layers(const cm_layout_t *lay, int K, int s)
{
    int layers = 0;
    for (int k = 0; k < K; k++) layers += sched_chunk_stage(lay->kind, k, lay->pp) == s ? lay->chunk_layers[k] : 0;
    return layers;
}

/* Parameters held by stage s (its chunks; the embedding with the first chunk, the head with the
 * last and, when that is another stage, a copy of the embedding for the tied head). */
static double cm_stage_params(const cm_costs_t *c, const cm_layout_t *lay, int K, int s)
{
    const int first = sched_chunk_stage(lay->kind, 0, lay->pp), last = sched_chunk_stage(lay->kind, K - 1, lay->pp);
    double params = cm_stage_layers(lay, K, s) * c->block_params;
    if (s == first) params += c->embed_params;
    if (s == last) params += c->head_params + (last != first ? c->embed_params : 0.0);
    return params;
}

/* One chunk of nl blocks under policy pol (with the embedding, the head): its forward, fused
 * backward, and the backward's B and W parts, compute only, tp's all-reduces counted tpc times. The
 * split: recomputation and tp all-reduces run in B (model_backward_b), as does the embedding's
 * gradient; the head's W is its tied weight's product. */
static void cm_chunk_times(const cm_costs_t *c, int nl, policy_t pol, int embed, int head, double tpc, double *f,
                           double *b, double *bb, double *bw)
{
    const double again = pol == POLICY_RECOMPUTE ? tpc * c->tp_fwd : 0.0;
    *f = nl * (c->fwd + tpc * c->tp_fwd);
    *b = nl * (c->bwd + c->extra[pol] + tpc * c->tp_bwd + again);
    *bw = nl * c->bwd_w + (head ? c->head_bwd_w : 0.0);
    *bb = nl * (c->bwd_b + c->extra[pol] + tpc * c->tp_bwd + again);
    if (embed) *f += c->embed_fwd, *b += c->embed_bwd, *bb += c->embed_bwd;
    if (head) *f += c->head_fwd, *b += c->head_bwd, *bb += c->head_bwd - c->head_bwd_w;
}

sched_costs_t cm_play_costs(const cm_costs_t *c, int K, const int *chunk_layers, const policy_t *chunk_policy,
                            double tpc)
{
    sched_costs_t t = {0.0, 0.0, 0.0};
    for (int k = 0; k < K; k++) {
        double f, b, bb, bw;
        cm_chunk_times(c, chunk_layers[k], chunk_policy[k], k == 0, k == K - 1, tpc, &f, &b, &bb, &bw);
        t.tf += f / K, t.tb += bb / K, t.tw += bw / K;
    }
    return t;
}

/* The chunks' forward and backward times, offload bytes, and per stage its messages' wire time and
 * its exposed dp reduction (node-aligned placement: tp fastest, then dp, then pp, as the grid
 * orders ranks). */
static void cm_ctx_fill(cm_ctx_t *x)
{
    const cm_layout_t *lay = x->lay;
    const cm_costs_t *c = x->c;
    const double tpc = x->free_comm ? 0.0 : 1.0;
    for (int k = 0; k < x->K; k++) {
        const int nl = lay->chunk_layers[k];
        const policy_t pol = lay->policy[sched_chunk_stage(lay->kind, k, lay->pp)];
        cm_chunk_times(c, nl, pol, k == 0, k == x->K - 1, tpc, &x->fwd[k], &x->bwd[k], &x->bwd_b[k], &x->bwd_w[k]);
        x->fwd[k] *= x->slow, x->bwd[k] *= x->slow, x->bwd_b[k] *= x->slow, x->bwd_w[k] *= x->slow;
        x->moved[k] = pol == POLICY_OFFLOAD ? nl * c->offload_bytes : 0.0;
    }
    const int stride_pp = lay->tp * lay->dp, pn = x->d->per_node;
    for (int s = 0; s < lay->pp; s++) {
        /* the boundary s -> s+1 crosses a node when their first ranks are on different nodes */
        const int r0 = s * stride_pp, r1 = ((s + 1) % lay->pp) * stride_pp;
        const dev_link_t *l = r0 / pn == r1 / pn ? &x->d->intra : &x->d->inter;
        x->wire[s] = dev_p2p_time(l, c->act_bytes);
        /* balance partners (s, pp−1−s): their first ranks' nodes decide the link */
        const int ra = (lay->pp - 1 - s) * stride_pp;
        x->guest[s] = dev_p2p_time(r0 / pn == ra / pn ? &x->d->intra : &x->d->inter,
                                   cm_stage_layers(lay, x->K, s) * c->stash[POLICY_KEEP]);
        /* fp32 gradients in buckets started as the backward ends. A GPU's collectives run beside
         * the compute (NCCL's own kernels): what is left after the stage's first chunk's last
         * backward is exposed, at least a tenth of it (an assumption, docs/PLAN.md). A CPU rank has
         * no progress thread: MPI moves and sums its buckets only inside the calls the compute
         * thread makes between layers, on the same cores and DRAM, so none of it hides (measured at
         * 124M, dp = 2: docs/PLAN.md) and the whole reduction costs the rank's share of the node. */
        const double params = cm_stage_params(c, lay, x->K, s);
        const dev_link_t *dl = dev_group_link(x->d, lay->dp, lay->tp);
        const double ar = lay->zero ? 2.0 * dev_allgather_time(dl, lay->dp, 4.0 * params)
                                    : dev_allreduce_time(dl, lay->dp, 4.0 * params);
        const double hidden = x->bwd[s];
        x->reduce[s] = lay->dp <= 1             ? 0.0
                       : x->d->node_cores > 0 ? ar
                       : ar > hidden          ? ar - hidden
                                              : 0.1 * ar;
    }
}

static int cm_check_layout(const cm_model_t *mo, const cm_costs_t *c, const cm_layout_t *lay, cm_result_t *res)
{
    const int K = lay->pp * lay->v;
    const int vee = sched_kind_place(lay->kind) == SCHED_PLACE_V;
    /* zbv, dualpipev: the V of two chunks per stage, chunks s and 2pp−1−s of equal size (the runtime's rule) */
    if (vee && (lay->v != 2 || lay->pp < 2))
        return snprintf(res->error, sizeof res->error, "schedule %s places two chunks on each of pp >= 2 stages "
                        "(v = %d, pp = %d)", sched_kind_names[lay->kind], lay->v, lay->pp), MP_ERR;
    for (int s = 0; vee && s < lay->pp && 2 * lay->pp <= CM_MAX_CHUNKS; s++)
        if (lay->chunk_layers[s] != lay->chunk_layers[2 * lay->pp - 1 - s])
            return snprintf(res->error, sizeof res->error, "schedule %s holds half a stage's layers in each chunk of "
                            "its V: stage %d has chunks of %d and %d", sched_kind_names[lay->kind], s,
                            lay->chunk_layers[s], lay->chunk_layers[2 * lay->pp - 1 - s]), MP_ERR;
    if (sched_kind_split(lay->kind) && !vee && lay->v != 1)
        return snprintf(res->error, sizeof res->error, "schedule %s has one chunk per stage (v = %d)",
                        sched_kind_names[lay->kind], lay->v), MP_ERR;
    if (sched_kind_split(lay->kind) && !(c->bwd_b + c->bwd_w > 0))
        return snprintf(res->error, sizeof res->error, "schedule %s needs the backward split into B and W, which these "
                        "costs lack (a profile from before the split: run mindpipe profile again)",
                        sched_kind_names[lay->kind]), MP_ERR;
    /* what the runtime refuses, in its words (compose.c); of the features, a layout knows balance */
    if (compose_refused(lay->kind, lay->pp, lay->balance ? 1u << COMPOSE_BALANCE : 0u, res->error, sizeof res->error) !=
        MP_OK)
        return MP_ERR;
    if (lay->pp < 1 || lay->pp > SIM_MAX_STAGES || K > CM_MAX_CHUNKS || lay->dp < 1 || lay->tp < 1 || lay->mb < 1)
        return snprintf(res->error, sizeof res->error, "layout out of range (pp <= %d, pp·v <= %d)", SIM_MAX_STAGES,
                        CM_MAX_CHUNKS), MP_ERR;
    if (c->B != lay->mb || c->tp != lay->tp)
        return snprintf(res->error, sizeof res->error, "costs made for B=%d tp=%d, layout has micro_batch=%d tp=%d",
                        c->B, c->tp, lay->mb, lay->tp), MP_ERR;
    if (mo->batch % (lay->mb * lay->dp))
        return snprintf(res->error, sizeof res->error, "batch %d is not a multiple of micro_batch × dp = %d × %d",
                        mo->batch, lay->mb, lay->dp), MP_ERR;
    int sum = 0;
    for (int k = 0; k < K; k++) {
        if (lay->chunk_layers[k] < 1)
            return snprintf(res->error, sizeof res->error, "chunk %d has no layer", k), MP_ERR;
        sum += lay->chunk_layers[k];
    }
    if (sum != mo->L)
        return snprintf(res->error, sizeof res->error, "chunks hold %d layers, the model has %d", sum, mo->L), MP_ERR;
    return MP_OK;
}

/* One costed run of the layout's lists into res->makespan_s. */
static int cm_simulate(cm_ctx_t *x, instr_list_t *lists, int m, cm_result_t *res)
{
    cm_ctx_fill(x);
    sim_costs_t sc = {cm_compute, cm_wire, x};
    sim_result_t sr;
    const lower_target_t target = x->d->node_cores > 0 ? LOWER_HOST : LOWER_STREAMS;
    if (sim_run_costed(lists, x->lay->pp, m, x->lay->v, target, SIM_MATCH_TAG, &sc, &sr) != MP_OK)
        return snprintf(res->error, sizeof res->error, "%s", sr.error), MP_ERR;
    res->makespan_s = sr.makespan;
    return MP_OK;
}

/* Peak device bytes of every stage: model state, the stash its list holds at once, transient buffers. */
static void cm_memory(const cm_costs_t *c, const cm_layout_t *lay, const instr_list_t *lists, cm_result_t *res)
{
    const int K = lay->pp * lay->v;
    res->fits = 1;
    for (int s = 0; s < lay->pp; s++) {
        const double params = cm_stage_params(c, lay, K, s);
        double state = params * c->state_bytes_per_param;
        if (lay->zero && lay->dp > 1) state -= params * c->opt_bytes_per_param * (1.0 - 1.0 / lay->dp);
        const int layers = cm_stage_layers(lay, K, s);
        const policy_t pol = lay->policy[s];
        /* keys held at once (offload, balance: only those not moved off), each a chunk of layers/v layers */
        const double per_key = (double)layers / lay->v * c->stash[pol == POLICY_OFFLOAD ? POLICY_KEEP : pol];
        const int keys = pol == POLICY_OFFLOAD || lay->balance ? sched_list_device_peak(&lists[s], 0)
                                                           : sched_list_peak(&lists[s], 0);
        double work = 2.0 * c->act_bytes + (pol == POLICY_KEEP || pol == POLICY_OFFLOAD ? 0.0 : c->stash[POLICY_KEEP]);
        if (s == sched_chunk_stage(lay->kind, K - 1, lay->pp)) work += c->work_bytes; /* the loss's stage */
        /* balance: the partner's stashes held here as guests, at the partner's size */
        const double guests = lay->balance ? sched_balance_guest_peak(&lists[s]) * (double)cm_stage_layers(lay, K, lay->pp - 1 - s) *
                                                 c->stash[POLICY_KEEP]
                                           : 0.0;
        /* a split backward: each (micro-batch) between its B and its W holds W's stash beside its slot
         * (the executor's wstash_t), and on the loss's stage each further slot its dlogits (the
         * head's W reads them there: half of work_bytes, which counts logits and their gradient) */
        double wkeep = 0.0;
        if (sched_kind_split(lay->kind)) {
            wkeep = sched_list_peak_w(&lists[s]) * (double)layers / lay->v * c->wstash[pol];
            if (s == sched_chunk_stage(lay->kind, K - 1, lay->pp) && keys > 1)
                wkeep += (keys - 1) * c->work_bytes / 2.0;
        }
        /* the V's turn (stage pp−1): chunk pp's input gradient kept per micro-batch for chunk pp−1's B
         * (the executor's turn buffer: one fp32 activation each) */
        if (sched_kind_place(lay->kind) == SCHED_PLACE_V && s == lay->pp - 1) work += res->m * c->act_bytes;
        res->stage_mem[s] = state + keys * per_key + guests + work + wkeep;
    }
}

int cm_evaluate(const cm_model_t *mo, const cm_costs_t *c, const dev_kind_t *d, const cm_layout_t *lay,
                cm_result_t *res)
{
    memset(res, 0, sizeof *res);
    if (cm_check_layout(mo, c, lay, res) != MP_OK) return MP_ERR;
    const int K = lay->pp * lay->v, m = mo->batch / (lay->mb * lay->dp), world = lay->dp * lay->tp * lay->pp;
    res->m = m;
    cm_ctx_t *x = calloc(1, sizeof *x);
    if (!x) return snprintf(res->error, sizeof res->error, "out of memory"), MP_ERR;
    x->dk = *d, x->d = &x->dk, x->c = c, x->lay = lay, x->K = K, x->slow = 1.0;
    if (lay->nodes_ranks > 0) x->dk.per_node = lay->nodes_ranks;
    /* a CPU node's ranks share its cores: each runs max(1, cores ÷ ranks) threads. Beyond the cores
     * every rank runs at cores ÷ (ranks·threads) of its speed for the whole step, not only while it
     * computes: a waiting rank polls MPI_Test (wait.c), so it stays runnable and the kernel shares
     * the cores among all of them; the scheduler balances cores by runnable count, so two computing
     * ranks can sit on one core while the other holds two pollers. Measured: pp = 4 on 2 cores took
     * as long as pp = 1 (docs/PLAN.md), twice the processor-sharing bound this replaced. */
    const int rn = lay->nodes_ranks > 0 ? lay->nodes_ranks : world;
    const int cores = d->node_cores > 0 ? (int)d->node_cores : 1;
    const int thr = lay->threads > 0 ? lay->threads : rn >= cores ? 1 : cores / rn;
    const double share = d->node_cores > 0 && rn * thr > cores ? (double)rn * thr / cores : 1.0;
    if (d->node_cores > 0) x->slow = (double)c->cpu_threads / thr * share;
    instr_list_t lists[SIM_MAX_STAGES];
    sim_result_t sr;
    /* zb1p's and zbv's greedy play orders each stage's F, B and W by their times: it plays these
     * costs (one set for every stage, the chunks' means: its builder takes uniform stages), not the
     * unit ones; the same function gives a run its times from a profile (parallel.schedule_profile),
     * so the lists planned are the lists run. (A uniform factor, as the CPU share `slow`, would not
     * change the play, and is left out.) */
    sched_costs_t play = sched_costs_unit;
    if (sched_kind_played(lay->kind)) { /* dualpipev's order is fixed */
        policy_t cpol[CM_MAX_CHUNKS];
        for (int k = 0; k < K; k++) cpol[k] = lay->policy[sched_chunk_stage(lay->kind, k, lay->pp)];
        play = cm_play_costs(c, K, lay->chunk_layers, cpol, 1.0);
    }
    if (sim_build_lists_costs(lists, lay->kind, lay->pp, m, lay->v, &play, &sr) != MP_OK) {
        free(x);
        return snprintf(res->error, sizeof res->error, "%s", sr.error), MP_ERR;
    }
    int rc = MP_ERR;
    for (int s = 0; s < lay->pp; s++)
        if (lay->policy[s] == POLICY_OFFLOAD && sched_add_offload(&lists[s], lay->prefetch) != MP_OK) {
            snprintf(res->error, sizeof res->error, "cannot add offload instructions");
            goto out;
        }
    if (lay->balance) {
        /* the executor's own rewrite (executor.c), so the simulated moves are the ones that run */
        if (sched_balance_check(lay->kind, lay->pp, m, lay->v, res->error, sizeof res->error) != MP_OK) goto out;
        if (d->node_cores <= 0) {
            snprintf(res->error, sizeof res->error,
                     "balance on a GPU kind: its stash moves are host MPI, not built for device memory (docs/GPU.md)");
            goto out;
        }
        for (int s = 0; s < lay->pp; s++)
            if (lay->policy[s] != POLICY_KEEP) {
                snprintf(res->error, sizeof res->error, "balance keeps every stash: stage %d is %s", s,
                         policy_names[lay->policy[s]]);
                goto out;
            }
        if (sched_add_balance(lists, lay->pp, m, lay->balance_keep) != MP_OK) {
            snprintf(res->error, sizeof res->error, "cannot add balance instructions");
            goto out;
        }
    }
    x->free_comm = 1;
    if (cm_simulate(x, lists, m, res) != MP_OK) goto out;
    const double free_makespan = res->makespan_s;
    x->free_comm = 0;
    if (cm_simulate(x, lists, m, res) != MP_OK) goto out;
    double opt = 0.0, busy_max = 0.0, busy_sum = 0.0;
    for (int s = 0; s < lay->pp; s++) {
        double params = cm_stage_params(c, lay, K, s), t = params * c->optimizer_s_per_param * x->slow;
        if (lay->zero && lay->dp > 1) t /= lay->dp;
        if (t > opt) opt = t;
        double busy = 0.0;
        for (int i = 0; i < lists[s].n; i++) {
            const instr_t *in = &lists[s].ins[i];
            if (in->op == OP_FORWARD || in->op == OP_BACKWARD || in->op == OP_BACKWARD_B || in->op == OP_BACKWARD_W)
                busy += cm_compute(x, s, in);
        }
        res->stage_busy_s[s] = busy;
        busy_sum += busy;
        if (busy > busy_max) busy_max = busy;
    }
    res->step_s = res->makespan_s + opt;
    res->exposed_comm_s = res->makespan_s - free_makespan;
    res->bubble = res->makespan_s > 0 ? 1.0 - busy_max / res->makespan_s : 0.0;
    const double tokens = (double)mo->batch * mo->T;
    res->tokens_per_s = tokens / res->step_s;
    res->flops_per_gpu = c->flops_per_token * tokens / res->step_s / world;
    cm_memory(c, lay, lists, res);
    for (int s = 0; s < lay->pp; s++)
        if (res->stage_mem[s] > d->mem_bytes) res->fits = 0;
    /* energy: every device idles for the whole step and draws (busy − idle) while it computes */
    const double util = busy_sum / lay->pp / res->step_s;
    const double ndev = d->node_cores > 0 ? ceil((double)world / (lay->nodes_ranks > 0 ? lay->nodes_ranks : world))
                                          : (double)world;
    const double job_peak = d->node_cores > 0 ? ndev * d->node_cores * d->peak[lay->prec] : world * d->peak[lay->prec];
    res->mfu = res->flops_per_gpu * world / job_peak;
    res->energy_j = ndev * res->step_s * (d->idle_w + (d->busy_w - d->idle_w) * (util > 1 ? 1 : util));
    rc = MP_OK;
out:
    free(x);
    sim_free_lists(lists, lay->pp);
    return rc;
}
