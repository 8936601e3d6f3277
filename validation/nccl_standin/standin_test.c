/* The NCCL stand-in's core (standin.h) under MPI, with host buffers and no CUDA: run as
 *   mpiexec -n N standin_test SCENARIO
 * "ok" runs correct sequences of every call kind and checks every result exactly against the
 * rank-order reduction computed here (TAP lines, exit 0); every other scenario plants one fault
 * the stand-in must refuse, and validation/test_nccl_standin.sh checks that the run ends non-zero
 * with a message naming the rank, the communicator, the call number and both sides' calls.
 * A "stream" is only a pointer the core compares: the scenarios name two. */
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "standin.h"

static int wr, wn;                 /* world rank and size */
static int tap_n, tap_failed;
static const int S1 = 1, S2 = 2;   /* two streams */
#define STREAM1 ((const void *)&S1)
#define STREAM2 ((const void *)&S2)

static void ok(int cond, const char *what)
{
    tap_n++;
    if (!cond) tap_failed++;
    if (wr == 0) printf("%s %d - %s\n", cond ? "ok" : "not ok", tap_n, what);
    fflush(stdout);
}

/* A communicator over `ranks` (world ranks, in communicator order) that this rank belongs to. */
static si_comm_t *comm_of(const int *ranks, int n)
{
    int me = -1;
    for (int i = 0; i < n; i++)
        if (ranks[i] == wr) me = i;
    unsigned char id[SI_ID_BYTES];
    if (wr == ranks[0] && si_id_new(id) != SI_OK) MPI_Abort(MPI_COMM_WORLD, 2);
    /* the id travels from its creator as the application would send it */
    if (wr == ranks[0])
        for (int i = 1; i < n; i++) MPI_Send(id, SI_ID_BYTES, MPI_BYTE, ranks[i], 9, MPI_COMM_WORLD);
    else if (me >= 0)
        MPI_Recv(id, SI_ID_BYTES, MPI_BYTE, ranks[0], 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (me < 0) return NULL;
    si_comm_t *c = NULL;
    if (si_comm_init(id, n, me, 0, &c) != SI_OK) MPI_Abort(MPI_COMM_WORLD, 2);
    return c;
}

static si_comm_t *world_comm(void)
{
    int *all = malloc((size_t)wn * sizeof *all);
    for (int i = 0; i < wn; i++) all[i] = i;
    si_comm_t *c = comm_of(all, wn);
    free(all);
    return c;
}

static si_op_t *op_new(si_comm_t *c, int kind, int dtype, int redop, int root, size_t count, const void *in, void *out,
                       const void *stream)
{
    si_op_t *o = calloc(1, sizeof *o);
    o->comm = c, o->kind = kind, o->dtype = dtype, o->op = redop, o->root = root, o->count = count;
    o->in = in, o->out = out, o->stream = stream;
    if (si_issue(o) != SI_OK) MPI_Abort(MPI_COMM_WORLD, 2);
    return o;
}

static void op_wait(si_op_t *o)
{
    while (!o->done) sched_yield();
    free(o);
}

/* One call, handed off at once and waited for. */
static void call(si_comm_t *c, int kind, int dtype, int redop, int root, size_t count, const void *in, void *out)
{
    si_op_t *o = op_new(c, kind, dtype, redop, root, count, in, out, STREAM1);
    si_handoff(o);
    op_wait(o);
}

/* A rank's input: distinct per rank and element, exact in float (multiples of 1/8). */
static float val(int rank, size_t i) { return (float)((int)(rank * 37 + i * 11) % 97 - 40) * 0.125f; }

static void scenario_ok(void)
{
    si_comm_t *w = world_comm();
    enum { N = 1000 };
    float *in = malloc(wn * N * sizeof(float)), *out = malloc(wn * N * sizeof(float)),
          *want = malloc((wn + 1) * N * sizeof(float));
    char what[128];

    /* allreduce, sum and max, float32: the rank-order sum */
    for (size_t i = 0; i < N; i++) in[i] = val(wr, i);
    call(w, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, N, in, out);
    int good = 1;
    for (size_t i = 0; i < N; i++) {
        float s = val(0, i);
        for (int r = 1; r < wn; r++) s += val(r, i);
        good &= out[i] == s;
    }
    snprintf(what, sizeof what, "allreduce float32 sum over %d ranks: every element the rank-order sum", wn);
    ok(good, what);
    call(w, SI_ALLREDUCE, SI_FLOAT32, SI_MAX, 0, N, in, out);
    good = 1;
    for (size_t i = 0; i < N; i++) {
        float m = val(0, i);
        for (int r = 1; r < wn; r++) m = val(r, i) > m ? val(r, i) : m;
        good &= out[i] == m;
    }
    ok(good, "allreduce float32 max");

    /* in place, int32 */
    int32_t iv[N];
    for (int i = 0; i < N; i++) iv[i] = wr * 1000 + i;
    call(w, SI_ALLREDUCE, SI_INT32, SI_SUM, 0, N, iv, iv);
    good = 1;
    for (int i = 0; i < N; i++) good &= iv[i] == 1000 * wn * (wn - 1) / 2 + wn * i;
    ok(good, "allreduce int32 sum in place");

    /* bfloat16: 1 + rank exactly representable */
    uint16_t bin[8], bout[8];
    for (int i = 0; i < 8; i++) {
        float f = (float)(1 + wr + i);
        uint32_t u;
        memcpy(&u, &f, 4);
        bin[i] = (uint16_t)(u >> 16);
    }
    call(w, SI_ALLREDUCE, SI_BFLOAT16, SI_SUM, 0, 8, bin, bout);
    good = 1;
    for (int i = 0; i < 8; i++) {
        uint32_t u = (uint32_t)bout[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        good &= f == (float)(wn * (1 + i) + wn * (wn - 1) / 2);
    }
    ok(good, "allreduce bfloat16 sum");

    /* reduce_scatter: this rank keeps its slice of the sum */
    for (size_t i = 0; i < (size_t)wn * N; i++) in[i] = val(wr, i);
    call(w, SI_REDUCE_SCATTER, SI_FLOAT32, SI_SUM, 0, N, in, out);
    good = 1;
    for (size_t i = 0; i < N; i++) {
        const size_t gi = (size_t)wr * N + i;
        float s = val(0, gi);
        for (int r = 1; r < wn; r++) s += val(r, gi);
        good &= out[i] == s;
    }
    ok(good, "reduce_scatter float32: this rank's slice of the sum");

    /* allgather, in place as MindPipe calls it (its own slice already where it belongs) */
    for (size_t i = 0; i < N; i++) out[(size_t)wr * N + i] = val(wr, i);
    call(w, SI_ALLGATHER, SI_FLOAT32, SI_SUM, 0, N, out + (size_t)wr * N, out);
    good = 1;
    for (int r = 0; r < wn; r++)
        for (size_t i = 0; i < N; i++) good &= out[(size_t)r * N + i] == val(r, i);
    ok(good, "allgather float32 in place: every rank's slice in rank order");

    /* broadcast from the last rank; reduce to rank 0 */
    for (size_t i = 0; i < N; i++) in[i] = val(wr, i), out[i] = -1;
    call(w, SI_BROADCAST, SI_FLOAT32, 0, wn - 1, N, in, out);
    good = 1;
    for (size_t i = 0; i < N; i++) good &= out[i] == val(wn - 1, i);
    ok(good, "broadcast from the last rank");
    call(w, SI_REDUCE, SI_FLOAT32, SI_SUM, 0, N, in, out);
    if (wr == 0) {
        good = 1;
        for (size_t i = 0; i < N; i++) {
            float s = val(0, i);
            for (int r = 1; r < wn; r++) s += val(r, i);
            good &= out[i] == s;
        }
    }
    MPI_Bcast(&good, 1, MPI_INT, 0, MPI_COMM_WORLD);
    ok(good, "reduce to rank 0");

    /* a ring in one group: send to the next, receive from the previous (deadlocks ungrouped in NCCL
     * when every rank sends first; grouped it completes) */
    const int next = (wr + 1) % wn, prev = (wr + wn - 1) % wn;
    if (wn > 1) {
        for (size_t i = 0; i < N; i++) in[i] = val(wr, i);
        si_op_t *s = op_new(w, SI_SEND, SI_FLOAT32, 0, next, N, in, NULL, STREAM1);
        si_op_t *r = op_new(w, SI_RECV, SI_FLOAT32, 0, prev, N, NULL, out, STREAM1);
        s->group_next = r;
        si_handoff(s);
        op_wait(s);
        op_wait(r);
        good = 1;
        for (size_t i = 0; i < N; i++) good &= out[i] == val(prev, i);
        ok(good, "send to the next rank and receive from the previous, grouped: the previous rank's data");
    } else {
        ok(1, "send/recv ring: one rank (nothing to do)");
    }

    /* a pipeline's pattern: two 2-rank communicators per boundary (activations, gradients), each
     * driven from its own stream, sends and receives ungrouped */
    good = 1;
    for (int b = 0; b + 1 < wn; b++) {
        const int pair[2] = {b, b + 1};
        si_comm_t *act = comm_of(pair, 2), *grad = comm_of(pair, 2);
        if (!act) continue;
        const int up = wr == b; /* rank 0 of the pair sends activations, receives gradients */
        float a[16], gbuf[16];
        for (int mb = 0; mb < 3; mb++) {
            for (int i = 0; i < 16; i++) a[i] = gbuf[i] = (float)(mb * 100 + i + (up ? 0 : 50));
            si_op_t *x = op_new(act, up ? SI_SEND : SI_RECV, SI_FLOAT32, 0, up ? 1 : 0, 16, a, a, STREAM1);
            si_handoff(x);
            op_wait(x);
            si_op_t *y = op_new(grad, up ? SI_RECV : SI_SEND, SI_FLOAT32, 0, up ? 1 : 0, 16, gbuf, gbuf, STREAM2);
            si_handoff(y);
            op_wait(y);
            for (int i = 0; i < 16; i++) good &= a[i] == (float)(mb * 100 + i) && gbuf[i] == (float)(mb * 100 + i + 50);
        }
        si_comm_destroy(act);
        si_comm_destroy(grad);
    }
    MPI_Allreduce(MPI_IN_PLACE, &good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ok(good, "pipeline boundaries: activations and gradients on their own communicators and streams");

    /* two communicators in flight at once, started in the same order on every rank */
    {
        si_comm_t *w2 = world_comm();
        for (size_t i = 0; i < N; i++) in[i] = val(wr, i), want[i] = val(wr, i) * 2;
        si_op_t *x = op_new(w, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, N, in, out, STREAM1);
        si_op_t *y = op_new(w2, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, N, want, want + N, STREAM2);
        si_handoff(x);
        si_handoff(y);
        op_wait(x);
        op_wait(y);
        good = 1;
        for (size_t i = 0; i < N; i++) good &= want[N + i] == 2 * out[i];
        ok(good, "two communicators in flight together, in one order on every rank");
        si_comm_destroy(w2);
    }
    ok(si_comm_error(w) == SI_OK, "no asynchronous error after all of the above");
    ok(si_comm_destroy(w) == SI_OK, "destroy");
    free(in), free(out), free(want);
}

/* ---- the planted faults: each must end the run with its message ---- */

static void scenario_fault(const char *name)
{
    si_comm_t *w = world_comm();
    float in[64] = {0}, out[64 * 16];
    const int last = wn - 1;
    if (!strcmp(name, "kind")) {
        call(w, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, 8, in, out);
        if (wr == last) call(w, SI_ALLGATHER, SI_FLOAT32, 0, 0, 8, in, out);
        else call(w, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, 8, in, out);
    } else if (!strcmp(name, "count")) {
        call(w, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, wr == last ? 9 : 8, in, out);
    } else if (!strcmp(name, "dtype")) {
        call(w, SI_ALLREDUCE, wr == last ? SI_BFLOAT16 : SI_FLOAT32, SI_SUM, 0, 8, in, out);
    } else if (!strcmp(name, "op")) {
        call(w, SI_ALLREDUCE, SI_FLOAT32, wr == last ? SI_MAX : SI_SUM, 0, 8, in, out);
    } else if (!strcmp(name, "root")) {
        call(w, SI_BROADCAST, SI_FLOAT32, 0, wr == last ? 1 : 0, 8, in, out);
    } else if (!strcmp(name, "p2p_count")) {
        if (wr == 0) call(w, SI_SEND, SI_FLOAT32, 0, 1, 10, in, NULL);
        if (wr == 1) call(w, SI_RECV, SI_FLOAT32, 0, 0, 12, NULL, out);
    } else if (!strcmp(name, "p2p_both_send")) {
        if (wr <= 1) call(w, SI_SEND, SI_FLOAT32, 0, 1 - wr, 10, in, NULL);
    } else if (!strcmp(name, "group")) {
        /* rank 0 groups a send and a receive with rank 1; rank 1 receives alone, then sends */
        if (wr == 0) {
            si_op_t *s = op_new(w, SI_SEND, SI_FLOAT32, 0, 1, 10, in, NULL, STREAM1);
            si_op_t *r = op_new(w, SI_RECV, SI_FLOAT32, 0, 1, 10, NULL, out, STREAM1);
            s->group_next = r;
            si_handoff(s);
            op_wait(s);
            op_wait(r);
        } else if (wr == 1) {
            call(w, SI_RECV, SI_FLOAT32, 0, 0, 10, NULL, out);
            call(w, SI_SEND, SI_FLOAT32, 0, 0, 10, in, NULL);
        }
    } else if (!strcmp(name, "streams")) {
        /* two calls of one communicator handed off from two streams; the last rank is late, so the
         * first is still in flight when the second is handed off */
        if (wr == last) {
            double t0 = MPI_Wtime();
            while (MPI_Wtime() - t0 < 1.0) sched_yield();
        }
        si_op_t *x = op_new(w, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, 8, in, out, STREAM1);
        si_op_t *y = op_new(w, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, 8, in, out + 8, STREAM2);
        si_handoff(x);
        si_handoff(y);
        op_wait(x);
        op_wait(y);
    } else if (!strcmp(name, "order")) {
        /* two communicators over the same ranks; the last rank starts them in the other order, and
         * each rank's first call waits in flight for the others */
        si_comm_t *w2 = world_comm();
        si_op_t *x = op_new(w, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, 8, in, out, STREAM1);
        si_op_t *y = op_new(w2, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, 8, in, out + 8, STREAM2);
        if (wr == last) {
            si_handoff(y);
            si_handoff(x);
        } else {
            si_handoff(x);
            si_handoff(y);
        }
        op_wait(x);
        op_wait(y);
    } else if (!strcmp(name, "missing")) {
        /* the last rank never makes the second call */
        call(w, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, 8, in, out);
        if (wr != last) call(w, SI_ALLREDUCE, SI_FLOAT32, SI_SUM, 0, 8, in, out);
        else {
            double t0 = MPI_Wtime();
            while (MPI_Wtime() - t0 < 3 * si_timeout() + 30) sched_yield();
        }
    } else {
        if (wr == 0) fprintf(stderr, "standin_test: unknown scenario %s\n", name);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* reached only when the fault was not caught */
    if (wr == 0) printf("not ok - the planted fault '%s' was not refused\n", name);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    exit(3);
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &wn);
    const char *name = argc > 1 ? argv[1] : "ok";
    if (strcmp(name, "ok")) scenario_fault(name);
    scenario_ok();
    if (wr == 0) printf("1..%d\n", tap_n);
    MPI_Finalize();
    return tap_failed ? 1 : 0;
}
