#include "copier.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "perf.h"

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    int dir;
} copy_job_t;

/* Finished copies kept for the trace until copier_take_spans collects them (older ones are
 * dropped when nobody collects). */
enum { SPAN_RING = 256 };

struct copier_s {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done_cv;
    copy_job_t *q;       /* ring of pending jobs: tickets done+1 .. issued */
    size_t cap;
    long issued, done;
    int stop;
    copier_link_t link;
    int has_link;
    size_t bytes[2];
    double busy;
    int span_dir[SPAN_RING];
    double span_t0[SPAN_RING], span_t1[SPAN_RING];
    long nspans, spans_taken;
};

static void *copier_main(void *arg)
{
    copier_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && c->done == c->issued) pthread_cond_wait(&c->work, &c->mu);
        if (c->done == c->issued) break; /* stopping with nothing left */
        const copy_job_t j = c->q[(size_t)(c->done + 1) % c->cap];
        const copier_link_t link = c->link;
        const int has_link = c->has_link;
        pthread_mutex_unlock(&c->mu);
        if (has_link) link.lock(link.ctx, j.dir);
        const double t0 = perf_now();
        memcpy(j.dst, j.src, j.bytes);
        const double t1 = perf_now();
        if (has_link) link.unlock(link.ctx, j.dir);
        pthread_mutex_lock(&c->mu);
        c->done++;
        c->bytes[j.dir] += j.bytes;
        c->busy += t1 - t0;
        const long s = c->nspans++ % SPAN_RING;
        c->span_dir[s] = j.dir, c->span_t0[s] = t0, c->span_t1[s] = t1;
        pthread_cond_broadcast(&c->done_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

copier_t *copier_create(void)
{
    copier_t *c = MP_CALLOC(1, sizeof *c);
    if (!c) return NULL;
    c->cap = 64;
    if (!(c->q = MP_CALLOC(c->cap, sizeof *c->q))) goto err_free;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    if (pthread_create(&c->thread, NULL, copier_main, c) != 0) {
        MP_ERROR("memory.policy=offload: cannot start the copy thread");
        goto err_sync;
    }
    return c;
err_sync:
    pthread_cond_destroy(&c->done_cv);
    pthread_cond_destroy(&c->work);
    pthread_mutex_destroy(&c->mu);
    free(c->q);
err_free:
    free(c);
    return NULL;
}

void copier_destroy(copier_t *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->done_cv);
    pthread_cond_destroy(&c->work);
    pthread_mutex_destroy(&c->mu);
    free(c->q);
    free(c);
}

void copier_set_link(copier_t *c, const copier_link_t *link)
{
    pthread_mutex_lock(&c->mu);
    c->has_link = link != NULL;
    if (link) c->link = *link;
    pthread_mutex_unlock(&c->mu);
}

long copier_start(copier_t *c, void *dst, const void *src, size_t bytes, int dir)
{
    pthread_mutex_lock(&c->mu);
    if ((size_t)(c->issued - c->done) + 1 >= c->cap) { /* grow the ring, keeping ticket t at t % cap */
        const size_t cap = c->cap * 2;
        copy_job_t *q = MP_CALLOC(cap, sizeof *q);
        if (!q) MP_ABORT("out of memory queueing an offload copy");
        for (long t = c->done + 1; t <= c->issued; t++) q[(size_t)t % cap] = c->q[(size_t)t % c->cap];
        free(c->q);
        c->q = q, c->cap = cap;
    }
    const long t = ++c->issued;
    c->q[(size_t)t % c->cap] = (copy_job_t){dst, src, bytes, dir};
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->mu);
    return t;
}

void copier_wait(copier_t *c, long ticket, double *waited)
{
    pthread_mutex_lock(&c->mu);
    if (c->done < ticket) {
        const double t0 = perf_now();
        while (c->done < ticket) pthread_cond_wait(&c->done_cv, &c->mu);
        if (waited) *waited += perf_now() - t0;
    }
    pthread_mutex_unlock(&c->mu);
}

void copier_totals(copier_t *c, size_t bytes[2], double *busy)
{
    pthread_mutex_lock(&c->mu);
    bytes[0] = c->bytes[0], bytes[1] = c->bytes[1];
    *busy = c->busy;
    pthread_mutex_unlock(&c->mu);
}

int copier_take_spans(copier_t *c, int *dir, double *t0, double *t1, int max)
{
    pthread_mutex_lock(&c->mu);
    if (c->nspans - c->spans_taken > SPAN_RING) c->spans_taken = c->nspans - SPAN_RING;
    int n = 0;
    for (; c->spans_taken < c->nspans && n < max; c->spans_taken++, n++) {
        const long s = c->spans_taken % SPAN_RING;
        dir[n] = c->span_dir[s], t0[n] = c->span_t0[s], t1[n] = c->span_t1[s];
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}
