/* Waits (src/comm/wait.h) on one process: parallel.wait's auto/yield/spin decision, wait_all on
 * completed, null and self-matched requests, the all-reduce, barrier and max over MPI_COMM_SELF,
 * and the hung-peer timeout: a receive that never arrives aborts after parallel.timeout with a
 * message naming what was awaited. MPICH and fork() do not mix, so the timeout runs in a fresh
 * process: this binary re-executed with --timeout-child (spawned before MPI_Init here). */
#include <errno.h>
#include <mpi.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "mpi_check.h"
#include "perf.h"
#include "tap.h"
#include "wait.h"

extern char **environ;

static char tmpdir[] = "/tmp/test_wait.XXXXXX";
#include "capture.h"

#define CHILD_WHAT "the test's receive that never arrives (tag 77)"
#define CHILD_TIMEOUT 0.2

/* The child: waits with parallel.timeout = 0.2 s for a message nobody sends. Never returns. */
static int timeout_child(void)
{
    MPI_Init(NULL, NULL);
    mpi_check_init(0); /* as the program does: a fatal error is MPI_Abort of the job */
    wait_cfg_t w;
    wait_cfg_init(&w, DECK_WAIT_YIELD, CHILD_TIMEOUT, 1);
    int x = 0;
    MPI_Request r;
    MPI_Irecv(&x, 1, MPI_INT, 0, 77, MPI_COMM_SELF, &r);
    wait_all(&w, 1, &r, CHILD_WHAT);
    fprintf(stderr, "wait_all returned from a receive that was never sent\n");
    MPI_Finalize();
    return 0; /* exit 0: the parent reports the failure */
}

/* The environment minus the process manager's variables: the child is its own singleton job even
 * when this test runs under mpiexec. */
static char **child_env(void)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 1, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "PMI_", 4) != 0 && strncmp(environ[i], "PMIX_", 5) != 0) env[k++] = environ[i];
    return env;
}

/* Runs `self --timeout-child` with stderr into tmpdir; its wait status (-1: it did not end within
 * 60 s and was killed), its wall time and its stderr in errtext. */
static int run_timeout_child(const char *self, double *seconds_p)
{
    char path[1024];
    capture_path(path, sizeof path);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    char *args[] = {(char *)self, "--timeout-child", NULL};
    char **env = child_env();
    pid_t pid;
    const double t0 = perf_now();
    int rc = posix_spawn(&pid, self, &fa, NULL, args, env);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    if (rc != 0) {
        tap_diag("posix_spawn %s: %s", self, strerror(rc));
        return -1;
    }
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return -1;
        if (perf_now() - t0 > 60.0) { /* a wait that never times out: fail, do not hang the suite */
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            st = -1;
            break;
        }
        usleep(10000);
    }
    *seconds_p = perf_now() - t0;
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(errtext, 1, sizeof errtext - 1, f) : 0;
    errtext[n] = 0;
    if (f) fclose(f);
    unlink(path);
    return st;
}

static void test_timeout(const char *self)
{
    double secs = 0.0;
    int st = run_timeout_child(self, &secs);
    show_errtext();
    tap_ok(st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0),
           "a receive that never arrives with parallel.timeout = 0.2 s ends the process with a failure (status %#x)", st);
    tap_ok(strstr(errtext, "waited more than parallel.timeout") && strstr(errtext, CHILD_WHAT) &&
               strstr(errtext, "[rank 0]") && strstr(errtext, "dead or hung"),
           "the timeout's message names the rank, parallel.timeout and what was awaited");
    tap_ok(st != -1 && secs >= CHILD_TIMEOUT && secs < 30.0,
           "the abort came after the timeout, not before and not never (%.2f s, timeout %.1f s)", secs, CHILD_TIMEOUT);
}

static void test_cfg(void)
{
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int n = (int)cores;
    tap_ok(!wait_node_oversubscribed(1) && !wait_node_oversubscribed(n) && wait_node_oversubscribed(n + 1) &&
               wait_node_oversubscribed(4 * n),
           "oversubscribed means more ranks than the node's %ld cores (1, %d: no; %d, %d: yes)", cores, n, n + 1, 4 * n);
    wait_cfg_t w;
    int good = 1;
    wait_cfg_init(&w, DECK_WAIT_YIELD, 3.5, 1);
    good &= w.yield == 1 && w.timeout == 3.5;
    wait_cfg_init(&w, DECK_WAIT_SPIN, 0.0, 8 * n);
    good &= w.yield == 0 && w.timeout == 0.0;
    tap_ok(good, "parallel.wait = yield yields even on an idle node, spin never even oversubscribed; timeout kept");
    wait_cfg_init(&w, DECK_WAIT_AUTO, 60.0, 1);
    int one = w.yield;
    wait_cfg_init(&w, DECK_WAIT_AUTO, 60.0, n);
    int full = w.yield;
    wait_cfg_init(&w, DECK_WAIT_AUTO, 60.0, n + 1);
    int over = w.yield;
    tap_ok(one == 0 && full == 0 && over == 1 && w.timeout == 60.0,
           "parallel.wait = auto spins with 1 or %d ranks on %ld cores and yields with %d (got %d %d %d)", n, cores,
           n + 1, one, full, over);
}

static void test_waits(void)
{
    wait_cfg_t spin = {.yield = 0, .timeout = 5.0}, yield = {.yield = 1, .timeout = 5.0};
    /* completed requests: self sends matched by receives posted before the wait */
    int out[3] = {11, 22, 33}, in[3] = {0, 0, 0};
    MPI_Request r[7];
    for (int i = 0; i < 3; i++) MPI_Irecv(&in[i], 1, MPI_INT, 0, 100 + i, MPI_COMM_SELF, &r[i]);
    for (int i = 0; i < 3; i++) MPI_Isend(&out[2 - i], 1, MPI_INT, 0, 102 - i, MPI_COMM_SELF, &r[3 + i]);
    r[6] = MPI_REQUEST_NULL; /* the executor waits on requests it never started */
    wait_all(&yield, 7, r, "self messages");
    int nulls = 1;
    for (int i = 0; i < 7; i++) nulls &= r[i] == MPI_REQUEST_NULL;
    tap_ok(in[0] == 11 && in[1] == 22 && in[2] == 33 && nulls,
           "wait_all over 3 receives, 3 sends (posted in another order) and a null request: every message in place "
           "(%d %d %d), every request freed", in[0], in[1], in[2]);
    MPI_Request done = MPI_REQUEST_NULL;
    const double t0 = perf_now();
    wait_all(&spin, 1, &done, "nothing");
    wait_all(&spin, 0, NULL, "nothing");
    tap_ok(perf_now() - t0 < 1.0, "wait_all of no request and of a null request returns at once");

    double d[5] = {1.5, -2.25, 1e300, 0.0, 3.0};
    const double d0[5] = {1.5, -2.25, 1e300, 0.0, 3.0};
    wait_allreduce_sum(&spin, d, 5, MPI_DOUBLE, MPI_COMM_SELF, "a sum");
    float f[4] = {0.1f, -7.0f, 1e-30f, 3.0e38f};
    const float f0[4] = {0.1f, -7.0f, 1e-30f, 3.0e38f};
    wait_allreduce_sum(&yield, f, 4, MPI_FLOAT, MPI_COMM_SELF, "a float sum");
    tap_ok(memcmp(d, d0, sizeof d) == 0 && memcmp(f, f0, sizeof f) == 0,
           "wait_allreduce_sum over MPI_COMM_SELF returns its input bitwise (double and float)");
    long l[3] = {-5, 7, 1L << 40};
    wait_allreduce(&spin, l, 3, MPI_LONG, MPI_MAX, MPI_COMM_SELF, "a max");
    wait_barrier(&yield, MPI_COMM_SELF, "a barrier");
    tap_ok(l[0] == -5 && l[1] == 7 && l[2] == (1L << 40), "wait_allreduce (max) over MPI_COMM_SELF and wait_barrier");
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--timeout-child") == 0) return timeout_child();
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) self[n] = 0;
    else snprintf(self, sizeof self, "%s", argv[0]);
    test_timeout(self); /* before MPI_Init: no MPI state in the parent while it spawns */
    MPI_Init(&argc, &argv);
    mpi_check_init(0);
    test_cfg();
    test_waits();
    rmdir(tmpdir);
    MPI_Finalize();
    return tap_done();
}
