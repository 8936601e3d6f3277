/* Serving messages (src/serve/wire.c) between two ZeroMQ sockets in one process: a message with
 * the job's secret arrives whole; one without it, or with another job's, is dropped (the wait runs
 * out); a frame that is not a message is refused; secrets parse and are fresh. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "tap.h"
#include "wire.h"

static int send_raw(void *sock, const void *p, size_t n) { return zmq_send(sock, p, n, 0) == (int)n; }

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv); /* for the error reporter's rank only */
    unsigned char key[WIRE_SECRET_BYTES], other[WIRE_SECRET_BYTES], parsed[WIRE_SECRET_BYTES];
    char hex[2 * WIRE_SECRET_BYTES + 1], hex2[2 * WIRE_SECRET_BYTES + 1];
    tap_ok(wire_secret_new(key, hex) == 0 && wire_secret_new(other, hex2) == 0 && memcmp(key, other, sizeof key) &&
               wire_secret_parse(hex, parsed) == 0 && !memcmp(parsed, key, sizeof key),
           "two new secrets differ; a secret's hex parses back to it");
    tap_ok(wire_secret_parse("abc", parsed) != 0 && wire_secret_parse(NULL, parsed) != 0,
           "a short or missing secret is refused");
    void *ctx = zmq_ctx_new(), *in = zmq_socket(ctx, ZMQ_PULL), *out = zmq_socket(ctx, ZMQ_PUSH);
    tap_ok(ctx && in && out && wire_socket_opts(in) == 0 && wire_socket_opts(out) == 0 &&
               zmq_bind(in, "inproc://wire") == 0 && zmq_connect(out, "inproc://wire") == 0,
           "a PUSH/PULL pair with the serving options");
    wire_row_t rows[3] = {{0, 5, 65}, {2, 7, 66}, {1, 0, 67}}, got[4];
    float x[6] = {1, 2, 3, 4, 5, 6}, y[8];
    wire_hdr_t h = {WIRE_MAGIC, WIRE_STEP, 42, 3, 2, 0, 0}, r;
    int rc = wire_send(out, key, &h, rows, x) == 0 ? wire_recv(in, key, 1000, &r, got, 4, y, 8) : -1;
    tap_ok(rc == 1 && r.step == 42 && r.B == 3 && r.width == 2 && !memcmp(got, rows, sizeof rows) && !memcmp(y, x, sizeof x),
           "a message with the secret arrives whole (step, rows, floats)");
    rc = wire_send(out, other, &h, rows, x) == 0 ? wire_recv(in, key, 300, &r, got, 4, y, 8) : -1;
    tap_ok(rc == 0, "a message with another job's secret is dropped (the wait runs out: %d)", rc);
    unsigned char junk[WIRE_SECRET_BYTES + sizeof h];
    memset(junk, 0, sizeof junk);
    rc = send_raw(out, junk, sizeof junk) ? wire_recv(in, key, 300, &r, got, 4, y, 8) : -1;
    tap_ok(rc == 0, "a frame without the secret is dropped (%d)", rc);
    memcpy(junk, key, WIRE_SECRET_BYTES); /* the secret, then a header of zeros: no magic */
    rc = send_raw(out, junk, sizeof junk) ? wire_recv(in, key, 300, &r, got, 4, y, 8) : -1;
    tap_ok(rc < 0, "a frame with the secret but no valid header is refused (%d)", rc);
    wire_row_t rows5[5] = {{0, 0, 0}};
    float x10[10] = {0};
    h.B = 5; /* more rows than the receiver holds */
    rc = wire_send(out, key, &h, rows5, x10) == 0 ? wire_recv(in, key, 300, &r, got, 4, y, 8) : -2;
    tap_ok(rc < 0 && rc != -2, "a message of more rows than the receiver's buffers is refused (%d)", rc);
    h.B = 3;
    rc = wire_send(out, key, &h, rows, x) == 0 ? wire_recv(in, key, 1000, &r, got, 4, y, 8) : -1;
    tap_ok(rc == 1 && r.step == 42, "the link still works after the refusals");
    zmq_close(in), zmq_close(out), zmq_ctx_term(ctx);
    /* a stage's steps by era (the front end's epoch when it sent them): a step of an older era than
     * one already run is stale (sent before a failover, delivered after), anything else runs */
    const uint64_t eras[] = {5, 5, 7, 5, 7, 9, 8, 9};
    const int want[] = {1, 1, 1, 0, 1, 1, 0, 1};
    wire_era_t era = {0};
    const wire_hdr_t ping = {WIRE_MAGIC, WIRE_STEP, 4, 0, 0, 4, 0};
    int same = wire_step_current(&era, &ping) == 1 && era.open;
    for (int i = 0; i < 8; i++) {
        const wire_hdr_t st = {WIRE_MAGIC, WIRE_STEP, 100 + (uint64_t)i, 1, 0, eras[i], 0};
        same &= wire_step_current(&era, &st) == want[i];
    }
    const wire_hdr_t quit = {WIRE_MAGIC, WIRE_QUIT, 1, 0, 0, 0, 0}, hello = {WIRE_MAGIC, WIRE_HELLO, 0, 0, 0, 1, 0};
    tap_ok(same && era.era == 9 && wire_step_current(&era, &quit) && wire_step_current(&era, &hello) && era.era == 9,
           "after the opening empty step, steps of eras 5 5 7 5 7 9 8 9: the 5 after 7 and the 8 after 9 are stale, "
           "the rest run; other messages are never stale and leave the era");
    /* a process that took over: steps with rows queued for the process it replaced come before the
     * failover's empty step, of the era before it (or of any era, on several hosts): all stale; the
     * empty step opens its life, and the front end's steps after it run */
    wire_era_t fresh = {0};
    const wire_hdr_t old1 = {WIRE_MAGIC, WIRE_STEP, 700, 4, 0, 650, 0}, old2 = {WIRE_MAGIC, WIRE_STEP, 701, 4, 0, 650, 0},
                     open = {WIRE_MAGIC, WIRE_STEP, 702, 0, 0, 702, 0}, next = {WIRE_MAGIC, WIRE_STEP, 703, 4, 0, 703, 0},
                     late = {WIRE_MAGIC, WIRE_STEP, 701, 4, 0, 650, 0};
    const int r1 = wire_step_current(&fresh, &old1), r2 = wire_step_current(&fresh, &old2), q = wire_step_current(&fresh, &quit);
    const int was_open = fresh.open, r3 = wire_step_current(&fresh, &open), r4 = wire_step_current(&fresh, &next),
              r5 = wire_step_current(&fresh, &late);
    tap_ok(!r1 && !r2 && q && !was_open && r3 && fresh.open && r4 && !r5 && fresh.era == 703,
           "a new process: the steps with rows before its first empty step are stale (%d %d), other messages run (%d), "
           "the empty step (%d) and the steps after it run (%d), an older era after it is stale (%d)", r1, r2, q, r3, r4, r5);
    MPI_Finalize();
    return tap_done();
}
