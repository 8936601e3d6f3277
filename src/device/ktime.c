/* Per-kernel times: the table's names, its order and its JSON (ktime.h). */
#include "ktime.h"

#include <stdarg.h>
#include <stdio.h>

#include "check.h"

#define KTIME_NAME(ret, name, params, args) #name,
const char *const ktime_names[BE_K_COUNT] = {BE_KERNELS(KTIME_NAME, KTIME_NAME)};
#undef KTIME_NAME

double ktime_total(const ktime_t *kt)
{
    double s = 0.0;
    for (int k = 0; k < BE_K_COUNT; k++) s += kt->seconds[k];
    return s;
}

/* Whether kernel a goes before kernel b. */
static int ktime_before(const ktime_t *kt, int a, int b)
{
    if (kt->seconds[a] != kt->seconds[b]) return kt->seconds[a] > kt->seconds[b];
    if (kt->calls[a] != kt->calls[b]) return kt->calls[a] > kt->calls[b];
    return a < b;
}

void ktime_order(const ktime_t *kt, int order_p[BE_K_COUNT])
{
    for (int i = 0; i < BE_K_COUNT; i++) { /* insertion sort: about twenty rows */
        int k = i, j = i;
        for (; j > 0 && ktime_before(kt, k, order_p[j - 1]); j--) order_p[j] = order_p[j - 1];
        order_p[j] = k;
    }
}

/* Appends to buf (n bytes) at o; returns the new end, n or more once the text no longer fits. */
static size_t ktime_put(char *buf, size_t n, size_t o, const char *fmt, ...) MP_PRINTF(4, 5);
static size_t ktime_put(char *buf, size_t n, size_t o, const char *fmt, ...)
{
    if (o >= n) return n;
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf + o, n - o, fmt, ap);
    va_end(ap);
    return len < 0 ? n : o + (size_t)len;
}

int ktime_json(const ktime_t *kt, const char *device, const char *timer, int rank, int from_step, char *buf, size_t n)
{
    int order[BE_K_COUNT];
    ktime_order(kt, order);
    size_t o = ktime_put(buf, n, 0, "{\"device\": \"%s\", \"timer\": \"%s\", \"rank\": %d, \"from_step\": %d, "
                         "\"steps\": %ld, \"wall_s\": %.9f, \"total_s\": %.9f, \"kernels\": [", device, timer, rank,
                         from_step, kt->steps, kt->wall_s, ktime_total(kt));
    for (int i = 0; i < BE_K_COUNT; i++)
        o = ktime_put(buf, n, o, "%s\n  {\"name\": \"%s\", \"calls\": %ld, \"seconds\": %.9f}", i ? "," : "",
                      ktime_names[order[i]], kt->calls[order[i]], kt->seconds[order[i]]);
    o = ktime_put(buf, n, o, "\n]}\n");
    return o < n ? MP_OK : MP_ERR;
}
