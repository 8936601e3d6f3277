/* Per-kernel times (debug.kernel_times, ARCHITECTURE.md §9): how many times each kernel of
 * be_kernels.h ran in the timed steps and how long it took. backend.c times every be_<kernel> call
 * while kt.on is set, through the backend's pair of hooks (cuda: events on the compute stream,
 * harvested in batches) or, by default, the host clock around the call (cpu, emu: the call is
 * synchronous, so that is the kernel's time). The timing reads no model memory and changes no
 * arithmetic: results are bitwise those of a run without it. */
#ifndef MP_KTIME_H
#define MP_KTIME_H

#include <stddef.h>

#include "be_kernels.h"

/* BE_K_<name>: each kernel's row, in be_kernels.h's order. */
#define KTIME_ENUM(ret, name, params, args) BE_K_##name,
enum { BE_KERNELS(KTIME_ENUM, KTIME_ENUM) BE_K_COUNT };
#undef KTIME_ENUM

extern const char *const ktime_names[BE_K_COUNT];

typedef struct {
    int on;                     /* inside a timed step: be_<kernel> calls are timed */
    double t0;                  /* host clock: when the call under way began */
    long calls[BE_K_COUNT];     /* harvested calls per kernel ... */
    double seconds[BE_K_COUNT]; /* ... and their seconds */
    long steps;                 /* timed steps */
    double wall_s;              /* their wall seconds (host clock, step start to step end) */
    double step_t0;             /* when the step under way began */
} ktime_t;

/* Σ seconds over the kernels. */
double ktime_total(const ktime_t *kt);
/* The kernels by seconds, largest first (ties: more calls first, then be_kernels.h's order). */
void ktime_order(const ktime_t *kt, int order_p[BE_K_COUNT]);
/* RUN/kernel_times.r<rank>.json's text into buf (n bytes): {"device", "timer", "rank", "from_step",
 * "steps", "wall_s", "total_s", "kernels": [{"name", "calls", "seconds"}, ...]}, one row per kernel of
 * be_kernels.h in ktime_order. MP_OK, or MP_ERR when it does not fit. */
int ktime_json(const ktime_t *kt, const char *device, const char *timer, int rank, int from_step, char *buf, size_t n);

#endif
