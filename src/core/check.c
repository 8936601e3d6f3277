/* Error reporting: one place formats every message so users always see rank, file and line. */
#include "check.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* The only process-wide values outside the run context: messages must name the rank even from
 * code that has no context at hand (allocation failures, HDF5 callbacks), and how to abort the job. Each written once at start. */
static int mp_msg_rank = -1;

void mp_check_set_rank(int rank) { mp_msg_rank = rank; }

static void mp_vreport(const char *kind, const char *file, int line, const char *fmt, va_list ap)
{
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (mp_msg_rank >= 0)
        fprintf(stderr, "mindpipe: %s: [rank %d] %s (%s:%d)\n", kind, mp_msg_rank, msg, file, line);
    else
        fprintf(stderr, "mindpipe: %s: %s (%s:%d)\n", kind, msg, file, line);
    fflush(stderr);
}

void mp_errorf(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mp_vreport("error", file, line, fmt, ap);
    va_end(ap);
}

void mp_warnf(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mp_vreport("warning", file, line, fmt, ap);
    va_end(ap);
}

/* How a fatal error ends the process: exit(1) until the communication layer installs the job-wide
 * abort (comm/mpi_check.c), after which one rank's fatal error takes every rank down. */
static void (*mp_abort_fn)(void);

void mp_check_set_abort(void (*abort_fn)(void)) { mp_abort_fn = abort_fn; }

void mp_abortf(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mp_vreport("fatal", file, line, fmt, ap);
    va_end(ap);
    if (mp_abort_fn) mp_abort_fn();
    exit(1);
}

void *mp_malloc(size_t bytes, const char *file, int line)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) mp_errorf(file, line, "out of memory allocating %zu bytes", bytes);
    return p;
}

void *mp_calloc(size_t n, size_t size, const char *file, int line)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) mp_errorf(file, line, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void mp_stop_for_good(void)
{
    for (;;) raise(SIGSTOP);
}
