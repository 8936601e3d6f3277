#include "grid.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "wait.h"

const char *const grid_dim_names[GRID_NDIMS] = {"tp", "dp", "sp", "pp"};

grid_cfg_t grid_cfg_from_deck(const deck_t *d)
{
    static const grid_dim_t dim_of[DECK_DIMS] = {
        [DECK_DIM_TP] = GRID_TP, [DECK_DIM_DP] = GRID_DP, [DECK_DIM_SP] = GRID_SP, [DECK_DIM_PP] = GRID_PP};
    grid_cfg_t c = {.size = {[GRID_TP] = d->parallel.tp, [GRID_DP] = d->parallel.dp, [GRID_SP] = d->parallel.sp,
                             [GRID_PP] = d->parallel.pp}};
    for (int k = 0; k < GRID_NDIMS; k++) c.order[k] = dim_of[d->parallel.order_dims[k]];
    return c;
}

/* Whether order[] names each dimension once. */
static int grid_order_ok(const int order[GRID_NDIMS])
{
    unsigned seen = 0;
    for (int k = 0; k < GRID_NDIMS; k++) {
        if (order[k] < 0 || order[k] >= GRID_NDIMS || (seen & (1u << order[k]))) return 0;
        seen |= 1u << order[k];
    }
    return 1;
}

int grid_rank_of(const grid_t *g, const int coord[GRID_NDIMS])
{
    int r = 0;
    for (int d = 0; d < GRID_NDIMS; d++) r += coord[d] * g->stride[d];
    return r;
}

/* The communicator of ranks that agree on every coordinate outside `span` (a bit set of
 * dimensions); ranked by world rank, which orders them by the spanned coordinates. */
static MPI_Comm grid_split(const grid_t *g, MPI_Comm world, unsigned span)
{
    int color = g->rank;
    for (int d = 0; d < GRID_NDIMS; d++)
        if (span & (1u << d)) color -= g->coord[d] * g->stride[d];
    MPI_Comm c;
    MPI_CHECK(MPI_Comm_split(world, color, g->rank, &c));
    return c;
}

static void grid_comms(grid_t *g, MPI_Comm world)
{
    for (int d = 0; d < GRID_NDIMS; d++) g->comm[d] = grid_split(g, world, 1u << d);
    g->replica = grid_split(g, world, (1u << GRID_DP) | (1u << GRID_SP));
    MPI_CHECK(MPI_Comm_rank(g->replica, &g->replica_rank));
    MPI_CHECK(MPI_Comm_size(g->replica, &g->replica_size));
    /* embed: the first and the last stage of each pipeline (the tied embedding's two halves) */
    const int pp = g->size[GRID_PP], s = g->coord[GRID_PP];
    int on = s == 0 || s == pp - 1;
    int color = on ? g->rank - s * g->stride[GRID_PP] : MPI_UNDEFINED;
    MPI_CHECK(MPI_Comm_split(world, color, g->rank, &g->embed));
    MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &g->node));
    MPI_CHECK(MPI_Comm_rank(g->node, &g->node_rank));
    MPI_CHECK(MPI_Comm_size(g->node, &g->node_size));
    /* a choice made from it that every rank must make alike (checkpoint.transfer = auto: HDF5's
     * collective and independent writes do not mix in one file) is made from this: nodes can
     * differ (4 ranks split 3 + 1 over two 2-core nodes), and a rank that chose from its own node
     * alone waited in a collective its peers never entered */
    int over = wait_node_oversubscribed(g->node_size);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &over, 1, MPI_INT, MPI_MAX, world));
    g->any_node_oversubscribed = over;
}

int grid_build(grid_t *g_p, const grid_cfg_t *cfg, MPI_Comm world)
{
    grid_t g;
    memset(&g, 0, sizeof g);
    MPI_CHECK(MPI_Comm_rank(world, &g.rank));
    MPI_CHECK(MPI_Comm_size(world, &g.world));
    memcpy(g.size, cfg->size, sizeof g.size);
    memcpy(g.order, cfg->order, sizeof g.order);
    if (!grid_order_ok(g.order)) return MP_FAIL("the grid's order is not a permutation of tp, dp, sp, pp");
    long prod = (long)g.size[0] * g.size[1] * g.size[2] * g.size[3];
    if (prod != g.world)
        return MP_FAIL("parallel.dp × tp × pp × sp = %d × %d × %d × %d = %ld, but the job has %d ranks "
                       "(launch with mpiexec -n %ld, or change the layout)",
                       g.size[GRID_DP], g.size[GRID_TP], g.size[GRID_PP], g.size[GRID_SP], prod, g.world, prod);
    int stride = 1;
    for (int k = 0; k < GRID_NDIMS; k++) {
        g.stride[g.order[k]] = stride;
        stride *= g.size[g.order[k]];
    }
    for (int k = 0; k < GRID_NDIMS; k++) g.coord[k] = (g.rank / g.stride[k]) % g.size[k];
    int len = 0;
    MPI_CHECK(MPI_Get_processor_name(g.host, &len));
    grid_comms(&g, world);
    *g_p = g;
    return MP_OK;
}

void grid_free(grid_t *g)
{
    for (int d = 0; d < GRID_NDIMS; d++)
        if (g->comm[d] != MPI_COMM_NULL) MPI_Comm_free(&g->comm[d]);
    if (g->replica != MPI_COMM_NULL) MPI_Comm_free(&g->replica);
    if (g->embed != MPI_COMM_NULL) MPI_Comm_free(&g->embed);
    if (g->node != MPI_COMM_NULL) MPI_Comm_free(&g->node);
}

/* What rank 0 gathers from each rank for the layout table. */
typedef struct {
    int coord[GRID_NDIMS];
    int node_rank;
    char host[MPI_MAX_PROCESSOR_NAME];
    char holds[GRID_HOLDS_MAX];
} grid_row_t;

static void grid_print_table(const grid_t *g, const grid_row_t *rows, FILE *out)
{
    fprintf(out, "layout: dp=%d tp=%d pp=%d sp=%d order %s-%s-%s-%s (%d ranks)\n", g->size[GRID_DP],
            g->size[GRID_TP], g->size[GRID_PP], g->size[GRID_SP], grid_dim_names[g->order[0]],
            grid_dim_names[g->order[1]], grid_dim_names[g->order[2]], grid_dim_names[g->order[3]], g->world);
    fprintf(out, "  rank   dp   tp   pp   sp  host (local rank)  holds\n");
    for (int r = 0; r < g->world; r++) {
        const int *c = rows[r].coord;
        fprintf(out, "  %4d %4d %4d %4d %4d  %s (%d)  %s\n", r, c[GRID_DP], c[GRID_TP], c[GRID_PP], c[GRID_SP],
                rows[r].host, rows[r].node_rank, rows[r].holds);
    }
    fflush(out);
}

void grid_print_layout(const grid_t *g, const wait_cfg_t *w, FILE *out, FILE *also, const char *holds)
{
    grid_row_t mine;
    memset(&mine, 0, sizeof mine);
    memcpy(mine.coord, g->coord, sizeof mine.coord);
    mine.node_rank = g->node_rank;
    memcpy(mine.host, g->host, sizeof mine.host);
    snprintf(mine.holds, sizeof mine.holds, "%s", holds);
    grid_row_t *all = g->rank == 0 ? MP_CALLOC((size_t)g->world, sizeof *all) : NULL;
    /* under parallel.timeout like every wait: a rank lost as the start-up ends (the campaign killed one
     * there) left its peers in a blocking gather, outside every watchdog phase, for good */
    MPI_Request req;
    MPI_CHECK(MPI_Igather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD, &req));
    wait_all_over(w, 1, &req, MPI_COMM_WORLD, "the layout table's gather");
    if (g->rank != 0 || !all) return;
    if (out) grid_print_table(g, all, out);
    if (also) grid_print_table(g, all, also);
    free(all);
}
