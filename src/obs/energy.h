/* Energy and CO2 of a run (ARCHITECTURE.md §9). The host part is measured from RAPL (powercap's
 * package counters) where this machine exposes them, else estimated from CPU time at a stated power
 * per busy core; on GPUs (train.device = cuda) NVML's total-energy counter of each GPU is added,
 * each GPU counted once however many ranks share it. Energy is summed over all ranks; CO2 = kWh ×
 * [cost] grid_gco2_per_kwh.
 *
 * The layer knows nothing of CUDA: the caller names this rank's GPU by its PCI bus id (the cuda
 * backend's be_gpu_bus_id), or passes NULL. */
#ifndef MP_ENERGY_H
#define MP_ENERGY_H

#include <mpi.h>
#include <stddef.h>

#include "nvml.h"

/* The estimate's assumption, in the log line whenever it is used. */
#define ENERGY_WATTS_PER_CORE 10.0
#define ENERGY_WHY_LEN 256

typedef struct {
    double rapl_j0;                 /* RAPL reading at start (joules), < 0 when unreadable */
    double cpu_s0;                  /* process CPU seconds at start */
    double t0_unix;                 /* wall clock at start (seconds since the epoch) */
    char gpu_bus[NVML_BUS_ID_LEN];  /* this rank's GPU, normalised (nvml.h); "" = none */
    nvml_t nvml;                    /* open while gpu_ok */
    unsigned long long gpu_mj0;     /* its counter at start (millijoules) */
    int gpu_ok;                     /* NVML opened and read at start */
    char gpu_why[ENERGY_WHY_LEN];   /* gpu_bus set and !gpu_ok: why */
} energy_t;

/* A run's energy, the same on every rank (energy_finish). */
typedef struct {
    double host_j;                  /* every rank's host part (RAPL: once per node) */
    int host_measured;              /* 1: RAPL on every rank; 0: the CPU-time estimate */
    int gpu_wanted;                 /* some rank named a GPU */
    int gpu_measured;               /* ... and every counted GPU was read by NVML at start and end */
    int gpus;                       /* distinct GPUs in gpu_j; 0 when not measured */
    double gpu_j;                   /* their energy; 0 when not measured */
    char gpu_why[ENERGY_WHY_LEN];   /* gpu_wanted && !gpu_measured: the first failing rank's reason */
    double t_start_unix, t_end_unix; /* this rank's wall clock at the readings: an outside meter (the
                                      * bring-up's NVML sampler) integrates over the same window */
} energy_use_t;

/* Readings at the start of the run. gpu_bus_id: this rank's GPU (any spelling of
 * domain:bus:device.function), or NULL / "" for none. A GPU whose counter cannot be read is not an
 * error: energy_finish reports why. Not collective. */
void energy_start(energy_t *e, const char *gpu_bus_id);
/* Readings at the end, summed over comm into *use_p (collective; the same result on every rank).
 * A GPU is counted by the lowest rank of its node that names its bus id. Closes NVML. */
void energy_finish(energy_t *e, MPI_Comm comm, energy_use_t *use_p);
/* Releases what energy_start opened (NVML) without reporting; nothing after energy_finish. */
void energy_release(energy_t *e);
/* host_j plus gpu_j when measured. */
double energy_total_j(const energy_use_t *u);

/* Whether rank `me` of a node counts its GPU: ids holds the n ranks' normalised bus ids,
 * NVML_BUS_ID_LEN bytes each; 1 when ids[me] is not empty and no lower rank holds the same one. */
int energy_gpu_counts(const char *ids, int n, int me);

/* RUN/energy.json's text into buf (n bytes): {"seconds", "steps", "tokens", "host_j", "host_source",
 * "gpu_j", "gpu_source", "gpus", "total_j", "j_per_token", "kwh", "co2_g", "t_start_unix", "t_end_unix"} (ARCHITECTURE.md §9; null
 * where there is nothing: no GPU measured, no tokens). MP_OK, or MP_ERR when it does not fit. */
int energy_json(const energy_use_t *u, double seconds, long steps, long long tokens, double gco2_per_kwh, char *buf,
                size_t n);

#endif
