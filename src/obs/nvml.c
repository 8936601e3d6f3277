/* NVML loaded with dlopen: the energy counter of one GPU (nvml.h). */
#include "nvml.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* NVML's own declarations, as far as they are used (nvml.h of the driver's SDK: the functions have
 * kept these signatures since the _v2 names appeared; return codes are an int-sized enum, 0 =
 * NVML_SUCCESS). */
typedef int nvml_return_t;
typedef struct nvml_device_s *nvml_device_t;
typedef nvml_return_t (*nvml_init_fn)(void);
typedef nvml_return_t (*nvml_shutdown_fn)(void);
typedef nvml_return_t (*nvml_by_bus_fn)(const char *bus_id, nvml_device_t *device);
typedef nvml_return_t (*nvml_energy_fn)(nvml_device_t device, unsigned long long *mj);
typedef const char *(*nvml_error_fn)(nvml_return_t result);

enum { NV_INIT, NV_SHUTDOWN, NV_BY_BUS, NV_ENERGY, NV_ERROR, NV_COUNT };
static const char *const nvml_names[NV_COUNT] = {"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetHandleByPciBusId_v2",
                                                 "nvmlDeviceGetTotalEnergyConsumption", "nvmlErrorString"};

/* A function pointer from dlsym's void * (memcpy: C11 has no conversion between the two). */
#define NV_FN(nv, type, k) ((type)nvml_fn_of((nv)->fn[k]))
typedef void (*nvml_any_fn)(void);
static nvml_any_fn nvml_fn_of(void *p)
{
    nvml_any_fn f;
    memcpy(&f, &p, sizeof f);
    return f;
}

static void nvml_why(char *why_p, size_t n, const char *fmt, ...) MP_PRINTF(3, 4);
static void nvml_why(char *why_p, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why_p, n, fmt, ap);
    va_end(ap);
}

/* NVML's words for rc ("Not Supported"), or the number when even nvmlErrorString is missing. */
static const char *nvml_error(const nvml_t *nv, nvml_return_t rc, char *buf, size_t n)
{
    const char *s = nv->fn[NV_ERROR] ? NV_FN(nv, nvml_error_fn, NV_ERROR)(rc) : NULL;
    if (s) return s;
    snprintf(buf, n, "NVML error %d", rc);
    return buf;
}

int nvml_open(nvml_t *nv, const char *bus_id, char *why_p, size_t n)
{
    memset(nv, 0, sizeof *nv);
    const char *env = getenv("MP_NVML_LIB"), *path = env && *env ? env : "libnvidia-ml.so.1";
    char num[32];
    nvml_return_t rc;
    nvml_device_t dev = NULL;
    dlerror();
    nv->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!nv->lib) {
        const char *e = dlerror();
        nvml_why(why_p, n, "NVML not loadable (%s%s): %s", path, env && *env ? ", from MP_NVML_LIB" : "",
                 e ? e : "dlopen failed");
        return MP_ERR;
    }
    for (int k = 0; k < NV_COUNT; k++) {
        dlerror();
        nv->fn[k] = dlsym(nv->lib, nvml_names[k]);
        if (!nv->fn[k]) { /* nvmlDeviceGetTotalEnergyConsumption came with driver 396 (CUDA 9.2) */
            nvml_why(why_p, n, "%s has no %s (a driver too old for it?)", path, nvml_names[k]);
            goto err_close;
        }
    }
    rc = NV_FN(nv, nvml_init_fn, NV_INIT)();
    if (rc != 0) {
        nvml_why(why_p, n, "nvmlInit_v2 failed: %s", nvml_error(nv, rc, num, sizeof num));
        goto err_close;
    }
    nv->inited = 1;
    rc = NV_FN(nv, nvml_by_bus_fn, NV_BY_BUS)(bus_id, &dev);
    if (rc != 0) {
        nvml_why(why_p, n, "nvmlDeviceGetHandleByPciBusId_v2(%s) failed: %s", bus_id,
                 nvml_error(nv, rc, num, sizeof num));
        goto err_close;
    }
    nv->device = dev;
    return MP_OK;
err_close:
    nvml_close(nv);
    return MP_ERR;
}

int nvml_energy_mj(const nvml_t *nv, unsigned long long *mj_p, char *why_p, size_t n)
{
    char num[32];
    unsigned long long mj = 0;
    if (!nv->lib || !nv->device) {
        nvml_why(why_p, n, "NVML is not open");
        return MP_ERR;
    }
    nvml_return_t rc = NV_FN(nv, nvml_energy_fn, NV_ENERGY)((nvml_device_t)nv->device, &mj);
    if (rc != 0) { /* "Not Supported" before Volta */
        nvml_why(why_p, n, "nvmlDeviceGetTotalEnergyConsumption failed: %s (the counter needs a Volta or newer GPU)",
                 nvml_error(nv, rc, num, sizeof num));
        return MP_ERR;
    }
    *mj_p = mj;
    return MP_OK;
}

void nvml_close(nvml_t *nv)
{
    if (nv->inited) NV_FN(nv, nvml_shutdown_fn, NV_SHUTDOWN)(); /* its status changes nothing here */
    if (nv->lib) dlclose(nv->lib);
    memset(nv, 0, sizeof *nv);
}

int nvml_bus_id_normalise(const char *in, char *out_p, size_t n)
{
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    char end = 0;
    if (sscanf(in, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &end) != 4 || bus > 0xff || dev > 0x1f || fn > 7) {
        snprintf(out_p, n, "%s", in);
        return MP_ERR;
    }
    snprintf(out_p, n, "%08x:%02x:%02x.%x", dom, bus, dev, fn);
    return MP_OK;
}
