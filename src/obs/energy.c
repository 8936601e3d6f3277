#include "energy.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "check.h"

/* Joules of powercap package zone 0, or -1 when not readable (containers and VMs often hide it). */
static double energy_rapl(void)
{
    FILE *f = fopen("/sys/class/powercap/intel-rapl:0/energy_uj", "r");
    unsigned long long uj = 0;
    int ok = f && fscanf(f, "%llu", &uj) == 1;
    if (f) fclose(f);
    return ok ? 1e-6 * (double)uj : -1.0;
}

static double energy_unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double energy_cpu_seconds(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0) return 0.0;
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

void energy_start(energy_t *e, const char *gpu_bus_id)
{
    memset(e, 0, sizeof *e);
    e->rapl_j0 = energy_rapl();
    e->cpu_s0 = energy_cpu_seconds();
    e->t0_unix = energy_unix_now();
    if (!gpu_bus_id || !*gpu_bus_id) return;
    /* an id of another form is kept as given: NVML may still know it, and ranks compare it as is */
    nvml_bus_id_normalise(gpu_bus_id, e->gpu_bus, sizeof e->gpu_bus);
    if (nvml_open(&e->nvml, e->gpu_bus, e->gpu_why, sizeof e->gpu_why) != MP_OK) return;
    if (nvml_energy_mj(&e->nvml, &e->gpu_mj0, e->gpu_why, sizeof e->gpu_why) != MP_OK) {
        nvml_close(&e->nvml);
        return;
    }
    e->gpu_ok = 1;
}

int energy_gpu_counts(const char *ids, int n, int me)
{
    const char *mine = ids + (size_t)me * NVML_BUS_ID_LEN;
    if (me < 0 || me >= n || !*mine) return 0;
    for (int i = 0; i < me; i++)
        if (!strncmp(ids + (size_t)i * NVML_BUS_ID_LEN, mine, NVML_BUS_ID_LEN)) return 0;
    return 1;
}

/* RAPL counts a whole package: only the first rank of each node reports it (wrap-around of the
 * counter over a run is not handled: such a run reports the estimate instead). Collective. */
static void energy_host(const energy_t *e, MPI_Comm comm, MPI_Comm node, energy_use_t *u)
{
    double r = energy_rapl(), rapl = e->rapl_j0 >= 0 && r >= e->rapl_j0 ? r - e->rapl_j0 : -1.0;
    double est = ENERGY_WATTS_PER_CORE * (energy_cpu_seconds() - e->cpu_s0);
    int node_rank = 0, have = rapl >= 0, all_have = 0;
    MPI_CHECK(MPI_Comm_rank(node, &node_rank));
    MPI_CHECK(MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, comm));
    double mine = all_have ? (node_rank == 0 ? rapl : 0.0) : est;
    MPI_CHECK(MPI_Allreduce(&mine, &u->host_j, 1, MPI_DOUBLE, MPI_SUM, comm));
    u->host_measured = all_have;
}

/* This rank's GPU joules since energy_start into *j_p; MP_ERR with e->gpu_why when unreadable. */
static int energy_gpu_delta(energy_t *e, double *j_p)
{
    unsigned long long mj = 0;
    if (!e->gpu_ok) return MP_ERR;
    if (nvml_energy_mj(&e->nvml, &mj, e->gpu_why, sizeof e->gpu_why) != MP_OK) return MP_ERR;
    if (mj < e->gpu_mj0) { /* the counter restarts only when the driver is reloaded */
        snprintf(e->gpu_why, sizeof e->gpu_why, "the NVML energy counter of %s went back (%llu mJ at start, %llu at "
                 "the end: the driver was reloaded?)", e->gpu_bus, e->gpu_mj0, mj);
        return MP_ERR;
    }
    *j_p = 1e-3 * (double)(mj - e->gpu_mj0);
    return MP_OK;
}

/* Each GPU once: the lowest rank of its node naming it adds its counter's difference. Any counted GPU
 * unreadable makes the whole GPU part unmeasured, with that rank's reason. Collective. */
static void energy_gpu(energy_t *e, MPI_Comm comm, MPI_Comm node, energy_use_t *u)
{
    int rank = 0, nsize = 0, nrank = 0;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(node, &nsize));
    MPI_CHECK(MPI_Comm_rank(node, &nrank));
    char *ids = MP_CALLOC((size_t)nsize, NVML_BUS_ID_LEN);
    if (!ids) MP_ABORT("out of memory gathering the node's GPU bus ids");
    MPI_CHECK(MPI_Allgather(e->gpu_bus, NVML_BUS_ID_LEN, MPI_CHAR, ids, NVML_BUS_ID_LEN, MPI_CHAR, node));
    const int counts = energy_gpu_counts(ids, nsize, nrank);
    free(ids);
    double j = 0.0;
    const int ok = counts ? energy_gpu_delta(e, &j) == MP_OK : 1;
    int wanted = e->gpu_bus[0] != 0, bad = ok ? INT_MAX : rank;
    double mine[2] = {ok && counts ? j : 0.0, counts}, sum[2] = {0, 0};
    MPI_CHECK(MPI_Allreduce(&wanted, &u->gpu_wanted, 1, MPI_INT, MPI_MAX, comm));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MIN, comm));
    MPI_CHECK(MPI_Allreduce(mine, sum, 2, MPI_DOUBLE, MPI_SUM, comm));
    if (bad != INT_MAX) {
        if (snprintf(u->gpu_why, sizeof u->gpu_why, "rank %d: %s", rank, e->gpu_why) < 0) /* a long one is cut */
            u->gpu_why[0] = 0;
        MPI_CHECK(MPI_Bcast(u->gpu_why, sizeof u->gpu_why, MPI_CHAR, bad, comm));
        return;
    }
    u->gpu_measured = u->gpu_wanted;
    u->gpus = u->gpu_measured ? (int)sum[1] : 0;
    u->gpu_j = u->gpu_measured ? sum[0] : 0.0;
}

void energy_finish(energy_t *e, MPI_Comm comm, energy_use_t *use_p)
{
    energy_use_t u;
    memset(&u, 0, sizeof u);
    u.t_start_unix = e->t0_unix;
    u.t_end_unix = energy_unix_now();
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    energy_host(e, comm, node, &u);
    energy_gpu(e, comm, node, &u);
    MPI_CHECK(MPI_Comm_free(&node));
    energy_release(e);
    *use_p = u;
}

void energy_release(energy_t *e)
{
    nvml_close(&e->nvml);
    e->gpu_ok = 0;
}

double energy_total_j(const energy_use_t *u) { return u->host_j + (u->gpu_measured ? u->gpu_j : 0.0); }

int energy_json(const energy_use_t *u, double seconds, long steps, long long tokens, double gco2_per_kwh, char *buf,
                size_t n)
{
    const double total = energy_total_j(u), kwh = total / 3.6e6;
    char gpu_j[40] = "null", j_tok[40] = "null";
    if (u->gpu_measured) snprintf(gpu_j, sizeof gpu_j, "%.17g", u->gpu_j);
    if (tokens > 0) snprintf(j_tok, sizeof j_tok, "%.17g", total / (double)tokens);
    int len = snprintf(buf, n, "{\"seconds\": %.6f, \"steps\": %ld, \"tokens\": %lld, \"host_j\": %.17g, "
                       "\"host_source\": \"%s\", \"gpu_j\": %s, \"gpu_source\": %s, \"gpus\": %d, \"total_j\": %.17g, "
                       "\"j_per_token\": %s, \"kwh\": %.17g, \"co2_g\": %.17g, \"t_start_unix\": %.3f, "
                       "\"t_end_unix\": %.3f}\n",
                       seconds, steps, tokens, u->host_j, u->host_measured ? "rapl" : "estimate", gpu_j,
                       u->gpu_measured ? "\"nvml\"" : "null", u->gpus, total, j_tok, kwh, kwh * gco2_per_kwh,
                       u->t_start_unix, u->t_end_unix);
    return len >= 0 && (size_t)len < n ? MP_OK : MP_ERR;
}
