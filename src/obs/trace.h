/* The run's timeline (ARCHITECTURE.md §1, §9): spans of what each rank did (micro-batch forwards and
 * backwards, gradient waits, optimizer steps, evaluations, checkpoints), written at the end as
 * trace.json in the Chrome trace format (chrome://tracing, ui.perfetto.dev), one process per rank.
 * Times are from rank 0's monotonic clock origin: exact between ranks of one node, offset between
 * nodes. Recording stops at TRACE_MAX_EVENTS per rank (a note in the file says so), so a long run's
 * trace stays small; its first steps are what a timeline is read for. */
#ifndef MP_TRACE_H
#define MP_TRACE_H

#include <mpi.h>

#define TRACE_MAX_EVENTS 50000

typedef struct {
    const char *name;  /* a static string */
    int mb;            /* micro-batch, -1 when none */
    long step;
    double t0, t1;     /* seconds since the trace began */
    int lane;          /* 0: the rank's main thread; TRACE_LANE_COPY: its copy engine */
    double value;      /* a counter's value (TRACE_COUNTER: t0 = t1 its time) */
} trace_event_t;

/* lane of a counter sample (a value over time, e.g. stash bytes in use) */
#define TRACE_COUNTER (-1)

/* lane of an instant event (a moment, e.g. a live migration's move: Chrome's "i" events, drawn across
 * the whole timeline) */
#define TRACE_INSTANT (-2)

/* The copy engine's spans (offload and prefetch copies) run beside compute: their own row. */
#define TRACE_LANE_COPY 1

typedef struct {
    trace_event_t *ev;
    int n, dropped;
    double origin;
} trace_t;

/* MP_OK or MP_ERR (allocation). Collective over MPI_COMM_WORLD (the time origin is broadcast). */
int trace_init(trace_t *tr);
void trace_free(trace_t *tr);

/* Records a span [t0, now) (t0 from perf_now()). */
void trace_span(trace_t *tr, const char *name, long step, int mb, double t0);
/* Records a counter's value now (Chrome's "C" events: a graph under the rank's rows). */
void trace_counter(trace_t *tr, const char *name, double value);
/* Records an instant event now, at step, with one figure (its args' `value`). */
void trace_instant(trace_t *tr, const char *name, long step, double value);
/* Records a span [t0, t1) (perf_now() times) on lane. */
void trace_span_at(trace_t *tr, const char *name, long step, int mb, double t0, double t1, int lane);

/* Gathers every rank's events to rank 0 of comm, which writes path (through a temporary name).
 * label describes each rank (e.g. "rank 3: dp1 tp1"); collective. MP_OK or MP_ERR on rank 0. */
int trace_write(const trace_t *tr, const char *path, const char *label, MPI_Comm comm);

#endif
