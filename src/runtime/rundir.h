/* The run directory as one run's property (ARCHITECTURE.md §7, "The run directory"): its lock, its
 * run id, the refusal of a fresh run into a directory that holds checkpoints (or --restart, which
 * moves them aside), and the removal of temporaries a killed run left. No MPI: rank 0 calls these,
 * and run.c makes the other ranks agree.
 *
 *   RUN/lock     held while a run uses the directory: created with O_EXCL, holding one line
 *                "host=H pid=P started=TIME", and fcntl-locked (F_SETLK) by the holder.
 *   RUN/run_id   the run's id (32 hex digits), written at a fresh start, kept across resumes; every
 *                checkpoint carries it (/state run_id). */
#ifndef MP_RUNDIR_H
#define MP_RUNDIR_H

#include <stddef.h>

#include "ckpt.h"
#include "deck.h"
#include "runlog.h"

typedef struct {
    int fd;          /* the open RUN/lock while held, else -1 */
    char path[4200]; /* RUN/lock */
} rundir_lock_t;

/* Takes dir's lock for this process. A lock file whose holder ran on this host and is gone (its pid
 * no longer exists) is stale: taken over with a warning naming the old holder. A lock held by a live
 * process, or by a process on another host (whose liveness cannot be told from here: fcntl locks are
 * not reliable across the nodes of every parallel file system), is refused: MP_ERR with a message
 * naming the directory and the holder (host, pid, start time) and what to do, nothing in dir touched.
 * MP_OK with l->fd >= 0. */
int rundir_lock(rundir_lock_t *l, const char *dir);

/* Releases the lock (removes RUN/lock if it is still ours); nothing when not held. */
void rundir_unlock(rundir_lock_t *l);

/* A fresh run (no --resume) into dir: MP_OK when dir/ckpt holds no checkpoint (and, with restart,
 * dir holds no log.txt or metrics.jsonl). Otherwise, with restart, moves dir/ckpt aside to
 * dir/ckpt.old-YYYYmmdd-HHMMSS and the earlier run's log.txt and metrics.jsonl into it (nothing is
 * deleted, and the new run's logs start empty), makes a new empty dir/ckpt and says so in moved_p
 * (n bytes; "" when nothing moved); without restart, MP_ERR naming the directory, its newest
 * checkpoint and the two ways out (--resume auto, --restart). */
int rundir_fresh(const char *dir, int restart, char *moved_p, size_t n);

/* Refuses a run directory where something other than a regular file (a symbolic link, a
 * directory, a device, a pipe) stands under a name the run writes: log.txt, metrics.jsonl,
 * exit_status, deck.ini, run_id, trace.json, profile.json, energy.json, kernel_times.r*.json. Called
 * holding the lock, before anything is written, so a refusal touches nothing (a link's target
 * included). MP_OK, or MP_ERR naming each such file. The writers refuse them too (publish.h). */
int rundir_check_names(const char *dir);

/* Moves dir/name, a file this run did not write and must not replace (another run's checkpoint under
 * the name of this run's next one), into dir/foreign-YYYYmmdd-HHMMSS/name (name.2, ... if taken),
 * its path into to_p (n bytes). Nothing is deleted. MP_OK, or MP_ERR naming the file. */
int rundir_move_aside(const char *dir, const char *name, char *to_p, size_t n);

/* Removes the temporaries this program leaves when killed mid-write (publish.h: NAME.tmp and
 * NAME.tmp.PID) from dir, dir/ckpt, dir/bndlog and dir/recovery, a log line each. Call it holding
 * the lock: no live writer of this directory exists then. MP_OK, or MP_ERR naming a file that
 * cannot be removed. */
int rundir_clean_temporaries(const char *dir, runlog_t *log);

/* A new run id: 128 bits from the system's random source as 32 lowercase hex digits. MP_OK or
 * MP_ERR (reported). */
int rundir_id_new(char id_p[CKPT_RUN_ID_LEN + 1]);

/* dir/run_id into id_p ("" when absent). MP_OK, or MP_ERR naming the file when it exists but does
 * not hold an id. */
int rundir_id_read(const char *dir, char id_p[CKPT_RUN_ID_LEN + 1]);

/* Publishes id as dir/run_id. MP_OK or MP_ERR naming the file. */
int rundir_id_write(const char *dir, const char *id);

/* mkdir -p: path and every missing folder above it. MP_OK, or MP_ERR naming the folder. */
int rundir_mkdir_p(const char *path);

/* RUN/exit_status (rank 0; after the directory is claimed) := text, one line published whole: the
 * run's exit status and why ("- running", "0 done ...", "75 stopped ...", "1 failed ..."). Hydra's
 * mpiexec does not always pass on the ranks' status when it was itself signalled (ARCHITECTURE.md
 * §7): batch scripts can read it here. MP_OK or MP_ERR naming the file. */
int rundir_exit_status(const char *dir, const char *text);

/* Rank 0, holding dir's lock: refuses links and devices under the names a run writes; a fresh run
 * (resume 0) is refused where checkpoints are, unless restart moves them aside (said in the log);
 * opens the logs (log, quiet or not), removes stale temporaries, reads (resume) or draws and writes
 * the run id, marks exit_status "- running" and publishes deck.ini from d. MP_OK, or MP_ERR naming
 * what failed (the logs may be open: the caller closes them). */
int rundir_claim(const char *dir, int resume, int restart, int quiet, const deck_t *d, runlog_t *log,
                 char run_id[CKPT_RUN_ID_LEN + 1]);

#endif
