/* A serving stage: one process holding a contiguous range of the model's blocks (the training
 * partitioning of the layers into S stages), their key/value cache for every slot, and its two
 * links (wire.h). It receives a step's rows from upstream, runs them (stage 0 embeds them; the
 * last stage adds the final LayerNorm and head) and sends the hidden states, or the logits,
 * downstream, until a WIRE_QUIT or until the front end that started it is gone. */
#ifndef MP_STAGE_H
#define MP_STAGE_H

#include "decoder.h"
#include "wire.h"

typedef struct {
    const char *ckpt;
    const char *in, *out;                   /* endpoints: bound (PULL) and connected to (PUSH) */
    /* HAMS (delta.h): the stage's delta endpoint (its primary binds a PUSH there, its standby
     * connects), the front end's confirmations (PUB) and reports (PULL) */
    const char *delta_ep, *confirm_ep, *report_ep;
    /* On several hosts (links.h, tcp; NULL/0 on one machine): the next stage's standby input, also
     * connected to (messages go to completed connections only); where this process binds its
     * deltas once a primary (delta_ep is then its primary's, which a standby connects to); the
     * heartbeat period (beat.h; then sends down the ring never wait: a dead peer's step is dropped
     * and re-sent by the failover) */
    const char *out2, *delta_bind;
    int heartbeat_ms;
    int stage, stages, slots;
    int layer0, nlayers;
    int standby;                            /* 1: follow the primary until promoted (standby.h) */
    int deltas;                             /* 1: ship a state delta after every step (a primary with a standby) */
    uint64_t gen;                           /* several hosts: promotions of this stage this process has seen
                                             * (0 for the first primary; a promoted standby takes its promotion's) */
    unsigned char secret[WIRE_SECRET_BYTES];
} stage_cfg_t;

/* Loads the stage's weights; a standby follows its primary until promoted (standby_follow); binds
 * its links and runs until told to quit (MP_OK), or until the process that started it (its parent)
 * is gone or a link fails (MP_ERR, reported). model: the whole model's shape. */
int stage_run(const model_cfg_t *model, const stage_cfg_t *s);

#endif
