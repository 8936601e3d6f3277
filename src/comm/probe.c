#include "probe.h"

#include <mpi.h>
#include <stdlib.h>

#include "check.h"
#include "perf.h"

static double fastest(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

/* Ping-pong between ranks 0 and 1 and all-reduces over the world, each size `reps` times,
 * the fastest kept (as for the compute: a descheduled peer only slows a message down); bandwidth
 * from the largest size once the small one's time is taken off (when noise leaves nothing to take
 * off, the large size's plain rate). The ping-pong's large size is an activation's order (4 MiB);
 * the all-reduce's is a gradient bucket's (64 MiB, beyond the caches): MPICH's all-reduce of
 * 2 ranks here moved 2.4 GB/s at 4 MiB but 0.25 at 64 MiB and 0.18 at 256 MiB (2026-11-26,
 * host loaded), so a cache-sized probe priced a 124M model's 500 MB of gradients far too low. */
void probe_run(const wait_cfg_t *w, int reps, probe_t *p)
{
    enum { SMALL = 2, P2P = 1 << 20, REDUCE = 1 << 24 }; /* floats: 8 bytes, 4 MiB, 64 MiB */
    int rank, world;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    reps = reps < 1 ? 1 : reps > PROBE_REPS_MAX ? PROBE_REPS_MAX : reps;
    float *buf = calloc(REDUCE, sizeof(float));
    if (!buf) MP_ABORT("out of memory in the MPI probe");
    double t[2][PROBE_REPS_MAX], a[2][PROBE_REPS_MAX];
    for (int z = 0; z < 2; z++) {
        const int n = z ? P2P : SMALL, nr = z ? REDUCE : SMALL;
        for (int r = 0; r < reps; r++) {
            wait_barrier(w, MPI_COMM_WORLD, "the probe's barrier");
            double t0 = perf_now();
            if (world > 1 && rank < 2) {
                MPI_Request q;
                if (rank == 0) {
                    MPI_CHECK(MPI_Isend(buf, n, MPI_FLOAT, 1, 7, MPI_COMM_WORLD, &q));
                    wait_all(w, 1, &q, "the probe's ping");
                    MPI_CHECK(MPI_Irecv(buf, n, MPI_FLOAT, 1, 8, MPI_COMM_WORLD, &q));
                    wait_all(w, 1, &q, "the probe's pong");
                } else {
                    MPI_CHECK(MPI_Irecv(buf, n, MPI_FLOAT, 0, 7, MPI_COMM_WORLD, &q));
                    wait_all(w, 1, &q, "the probe's ping");
                    MPI_CHECK(MPI_Isend(buf, n, MPI_FLOAT, 0, 8, MPI_COMM_WORLD, &q));
                    wait_all(w, 1, &q, "the probe's pong");
                }
            }
            t[z][r] = (perf_now() - t0) / 2.0;
            wait_barrier(w, MPI_COMM_WORLD, "the probe's barrier");
            t0 = perf_now();
            wait_allreduce_sum(w, buf, nr, MPI_FLOAT, MPI_COMM_WORLD, "the probe's all-reduce");
            a[z][r] = perf_now() - t0;
        }
    }
    const double ts = fastest(t[0], reps), tl = fastest(t[1], reps);
    const double as = fastest(a[0], reps), al = fastest(a[1], reps);
    p->ranks = world;
    p->p2p_lat = world > 1 ? ts : 0.0, p->p2p_bw = world > 1 ? 4.0 * P2P / (tl > ts ? tl - ts : tl) : 0.0;
    p->ar_lat = world > 1 ? as : 0.0, p->ar_bw = world > 1 ? 4.0 * REDUCE / (al > as ? al - as : al) : 0.0;
    free(buf);
}

