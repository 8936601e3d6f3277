#include "watchdog.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "perf.h"
#include "publish.h"
#include "signals.h"

/* How often the thread looks: a deadline is kept to within this, and an idle rank pays nothing more
 * than four wake-ups a second. */
#define WATCHDOG_TICK_S 0.25

static void watchdog_deadline_passed(const watchdog_t *w, const char *phase, const char *key, double limit)
{
    char text[512];
    snprintf(text, sizeof text, "1 aborted: %s: %s did not end within %s = %g s\n", w->who, phase, key, limit);
    if (w->status[0]) publish_text(w->status, text);
    MP_ABORT("%s: %s did not end within %s = %g s: a peer rank died, stopped or failed in it (or the file "
             "system stalls); aborting the job so that it can be requeued and resumed from its newest checkpoint",
             w->who, phase, key, limit);
}

static void watchdog_grace_passed(const watchdog_t *w, int sig)
{
    /* the main thread may be anywhere (inside MPI, inside HDF5): nothing is flushed or closed, so no
     * half-written file is published; the newest checkpoint stays as it was */
    fprintf(stderr,
            "mindpipe: %s: stop requested by signal %d, but this rank did not reach its step's end and write its "
            "checkpoint within train.stop_grace = %g s; exiting with status %d without a checkpoint (resume with "
            "--resume auto from the newest)\n",
            w->who, sig, w->stop_grace, w->stop_code);
    fflush(stderr);
    char text[512];
    snprintf(text, sizeof text, "%d stopped: signal %d; no checkpoint (%s had not ended its step within "
             "train.stop_grace = %g s); resume with --resume auto from the newest\n", w->stop_code, sig, w->who,
             w->stop_grace);
    if (w->status[0]) publish_text(w->status, text);
    _exit(w->stop_code);
}

static void *watchdog_main(void *arg)
{
    watchdog_t *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)(WATCHDOG_TICK_S * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        const int rc = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (w->quit) break;
        if (rc != 0 && rc != ETIMEDOUT) continue;
        const double now = perf_now();
        if (w->phase[0] && w->limit > 0 && now - w->since > w->limit)
            watchdog_deadline_passed(w, w->phase, w->key, w->limit);
        const int sig = signals_pending();
        if (sig && w->stop_grace > 0) {
            if (w->stop_seen == 0) w->stop_seen = now;
            else if (now - w->stop_seen > w->stop_grace) watchdog_grace_passed(w, sig);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int watchdog_start(watchdog_t *w, const char *who, double stop_grace, int stop_code)
{
    memset(w, 0, sizeof *w);
    snprintf(w->who, sizeof w->who, "%s", who);
    w->stop_grace = stop_grace, w->stop_code = stop_code;
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc == 0) rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&w->cv, &ca);
    if (rc == 0) {
        pthread_condattr_destroy(&ca);
        rc = pthread_mutex_init(&w->mu, NULL);
        if (rc != 0) pthread_cond_destroy(&w->cv);
    }
    if (rc == 0) {
        rc = pthread_create(&w->thread, NULL, watchdog_main, w);
        if (rc != 0) pthread_mutex_destroy(&w->mu), pthread_cond_destroy(&w->cv);
    }
    if (rc != 0) return MP_FAIL("cannot start the watchdog thread: %s", strerror(rc));
    w->running = 1;
    return MP_OK;
}

void watchdog_arm(watchdog_t *w, const char *phase, const char *key, double limit)
{
    if (!w->running) return;
    pthread_mutex_lock(&w->mu);
    snprintf(w->phase, sizeof w->phase, "%s", limit > 0 ? phase : "");
    w->key = key, w->limit = limit, w->since = perf_now();
    pthread_mutex_unlock(&w->mu);
}

void watchdog_disarm(watchdog_t *w)
{
    if (!w->running) return;
    pthread_mutex_lock(&w->mu);
    w->phase[0] = 0;
    pthread_mutex_unlock(&w->mu);
}

void watchdog_status_file(watchdog_t *w, const char *path)
{
    if (!w->running) return;
    pthread_mutex_lock(&w->mu);
    snprintf(w->status, sizeof w->status, "%s", path);
    pthread_mutex_unlock(&w->mu);
}

void watchdog_end(watchdog_t *w)
{
    if (!w->running) return;
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    w->running = 0;
}
