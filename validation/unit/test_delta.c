/* HAMS state deltas (src/serve/delta.c): a standby applies a delta only once its step is confirmed,
 * in order, bit for bit; duplicates, foreign widths, rows outside the cache and other kinds are
 * refused and change nothing; a gap in the chain or a missed sequence start leaves the slots
 * holding nothing instead of a wrong prefix; the promotion report survives the wire (steps past
 * 2^31 included) and a malformed one is refused; a delta's watermark applies what it confirms; a
 * primary's batch of deltas arrives only when it ends, each step whole; a delta under another job's
 * secret never arrives. The catch-up (snapshot.h): a standby attaching to a running primary gets
 * every sequence from its snapshot and the deltas after it, bit for bit, nothing before the
 * snapshot's rows are confirmed; a slot restarted mid-snapshot holds its new sequence; a header of
 * another hello is ignored, a malformed header, a chunk of another width or outside the cache and a
 * truncated message are refused, a lost chunk leaves the prefix and asks for a new snapshot. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "delta.h"
#include "snapshot.h"
#include "tap.h"

enum { S = 3, T = 24 };

/* The cache rows of slot s, position p, every block, keys and values, of dec equal between a and b. */
static int same_rows(const decoder_t *a, const decoder_t *b, int s, int p)
{
    float x[1024], y[1024];
    const wire_row_t row = {s, p, 0};
    delta_pack(a, &row, 1, x);
    delta_pack(b, &row, 1, y);
    return !memcmp(x, y, (size_t)delta_width(a) * sizeof(float));
}

/* A delta of prim's rows for step, chained to aux, carrying the front end's watermark durable. */
static int take_w(delta_follower_t *f, decoder_t *dec, const decoder_t *prim, uint64_t step, uint64_t aux,
                  uint64_t durable, const wire_row_t *rows, int B)
{
    float x[S * 1024];
    delta_pack(prim, rows, B, x);
    const wire_hdr_t h = {WIRE_MAGIC, WIRE_DELTA, step, B, delta_width(prim), aux, durable};
    return delta_follower_take(f, dec, &h, rows, x);
}

static int take(delta_follower_t *f, decoder_t *dec, const decoder_t *prim, uint64_t step, uint64_t aux,
                const wire_row_t *rows, int B)
{
    return take_w(f, dec, prim, step, aux, 0, rows, B);
}

static void test_apply(const model_cfg_t *cfg)
{
    decoder_t p, d;
    delta_follower_t f;
    if (decoder_create(&p, cfg, 0, 3, 0, 0, S) || decoder_create(&d, cfg, 0, 3, 0, 0, S) || delta_follower_init(&f, &d, 4))
        return (void)tap_ok(0, "decoders and a follower");
    tap_ok(delta_width(&d) == 2 * (32 + 0 + 16), "a delta row holds keys and values of blocks h4m4, skip, h2m1: %d floats",
           delta_width(&d));
    const size_t n = (size_t)3 * S * 2 * T * (size_t)p.Amax;
    for (size_t i = 0; i < n; i++) p.kv[i] = (float)i * 0.37f - 11.0f; /* the primary's cache: every entry distinct */
    const wire_row_t r5[2] = {{0, 0, 65}, {2, 0, 66}};
    int rc = take(&f, &d, &p, 5, 0, r5, 2);
    delta_follower_confirm(&f, &d, 4);
    tap_ok(rc == 0 && f.len[0] == 0 && f.len[2] == 0 && !same_rows(&p, &d, 0, 0),
           "a delta waits for its confirmation (confirmed up to step 4 only: nothing applied)");
    delta_follower_confirm(&f, &d, 5);
    tap_ok(f.len[0] == 1 && f.len[2] == 1 && f.len[1] == 0 && f.last_step[2] == 5 && f.applied == 5 &&
               same_rows(&p, &d, 0, 0) && same_rows(&p, &d, 2, 0) && !same_rows(&p, &d, 1, 0),
           "confirmed: slots 0 and 2 hold position 0, bit for bit the primary's entries");
    const wire_row_t r7[2] = {{0, 1, 1}, {2, 1, 2}}, r9[1] = {{0, 2, 3}};
    rc = take(&f, &d, &p, 7, 5, r7, 2) | take(&f, &d, &p, 9, 7, r9, 1);
    delta_follower_confirm(&f, &d, 9);
    tap_ok(rc == 0 && f.len[0] == 3 && f.len[2] == 2 && same_rows(&p, &d, 0, 2) && f.applied == 9,
           "two more steps applied in order: slot 0 holds 3 positions, slot 2 holds 2");
    const int len0 = f.len[0];
    rc = take(&f, &d, &p, 9, 7, r9, 1);
    tap_ok(rc != 0 && f.refused == 1 && f.len[0] == len0 && f.n == 0, "a duplicate of step 9 is refused (refused %llu)",
           (unsigned long long)f.refused);
    const wire_row_t bad_slot[1] = {{S, 0, 0}}, bad_pos[1] = {{1, T, 0}};
    float x[S * 1024] = {0};
    wire_hdr_t h = {WIRE_MAGIC, WIRE_DELTA, 10, 1, delta_width(&d) - 2, 9, 0};
    int refused = delta_follower_take(&f, &d, &h, r9, x) != 0;
    h.width = delta_width(&d);
    refused += delta_follower_take(&f, &d, &h, bad_slot, x) != 0;
    refused += delta_follower_take(&f, &d, &h, bad_pos, x) != 0;
    h.kind = WIRE_STEP;
    refused += delta_follower_take(&f, &d, &h, r9, x) != 0;
    delta_follower_confirm(&f, &d, 100);
    tap_ok(refused == 4 && f.refused == 5 && f.n == 0 && f.received == 9 && f.len[0] == len0 && same_rows(&p, &d, 0, 2),
           "refused: another stage's width, a slot or a position outside the cache, a message of another kind; "
           "nothing applied even when confirmed");
    const wire_row_t r12[1] = {{1, 0, 7}};
    rc = take(&f, &d, &p, 112, 111, r12, 1); /* 111 never arrived: the chain says the last was 9 */
    tap_ok(rc == 0 && f.gaps == 1 && f.len[0] == 0 && f.len[2] == 0, "a gap in the chain (step 111 lost): no slot keeps a "
           "state that may miss it");
    delta_follower_confirm(&f, &d, 112);
    const wire_row_t r13[1] = {{0, 3, 7}}, r14[1] = {{1, 1, 8}};
    rc = take(&f, &d, &p, 113, 112, r13, 1) | take(&f, &d, &p, 114, 113, r14, 1);
    delta_follower_confirm(&f, &d, 113);
    tap_ok(rc == 0 && f.len[1] == 1 && f.len[0] == 0 && f.n == 1,
           "after it a new sequence (slot 1) is followed again; position 3 of a sequence whose start was missed leaves its "
           "slot empty; step 114, unconfirmed, waits");
    f.last_step[1] = (1ull << 40) + 5;
    wire_row_t rep[2 * S];
    int len[S];
    uint64_t last[S];
    delta_report_rows(&f, rep);
    rc = delta_report_get(rep, 2 * S, S, T, len, last);
    tap_ok(rc == 0 && len[1] == 1 && last[1] == (1ull << 40) + 5 && len[0] == 0 && last[2] == f.last_step[2],
           "the promotion report reads back (a step past 2^31 whole)");
    rep[3].pos = 2; /* its two rows disagree */
    tap_ok(delta_report_get(rep, 2 * S, S, T, len, last) != 0 && delta_report_get(rep, 2 * S - 1, S, T, len, last) != 0,
           "a malformed report is refused");
    const wire_row_t r15[1] = {{1, 2, 9}};
    rc = take_w(&f, &d, &p, 115, 114, 114, r15, 1);
    tap_ok(rc == 0 && f.len[1] == 2 && f.applied == 114 && f.n == 1 && same_rows(&p, &d, 1, 1),
           "the watermark a delta carries (114: the step whose logits had come back when step 115 was sent) applies "
           "the queued step 114 without a confirmation message; step 115 waits");
    delta_follower_free(&f);
    decoder_destroy(&p), decoder_destroy(&d);
}

/* A primary's batch (delta_shipper_t): nothing reaches the standby before the batch ends; then every
 * step arrives as its own delta, chained, with its watermark, and a follower applies them. */
static void test_batch(const model_cfg_t *cfg)
{
    unsigned char key[WIRE_SECRET_BYTES];
    char hex[2 * WIRE_SECRET_BYTES + 1];
    decoder_t p, d;
    delta_follower_t f;
    if (decoder_create(&p, cfg, 0, 3, 0, 0, S) || decoder_create(&d, cfg, 0, 3, 0, 0, S) || delta_follower_init(&f, &d, 4))
        return (void)tap_ok(0, "decoders and a follower");
    const size_t n = (size_t)3 * S * 2 * T * (size_t)p.Amax;
    for (size_t i = 0; i < n; i++) p.kv[i] = (float)i * 0.11f + 3.0f;
    void *ctx = zmq_ctx_new(), *in = zmq_socket(ctx, ZMQ_PULL), *out = zmq_socket(ctx, ZMQ_PUSH);
    int ok = !wire_secret_new(key, hex) && !zmq_bind(in, "inproc://batch") && !zmq_connect(out, "inproc://batch");
    delta_shipper_t ship;
    delta_shipper_init(&ship, out);
    for (int k = 0; k < 3 && ok; k++) {
        const wire_row_t row = {1, k, 5};
        const wire_hdr_t step = {WIRE_MAGIC, WIRE_STEP, (uint64_t)(10 + k), 1, 32, 0, (uint64_t)(9 + k)};
        ok = delta_ship(&ship, &p, key, &step, &row) == 0;
    }
    wire_hdr_t h;
    wire_row_t rows[S];
    float x[S * 1024];
    int due;
    ok = ok && wire_recv(in, key, 50, &h, rows, S, x, sizeof x / sizeof *x) == 0;
    tap_ok(ok, "a batch of 3 steps' deltas is held until it ends");
    ok = ok && delta_flush(&ship, 1, &due) == 0 && due == -1;
    int got = 0;
    for (int k = 0; k < 3 && ok; k++) {
        ok = wire_recv(in, key, 1000, &h, rows, S, x, sizeof x / sizeof *x) == 1 && h.step == (uint64_t)(10 + k) &&
             h.aux == (k ? (uint64_t)(9 + k) : 0) && h.durable == (uint64_t)(9 + k) && rows[0].pos == k &&
             delta_follower_take(&f, &d, &h, rows, x) == 0;
        got += ok;
    }
    delta_follower_confirm(&f, &d, 12);
    tap_ok(ok && got == 3 && f.len[1] == 3 && f.gaps == 0 && same_rows(&p, &d, 1, 0) && same_rows(&p, &d, 1, 2),
           "then each step arrives as a delta (steps 10-12, chained, their watermarks) and applies bit for bit");
    delta_shipper_close(&ship);
    zmq_close(in), zmq_close(out), zmq_ctx_term(ctx);
    delta_follower_free(&f);
    decoder_destroy(&p), decoder_destroy(&d);
}

/* What the primary shipped: every message from in handed to f, except the one numbered skip (lost). */
static int deliver(void *in, const unsigned char *key, delta_follower_t *f, decoder_t *d, int skip, int *n_p)
{
    wire_hdr_t h;
    static wire_row_t rows[2 * S + S * T];
    static float x[S * T * 128];
    int n = 0, bad = 0;
    while (wire_recv(in, key, 100, &h, rows, 2 * S + S * T, x, sizeof x / sizeof *x) == 1)
        if (n++ != skip) bad += delta_follower_take(f, d, &h, rows, x) != 0;
    *n_p = n;
    return bad;
}

/* Primary p's rows for step: slot s at position pos each (B of them), tracked, computed (the cache
 * already holds them) and shipped as a delta; then one chunk if a snapshot is being sent. */
static int prim_step(snap_sender_t *sn, delta_shipper_t *ship, const decoder_t *p, const unsigned char *key, uint64_t step,
                     uint64_t durable, const wire_row_t *rows, int B)
{
    const wire_hdr_t h = {WIRE_MAGIC, WIRE_STEP, step, B, 32, 0, durable};
    snap_track(sn, rows, B, step);
    int rc = delta_ship(ship, p, key, &h, rows);
    if (!rc && snap_pending(sn)) rc = snap_ship_chunk(sn, ship, p, key, durable);
    return rc;
}

static int all_same(const decoder_t *a, const decoder_t *b, int s, int n)
{
    int same = 1;
    for (int q = 0; q < n; q++) same &= same_rows(a, b, s, q);
    return same;
}

static void test_snapshot(const model_cfg_t *cfg)
{
    unsigned char key[WIRE_SECRET_BYTES];
    char hex[2 * WIRE_SECRET_BYTES + 1];
    decoder_t p, d;
    delta_follower_t f;
    snap_sender_t sn;
    if (decoder_create(&p, cfg, 0, 3, 0, 0, S) || decoder_create(&d, cfg, 0, 3, 0, 0, S) || delta_follower_init(&f, &d, 8) ||
        snap_init(&sn, &p))
        return (void)tap_ok(0, "decoders, a follower and a sender");
    const size_t n = (size_t)3 * S * 2 * T * (size_t)p.Amax;
    for (size_t i = 0; i < n; i++) p.kv[i] = (float)i * 0.23f - 7.0f;
    void *ctx = zmq_ctx_new(), *in = zmq_socket(ctx, ZMQ_PULL), *out = zmq_socket(ctx, ZMQ_PUSH);
    int ok = !wire_secret_new(key, hex) && !zmq_bind(in, "inproc://snap") && !zmq_connect(out, "inproc://snap");
    delta_shipper_t ship;
    delta_shipper_init(&ship, out);
    /* the primary ran before the standby came: slot 0 positions 0-9 (steps 1-10), slot 2 0-5 (11-16) */
    uint64_t step = 1;
    for (int q = 0; q < 10 && ok; q++, step++) ok = !prim_step(&sn, &ship, &p, key, step, step - 1, &(wire_row_t){0, q, 1}, 1);
    for (int q = 0; q < 6 && ok; q++, step++) ok = !prim_step(&sn, &ship, &p, key, step, step - 1, &(wire_row_t){2, q, 1}, 1);
    int due, got;
    ok = ok && !delta_flush(&ship, 1, &due);
    wire_hdr_t h;
    wire_row_t rows[2 * S + S * T];
    float x[S * T * 128];
    while (ok && wire_recv(in, key, 100, &h, rows, 2 * S + S * T, x, sizeof x / sizeof *x) == 1) {
    } /* the deltas before the standby attached: never seen by it */
    sn.chunk_rows = 4; /* several chunks of a snapshot this small */
    const uint64_t gen = 77;
    delta_follower_hello(&f, gen);
    ok = ok && !snap_begin(&sn, &ship, key, gen, step - 2);
    /* the primary goes on: slot 0 position 10, slot 1's new sequence; then slot 2 restarts at 0 */
    for (int k = 0; k < 2 && ok; k++, step++) {
        const wire_row_t r[2] = {{0, 10 + k, 1}, {1, k, 1}};
        ok = !prim_step(&sn, &ship, &p, key, step, step - 2, r, 2);
    }
    while (ok && snap_pending(&sn)) ok = !snap_ship_chunk(&sn, &ship, &p, key, step - 2); /* idle: the rest */
    ok = ok && !delta_flush(&ship, 1, &due) && !deliver(in, key, &f, &d, -1, &got);
    tap_ok(ok && f.snap_open && f.snap_at == 16 && f.snap_stamp == 16 && !f.caught_up &&
               delta_follower_held(&f, 0) == 0 && delta_follower_held(&f, 2) == 0,
           "a standby's hello answered by a snapshot after step 16 (newest row: step 16) and 2 deltas: nothing held "
           "before step 16 is confirmed (%d messages)", got);
    delta_follower_confirm(&f, &d, 17);
    tap_ok(delta_follower_held(&f, 0) == 4 && delta_follower_held(&f, 1) == 1 && delta_follower_held(&f, 2) == 0 &&
               f.snap_rows == 4 && f.caught_up == 0 && all_same(&p, &d, 0, 4),
           "confirmed to step 17: what came before step 18 applies (its delta, the first chunk): slot 0 holds positions "
           "0-3, bit for bit, the rest owed; slot 1 its new sequence; the rest waits behind step 18, in order");
    delta_follower_confirm(&f, &d, 18);
    tap_ok(delta_follower_held(&f, 0) == 12 && delta_follower_held(&f, 1) == 2 && delta_follower_held(&f, 2) == 6 &&
               f.snap_rows == 16 && f.caught_up && f.gaps == 0 && all_same(&p, &d, 0, 12) && all_same(&p, &d, 1, 2) &&
               all_same(&p, &d, 2, 6),
           "confirmed to step 18: caught up, no gap: slot 0 holds 12 positions (10 from the snapshot, 2 from deltas), "
           "slot 2 6, slot 1 2, bit for bit the primary's");

    /* a second standby: slot 2 restarts (a new sequence) while the snapshot is being sent */
    delta_follower_t g;
    decoder_t e;
    if (decoder_create(&e, cfg, 0, 3, 0, 0, S) || delta_follower_init(&g, &e, 8)) return (void)tap_ok(0, "a second follower");
    delta_follower_hello(&g, 78);
    const uint64_t sent = sn.rows_sent;
    ok = ok && !snap_begin(&sn, &ship, key, 78, step - 2) && !snap_ship_chunk(&sn, &ship, &p, key, step - 2);
    for (int k = 0; k < 3 && ok; k++, step++) {
        const wire_row_t r[1] = {{2, k, 1}};
        ok = !prim_step(&sn, &ship, &p, key, step, step - 1, r, 1);
    }
    while (ok && snap_pending(&sn)) ok = !snap_ship_chunk(&sn, &ship, &p, key, step - 2);
    ok = ok && !delta_flush(&ship, 1, &due) && !deliver(in, key, &g, &e, -1, &got);
    delta_follower_confirm(&g, &e, step);
    tap_ok(ok && g.caught_up && delta_follower_held(&g, 0) == 12 && delta_follower_held(&g, 1) == 2 &&
               delta_follower_held(&g, 2) == 3 && all_same(&p, &e, 0, 12) && all_same(&p, &e, 2, 3) &&
               sn.rows_sent - sent == 14,
           "slot 2 restarted mid-snapshot: the primary stops sending its old rows (14 rows sent of 20); the standby "
           "holds its new sequence (3 positions), the other slots whole (%llu rows sent)",
           (unsigned long long)(sn.rows_sent - sent));

    /* refusals: a header of another hello ignored; malformed, of another width, outside the cache, truncated */
    const uint64_t ignored = g.ignored;
    wire_row_t hdr[2 * S];
    const int len[S] = {3, 0, 2};
    const uint64_t last[S] = {5, 0, 6};
    delta_state_rows(S, len, last, hdr);
    wire_hdr_t hh = {WIRE_MAGIC, WIRE_SNAP, step, 2 * S, 0, 999, 0};
    int rc = delta_follower_take(&g, &e, &hh, hdr, NULL);
    tap_ok(rc == 0 && g.ignored == ignored + 1 && delta_follower_held(&g, 0) == 12,
           "a snapshot header answering another hello is ignored; nothing changes");
    delta_follower_hello(&g, 79);
    hh.aux = 79;
    hdr[2].pos = T + 1, hdr[3].pos = T + 1; /* slot 1: more positions than the context */
    const uint64_t refused = g.refused;
    rc = delta_follower_take(&g, &e, &hh, hdr, NULL);
    hdr[2].pos = 0, hdr[3].pos = 1; /* its two rows disagree */
    rc = (rc != 0) + (delta_follower_take(&g, &e, &hh, hdr, NULL) != 0);
    hh.B = 2 * S - 1;
    rc += delta_follower_take(&g, &e, &hh, hdr, NULL) != 0;
    tap_ok(rc == 3 && g.refused == refused + 3 && !g.snap_open && g.want_gen == 79,
           "a malformed snapshot header (a slot past the context, rows that disagree, a row short) is refused; the "
           "standby still waits for its snapshot");
    hdr[3].pos = 0, hh.B = 2 * S;
    rc = delta_follower_take(&g, &e, &hh, hdr, NULL);
    wire_hdr_t ch = {WIRE_MAGIC, WIRE_CHUNK, step, 1, delta_width(&e) - 2, 79, 0};
    float cx[128] = {0};
    const wire_row_t c0[1] = {{0, 0, 0}}, cout[1] = {{0, T, 0}};
    int refusedc = delta_follower_take(&g, &e, &ch, c0, cx) != 0;
    ch.width = delta_width(&e);
    refusedc += delta_follower_take(&g, &e, &ch, cout, cx) != 0;
    delta_follower_confirm(&g, &e, step);
    tap_ok(rc == 0 && refusedc == 2 && g.n == 0 && delta_follower_held(&g, 0) == 0,
           "a chunk of another width or with a row outside the cache is refused; nothing held");
    /* a truncated chunk on the wire: shorter than its rows say */
    zmq_msg_t m;
    float *dst;
    ok = !wire_msg_build(&m, key, &ch, c0, &dst);
    if (ok) {
        memset(dst, 0, (size_t)ch.width * sizeof(float));
        ok = zmq_send(out, zmq_msg_data(&m), zmq_msg_size(&m) - 8, 0) >= 0;
        zmq_msg_close(&m);
    }
    ok = ok && wire_recv(in, key, 1000, &h, rows, 2 * S + S * T, x, sizeof x / sizeof *x) < 0;
    tap_ok(ok, "a truncated snapshot chunk is refused by the wire");

    /* a lost chunk: the slot keeps the prefix before it and a new snapshot is asked for */
    delta_follower_t l;
    decoder_t q;
    if (decoder_create(&q, cfg, 0, 3, 0, 0, S) || delta_follower_init(&l, &q, 8)) return (void)tap_ok(0, "a third follower");
    delta_follower_hello(&l, 80);
    ok = !snap_begin(&sn, &ship, key, 80, step - 1);
    while (ok && snap_pending(&sn)) ok = !snap_ship_chunk(&sn, &ship, &p, key, step - 1);
    ok = ok && !delta_flush(&ship, 1, &due) && !deliver(in, key, &l, &q, 2, &got); /* message 2: the second chunk */
    delta_follower_confirm(&l, &q, step);
    tap_ok(ok && delta_follower_held(&l, 0) == 4 && l.resync && l.gaps == 1 && !l.caught_up && all_same(&p, &q, 0, 4),
           "a lost chunk (slot 0's positions 4-7): slot 0 keeps positions 0-3, and a new snapshot is asked for");
    delta_follower_free(&l), decoder_destroy(&q);
    delta_follower_free(&g), decoder_destroy(&e);
    delta_shipper_close(&ship);
    zmq_close(in), zmq_close(out), zmq_ctx_term(ctx);
    snap_free(&sn);
    delta_follower_free(&f);
    decoder_destroy(&p), decoder_destroy(&d);
}

/* A delta under another job's secret is dropped before any follower sees it. */
static void test_foreign(void)
{
    unsigned char key[WIRE_SECRET_BYTES], other[WIRE_SECRET_BYTES];
    char hex[2 * WIRE_SECRET_BYTES + 1];
    void *ctx = zmq_ctx_new(), *in = zmq_socket(ctx, ZMQ_PULL), *out = zmq_socket(ctx, ZMQ_PUSH);
    int ok = !wire_secret_new(key, hex) && !wire_secret_new(other, hex) && !zmq_bind(in, "inproc://delta") &&
             !zmq_connect(out, "inproc://delta");
    const wire_row_t row = {0, 0, 1};
    float x[4] = {1, 2, 3, 4}, y[4];
    wire_row_t got;
    wire_hdr_t h = {WIRE_MAGIC, WIRE_DELTA, 3, 1, 4, 0, 0}, r;
    ok = ok && wire_post(out, other, &h, &row, x) == 1 && wire_recv(in, key, 300, &r, &got, 1, y, 4) == 0;
    ok = ok && wire_post(out, key, &h, &row, x) == 1 && wire_recv(in, key, 1000, &r, &got, 1, y, 4) == 1 && r.aux == 0 &&
         r.kind == WIRE_DELTA;
    tap_ok(ok, "a delta with another job's secret is dropped; with the job's it arrives");
    zmq_close(in), zmq_close(out), zmq_ctx_term(ctx);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv); /* for the error reporter's rank only */
    static const block_shape_t shape[3] = {{4, 4}, {0, 0}, {2, 1}};
    const model_cfg_t cfg = {.layers = 3, .dim = 32, .heads = 4, .seq_len = T, .vocab = 61, .mlp_ratio = 4, .shape = shape};
    test_apply(&cfg);
    test_batch(&cfg);
    test_snapshot(&cfg);
    test_foreign();
    MPI_Finalize();
    return tap_done();
}
