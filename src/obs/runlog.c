#include "runlog.h"

#include <stdarg.h>
#include <string.h>

#include "publish.h"

int runlog_open(runlog_t *r, const char *dir)
{
    char path[4200];
    memset(r, 0, sizeof *r);
    snprintf(path, sizeof path, "%s/log.txt", dir);
    if (publish_file_open(path, 1, &r->log) != MP_OK) return MP_ERR; /* never through a link */
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (publish_file_open(path, 1, &r->metrics) != MP_OK) {
        fclose(r->log);
        r->log = NULL;
        return MP_ERR;
    }
    return MP_OK;
}

void runlog_close(runlog_t *r)
{
    if (r->log) fclose(r->log);
    if (r->metrics) fclose(r->metrics);
    r->log = r->metrics = NULL;
}

void runlog_printf(runlog_t *r, const char *fmt, ...)
{
    va_list ap;
    if (!r->quiet) {
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        fputc('\n', stdout);
        fflush(stdout);
    }
    if (r->log) {
        va_start(ap, fmt);
        vfprintf(r->log, fmt, ap);
        va_end(ap);
        fputc('\n', r->log);
        fflush(r->log);
    }
}

void runlog_metrics(runlog_t *r, const char *fmt, ...)
{
    if (!r->metrics) return;
    va_list ap;
    fputc('{', r->metrics);
    va_start(ap, fmt);
    vfprintf(r->metrics, fmt, ap);
    va_end(ap);
    fputs("}\n", r->metrics);
    fflush(r->metrics);
}
