/* The run directory's logs (ARCHITECTURE.md §1): log.txt (everything printed to the console), metrics.jsonl
 * (one JSON object per logged step) and the progress line. Rank 0 writes; other ranks hold a
 * runlog whose files are NULL. */
#ifndef MP_RUNLOG_H
#define MP_RUNLOG_H

#include <stdio.h>

#include "check.h"

typedef struct {
    FILE *log;       /* log.txt, appended */
    FILE *metrics;   /* metrics.jsonl, appended */
    int quiet;       /* no console output (tests) */
    int failed_log, failed_metrics; /* a write to that file failed: said, and nothing more is written to
                                      it (its last line may be torn: a resume cuts or ends it) */
} runlog_t;

/* Opens (appending) dir/log.txt and dir/metrics.jsonl, never through a link (publish_file_open).
 * MP_OK or MP_ERR naming the file. */
int runlog_open(runlog_t *r, const char *dir);
void runlog_close(runlog_t *r);

/* Prints a line to stdout and log.txt. */
void runlog_printf(runlog_t *r, const char *fmt, ...) MP_PRINTF(2, 3);

/* One metrics.jsonl line; the caller formats the JSON object's members (without braces). */
void runlog_metrics(runlog_t *r, const char *fmt, ...) MP_PRINTF(2, 3);

#endif
