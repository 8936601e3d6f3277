/* The 4D rank grid (ARCHITECTURE.md §2): world = dp × sp × pp × tp, split into communicators.
 *
 * A rank's coordinates are the digits of its world rank in a mixed-radix number whose digits are
 * the four dimensions in `parallel.order`, fastest-varying first (default tp-dp-sp-pp: TP peers
 * are neighbours, so they share a node; pipeline stages are furthest apart). With digit sizes
 * s0..s3 in that order and strides 1, s0, s0·s1, s0·s1·s2:
 *     rank = c0 + s0·(c1 + s1·(c2 + s2·c3)).
 *
 * Worked example, 16 ranks, tp=2 dp=2 sp=1 pp=4, order tp-dp-sp-pp (strides 1, 2, 4, 4):
 *     rank  0: tp0 dp0 sp0 pp0     rank  1: tp1 dp0 sp0 pp0     rank  2: tp0 dp1 sp0 pp0
 *     rank  3: tp1 dp1 sp0 pp0     rank  4: tp0 dp0 sp0 pp1     ...     rank 15: tp1 dp1 sp0 pp3
 *   tp groups {0,1} {2,3} {4,5} ...; dp groups {0,2} {1,3} {4,6} ...; pp groups {0,4,8,12}
 *   {1,5,9,13} {2,6,10,14} {3,7,11,15}; replica (dp × sp, same tp and pp) = the dp groups here;
 *   embed (first and last stage, same tp/dp/sp) {0,12} {1,13} {2,14} {3,15}.
 * Each group is ordered by the coordinate it spans (rank within a dp group = the dp coordinate). */
#ifndef MP_GRID_H
#define MP_GRID_H

#include <mpi.h>
#include <stdio.h>

#include "deck.h"
#include "wait.h"

typedef enum { GRID_TP, GRID_DP, GRID_SP, GRID_PP, GRID_NDIMS } grid_dim_t;

typedef struct {
    int world, rank;
    int size[GRID_NDIMS];        /* by grid_dim_t */
    int coord[GRID_NDIMS];
    int order[GRID_NDIMS];       /* dimensions, fastest-varying first */
    int stride[GRID_NDIMS];      /* by grid_dim_t */
    MPI_Comm comm[GRID_NDIMS];   /* ranks that differ only in that coordinate */
    MPI_Comm replica;            /* dp × sp: same tp and pp coordinates (gradient all-reduce) */
    int replica_rank, replica_size;
    MPI_Comm embed;              /* first and last stage of one pipeline; MPI_COMM_NULL elsewhere */
    MPI_Comm node;               /* ranks on this node (MPI_COMM_TYPE_SHARED) */
    int node_rank, node_size;
    int any_node_oversubscribed; /* some node holds more ranks than it has cores: the same on every rank */
    char host[MPI_MAX_PROCESSOR_NAME];
} grid_t;

extern const char *const grid_dim_names[GRID_NDIMS];

/* What the grid is built from: parallel.dp, tp, sp, pp and parallel.order. */
typedef struct {
    int size[GRID_NDIMS];        /* by grid_dim_t */
    int order[GRID_NDIMS];       /* dimensions (grid_dim_t), fastest-varying first */
} grid_cfg_t;

/* The deck's parallel section as a grid_cfg_t. */
grid_cfg_t grid_cfg_from_deck(const deck_t *d);

/* Builds the grid of world from cfg. Refuses (MP_ERR, every rank the same message) a layout whose
 * product is not the world size or an order that is not a permutation. */
int grid_build(grid_t *g_p, const grid_cfg_t *cfg, MPI_Comm world);
void grid_free(grid_t *g);

/* World rank of the given coordinates (by grid_dim_t). */
int grid_rank_of(const grid_t *g, const int coord[GRID_NDIMS]);

/* Rank 0 prints a table rank -> (dp, tp, pp, sp), host and what the rank holds (`holds`, this
 * rank's own description, at most GRID_HOLDS_MAX-1 characters) to out and to also (either may be
 * NULL). Collective over MPI_COMM_WORLD. */
#define GRID_HOLDS_MAX 160
void grid_print_layout(const grid_t *g, const wait_cfg_t *w, FILE *out, FILE *also, const char *holds);

#endif
