/* peer_loss: what the survivors of a dead rank see, and what the launcher does to them (issue 33).
 *
 * Plain MPI, no project library (built by validation/test_peer_loss.sh with mpicc). It mimics
 * MindPipe's waits (src/comm/wait.c): every step each rank sends to its right neighbour and receives
 * from its left one (a ring: a pipeline whose last stage talks back to the first) with MPI_Isend/
 * MPI_Irecv, then takes part in an MPI_Iallreduce over MPI_COMM_WORLD; every wait is a loop of
 * MPI_Testall and sched_yield with a deadline. One rank (--victim) kills itself with SIGKILL as
 * step --kill-step begins. A survivor whose wait passes --timeout seconds prints
 *
 *     rank R: peer lost after step S (...)
 *
 * and ends with _exit(75) (no MPI_Finalize: a survivor cannot finalize with a dead peer). If an
 * MPI call returns an error instead (MPI_ERRORS_RETURN is set on MPI_COMM_WORLD unless --fatal),
 * the survivor prints
 *
 *     rank R: MPI_Testall returned an error in step S (what) after T s: class C (string)
 *
 * and then the same "peer lost" line and _exit(75); --fatal leaves MPI_ERRORS_ARE_FATAL. A survivor
 * that was sent SIGUSR1 (Hydra does that under -disable-auto-cleanup) says how many and when, the
 * signal being passed on to MPICH's own handler. Without a victim (--victim -1) every rank runs the
 * steps and calls MPI_Finalize, printing how long it took (the finalize probe of issue 33 item 4;
 * --late-rank R --late-s SEC makes rank R enter it SEC seconds after the others).
 *
 *   peer_loss [--victim R] [--kill-step S] [--steps N] [--timeout SEC] [--interval-ms MS]
 *             [--bytes B] [--fatal] [--exit-code C] [--late-rank R --late-s SEC]
 *
 * Every line carries the wall-clock time (CLOCK_REALTIME, seconds with ms) in brackets, so the
 * survivors' times can be set against the victim's "killing myself" line on one machine.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <mpi.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int me = -1, nranks = 0;
static int victim = 1, kill_step = 5, steps = 20, interval_ms = 5, bytes = 4096, fatal = 0, exit_code = 75;
static double timeout_s = 5.0, late_s = 0; /* --late-s: rank --late-rank sleeps this long before MPI_Finalize */
static int late_rank = -1;
static int last_step = -1; /* the last step this rank completed */

/* SIGUSR1: counted (Hydra sends it to every surviving rank when one dies under -disable-auto-cleanup),
 * then passed on to the handler MPICH installed in MPI_Init (its process-failure notice). */
static volatile sig_atomic_t usr1_count = 0;
static double usr1_first = 0; /* CLOCK_REALTIME of the first */
static struct sigaction usr1_prev;
static void on_usr1(int sig)
{
    if (usr1_count++ == 0) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        usr1_first = (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
    }
    if (!(usr1_prev.sa_flags & SA_SIGINFO) && usr1_prev.sa_handler != SIG_DFL && usr1_prev.sa_handler != SIG_IGN &&
        usr1_prev.sa_handler)
        usr1_prev.sa_handler(sig);
}

static double now_mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double now_wall(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One line to stdout, unbuffered as a whole (write(2)), prefixed with the wall-clock time. */
static void say(const char *fmt, ...)
{
    char line[1024];
    int o = snprintf(line, sizeof line, "[%.3f] ", now_wall());
    va_list ap;
    va_start(ap, fmt);
    o += vsnprintf(line + o, sizeof line - (size_t)o, fmt, ap);
    va_end(ap);
    if (o > (int)sizeof line - 2) o = (int)sizeof line - 2;
    line[o++] = '\n';
    ssize_t w = write(STDOUT_FILENO, line, (size_t)o);
    (void)w;
}

static void lost(const char *what, double waited) __attribute__((noreturn));
static void lost(const char *what, double waited)
{
    if (usr1_count) say("rank %d: got %d SIGUSR1, the first at [%.3f]", me, (int)usr1_count, usr1_first);
    say("rank %d: peer lost after step %d (waited %.3f s for %s)", me, last_step, waited, what);
    _exit(exit_code);
}

/* Polls reqs until all complete, an MPI call returns an error, or the deadline passes. */
static void wait_all(int n, MPI_Request *reqs, const char *what, int step)
{
    MPI_Status st[4];
    const double t0 = now_mono();
    for (;;) {
        int done = 0;
        int rc = MPI_Testall(n, reqs, &done, st);
        if (rc != MPI_SUCCESS) {
            const double dt = now_mono() - t0;
            char s[MPI_MAX_ERROR_STRING] = "";
            int len = 0, cls = -1;
            MPI_Error_class(rc, &cls);
            MPI_Error_string(rc, s, &len);
            say("rank %d: MPI_Testall returned an error in step %d (%s) after %.3f s: class %d (%s)", me, step, what,
                dt, cls, s);
            if (cls == MPI_ERR_IN_STATUS)
                for (int i = 0; i < n; i++) {
                    if (st[i].MPI_ERROR == MPI_SUCCESS || st[i].MPI_ERROR == MPI_ERR_PENDING) continue;
                    MPI_Error_class(st[i].MPI_ERROR, &cls);
                    MPI_Error_string(st[i].MPI_ERROR, s, &len);
                    say("rank %d:   request %d: class %d (%s)", me, i, cls, s);
                }
            lost(what, dt);
        }
        if (done) return;
        sched_yield();
        const double dt = now_mono() - t0;
        if (dt > timeout_s) lost(what, dt);
    }
}

static int arg_int(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end != 0) {
        fprintf(stderr, "peer_loss: not an integer: '%s'\n", s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--fatal")) { fatal = 1; continue; }
        if (!v) { fprintf(stderr, "peer_loss: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--victim")) victim = arg_int(v);
        else if (!strcmp(a, "--kill-step")) kill_step = arg_int(v);
        else if (!strcmp(a, "--steps")) steps = arg_int(v);
        else if (!strcmp(a, "--timeout")) timeout_s = atof(v);
        else if (!strcmp(a, "--interval-ms")) interval_ms = arg_int(v);
        else if (!strcmp(a, "--bytes")) bytes = arg_int(v);
        else if (!strcmp(a, "--exit-code")) exit_code = arg_int(v);
        else if (!strcmp(a, "--late-rank")) late_rank = arg_int(v);
        else if (!strcmp(a, "--late-s")) late_s = atof(v);
        else { fprintf(stderr, "peer_loss: unknown option %s\n", a); return 2; }
        i++;
    }
    const double t_init = now_mono();
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (!fatal) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, &usr1_prev);
    char host[256] = "?";
    gethostname(host, sizeof host);
    say("rank %d: up on %s pid %d (%d ranks, MPI_Init %.3f s, errors %s)", me, host, (int)getpid(), nranks,
        now_mono() - t_init, fatal ? "fatal" : "return");

    char *sbuf = malloc((size_t)bytes), *rbuf = malloc((size_t)bytes);
    if (!sbuf || !rbuf) return 1;
    memset(sbuf, me & 0xff, (size_t)bytes);
    const int right = (me + 1) % nranks, left = (me + nranks - 1) % nranks;
    for (int step = 0; step < steps; step++) {
        if (me == victim && step == kill_step) {
            say("rank %d: killing myself (SIGKILL) as step %d begins", me, step);
            raise(SIGKILL);
        }
        if (nranks > 1) {
            MPI_Request r[2];
            MPI_Irecv(rbuf, bytes, MPI_BYTE, left, step, MPI_COMM_WORLD, &r[0]);
            MPI_Isend(sbuf, bytes, MPI_BYTE, right, step, MPI_COMM_WORLD, &r[1]);
            wait_all(2, r, "the ring exchange", step);
        }
        double x = step + me, sum = 0;
        MPI_Request ar;
        MPI_Iallreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &ar);
        wait_all(1, &ar, "the all-reduce", step);
        const double want = (double)step * nranks + (double)nranks * (nranks - 1) / 2;
        if (sum != want) {
            say("rank %d: all-reduce of step %d gave %g, not %g", me, step, sum, want);
            return 1;
        }
        last_step = step;
        const struct timespec pause = {interval_ms / 1000, (long)(interval_ms % 1000) * 1000000L};
        while (nanosleep(&pause, NULL) != 0 && errno == EINTR) {
        }
    }
    if (me == late_rank && late_s > 0) {
        say("rank %d: %d steps done; sleeping %.3f s before MPI_Finalize", me, steps, late_s);
        const struct timespec late = {(time_t)late_s, (long)((late_s - (double)(time_t)late_s) * 1e9)};
        nanosleep(&late, NULL);
    }
    say("rank %d: %d steps done; MPI_Finalize", me, steps);
    const double t_fin = now_mono();
    MPI_Finalize();
    say("rank %d: MPI_Finalize returned after %.3f s", me, now_mono() - t_fin);
    free(sbuf);
    free(rbuf);
    return 0;
}
