/* A standby's life before its promotion (ARCHITECTURE.md §10, HAMS): with its stage's
 * weights loaded it follows its primary, taking the primary's state deltas (a PULL connected to
 * the primary's delta socket) and the front end's confirmations (a SUB connected to its PUB), and
 * applying each delta once confirmed (delta.h), after a snapshot of its primary's state (snapshot.h).
 * SIGUSR1 promotes it: it takes what is already
 * queued on its links (up to 100 ms), applies what is confirmed, sends its report (delta.h) to the
 * front end, and returns so the stage loop can take the dead primary's place. */
#ifndef MP_STANDBY_H
#define MP_STANDBY_H

#include "snapshot.h"
#include "stage.h"

/* Installs the SIGUSR1 handler that promotes a standby; call it first thing, so a promotion sent
 * while the weights load is kept. MP_OK or MP_ERR. */
int standby_arm(void);

/* Follows until SIGUSR1 (standby_arm) or a WIRE_PROMOTE naming its stage and a generation whose
 * primary runs in its host slot (*gen_p: that generation), then reports.
 * It catches up first: a hello (WIRE_HELLO) to its primary, answered by a snapshot (snapshot.h),
 * sent again after 300 ms without an answer and whenever it lost a delta. MP_OK: promoted, dec
 * holds the durable state and sn (may be NULL) what each slot holds, for the next standby;
 * *next_gen_p the next stage's generation as the promotions it heard name it (0: none; the new
 * primary sends to that generation's host slot only); MP_ERR: the front end is gone or a link
 * failed (reported). zctx: the process's ZeroMQ context. */
int standby_follow(decoder_t *dec, const stage_cfg_t *s, void *zctx, snap_sender_t *sn, uint64_t *gen_p,
                   uint64_t *next_gen_p);

#endif
