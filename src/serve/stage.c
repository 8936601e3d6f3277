/* A serving stage's loop (stage.h). */
#include "stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

#include "beat.h"
#include "delta.h"
#include "snapshot.h"
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

/* A standby's hello (gen) at this primary: a snapshot for it (none without a standby's link). */
static int stage_hello(const stage_cfg_t *s, snap_sender_t *sn, delta_shipper_t *ship, uint64_t gen, uint64_t wm)
{
    if (!ship->sock) return MP_WARN("stage %d: a standby's hello, but this primary ships no deltas", s->stage), MP_OK;
    int n = 0, seqs = 0;
    for (int k = 0; k < sn->slots; k++) n += sn->len[k], seqs += sn->len[k] > 0;
    fprintf(stderr, "mindpipe: serving: stage %d's primary (pid %d) sends its standby a snapshot: %d positions of %d "
            "sequences after step %llu\n", s->stage, (int)getpid(), n, seqs, (unsigned long long)ship->chain);
    return snap_begin(sn, ship, s->secret, gen, wm);
}

/* Several hosts: where this stage's steps go, the next stage's two host slots (links.h), and the
 * next stage's generation they follow (wire_retarget): a replaced primary of the next stage, cut
 * off but alive, gets nothing more. Used when the stage has both (s->out2). */
typedef struct {
    char ep[2][300];      /* the next stage's inputs in host slots 0 and 1 */
    int linked;           /* bit s: connected to ep[s] */
    uint64_t gen;         /* the generation linked to */
} next_link_t;

static int stage_loop(decoder_t *dec, const stage_cfg_t *s, void *in, void *out, void *dsock, beat_t *beat,
                      snap_sender_t *sn, next_link_t *nl)
{
    const int S = s->slots, C = dec->cfg.dim, V = dec->cfg.vocab;
    const pid_t parent = getppid();
    delta_shipper_t ship;
    delta_shipper_init(&ship, dsock);
    wire_row_t *rows = malloc((size_t)S * sizeof *rows);
    float *x = malloc((size_t)S * C * sizeof(float)), *logits = malloc((size_t)S * V * sizeof(float));
    int *tok = malloc((size_t)S * sizeof(int)), *slot = malloc((size_t)S * sizeof(int)), *pos = malloc((size_t)S * sizeof(int));
    int rc = rows && x && logits && tok && slot && pos ? MP_OK : MP_FAIL("stage %d: out of memory", s->stage);
    uint64_t wm = 0;              /* the front end's watermark, as the last step carried it */
    wire_era_t era = {0};         /* the eras of the steps run (wire_step_current) */
    uint64_t stale = 0;           /* steps dropped as stale */
    while (rc == MP_OK) {
        wire_hdr_t h;
        beat_tick(beat);
        if (beat_fenced(beat)) {
            rc = MP_FAIL("stage %d: the front end promoted this stage's standby (heartbeats missed); exiting", s->stage);
            break;
        }
        if (s->out2 && beat->next_gen != nl->gen) { /* the next stage's standby was promoted */
            char who[32];
            snprintf(who, sizeof who, "stage %d", s->stage);
            wire_retarget(out, nl->ep, &nl->linked, beat->next_gen, who);
            nl->gen = beat->next_gen;
        }
        int due;
        if ((rc = delta_flush(&ship, 0, &due)) != MP_OK) break;
        /* a snapshot being sent: a chunk whenever no step came within 1 ms (one per step while busy,
         * below); paced, so an idle primary does not fill ZeroMQ's queue (1000 messages) faster than
         * its standby empties it, which would drop chunks and start the snapshot over */
        const int chunks = dsock && snap_pending(sn);
        const int got = wire_recv(in, s->secret, chunks ? 1 : stage_wait_ms(s, due), &h, rows, S, x, (size_t)S * C);
        if (got == 0 && chunks) {
            rc = snap_ship_chunk(sn, &ship, dec, s->secret, wm);
            continue;
        }
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
        else if (h.kind == WIRE_HELLO) rc = stage_hello(s, sn, &ship, h.aux, wm);
        else if (!wire_step_current(&era, &h)) {
            if (!stale++) /* the first only: a failover may leave several */
                MP_WARN("stage %d (pid %d): dropped a step of %d rows %s (step %llu, era %llu; newest run %llu)", s->stage,
                        (int)getpid(), h.B, era.open ? "of an era before the last failover" : "sent before this process took over",
                        (unsigned long long)h.step, (unsigned long long)h.aux, (unsigned long long)era.era);
        }
        else if (h.width != (dec->has_embed ? 0 : C)) rc = MP_FAIL("stage %d: a step of width %d, expected %d", s->stage, h.width, dec->has_embed ? 0 : C);
        else if ((rc = stage_rows_ok(dec, rows, h.B)) == MP_OK) {
            h.width = stage_compute(dec, rows, h.B, x, logits, tok, slot, pos);
            rc = stage_send(s, out, &h, rows, dec->has_final ? logits : x);
            /* after the send: the delta is off the critical path (a primary with a standby); what the
             * slots hold is tracked before a snapshot's chunk reads the cache */
            if (rc == MP_OK && dsock) {
                snap_track(sn, rows, h.B, h.step);
                wm = h.durable > wm ? h.durable : wm;
                rc = delta_ship(&ship, dec, s->secret, &h, rows);
                if (rc == MP_OK && snap_pending(sn)) rc = snap_ship_chunk(sn, &ship, dec, s->secret, wm);
            }
        }
    }
    delta_shipper_close(&ship);
    free(rows), free(x), free(logits), free(tok), free(slot), free(pos);
    return rc;
}

int stage_run(const model_cfg_t *model, const stage_cfg_t *cfg)
{
    stage_cfg_t me = *cfg; /* a standby promoted by message takes its generation */
    const stage_cfg_t *s = &me;
    next_link_t nl = {0};
    decoder_t dec;
    const int first = s->stage == 0, last = s->stage == s->stages - 1;
    if (decoder_create(&dec, model, s->layer0, s->nlayers, first, last, s->slots) != MP_OK) return MP_ERR;
    int rc = MP_ERR;
    void *ctx = NULL, *in = NULL, *out = NULL, *dsock = NULL;
    beat_t beat = {0};
    snap_sender_t sn = {0};
    if (decoder_load(&dec, s->ckpt, NULL) != MP_OK) goto err_free_decoder;
    if (s->deltas && snap_init(&sn, &dec) != MP_OK) goto err_free_decoder;
    ZMQ_TRY_PTR(ctx = zmq_ctx_new(), err_free_decoder);
    if (s->standby && standby_follow(&dec, s, ctx, s->deltas ? &sn : NULL, &me.gen, &nl.gen) != MP_OK) goto err_close;
    ZMQ_TRY_PTR(in = zmq_socket(ctx, ZMQ_PULL), err_close);
    ZMQ_TRY_PTR(out = zmq_socket(ctx, ZMQ_PUSH), err_close);
    if (wire_socket_opts(in) != MP_OK || wire_socket_opts(out) != MP_OK) goto err_close;
    ZMQ_TRY(zmq_bind(in, s->in), err_close);
    if (s->out2 && wire_immediate(out) != MP_OK) goto err_close;
    if (!s->out2) ZMQ_TRY(zmq_connect(out, s->out), err_close);
    else { /* several hosts: both of the next stage's host slots at first, then its primary's (next_link_t) */
        snprintf(nl.ep[0], sizeof nl.ep[0], "%s", s->out), snprintf(nl.ep[1], sizeof nl.ep[1], "%s", s->out2);
        for (int slot = 0; slot < 2; slot++)
            if (!nl.gen || (int)(nl.gen % 2) == slot) {
                ZMQ_TRY(zmq_connect(out, nl.ep[slot]), err_close);
                nl.linked |= 1 << slot;
            }
    }
    if (s->deltas) { /* bound here, so a new standby finds this primary wherever it starts */
        ZMQ_TRY_PTR(dsock = zmq_socket(ctx, ZMQ_PUSH), err_close);
        if (wire_socket_opts(dsock) != MP_OK) goto err_close;
        ZMQ_TRY(zmq_bind(dsock, s->delta_bind ? s->delta_bind : s->delta_ep), err_close);
    }
    if (beat_open(&beat, ctx, s, 0) != MP_OK) goto err_close;
    beat.next_gen = nl.gen;
    rc = stage_loop(&dec, s, in, out, dsock, &beat, &sn, &nl);
err_close:
    beat_close(&beat);
    if (in) zmq_close(in);
    if (out) zmq_close(out);
    if (dsock) zmq_close(dsock);
    if (ctx) zmq_ctx_term(ctx);
err_free_decoder:
    snap_free(&sn);
    decoder_destroy(&dec);
    return rc;
}
