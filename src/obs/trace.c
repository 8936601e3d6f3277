#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "perf.h"
#include "publish.h"

int trace_init(trace_t *tr)
{
    memset(tr, 0, sizeof *tr);
    tr->ev = MP_MALLOC(TRACE_MAX_EVENTS * sizeof *tr->ev);
    if (!tr->ev) return MP_ERR;
    /* One origin for all: rank 0's reading of the monotonic clock, which every rank of a node shares
     * (ranks leave a barrier milliseconds apart on an oversubscribed node, so per-rank origins
     * would skew the timeline). Across nodes the clocks are not shared and rows may be offset. */
    tr->origin = perf_now();
    MPI_CHECK(MPI_Bcast(&tr->origin, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    return MP_OK;
}

void trace_free(trace_t *tr)
{
    free(tr->ev);
    tr->ev = NULL;
}

void trace_span_at(trace_t *tr, const char *name, long step, int mb, double t0, double t1, int lane)
{
    if (!tr || !tr->ev) return;
    if (tr->n == TRACE_MAX_EVENTS) {
        tr->dropped++;
        return;
    }
    tr->ev[tr->n++] = (trace_event_t){name, mb, step, t0 - tr->origin, t1 - tr->origin, lane, 0.0};
}

void trace_counter(trace_t *tr, const char *name, double value)
{
    if (!tr || !tr->ev) return;
    const double now = perf_now();
    const int n = tr->n;
    trace_span_at(tr, name, -1, -1, now, now, TRACE_COUNTER);
    if (tr->n > n) tr->ev[n].value = value;
}

void trace_instant(trace_t *tr, const char *name, long step, double value)
{
    if (!tr || !tr->ev) return;
    const double now = perf_now();
    const int n = tr->n;
    trace_span_at(tr, name, step, -1, now, now, TRACE_INSTANT);
    if (tr->n > n) tr->ev[n].value = value;
}

void trace_span(trace_t *tr, const char *name, long step, int mb, double t0)
{
    trace_span_at(tr, name, step, mb, t0, perf_now(), 0);
}

/* One rank's events as JSON objects, each followed by ",\n"; malloc'd, length in *len_p. */
static char *trace_format(const trace_t *tr, int rank, const char *label, size_t *len_p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"%s\"}},\n", rank, label);
    fprintf(f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}},\n", rank, rank);
    int copy_lane = 0;
    for (int i = 0; i < tr->n; i++) copy_lane |= tr->ev[i].lane == TRACE_LANE_COPY;
    if (copy_lane)
        fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"copy engine\"}},\n",
                rank, TRACE_LANE_COPY);
    for (int i = 0; i < tr->n; i++) {
        const trace_event_t *e = &tr->ev[i];
        if (e->lane == TRACE_COUNTER) {
            fprintf(f, "{\"name\":\"%s\",\"ph\":\"C\",\"pid\":%d,\"ts\":%.1f,\"args\":{\"bytes\":%.0f}},\n", e->name,
                    rank, 1e6 * e->t0, e->value);
            continue;
        }
        if (e->lane == TRACE_INSTANT) {
            fprintf(f, "{\"name\":\"%s\",\"ph\":\"i\",\"s\":\"g\",\"pid\":%d,\"ts\":%.1f,\"args\":{\"step\":%ld,"
                    "\"value\":%.0f}},\n", e->name, rank, 1e6 * e->t0, e->step, e->value);
            continue;
        }
        fprintf(f, "{\"name\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.1f,\"dur\":%.1f,\"args\":{\"step\":%ld",
                e->name, rank, e->lane, 1e6 * e->t0, 1e6 * (e->t1 - e->t0), e->step);
        if (e->mb >= 0) fprintf(f, ",\"mb\":%d", e->mb);
        fprintf(f, "}},\n");
    }
    if (tr->dropped)
        fprintf(f, "{\"name\":\"trace full: %d later events not recorded\",\"ph\":\"i\",\"s\":\"p\",\"pid\":%d,\"ts\":%.1f},\n",
                tr->dropped, rank, tr->n ? 1e6 * tr->ev[tr->n - 1].t1 : 0.0);
    fclose(f);
    *len_p = len;
    return buf;
}

/* trace.json from the gathered events (text of len bytes, without the last ",\n"), published
 * atomically. MP_OK or MP_ERR naming the file. */
static int trace_file_write(const char *path, const char *events, size_t len)
{
    char tmp[4300];
    if (publish_tmp_name(path, tmp, sizeof tmp) != MP_OK || publish_tmp_prepare(tmp) != MP_OK) return MP_ERR;
    FILE *f = publish_tmp_fopen(tmp);
    if (!f) return MP_FAIL("cannot write %s", tmp);
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    fwrite(events, 1, len, f);
    fprintf(f, "\n]}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        publish_discard(tmp);
        return MP_FAIL("cannot write %s", tmp);
    }
    return publish_commit(tmp, path);
}

int trace_write(const trace_t *tr, const char *path, const char *label, MPI_Comm comm)
{
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    MPI_CHECK(MPI_Comm_size(comm, &size));
    size_t len = 0;
    char *mine = trace_format(tr, rank, label, &len);
    if (!mine) MP_ABORT("out of memory formatting the trace");
    int n = (int)len, *counts = NULL, *displs = NULL, total = 0;
    char *all = NULL;
    if (rank == 0 && (!(counts = MP_CALLOC((size_t)size, sizeof(int))) || !(displs = MP_CALLOC((size_t)size, sizeof(int)))))
        MP_ABORT("out of memory gathering the trace");
    MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, comm));
    if (rank == 0) {
        for (int r = 0; r < size; r++) displs[r] = total, total += counts[r];
        if (!(all = MP_MALLOC((size_t)total + 1))) MP_ABORT("out of memory gathering the trace");
    }
    MPI_CHECK(MPI_Gatherv(mine, n, MPI_CHAR, all, counts, displs, MPI_CHAR, 0, comm));
    free(mine);
    int rc = MP_OK;
    if (rank == 0) {
        if (total >= 2 && all[total - 2] == ',') total -= 2; /* the last object's ",\n" */
        rc = trace_file_write(path, all, (size_t)total);
    }
    free(all);
    free(counts);
    free(displs);
    return rc;
}
