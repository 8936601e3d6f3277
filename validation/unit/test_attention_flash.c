/* The fused attention's CPU emulation (kernels/attention_flash_cpu.c) and the memory it lets the
 * model carve (issue 44, item 5): its forward is the probabilities' path bit for bit, its backward
 * that path's gradients up to rounding, its layout the one the CUDA kernels keep; and a model on emu
 * with train.attention=fused plans and allocates exactly the (B,NH,T,T) buffers less, with the
 * gradients of the cpu backend to rounding. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "attention_fused_layout.h"
#include "backend.h"
#include "kernels.h"
#include "model.h"
#include "rng.h"
#include "tap.h"

static float *rnd(size_t n, uint64_t key, float scale)
{
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_normal(key, 91, i);
    return x;
}

static double max_rel(const float *a, const float *b, size_t n)
{
    double num = 0, den = 1e-12;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

/* Several row blocks of 64 (T = 150), head size 16: against attention_forward/_backward. */
static void test_kernels(void)
{
    enum { B = 2, T = 150, C = 64, NH = 4 };
    const size_t N = (size_t)B * T, nq = N * 3 * C, na = mp_att_probs_floats(B, T, NH);
    float *qkv = rnd(nq, 1, 1.0f), *dout = rnd(N * C, 2, 1.0f);
    float *out = calloc(N * C, sizeof(float)), *att = calloc(na, sizeof(float)), *dqkv = calloc(nq, sizeof(float));
    float *datt = calloc(na, sizeof(float));
    const size_t nf = mp_att_fused_floats(B, T, C, NH);
    float *fo = calloc(N * C, sizeof(float)), *fatt = calloc(nf, sizeof(float)), *fdqkv = calloc(nq, sizeof(float));
    float *fdatt = calloc(mp_att_fused_dfloats(B, T, NH), sizeof(float));
    attention_forward(out, att, qkv, B, T, C, NH);
    attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
    attention_flash_forward(fo, fatt, qkv, B, T, C, NH);
    attention_flash_backward(fdqkv, fdatt, dout, qkv, fatt, B, T, C, NH);
    tap_ok(memcmp(fo, out, N * C * sizeof(float)) == 0, "flash forward: out bitwise attention_forward's (T = 150)");
    tap_ok(memcmp(fatt + mp_att_fused_o_offset(B, T, NH), out, N * C * sizeof(float)) == 0,
           "flash forward: att holds a copy of out at the layout's offset");
    double worst = 0; /* lse_i = log Σ_j exp(s_ij), in double from q and k */
    for (int bh = 0; bh < B * NH; bh++)
        for (int i = 0; i < T; i++) {
            const int b = bh / NH, h = bh % NH, hs = C / NH;
            const float *q = qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * hs;
            double s[T], mx = -INFINITY, sum = 0;
            for (int j = 0; j <= i; j++) {
                const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs;
                double d = 0;
                for (int c = 0; c < hs; c++) d += (double)q[c] * k[c];
                s[j] = d / sqrt((double)hs), mx = fmax(mx, s[j]);
            }
            for (int j = 0; j <= i; j++) sum += exp(s[j] - mx);
            worst = fmax(worst, fabs(fatt[(size_t)bh * T + i] - (mx + log(sum))));
        }
    tap_ok(worst < 1e-5, "flash forward: each row's log-sum-exp at att[0, B·NH·T) (worst %.1e)", worst);
    const double e = max_rel(fdqkv, dqkv, nq);
    tap_ok(e < 1e-5, "flash backward: dqkv = attention_backward's to rounding (max rel %.1e)", e);
    free(qkv), free(dout), free(out), free(att), free(dqkv), free(datt), free(fo), free(fatt), free(fdqkv), free(fdatt);
}

/* The layout at GPT-2 124M's shape (B = 16, T = 1024, C = 768, NH = 12), in floats. */
static void test_layout(void)
{
    const int B = 16, T = 1024, C = 768, NH = 12;
    const size_t probs = mp_att_probs_floats(B, T, NH), fused = mp_att_fused_floats(B, T, C, NH);
    const size_t btc = (size_t)B * T * C, rows = (size_t)B * NH * T;
    tap_ok(mp_att_fused_shape_fits(B, T, C, NH) && mp_att_fused_keeps_qkv16(B, T, C, NH) &&
               fused == rows + btc + 3 * btc / 2 && mp_att_fused_dfloats(B, T, NH) == rows,
           "124M: fused att = log-sum-exps + out's copy + bf16 q,k,v planes (%zu floats, %.1f%% of the (T,T) %zu)",
           fused, 100.0 * (double)fused / (double)probs, probs);
    tap_ok(!mp_att_fused_shape_fits(4, 32, 32, 4) && mp_att_fused_shape_fits(4, 32, 32, 2) &&
               !mp_att_fused_keeps_qkv16(4, 32, 32, 2) && mp_att_fused_floats(4, 32, 32, 2) == 256 + 4096,
           "head size 8 takes the probabilities' path; B4 T32 C32 NH2 fits without the planes (4352 floats)");
}

static const model_cfg_t CFG = {.layers = 2, .dim = 32, .heads = 2, .seq_len = 32, .vocab = 23, .mlp_ratio = 2};
enum { MB = 2 };

/* One model on `be` (emu with att_fused or cpu): its activation and scratch bytes as planned and as
 * the arena counted them, and its gradients of one micro-batch from the shared parameters. */
static void model_run(backend_t *be, arena_t *arena, const float *params, float *g, size_t *plan_p, size_t *used_p)
{
    const int zero = 0;
    model_t m;
    acts_t a;
    scratch_t s;
    if (model_create(&m, &CFG, be, arena, 1, &zero, &CFG.layers, 1, 1, 1, 1, 0) != 0) abort();
    size_t mov = 0;
    *plan_p = acts_part_bytes(&m, MB, CFG.layers, 1, &mov) + scratch_bytes(&m, MB);
    const size_t before = arena->in_use;
    if (acts_create(&a, &m, MB, arena) != 0 || scratch_create(&s, &m, MB, arena) != 0) abort();
    *used_p = arena->in_use - before;
    be_to_device(be, m.params, params, m.tab.total * sizeof(float));
    for (int i = 0; i < MB * CFG.seq_len; i++)
        a.inputs[i] = (int)(rng_key(4, 1, (uint64_t)i, 0) % CFG.vocab), a.targets[i] = (i * 7 + 3) % CFG.vocab;
    model_grads_zero(&m);
    model_forward(&m, &a, &s);
    model_backward(&m, &a, &s, 1.0f / (MB * CFG.seq_len));
    model_grads_finish(&m);
    be_to_host(be, g, m.grads, m.tab.total * sizeof(float));
    scratch_destroy(&s, arena);
    acts_destroy(&a, arena);
    model_destroy(&m);
}

static void test_model(void)
{
    wait_cfg_t wait = {.yield = 0, .timeout = 0.0};
    arena_t ac, ae;
    arena_init(&ac, 0), arena_init(&ae, 0);
    backend_t cpu, emu;
    if (be_init(&cpu, BE_CPU, &ac, 0, 0, 0, &wait) != 0 || be_init(&emu, BE_EMU, &ae, (size_t)64 << 20, 0, 0, &wait) != 0)
        abort();
    emu.att_fused = 1;
    const int T = CFG.seq_len, C = CFG.dim, NH = CFG.heads;
    tap_ok(!be_attention_fused(&cpu, MB, T, C, NH, NH) && be_attention_fused(&emu, MB, T, C, NH, NH) &&
               !be_attention_fused(&emu, MB, T, C, NH, 1),
           "the path: cpu the probabilities', emu with att_fused the fused one (grouped-query: the probabilities')");
    model_t tmp;
    const int zero = 0;
    if (model_create(&tmp, &CFG, &cpu, &ac, 1, &zero, &CFG.layers, 1, 1, 1, 1, 0) != 0) abort();
    const size_t n = tmp.tab.total;
    float *params = malloc(n * sizeof(float)), *gc = malloc(n * sizeof(float)), *ge = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) params[i] = 0.3f * rng_normal(6, 1, i);
    model_destroy(&tmp);
    size_t plan_c, used_c, plan_e, used_e;
    model_run(&cpu, &ac, params, gc, &plan_c, &used_c);
    model_run(&emu, &ae, params, ge, &plan_e, &used_e);
    /* what the plan must drop: per layer att (B,NH,T,T) for the fused floats, and datt for D_i
     * (carve() keeps every view a multiple of 16 floats) */
    const size_t r16 = 16, probs = mp_att_probs_floats(MB, T, NH);
    const size_t fa = (mp_att_fused_floats(MB, T, C, NH) + r16 - 1) / r16 * r16;
    const size_t fd = (mp_att_fused_dfloats(MB, T, NH) + r16 - 1) / r16 * r16;
    const size_t want = ((size_t)CFG.layers * (probs - fa) + (probs - fd)) * sizeof(float);
    tap_diag("activations + scratch at B=%d T=%d C=%d NH=%d L=%d: cpu %zu bytes, emu fused %zu (%zu less; want %zu)", MB,
             T, C, NH, CFG.layers, plan_c, plan_e, plan_c - plan_e, want);
    tap_ok(plan_c - plan_e == want, "plan: emu fused drops each layer's (B,NH,T,T) att and the scratch's datt");
    tap_ok(used_c == plan_c && used_e == plan_e, "measured = plan: cpu %zu = %zu, emu fused %zu = %zu", used_c, plan_c,
           used_e, plan_e);
    double e = 0, den = 1e-12;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)ge[i] - gc[i])), den = fmax(den, fabs((double)gc[i]));
    tap_ok(e / den < 1e-5, "emu fused: gradients = the cpu backend's to rounding (max rel %.1e)", e / den);
    free(params), free(gc), free(ge);
    be_destroy(&emu), be_destroy(&cpu);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    kernels_set_threads(2);
    test_kernels();
    test_layout();
    test_model();
    MPI_Finalize();
    return tap_done();
}
