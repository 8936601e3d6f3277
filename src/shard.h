/* Canonical (global-shape) parameter buffers <-> one tensor-parallel rank's shard. Checkpoints are
 * layout-free: they hold canonical tensors, so a TP rank extracts its shard on resume and TP rank 0
 * assembles the canonical tensors from all shards before a checkpoint is written.
 *
 * `local` is the table of a TP shard and `global` the table of the same blocks built with tp = 1:
 * the builder emits entries in the same order, so entry i of one is entry i of the other. */
#ifndef MP_SHARD_H
#define MP_SHARD_H

#include <mpi.h>

#include "params.h"
#include "wait.h"

/* local (local->total floats) = this rank's shard of global_buf (global->total floats). */
void shard_extract(const param_table_t *local, const param_table_t *global, const float *global_buf, float *local_buf);

/* Gathers every TP rank's local_buf over tp_comm and, on TP rank 0, assembles global_buf
 * (replicated tensors taken from rank 0). global_buf is used on rank 0 only. MP_OK or MP_ERR. */
int shard_gather(const param_table_t *local, const param_table_t *global, const float *local_buf, float *global_buf,
                 MPI_Comm tp_comm, const wait_cfg_t *w);

/* dst (laid out by dst_tab) = the same-named tensors of src (laid out by src_tab); both tables
 * canonical (tp = 1). Tensors src_tab lacks are left alone. Returns how many tensors were copied. */
int table_copy_by_name(const param_table_t *dst_tab, float *dst, const param_table_t *src_tab, const float *src);

#endif
