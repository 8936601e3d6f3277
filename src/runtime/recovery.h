/* recovery.log = 1: a lost rank costs no step (docs/RELIABILITY.md, DESIGN.md §10).
 *
 * While training, every stage logs what it sends (ckpt/bndlog.h: each micro-batch's activations
 * downstream, its input gradients upstream, the first and last stage's part of the tied
 * embedding's gradient) and each step's agreed scalars (the gradient norm, the loss). When a peer
 * dies, a survivor's wait times out (parallel.timeout): instead of aborting, it writes its own
 * state at the last step it completed to RUN/recovery/snap-r<rank>.h5 (one process, no
 * collective), closes its log and exits 75. The next `--resume auto` loads the newest checkpoint
 * everywhere, then: every rank with a snapshot of the common step T loads it; a rank without one
 * (the dead one) takes a data-parallel replica's snapshot when there is one, else replays its own
 * stage's steps from the checkpoint to T, every message read from its neighbours' logs: alone, or
 * with the ranks it shares a step's collectives with (its tp peers; its replica peers under ZeRO-1),
 * who then replay too instead of loading their snapshots.
 * Anything missing or disagreeing falls back to the checkpoint, said in the log. */
#ifndef MP_RECOVERY_H
#define MP_RECOVERY_H

#include "run.h"

/* Why this run's layout cannot be rebuilt from logs (NULL: it can). */
const char *recovery_unsupported(const run_stage_t *st);

/* Opens this rank's boundary log for the steps from r->step on and hands the executor its sink.
 * Nothing without recovery.log; on a layout recovery_unsupported names, nothing but one log line
 * (a lost rank then costs a restart from the checkpoint). MP_OK or MP_ERR (reported); each rank
 * alone: the caller agrees. */
int recovery_open(run_t *r);

/* Drains and closes the log (nothing without one). MP_OK, or MP_ERR when anything was lost. */
int recovery_close(run_t *r);

/* After step t's update: its agreed scalars and its mark (the log then holds the step whole). A
 * failure of the log is said once and ends the logging, not the run. */
void recovery_step_done(run_t *r, long t, double gnorm, double loss);

/* After the checkpoint of r->step steps: the log keeps only what a replay from it needs. */
void recovery_prune(run_t *r);

/* The thread rule of the log (bndlog.h): the main thread's other HDF5 calls go between these. */
void recovery_pause(run_t *r);
void recovery_resume(run_t *r);

/* The survivor's handler on r->lay.wait (a wait past parallel.timeout writes the snapshot and exits 75)
 * while armed; nothing without a log. */
void recovery_arm(run_t *r);
void recovery_disarm(run_layout_t *lay);
/* The same for the recovery itself (recovery_plan of a --resume auto with recovery.log up to
 * recovery_done, the start-up's agreements and a due checkpoint included): a peer lost there ends
 * this rank with status 75 and nothing written, the survivors' snapshots left where they are, so the
 * next --resume auto (a batch job's requeue) plans the recovery again from the same checkpoint; a
 * replaying rank's own log is drained first. */
void recovery_arm_resume(run_t *r);

/* What --resume auto does with snapshots, decided alike on every rank. */
typedef struct {
    int on;                  /* snapshots are used: every rank ends at step `target` */
    long from, target;       /* the checkpoint's step (r->step after run_ckpt_resume) and the snapshots' */
    int replay;              /* this rank replays steps from .. target − 1 (recovery_replay_*) */
    int source;              /* the rank whose snapshot this rank loads (-1: it replays, or none) */
    int nreplay, nsnap;      /* ranks without a snapshot; snapshots found */
    int nreplay_own;         /* ranks that replay: the lost ones and their groups (rec_replayers) */
    int ntook;               /* lost ranks that took a replica's snapshot */
    int nloaded;             /* ranks that loaded their own snapshot (a survivor that replays does not) */
    int group;               /* the replay runs the step's collectives with its stage's group (tp > 1,
                                ZeRO-1) or exchanges messages with a neighbouring stage that replays
                                too: no rank of it stops early, so none waits alone */
} recovery_plan_t;

/* Collective over MPI_COMM_WORLD, after run_ckpt_resume: finds the snapshots, decides the plan (a
 * fallback is said in the log with why, and leaves p->on 0) and loads the snapshot each rank takes.
 * A replaying rank opens the logs it reads and its own log (re-written by the replay). MP_OK, or
 * MP_ERR (reported) on every rank alike. */
int recovery_plan(run_t *r, recovery_plan_t *p);

/* Replay: step t's scalars (the gradient norm and the loss, as the survivors logged them) into v.
 * MP_OK or MP_ERR (reported). */
int recovery_replay_scalars(run_t *r, long t, double v[2]);
/* The executor in replay (on: every message from the logs, none sent) or back to logging. */
void recovery_replay_mode(run_t *r, int on);
/* Whether a logged message the replay needed was missing or damaged (the executor went on with
 * zeros: the replay's result is then void). */
int recovery_replay_failed(const run_t *r);

/* Collective over MPI_COMM_WORLD, after the replaying ranks replayed (ok: theirs went well): every
 * rank waits for them (a deadline of parallel.timeout per replayed step; replay_s: this rank's
 * replay time, the slowest logged), r->step = target, one log line. MP_OK, or MP_ERR on every rank
 * alike (the snapshots are then moved aside, so the next --resume auto falls back to the checkpoint). */
int recovery_finish(run_t *r, const recovery_plan_t *p, int ok, double replay_s);

/* This rank's used snapshot removed, once the run's own handler is armed (recovery_arm): until then
 * a lost peer ends the rank through recovery_arm_resume and the next --resume auto needs every
 * snapshot again; from then on a lost peer makes this rank write a new one. Local, no wait. */
void recovery_done(run_t *r, const recovery_plan_t *p);

#endif
