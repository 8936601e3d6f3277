#include "search.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "deck_model.h"
#include "rng.h"
#include "run_ckpt.h"
#include "supernet.h"
#include "train.h"

/* One subnet: a candidate per choice block (genes), its cost and, once evaluated, its val_loss. */
typedef struct {
    int *gene;
    double val, params, flops;
} cand_t;

typedef struct {
    run_t *r;
    const search_cfg_t *cfg;
    int ngene, *layer;       /* the choice blocks' layers */
    cand_t *seen;            /* every subnet evaluated, in order */
    int nseen, cap;
    int best;                /* index into seen */
    FILE *log;
    long draws;              /* the search's random draws so far (its counter) */
} search_t;

static uint64_t search_draw(search_t *s) { return rng_key(s->cfg->seed, RNG_STREAM_SEARCH, (uint64_t)s->draws++, 0); }

static void gene_text(const search_t *s, const int *g, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < s->ngene && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%d", i ? "," : "", g[i]);
}

/* The subnet's model: its parameters and model FLOPs per token (the budget's measures). */
static void gene_cost(const search_t *s, const int *g, double *params, double *flops)
{
    const deck_t *d = &s->r->deck;
    block_shape_t sh[DECK_LIST_MAX];
    for (int l = 0, i = 0; l < d->model.layers && l < DECK_LIST_MAX; l++)
        sh[l] = supernet_of(s->r)->choice[l] ? d->supernet.cands.shape[g[i++]] : (block_shape_t){d->model.heads, d->model.mlp_ratio};
    model_cfg_t cfg = deck_model_cfg(d, NULL);
    cfg.shape = sh; /* the subnet's blocks: a plain model of the candidates g chose */
    *params = (double)param_count_model(&cfg);
    *flops = model_flops_per_token(&cfg);
}

static int within_budget(const search_t *s, const int *g)
{
    double p, f;
    gene_cost(s, g, &p, &f);
    return (s->cfg->max_params <= 0 || p <= s->cfg->max_params) && (s->cfg->max_flops <= 0 || f <= s->cfg->max_flops);
}

static int seen_index(const search_t *s, const int *g)
{
    for (int i = 0; i < s->nseen; i++)
        if (!memcmp(s->seen[i].gene, g, (size_t)s->ngene * sizeof *g)) return i;
    return -1;
}

/* val_loss of subnet g (evaluated once: every rank takes the same path, so the pipeline's
 * collectives meet); its index in seen. */
static int search_eval(search_t *s, const int *g, int generation)
{
    int i = seen_index(s, g);
    if (i >= 0) return i;
    if (s->nseen == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        cand_t *n = realloc(s->seen, (size_t)s->cap * sizeof *n);
        if (!n) MP_ABORT("out of memory in the search");
        s->seen = n;
    }
    cand_t *c = &s->seen[i = s->nseen++];
    if (!(c->gene = MP_MALLOC((size_t)s->ngene * sizeof *c->gene))) MP_ABORT("out of memory in the search");
    memcpy(c->gene, g, (size_t)s->ngene * sizeof *g);
    int *sel = supernet_of(s->r)->sel;
    for (int l = 0, k = 0; l < s->r->deck.model.layers; l++) sel[l] = supernet_of(s->r)->choice[l] ? g[k++] : -1;
    model_select(&s->r->st.model, sel);
    c->val = train_val_loss(s->r);
    gene_cost(s, g, &c->params, &c->flops);
    if (s->best < 0 || c->val < s->seen[s->best].val) s->best = i;
    if (s->r->lay.rank == 0) {
        char text[DECK_LIST_MAX * 12], best[DECK_LIST_MAX * 12];
        gene_text(s, g, text, sizeof text);
        gene_text(s, s->seen[s->best].gene, best, sizeof best);
        fprintf(s->log, "{\"subnet\":\"%s\",\"generation\":%d,\"val_loss\":%.17g,\"params\":%.0f,\"flops_per_token\":%.0f}\n",
                text, generation, c->val, c->params, c->flops);
        fflush(s->log);
        runlog_printf(&s->r->files.log, "search: #%d gen %d subnet %s val_loss %.4f (%.0f params) | best %s val_loss %.4f",
                      s->nseen, generation, text, c->val, c->params, best, s->seen[s->best].val);
    }
    return i;
}

/* A random subnet within the budget (a bounded number of tries: the budget may exclude nearly all). */
static int random_gene(search_t *s, int *g)
{
    for (int tries = 0; tries < 10000; tries++) {
        for (int i = 0; i < s->ngene; i++) g[i] = (int)(search_draw(s) % (uint64_t)supernet_of(s->r)->ncand);
        if (within_budget(s, g)) return MP_OK;
    }
    return MP_FAIL("search: no subnet within the budget after 10000 random draws (--max-params, --max-flops)");
}

static int by_val(const void *a, const void *b, void *ctx)
{
    const search_t *s = ctx;
    const double x = s->seen[*(const int *)a].val, y = s->seen[*(const int *)b].val;
    return x < y ? -1 : x > y ? 1 : *(const int *)a - *(const int *)b; /* ties: the earlier one */
}

/* qsort_r is not C11: a stable insertion sort of population indices by val_loss. */
static void sort_pop(const search_t *s, int *pop, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && by_val(&pop[j], &pop[j - 1], (void *)s) < 0; j--) {
            const int t = pop[j];
            pop[j] = pop[j - 1], pop[j - 1] = t;
        }
}

static int search_run(search_t *s)
{
    const search_cfg_t *c = s->cfg;
    const int P = c->population;
    int *g = MP_MALLOC((size_t)s->ngene * sizeof *g), *pop = MP_MALLOC((size_t)4 * P * sizeof *pop), rc = MP_OK;
    if (!g || !pop) MP_ABORT("out of memory in the search");
    int n = 0;
    for (int i = 0; i < P && rc == MP_OK; i++)
        if ((rc = random_gene(s, g)) == MP_OK) pop[n++] = search_eval(s, g, 0);
    for (int gen = 1; gen < c->generations && rc == MP_OK; gen++) {
        if (!c->evolution) { /* random search: another population of random draws */
            for (int i = 0; i < P && rc == MP_OK; i++)
                if ((rc = random_gene(s, g)) == MP_OK) search_eval(s, g, gen);
            continue;
        }
        sort_pop(s, pop, n);
        const int parents = n / 2 > 0 ? n / 2 : 1;
        for (int child = 0; child < P; child++) {
            int tries = 0;
            do { /* uniform crossover of two parents, then mutation; within the budget */
                const int *a = s->seen[pop[search_draw(s) % (uint64_t)parents]].gene;
                const int *b = s->seen[pop[search_draw(s) % (uint64_t)parents]].gene;
                for (int i = 0; i < s->ngene; i++) {
                    g[i] = search_draw(s) & 1 ? a[i] : b[i];
                    if (rng_uniform(search_draw(s)) < c->mutation) g[i] = (int)(search_draw(s) % (uint64_t)supernet_of(s->r)->ncand);
                }
            } while (!within_budget(s, g) && ++tries < 1000);
            if (tries == 1000) continue;
            const int k = search_eval(s, g, gen);
            int dup = 0;
            for (int j = 0; j < n; j++) dup |= pop[j] == k;
            if (!dup) pop[n++] = k;
        }
        sort_pop(s, pop, n);
        n = n < P ? n : P; /* the best P survive */
    }
    free(g), free(pop);
    return rc;
}

int search_main(const run_opts_t *opts, const search_cfg_t *cfg)
{
    run_t r;
    run_opts_t o = *opts;
    o.plug = &supernet_plug;
    if (run_setup(&r, &o, 0) != MP_OK) return 1;
    search_t s = {.r = &r, .cfg = cfg, .best = -1};
    long step = 0;
    int rc = r.plug ? MP_OK : MP_FAIL("search needs the supernet's deck (supernet.enabled=1) in -c");
    if (rc == MP_OK && (cfg->population < 2 || cfg->generations < 1 || !(cfg->mutation >= 0 && cfg->mutation <= 1)))
        rc = MP_FAIL("search: --population >= 2, --generations >= 1 and --mutation in [0, 1]");
    if (rc == MP_OK && r.lay.rank == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s/search.jsonl", cfg->out_dir);
        if (mkdir(cfg->out_dir, 0777) != 0 && errno != EEXIST)
            rc = MP_FAIL("cannot create directory %s: %s", cfg->out_dir, strerror(errno));
        else if (!(s.log = fopen(path, "w")))
            rc = MP_FAIL("cannot write %s: %s", path, strerror(errno));
    }
    rc = run_agree(rc);
    if (rc == MP_OK) rc = run_agree(run_ckpt_load_weights(&r, cfg->ckpt, &step));
    if (rc == MP_OK) {
        s.layer = MP_MALLOC((size_t)r.deck.model.layers * sizeof *s.layer);
        if (!s.layer) MP_ABORT("out of memory in the search");
        for (int l = 0; l < r.deck.model.layers; l++)
            if (supernet_of(&r)->choice[l]) s.layer[s.ngene++] = l;
        rc = run_agree(search_run(&s));
    }
    if (rc == MP_OK && r.lay.rank == 0 && s.best >= 0) {
        char best[DECK_LIST_MAX * 12];
        gene_text(&s, s.seen[s.best].gene, best, sizeof best);
        runlog_printf(&r.files.log, "search: %s search of %s (step %ld): %d subnets evaluated; best %s val_loss %.6f "
                      "(%.0f params); all in %s/search.jsonl", cfg->evolution ? "evolutionary" : "random", cfg->ckpt, step,
                      s.nseen, best, s.seen[s.best].val, s.seen[s.best].params, cfg->out_dir);
    }
    if (s.log && fclose(s.log) != 0 && rc == MP_OK) rc = MP_FAIL("writing %s/search.jsonl failed", cfg->out_dir);
    for (int i = 0; i < s.nseen; i++) free(s.seen[i].gene);
    free(s.seen), free(s.layer);
    run_teardown(&r);
    return rc == MP_OK ? 0 : 1;
}
