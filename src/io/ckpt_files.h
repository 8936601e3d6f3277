/* The files of a checkpoint directory (RUN/ckpt): one per checkpointed step, named
 *     step_%08ld.h5      (step_00000010.h5; wider when the step needs more than 8 digits)
 * This module alone knows that name: it formats it, parses it back, lists a directory's
 * checkpoints by step, finds the newest that verifies, prunes old ones and says whether a
 * directory holds any. A name is ours exactly when formatting its parsed step gives it back, so
 * temporaries (step_00000010.h5.tmp), unpadded names (step_12.h5) and other files are never taken
 * for checkpoints. The files' contents: ckpt.h. */
#ifndef MP_CKPT_FILES_H
#define MP_CKPT_FILES_H

#include <stddef.h>

/* "step_" + at most 18 digits + ".h5" + NUL */
#define CKPT_NAME_MAX 32

/* One checkpoint of a directory listing. */
typedef struct {
    long step;
    char name[CKPT_NAME_MAX]; /* the file's name in the directory, e.g. step_00000010.h5 */
} ckpt_file_t;

/* The file name of step's checkpoint into name_p (n bytes). MP_OK, or MP_ERR (reported) for a
 * negative step or a buffer too small. */
int ckpt_name_format(long step, char *name_p, size_t n);

/* 1 with the step in *step_p if name is a checkpoint's file name exactly as ckpt_name_format
 * writes it; 0 (and *step_p untouched) for any other name. */
int ckpt_name_parse(const char *name, long *step_p);

/* DIR/step_%08ld.h5 into path_p (n bytes). MP_OK, or MP_ERR naming dir when it does not fit. */
int ckpt_name_path(const char *dir, long step, char *path_p, size_t n);

/* The checkpoints of dir in increasing step order, malloc'd into *files_p (free it; NULL when
 * none) with their count in *n_p. MP_OK, or MP_ERR with errno set when dir cannot be read; quiet
 * (the caller decides whether a missing directory is an error). */
int ckpt_dir_list(const char *dir, ckpt_file_t **files_p, int *n_p);

/* 1 if dir holds at least one checkpoint file (verified or not), 0 otherwise (also when dir
 * cannot be read). */
int ckpt_dir_has_any(const char *dir);

/* The newest checkpoint of dir that verifies (ckpt_verify), its path into path_p (n bytes); warns
 * about each newer one it skips and why. MP_OK, or MP_ERR when none verifies; prints nothing when
 * dir is missing or holds no checkpoint (a first run: the caller decides). */
int ckpt_dir_find_latest(const char *dir, char *path_p, size_t n);

/* Deletes all but the newest `keep` checkpoints of dir (keep <= 0: keeps all); other files,
 * temporaries included, are left alone. MP_OK, or MP_ERR naming the directory or the file. */
int ckpt_dir_prune(const char *dir, int keep);

#endif
