/* Ranks that share a GPU (src/device/gpu_share.h) and the host-staged collectives they fall back to
 * (src/device/backend_staged.h), on one process with no GPU.
 *
 * gpu_share_find and gpu_share_boundary on GPU names made by hand: which pairs of ranks share a GPU
 * (same host, boot id and PCI bus id: what NCCL refuses) and which do not (same bus id on another
 * host or another boot), the first pair reported, a 4096-rank world; which pipeline boundary joins
 * two ranks on one GPU, with and without the interleaved schedule's wrap. gpu_share_gather over
 * MPI_COMM_SELF. What the run decides from them (src/runtime/run_gpus.h) on layouts made by hand:
 * parallel.p2p = auto picks MPI when a pipeline boundary's ranks share a GPU and NCCL otherwise, an
 * explicit nccl is refused with the two ranks and the GPU named, memory.device_limit = 0 is refused
 * when any two ranks share a GPU. Then the collectives and buckets on the emu backend over MPI_COMM_SELF (one rank:
 * every sum is its input). Each result lands in device memory through the copies, a bucket's sum
 * comes back from its host copy at the wait (the device buffer is cleared between start and wait to
 * see it), buckets of a later step grow their host copies, and be_destroy frees them. Two ranks,
 * bitwise against the cpu backend: validation/test_device.sh. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "backend.h"
#include "check.h"
#include "gpu_share.h"
#include "mpi_check.h"
#include "run_gpus.h"
#include "tap.h"

static char tmpdir[] = "/tmp/test_staged.XXXXXX";
#include "capture.h"

/* Rank i on host "node<host[i]>" (boot id "b<boot>"), GPU bus "0000:<bus[i]>:00.0". */
static void ids_make(gpu_id_t *ids, int n, const int *host, const int *bus, int boot)
{
    memset(ids, 0, (size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) {
        snprintf(ids[i].host, sizeof ids[i].host, "node%d", host[i]);
        snprintf(ids[i].boot, sizeof ids[i].boot, "b%d", boot);
        snprintf(ids[i].bus, sizeof ids[i].bus, "0000:%02x:00.0", bus[i]);
    }
}

/* gpu_share_find on n ranks: want_a < 0 means no pair. */
static void find_case(const char *what, int n, const int *host, const int *bus, int want_a, int want_b)
{
    gpu_id_t ids[16];
    ids_make(ids, n, host, bus, 1);
    int a = -7, b = -7;
    const int got = gpu_share_find(ids, n, &a, &b);
    if (want_a < 0)
        tap_ok(got == 0 && a == -7 && b == -7, "gpu_share_find: %s: no two ranks share a GPU (got %d)", what, got);
    else
        tap_ok(got == 1 && a == want_a && b == want_b, "gpu_share_find: %s: ranks %d and %d (got %d: %d, %d)", what,
               want_a, want_b, got, a, b);
}

static void test_find(void)
{
    find_case("no ranks", 0, NULL, NULL, -1, -1);
    find_case("one rank", 1, (int[]){0}, (int[]){0}, -1, -1);
    find_case("4 ranks, 4 GPUs of one host", 4, (int[]){0, 0, 0, 0}, (int[]){1, 2, 3, 4}, -1, -1);
    find_case("the same bus id on 4 hosts", 4, (int[]){0, 1, 2, 3}, (int[]){1, 1, 1, 1}, -1, -1);
    find_case("two ranks on one GPU (the lent machine, pp = 2)", 2, (int[]){0, 0}, (int[]){1, 1}, 0, 1);
    find_case("ranks 1 and 3 of 4", 4, (int[]){0, 0, 0, 0}, (int[]){1, 2, 3, 2}, 1, 3);
    find_case("pairs {2,5} and {0,4}: the least first rank", 6, (int[]){0, 0, 0, 0, 0, 0}, (int[]){7, 1, 3, 2, 7, 3},
              0, 4);
    find_case("ranks 1, 2, 3 on one GPU and {0,5} on another host's", 6, (int[]){1, 0, 0, 0, 2, 1},
              (int[]){1, 1, 1, 1, 0, 1}, 0, 5);
    find_case("8 ranks on a 2-GPU node (node rank mod 2)", 8, (int[]){0, 0, 0, 0, 0, 0, 0, 0},
              (int[]){0, 1, 0, 1, 0, 1, 0, 1}, 0, 2);
    /* the same host name and bus id after a reboot (or in another container host named alike) */
    gpu_id_t ids[2];
    ids_make(ids, 2, (int[]){0, 0}, (int[]){1, 1}, 1);
    snprintf(ids[1].boot, sizeof ids[1].boot, "b2");
    int a = -7, b = -7;
    tap_ok(gpu_share_find(ids, 2, &a, &b) == 0 && !gpu_share_same(&ids[0], &ids[1]),
           "gpu_share_find: the same host name and bus id with different boot ids are two GPUs (as NCCL counts)");
    /* a world: 4096 ranks, 8 GPUs on each of 512 hosts, all distinct; then the last on rank 7's */
    enum { W = 4096 };
    gpu_id_t *w = calloc(W, sizeof *w);
    for (int i = 0; i < W; i++) {
        snprintf(w[i].host, sizeof w[i].host, "nid%05d", i / 8);
        snprintf(w[i].boot, sizeof w[i].boot, "boot-%d", i / 8);
        snprintf(w[i].bus, sizeof w[i].bus, "0000:%02x:00.0", 0x10 * (i % 8));
    }
    a = b = -7;
    const int none = gpu_share_find(w, W, &a, &b);
    w[W - 1] = w[7];
    const int one = gpu_share_find(w, W, &a, &b);
    tap_ok(none == 0 && one == 1 && a == 7 && b == W - 1,
           "gpu_share_find: 4096 ranks on 512 hosts: none shared; then rank 4095 on rank 7's GPU (got %d, %d: %d, %d)",
           none, one, a, b);
    free(w);
}

/* gpu_share_boundary: ids of a world, the stages' ranks in it. */
static void test_boundary(void)
{
    gpu_id_t ids[8];
    /* pp = 2 on one GPU: world ranks 0 and 1 */
    ids_make(ids, 2, (int[]){0, 0}, (int[]){1, 1}, 1);
    tap_ok(gpu_share_boundary(ids, (int[]){0, 1}, 2, 0) == 0, "gpu_share_boundary: pp = 2, both stages on one GPU: "
                                                               "boundary 0");
    /* a pipeline over 8 ranks (stages on world ranks 0, 2, 4, 6) on a 2-GPU node: stages 0 and 1 are
     * ranks 0 and 2, both on GPU 0 */
    ids_make(ids, 8, (int[]){0, 0, 0, 0, 0, 0, 0, 0}, (int[]){0, 1, 0, 1, 0, 1, 0, 1}, 1);
    tap_ok(gpu_share_boundary(ids, (int[]){0, 2, 4, 6}, 4, 0) == 0,
           "gpu_share_boundary: stages on ranks 0,2,4,6 of a 2-GPU node: boundary 0");
    /* neighbours on distinct GPUs, stages 0 and 2 on one: not a boundary */
    ids_make(ids, 4, (int[]){0, 0, 0, 0}, (int[]){0, 1, 0, 1}, 1);
    tap_ok(gpu_share_boundary(ids, (int[]){0, 1, 2, 3}, 4, 0) == -1,
           "gpu_share_boundary: stages 0 and 2 share a GPU, no neighbours do: none");
    ids_make(ids, 4, (int[]){0, 0, 0, 0}, (int[]){0, 1, 1, 2}, 1);
    tap_ok(gpu_share_boundary(ids, (int[]){0, 1, 2, 3}, 4, 0) == 1, "gpu_share_boundary: stages 1 and 2 share: "
                                                                      "boundary 1");
    /* the last stage and the first: a boundary only under the interleaved schedule */
    ids_make(ids, 4, (int[]){0, 0, 0, 0}, (int[]){0, 1, 2, 0}, 1);
    const int plain = gpu_share_boundary(ids, (int[]){0, 1, 2, 3}, 4, 0);
    const int wrap = gpu_share_boundary(ids, (int[]){0, 1, 2, 3}, 4, 1);
    tap_ok(plain == -1 && wrap == 3, "gpu_share_boundary: last and first stage share: none without the wrap, "
                                     "boundary 3 with it (got %d, %d)", plain, wrap);
    tap_ok(gpu_share_boundary(ids, (int[]){0}, 1, 1) == -1, "gpu_share_boundary: one stage has no boundary");
    /* the same bus id on the neighbour's host is another GPU */
    ids_make(ids, 2, (int[]){0, 1}, (int[]){1, 1}, 1);
    tap_ok(gpu_share_boundary(ids, (int[]){0, 1}, 2, 1) == -1, "gpu_share_boundary: one bus id on two hosts: none");
}

static void test_gather(void)
{
    wait_cfg_t wait = {.yield = 0, .timeout = 10.0};
    gpu_id_t me;
    ids_make(&me, 1, (int[]){3}, (int[]){0x41}, 9);
    gpu_id_t *all = gpu_share_gather(&me, MPI_COMM_SELF, &wait);
    tap_ok(all && gpu_share_same(&all[0], &me) && strcmp(all[0].bus, "0000:41:00.0") == 0,
           "gpu_share_gather over MPI_COMM_SELF: this rank's name back (%s)", all ? all[0].bus : "NULL");
    free(all);
}

/* What run_gpus_decide reads, the parts of a run context it takes (no whole run_t): the deck's
 * defaults with p2p, the device limit and the schedule given, and a grid of the given sizes in the
 * default order (tp fastest, then dp, sp, pp); the stage part receives its notes. */
typedef struct {
    deck_t deck;
    run_layout_t lay;
    run_stage_t st;
} hand_t;

static hand_t *run_by_hand(int tp, int dp, int pp, deck_p2p_t p2p, uint64_t limit, int interleaved)
{
    hand_t *r = calloc(1, sizeof *r);
    deck_defaults(&r->deck);
    r->deck.parallel.tp = tp, r->deck.parallel.dp = dp, r->deck.parallel.pp = pp;
    r->deck.parallel.p2p = p2p;
    r->deck.memory.device_limit = limit;
    if (interleaved) r->deck.parallel.schedule_kind = SCHED_INTERLEAVED, r->deck.parallel.virtual_stages = 2;
    const int size[GRID_NDIMS] = {[GRID_TP] = tp, [GRID_DP] = dp, [GRID_SP] = 1, [GRID_PP] = pp};
    const int order[GRID_NDIMS] = {GRID_TP, GRID_DP, GRID_SP, GRID_PP};
    int stride = 1;
    for (int k = 0; k < GRID_NDIMS; k++) {
        r->lay.grid.size[order[k]] = size[order[k]], r->lay.grid.order[k] = order[k];
        r->lay.grid.stride[order[k]] = stride;
        stride *= size[order[k]];
    }
    r->lay.grid.world = r->lay.world = stride;
    return r;
}

/* run_gpus_decide on ranks whose GPUs are bus[rank] of one host; its status, stderr in errtext. */
static int decide(hand_t *r, const int *bus)
{
    gpu_id_t ids[16];
    int host[16] = {0};
    ids_make(ids, r->lay.world, host, bus, 1);
    capture_begin();
    const int rc = run_gpus_decide(&r->deck, &r->lay, &r->st, ids);
    capture_end();
    show_errtext();
    return rc;
}

static void test_run_decide(void)
{
    const uint64_t G30 = (uint64_t)30 << 30;
    /* the lent machine: pp = 2, both ranks on its one GPU */
    hand_t *r = run_by_hand(1, 1, 2, DECK_P2P_AUTO, G30, 0);
    int rc = decide(r, (int[]){0x41, 0x41});
    tap_ok(rc == MP_OK && !r->st.p2p_nccl && strstr(r->st.p2p_note, "parallel.p2p=auto: pipeline messages go through MPI") &&
               strstr(r->st.p2p_note, "ranks 0 and 1 (pipeline stages 0 and 1) share GPU 0000:41:00.0 on node0") &&
               strstr(r->st.gpu_note, "ranks 0 and 1 share GPU 0000:41:00.0"),
           "run_gpus: pp=2 on one GPU, p2p=auto: MPI messages, said once with the ranks and the GPU");
    free(r);
    r = run_by_hand(1, 1, 2, DECK_P2P_NCCL, G30, 0);
    rc = decide(r, (int[]){0x41, 0x41});
    tap_ok(rc == MP_ERR && strstr(errtext, "parallel.p2p=nccl: ranks 0 and 1 (pipeline stages 0 and 1) share GPU "
                                           "0000:41:00.0 on node0") && strstr(errtext, "set parallel.p2p=mpi"),
           "run_gpus: pp=2 on one GPU, p2p=nccl: refused, naming the ranks, stages and GPU");
    free(r);
    r = run_by_hand(1, 1, 2, DECK_P2P_MPI, 0, 0);
    rc = decide(r, (int[]){0x41, 0x41});
    tap_ok(rc == MP_ERR && strstr(errtext, "ranks 0 and 1 share GPU 0000:41:00.0") &&
               strstr(errtext, "set memory.device_limit"),
           "run_gpus: two ranks on one GPU with memory.device_limit=0: refused (the first arena would take it all)");
    free(r);
    r = run_by_hand(1, 1, 2, DECK_P2P_MPI, G30, 0);
    rc = decide(r, (int[]){0x41, 0x41});
    tap_ok(rc == MP_OK && !r->st.p2p_nccl && !r->st.p2p_note[0] && r->st.gpu_note[0],
           "run_gpus: p2p=mpi with a device limit: MPI messages, no p2p note, the shared GPU noted");
    free(r);
    /* tp2 x pp2 on a 2-GPU node (node rank mod 2): pipelines {0,2} and {1,3}, each on one GPU */
    r = run_by_hand(2, 1, 2, DECK_P2P_AUTO, G30, 0);
    rc = decide(r, (int[]){0, 1, 0, 1});
    tap_ok(rc == MP_OK && !r->st.p2p_nccl && strstr(r->st.p2p_note, "ranks 0 and 2 (pipeline stages 0 and 1)"),
           "run_gpus: tp2 x pp2 on 2 GPUs: stages 0 and 1 of a pipeline share one: MPI (%s)", r->st.p2p_note);
    free(r);
    /* dp2 x pp2 on 4 GPUs: nothing shared, no limit needed */
    r = run_by_hand(1, 2, 2, DECK_P2P_AUTO, 0, 0);
    rc = decide(r, (int[]){0, 1, 2, 3});
    tap_ok(rc == MP_OK && r->st.p2p_nccl && !r->st.p2p_note[0] && !r->st.gpu_note[0],
           "run_gpus: dp2 x pp2 on 4 GPUs: NCCL messages, nothing noted");
    free(r);
    /* pp4 on 2 GPUs: stages 0 and 2 share one, no neighbours do */
    r = run_by_hand(1, 1, 4, DECK_P2P_NCCL, G30, 0);
    rc = decide(r, (int[]){0, 1, 0, 1});
    tap_ok(rc == MP_OK && r->st.p2p_nccl && !r->st.p2p_note[0] && strstr(r->st.gpu_note, "ranks 0 and 2"),
           "run_gpus: pp4 on 2 GPUs, neighbours on distinct GPUs: p2p=nccl allowed; the shared GPU noted");
    free(r);
    /* pp3 on 2 GPUs: the last stage and the first share one, a boundary under the interleaved schedule */
    r = run_by_hand(1, 1, 3, DECK_P2P_AUTO, G30, 0);
    rc = decide(r, (int[]){0, 1, 0});
    const int plain = rc == MP_OK && r->st.p2p_nccl;
    free(r);
    r = run_by_hand(1, 1, 3, DECK_P2P_AUTO, G30, 1);
    rc = decide(r, (int[]){0, 1, 0});
    tap_ok(plain && rc == MP_OK && !r->st.p2p_nccl && strstr(r->st.p2p_note, "ranks 2 and 0 (pipeline stages 2 and 0)"),
           "run_gpus: pp3 on 2 GPUs, first and last stage on one: NCCL for 1f1b, MPI for interleaved (%s)",
           r->st.p2p_note);
    free(r);
}

/* Deterministic values that are not sums of themselves. */
static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) x[i] = scale * ((float)(i % 97) - 48.25f) + 1e-3f * (float)i;
}

/* dev (n floats) read back through the backend equals want, bitwise. */
static int dev_equals(backend_t *be, const float *dev, const float *want, size_t n)
{
    float *h = malloc(n * sizeof(float));
    be_to_host(be, h, dev, n * sizeof(float));
    const int same = memcmp(h, want, n * sizeof(float)) == 0;
    free(h);
    return same;
}

static void test_emu_blocking(backend_t *emu, arena_t *arena)
{
    const size_t n = 1000;
    float *dev = arena_floats(arena, n, "buffer"), *dev2 = arena_floats(arena, n, "second buffer");
    float *want = malloc(n * sizeof(float));
    fill(want, n, 0.37f);
    be_to_device(emu, dev, want, n * sizeof(float));
    be_allreduce(emu, dev, n, MPI_SUM, MPI_COMM_SELF, "a test all-reduce");
    int ok_sum = dev_equals(emu, dev, want, n);
    be_allreduce(emu, dev, n, MPI_MAX, MPI_COMM_SELF, "a test all-reduce");
    tap_ok(ok_sum && dev_equals(emu, dev, want, n), "emu, host-staged: all-reduce SUM and MAX over one rank leave the "
                                                     "device buffer bitwise as it was");
    be_zero(emu, dev2, n * sizeof(float));
    be_reduce_scatter(emu, dev, dev2, n, MPI_COMM_SELF, "a test reduce-scatter");
    tap_ok(dev_equals(emu, dev2, want, n), "emu, host-staged: reduce-scatter over one rank: recv (zeroed before) "
                                           "holds send");
    be_allgather(emu, dev, n, MPI_COMM_SELF, "a test all-gather");
    tap_ok(dev_equals(emu, dev, want, n), "emu, host-staged: all-gather over one rank leaves the slice as it was");
    be_allreduce(emu, dev, 0, MPI_SUM, MPI_COMM_SELF, "an empty all-reduce");
    tap_ok(emu->staged != NULL && dev_equals(emu, dev, want, n), "emu, host-staged: an empty all-reduce is nothing; "
                                                                 "the host copy is kept for the next call");
    free(want);
    arena_free(arena, dev2, n * sizeof(float));
    arena_free(arena, dev, n * sizeof(float));
}

/* One step's buckets over [0, total): started, the device buffer cleared, progressed, waited. */
static int emu_step(backend_t *emu, float *dev, const float *want, size_t total, const size_t *cut, int ncut)
{
    be_to_device(emu, dev, want, total * sizeof(float));
    for (int i = 0; i < ncut; i++) {
        be_bucket_start(emu, dev + cut[i], cut[i + 1] - cut[i], MPI_COMM_SELF);
        be_buckets_progress(emu);
    }
    const int started = emu->nbuckets;
    be_zero(emu, dev, total * sizeof(float)); /* only the wait's copy back can restore it */
    be_buckets_wait(emu, "test buckets");
    return started == ncut && emu->nbuckets == 0 && dev_equals(emu, dev, want, total);
}

static void test_emu_buckets(backend_t *emu, arena_t *arena)
{
    const size_t total = 1000;
    float *dev = arena_floats(arena, total, "gradients"), *want = malloc(total * sizeof(float));
    fill(want, total, -1.5f);
    tap_ok(be_buckets_reserve(emu, 4, 0) == MP_OK, "emu: room for 4 buckets");
    const size_t small[] = {0, 100, 350, 950, 1000}, large[] = {0, 700, 1000};
    tap_ok(emu_step(emu, dev, want, total, small, 4), "emu, host-staged: 4 buckets started, progressed and "
                                                       "waited over one rank: each sum copied back at the wait");
    tap_ok(emu_step(emu, dev, want, total, large, 2), "emu, host-staged: a later step's larger buckets grow their "
                                                       "host copies: bitwise again");
    free(want);
    arena_free(arena, dev, total * sizeof(float));
}

static void test_emu(void)
{
    wait_cfg_t wait = {.yield = 0, .timeout = 10.0};
    arena_t arena;
    arena_init(&arena, 0);
    backend_t emu;
    if (!tap_ok(be_init(&emu, BE_EMU, &arena, (size_t)16 << 20, 0, 0, &wait) == MP_OK, "emu backend")) return;
    test_emu_blocking(&emu, &arena);
    test_emu_buckets(&emu, &arena);
    be_destroy(&emu);
    tap_ok(emu.staged == NULL, "be_destroy frees the host copies");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    mpi_check_init(0);
    if (!mkdtemp(tmpdir)) return 1;
    test_find();
    test_boundary();
    test_gather();
    test_run_decide();
    test_emu();
    MPI_Finalize();
    rmdir(tmpdir);
    return tap_done();
}
