/* Failover timeline events (evtrace.h). */
#include "evtrace.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "publish.h"

double evtrace_now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int evtrace_open(evtrace_t *t, const char *path)
{
    t->f = NULL;
    if (!path) return MP_OK;
    if (publish_file_open(path, 0, &t->f) != MP_OK) return MP_ERR; /* never through a link */
    fputs("[\n", t->f);
    fflush(t->f);
    return MP_OK;
}

void evtrace_event(evtrace_t *t, const char *name, const char *args)
{
    if (!t->f) return;
    fprintf(t->f, "{\"name\": \"%s\", \"cat\": \"failover\", \"ph\": \"i\", \"s\": \"g\", \"ts\": %.0f, \"pid\": %d, "
            "\"tid\": 0, \"args\": {%s}},\n", name, evtrace_now_us(), (int)getpid(), args);
    fflush(t->f);
}

void evtrace_close(evtrace_t *t)
{
    if (t->f) fclose(t->f);
    t->f = NULL;
}
