/* Which ranks use the same GPU (see gpu_share.h). */
#include "config.h"

#include "gpu_share.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#ifdef MP_HAVE_CUDA
#include "cuda_check.h"
#endif

/* NCCL's host identity: the name alone repeats across containers and clusters that name every node
 * alike; the boot id tells two kernels apart. */
static void host_id(gpu_id_t *id)
{
    if (gethostname(id->host, sizeof id->host - 1) != 0) snprintf(id->host, sizeof id->host, "unknown");
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f) return;
    if (!fgets(id->boot, sizeof id->boot, f)) id->boot[0] = '\0';
    fclose(f);
    id->boot[strcspn(id->boot, "\n")] = '\0';
}

int gpu_share_id(int ordinal, gpu_id_t *id_p)
{
    gpu_id_t id;
    memset(&id, 0, sizeof id);
    host_id(&id);
#ifdef MP_HAVE_CUDA
    CUDA_CHECK(cudaDeviceGetPCIBusId(id.bus, (int)sizeof id.bus, ordinal));
    *id_p = id;
    return MP_OK;
#else
    (void)ordinal;
    (void)id_p;
    return MP_FAIL("train.device=cuda: this build has only the CPU backend (configure --with-cuda)");
#endif
}

int gpu_share_nccl_standin(void)
{
    static int known = -1;
    if (known >= 0) return known;
    /* the program's global symbol table: the program and every library it loaded at start */
    void *self = dlopen(NULL, RTLD_LAZY);
    known = self && dlsym(self, "ncclStandinVersion") != NULL;
    if (self) dlclose(self);
    return known;
}

gpu_id_t *gpu_share_gather(const gpu_id_t *mine, MPI_Comm comm, const wait_cfg_t *wait)
{
    int n = 0;
    MPI_CHECK(MPI_Comm_size(comm, &n));
    gpu_id_t *all = MP_CALLOC((size_t)n, sizeof *all);
    if (!all) MP_ABORT("out of memory gathering the GPUs of %d ranks", n);
    MPI_Request r;
    MPI_CHECK(MPI_Iallgather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *mine, MPI_BYTE, comm, &r));
    wait_all_over(wait, 1, &r, comm, "the ranks' GPU names (host and PCI bus id)");
    return all;
}

int gpu_share_same(const gpu_id_t *a, const gpu_id_t *b)
{
    return strcmp(a->bus, b->bus) == 0 && strcmp(a->host, b->host) == 0 && strcmp(a->boot, b->boot) == 0;
}

/* By GPU, then by position in the array: equal GPUs end up adjacent, in rank order. */
static int by_gpu(const void *x, const void *y)
{
    const gpu_id_t *a = *(const gpu_id_t *const *)x, *b = *(const gpu_id_t *const *)y;
    int c = strcmp(a->host, b->host);
    if (!c) c = strcmp(a->boot, b->boot);
    if (!c) c = strcmp(a->bus, b->bus);
    return c ? c : (a > b) - (a < b);
}

int gpu_share_find(const gpu_id_t *ids, int n, int *a_p, int *b_p)
{
    if (n < 2) return 0;
    const gpu_id_t **p = MP_CALLOC((size_t)n, sizeof *p);
    if (!p) return MP_ERR;
    for (int i = 0; i < n; i++) p[i] = &ids[i];
    qsort(p, (size_t)n, sizeof *p, by_gpu);
    int a = -1, b = -1;
    /* each run of equal GPUs starts with its two lowest ranks; the pair with the least first rank */
    for (int i = 0; i + 1 < n; i++) {
        if (!gpu_share_same(p[i], p[i + 1]) || (i > 0 && gpu_share_same(p[i - 1], p[i]))) continue;
        const int lo = (int)(p[i] - ids);
        if (a < 0 || lo < a) a = lo, b = (int)(p[i + 1] - ids);
    }
    free(p);
    if (a < 0) return 0;
    *a_p = a, *b_p = b;
    return 1;
}

int gpu_share_boundary(const gpu_id_t *ids, const int *stage_rank, int pp, int wrap)
{
    const int bounds = wrap && pp > 1 ? pp : pp - 1;
    for (int s = 0; s < bounds; s++)
        if (gpu_share_same(&ids[stage_rank[s]], &ids[stage_rank[(s + 1) % pp]])) return s;
    return -1;
}
