#include "runlog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "publish.h"

/* A run that ended on a failed write (a full disk) can leave its last line torn: the resume would
 * append its first record to it, and a metrics.jsonl line holding half an object and a whole one
 * parses as neither. A torn tail is cut back to the last whole line (a metric: half a record is
 * garbage) or ended with a newline (log text: the half that reached the disk is still worth
 * reading), and said. MP_OK, or MP_ERR naming the file. */
static int runlog_mend_tail(FILE *f, const char *path, int cut)
{
    const int fd = fileno(f); /* opened to append only: the tail is read through a second descriptor */
    struct stat st, rst;
    if (fstat(fd, &st) != 0) return MP_FAIL("%s: fstat: %s", path, strerror(errno));
    if (st.st_size == 0) return MP_OK;
    const int rfd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (rfd < 0 || fstat(rfd, &rst) != 0 || rst.st_ino != st.st_ino || rst.st_dev != st.st_dev) {
        const int e = errno;
        if (rfd >= 0) close(rfd);
        return MP_FAIL("%s: opening it to read its tail: %s", path, rfd < 0 ? strerror(e) : "another file under the name");
    }
    char buf[4096];
    off_t end = st.st_size, nl = -1;
    while (end > 0 && nl < 0) { /* backwards from the end, a block at a time, to the last newline */
        const off_t at = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
        const ssize_t n = pread(rfd, buf, (size_t)(end - at), at);
        if (n != (ssize_t)(end - at)) {
            const int e = errno;
            close(rfd);
            return MP_FAIL("%s: reading its tail: %s", path, n < 0 ? strerror(e) : "short read");
        }
        if (end == st.st_size && buf[n - 1] == '\n') end = 0, nl = st.st_size - 1; /* whole */
        for (ssize_t i = n - 1; i >= 0 && nl < 0; i--)
            if (buf[i] == '\n') nl = at + i;
        end = nl < 0 ? at : 0;
    }
    close(rfd);
    if (nl == st.st_size - 1) return MP_OK; /* ends in a newline */
    if (cut) {
        if (ftruncate(fd, nl + 1) != 0) return MP_FAIL("%s: cutting its torn last line: %s", path, strerror(errno));
        fprintf(stderr, "mindpipe: warning: %s ended in a torn line of %lld bytes (a write that failed, e.g. a full "
                "disk): cut off\n", path, (long long)(st.st_size - nl - 1));
    } else {
        if (fputc('\n', f) == EOF || fflush(f) != 0) return MP_FAIL("%s: ending its torn last line: %s", path, strerror(errno));
        fprintf(stderr, "mindpipe: warning: %s ended in a torn line (a write that failed, e.g. a full disk): a newline "
                "ends it\n", path);
    }
    return MP_OK;
}

int runlog_open(runlog_t *r, const char *dir)
{
    char path[4200];
    memset(r, 0, sizeof *r);
    snprintf(path, sizeof path, "%s/log.txt", dir);
    if (publish_file_open(path, 1, &r->log) != MP_OK) return MP_ERR; /* never through a link */
    if (runlog_mend_tail(r->log, path, 0) != MP_OK) goto err;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (publish_file_open(path, 1, &r->metrics) != MP_OK) goto err;
    if (runlog_mend_tail(r->metrics, path, 1) != MP_OK) goto err;
    return MP_OK;
err:
    runlog_close(r);
    return MP_ERR;
}

void runlog_close(runlog_t *r)
{
    if (r->log) fclose(r->log);
    if (r->metrics) fclose(r->metrics);
    r->log = r->metrics = NULL;
}

/* A failed write of a log (a full disk) does not stop the training, whose checkpoints say whether
 * they were written; it is said, and nothing more goes to that file: stdio drops what it could not
 * write, so a later line that got through (space freed by a discarded checkpoint) would follow half a
 * line (the campaign's full disk under dualpipev did that to metrics.jsonl). */
static void runlog_check(FILE *f, int *failed, const char *name)
{
    if (fflush(f) == 0 && !ferror(f)) return;
    fprintf(stderr, "mindpipe: warning: writing the run's %s failed (%s): nothing more is written to it in this run\n",
            name, strerror(errno));
    *failed = 1;
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
    if (r->log && !r->failed_log) {
        va_start(ap, fmt);
        vfprintf(r->log, fmt, ap);
        va_end(ap);
        fputc('\n', r->log);
        runlog_check(r->log, &r->failed_log, "log.txt");
    }
}

void runlog_metrics(runlog_t *r, const char *fmt, ...)
{
    if (!r->metrics || r->failed_metrics) return;
    va_list ap;
    fputc('{', r->metrics);
    va_start(ap, fmt);
    vfprintf(r->metrics, fmt, ap);
    va_end(ap);
    fputs("}\n", r->metrics);
    runlog_check(r->metrics, &r->failed_metrics, "metrics.jsonl");
}
