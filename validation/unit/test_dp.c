/* Data parallelism (src/exec/dp.h) on one process: padded buffer lengths (param_padded) and the
 * ZeRO-1 shard ranges of every replica for several sizes (dp_t made by hand: the ranges are
 * arithmetic), then dp_init over MPI_COMM_SELF on the cpu backend: buckets over one replica leave
 * the gradients bitwise unchanged, reduce-scatter and all-gather with one rank likewise, and the
 * ZeRO-1 shard buffer comes from the arena and goes back to it. bf16 rounding on hand-worked values,
 * and bf16 buckets (parallel.grad_reduce_dtype) over one replica: each sum is its input rounded. */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "bf16.h"
#include "backend.h"
#include "check.h"
#include "dp.h"
#include "mpi_check.h"
#include "params.h"
#include "tap.h"

static void test_padded(void)
{
    /* {total, shards, padded}: worked out by hand (a multiple of 16·shards, the least ≥ total) */
    static const size_t cases[][3] = {{0, 1, 0},     {1, 1, 16},     {16, 1, 16},    {17, 1, 32},
                                      {100, 3, 144}, {144, 3, 144},  {145, 3, 192},  {1000, 8, 1024},
                                      {10, 4, 64},   {7, 16, 256},   {124439809, 6, 124439904}};
    int good = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t p = param_padded(cases[i][0], (int)cases[i][1]);
        if (p != cases[i][2])
            tap_diag("param_padded(%zu, %zu) = %zu, want %zu", cases[i][0], cases[i][1], p, cases[i][2]);
        good &= p == cases[i][2];
    }
    tap_ok(good, "param_padded: the least multiple of 16 x shards not below total (11 cases, 0 to 124M floats)");
}

/* Replicas 0..size-1 of a buffer of total floats: their ranges are contiguous in rank order, cover
 * [0, total) exactly, each at most one shard, every shard a multiple of 16 floats. */
static int shards_cover(size_t total, int size)
{
    size_t next = 0;
    int good = 1;
    for (int r = 0; r < size; r++) {
        dp_t dp;
        memset(&dp, 0, sizeof dp);
        dp.size = size, dp.rank = r, dp.total = total;
        dp.shard = param_padded(total, size) / (size_t)size;
        size_t s0 = 99, s1 = 99;
        dp_shard_range(&dp, &s0, &s1);
        good &= s0 == next && s1 >= s0 && s1 - s0 <= dp.shard && s1 <= total && dp.shard % 16 == 0;
        good &= s0 == (size_t)r * dp.shard || s0 == total; /* where ZeRO-1 puts replica r's shard */
        next = s1;
    }
    return good && next == total;
}

static void test_shard_ranges(void)
{
    static const size_t totals[] = {1, 15, 16, 17, 100, 1000, 4099, 124439808};
    static const int sizes[] = {1, 2, 3, 4, 7, 8};
    int good = 1, runs = 0;
    for (size_t i = 0; i < sizeof totals / sizeof totals[0]; i++)
        for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
            runs++;
            if (!shards_cover(totals[i], sizes[j])) {
                tap_diag("total %zu over %d replicas: shard ranges do not tile [0, total)", totals[i], sizes[j]);
                good = 0;
            }
        }
    tap_ok(good, "dp_shard_range: replicas' ranges tile [0, total) in rank order, each within its padded shard "
                 "(%d cases)", runs);
    /* a buffer smaller than the replicas' shards: the last replicas hold nothing */
    dp_t dp;
    memset(&dp, 0, sizeof dp);
    dp.size = 4, dp.total = 10, dp.shard = param_padded(10, 4) / 4;
    size_t r0[2], r3[2];
    dp.rank = 0;
    dp_shard_range(&dp, &r0[0], &r0[1]);
    dp.rank = 3;
    dp_shard_range(&dp, &r3[0], &r3[1]);
    tap_ok(dp.shard == 16 && r0[0] == 0 && r0[1] == 10 && r3[0] == 10 && r3[1] == 10,
           "10 floats over 4 replicas: shard 16, replica 0 holds [0, 10), replica 3 [10, 10) (got [%zu, %zu) and "
           "[%zu, %zu))", r0[0], r0[1], r3[0], r3[1]);
}

/* Deterministic values that are not sums of themselves (x + 0 == x, x + x != x). */
static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) x[i] = scale * ((float)(i % 97) - 48.25f) + 1e-3f * (float)i;
}

/* A cpu backend on a fresh arena for the tests below (its waits: the static config, which the
 * backend keeps a pointer to). MP_OK, or MP_ERR after a failing check. */
static int cpu_backend(backend_t *cpu, arena_t *arena)
{
    static const wait_cfg_t wait = {.yield = 0, .timeout = 10.0};
    arena_init(arena, 0);
    if (be_init(cpu, BE_CPU, arena, 0, 0, 0, &wait) == MP_OK) return MP_OK;
    tap_ok(0, "be_init cpu");
    return MP_ERR;
}

static void test_one_replica(int zero)
{
    arena_t arena;
    backend_t cpu;
    if (cpu_backend(&cpu, &arena) != MP_OK) return;
    const size_t total = 1000;
    dp_t dp;
    const size_t before = arena.in_use;
    int rc = dp_init(&dp, MPI_COMM_SELF, &cpu, &arena, total, zero, 0, 4);
    const size_t padded = param_padded(total, 1);
    tap_ok(rc == MP_OK && dp.size == 1 && dp.rank == 0 && dp.total == total && dp.shard == padded &&
               (zero ? dp.shard_buf != NULL && arena.in_use == before + padded * sizeof(float)
                     : dp.shard_buf == NULL && arena.in_use == before),
           "zero=%d: dp_init over MPI_COMM_SELF: 1 replica, shard = %zu (padded), %s", zero, dp.shard,
           zero ? "the gradient shard from the arena" : "no shard buffer");
    float *g = arena_floats(&arena, padded, "gradients"), *want = malloc(padded * sizeof(float));
    fill(g, total, 0.37f);
    memcpy(want, g, padded * sizeof(float));
    dp_bucket_start(&dp, g, 0, 100);
    dp_bucket_start(&dp, g, 100, 250);
    dp_progress(&dp);
    dp_bucket_start(&dp, g, 350, 600);
    dp_bucket_start(&dp, g, 950, 50);
    const int started = cpu.nbuckets;
    dp_progress(&dp);
    dp_buckets_wait(&dp);
    tap_ok(started == 4 && cpu.nbuckets == 0 && memcmp(g, want, padded * sizeof(float)) == 0 && dp.comm_seconds >= 0.0,
           "zero=%d: 4 buckets (the planned most) started, progressed and waited over 1 replica: gradients "
           "bitwise unchanged, none left in flight", zero);
    /* the next step's buckets start afresh */
    dp_bucket_start(&dp, g, 0, total);
    dp_buckets_wait(&dp);
    tap_ok(memcmp(g, want, padded * sizeof(float)) == 0 && cpu.nbuckets == 0,
           "zero=%d: a second step's bucket after the wait: unchanged again", zero);
    if (zero) {
        memset(g + total, 0, (padded - total) * sizeof(float)); /* padding is zero in the real buffers */
        memcpy(want, g, padded * sizeof(float));
        dp_reduce_scatter(&dp, g);
        size_t s0 = 1, s1 = 0;
        dp_shard_range(&dp, &s0, &s1);
        int same_shard = memcmp(dp.shard_buf, want, dp.shard * sizeof(float)) == 0;
        tap_ok(memcmp(g, want, padded * sizeof(float)) == 0 && same_shard && s0 == 0 && s1 == total,
               "ZeRO-1, 1 replica: reduce-scatter leaves the whole sum (the input) at grads[0, shard) and in the "
               "shard buffer; this replica's range is [0, %zu) (got [%zu, %zu))", total, s0, s1);
        float *p = arena_floats(&arena, padded, "parameters");
        fill(p, total, -1.5f);
        memcpy(want, p, padded * sizeof(float));
        dp_allgather(&dp, p);
        tap_ok(memcmp(p, want, padded * sizeof(float)) == 0, "ZeRO-1, 1 replica: all-gather leaves the parameters "
                                                             "bitwise unchanged");
        arena_free(&arena, p, padded * sizeof(float));
    }
    free(want);
    arena_free(&arena, g, padded * sizeof(float));
    dp_free(&dp);
    tap_ok(arena.in_use == before && dp.shard_buf == NULL,
           "zero=%d: after dp_free the arena holds what it held before dp_init", zero);
    be_destroy(&cpu);
}

/* bf16 rounding (src/core/bf16.h) on values worked out by hand: ties go to the even neighbour, a
 * carry ripples into the exponent, the largest float rounds to infinity, a NaN stays a NaN. */
static void test_bf16_round(void)
{
    static const struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1 */
        {0x3f808000u, 0x3f80}, /* 1 + 2^-8: a tie, to the even 1 */
        {0x3f818000u, 0x3f82}, /* 1 + 3·2^-8: a tie, to the even 1 + 2^-6 */
        {0x3f808001u, 0x3f81}, /* just above the tie: up */
        {0x3f807fffu, 0x3f80}, /* just below: down */
        {0xbf818000u, 0xbf82}, /* the sign kept */
        {0x3fffffffu, 0x4000}, /* 2 − 2^-23: the carry makes 2 */
        {0x7f7fffffu, 0x7f80}, /* the largest float: infinity */
        {0x00000001u, 0x0000}, /* the least subnormal: 0 */
        {0x7fc00001u, 0x7fc0}, /* a NaN stays one */
        {0x7f800001u, 0x7fc0}, /* a signalling NaN: quiet, not infinity */
    };
    int good = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float f;
        memcpy(&f, &cases[i].in, sizeof f);
        const uint16_t h = mp_bf16_round(f);
        if (h != cases[i].out) tap_diag("bf16(0x%08x) = 0x%04x, want 0x%04x", cases[i].in, h, cases[i].out);
        const float w = mp_bf16_widen(h);
        uint32_t back;
        memcpy(&back, &w, sizeof back);
        good &= h == cases[i].out && back == (uint32_t)cases[i].out << 16;
    }
    tap_ok(good, "bf16 rounding: nearest, ties to even, carry, overflow to infinity, NaN kept (11 cases); widening exact");
}

/* parallel.grad_reduce_dtype = bf16 over one replica: every bucket's sum is its input rounded to bf16
 * (the all-reduce in place; ZeRO-1's reduce-scatter into the shard buffer), and stays so the next step,
 * whose buckets reuse the host wires. */
static void test_bf16_buckets(int zero)
{
    arena_t arena;
    backend_t cpu;
    if (cpu_backend(&cpu, &arena) != MP_OK) return;
    const size_t total = 1000, padded = param_padded(total, 1);
    dp_t dp;
    const size_t before = arena.in_use;
    const int rc = dp_init(&dp, MPI_COMM_SELF, &cpu, &arena, total, zero, 1, 4);
    tap_ok(rc == MP_OK && cpu.bucket_bf16 && dp.wire == NULL,
           "zero=%d, bf16: dp_init over MPI_COMM_SELF on cpu: bf16 buckets, no device wire", zero);
    float *g = arena_floats(&arena, padded, "gradients"), *want = malloc(padded * sizeof(float));
    memset(g, 0, padded * sizeof(float));
    for (int step = 0; step < 2; step++) {
        fill(g, total, step ? -0.011f : 0.37f);
        size_t changed = 0;
        for (size_t i = 0; i < padded; i++) {
            want[i] = mp_bf16_widen(mp_bf16_round(g[i]));
            changed += want[i] != g[i];
        }
        dp_bucket_start(&dp, g, 0, 100);
        dp_bucket_start(&dp, g, 100, 250);
        dp_bucket_start(&dp, g, 350, 600);
        dp_bucket_start(&dp, g, 950, 50);
        dp_buckets_wait(&dp);
        const float *got = zero ? dp.shard_buf : g;
        tap_ok(memcmp(got, want, total * sizeof(float)) == 0 && changed > total / 2,
               "zero=%d, bf16, step %d: 4 buckets over 1 replica leave %s its input rounded to bf16 (%zu of %zu "
               "values changed by the rounding)", zero, step, zero ? "the shard buffer holding" : "the gradients",
               changed, total);
    }
    free(want);
    arena_free(&arena, g, padded * sizeof(float));
    dp_free(&dp);
    tap_ok(arena.in_use == before, "zero=%d, bf16: after dp_free the arena holds what it held before dp_init", zero);
    be_destroy(&cpu);
    tap_ok(cpu.wire == NULL, "zero=%d, bf16: be_destroy frees the host wires", zero);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    mpi_check_init(0);
    test_padded();
    test_shard_ranges();
    test_one_replica(0);
    test_one_replica(1);
    test_bf16_round();
    test_bf16_buckets(0);
    test_bf16_buckets(1);
    MPI_Finalize();
    return tap_done();
}
