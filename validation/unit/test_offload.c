/* The offload copy engine (copier.h, backend.h's BE_OFFLOAD_OPS): copies arrive whole and in order,
 * tickets wait for what they name, the node link's lock is held per direction, the emu backend's copy
 * engine moves device memory while the guarded view is closed, and a fenced (offloaded) range faults
 * when a kernel touches it even inside a be_* call. */
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <stdint.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "copier.h"
#include "kernels.h"
#include "mpi_check.h"
#include "tap.h"

enum { N = 1 << 20 }; /* floats per copy: 4 MiB, long enough for the thread to be caught mid-copy */

/* A link lock that records the most copies in flight per direction. */
typedef struct {
    int busy[2], most[2], calls[2];
} link_probe_t;

static void probe_lock(void *ctx, int dir)
{
    link_probe_t *p = ctx;
    p->calls[dir]++;
    if (++p->busy[dir] > p->most[dir]) p->most[dir] = p->busy[dir];
}

static void probe_unlock(void *ctx, int dir) { ((link_probe_t *)ctx)->busy[dir]--; }

static void test_copier(void)
{
    copier_t *c = copier_create();
    if (!tap_ok(c != NULL, "copier starts its thread")) return;
    link_probe_t probe = {{0, 0}, {0, 0}, {0, 0}};
    const copier_link_t link = {probe_lock, probe_unlock, &probe};
    copier_set_link(c, &link);
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *d = malloc(N * sizeof *d);
    for (int i = 0; i < N; i++) a[i] = (float)i * 0.5f, b[i] = -1.0f, d[i] = -2.0f;
    const long t1 = copier_start(c, b, a, N * sizeof *a, 0);
    const long t2 = copier_start(c, d, b, N * sizeof *a, 1); /* ordered after t1: reads what t1 wrote */
    tap_ok(t1 == 1 && t2 == 2, "tickets count from 1 (%ld, %ld)", t1, t2);
    double waited = 0.0;
    copier_wait(c, t2, &waited);
    tap_ok(!memcmp(a, d, N * sizeof *a) && !memcmp(a, b, N * sizeof *a),
           "two chained copies arrive whole and in the order they were started");
    size_t bytes[2];
    double busy;
    copier_totals(c, bytes, &busy);
    tap_ok(bytes[0] == N * sizeof *a && bytes[1] == N * sizeof *a, "bytes counted per direction");
    tap_ok(probe.calls[0] == 1 && probe.calls[1] == 1 && probe.most[0] == 1 && probe.busy[0] == 0 && probe.busy[1] == 0,
           "the link lock was taken once per copy, for its direction, and released");
    int dir[8];
    double s0[8], s1[8];
    const int n = copier_take_spans(c, dir, s0, s1, 8);
    tap_ok(n == 2 && dir[0] == 0 && dir[1] == 1 && s0[1] >= s1[0] && s1[0] >= s0[0],
           "the trace gets one span per copy, in order, not overlapping");
    /* many small copies: the ring grows past its first size and keeps them in order */
    long last = 0;
    for (int i = 0; i < 300; i++) last = copier_start(c, b + i, a + (i + 1), sizeof *a, i & 1);
    copier_wait(c, last, NULL);
    int good = 1;
    for (int i = 0; i < 300; i++) good &= b[i] == a[i + 1];
    tap_ok(good && last == 302, "300 queued copies (the queue grows) all land");
    copier_destroy(c);
    free(a), free(b), free(d);
}

/* Runs fn in a child; returns the signal that ended it (0: it exited normally). */
static int child_signal(void (*fn)(void *), void *arg)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* die of it quietly, without MPI's handler's backtrace */
        fn(arg);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

typedef struct {
    backend_t *be;
    float *dev;
} touch_t;

static void touch_dev(void *arg)
{
    touch_t *t = arg;
    be_zero(t->be, t->dev, 4096); /* a be_* call: the region is open, but not a fenced range */
}

static void test_emu(void)
{
    wait_cfg_t wait = {.yield = 0, .timeout = 30.0};
    arena_t arena;
    arena_init(&arena, 0);
    backend_t emu;
    if (!tap_ok(be_init(&emu, BE_EMU, &arena, (size_t)64 << 20, 0, 0, &wait) == MP_OK, "emu backend")) return;
    const size_t bytes = 16 * 4096;
    float *raw = arena_floats(&arena, (bytes + 4096) / sizeof(float), "test buffer");
    float *dev = (float *)(((uintptr_t)raw + 4095) / 4096 * 4096);
    float *host = be_host_alloc(&emu, bytes), *back = be_host_alloc(&emu, bytes);
    for (size_t i = 0; i < bytes / sizeof(float); i++) host[i] = (float)i;
    be_offload_wait(&emu, be_offload_start(&emu, dev, host, bytes, 0), NULL);
    be_offload_fence(&emu, dev, bytes, 1);
    /* the copy engine reads the fenced range through its own view */
    be_offload_wait(&emu, be_offload_start(&emu, back, dev, bytes, 1), NULL);
    tap_ok(!memcmp(host, back, bytes), "emu: a stash goes to the device and back through the copy engine's view");
    touch_t t = {&emu, dev};
    const int sig = child_signal(touch_dev, &t);
    tap_ok(sig == SIGSEGV, "emu: a kernel touching an offloaded (fenced) stash faults (signal %d)", sig);
    be_offload_fence(&emu, dev, bytes, 0);
    tap_ok(child_signal(touch_dev, &t) == 0, "emu: once prefetched (unfenced) the same access runs");
    be_host_free(&emu, host);
    be_host_free(&emu, back);
    arena_free(&arena, raw, bytes + 4096);
    be_destroy(&emu);
}

static void test_cpu(void)
{
    wait_cfg_t wait = {.yield = 0, .timeout = 30.0};
    arena_t arena;
    arena_init(&arena, 0);
    backend_t cpu;
    if (!tap_ok(be_init(&cpu, BE_CPU, &arena, 0, 0, 0, &wait) == MP_OK, "cpu backend")) return;
    float *dev = arena_floats(&arena, N, "device"), *host = be_host_alloc(&cpu, N * sizeof(float));
    for (int i = 0; i < N; i++) dev[i] = (float)(i % 977);
    const long t = be_offload_start(&cpu, host, dev, N * sizeof(float), 1);
    double waited = 0.0;
    be_offload_wait(&cpu, t, &waited);
    tap_ok(!memcmp(host, dev, N * sizeof(float)) && waited >= 0.0, "cpu: offload_wait returns with the copy done");
    be_host_free(&cpu, host);
    arena_free(&arena, dev, N * sizeof(float));
    be_destroy(&cpu);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    mpi_check_init(0);
    kernels_set_threads(1);
    test_copier();
    test_cpu();
    test_emu();
    MPI_Finalize();
    return tap_done();
}
