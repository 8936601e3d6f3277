/* Energy and CO2 of a run (ARCHITECTURE.md §9). Measured from RAPL (powercap's package counters) where this
 * machine exposes them, else estimated from CPU time at a stated power per busy core. Energy is
 * summed over all ranks; CO2 = kWh × [cost] grid_gco2_per_kwh. */
#ifndef MP_ENERGY_H
#define MP_ENERGY_H

#include <mpi.h>

/* The estimate's assumption, in the log line whenever it is used. */
#define ENERGY_WATTS_PER_CORE 10.0

typedef struct {
    double rapl_j0;  /* RAPL reading at start (joules), < 0 when unreadable */
    double cpu_s0;   /* process CPU seconds at start */
} energy_t;

void energy_start(energy_t *e);
/* Joules of this run summed over comm (collective); *measured_p = 1 when every rank read RAPL. */
double energy_joules(const energy_t *e, MPI_Comm comm, int *measured_p);

#endif
