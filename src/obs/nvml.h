/* One GPU's total-energy counter through NVML (ARCHITECTURE.md §9), loaded at run time.
 *
 * NVML ships with the NVIDIA driver, not with the CUDA toolkit, so a build machine without a driver
 * has no libnvidia-ml to link against: the library is dlopen'ed ("libnvidia-ml.so.1", or the path in
 * the environment variable MP_NVML_LIB, which the tests point at a fake) and the five functions used
 * are looked up by name. No nvml.h: the few types are declared in nvml.c.
 *
 * The GPU is named by its PCI bus id (what cudaDeviceGetPCIBusId gives): CUDA and NVML may number
 * the devices differently (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER), the bus id is the same in both.
 * The counter (nvmlDeviceGetTotalEnergyConsumption) is in millijoules since the driver was loaded;
 * Volta and newer have it. */
#ifndef MP_NVML_H
#define MP_NVML_H

#include <stddef.h>

/* Longest bus id kept, with its NUL ("00000000:3b:00.0" is 16 characters). */
#define NVML_BUS_ID_LEN 32

typedef struct {
    void *lib;    /* dlopen handle; NULL when closed */
    void *fn[5];  /* nvmlInit_v2, nvmlShutdown, nvmlDeviceGetHandleByPciBusId_v2,
                     nvmlDeviceGetTotalEnergyConsumption, nvmlErrorString */
    int inited;   /* nvmlInit_v2 succeeded: nvml_close calls nvmlShutdown */
    void *device; /* nvmlDevice_t of the bus id */
} nvml_t;

/* Loads NVML, initialises it and finds the GPU at bus_id. MP_OK, or MP_ERR with why_p (n bytes) saying
 * what failed in NVML's words (library not loadable, a function missing, init failing, no such
 * device) and nothing left open. Prints nothing: a run without NVML goes on (the caller says so). */
int nvml_open(nvml_t *nv, const char *bus_id, char *why_p, size_t n);
/* The GPU's energy counter in millijoules into *mj_p. MP_OK, or MP_ERR with why_p (the GPU is older
 * than Volta, the driver lost it). */
int nvml_energy_mj(const nvml_t *nv, unsigned long long *mj_p, char *why_p, size_t n);
/* Shuts NVML down and unloads it; nothing for a closed nv. */
void nvml_close(nvml_t *nv);

/* A bus id in one spelling, "%08x:%02x:%02x.%x" (domain:bus:device.function, lower case), into out_p
 * (n bytes), so that ids from CUDA ("0000:3B:00.0") and NVML ("00000000:3B:00.0") compare equal.
 * MP_OK, or MP_ERR when `in` is not of that form (out_p then holds `in` as given). */
int nvml_bus_id_normalise(const char *in, char *out_p, size_t n);

#endif
