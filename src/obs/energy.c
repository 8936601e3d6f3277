#include "energy.h"

#include <stdio.h>
#include <sys/resource.h>

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

static double energy_cpu_seconds(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0) return 0.0;
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

void energy_start(energy_t *e)
{
    e->rapl_j0 = energy_rapl();
    e->cpu_s0 = energy_cpu_seconds();
}

double energy_joules(const energy_t *e, MPI_Comm comm, int *measured_p)
{
    /* RAPL counts a whole package: only the first rank of each node reports it (wrap-around of
     * the counter over a run is not handled: such a run reports the estimate instead) */
    double r = energy_rapl(), rapl = e->rapl_j0 >= 0 && r >= e->rapl_j0 ? r - e->rapl_j0 : -1.0;
    double est = ENERGY_WATTS_PER_CORE * (energy_cpu_seconds() - e->cpu_s0);
    int node_rank = 0, have = rapl >= 0, all_have = 0;
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &node_rank));
    MPI_CHECK(MPI_Comm_free(&node));
    MPI_CHECK(MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, comm));
    double mine = all_have ? (node_rank == 0 ? rapl : 0.0) : est, total = 0.0;
    MPI_CHECK(MPI_Allreduce(&mine, &total, 1, MPI_DOUBLE, MPI_SUM, comm));
    *measured_p = all_have;
    return total;
}
