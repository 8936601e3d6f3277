/* Error reporting and return-code checks shared by every module.
 *
 * Contract: setup and I/O functions return MP_OK (0) or MP_ERR (-1) and report what went wrong
 * once, at the place it went wrong, through mp_errorf (which names the rank, file and line).
 * Callers propagate MP_ERR without printing again. A fatal error inside a collective phase calls
 * mp_abort, which runs MPI_Abort: one rank exiting alone would leave its peers hanging. */
#ifndef MP_CHECK_H
#define MP_CHECK_H

#include <stddef.h>

#define MP_OK 0
#define MP_ERR (-1)

#if defined(__GNUC__)
#define MP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define MP_NORETURN __attribute__((noreturn))
#else
#define MP_PRINTF(a, b)
#define MP_NORETURN
#endif

/* Prints "mindpipe: error: [rank R] message (file:line)" to stderr. */
void mp_errorf(const char *file, int line, const char *fmt, ...) MP_PRINTF(3, 4);
/* Prints a warning line in the same format. */
void mp_warnf(const char *file, int line, const char *fmt, ...) MP_PRINTF(3, 4);
/* Reports like mp_errorf, then ends the job: the abort installed by mp_check_set_abort (MPI_Abort of
 * the whole job once MPI is up: comm/mpi_check.h), else exit(1). */
MP_NORETURN void mp_abortf(const char *file, int line, const char *fmt, ...) MP_PRINTF(3, 4);

/* The rank used in messages; set once MPI is up (-1 before). */
void mp_check_set_rank(int rank);
/* What mp_abortf calls after reporting (NULL: nothing, then exit(1)). */
void mp_check_set_abort(void (*abort_fn)(void));

#define MP_ERROR(...) mp_errorf(__FILE__, __LINE__, __VA_ARGS__)
#define MP_WARN(...) mp_warnf(__FILE__, __LINE__, __VA_ARGS__)
#define MP_ABORT(...) mp_abortf(__FILE__, __LINE__, __VA_ARGS__)
/* Report and evaluate to MP_ERR: `return MP_FAIL("bad %s", x);` */
#define MP_FAIL(...) (mp_errorf(__FILE__, __LINE__, __VA_ARGS__), MP_ERR)

/* MPI calls: a failed MPI call is fatal for the whole job (its peers are in the same collective).
 * mp_mpi_fail lives with the MPI code (comm/mpi_check.c), so core links without MPI. */
#define MPI_CHECK(call)                                                              \
    do {                                                                             \
        int mp_mpi_rc_ = (call);                                                     \
        if (mp_mpi_rc_ != 0) mp_mpi_fail(__FILE__, __LINE__, #call, mp_mpi_rc_);     \
    } while (0)
MP_NORETURN void mp_mpi_fail(const char *file, int line, const char *what, int rc);

/* HDF5 calls return a negative hid_t/herr_t on failure. H5_TRY reports the call, the file it
 * was working on and HDF5's own error stack, then jumps to the cleanup label. mp_h5_fail lives with
 * the HDF5 code (ckpt/h5util.c). */
#define H5_TRY(call, label, fname)                                                   \
    do {                                                                             \
        if ((long long)(call) < 0) {                                                 \
            mp_h5_fail(__FILE__, __LINE__, #call, (fname));                          \
            goto label;                                                              \
        }                                                                            \
    } while (0)
void mp_h5_fail(const char *file, int line, const char *what, const char *h5file);

/* debug.fail_at's stops (:hang, :stall, :migrate): the process stops (SIGSTOP) and stays stopped. A
 * launcher may continue a stopped task (Slurm's slurmstepd did, under test_zero_loss_slurm: the
 * "hung" rank ran on for a step before the test killed its node, and the survivors' step moved);
 * a continued process stops again at once. Only SIGKILL ends it. */
MP_NORETURN void mp_stop_for_good(void);

/* Allocation that reports (with the byte count) and returns NULL on failure. */
void *mp_malloc(size_t bytes, const char *file, int line);
void *mp_calloc(size_t n, size_t size, const char *file, int line);
#define MP_MALLOC(bytes) mp_malloc((bytes), __FILE__, __LINE__)
#define MP_CALLOC(n, size) mp_calloc((n), (size), __FILE__, __LINE__)

#endif
