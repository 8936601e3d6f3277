/* Checkpoints (DESIGN §7): one HDF5 file per checkpoint.
 *   /model/<canonical name>      float32 at global shape
 *   /optim/m/<name>, /optim/v/<name>
 *   /state                       group; attributes: step (int64, optimizer steps completed),
 *                                adam_t (int64), seed (uint64), format (int, 1), version (string),
 *                                layout (string, e.g. "dp=1 tp=1 pp=1 sp=1"), deck (string: the
 *                                resolved deck), model shape attributes layers dim heads seq_len
 *                                vocab mlp_ratio (int).
 * Every float dataset carries attribute "checksum" (uint64): ckpt_checksum of its elements. The
 * sum is position-keyed and order-free, so ranks writing hyperslabs can add their parts.
 * Files are written as NAME.tmp, flushed, fsynced and renamed; the directory is fsynced. */
#ifndef MP_CKPT_H
#define MP_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "params.h"

typedef struct {
    long step;
    long adam_t;
    uint64_t seed;
    char layout[128];
    char *deck;          /* malloc'd resolved deck text (NULL when writing: taken from the caller) */
} ckpt_state_t;

/* Σ_i mix(i, bits(x[i])) mod 2^64 over elements first..first+n (first = global index of x[0]). */
uint64_t ckpt_checksum(const float *x, size_t n, size_t first);

/* Writes params, m and v (each laid out by tab) and the state. deck_text is stored as /state deck.
 * m and v may be NULL (no /optim group). MP_OK or MP_ERR; on error no file named path is created
 * or replaced. */
int ckpt_write(const char *path, const param_table_t *tab, const float *params, const float *m, const float *v,
               const ckpt_state_t *st, const char *deck_text);

/* Reads a checkpoint into buffers laid out by tab. Refuses (MP_ERR, message naming the field or
 * dataset) a file whose model shape differs from tab->cfg, a missing dataset, a shape mismatch or
 * a checksum that does not verify. m and v may be NULL (skip optimizer state). st_p->deck is
 * malloc'd (free it). Nothing is written to the buffers unless every check passes. */
int ckpt_read(const char *path, const param_table_t *tab, float *params, float *m, float *v, ckpt_state_t *st_p);

/* `mindpipe inspect`: step, layout, deck, every dataset with shape and checksum status. Returns
 * MP_OK when every checksum verifies. */
int ckpt_inspect(const char *path, FILE *out);

/* Newest checkpoint in dir (step_%08d.h5) that verifies; logs each one skipped and why.
 * Writes the path to path_p (size n). MP_OK, or MP_ERR when none verifies. */
int ckpt_find_latest(const char *dir, char *path_p, size_t n);

/* Deletes all but the newest `keep` step_*.h5 files in dir (keep <= 0: keep all). */
int ckpt_prune(const char *dir, int keep);

#endif
