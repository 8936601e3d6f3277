#include "shard.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

void shard_extract(const param_table_t *local, const param_table_t *global, const float *global_buf, float *local_buf)
{
    for (int i = 0; i < local->count; i++) {
        const param_entry_t *e = &local->entries[i], *g = &global->entries[i];
        const float *src = global_buf + g->offset;
        float *dst = local_buf + e->offset;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < e->numel; j++) {
            size_t k = param_global_index(local, e, j, local->tp_rank);
            dst[j] = k == (size_t)-1 ? 0.0f : src[k];
        }
    }
}

int table_copy_by_name(const param_table_t *dst_tab, float *dst, const param_table_t *src_tab, const float *src)
{
    int copied = 0;
    for (int i = 0; i < dst_tab->count; i++) {
        const param_entry_t *d = &dst_tab->entries[i], *s = param_table_find(src_tab, d->name);
        if (!s || s->numel != d->numel) continue;
        memcpy(dst + d->offset, src + s->offset, d->numel * sizeof(float));
        copied++;
    }
    return copied;
}

int shard_gather(const param_table_t *local, const param_table_t *global, const float *local_buf, float *global_buf,
                 MPI_Comm tp_comm, const wait_cfg_t *w)
{
    const int tp = local->tp;
    const size_t n = local->total;
    float *all = local->tp_rank == 0 ? MP_MALLOC((size_t)tp * n * sizeof(float)) : NULL;
    if (local->tp_rank == 0 && !all) MP_ABORT("out of memory gathering tensor-parallel shards for a checkpoint");
    MPI_Request r;
    MPI_CHECK(MPI_Igather(local_buf, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, 0, tp_comm, &r));
    wait_all(w, 1, &r, "the tensor-parallel gather of a checkpoint");
    if (local->tp_rank != 0) return MP_OK;
    for (int q = 0; q < tp; q++)
        for (int i = 0; i < local->count; i++) {
            const param_entry_t *e = &local->entries[i], *g = &global->entries[i];
            if (e->split == SPLIT_NONE && q != 0) continue;
            const float *src = all + (size_t)q * n + e->offset;
            float *dst = global_buf + g->offset;
            for (size_t j = 0; j < e->numel; j++) {
                size_t k = param_global_index(local, e, j, q);
                if (k != (size_t)-1) dst[k] = src[j];
            }
        }
    free(all);
    return MP_OK;
}
