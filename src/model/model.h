/* The GPT of ARCHITECTURE.md §3 on one rank: parameters, gradients and AdamW moments (each one buffer laid
 * out by the parameter table), saved activations per micro-batch, and forward/backward passes
 * composed from kernels/. The tied LM head's share of the wte gradient is kept in its own buffer
 * (grad_head) until model_grads_finish adds it once: the pipeline keeps the two parts on different
 * stages, so the single rank must add them in the same way to stay bitwise identical.
 *
 * Legend: B micro-batch, T seq_len, C dim, NH heads, V vocab, R mlp_ratio, N = B*T. */
#ifndef MP_MODEL_H
#define MP_MODEL_H

#include <mpi.h>

#include "arena.h"
#include "backend.h"
#include "params.h"
#include "perf.h"
#include "wait.h"

/* What a block's forward saves for its backward. Both families (block_ops.h) save these tensors; KC
 * is the key/value width (C without grouped-query attention) and P the MLP's pre-activation
 * width: GPT-2 RC (gelu'(fc output)), llama 2·RC (the [gate | up] product SwiGLU reads). */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;  /* (B,T,C), (B,T), (B,T); the means LayerNorm's only (else NULL) */
    float *qkv;                        /* (B,T,C+2KC) (llama: q and k rotated) */
    float *att;                        /* (B,NH,T,T) softmax probabilities */
    float *atty;                       /* (B,T,C) attention output before the projection */
    float *res2;                       /* (B,T,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd;  /* (B,T,C), (B,T), (B,T) */
    float *mlp_pre;                    /* (B,T,P) what the MLP's activation's backward reads */
    float *mlp_act;                    /* (B,T,RC) the activation's output: the MLP projection's input */
    float *res3;                       /* (B,T,C) block output */
} block_acts_t;

/* Where a block's saved activations live between its forward and its backward (the memory policy
 * of the block, ARCHITECTURE.md §6). Its output res3 is always kept: it is the next block's input
 * (or what the stage sends on), and recompute re-runs a block from it. The others:
 *   KEEP       every tensor in the stash
 *   SELECTIVE  all but the attention probabilities, recomputed from q and k before the backward
 *   RECOMPUTE  none: the forward writes them to the stage's workspace, and the block's forward is
 *              re-run there just before its backward
 *   OFFLOAD    in the stash's movable region: a device buffer the executor binds for the forward,
 *              copies to host memory after it and brings back before the backward
 *   BALANCE    in the movable region too: BPipe lends it to another stage instead of the host */
typedef enum { MODE_KEEP, MODE_RECOMPUTE, MODE_SELECTIVE, MODE_OFFLOAD, MODE_BALANCE, MODE_COUNT } block_mode_t;

/* What one forward pass runs: local blocks [b0, b0 + n), after the embedding (embed) and before
 * the final LayerNorm, LM head and loss (final). A stage's whole model is one part; under the
 * interleaved schedule each of its v chunks is one. */
typedef struct {
    int b0, n, embed, final;
} model_part_t;

/* What one micro-batch's forward saves for its backward. */
typedef struct {
    int B, T;
    int nblocks, final;                /* blocks whose activations it holds; holds the head's */
    int *inputs, *targets;             /* (B,T) on the host: the data loader fills them */
    int *d_inputs, *d_targets;         /* (B,T) on the device: forward copies them there (cpu: the same) */
    float *encoded;                    /* (B,T,C) */
    block_acts_t *h;                   /* one per block of the part it serves (h[0]: its first) */
    float *lnf, *lnf_mean, *lnf_rstd;  /* (B,T,C), (B,T), (B,T) */
    float *probs;                      /* (B,T,V) logits, then softmax probabilities, then dlogits */
    float *losses;                     /* (B,T) */
    float *host_losses;                /* (B,T) on the host: forward copies losses there (cpu: losses) */
    float *buf; size_t nfloats;        /* the one allocation behind all of the above but the movable tensors */
    /* The movable region (blocks under OFFLOAD or BALANCE): mov_floats floats at mov, bound by
     * acts_bind (NULL until then). Each block position has a fixed extent in buf and in mov, the
     * largest any chunk's policy there needs, so a slot serves every chunk of the stage. */
    float *mov; size_t mov_floats;
    size_t *pos_res, *pos_mov;         /* per block position: its offset in buf and in mov */
    size_t head_off;                   /* the head's tensors' offset in buf */
    int *ibuf;                         /* d_inputs and d_targets */
    int *host_ibuf;                    /* inputs and targets when the device is not the host (else NULL) */
    backend_t *be;                     /* whose host memory host_ibuf and host_losses are */
} acts_t;

/* What a split backward's B keeps of one block for its W (model_backward_b, model_backward_w): the
 * gradients of the outputs of the block's four products, and, under MODE_RECOMPUTE, their inputs.
 * The other modes' inputs stay in the stash slot until W. Legend as above; Cl = the block's
 * attention width on this TP rank, RC its MLP width (skip blocks keep nothing: all NULL). */
typedef struct {
    float *dres3;                      /* (B,T,C) d res3: fcproj's dout (a copy: s->dres flows on) */
    float *dfch;                       /* (B,T,P) d fc's output before the activation: fc's dout (B writes it here) */
    float *dres2;                      /* (B,T,C) d res2: proj's dout (a copy) */
    float *dqkv;                       /* (B,T,Cl+2KCl) qkv's dout (B writes it here) */
    /* MODE_RECOMPUTE only (else NULL: W reads the stash's): B's recomputation writes the products'
     * inputs here instead of the workspace, which the next block's recomputation overwrites */
    float *ln1, *atty, *ln2, *mlp_act; /* (B,T,C), (B,T,Cl), (B,T,C), (B,T,RC) */
} block_wgrad_t;

/* W's stash: what one micro-batch's B of one part keeps until its W, in one allocation of a fixed
 * capacity that B carves for its part (so one wstash can serve every chunk of a stage whose
 * bytes fit). The head keeps nothing here: its W reads dlogits (in a->probs, where B leaves them)
 * and lnf from the slot. Bytes per non-skip block: see model_wstash_bytes. */
typedef struct {
    int B;                             /* the micro-batch size it serves */
    model_part_t pt;                   /* the part B filled it for */
    int pending;                       /* B has filled it and its W has not run */
    block_wgrad_t *h;                  /* per block of the part (h[i]: block pt.b0 + i); nlayers entries */
    size_t used;                       /* floats the part's layout takes (B carves it) */
    float *buf; size_t nfloats;        /* the capacity */
} wstash_t;

/* Backward and forward temporaries shared by all micro-batches (not saved). */
typedef struct {
    float *dres;   /* (B,T,C) gradient of the residual stream, flows through every block in place */
    float *dbuf;   /* (B,T,C) */
    float *dqkv;   /* (B,T,C+2KC) */
    float *datt;   /* (B,NH,T,T) */
    float *dfch;   /* (B,T,P) */
    float *dact;   /* (B,T,RC) d of the MLP activation's output, where the family keeps it apart (llama) */
    float *rope;   /* (T, hs) the rotary table (rope_table_init) of a family with rotary positions; else NULL */
    float *xmax, *xsum, *xtgt; /* (B,T) vocab-parallel cross-entropy row statistics */
    /* A whole block's activations where RECOMPUTE and SELECTIVE blocks put what they do not save
     * (their forward's, then their recomputation's): allocated when the stage has such a block. */
    block_acts_t work;
    float *buf; size_t nfloats;
} scratch_t;

typedef struct {
    model_cfg_t cfg;
    backend_t *be;                 /* where every buffer below lives and every kernel runs */
    param_table_t tab;             /* this rank's shard (tab.tp, tab.tp_rank) */
    MPI_Comm tp_comm;              /* tensor-parallel peers (when tab.tp > 1) */
    const wait_cfg_t *wait;
    float *params, *grads;             /* alloc floats each (tab.total used, the rest zero padding) */
    float *m, *v;                      /* mv_len floats each: all of it, or this replica's ZeRO-1 shard */
    size_t alloc, mv_len;
    float *grad_head;                  /* (V/tp, C) LM head's part of d wte (when has_final && has_embed) */
    param_view_t p, g;                 /* p: the version forward and backward use (below) */
    /* 2bw's second weight version (model_versions_create): params is the newest W(t), params_old
     * W(t−1); p is one of their views. NULL / unused otherwise. */
    float *params_old;
    param_view_t p_new, p_old;
    arena_t *arena;
    unsigned char *mode;               /* per local block: its block_mode_t (NULL: every block KEEP) */
    int *sel;                          /* supernet: per layer, the candidate the current subnet picks
                                          (-1 off the choice blocks); NULL without candidates */
    /* supernet.resident = host (cfg.cand_slots): the buffers hold [0, tab.cand_off) of the table's
     * layout, then `slots` slots of slot_stride floats per local choice block (nchoice of them) from
     * slot0; a candidate's views point into a slot only while it is placed there (model_place) */
    int slots, nchoice;
    size_t slot0, slot_stride;
    int *placed;                       /* local block × ncand: the candidate's slot, -1 none */
    size_t *cand0;                     /* local block × ncand: its range's offset in the table */
} model_t;

/* The "bucket ready" hook: called during a backward when the gradients of one parameter range are
 * final for this micro-batch, in backward order (PARAM_RANGE_FINAL for the final LayerNorm, then
 * each block from the last, as param_block_layer numbers them); data parallelism starts that
 * bucket's all-reduce there. The embeddings are final only after the last backward of the step:
 * the caller starts their bucket itself. */
typedef struct {
    void (*fn)(void *ctx, int layer);
    void *ctx;
} model_ready_t;

/* Supernet: the subnet that sel (per layer of the model, a candidate index on the choice blocks)
 * picks: p.h and g.h of the choice blocks point at those candidates, and the forward and backward
 * take their shapes. Sizes (activations, scratch) are made for the largest candidate already. */
void model_select(model_t *m, const int *sel);

/* With slots (cfg.cand_slots): where in params, grads, m and v candidate k of local block b lies
 * when it is in slot s (its table range copied there, the range's offset modulo 16 floats kept so
 * the kernels see the alignment they see without slots), and placing it there (s = -1: nowhere;
 * selecting a candidate that is nowhere aborts). */
size_t model_slot_at(const model_t *m, int b, int k, int s);
void model_place(model_t *m, int b, int k, int s);
/* Where entry e's floats are in params, grads, m and v: its table offset, or inside its
 * candidate's slot (aborts when the candidate is in none). */
size_t model_entry_at(const model_t *m, const param_entry_t *e);

/* Builds a model holding the nchunks block ranges [layer0s[c], layer0s[c] + nlayers_s[c])
 * (+ embeddings, + final LN and head), the
 * shard of TP rank tp_rank of tp (set tp_comm and wait before a forward when tp > 1), with
 * zeroed buffers, padded for `shards` ZeRO-1 shards (1: no sharding; the AdamW moments then hold
 * the whole buffer, else one shard). MP_OK or MP_ERR (arena limit or allocation; message printed). */
int model_create(model_t *m_p, const model_cfg_t *cfg, backend_t *be, arena_t *arena, int nchunks,
                 const int *layer0s, const int *nlayers_s, int has_embed, int has_final, int shards, int tp, int tp_rank);
void model_destroy(model_t *m);

/* Sets each local block's memory mode (modes[i] for local block i; NULL: all KEEP). Before
 * acts_create and scratch_create, whose sizes depend on it. MP_OK or MP_ERR (allocation). */
int model_set_modes(model_t *m, const unsigned char *modes);
block_mode_t model_block_mode(const model_t *m, int local_block);

/* The part of everything this model holds, and of its chunk c (param table's chunks). */
model_part_t model_whole(const model_t *m);
model_part_t model_chunk(const model_t *m, int c);

/* Activations for the whole model (acts_create), or for parts of at most nblocks blocks and,
 * with final, the head (acts_create_part). */
int acts_create(acts_t *a_p, const model_t *m, int B, arena_t *arena);
int acts_create_part(acts_t *a_p, const model_t *m, int B, int nblocks, int final, arena_t *arena);
void acts_destroy(acts_t *a, arena_t *arena);
/* Points the saved tensors of a at the places the modes of part pt's blocks give them: the stash,
 * the movable region mov (mov_floats floats; NULL when pt has no movable block) or the workspace
 * of s. Call before a forward of pt into a, and again when the movable region moves. */
void acts_bind(acts_t *a, const model_t *m, const model_part_t *pt, float *mov, const scratch_t *s);
int scratch_create(scratch_t *s_p, const model_t *m, int B, arena_t *arena);
void scratch_destroy(scratch_t *s, arena_t *arena);
/* What acts_create_part and scratch_create take from the arena (the memory plan: exactly the bytes
 * they request), and the floats' bytes of a slot's movable region in *mov_bytes. */
size_t acts_part_bytes(const model_t *m, int B, int nblocks, int final, size_t *mov_bytes);
size_t scratch_bytes(const model_t *m, int B);

/* Forward of the micro-batch in a->inputs/targets. a = saved activations; returns Σ of the B*T
 * token losses (double; 0 on a pipeline stage without the head). A stage without the embedding
 * takes its input from a->encoded (the activation it received). prof: kernel timers, or NULL. The
 * whole-model forms (no timers, no hook) serve tests and one-rank tools. */
double model_forward(model_t *m, acts_t *a, scratch_t *s);
double model_forward_part(model_t *m, const model_part_t *pt, acts_t *a, scratch_t *s, prof_t *prof);
/* Backward of the micro-batch whose forward filled a. dloss = d(total loss)/d(token loss), i.e.
 * 1/(tokens in the global batch). Gradients accumulate (+=) into m->grads and m->grad_head. A stage
 * without the head starts from the gradient of its output preloaded in s->dres; a stage without the
 * embedding leaves the gradient of its input there. ready: the bucket hook, or NULL. */
void model_backward(model_t *m, acts_t *a, scratch_t *s, float dloss);
void model_backward_part(model_t *m, const model_part_t *pt, acts_t *a, scratch_t *s, float dloss, prof_t *prof,
                         const model_ready_t *ready);
/* The backward split in two for zero-bubble pipeline schedules (ZB-H1): B, the input gradient,
 * everything on the path from the loss (or from the gradient received in s->dres) to the gradient
 * of the part's input; and W, the products' weight and bias gradients, which nothing upstream
 * waits for. B then W is model_backward_part: the same kernels on the same inputs, each gradient
 * accumulated once per micro-batch, so with the W's of a step run in micro-batch order (any B's
 * between them) every gradient has the same bits.
 *   B: the head (cross-entropy, the head's input gradient, the final LayerNorm with its weights),
 *      each block from the last (input gradients, TP all-reduces, recomputation, LayerNorms with
 *      their weights), the embedding's gradients (wte, wpe: cheap, and with nothing upstream no
 *      stage waits for them; in W they would keep d encoded too). It leaves s->dres as
 *      model_backward_part does and fills ws for this micro-batch (ws must not be pending).
 *   W: grad_head += the head's product (last stage), then per block from the last: fcproj, fc,
 *      proj and qkv's weights and biases, the key bias zeroed; no communication. ready fires here
 *      only, in model_backward_part's order (PARAM_RANGE_FINAL, then each block), each range after
 *      its last gradient is final for this micro-batch; B fires nothing.
 * Between them the caller keeps a's slot (its stash and movable region on the device: W reads
 * the products' inputs and the head's dlogits and lnf there), ws, the model's selection and slot
 * placement (supernets), and runs nothing else into a. The weight version (2bw) matters to B
 * only: W reads no weights. Aborts (a bug) when ws is too small for pt, W's ws is not pending or
 * was filled for another part. */
void model_backward_b(model_t *m, const model_part_t *pt, acts_t *a, scratch_t *s, float dloss, prof_t *prof,
                      wstash_t *ws);
void model_backward_w(model_t *m, const model_part_t *pt, acts_t *a, scratch_t *s, prof_t *prof, wstash_t *ws,
                      const model_ready_t *ready);
/* Bytes of ws that B fills for part pt at micro-batch size B (what a (micro-batch, chunk) holds between
 * its B and its W beside its slot: the memory plan counts it). Per block of the part that is not a
 * skip, with N = B·T, Cl and RC its widest widths on this TP rank (a supernet's widest candidate),
 * each tensor rounded up to 16 floats:
 *   4 · (2·N·C + N·P + N·(Cl+2·KCl))                  its products' douts (P: GPT-2 RC, llama 2·RC)
 *   + 4 · (2·N·C + N·Cl + N·RC)  under MODE_RECOMPUTE  their inputs
 * The head and the embedding add nothing. */
size_t model_wstash_bytes(const model_t *m, const model_part_t *pt, int B);
/* A wstash of `bytes` (at least model_wstash_bytes of every part it will serve) for micro-batches
 * of B sequences, from the arena. MP_OK or MP_ERR (arena limit or allocation; message printed, nothing left). */
int wstash_create(wstash_t *ws_p, const model_t *m, int B, size_t bytes, arena_t *arena);
void wstash_destroy(wstash_t *ws, arena_t *arena);

/* The tied head's part of the wte gradient from one micro-batch, recomputed from the head's input
 * alone: grad_head_p (V,C) += what model_backward_part adds to m->grad_head for that micro-batch,
 * given lnf (N,C: the final layer norm's output), the micro-batch's targets (N) and dloss. The same
 * kernels in the same order on the same inputs: the same bits at equal threads. For the replay of a
 * lost first stage, which holds wte (tied) but not the head (recovery.log). At tp > 1 (this rank's
 * vocabulary shard) the softmax's sums go over m's tp communicator: every tp peer calls it alike, as
 * they do when they replay together. Kernels that read host memory only (cpu, emu). MP_OK, or
 * MP_ERR (allocation, or cuda). */
int model_head_grad(model_t *m, const float *lnf, const int *targets, int B, float dloss, float *grad_head_p);
/* The head's input (N,C) of a micro-batch whose forward through the head filled a. */
const float *model_head_input(const acts_t *a);
/* The part's output activation (N,C) in a (what the next stage receives). */
float *model_part_output(const model_part_t *pt, acts_t *a);

/* Zeroes gradients (both parts of the tied embedding's). */
void model_grads_zero(model_t *m);
/* d wte += grad_head: the tied embedding's two parts, added once per step. */
void model_grads_finish(model_t *m);

/* 2bw: allocates params_old as a copy of params. MP_OK or MP_ERR (arena limit). */
int model_versions_create(model_t *m);
void model_versions_destroy(model_t *m);
/* Forward and backward use W(t−1) (old = 1) or the newest W(t) (old = 0). */
void model_use_version(model_t *m, int old);
/* Before an update: W(t−1) := W(t), so the update of params makes W(t+1) from W(t). */
void model_versions_advance(model_t *m);

/* Model FLOPs per token (forward+backward): 6·N_matmul + 12·Σ A·T, N_matmul = Σ (4·A·C + 2·R·C²) + V·C
 * over blocks of attention width A and MLP ratio R (A = C, R = mlp_ratio: (4 + 2R)·L·C² + V·C;
 * a skip block counts 0). */
double model_flops_per_token(const model_cfg_t *cfg);

#endif
