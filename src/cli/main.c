/* mindpipe: parse the command line and dispatch. The commands that need MPI (CMD_MPI, commands.c) run
 * with or without mpirun (singleton init); the others never initialise it. */
#include <malloc.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "check.h"
#include "commands.h"
#include "gpu_share.h"
#include "device.h"
#include "mpi_check.h"

static void on_init_timeout(int sig)
{
    (void)sig;
    static const char msg[] = "mindpipe: fatal: MPI_Init, or the run's first agreements after it (the deck, the "
                              "grid), did not complete within MINDPIPE_INIT_TIMEOUT seconds (default 600): a rank "
                              "of the job did not start, died or stopped before it; exiting\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

/* MPI_Finalize can hang after the run's results are written (MPICH 4.0.2 over UCX's tcp transport:
 * docs/RELIABILITY.md, "Launchers"): past MINDPIPE_FINALIZE_TIMEOUT seconds (default 300; 0 = none)
 * the process leaves with the command's status. A signal handler sees only statics: this one. */
static volatile sig_atomic_t finalize_status;

static void on_finalize_timeout(int sig)
{
    (void)sig;
    static const char msg[] = "mindpipe: MPI_Finalize did not complete within MINDPIPE_FINALIZE_TIMEOUT seconds "
                              "(default 300; MPICH 4.0.2 can hang there over UCX tcp); leaving with the command's "
                              "status, its results already written\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(finalize_status);
}

/* A whole number of seconds from the environment variable name (unset or empty: def), or exit 2. */
static long env_seconds(const char *name, long def)
{
    const char *v = getenv(name);
    char *end = NULL;
    const long s = v && *v ? strtol(v, &end, 10) : def;
    if (v && *v && (*end || s < 0 || s > 86400)) {
        fprintf(stderr, "mindpipe: %s='%s': seconds in [0, 86400] (0: no limit)\n", name, v);
        exit(2);
    }
    return s;
}

/* MPI for the commands that need it (CMD_MPI): the others never call MPI_Init, so they open none
 * of UCX's transports (its TCP one listens on every interface) and run where MPI cannot start; their
 * fatal errors end in exit(1), not MPI_Abort (check.h). Returns with MPI up, or ends the process. */
static void mpi_start(int *argc, char ***argv, int run)
{
    int provided, rank;
    /* MPI_Init waits for every rank of the job; one that never starts (or stops) would hold it
     * forever, before any deck deadline exists: an alarm bounds it (MINDPIPE_INIT_TIMEOUT seconds,
     * default 600; 0 = none) */
    const long init_timeout = env_seconds("MINDPIPE_INIT_TIMEOUT", 600);
    signal(SIGALRM, on_init_timeout);
    if (init_timeout > 0) alarm((unsigned)init_timeout);
    /* MPI takes a temporary buffer from malloc for every all-reduce (the dp gradient buckets, cut
     * to 16 MiB by dp.c): blocks up to glibc's 32 MiB ceiling come from the heap, and freed heap
     * stays with the process, so a step's buffers are not faulted in again page by page
     * (measured: 0.3 against 3.6 GB/s, dp.c). Tuning only: a libc without them changes no result. */
#ifdef M_MMAP_THRESHOLD
    (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
    (void)mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    /* the NCCL stand-in calls MPI from its progress thread (gpu_share.h) */
    const int level = gpu_share_nccl_standin() ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
    MPI_CHECK(MPI_Init_thread(argc, argv, level, &provided));
    /* a run's first agreements (the deck, the grid) block in MPI too, before its watchdog exists: the
     * deadline lasts until run_layout arms that (mpi_startup_deadline_end) */
    if (!run) mpi_startup_deadline_end();
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    /* errors come back to MPI_CHECK (file, line, MPI's message) instead of MPICH's abort; every
     * communicator made from this one inherits it. A peer's death then surfaces in the wait that
     * polls it, which recovery.log turns into a survivor's snapshot (recovery.h). */
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    mpi_check_init(rank);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        commands_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const command_t *cmd = command_find(argv[1]);
    if (!cmd && strcmp(argv[1], "--version")) {
        fprintf(stderr, "mindpipe: unknown command '%s'\n", argv[1]);
        commands_usage(stderr);
        return 2;
    }
    for (int i = 2; cmd && i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            command_usage(stdout, cmd);
            return 0;
        }
    if (!strcmp(argv[1], "--version")) {
        printf("mindpipe %s\n", PACKAGE_VERSION);
        return 0;
    }
    cli_t cli;
    if (cli_parse(&cli, cmd, argc, argv) != MP_OK) return 2;
    const int with_mpi = cmd->flags & CMD_MPI;
    /* a command without MPI that a launcher started N times would run N times over (N servers, N
     * writers of one file) without knowing it: Hydra and Slurm's PMI say how many they started */
    const char *pmi_size = getenv("PMI_SIZE");
    if (!with_mpi && pmi_size && strtol(pmi_size, NULL, 10) > 1) /* a launcher's own number */
        return MP_ERROR("'%s' runs in one process and without MPI: start it without mpiexec/srun -n (the "
                        "launcher started %s)", argv[1], pmi_size), 2;
    if (with_mpi) mpi_start(&argc, &argv, cmd->flags & CMD_RUN);
    device_report_init();
    int rc = cmd->handler(&cli);
    if (with_mpi) mpi_startup_deadline_end(); /* a run refused before its watchdog */
    if (with_mpi) {
        const long fin_timeout = env_seconds("MINDPIPE_FINALIZE_TIMEOUT", 300);
        finalize_status = rc;
        signal(SIGALRM, on_finalize_timeout);
        if (fin_timeout > 0) alarm((unsigned)fin_timeout);
        MPI_CHECK(MPI_Finalize());
        alarm(0);
    }
    return rc;
}
