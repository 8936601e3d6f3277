/* A serving stage's loop (stage.h). */
#include "stage.h"

#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

#include "beat.h"
#include "delta.h"
#include "standby.h"

/* One step's rows through this stage's part: x holds the input hidden states (stage 0: nothing)
 * and gets the output (the last stage: logits). Returns the output's width. */
static int stage_compute(decoder_t *dec, const wire_row_t *rows, int B, float *x, float *logits, int *tok, int *slot,
                         int *pos)
{
    for (int r = 0; r < B; r++) tok[r] = rows[r].token, slot[r] = rows[r].slot, pos[r] = rows[r].pos;
    if (dec->has_embed) decoder_embed(dec, x, tok, pos, B);
    decoder_blocks(dec, x, slot, pos, B);
    if (!dec->has_final) return dec->cfg.dim;
    decoder_head(dec, logits, x, B);
    return dec->cfg.vocab;
}

/* Refuses rows a stage must not run: a slot or position outside its cache. */
static int stage_rows_ok(const decoder_t *dec, const wire_row_t *rows, int B)
{
    for (int r = 0; r < B; r++)
        if (rows[r].slot < 0 || rows[r].slot >= dec->slots || rows[r].pos < 0 || rows[r].pos >= dec->T ||
            rows[r].token < 0 || rows[r].token >= dec->cfg.vocab)
            return MP_FAIL("a step row (slot %d, position %d, token %d) outside the stage's cache", rows[r].slot,
                           rows[r].pos, rows[r].token);
    return MP_OK;
}

/* A step or WIRE_QUIT downstream: waiting on one machine; on several hosts (heartbeats on) without
 * waiting, a message to a dead peer dropped (its failover re-sends the step). MP_OK or MP_ERR. */
static int stage_send(const stage_cfg_t *s, void *out, const wire_hdr_t *h, const wire_row_t *rows, const float *x)
{
    if (!s->heartbeat_ms) return wire_send(out, s->secret, h, rows, x);
    return wire_post(out, s->secret, h, rows, x) < 0 ? MP_ERR : MP_OK;
}

/* How long to wait for the next step: the link's usual wait, shortened to when the batch of state
 * deltas held is due (delta_flush: −1 when none is). */
static int stage_wait_ms(const stage_cfg_t *s, int due_ms)
{
    const int wait = s->heartbeat_ms ? s->heartbeat_ms : 1000;
    return due_ms >= 0 && due_ms < wait ? due_ms : wait;
}

static int stage_loop(decoder_t *dec, const stage_cfg_t *s, void *in, void *out, void *dsock, beat_t *beat)
{
    const int S = s->slots, C = dec->cfg.dim, V = dec->cfg.vocab;
    const pid_t parent = getppid();
    delta_shipper_t ship;
    delta_shipper_init(&ship, dsock);
    wire_row_t *rows = malloc((size_t)S * sizeof *rows);
    float *x = malloc((size_t)S * C * sizeof(float)), *logits = malloc((size_t)S * V * sizeof(float));
    int *tok = malloc((size_t)S * sizeof(int)), *slot = malloc((size_t)S * sizeof(int)), *pos = malloc((size_t)S * sizeof(int));
    int rc = rows && x && logits && tok && slot && pos ? MP_OK : MP_FAIL("stage %d: out of memory", s->stage);
    while (rc == MP_OK) {
        wire_hdr_t h;
        beat_tick(beat);
        if (beat_fenced(beat)) {
            rc = MP_FAIL("stage %d: the front end promoted this stage's standby (heartbeats missed); exiting", s->stage);
            break;
        }
        if (beat->next_promoted == 1) { /* its old primary may live, cut off: nothing more goes there */
            if (zmq_disconnect(out, s->out) != 0)
                MP_WARN("stage %d: disconnecting from the next stage's old primary: %s", s->stage, zmq_strerror(zmq_errno()));
            else MP_WARN("stage %d: no step goes to the next stage's old primary (%s) any more", s->stage, s->out);
            beat->next_promoted = 2;
        }
        int due;
        if ((rc = delta_flush(&ship, 0, &due)) != MP_OK) break;
        const int got = wire_recv(in, s->secret, stage_wait_ms(s, due), &h, rows, S, x, (size_t)S * C);
        if (got == 0) {
            /* on one machine the front end is this process's parent: reparented means it died */
            if (!s->heartbeat_ms && getppid() != parent)
                rc = MP_FAIL("stage %d: the front end (pid %d) is gone; exiting", s->stage, (int)parent);
            continue;
        }
        if (got < 0) rc = MP_ERR;
        else if (h.kind == WIRE_QUIT) { /* passed on: the stages after this one quit too */
            stage_send(s, out, &h, NULL, NULL);
            break;
        }
        else if (h.width != (dec->has_embed ? 0 : C)) rc = MP_FAIL("stage %d: a step of width %d, expected %d", s->stage, h.width, dec->has_embed ? 0 : C);
        else if ((rc = stage_rows_ok(dec, rows, h.B)) == MP_OK) {
            h.width = stage_compute(dec, rows, h.B, x, logits, tok, slot, pos);
            rc = stage_send(s, out, &h, rows, dec->has_final ? logits : x);
            /* after the send: the delta is off the critical path (a primary with a standby) */
            if (rc == MP_OK) rc = delta_ship(&ship, dec, s->secret, &h, rows);
        }
    }
    delta_shipper_close(&ship);
    free(rows), free(x), free(logits), free(tok), free(slot), free(pos);
    return rc;
}

int stage_run(const model_cfg_t *model, const stage_cfg_t *cfg)
{
    stage_cfg_t me = *cfg; /* a promoted standby takes its generation */
    const stage_cfg_t *s = &me;
    int next_promoted = 0;
    decoder_t dec;
    const int first = s->stage == 0, last = s->stage == s->stages - 1;
    if (decoder_create(&dec, model, s->layer0, s->nlayers, first, last, s->slots) != MP_OK) return MP_ERR;
    int rc = MP_ERR;
    void *ctx = NULL, *in = NULL, *out = NULL, *dsock = NULL;
    beat_t beat = {0};
    if (decoder_load(&dec, s->ckpt, NULL) != MP_OK) goto err_free_decoder;
    ZMQ_TRY_PTR(ctx = zmq_ctx_new(), err_free_decoder);
    if (s->standby && standby_follow(&dec, s, ctx, &me.gen, &next_promoted) != MP_OK) goto err_close;
    ZMQ_TRY_PTR(in = zmq_socket(ctx, ZMQ_PULL), err_close);
    ZMQ_TRY_PTR(out = zmq_socket(ctx, ZMQ_PUSH), err_close);
    if (wire_socket_opts(in) != MP_OK || wire_socket_opts(out) != MP_OK) goto err_close;
    ZMQ_TRY(zmq_bind(in, s->in), err_close);
    if (s->out2 && wire_immediate(out) != MP_OK) goto err_close;
    if (!next_promoted) ZMQ_TRY(zmq_connect(out, s->out), err_close); /* else replaced: its standby only */
    if (s->out2) ZMQ_TRY(zmq_connect(out, s->out2), err_close);
    if (s->deltas) { /* bound here, so a new standby finds this primary wherever it starts */
        ZMQ_TRY_PTR(dsock = zmq_socket(ctx, ZMQ_PUSH), err_close);
        if (wire_socket_opts(dsock) != MP_OK) goto err_close;
        ZMQ_TRY(zmq_bind(dsock, s->delta_bind ? s->delta_bind : s->delta_ep), err_close);
    }
    if (beat_open(&beat, ctx, s, 0) != MP_OK) goto err_close;
    beat.next_promoted = next_promoted ? 2 : 0;
    rc = stage_loop(&dec, s, in, out, dsock, &beat);
err_close:
    beat_close(&beat);
    if (in) zmq_close(in);
    if (out) zmq_close(out);
    if (dsock) zmq_close(dsock);
    if (ctx) zmq_ctx_term(ctx);
err_free_decoder:
    decoder_destroy(&dec);
    return rc;
}
