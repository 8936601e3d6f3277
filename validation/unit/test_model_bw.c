/* The split backward (model_backward_b, then model_backward_w; issue 35): against the whole
 * backward model_backward_part, bitwise, in every gradient (the tied head's part apart) and in every
 * part's input gradient, for the whole model, pipeline chunks and a middle stage without embedding
 * or head, three micro-batches accumulated, under every memory mode the model knows (keep,
 * recompute, selective, and the movable region of offload and balance bound in place: moving it is
 * the executor's), at tp = 1 and with tp = 2's shards, blocks of other shapes and skip blocks, on
 * cpu and emu. Orders: B then W per micro-batch; every B, then every W (B(0) B(1) B(2) W(0) W(1)
 * W(2)); ZB-H1's steady state (B(0) B(1) W(0) B(2) W(1) W(2)). A W left out is caught by the same
 * comparison. Each wstash is allocated with exactly model_wstash_bytes, which equals the documented
 * formula and what B lays out (the ASan build checks nothing is written past it); the bucket-ready
 * hook fires from W in the whole backward's order.
 *
 * tp = 2 here is one TP rank's shard with its all-reduces over MPI_COMM_SELF: the code paths of
 * tp > 1 (row-parallel products without the residual on rank 1, the vocab-parallel head), not the
 * sum over peers, which a unit test of one process cannot have. B and W see the same reductions as
 * the whole backward, so the comparison holds all the same.
 *
 * Legend: MB micro-batches, B micro-batch size, T seq_len, C dim, N = B*T. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "model.h"
#include "rng.h"
#include "tap.h"

enum { MB = 3, MB_SIZE = 2, MAXC = 3, MAXREADY = 16 };

/* One configuration: the model a stage holds (its chunks, embedding, head, TP shard) and its blocks'
 * memory modes, one letter per local block (k r s o b, as [memory] layers). */
typedef struct {
    const char *name;
    const block_shape_t *shape; /* NULL: uniform */
    int nchunks, layer0s[MAXC], nlayers[MAXC];
    int embed, final, tp, tp_rank;
    const char *modes;
    int emu;
} case_t;

static const model_cfg_t CFG = {.layers = 3, .dim = 16, .heads = 2, .seq_len = 6, .vocab = 23, .mlp_ratio = 2};

/* h2m2, skip, h1m1: widths that differ per block, and the identity. */
static const block_shape_t SHAPED[3] = {{2, 2}, {0, 0}, {1, 1}};

/* A stage's model and, per (micro-batch, chunk), its activations, movable region and wstash. */
typedef struct {
    backend_t be;
    arena_t arena;
    model_t m;
    scratch_t s;
    model_cfg_t cfg;
    int np;
    model_part_t pt[MAXC];
    acts_t a[MB][MAXC];
    float *mov[MB][MAXC];
    wstash_t ws[MB][MAXC];
    size_t ws_bytes[MAXC];
    float *x_in[MB], *dy[MB]; /* (N,C): the input of a stage without the embedding, the output
                                 gradient of one without the head (device memory) */
    size_t nsnap;             /* floats of a snapshot: gradients, head part, input gradients */
} rig_t;

static block_mode_t mode_of(char c)
{
    return c == 'r' ? MODE_RECOMPUTE : c == 's' ? MODE_SELECTIVE : c == 'o' ? MODE_OFFLOAD : c == 'b' ? MODE_BALANCE
                                                                                                  : MODE_KEEP;
}

static size_t nc_floats(const rig_t *r) { return (size_t)MB_SIZE * r->cfg.seq_len * r->cfg.dim; }

static size_t head_floats(const rig_t *r) { return r->m.grad_head ? (size_t)(r->m.tab.vocab_pad / r->m.tab.tp) * r->cfg.dim : 0; }

/* Random values in [-1, 1) into n device floats at dev, keyed by (seed, stream). */
static void fill_dev(rig_t *r, float *dev, size_t n, uint64_t seed, uint64_t stream)
{
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = 2.0f * (float)(rng_key(seed, stream, i, 0) % 1000000) / 1e6f - 1.0f;
    be_to_device(&r->be, dev, h, n * sizeof(float));
    free(h);
}

/* Weights large enough that every path carries gradient (as test_model.c). */
static void init_params(rig_t *r)
{
    model_t *m = &r->m;
    float *h = calloc(m->alloc, sizeof(float));
    for (int i = 0; i < m->tab.count; i++) {
        const param_entry_t *e = &m->tab.entries[i];
        const uint64_t k = rng_name_hash(e->name);
        const int lnw = e->kind == PK_LN1_W || e->kind == PK_LN2_W || e->kind == PK_LNF_W;
        for (size_t j = 0; j < e->numel; j++) h[e->offset + j] = lnw ? 1.0f + 0.2f * rng_normal(5, k, j) : 0.3f * rng_normal(5, k, j);
    }
    be_to_device(&r->be, m->params, h, m->alloc * sizeof(float));
    free(h);
}

static void fill_tokens(acts_t *a, int V, int mb)
{
    for (int i = 0; i < a->B * a->T; i++) {
        a->inputs[i] = (int)(rng_key(7, 9, (uint64_t)mb, (uint64_t)i) % (uint64_t)V);
        a->targets[i] = (int)(rng_key(7, 10, (uint64_t)mb, (uint64_t)i) % (uint64_t)V);
    }
}

static int rig_create(rig_t *r, const case_t *c)
{
    static wait_cfg_t wait = {.yield = 0, .timeout = 0.0};
    memset(r, 0, sizeof *r);
    r->cfg = CFG;
    r->cfg.shape = c->shape;
    arena_init(&r->arena, 0);
    if (be_init(&r->be, c->emu ? BE_EMU : BE_CPU, &r->arena, c->emu ? (size_t)64 << 20 : 0, 0, 0, &wait) != 0)
        return 0;
    if (model_create(&r->m, &r->cfg, &r->be, &r->arena, c->nchunks, c->layer0s, c->nlayers, c->embed, c->final, 1,
                     c->tp, c->tp_rank) != 0)
        return 0;
    r->m.tp_comm = MPI_COMM_SELF, r->m.wait = &wait;
    unsigned char modes[8];
    for (int i = 0; i < r->m.tab.nlayers; i++) modes[i] = (unsigned char)mode_of(c->modes[i]);
    if (model_set_modes(&r->m, modes) != 0 || scratch_create(&r->s, &r->m, MB_SIZE, &r->arena) != 0) return 0;
    init_params(r);
    r->np = c->nchunks;
    for (int p = 0; p < r->np; p++) {
        r->pt[p] = model_chunk(&r->m, p);
        r->ws_bytes[p] = model_wstash_bytes(&r->m, &r->pt[p], MB_SIZE);
    }
    for (int mb = 0; mb < MB; mb++)
        for (int p = 0; p < r->np; p++) {
            acts_t *a = &r->a[mb][p];
            if (acts_create_part(a, &r->m, MB_SIZE, r->pt[p].n, r->pt[p].final, &r->arena) != 0) return 0;
            if (a->mov_floats && !(r->mov[mb][p] = arena_floats(&r->arena, a->mov_floats, "test movable region")))
                return 0;
            a->mov = r->mov[mb][p]; /* bound in place for the test's whole life */
            fill_tokens(a, r->cfg.vocab, mb);
            if (wstash_create(&r->ws[mb][p], &r->m, MB_SIZE, r->ws_bytes[p], &r->arena) != 0) return 0;
        }
    for (int mb = 0; mb < MB; mb++) {
        if (!(r->x_in[mb] = arena_floats(&r->arena, nc_floats(r), "test input")) ||
            !(r->dy[mb] = arena_floats(&r->arena, nc_floats(r), "test output gradient")))
            return 0;
        fill_dev(r, r->x_in[mb], nc_floats(r), 11, (uint64_t)mb);
        fill_dev(r, r->dy[mb], nc_floats(r), 12, (uint64_t)mb);
    }
    r->nsnap = r->m.alloc + head_floats(r) + (size_t)MB * r->np * nc_floats(r);
    return 1;
}

static void rig_destroy(rig_t *r)
{
    for (int mb = MB - 1; mb >= 0; mb--) {
        arena_free(&r->arena, r->dy[mb], nc_floats(r) * sizeof(float));
        arena_free(&r->arena, r->x_in[mb], nc_floats(r) * sizeof(float));
    }
    for (int mb = MB - 1; mb >= 0; mb--)
        for (int p = r->np - 1; p >= 0; p--) {
            wstash_destroy(&r->ws[mb][p], &r->arena);
            if (r->mov[mb][p]) arena_free(&r->arena, r->mov[mb][p], r->a[mb][p].mov_floats * sizeof(float));
            acts_destroy(&r->a[mb][p], &r->arena);
        }
    scratch_destroy(&r->s, &r->arena);
    model_destroy(&r->m);
    be_destroy(&r->be);
}

/* Every micro-batch's forward through the chunks in order, each chunk's input its predecessor's
 * output (the first's: x_in when the stage has no embedding). */
static void rig_forward(rig_t *r)
{
    for (int mb = 0; mb < MB; mb++)
        for (int p = 0; p < r->np; p++) {
            acts_t *a = &r->a[mb][p];
            const float *in = p ? model_part_output(&r->pt[p - 1], &r->a[mb][p - 1]) : r->x_in[mb];
            if (p || !r->pt[0].embed) be_copy(&r->be, a->encoded, in, nc_floats(r) * sizeof(float));
            model_forward_part(&r->m, &r->pt[p], a, &r->s, NULL);
        }
}

/* The bucket-ready hook's calls, in order. */
typedef struct {
    int n, layer[MAXREADY];
} ready_log_t;

static void ready_rec(void *ctx, int layer)
{
    ready_log_t *l = ctx;
    if (l->n < MAXREADY) l->layer[l->n] = layer;
    l->n++;
}

enum { FUSED, SPLIT_B };

/* Micro-batch mb's backward through the chunks from the last: the whole one, or B alone. Each
 * chunk's input gradient (s->dres after it) goes to dx (host, MB × np × N·C), and is what the
 * chunk before it starts from; the last starts from dy when the stage has no head. */
static void rig_backward(rig_t *r, int mb, int how, float *dx, const model_ready_t *ready)
{
    for (int p = r->np - 1; p >= 0; p--) {
        if (p == r->np - 1 && !r->pt[p].final) be_copy(&r->be, r->s.dres, r->dy[mb], nc_floats(r) * sizeof(float));
        if (how == FUSED) model_backward_part(&r->m, &r->pt[p], &r->a[mb][p], &r->s, 0.1f, NULL, ready);
        else model_backward_b(&r->m, &r->pt[p], &r->a[mb][p], &r->s, 0.1f, NULL, &r->ws[mb][p]);
        be_to_host(&r->be, dx + ((size_t)mb * r->np + p) * nc_floats(r), r->s.dres, nc_floats(r) * sizeof(float));
    }
}

static void rig_w(rig_t *r, int mb, const model_ready_t *ready)
{
    for (int p = r->np - 1; p >= 0; p--)
        model_backward_w(&r->m, &r->pt[p], &r->a[mb][p], &r->s, NULL, &r->ws[mb][p], ready);
}

/* Gradients, the head's part and the input gradients (already in snap's tail) into snap. */
static void rig_snap(rig_t *r, float *snap)
{
    be_to_host(&r->be, snap, r->m.grads, r->m.alloc * sizeof(float));
    if (head_floats(r)) be_to_host(&r->be, snap + r->m.alloc, r->m.grad_head, head_floats(r) * sizeof(float));
}

static float *dx_of(rig_t *r, float *snap) { return snap + r->m.alloc + head_floats(r); }

/* Orders of B and W over the micro-batches (W always in micro-batch order, as the contract asks). */
enum { ORDER_BW, ORDER_ALL_B_FIRST, ORDER_ZBH1, ORDER_SKIP_ONE_W };

static void rig_split(rig_t *r, int order, float *snap, ready_log_t *rl)
{
    const model_ready_t ready = {ready_rec, rl};
    model_grads_zero(&r->m);
    rig_forward(r);
    float *dx = dx_of(r, snap);
    for (int mb = 0; mb < MB; mb++) {
        rig_backward(r, mb, SPLIT_B, dx, NULL);
        if (order == ORDER_BW) rig_w(r, mb, mb == MB - 1 ? &ready : NULL);
        if (order == ORDER_ZBH1 && mb > 0) rig_w(r, mb - 1, NULL); /* W(mb-1) after B(mb) */
    }
    if (order == ORDER_ZBH1) rig_w(r, MB - 1, &ready);
    if (order == ORDER_ALL_B_FIRST || order == ORDER_SKIP_ONE_W)
        for (int mb = 0; mb < MB; mb++) {
            if (order == ORDER_SKIP_ONE_W && mb == 1) { /* the planted error: W(1) of the first chunk left out */
                for (int p = r->np - 1; p >= 1; p--)
                    model_backward_w(&r->m, &r->pt[p], &r->a[mb][p], &r->s, NULL, &r->ws[mb][p], NULL);
                r->ws[mb][0].pending = 0;
                continue;
            }
            rig_w(r, mb, mb == MB - 1 ? &ready : NULL);
        }
    rig_snap(r, snap);
}

/* What the header says a wstash of part pt holds, from the shapes alone. */
static size_t wstash_formula(const rig_t *r, const case_t *c, const model_part_t *pt)
{
    const size_t N = (size_t)MB_SIZE * r->cfg.seq_len, C = r->cfg.dim, hs = C / r->cfg.heads;
    size_t f = 0;
#define R16(n) (((n) + 15) / 16 * 16)
    for (int i = 0; i < pt->n; i++) {
        const int l = param_block_layer(&r->m.tab, pt->b0 + i);
        const size_t Cl = (size_t)cfg_heads(&r->cfg, l) * hs / c->tp, RC = (size_t)cfg_ratio(&r->cfg, l) * C / c->tp;
        if (block_is_skip(&r->cfg, l)) continue;
        f += 2 * R16(N * C) + R16(N * RC) + R16(3 * N * Cl);
        if (mode_of(c->modes[pt->b0 + i]) == MODE_RECOMPUTE) f += 2 * R16(N * C) + R16(N * Cl) + R16(N * RC);
    }
#undef R16
    return f * sizeof(float);
}

static int same_ready(const ready_log_t *a, const ready_log_t *b)
{
    if (a->n != b->n || a->n > MAXREADY) return 0;
    for (int i = 0; i < a->n; i++)
        if (a->layer[i] != b->layer[i]) return 0;
    return 1;
}

static void run_case(const case_t *c)
{
    rig_t r;
    if (!tap_ok(rig_create(&r, c), "%s: model, activations, wstashes of exactly model_wstash_bytes", c->name)) return;
    float *ref = calloc(r.nsnap, sizeof(float)), *got = calloc(r.nsnap, sizeof(float));
    const size_t nbytes = r.nsnap * sizeof(float);

    ready_log_t rl_ref = {0}, rl = {0};
    const model_ready_t ready = {ready_rec, &rl_ref};
    model_grads_zero(&r.m);
    rig_forward(&r);
    for (int mb = 0; mb < MB; mb++) rig_backward(&r, mb, FUSED, dx_of(&r, ref), mb == MB - 1 ? &ready : NULL);
    rig_snap(&r, ref);
    double norm = sumsq(ref, r.m.alloc);

    rig_split(&r, ORDER_BW, got, &rl);
    int fits = 1;
    for (int p = 0; p < r.np; p++)
        fits &= r.ws[0][p].used * sizeof(float) == r.ws_bytes[p] && r.ws_bytes[p] == wstash_formula(&r, c, &r.pt[p]);
    tap_ok(fits, "%s: model_wstash_bytes = the documented formula = what B lays out (%zu bytes, chunk 0)", c->name,
           r.ws_bytes[0]);
    tap_ok(norm > 0 && !memcmp(ref, got, nbytes),
           "%s: B then W per micro-batch = model_backward_part, bitwise (gradients, head part, input gradients)", c->name);
    tap_ok(same_ready(&rl_ref, &rl) && rl.n == (c->final ? 1 : 0) + r.m.tab.nlayers,
           "%s: W fires the ready hook as the whole backward does (%d calls)", c->name, rl.n);
    rl.n = 0;
    memset(got, 0, nbytes);
    rig_split(&r, ORDER_ALL_B_FIRST, got, &rl);
    int all_b = !memcmp(ref, got, nbytes);
    memset(got, 0, nbytes);
    rig_split(&r, ORDER_ZBH1, got, &rl);
    tap_ok(all_b && !memcmp(ref, got, nbytes),
           "%s: every B then every W, and ZB-H1's B(0) B(1) W(0) B(2) W(1) W(2): bitwise the same", c->name);
    memset(got, 0, nbytes);
    rig_split(&r, ORDER_SKIP_ONE_W, got, &rl);
    tap_ok(memcmp(ref, got, r.m.alloc * sizeof(float)) != 0, "%s: a W left out (micro-batch 1, chunk 0) is caught",
           c->name);
    free(ref), free(got);
    rig_destroy(&r);
    tap_ok(r.arena.in_use == 0, "%s: everything returned to the arena", c->name);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    kernels_set_threads(2);
    static const case_t cases[] = {
        {"whole keep", NULL, 1, {0}, {3}, 1, 1, 1, 0, "kkk", 0},
        {"whole recompute", NULL, 1, {0}, {3}, 1, 1, 1, 0, "rrr", 0},
        {"whole selective", NULL, 1, {0}, {3}, 1, 1, 1, 0, "sss", 0},
        {"whole offload", NULL, 1, {0}, {3}, 1, 1, 1, 0, "ooo", 0},
        {"whole mixed", NULL, 1, {0}, {3}, 1, 1, 1, 0, "rbs", 0},
        {"chunks 0-1|2", NULL, 2, {0, 2}, {2, 1}, 1, 1, 1, 0, "rks", 0},
        {"chunks 0|1|2", NULL, 3, {0, 1, 2}, {1, 1, 1}, 1, 1, 1, 0, "ros", 0},
        {"middle stage, chunks 0|2", NULL, 2, {0, 2}, {1, 1}, 0, 0, 1, 0, "sr", 0},
        {"last stage 1-2", NULL, 1, {1}, {2}, 0, 1, 1, 0, "rk", 0},
        {"first stage 0-1", NULL, 1, {0}, {2}, 1, 0, 1, 0, "kr", 0},
        {"tp=2 rank 0 whole", NULL, 1, {0}, {3}, 1, 1, 2, 0, "krs", 0},
        {"tp=2 rank 1 chunks", NULL, 2, {0, 2}, {2, 1}, 1, 1, 2, 1, "rok", 0},
        {"shaped h2m2,skip,h1m1", SHAPED, 1, {0}, {3}, 1, 1, 1, 0, "rrs", 0},
        {"shaped chunks", SHAPED, 2, {0, 1}, {1, 2}, 1, 1, 1, 0, "kkr", 0},
        {"emu whole", NULL, 1, {0}, {3}, 1, 1, 1, 0, "ros", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
    MPI_Finalize();
    return tap_done();
}
