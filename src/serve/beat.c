/* Heartbeats and fencing (beat.h). */
#include "beat.h"

#include <string.h>
#include <zmq.h>

#include "perf.h"

int beat_open(beat_t *b, void *zctx, const stage_cfg_t *s, int role)
{
    memset(b, 0, sizeof *b);
    b->stage = s->stage, b->role = role, b->slot = s->slot, b->gen = s->gen, b->every_ms = s->heartbeat_ms;
    b->secret = s->secret;
    if (!b->every_ms) return MP_OK;
    ZMQ_TRY_PTR(b->hb = zmq_socket(zctx, ZMQ_PUSH), err);
    if (wire_socket_opts(b->hb) != MP_OK) goto err;
    ZMQ_TRY(zmq_connect(b->hb, s->report_ep), err);
    if (role == 0) {
        ZMQ_TRY_PTR(b->fence = zmq_socket(zctx, ZMQ_SUB), err);
        if (wire_socket_opts(b->fence) != MP_OK) goto err;
        ZMQ_TRY(zmq_setsockopt(b->fence, ZMQ_SUBSCRIBE, "", 0), err);
        ZMQ_TRY(zmq_connect(b->fence, s->confirm_ep), err);
    }
    return MP_OK;
err:
    beat_close(b);
    return MP_ERR;
}

void beat_tick(beat_t *b)
{
    if (!b->hb || perf_now() - b->last < 1e-3 * b->every_ms) return;
    const wire_hdr_t h = {WIRE_MAGIC, WIRE_HEARTBEAT, (uint64_t)b->role, 0, 0, (uint64_t)b->stage,
                          b->role ? (uint64_t)b->slot : b->gen};
    wire_post(b->hb, b->secret, &h, NULL, NULL);
    b->last = perf_now();
}

int beat_fenced(beat_t *b)
{
    wire_hdr_t h;
    wire_row_t row;
    float x;
    while (b->fence && wire_recv(b->fence, b->secret, 0, &h, &row, 1, &x, 1) == 1) {
        if ((h.kind == WIRE_PROMOTE || h.kind == WIRE_FENCE) && h.aux == (uint64_t)b->stage && h.step > b->gen) return 1;
        if (h.kind == WIRE_PROMOTE && h.aux == (uint64_t)b->stage + 1 && h.step > b->next_gen) b->next_gen = h.step;
    }
    return 0;
}

void beat_close(beat_t *b)
{
    if (b->hb) zmq_close(b->hb);
    if (b->fence) zmq_close(b->fence);
    b->hb = b->fence = NULL;
}
