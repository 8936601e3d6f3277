/* What combines with what (src/sched/compose.h): the whole product of schedule kinds × stage counts
 * × memory policies × features (a supernet, cuda, NCCL messages) walked once, and at every point the
 * deck's validation, the executor, the cost model and the planner give compose_refused's answer and
 * its message. A rule written into one of them only would make one of these disagree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "compose.h"
#include "costmodel.h"
#include "deck.h"
#include "executor.h"
#include "gpu_share.h"
#include "planner.h"
#include "tap.h"

static char tmpdir[] = "/tmp/test_compose.XXXXXX";
#include "capture.h"

static const char *const policies[] = {"keep", "recompute", "selective", "offload", "balance", "auto"};
#define NPOL (int)(sizeof policies / sizeof policies[0])
static const int pps[] = {1, 2, 4};

/* A GPU kind (node_cores 0) and a CPU kind of the cost model. */
static void kinds(dev_kind_t *gpu, dev_kind_t *cpu)
{
    memset(gpu, 0, sizeof *gpu);
    snprintf(gpu->name, sizeof gpu->name, "gpu");
    gpu->peak[DEV_PREC_FP32] = 10e12, gpu->mem_bw = 1e12, gpu->mem_bytes = 40e9, gpu->neff = 1;
    gpu->eff_size[0] = 1, gpu->eff[0] = 1, gpu->per_node = 8, gpu->intra.bw = gpu->inter.bw = 1e9;
    *cpu = *gpu;
    snprintf(cpu->name, sizeof cpu->name, "cpu");
    cpu->node_cores = 2;
}

/* The features a deck may be given here, each by a few keys (test_compose's own words for them). */
enum { T_SUPERNET, T_CUDA, T_EMU, T_MIGRATION, T_RECOVERY, T_ZERO1, T_SP, T_CHUNKS, T_LIMIT, T_BF16, TOGGLES };
static const char *const toggle_names[TOGGLES] = {"supernet", "cuda", "emu", "migration", "recovery",
                                                  "zero1", "sp", "chunks", "limit", "bf16"};

/* What compose should be asked for this deck: its features worked out here, not by the deck. */
static unsigned expected_have(sched_kind_t k, int pp, const char *pol, unsigned t)
{
    unsigned h = 0;
    if (t & (1u << T_SUPERNET | 1u << T_SP)) h |= 1u << COMPOSE_SUPERNET;
    if (!strcmp(pol, "balance")) h |= 1u << COMPOSE_BALANCE;
    if (!strcmp(pol, "offload")) h |= 1u << COMPOSE_OFFLOAD;
    if (t & 1u << T_CUDA) h |= 1u << COMPOSE_CUDA | 1u << COMPOSE_DEVICE;
    if (t & 1u << T_EMU) h |= 1u << COMPOSE_DEVICE;
    if (t & 1u << T_MIGRATION) h |= 1u << COMPOSE_MIGRATION;
    if (t & 1u << T_RECOVERY) h |= 1u << COMPOSE_RECOVERY_LOG;
    if (t & 1u << T_ZERO1) h |= 1u << COMPOSE_ZERO1;
    if (t & 1u << T_SP) h |= 1u << COMPOSE_SP;
    if (sched_kind_place(k) == SCHED_PLACE_V || (t & 1u << T_CHUNKS && pp > 1)) h |= 1u << COMPOSE_CHUNKS;
    if (t & 1u << T_LIMIT) h |= 1u << COMPOSE_DEVICE_LIMIT;
    if (t & 1u << T_BF16) h |= 1u << COMPOSE_BF16_GRADS;
    return h;
}

/* Loads the deck of (kind, pp, policy, toggles); `why` (or NULL): compose's refusal. Sets *has_why
 * (the deck printed why), *has_any (it printed any of compose's words: "with FEATURE: "), *have (the
 * deck's features, when it loaded: a refused deck is not returned). deck_load's status. */
static int deck_verdict(sched_kind_t k, int pp, const char *pol, unsigned t, const char *why, int *has_why, int *has_any,
                        unsigned *have)
{
    char s[24][96];
    int n = 0;
#define SET(...) snprintf(s[n++], sizeof s[0], __VA_ARGS__)
    SET("data.path=/nonexistent/x.h5");
    SET("model.layers=8");
    SET("train.batch=8");
    SET("train.micro_batch=1");
    SET("parallel.pp=%d", pp);
    SET("parallel.schedule=%s", t & 1u << T_CHUNKS ? "interleaved" : sched_kind_names[k]);
    SET("memory.policy=%s", pol);
    if (t & (1u << T_SUPERNET | 1u << T_SP)) {
        SET("supernet.enabled=1");
        SET("supernet.candidates=h4m4,h2m1,skip");
        SET("supernet.window=2");
    }
    if (t & 1u << T_CUDA) SET("train.device=cuda");
    if (t & 1u << T_EMU) SET("train.device=emu");
    if (t & 1u << T_MIGRATION) SET("pipeline.replan_every=3");
    if (t & 1u << T_RECOVERY) SET("recovery.log=1");
    if (t & (1u << T_ZERO1 | 1u << T_BF16)) SET("parallel.dp=2");
    if (t & 1u << T_ZERO1) SET("parallel.zero=1");
    if (t & 1u << T_SP) SET("parallel.sp=2");
    if (t & 1u << T_CHUNKS) SET("parallel.virtual_stages=2");
    if (t & 1u << T_LIMIT) SET("memory.device_limit=1G");
    if (t & 1u << T_BF16) SET("parallel.grad_reduce_dtype=bf16");
#undef SET
    char *sets[24];
    for (int i = 0; i < n; i++) sets[i] = s[i];
    deck_t d;
    capture_begin();
    const int rc = deck_load(&d, NULL, sets, n);
    capture_end();
    *has_why = why && strstr(errtext, why) != NULL;
    *has_any = 0;
    for (int f = 0; f < COMPOSE_FEATURES; f++) {
        char pre[256];
        snprintf(pre, sizeof pre, "with %s: ", compose_feature_names[f]);
        *has_any |= strstr(errtext, pre) != NULL;
    }
    if (rc == MP_OK) *have = deck_compose_have(&d);
    return rc;
}

static int deck_points, deck_bad, deck_refused, have_bad, have_n;

/* One deck against compose: refused with compose's words exactly where compose refuses it. */
static void deck_case(sched_kind_t k, int pp, const char *pol, unsigned t)
{
    const sched_kind_t kind = t & 1u << T_CHUNKS ? SCHED_INTERLEAVED : k;
    const unsigned want = expected_have(kind, pp, pol, t);
    char why[640];
    const int no = compose_refused(kind, pp, want, why, sizeof why) != MP_OK;
    int has_why, has_any;
    unsigned got = 0;
    const int rc = deck_verdict(kind, pp, pol, t, no ? why : NULL, &has_why, &has_any, &got);
    deck_points++, deck_refused += no;
    if (no ? !has_why : has_any) {
        char tog[160] = "";
        for (int i = 0; i < TOGGLES; i++)
            if (t >> i & 1u) strcat(tog, " "), strcat(tog, toggle_names[i]);
        if (deck_bad++ < 4)
            tap_diag("deck %s pp=%d %s%s: compose %s; the deck said: %.300s", sched_kind_names[kind], pp, pol, tog,
                     no ? why : "accepts", errtext);
    }
    have_n += rc == MP_OK;
    if (rc == MP_OK && got != want && have_bad++ < 3)
        tap_diag("deck_compose_have %s pp=%d %s: %#x, not %#x", sched_kind_names[kind], pp, pol, got, want);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    dev_kind_t gpu, cpu;
    kinds(&gpu, &cpu);
    cm_costs_t c;
    memset(&c, 0, sizeof c);
    c.bwd_b = c.bwd_w = 1.0;
    int exec_bad = 0, plan_bad = 0;
    /* the schedules: every kind × pp × policy × a supernet × cuda */
    for (int k = 0; k < SCHED_KINDS; k++)
        for (size_t ip = 0; ip < sizeof pps / sizeof pps[0]; ip++)
            for (int p = 0; p < NPOL; p++)
                for (unsigned t = 0; t < 4; t++)
                    deck_case((sched_kind_t)k, pps[ip], policies[p], (t & 1u) << T_SUPERNET | (t >> 1 & 1u) << T_CUDA);
    const int sched_points = deck_points, sched_refused = deck_refused;
    /* the features with each other: every one and every two of them (cuda and emu apart), at 1f1b
     * over 2 stages, the layers kept, offloaded or balanced */
    static const char *const pair_pols[] = {"keep", "offload", "balance"};
    for (int a = -1; a < TOGGLES; a++)
        for (int b = a; b < TOGGLES; b++) {
            const unsigned t = (a >= 0 ? 1u << a : 0u) | (b >= 0 ? 1u << b : 0u);
            if ((t & 1u << T_CUDA) && (t & 1u << T_EMU)) continue;
            for (int p = 0; p < 3; p++) deck_case(SCHED_1F1B, 2, pair_pols[p], t);
        }
    tap_ok(deck_bad == 0, "the deck refuses with compose's words exactly where compose refuses: %d kinds × %zu stage "
           "counts × %d policies × a supernet × cuda (%d decks, %d refused), and every one and two of %d features × "
           "3 policies (%d decks, %d refused); %d disagree", SCHED_KINDS, sizeof pps / sizeof pps[0], NPOL,
           sched_points, sched_refused, TOGGLES, deck_points - sched_points, deck_refused - sched_refused, deck_bad);
    tap_ok(have_bad == 0 && have_n > 100, "deck_compose_have names the features of each deck that loads (%d decks; %d "
           "disagree)", have_n, have_bad);
    /* the executor: the context's features, NCCL as resolved (not under the stand-in) */
    for (int k = 0; k < SCHED_KINDS; k++)
        for (int p = 0; p < NPOL; p++)
            for (unsigned f = 0; f < 8; f++) {
                const int sn = f & 1, per = f >> 1 & 1, nccl = f >> 2 & 1, bal = !strcmp(policies[p], "balance");
                exec_ctx_t x;
                memset(&x, 0, sizeof x);
                x.kind = (sched_kind_t)k, x.pp = 2, x.supernet = sn, x.per = per ? 4 : 0, x.balance = bal, x.nccl = nccl;
                const unsigned ehave = (sn || per ? 1u << COMPOSE_SUPERNET : 0u) | (bal ? 1u << COMPOSE_BALANCE : 0u) |
                                       (nccl && !gpu_share_nccl_standin() ? 1u << COMPOSE_NCCL_P2P : 0u);
                if (exec_compose_have(&x) != ehave && exec_bad++ < 3)
                    tap_diag("exec_compose_have %s %s supernet=%d per=%d nccl=%d: %#x, not %#x", sched_kind_names[k],
                             policies[p], sn, per, nccl, exec_compose_have(&x), ehave);
            }
    tap_ok(exec_bad == 0, "exec_compose_have names the stage context's features, NCCL as resolved (%d disagree)",
           exec_bad);
    /* the planner: a GPU kind runs on cuda with NCCL messages, a CPU kind with neither */
    for (int k = 0; k < SCHED_KINDS; k++)
        for (size_t ip = 0; ip < sizeof pps / sizeof pps[0]; ip++) {
            const sched_kind_t kind = (sched_kind_t)k;
            const int pp = pps[ip];
            if (!sched_kind_split(kind)) continue;
            char why[640], pwhy[640];
            const int gno = compose_refused(kind, pp, 1u << COMPOSE_CUDA | 1u << COMPOSE_DEVICE | 1u << COMPOSE_NCCL_P2P, why,
                                           sizeof why);
            const int gok = plan_split_usable(kind, pp, &c, &gpu, pwhy, sizeof pwhy);
            if ((gno == MP_OK) != gok || (!gok && strcmp(why, pwhy)))
                plan_bad++, tap_diag("planner %s pp=%d on a GPU kind: %s / compose: %s", sched_kind_names[k], pp,
                                     gok ? "usable" : pwhy, gno == MP_OK ? "accepts" : why);
            const int cno = compose_refused(kind, pp, 0u, why, sizeof why);
            const int cok = plan_split_usable(kind, pp, &c, &cpu, pwhy, sizeof pwhy);
            if ((cno == MP_OK) != cok) plan_bad++, tap_diag("planner %s pp=%d on a CPU kind disagrees", sched_kind_names[k], pp);
        }
    tap_ok(plan_bad == 0, "the planner proposes a split kind exactly where compose lets it run on the device kind, "
           "and says compose's words where not (%d disagree)", plan_bad);
    /* the cost model: a layout's balance */
    cm_layout_t lay;
    memset(&lay, 0, sizeof lay);
    lay.kind = SCHED_ZB1P, lay.pp = 2, lay.dp = lay.tp = lay.v = lay.mb = 1, lay.balance = 1;
    cm_model_t mo = {.L = 4, .C = 64, .NH = 4, .T = 16, .V = 256, .R = 4, .batch = 8};
    c.B = 1, c.tp = 1;
    cm_layout_balanced(&lay, mo.L);
    cm_result_t res;
    char why[640];
    compose_refused(SCHED_ZB1P, 2, 1u << COMPOSE_BALANCE, why, sizeof why);
    tap_ok(cm_evaluate(&mo, &c, &cpu, &lay, &res) == MP_ERR && !strcmp(res.error, why),
           "the cost model refuses zb1p with balance in compose's words (%.120s)", res.error);
    /* the kinds' properties (schedule.c's table) that compose and the executor read */
    tap_ok(sched_kind_split(SCHED_ZB1P) && sched_kind_split(SCHED_ZBV) && sched_kind_split(SCHED_DUALPIPEV) &&
               !sched_kind_split(SCHED_2BW) && !sched_kind_split(SCHED_1F1B) && sched_kind_played(SCHED_ZBV) &&
               !sched_kind_played(SCHED_DUALPIPEV) && sched_kind_place(SCHED_ZBV) == SCHED_PLACE_V &&
               sched_kind_place(SCHED_INTERLEAVED) == SCHED_PLACE_LOOP && compose_run_kind(SCHED_ZBV, 1) == SCHED_1F1B &&
               compose_run_kind(SCHED_2BW, 1) == SCHED_2BW && compose_run_kind(SCHED_ZB1P, 2) == SCHED_ZB1P,
           "the kinds' properties: zb1p, zbv, dualpipev split; zb1p, zbv played; zbv, dualpipev a V; one stage runs "
           "1f1b but for 2bw");
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) tap_diag("could not remove %s", tmpdir);
    return tap_done();
}
