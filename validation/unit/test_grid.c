/* The rank grid's arithmetic (src/comm/grid.h) on one process: grid_rank_of against the mixed-radix
 * rule and the worked 16-rank example of grid.h's comment (grids made by hand: a unit test has one
 * rank), the communicator groups that example lists, other orders; the deck's parallel section as
 * grid_cfg_t; grid_build on a 1-rank world: every order of an all-ones layout is built, a layout
 * whose product is not the world size and an order that is not a permutation are refused with the
 * message users see, and nothing is set. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "deck.h"
#include "grid.h"
#include "mpi_check.h"
#include "tap.h"

static char tmpdir[] = "/tmp/test_grid.XXXXXX";
#include "capture.h"

/* A grid of the given sizes (by grid_dim_t) and order (fastest first) with the strides grid.h
 * documents: 1, s0, s0·s1, s0·s1·s2 along the order. Only the arithmetic fields are set. */
static grid_t grid_by_hand(int tp, int dp, int sp, int pp, const int order[GRID_NDIMS])
{
    grid_t g;
    memset(&g, 0, sizeof g);
    g.size[GRID_TP] = tp, g.size[GRID_DP] = dp, g.size[GRID_SP] = sp, g.size[GRID_PP] = pp;
    int stride = 1;
    for (int k = 0; k < GRID_NDIMS; k++) {
        g.order[k] = order[k];
        g.stride[order[k]] = stride;
        stride *= g.size[order[k]];
    }
    g.world = stride;
    return g;
}

/* Coordinate number i of the grid (every coordinate once as i runs over 0..world-1), by grid_dim_t;
 * independent of the order, so it walks the coordinates in another sequence than the ranks. */
static void coord_number(const grid_t *g, int i, int c[GRID_NDIMS])
{
    for (int d = 0; d < GRID_NDIMS; d++) {
        c[d] = i % g->size[d];
        i /= g->size[d];
    }
}

/* grid.h's formula, written as it is written there: rank = c0 + s0·(c1 + s1·(c2 + s2·c3)). */
static int horner(const grid_t *g, const int c[GRID_NDIMS])
{
    const int *o = g->order;
    return c[o[0]] + g->size[o[0]] * (c[o[1]] + g->size[o[1]] * (c[o[2]] + g->size[o[2]] * c[o[3]]));
}

/* grid_rank_of over every coordinate: equal to the formula and a bijection onto 0..world-1. */
static int rank_rule_holds(const grid_t *g)
{
    int *hits = calloc((size_t)g->world, sizeof *hits), good = 1;
    for (int i = 0; i < g->world; i++) {
        int c[GRID_NDIMS];
        coord_number(g, i, c);
        int r = grid_rank_of(g, c);
        if (r < 0 || r >= g->world || r != horner(g, c)) {
            good = 0;
            continue;
        }
        hits[r]++;
    }
    for (int r = 0; r < g->world; r++) good &= hits[r] == 1;
    free(hits);
    return good;
}

/* The groups of ranks that agree on every coordinate outside `span` (a bit set of dimensions;
 * embed: span pp restricted to its first and last stage), each listed in ascending rank order,
 * groups by their first rank: "{0,2} {1,3} ...". */
static const char *groups(const grid_t *g, unsigned span, int embed)
{
    static char out[1024];
    int n = 0, *seen = calloc((size_t)g->world, sizeof *seen);
    out[0] = 0;
    for (int r0 = 0; r0 < g->world; r0++) {
        if (seen[r0]) continue;
        int c0[GRID_NDIMS] = {0}, members[64], k = 0;
        for (int i = 0; i < g->world; i++) { /* r0's coordinates */
            int c[GRID_NDIMS];
            coord_number(g, i, c);
            if (grid_rank_of(g, c) == r0) memcpy(c0, c, sizeof c0);
        }
        if (embed && c0[GRID_PP] != 0 && c0[GRID_PP] != g->size[GRID_PP] - 1) continue;
        for (int i = 0; i < g->world; i++) {
            int c[GRID_NDIMS], same = 1;
            coord_number(g, i, c);
            for (int d = 0; d < GRID_NDIMS; d++)
                if (!(span & (1u << d))) same &= c[d] == c0[d];
            if (embed) same &= c[GRID_PP] == 0 || c[GRID_PP] == g->size[GRID_PP] - 1;
            if (same && k < 64) members[k++] = grid_rank_of(g, c);
        }
        for (int a = 1; a < k; a++) /* insertion sort: ascending ranks */
            for (int b = a; b > 0 && members[b - 1] > members[b]; b--) {
                int t = members[b];
                members[b] = members[b - 1], members[b - 1] = t;
            }
        n += snprintf(out + n, sizeof out - (size_t)n, "%s{", n ? " " : "");
        for (int a = 0; a < k; a++) {
            seen[members[a]] = 1;
            n += snprintf(out + n, sizeof out - (size_t)n, "%s%d", a ? "," : "", members[a]);
        }
        n += snprintf(out + n, sizeof out - (size_t)n, "}");
    }
    free(seen);
    return out;
}

static const int ORDER_DEFAULT[GRID_NDIMS] = {GRID_TP, GRID_DP, GRID_SP, GRID_PP};

/* "tp-dp-sp-pp" of an order (in one of two rotating static buffers). */
static const char *order_name(const int order[GRID_NDIMS])
{
    static char buf[2][64];
    static int k = 0;
    k ^= 1;
    snprintf(buf[k], sizeof buf[k], "%s-%s-%s-%s", grid_dim_names[order[0]], grid_dim_names[order[1]],
             grid_dim_names[order[2]], grid_dim_names[order[3]]);
    return buf[k];
}

/* grid.h: 16 ranks, tp=2 dp=2 sp=1 pp=4, order tp-dp-sp-pp. */
static void test_worked_example(void)
{
    const grid_t g = grid_by_hand(2, 2, 1, 4, ORDER_DEFAULT);
    tap_ok(g.world == 16 && g.stride[GRID_TP] == 1 && g.stride[GRID_DP] == 2 && g.stride[GRID_SP] == 4 &&
               g.stride[GRID_PP] == 4,
           "16-rank example: strides tp 1, dp 2, sp 4, pp 4 (got %d %d %d %d)", g.stride[GRID_TP], g.stride[GRID_DP],
           g.stride[GRID_SP], g.stride[GRID_PP]);
    /* the example's lines: {rank, tp, dp, sp, pp} */
    static const int lines[6][5] = {{0, 0, 0, 0, 0}, {1, 1, 0, 0, 0}, {2, 0, 1, 0, 0},
                                    {3, 1, 1, 0, 0}, {4, 0, 0, 0, 1}, {15, 1, 1, 0, 3}};
    int good = 1;
    for (int i = 0; i < 6; i++) {
        int c[GRID_NDIMS];
        c[GRID_TP] = lines[i][1], c[GRID_DP] = lines[i][2], c[GRID_SP] = lines[i][3], c[GRID_PP] = lines[i][4];
        int r = grid_rank_of(&g, c);
        if (r != lines[i][0]) tap_diag("tp%d dp%d sp%d pp%d: rank %d, the example says %d", c[GRID_TP], c[GRID_DP],
                                       c[GRID_SP], c[GRID_PP], r, lines[i][0]);
        good &= r == lines[i][0];
    }
    tap_ok(good, "16-rank example: ranks 0, 1, 2, 3, 4 and 15 have the coordinates the comment lists");
    tap_ok(rank_rule_holds(&g), "16-rank example: grid_rank_of of all 16 coordinates is c0 + s0(c1 + s1(c2 + s2 c3)) "
                                "and hits each rank once");
    const struct {
        const char *name;
        unsigned span;
        int embed;
        const char *want;
    } cases[] = {
        {"tp", 1u << GRID_TP, 0, "{0,1} {2,3} {4,5} {6,7} {8,9} {10,11} {12,13} {14,15}"},
        {"dp", 1u << GRID_DP, 0, "{0,2} {1,3} {4,6} {5,7} {8,10} {9,11} {12,14} {13,15}"},
        {"pp", 1u << GRID_PP, 0, "{0,4,8,12} {1,5,9,13} {2,6,10,14} {3,7,11,15}"},
        {"sp", 1u << GRID_SP, 0, "{0} {1} {2} {3} {4} {5} {6} {7} {8} {9} {10} {11} {12} {13} {14} {15}"},
        {"replica (dp x sp)", (1u << GRID_DP) | (1u << GRID_SP), 0,
         "{0,2} {1,3} {4,6} {5,7} {8,10} {9,11} {12,14} {13,15}"},
        {"embed", 1u << GRID_PP, 1, "{0,12} {1,13} {2,14} {3,15}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = groups(&g, cases[i].span, cases[i].embed);
        tap_ok(strcmp(got, cases[i].want) == 0, "16-rank example: %s groups %s", cases[i].name, got);
    }
}

/* Other orders and sizes: the rule holds, the fastest dimension has stride 1, and one rank worked
 * out by hand per order. */
static void test_other_orders(void)
{
    const struct {
        int order[GRID_NDIMS];
        int tp, dp, sp, pp;
        int c[GRID_NDIMS]; /* by grid_dim_t: tp, dp, sp, pp */
        int rank;          /* worked out by hand */
    } cases[] = {
        /* pp-sp-dp-tp, 16 ranks: strides pp 1, sp 4, dp 4, tp 8 → 3 + 4·1 + 8·1 */
        {{GRID_PP, GRID_SP, GRID_DP, GRID_TP}, 2, 2, 1, 4, {1, 1, 0, 3}, 15},
        /* pp-tp-dp-sp, 16 ranks: strides pp 1, tp 4, dp 8, sp 16 → 2 + 4·1 */
        {{GRID_PP, GRID_TP, GRID_DP, GRID_SP}, 2, 2, 1, 4, {1, 0, 0, 2}, 6},
        /* dp-tp-pp-sp, 24 ranks (tp 2, dp 3, sp 2, pp 2): strides dp 1, tp 3, pp 6, sp 12 → 2 + 3 + 12 + 6 */
        {{GRID_DP, GRID_TP, GRID_PP, GRID_SP}, 2, 3, 2, 2, {1, 2, 1, 1}, 23},
        /* sp-pp-tp-dp, 24 ranks: strides sp 1, pp 2, tp 4, dp 8 → 1 + 4 + 16 */
        {{GRID_SP, GRID_PP, GRID_TP, GRID_DP}, 2, 3, 2, 2, {1, 2, 1, 0}, 21},
        /* tp-dp-sp-pp, 48 ranks (tp 4, dp 3, sp 1, pp 4): strides 1, 4, 12, 12 → 3 + 4·2 + 12·3 */
        {{GRID_TP, GRID_DP, GRID_SP, GRID_PP}, 4, 3, 1, 4, {3, 2, 0, 3}, 47},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const grid_t g = grid_by_hand(cases[i].tp, cases[i].dp, cases[i].sp, cases[i].pp, cases[i].order);
        const int *o = cases[i].order;
        int r = grid_rank_of(&g, cases[i].c);
        tap_ok(rank_rule_holds(&g) && g.stride[o[0]] == 1 && r == cases[i].rank,
               "order %s-%s-%s-%s, tp=%d dp=%d sp=%d pp=%d: mixed-radix rule over all %d ranks; tp%d dp%d sp%d pp%d "
               "is rank %d (want %d)", grid_dim_names[o[0]], grid_dim_names[o[1]], grid_dim_names[o[2]],
               grid_dim_names[o[3]], cases[i].tp, cases[i].dp, cases[i].sp, cases[i].pp, g.world, cases[i].c[0],
               cases[i].c[1], cases[i].c[2], cases[i].c[3], r, cases[i].rank);
    }
}

static int comm_size(MPI_Comm c)
{
    int n = -1;
    if (c != MPI_COMM_NULL) MPI_Comm_size(c, &n);
    return n;
}

/* grid_build on a 1-rank world: every order of an all-ones layout builds, with coordinates 0,
 * strides 1, every communicator the rank alone, and the one stage both ends of the embedding. */
static void test_build_one_rank(void)
{
    static const int orders[][GRID_NDIMS] = {{GRID_TP, GRID_DP, GRID_SP, GRID_PP},
                                             {GRID_PP, GRID_SP, GRID_DP, GRID_TP},
                                             {GRID_DP, GRID_TP, GRID_PP, GRID_SP},
                                             {GRID_SP, GRID_PP, GRID_TP, GRID_DP}};
    for (size_t i = 0; i < sizeof orders / sizeof orders[0]; i++) {
        grid_cfg_t cfg = {.size = {1, 1, 1, 1}};
        memcpy(cfg.order, orders[i], sizeof cfg.order);
        const char *name = order_name(cfg.order);
        grid_t g;
        capture_begin();
        int rc = grid_build(&g, &cfg, MPI_COMM_WORLD);
        capture_end();
        show_errtext();
        if (rc != MP_OK) {
            tap_ok(0, "grid_build on 1 rank, order %s", name);
            continue;
        }
        int good = g.world == 1 && g.rank == 0 && g.replica_rank == 0 && g.replica_size == 1 &&
                   comm_size(g.replica) == 1 && comm_size(g.embed) == 1 && g.node_size == 1 && g.node_rank == 0 &&
                   memcmp(g.order, cfg.order, sizeof g.order) == 0;
        const int zero[GRID_NDIMS] = {0};
        for (int k = 0; k < GRID_NDIMS; k++)
            good &= g.size[k] == 1 && g.coord[k] == 0 && g.stride[k] == 1 && comm_size(g.comm[k]) == 1;
        good &= grid_rank_of(&g, zero) == 0;
        tap_ok(good, "grid_build on 1 rank, order %s: coordinates 0, strides 1, every group (replica, embed "
                     "included) this rank alone", name);
        grid_free(&g);
    }
}

/* The deck's parallel section as the grid's configuration: sizes by dimension, order as written. */
static void test_cfg_from_deck(void)
{
    deck_t d;
    deck_defaults(&d);
    grid_cfg_t c = grid_cfg_from_deck(&d);
    const int def[GRID_NDIMS] = {GRID_TP, GRID_DP, GRID_SP, GRID_PP};
    tap_ok(memcmp(c.order, def, sizeof def) == 0 && c.size[GRID_TP] == 1 && c.size[GRID_DP] == 1 &&
               c.size[GRID_SP] == 1 && c.size[GRID_PP] == 1,
           "grid_cfg_from_deck of the defaults: order tp-dp-sp-pp (got %s), all sizes 1", order_name(c.order));
    capture_begin();
    int rc = deck_set(&d, "parallel.order=pp-sp-dp-tp") | deck_set(&d, "parallel.dp=3") |
             deck_set(&d, "parallel.tp=2") | deck_set(&d, "parallel.pp=4") | deck_set(&d, "parallel.sp=5");
    capture_end();
    show_errtext();
    c = grid_cfg_from_deck(&d);
    const int want[GRID_NDIMS] = {GRID_PP, GRID_SP, GRID_DP, GRID_TP};
    tap_ok(rc == MP_OK && memcmp(c.order, want, sizeof want) == 0 && c.size[GRID_TP] == 2 && c.size[GRID_DP] == 3 &&
               c.size[GRID_SP] == 5 && c.size[GRID_PP] == 4,
           "grid_cfg_from_deck after --set parallel.order=pp-sp-dp-tp dp=3 tp=2 pp=4 sp=5: order %s, sizes tp %d "
           "dp %d sp %d pp %d", order_name(c.order), c.size[GRID_TP], c.size[GRID_DP], c.size[GRID_SP],
           c.size[GRID_PP]);
}

/* Refusals: MP_ERR, the message users see, and the output left alone. */
static void refused(const char *label, int tp, int dp, int sp, int pp, const int order[GRID_NDIMS],
                    const char *want1, const char *want2)
{
    grid_cfg_t cfg = {.size = {[GRID_TP] = tp, [GRID_DP] = dp, [GRID_SP] = sp, [GRID_PP] = pp}};
    memcpy(cfg.order, order, sizeof cfg.order);
    grid_t g, before;
    memset(&g, 0x5a, sizeof g);
    memcpy(&before, &g, sizeof g);
    capture_begin();
    int rc = grid_build(&g, &cfg, MPI_COMM_WORLD);
    capture_end();
    show_errtext();
    tap_ok(rc == MP_ERR && strstr(errtext, want1) && strstr(errtext, want2) && strstr(errtext, "[rank 0]") &&
               memcmp(&g, &before, sizeof g) == 0,
           "grid_build refuses %s on 1 rank, naming '%s' and '%s'; the grid is left untouched", label, want1, want2);
    if (rc == MP_OK) grid_free(&g);
}

static void test_refusals(void)
{
    const int *def = ORDER_DEFAULT;
    refused("dp=2 (product 2)", 1, 2, 1, 1, def, "= 2, but the job has 1 ranks", "mpiexec -n 2");
    refused("tp=2 pp=2 sp=3 (product 12)", 2, 1, 3, 2, def, "dp × tp × pp × sp = 1 × 2 × 2 × 3 = 12", "mpiexec -n 12");
    static const int twice[GRID_NDIMS] = {GRID_TP, GRID_TP, GRID_SP, GRID_PP};
    static const int beyond[GRID_NDIMS] = {GRID_TP, GRID_DP, GRID_SP, GRID_NDIMS};
    static const int negative[GRID_NDIMS] = {-1, GRID_DP, GRID_SP, GRID_PP};
    refused("order tp-tp-sp-pp (tp twice, pp missing)", 1, 1, 1, 1, twice, "not a permutation", "tp, dp, sp, pp");
    refused("an order naming dimension 4", 1, 1, 1, 1, beyond, "not a permutation", "tp, dp, sp, pp");
    refused("an order naming dimension -1", 1, 1, 1, 1, negative, "not a permutation", "tp, dp, sp, pp");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    mpi_check_init(0);
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    test_worked_example();
    test_other_orders();
    test_build_one_rank();
    test_cfg_from_deck();
    test_refusals();
    rmdir(tmpdir);
    MPI_Finalize();
    return tap_done();
}
