/* A stand-in for the driver's libnvidia-ml.so.1, for test_energy: built as a shared library that the
 * test names in MP_NVML_LIB (Makefile.am builds two: libfake_nvml.so, and libfake_nvml_noenergy.so,
 * compiled with -DFAKE_NVML_NO_ENERGY, which lacks nvmlDeviceGetTotalEnergyConsumption).
 *
 * Every GPU exists whose bus id parses as domain:bus:device.function with bus < 0x80; the energy
 * counter of bus B advances by a known amount per read: read k (from 0, per process and GPU) returns
 *     1,000,000·(B + 1) + k · 250·(B + 1) millijoules,
 * so the energy between two reads is 0.25·(B + 1) J. The environment bends it:
 *     FAKE_NVML_INIT_FAIL=1    nvmlInit_v2 returns 9 (Driver Not Loaded)
 *     FAKE_NVML_ENERGY_FAIL=1  the counter returns 3 (Not Supported, as on a GPU older than Volta)
 * fake_nvml_live() is the number of nvmlInit_v2 not yet matched by nvmlShutdown (the test checks that
 * every open is closed). The return codes are NVML's. */
#include <stdio.h>
#include <stdlib.h>

enum { OK = 0, ERR_INVALID_ARGUMENT = 2, ERR_NOT_SUPPORTED = 3, ERR_NOT_FOUND = 6, ERR_DRIVER_NOT_LOADED = 9,
       ERR_UNINITIALIZED = 1 };

struct nvmlDevice_st {
    unsigned bus;
    unsigned long long reads;
};

static struct nvmlDevice_st gpus[0x80];
static int live;

static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && *v != '0';
}

int fake_nvml_live(void) { return live; }

int nvmlInit_v2(void)
{
    if (env_on("FAKE_NVML_INIT_FAIL")) return ERR_DRIVER_NOT_LOADED;
    live++;
    return OK;
}

int nvmlShutdown(void)
{
    if (live == 0) return ERR_UNINITIALIZED;
    live--;
    return OK;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, struct nvmlDevice_st **device)
{
    unsigned dom, bus, dev, fn;
    if (live == 0) return ERR_UNINITIALIZED;
    if (!bus_id || !device) return ERR_INVALID_ARGUMENT;
    if (sscanf(bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4 || bus >= 0x80) return ERR_NOT_FOUND;
    gpus[bus].bus = bus;
    *device = &gpus[bus];
    return OK;
}

#ifndef FAKE_NVML_NO_ENERGY
int nvmlDeviceGetTotalEnergyConsumption(struct nvmlDevice_st *device, unsigned long long *mj)
{
    if (live == 0) return ERR_UNINITIALIZED;
    if (!device || !mj) return ERR_INVALID_ARGUMENT;
    if (env_on("FAKE_NVML_ENERGY_FAIL")) return ERR_NOT_SUPPORTED;
    const unsigned long long b = device->bus + 1;
    *mj = 1000000ull * b + device->reads++ * 250ull * b;
    return OK;
}
#endif

const char *nvmlErrorString(int rc)
{
    switch (rc) {
    case OK: return "Success";
    case ERR_UNINITIALIZED: return "Uninitialized";
    case ERR_INVALID_ARGUMENT: return "Invalid Argument";
    case ERR_NOT_SUPPORTED: return "Not Supported";
    case ERR_NOT_FOUND: return "Not Found";
    case ERR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    }
    return "Unknown Error";
}
