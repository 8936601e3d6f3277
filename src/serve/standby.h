/* A standby's life before its promotion (ARCHITECTURE.md §7 serving, HAMS): with its stage's
 * weights loaded it follows its primary, taking the primary's state deltas (a PULL connected to
 * the primary's delta socket) and the front end's confirmations (a SUB connected to its PUB), and
 * applying each delta once confirmed (delta.h). SIGUSR1 promotes it: it takes what is already
 * queued on its links (up to 100 ms), applies what is confirmed, sends its report (delta.h) to the
 * front end, and returns so the stage loop can take the dead primary's place. */
#ifndef MP_STANDBY_H
#define MP_STANDBY_H

#include "stage.h"

/* Installs the SIGUSR1 handler that promotes a standby; call it first thing, so a promotion sent
 * while the weights load is kept. MP_OK or MP_ERR. */
int standby_arm(void);

/* Follows until SIGUSR1 (standby_arm) or its WIRE_PROMOTE, then reports. MP_OK: promoted, dec
 * holds the durable state, *gen_p the stage's generation it takes (from WIRE_PROMOTE; 0 on one
 * machine), *next_promoted_p 1 if the next stage's standby was promoted while it followed (its old
 * primary is not to be sent to); MP_ERR: the front end is gone or a link failed (reported). zctx:
 * the process's ZeroMQ context. */
int standby_follow(decoder_t *dec, const stage_cfg_t *s, void *zctx, uint64_t *gen_p, int *next_promoted_p);

#endif
