#include "kern_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Installed once at start by the program that uses the kernels. */
static kern_report_fn kern_reporter;

void kern_set_reporter(kern_report_fn fn) { kern_reporter = fn; }

static void kern_vreport(int fatal, const char *file, int line, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (kern_reporter) {
        kern_reporter(fatal, file, line, msg);
        if (!fatal) return;
    } else {
        fprintf(stderr, "mindpipe: %s: %s (%s:%d)\n", fatal ? "fatal" : "error", msg, file, line);
        fflush(stderr);
    }
    if (fatal) exit(1);
}

void kern_errorf(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kern_vreport(0, file, line, fmt, ap);
    va_end(ap);
}

void kern_abortf(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kern_vreport(1, file, line, fmt, ap);
    va_end(ap);
    exit(1); /* a reporter that returned from a fatal error */
}
