/* Failover timeline (ARCHITECTURE.md §10): instant events in Chrome's trace format (one
 * JSON object a line after a "[" line; the closing "]" is optional in that format), stamped with
 * the wall clock in microseconds since the epoch so events written by other processes (a test's
 * kill) merge on one time axis. One writer thread. */
#ifndef MP_EVTRACE_H
#define MP_EVTRACE_H

#include <stdio.h>

typedef struct {
    FILE *f;
} evtrace_t;

/* Opens path (emptied) for appending events, never through a link and only a regular file
 * (publish_file_open); NULL path: a trace that records nothing. MP_OK or MP_ERR naming path. */
int evtrace_open(evtrace_t *t, const char *path);
/* One instant event `name` with args, a JSON object's members ("" none); flushed at once so a
 * reader sees it while the server runs. */
void evtrace_event(evtrace_t *t, const char *name, const char *args);
void evtrace_close(evtrace_t *t);
/* The wall clock in microseconds (the events' time axis). */
double evtrace_now_us(void);

#endif
