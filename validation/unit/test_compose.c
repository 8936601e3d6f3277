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

/* The deck's verdict on (kind, pp, policy, supernet, cuda): whether it printed `why`, whether it
 * printed any of compose's refusals ("parallel.schedule=K with " + a feature's name), and the loaded
 * deck's features (when it loaded: a refused deck is not returned). deck_load's status. */
static int deck_verdict(sched_kind_t k, int pp, const char *pol, int sn, int cuda, const char *why, int *has_why,
                         int *has_any, unsigned *have)
{
    char s[12][96];
    int n = 0;
    snprintf(s[n++], sizeof s[0], "data.path=/nonexistent/x.h5");
    snprintf(s[n++], sizeof s[0], "model.layers=8");
    snprintf(s[n++], sizeof s[0], "train.batch=8");
    snprintf(s[n++], sizeof s[0], "train.micro_batch=1");
    snprintf(s[n++], sizeof s[0], "parallel.pp=%d", pp);
    snprintf(s[n++], sizeof s[0], "parallel.schedule=%s", sched_kind_names[k]);
    snprintf(s[n++], sizeof s[0], "memory.policy=%s", pol);
    if (sn) {
        snprintf(s[n++], sizeof s[0], "supernet.enabled=1");
        snprintf(s[n++], sizeof s[0], "supernet.candidates=h4m4,h2m1,skip");
        snprintf(s[n++], sizeof s[0], "supernet.window=2");
    }
    if (cuda) snprintf(s[n++], sizeof s[0], "train.device=cuda");
    char *sets[12];
    for (int i = 0; i < n; i++) sets[i] = s[i];
    deck_t d;
    capture_begin();
    const int rc = deck_load(&d, NULL, sets, n);
    capture_end();
    *has_why = why && strstr(errtext, why) != NULL;
    *has_any = 0;
    for (int f = 0; f < COMPOSE_FEATURES; f++) {
        char pre[256];
        snprintf(pre, sizeof pre, "parallel.schedule=%s with %s", sched_kind_names[k], compose_feature_names[f]);
        *has_any |= strstr(errtext, pre) != NULL;
    }
    if (rc == MP_OK) *have = deck_compose_have(&d);
    return rc;
}

int main(void)
{
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    dev_kind_t gpu, cpu;
    kinds(&gpu, &cpu);
    cm_costs_t c;
    memset(&c, 0, sizeof c);
    c.bwd_b = c.bwd_w = 1.0;
    int points = 0, deck_bad = 0, have_bad = 0, have_n = 0, exec_bad = 0, plan_bad = 0, refused = 0;
    for (int k = 0; k < SCHED_KINDS; k++)
        for (size_t ip = 0; ip < sizeof pps / sizeof pps[0]; ip++)
            for (int p = 0; p < NPOL; p++)
                for (unsigned feats = 0; feats < 8; feats++) { /* bit 0 supernet, 1 cuda, 2 nccl */
                    const int pp = pps[ip], sn = feats & 1, cuda = feats >> 1 & 1, nccl = feats >> 2 & 1;
                    const int bal = !strcmp(policies[p], "balance");
                    const sched_kind_t kind = (sched_kind_t)k;
                    char why[640];
                    points++;
                    /* the deck: the features it knows (NCCL is resolved at start) */
                    const unsigned dhave = (sn ? 1u << COMPOSE_SUPERNET : 0u) | (bal ? 1u << COMPOSE_BALANCE : 0u) |
                                           (cuda ? 1u << COMPOSE_CUDA : 0u);
                    const int no = compose_refused(kind, pp, dhave, why, sizeof why) != MP_OK;
                    refused += no;
                    int has_why, has_any;
                    unsigned got = 0;
                    if (nccl == 0) { /* the deck has no NCCL of its own: one walk of it per point */
                        const int rc = deck_verdict(kind, pp, policies[p], sn, cuda, no ? why : NULL, &has_why, &has_any,
                                                    &got);
                        if (no ? !has_why : has_any) {
                            if (deck_bad++ < 3)
                                tap_diag("deck %s pp=%d %s%s%s: compose %s; the deck said: %.300s", sched_kind_names[k], pp,
                                         policies[p], sn ? " supernet" : "", cuda ? " cuda" : "",
                                         no ? why : "accepts", errtext);
                        }
                        have_n += rc == MP_OK;
                        if (rc == MP_OK && got != dhave && have_bad++ < 3)
                            tap_diag("deck_compose_have %s pp=%d %s: %#x, not %#x", sched_kind_names[k], pp,
                                     policies[p], got, dhave);
                    }
                    /* the executor: the context's features, NCCL as resolved (not under the stand-in) */
                    exec_ctx_t x;
                    memset(&x, 0, sizeof x);
                    x.kind = kind, x.pp = pp, x.supernet = sn, x.balance = bal, x.nccl = nccl;
                    const unsigned ehave = (sn ? 1u << COMPOSE_SUPERNET : 0u) | (bal ? 1u << COMPOSE_BALANCE : 0u) |
                                           (nccl && !gpu_share_nccl_standin() ? 1u << COMPOSE_NCCL_P2P : 0u);
                    if (exec_compose_have(&x) != ehave && exec_bad++ < 3)
                        tap_diag("exec_compose_have %s pp=%d %s nccl=%d: %#x, not %#x", sched_kind_names[k], pp,
                                 policies[p], nccl, exec_compose_have(&x), ehave);
                }
    tap_ok(deck_bad == 0, "the deck refuses with compose's words exactly where compose refuses, over %d kinds × %zu "
           "stage counts × %d policies × a supernet × cuda (%d points of %d refused; %d disagree)", SCHED_KINDS,
           sizeof pps / sizeof pps[0], NPOL, refused / 2, points / 2, deck_bad);
    tap_ok(have_bad == 0 && have_n > 50, "deck_compose_have names the features of each deck that loads (%d decks; %d disagree)",
           have_n, have_bad);
    tap_ok(exec_bad == 0, "exec_compose_have names the stage context's features, NCCL as resolved (%d disagree)",
           exec_bad);
    /* the planner: a GPU kind runs on cuda with NCCL messages, a CPU kind with neither */
    for (int k = 0; k < SCHED_KINDS; k++)
        for (size_t ip = 0; ip < sizeof pps / sizeof pps[0]; ip++) {
            const sched_kind_t kind = (sched_kind_t)k;
            const int pp = pps[ip];
            if (!sched_kind_split(kind)) continue;
            char why[640], pwhy[640];
            const int gno = compose_refused(kind, pp, 1u << COMPOSE_CUDA | 1u << COMPOSE_NCCL_P2P, why, sizeof why);
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
