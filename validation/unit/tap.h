/* Minimal TAP for the unit tests: `1..N` is printed at the end (plan at end is valid TAP),
 * every check is one `ok`/`not ok` line, and the exit status is non-zero if any failed. */
#ifndef MP_TAP_H
#define MP_TAP_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

static int tap_n = 0, tap_failed = 0;

static inline int tap_ok(int cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_n++;
    printf("%s %d - ", cond ? "ok" : "not ok", tap_n);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (!cond) tap_failed++;
    return cond;
}

/* Prints a diagnostic line (TAP comment). */
static inline void tap_diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static inline int tap_done(void)
{
    printf("1..%d\n", tap_n);
    return tap_failed ? 1 : 0;
}

#endif
