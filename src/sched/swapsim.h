/* The swap simulator (ARCHITECTURE.md §6, docs/MEMORY.md "Coordinated swapping (simulated)"): the
 * ranks of one node share its host link, so their offloads (device to host) and prefetches (host to
 * device) contend for it. This runs one training step of every rank of a node against a cost model
 * of that link and compares two ways of using it:
 *   uncoordinated: every rank's copy engine starts a copy as soon as its list says;
 *   coordinated:   a node-level arbiter grants each direction to one copy at a time (first come,
 *                  first served), so no two ranks move data the same way at once while one may swap
 *                  out as another swaps in: what memory.coordinate = 1 does (src/comm/nodelink.c).
 * It stands in for a measurement this machine cannot make (no GPU, no shared PCIe link).
 *
 * The link is full duplex, bw bytes/s in each direction. k copies active in one direction share
 * bw·eff(k), equally, with eff(k) = 1 / (1 + alpha·(k − 1)): eff(1) = 1, and alpha is the
 * throughput lost to contention, a model parameter (docs/MEMORY.md says why its default).
 *
 * A rank's step is one stage's 1F1B list (schedule.h) with offload's instructions inserted as the
 * executor inserts them: OFFLOAD(mb) of `bytes` right after FORWARD(mb), PREFETCH(mb) `prefetch`
 * compute instructions before BACKWARD(mb) (never before its OFFLOAD). The compute stream is in
 * order; copies overlap it; a BACKWARD waits for its PREFETCH; a FORWARD needs one of the rank's
 * `buffers` device stash buffers, which its OFFLOAD gives back only when the copy ends (so a late
 * offload stalls a later forward); a PREFETCH takes a buffer when its copy leaves the rank's queue
 * (coordinated: before the link is granted) and its BACKWARD gives it back. Messages between stages are free. Deterministic: no randomness, fixed orders. */
#ifndef MP_SWAPSIM_H
#define MP_SWAPSIM_H

#include <stdio.h>

#define SWAPSIM_MAX_RANKS 64

/* The two directions of the host link, numbered as nodelink.h numbers its locks. */
enum { SWAPSIM_D2H = 0, SWAPSIM_H2D = 1 };

typedef enum {
    /* The node holds one pipeline: rank r is stage r of pp = ranks stages, a forward waits for the
     * previous stage's forward of its micro-batch and a backward for the next stage's backward. */
    SWAPSIM_PIPELINE,
    /* The node holds `ranks` data-parallel replicas of one stage `stage` of a pp-stage pipeline whose
     * other stages are on other nodes: every rank runs the same list, and its inputs arrive when a
     * swap-free pipeline would send them (the other nodes are not slowed, to isolate this one). */
    SWAPSIM_REPLICAS
} swapsim_layout_t;

typedef struct {
    swapsim_layout_t layout;
    int ranks;      /* R: ranks of the node, sharing its host link (1..SWAPSIM_MAX_RANKS) */
    int pp, stage;  /* SWAPSIM_REPLICAS only: the pipeline's depth and the stage the node runs */
    int m;          /* micro-batches per step */
    double tf, tb;  /* seconds of one micro-batch's forward and backward on one stage */
    double bytes;   /* bytes one micro-batch's stash moves each way (offload, then prefetch) */
    double bw;      /* bytes/s of the node's host link in each direction */
    double alpha;   /* contention: k same-direction copies share bw / (1 + alpha·(k − 1)) */
    int prefetch;   /* PREFETCH this many compute instructions before its BACKWARD (memory.prefetch
                     * counts every instruction of the list, messages too) */
    int buffers;    /* device stash buffers per rank; 0: as many as the list has on the device at
                     * once (what the executor allocates: then only late copies stall a forward) */
    int engines;    /* copy queues per rank: 1, in order for both directions (MindPipe's copy
                     * engine, copier.h); 2, one per direction (a GPU's two copy engines) */
} swapsim_cfg_t;

typedef struct {
    double step[SWAPSIM_MAX_RANKS];  /* per rank: end of its last compute instruction (seconds) */
    double step_max;                 /* the node's step time: the slowest rank's */
    double wait[SWAPSIM_MAX_RANKS];  /* per rank, the exposed wait: time a compute instruction
                                      * started later than its order and its inputs allowed, for a
                                      * prefetch (backward) or a buffer's offload (forward) */
    double wait_max;                 /* the largest wait[] */
    double busy[2];                  /* per direction: time some copy was moving data */
    double bytes_asked[2];           /* per direction: bytes of every copy the lists asked for */
    double bytes_moved[2];           /* per direction: the integral of the copies' rates */
    int max_same_dir[2];             /* per direction: most copies moving data at one instant */
    char error[160];                 /* why the run failed ("" on success) */
} swapsim_result_t;

/* The defaults docs/MEMORY.md states for `layout` with `ranks` ranks. */
void swapsim_cfg_default(swapsim_cfg_t *cfg, swapsim_layout_t layout, int ranks);

/* eff(k) of the cost model: the share of bw that k concurrent same-direction copies get together. */
double swapsim_eff(double alpha, int k);

/* One step of every rank of the node, coordinated (1) or not (0). MP_OK, or MP_ERR with res->error
 * (bad configuration, allocation, or a deadlock, which would be a bug of the simulator). */
int swapsim_run(const swapsim_cfg_t *cfg, int coordinated, swapsim_result_t *res);

/* A markdown table to f: for R = 2, 4, 8 ranks per node (cfg with ranks = R), the step time
 * uncoordinated and coordinated, the speedup, and each mode's largest exposed wait. MP_OK or MP_ERR
 * (a run failed; its reason printed through mp_errorf). */
int swapsim_table(FILE *f, const swapsim_cfg_t *cfg);

#endif
