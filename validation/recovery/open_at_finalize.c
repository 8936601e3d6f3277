/* open_at_finalize: an LD_PRELOAD library (MPI's profiling interface) that says, as a rank calls
 * MPI_Finalize, which requests, communicators and windows it still holds, and which object file
 * made each (the program, libhdf5, ...): the check of issue 33 item 4 ("requests or communicators
 * left open?"). No project library; plain MPI.
 *
 *   mpicc -shared -fPIC -O2 -o open_at_finalize.so validation/recovery/open_at_finalize.c -ldl
 *   mpiexec -n 2 env LD_PRELOAD=$PWD/open_at_finalize.so PROGRAM ...
 *
 * Prints to stderr one line per rank, "open_at_finalize: rank R: N requests, C communicators, W
 * windows open at MPI_Finalize (of N', C', W' made)", then a line per open object with its maker. Requests: those of the
 * nonblocking calls below, until a Test/Wait completes them or Request_free/Cancel+completion drops
 * them. Communicators: made by dup/split/split_type/create/create_group, until Comm_free.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAP 65536
typedef struct {
    uintptr_t h;   /* the handle (0: free slot) */
    char kind;     /* 'r' request, 'c' communicator, 'w' window */
    const char *call;
    void *caller;
} obj_t;
static obj_t objs[CAP];
static long n_lost; /* more than CAP at once: not tracked */
static long made_r, made_c, made_w; /* every one made (so a quiet report shows the calls were seen) */

static void add(char kind, uintptr_t h, const char *call, void *caller)
{
    if (!h) return;
    made_r += kind == 'r';
    made_c += kind == 'c';
    made_w += kind == 'w';
    for (int i = 0; i < CAP; i++)
        if (!objs[i].h) {
            objs[i] = (obj_t){h, kind, call, caller};
            return;
        }
    n_lost++;
}

static void drop(char kind, uintptr_t h)
{
    for (int i = 0; i < CAP; i++)
        if (objs[i].h == h && objs[i].kind == kind) {
            objs[i].h = 0;
            return;
        }
}

#define RET __builtin_return_address(0)
#define REQ(r) ((uintptr_t)(r))

int MPI_Isend(const void *b, int c, MPI_Datatype t, int d, int tag, MPI_Comm cm, MPI_Request *r)
{
    int rc = PMPI_Isend(b, c, t, d, tag, cm, r);
    if (rc == MPI_SUCCESS) add('r', REQ(*r), "MPI_Isend", RET);
    return rc;
}
int MPI_Irecv(void *b, int c, MPI_Datatype t, int s, int tag, MPI_Comm cm, MPI_Request *r)
{
    int rc = PMPI_Irecv(b, c, t, s, tag, cm, r);
    if (rc == MPI_SUCCESS) add('r', REQ(*r), "MPI_Irecv", RET);
    return rc;
}
int MPI_Iallreduce(const void *s, void *d, int c, MPI_Datatype t, MPI_Op op, MPI_Comm cm, MPI_Request *r)
{
    int rc = PMPI_Iallreduce(s, d, c, t, op, cm, r);
    if (rc == MPI_SUCCESS) add('r', REQ(*r), "MPI_Iallreduce", RET);
    return rc;
}
int MPI_Igather(const void *s, int sc, MPI_Datatype st, void *d, int dc, MPI_Datatype dt, int root, MPI_Comm cm,
                MPI_Request *r)
{
    int rc = PMPI_Igather(s, sc, st, d, dc, dt, root, cm, r);
    if (rc == MPI_SUCCESS) add('r', REQ(*r), "MPI_Igather", RET);
    return rc;
}
int MPI_Iallgather(const void *s, int sc, MPI_Datatype st, void *d, int dc, MPI_Datatype dt, MPI_Comm cm,
                   MPI_Request *r)
{
    int rc = PMPI_Iallgather(s, sc, st, d, dc, dt, cm, r);
    if (rc == MPI_SUCCESS) add('r', REQ(*r), "MPI_Iallgather", RET);
    return rc;
}
int MPI_Ireduce_scatter_block(const void *s, void *d, int c, MPI_Datatype t, MPI_Op op, MPI_Comm cm, MPI_Request *r)
{
    int rc = PMPI_Ireduce_scatter_block(s, d, c, t, op, cm, r);
    if (rc == MPI_SUCCESS) add('r', REQ(*r), "MPI_Ireduce_scatter_block", RET);
    return rc;
}
int MPI_Ibarrier(MPI_Comm cm, MPI_Request *r)
{
    int rc = PMPI_Ibarrier(cm, r);
    if (rc == MPI_SUCCESS) add('r', REQ(*r), "MPI_Ibarrier", RET);
    return rc;
}
int MPI_Ibcast(void *b, int c, MPI_Datatype t, int root, MPI_Comm cm, MPI_Request *r)
{
    int rc = PMPI_Ibcast(b, c, t, root, cm, r);
    if (rc == MPI_SUCCESS) add('r', REQ(*r), "MPI_Ibcast", RET);
    return rc;
}

/* Completion: a request that a Test/Wait completes becomes MPI_REQUEST_NULL. */
int MPI_Test(MPI_Request *r, int *flag, MPI_Status *st)
{
    MPI_Request old = *r;
    int rc = PMPI_Test(r, flag, st);
    if (*flag && *r == MPI_REQUEST_NULL) drop('r', REQ(old));
    return rc;
}
int MPI_Wait(MPI_Request *r, MPI_Status *st)
{
    MPI_Request old = *r;
    int rc = PMPI_Wait(r, st);
    if (*r == MPI_REQUEST_NULL) drop('r', REQ(old));
    return rc;
}
static void drop_nulled(int n, const MPI_Request *old, const MPI_Request *now)
{
    for (int i = 0; i < n; i++)
        if (old[i] != MPI_REQUEST_NULL && now[i] == MPI_REQUEST_NULL) drop('r', REQ(old[i]));
}
#define WITH_OLD(n, r, body)                                                                        \
    do {                                                                                            \
        MPI_Request small[64], *old = (n) <= 64 ? small : malloc(sizeof(MPI_Request) * (size_t)(n)); \
        if (old) memcpy(old, r, sizeof(MPI_Request) * (size_t)(n));                                 \
        body;                                                                                       \
        if (old) drop_nulled(n, old, r);                                                            \
        if (old != small) free(old);                                                                \
    } while (0)
int MPI_Testall(int n, MPI_Request r[], int *flag, MPI_Status st[])
{
    int rc;
    WITH_OLD(n, r, rc = PMPI_Testall(n, r, flag, st));
    return rc;
}
int MPI_Waitall(int n, MPI_Request r[], MPI_Status st[])
{
    int rc;
    WITH_OLD(n, r, rc = PMPI_Waitall(n, r, st));
    return rc;
}
int MPI_Testany(int n, MPI_Request r[], int *idx, int *flag, MPI_Status *st)
{
    int rc;
    WITH_OLD(n, r, rc = PMPI_Testany(n, r, idx, flag, st));
    return rc;
}
int MPI_Waitany(int n, MPI_Request r[], int *idx, MPI_Status *st)
{
    int rc;
    WITH_OLD(n, r, rc = PMPI_Waitany(n, r, idx, st));
    return rc;
}
int MPI_Testsome(int n, MPI_Request r[], int *oc, int idx[], MPI_Status st[])
{
    int rc;
    WITH_OLD(n, r, rc = PMPI_Testsome(n, r, oc, idx, st));
    return rc;
}
int MPI_Waitsome(int n, MPI_Request r[], int *oc, int idx[], MPI_Status st[])
{
    int rc;
    WITH_OLD(n, r, rc = PMPI_Waitsome(n, r, oc, idx, st));
    return rc;
}
int MPI_Request_free(MPI_Request *r)
{
    MPI_Request old = *r;
    int rc = PMPI_Request_free(r);
    drop('r', REQ(old));
    return rc;
}

static void add_comm(const MPI_Comm *c, const char *call, void *caller)
{
    if (*c != MPI_COMM_NULL) add('c', (uintptr_t)*c, call, caller);
}
int MPI_Comm_dup(MPI_Comm c, MPI_Comm *n)
{
    int rc = PMPI_Comm_dup(c, n);
    if (rc == MPI_SUCCESS) add_comm(n, "MPI_Comm_dup", RET);
    return rc;
}
int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm *n)
{
    int rc = PMPI_Comm_split(c, color, key, n);
    if (rc == MPI_SUCCESS) add_comm(n, "MPI_Comm_split", RET);
    return rc;
}
int MPI_Comm_split_type(MPI_Comm c, int type, int key, MPI_Info info, MPI_Comm *n)
{
    int rc = PMPI_Comm_split_type(c, type, key, info, n);
    if (rc == MPI_SUCCESS) add_comm(n, "MPI_Comm_split_type", RET);
    return rc;
}
int MPI_Comm_create(MPI_Comm c, MPI_Group g, MPI_Comm *n)
{
    int rc = PMPI_Comm_create(c, g, n);
    if (rc == MPI_SUCCESS) add_comm(n, "MPI_Comm_create", RET);
    return rc;
}
int MPI_Comm_create_group(MPI_Comm c, MPI_Group g, int tag, MPI_Comm *n)
{
    int rc = PMPI_Comm_create_group(c, g, tag, n);
    if (rc == MPI_SUCCESS) add_comm(n, "MPI_Comm_create_group", RET);
    return rc;
}
int MPI_Comm_free(MPI_Comm *c)
{
    MPI_Comm old = *c;
    int rc = PMPI_Comm_free(c);
    drop('c', (uintptr_t)old);
    return rc;
}
int MPI_Win_allocate_shared(MPI_Aint size, int du, MPI_Info info, MPI_Comm c, void *base, MPI_Win *w)
{
    int rc = PMPI_Win_allocate_shared(size, du, info, c, base, w);
    if (rc == MPI_SUCCESS) add('w', (uintptr_t)*w, "MPI_Win_allocate_shared", RET);
    return rc;
}
int MPI_Win_create(void *base, MPI_Aint size, int du, MPI_Info info, MPI_Comm c, MPI_Win *w)
{
    int rc = PMPI_Win_create(base, size, du, info, c, w);
    if (rc == MPI_SUCCESS) add('w', (uintptr_t)*w, "MPI_Win_create", RET);
    return rc;
}
int MPI_Win_free(MPI_Win *w)
{
    MPI_Win old = *w;
    int rc = PMPI_Win_free(w);
    drop('w', (uintptr_t)old);
    return rc;
}

static void describe(const obj_t *o, char *out, size_t n)
{
    Dl_info di;
    if (dladdr(o->caller, &di) && di.dli_fname) {
        const char *f = strrchr(di.dli_fname, '/');
        snprintf(out, n, "%s+0x%lx%s%s", f ? f + 1 : di.dli_fname,
                 (unsigned long)((char *)o->caller - (char *)di.dli_fbase), di.dli_sname ? " in " : "",
                 di.dli_sname ? di.dli_sname : "");
    } else
        snprintf(out, n, "%p", o->caller);
}

int MPI_Finalize(void)
{
    int rank = -1, nr = 0, nc = 0, nw = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 0; i < CAP; i++)
        if (objs[i].h) {
            nr += objs[i].kind == 'r';
            nc += objs[i].kind == 'c';
            nw += objs[i].kind == 'w';
        }
    fprintf(stderr, "open_at_finalize: rank %d: %d requests, %d communicators, %d windows open at MPI_Finalize "
            "(of %ld, %ld, %ld made)%s\n", rank, nr, nc, nw, made_r, made_c, made_w,
            n_lost ? " (some not tracked: table full)" : "");
    for (int i = 0; i < CAP; i++)
        if (objs[i].h) {
            char where[512];
            describe(&objs[i], where, sizeof where);
            fprintf(stderr, "open_at_finalize: rank %d:   %s from %s (handle 0x%lx)\n", rank, objs[i].call, where,
                    (unsigned long)objs[i].h);
        }
    fflush(stderr);
    return PMPI_Finalize();
}
