/* HAMS state deltas (src/serve/delta.c): a standby applies a delta only once its step is confirmed,
 * in order, bit for bit; duplicates, foreign widths, rows outside the cache and other kinds are
 * refused and change nothing; a gap in the chain or a missed sequence start leaves the slots
 * holding nothing instead of a wrong prefix; the promotion report survives the wire (steps past
 * 2^31 included) and a malformed one is refused; a delta's watermark applies what it confirms; a
 * primary's batch of deltas arrives only when it ends, each step whole; a delta under another job's
 * secret never arrives. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "delta.h"
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
    test_foreign();
    MPI_Finalize();
    return tap_done();
}
