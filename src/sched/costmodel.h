/* The planner's cost model (ARCHITECTURE.md §6 "Planner", docs/PLAN.md): what one micro-batch costs
 * per layer on one rank (from a profile measured here, or from a device kind, devmodel.h), and the
 * time and memory of a whole layout, obtained by running the simulator (sim.h) over the layout's
 * real instruction lists with those costs. Not a closed formula: bubbles, message waits, offload
 * instructions and the stash peaks come from the lists themselves.
 *
 * Letters: L layers, C width, NH heads, T sequence, V vocabulary, R mlp ratio, B micro-batch
 * (sequences), N = B·T rows, tp/pp/dp the grid, v chunks per stage, K = pp·v chunks, m micro-batches
 * per step on one replica. */
#ifndef MP_COSTMODEL_H
#define MP_COSTMODEL_H

#include "devmodel.h"
#include "policy.h"
#include "schedule.h"
#include "sim.h"

#define CM_MAX_CHUNKS 256

/* The per-stage stash policies the planner chooses among are policy.h's first POLICY_STAGE_CHOICES
 * (balance, which pairs stages, is a layout flag below, not a stage's choice). */

typedef struct {
    int L, C, NH, T, V, R;
    int batch;          /* global batch, sequences */
    /* The block's family (block_kind_cost_model fills these from the model's description; all 0 is
     * GPT-2 of mlp_ratio R): the rows of the q|k|v product (3C; C + 2·KA with grouped-query
     * attention), of the MLP's first product (F; llama's gate|up 2F) and the MLP's hidden width F;
     * whether the products have biases, the floats of one norm per channel (LayerNorm 2, RMSNorm
     * 1), a learned position table, and an LM head of its own (untied). */
    int QKV, FC, F;
    int bias, norm, wpe, untied;
} cm_model_t;

/* mo with the family fields GPT-2's where all are 0 (an initialiser of the seven above only). */
cm_model_t cm_model_family(cm_model_t mo);

/* Whether tensor parallelism of tp divides the model as the executor splits it: query heads, key/
 * value heads (whole heads a rank), the MLP's hidden width and the vocabulary's rows. NULL when it
 * does, else what does not divide (a static string): the planner's search skips such a tp, and
 * `plan --layout` refuses it with this, as `train` refuses the deck (deck_check). */
const char *cm_tp_indivisible(const cm_model_t *mo, int tp);
/* The model's key/value heads (its qkv width less C, over two heads' widths; GPT-2's: its heads). */
int cm_model_kv_heads(const cm_model_t *mo);

/* One micro-batch of B sequences on one rank of a tp group: seconds and bytes. */
typedef struct {
    int B, tp;                        /* what these costs were made for */
    int cpu_threads;                  /* a CPU kind: threads one rank used for these times (0: a GPU) */
    double fwd, bwd;                  /* one block, compute only */
    double bwd_b, bwd_w;              /* bwd split for the zero-bubble schedules: B (input gradient, with
                                       * attention's backward) and W (the four products' weight gradients);
                                       * the fused schedules cost bwd. Both 0: no split known (an old profile) */
    double extra[POLICY_STAGE_CHOICES];        /* one block: backward's extra time under each policy (re-run forward) */
    double embed_fwd, embed_bwd;      /* token + position embedding */
    double head_fwd, head_bwd;        /* final LN, LM head, cross-entropy */
    double head_bwd_w;                /* of head_bwd, W's part: the tied head's weight-gradient product (the
                                       * embedding's own gradient is B's, as model_backward_b does it) */
    double tp_fwd, tp_bwd;            /* one block: its tensor-parallel all-reduces */
    double stash[POLICY_STAGE_CHOICES];        /* one block: bytes held on the device from forward to backward */
    double offload_bytes;             /* one block under offload: bytes moved each way */
    double wstash[POLICY_STAGE_CHOICES];       /* one block: bytes a split backward keeps from its B to its W beside
                                       * the stash (model_wstash_bytes: the products' douts, + their inputs
                                       * under recompute) */
    double act_bytes;                 /* one activation message between stages: N·C·element */
    double block_params;              /* parameters of one block on this rank (after tp) */
    double embed_params, head_params; /* wte+wpe; lnf (the head is tied to wte) */
    double work_bytes;                /* the last stage's transient buffers (logits and their gradient) */
    double state_bytes_per_param;     /* weights, gradients, optimizer moments (16 fp32; + 2 for bf16) */
    double opt_bytes_per_param;       /* of those, the ones ZeRO-1 shards over dp (Adam m and v) */
    double optimizer_s_per_param;     /* seconds of AdamW per parameter (memory-bound) */
    double flops_per_token;           /* model FLOPs per token, forward + backward (the MFU numerator) */
} cm_costs_t;

/* One layout to evaluate. */
typedef struct {
    int dp, tp, pp, v, mb;            /* mb: sequences per micro-batch */
    sched_kind_t kind;
    int zero;                         /* 1: optimizer moments sharded over dp */
    int nodes_ranks;                  /* ranks per node (for links and CPU sharing) */
    int threads;                      /* a CPU kind: threads per rank (0: max(1, cores ÷ ranks), train.threads' rule) */
    int chunk_layers[CM_MAX_CHUNKS];  /* layers of chunk k, K = pp·v entries */
    policy_t policy[SIM_MAX_STAGES]; /* per stage */
    int prefetch;                     /* offload: memory.prefetch */
    int balance;                      /* BPipe: every stage keep, stashes moved between stage pairs
                                       * (s, pp−1−s) by sched_add_balance; 1f1b, v = 1, pp >= 2, CPU kinds */
    int balance_keep;                 /* memory.balance_keep (<= 0: chosen per pair) */
    dev_prec_t prec;                  /* train.precision: the peak MFU is measured against */
} cm_layout_t;

typedef struct {
    double step_s;                    /* one optimizer step */
    double makespan_s;                /* the pipeline's part (before the optimizer step) */
    double stage_busy_s[SIM_MAX_STAGES]; /* compute time of each stage in one step */
    double stage_mem[SIM_MAX_STAGES];    /* peak device bytes of each stage */
    double bubble;                    /* 1 − max stage busy / makespan */
    double exposed_comm_s;            /* step time minus the same step with free communication */
    double tokens_per_s, flops_per_gpu, mfu; /* flops_per_gpu: model FLOP/s per rank; mfu: the job's
                                       * model FLOP/s ÷ its devices' peak (a CPU node: cores × peak) */
    double energy_j;                  /* one step, every device: idle + (busy − idle)·utilisation */
    int fits;                         /* every stage's peak under the device memory */
    int m;                            /* micro-batches per replica */
    char error[640];                  /* why it cannot run (compose_refused's words fit) */
} cm_result_t;

/* Costs of one micro-batch of B sequences at tensor parallelism tp on device kind d at precision p,
 * from FLOPs and bytes (docs/PLAN.md "The device model"). act_elem: bytes per activation element. */
void cm_costs_from_device(cm_costs_t *c, const cm_model_t *mo, const dev_kind_t *d, dev_prec_t p, int B, int tp);

/* Model FLOPs per token (forward + backward, 6·params-style count with attention), the MFU numerator. */
double cm_model_flops_per_token(const cm_model_t *mo);

/* Chunk sizes: the L layers cut into K near-equal chunks, the remainder on the first ones. */
void cm_layout_balanced(cm_layout_t *lay, int L);

/* The times zb1p's and zbv's greedy play takes (sched_build_costs) for K chunks of the given
 * layers and policies (chunk 0 with the embedding, chunk K−1 with the head): the chunks' means of
 * F, B and W, compute only, tp's all-reduces counted tpc times. The planner plays these for a
 * layout; a run with parallel.schedule_profile plays the same from its profile. */
sched_costs_t cm_play_costs(const cm_costs_t *c, int K, const int *chunk_layers, const policy_t *chunk_policy,
                            double tpc);
/* Simulates one step of `lay` with per-micro-batch costs c on device d (runs the real lists; the
 * cost c must be made for lay->mb and lay->tp). MP_OK, or MP_ERR with res->error (a layout the
 * schedules cannot build, or a simulator failure). */
int cm_evaluate(const cm_model_t *mo, const cm_costs_t *c, const dev_kind_t *d, const cm_layout_t *lay,
                cm_result_t *res);

#endif
