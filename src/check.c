/* Error reporting: one place formats every message so users always see rank, file and line. */
#include "check.h"

#include <hdf5.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The only process-wide value outside the run context: messages must name the rank even from
 * code that has no context at hand (allocation failures, HDF5 callbacks). Written once. */
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

void mp_abortf(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mp_vreport("fatal", file, line, fmt, ap);
    va_end(ap);
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) {
        /* Hydra kills every rank and stops forwarding output as soon as it hears of the abort: give
         * it a moment to forward the message first (without it, about half the hung-peer timeouts
         * on this machine ended with no message at all) */
        const struct timespec pause = {0, 200 * 1000 * 1000};
        nanosleep(&pause, NULL);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    exit(1);
}

void mp_mpi_fail(const char *file, int line, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    mp_abortf(file, line, "MPI call failed: %s: %s", what, msg);
}

/* Walks HDF5's error stack and prints its innermost description: the library's own reason. */
static herr_t mp_h5_walk(unsigned n, const H5E_error2_t *e, void *data)
{
    const char **desc_p = data;
    if (n == 0 && e->desc) *desc_p = e->desc;
    return 0;
}

void mp_h5_fail(const char *file, int line, const char *what, const char *h5file)
{
    const char *desc = "no HDF5 error message";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, mp_h5_walk, &desc);
    mp_errorf(file, line, "HDF5 call failed on %s: %s: %s", h5file ? h5file : "?", what, desc);
    H5Eclear2(H5E_DEFAULT);
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
