/* Wall-clock timers and the per-category step profile. */
#ifndef MP_PERF_H
#define MP_PERF_H

/* Seconds from a monotonic clock. */
double perf_now(void);

/* Seconds of CPU time the calling thread has run: time it spent preempted is not in it. The
 * profile's clock when its kernels run on that one thread (mindpipe profile, docs/PLAN.md). */
double perf_thread_cpu_now(void);


/* Where a step's time goes, from the executor's own timers (wall time around each kernel call). */
typedef enum {
    PROF_MATMUL,       /* dense products (BLAS); at tp = 1 the head whole, its softmax with its product */
    PROF_ATTENTION,    /* attention forward/backward (batched products + softmax) */
    PROF_ELEMENTWISE,  /* LayerNorm, GELU, embedding (the residual add is inside the products) */
    PROF_XENT,         /* LM-head softmax cross-entropy, vocab-parallel (tp > 1) */
    PROF_OPTIMIZER,    /* AdamW, gradient norm */
    PROF_COUNT
} prof_cat_t;

typedef struct {
    double seconds[PROF_COUNT];
    double total;      /* wall time of the profiled steps (the rest is framework overhead) */
    long steps;
    double recompute;  /* of the above: re-run forwards (memory.policy recompute, selective) */
    /* The timeline's hook for spans the model marks itself (a recomputation), [t0, now); NULL:
     * none. The executor sets it before each pass. */
    void (*span)(void *ctx, const char *name, double t0);
    void *span_ctx;
} prof_t;

extern const char *const prof_names[PROF_COUNT];

/* Times `call` into p->seconds[cat] when p is not NULL. */
#define PROF(p, cat, call)                                   \
    do {                                                     \
        if (p) {                                             \
            double prof_t0_ = perf_now();                    \
            call;                                            \
            (p)->seconds[cat] += perf_now() - prof_t0_;      \
        } else {                                             \
            call;                                            \
        }                                                    \
    } while (0)

#endif
