/* The host-staged collectives (src/device/backend_staged.h), on one process with no GPU: the
 * collectives and buckets on the emu backend over MPI_COMM_SELF (one rank: every sum is its input).
 * Each result lands in device memory through the copies, a bucket's sum comes back from its host
 * copy at the wait (the device buffer is cleared between start and wait to see it), buckets of a
 * later step grow their host copies, and be_destroy frees them. Two ranks, bitwise against the cpu
 * backend: validation/test_device.sh. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "backend.h"
#include "check.h"
#include "mpi_check.h"
#include "tap.h"

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
    tap_ok(be_buckets_reserve(emu, 4) == MP_OK, "emu: room for 4 buckets");
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
    wait_cfg_t wait = {0, 10.0};
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
    test_emu();
    MPI_Finalize();
    return tap_done();
}
