/* HAMS state deltas (delta.h). */
#include "delta.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "perf.h"

/* Block b's (of the stage) attention width: its key and value rows are A floats; 0 for a skip. */
static int block_A(const decoder_t *dec, int b)
{
    const int l = dec->layer0 + b;
    return block_is_skip(&dec->cfg, l) ? 0 : cfg_attn_width(&dec->cfg, l);
}

/* The cache row of block b, slot, key (0) or value (1), position pos (decoder.h's layout). */
static float *kv_row(const decoder_t *dec, int b, int slot, int which, int pos)
{
    return dec->kv + ((((size_t)b * dec->slots + slot) * 2 + which) * (size_t)dec->T + pos) * dec->Amax;
}

int delta_width(const decoder_t *dec)
{
    int w = 0;
    for (int b = 0; b < dec->nlayers; b++) w += 2 * block_A(dec, b);
    return w;
}

void delta_pack(const decoder_t *dec, const wire_row_t *rows, int B, float *x)
{
    for (int r = 0; r < B; r++)
        for (int b = 0; b < dec->nlayers; b++) {
            const size_t A = (size_t)block_A(dec, b);
            for (int which = 0; which < 2; which++, x += A)
                memcpy(x, kv_row(dec, b, rows[r].slot, which, rows[r].pos), A * sizeof(float));
        }
}

void delta_unpack(decoder_t *dec, const wire_row_t *rows, int B, const float *x)
{
    for (int r = 0; r < B; r++)
        for (int b = 0; b < dec->nlayers; b++) {
            const size_t A = (size_t)block_A(dec, b);
            for (int which = 0; which < 2; which++, x += A)
                memcpy(kv_row(dec, b, rows[r].slot, which, rows[r].pos), x, A * sizeof(float));
        }
}

int delta_chunk_rows(const decoder_t *dec)
{
    const long w = delta_width(dec), all = (long)dec->slots * dec->T;
    const long n = w ? DELTA_CHUNK_BYTES / (w * (long)sizeof(float)) : all;
    return (int)(n < 1 ? 1 : n > all ? all : n);
}

void delta_shipper_init(delta_shipper_t *d, void *sock)
{
    memset(d, 0, sizeof *d);
    d->sock = sock;
}

/* The held frame sent, as a middle part (more) or the last; never waits. 1 sent, 0 dropped with the
 * batch begun (ZeroMQ refuses a first part when no standby is connected or its queue is full, and a
 * later one only when the connection ended: it then drops the parts sent, and the parts of the next
 * batch up to its last; the standby, if a new one connects, sees the gap in the chain), MP_ERR. */
static int shipper_send_held(delta_shipper_t *d, int more)
{
    d->holding = 0;
    if (zmq_msg_send(&d->held, d->sock, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)) >= 0) return 1;
    const int e = zmq_errno();
    zmq_msg_close(&d->held);
    d->parts = 0;
    if (e == EAGAIN) return 0;
    return MP_FAIL("ZeroMQ: zmq_msg_send of a state delta failed: %s", zmq_strerror(e));
}

int delta_ship_frame(delta_shipper_t *d, const unsigned char *secret, const wire_hdr_t *h, const wire_row_t *rows,
                     float **x_p)
{
    if (d->holding && shipper_send_held(d, 1) < 0) return MP_ERR;
    if (wire_msg_build(&d->held, secret, h, rows, x_p) != MP_OK) return MP_ERR;
    d->holding = 1;
    if (d->parts++ == 0) d->t_first = perf_now();
    return MP_OK;
}

int delta_ship(delta_shipper_t *d, const decoder_t *dec, const unsigned char *secret, const wire_hdr_t *step,
               const wire_row_t *rows)
{
    if (!d->sock || step->B == 0) return MP_OK;
    const wire_hdr_t h = {WIRE_MAGIC, WIRE_DELTA, step->step, step->B, delta_width(dec), d->chain, step->durable};
    float *x;
    if (delta_ship_frame(d, secret, &h, rows, &x) != MP_OK) return MP_ERR;
    delta_pack(dec, rows, step->B, x);
    d->chain = step->step;
    return MP_OK;
}

int delta_flush(delta_shipper_t *d, int force, int *due_ms_p)
{
    *due_ms_p = -1;
    if (!d->holding) return MP_OK;
    const double due = d->t_first + 1e-3 * DELTA_BATCH_MS - perf_now();
    if (!force && d->parts < DELTA_BATCH && due > 0) {
        *due_ms_p = (int)(1e3 * due) + 1;
        return MP_OK;
    }
    d->parts = 0;
    return shipper_send_held(d, 0) < 0 ? MP_ERR : MP_OK;
}

void delta_shipper_close(delta_shipper_t *d)
{
    if (d->holding) zmq_msg_close(&d->held);
    d->holding = 0;
}

/* Slot s owes no snapshot rows. */
static void miss_clear(delta_follower_t *f, int s) { f->miss_lo[s] = f->miss_hi[s] = 0; }

/* Row r of a delta into the cache and the slot's counters. Positions ≥ p of a slot that a snapshot
 * still owes come from the deltas now (the primary stops sending them on the same row). */
static void apply_row(delta_follower_t *f, decoder_t *dec, uint64_t step, const wire_row_t *row, const float *x)
{
    const int s = row->slot, p = row->pos;
    if (p > f->len[s]) { /* it missed this sequence's start: holds nothing until the next */
        f->len[s] = 0;
        miss_clear(f, s);
        return;
    }
    delta_unpack(dec, row, 1, x);
    f->len[s] = p + 1, f->last_step[s] = step;
    if (p < f->miss_hi[s]) f->miss_hi[s] = p;
    if (f->miss_lo[s] >= f->miss_hi[s]) miss_clear(f, s);
}

/* Row r of a snapshot's chunk: the next position its slot is owed, or one the deltas have taken
 * over since (ignored); a later one means a chunk was lost: the slot keeps the prefix it has and a
 * new snapshot is wanted. */
static void apply_chunk_row(delta_follower_t *f, decoder_t *dec, const wire_row_t *row, const float *x)
{
    const int s = row->slot, q = row->pos;
    if (f->miss_lo[s] >= f->miss_hi[s] || q < f->miss_lo[s] || q >= f->miss_hi[s]) return;
    if (q > f->miss_lo[s]) {
        MP_WARN("standby: a snapshot chunk was lost (slot %d: position %d follows %d): the slot holds %d positions; "
                "asking for a new snapshot", s, q, f->miss_lo[s], f->miss_lo[s]);
        f->len[s] = f->miss_lo[s];
        miss_clear(f, s);
        f->gaps++, f->resync = 1;
        return;
    }
    delta_unpack(dec, row, 1, x);
    f->snap_rows++;
    if (++f->miss_lo[s] == f->miss_hi[s]) miss_clear(f, s);
}

int delta_follower_held(const delta_follower_t *f, int s)
{
    return f->miss_lo[s] < f->miss_hi[s] ? f->miss_lo[s] : f->len[s];
}

int delta_follower_init(delta_follower_t *f, const decoder_t *dec, int cap)
{
    memset(f, 0, sizeof *f);
    f->slots = dec->slots, f->width = delta_width(dec), f->T = dec->T, f->cap = cap;
    const int chunk = delta_chunk_rows(dec);
    f->rows_max = chunk > f->slots ? chunk : f->slots;
    const size_t S = (size_t)f->slots, R = (size_t)f->rows_max, W = (size_t)(f->width ? f->width : 1);
    f->len = MP_CALLOC(S, sizeof *f->len);
    f->last_step = MP_CALLOC(S, sizeof *f->last_step);
    f->miss_lo = MP_CALLOC(S, sizeof *f->miss_lo);
    f->miss_hi = MP_CALLOC(S, sizeof *f->miss_hi);
    f->qh = MP_CALLOC((size_t)cap, sizeof *f->qh);
    f->qrows = MP_CALLOC((size_t)cap * R, sizeof *f->qrows);
    f->qx = MP_CALLOC((size_t)cap * R * W, sizeof *f->qx);
    if (f->len && f->last_step && f->miss_lo && f->miss_hi && f->qh && f->qrows && f->qx) return MP_OK;
    delta_follower_free(f);
    return MP_ERR;
}

void delta_follower_free(delta_follower_t *f)
{
    free(f->len), free(f->last_step), free(f->miss_lo), free(f->miss_hi), free(f->qh), free(f->qrows), free(f->qx);
    memset(f, 0, sizeof *f);
}

/* Every slot holds nothing and the queue is dropped: after a gap, its state is not a prefix. */
static void follower_forget(delta_follower_t *f)
{
    for (int s = 0; s < f->slots; s++) f->len[s] = 0, miss_clear(f, s);
    f->n = 0;
    f->snap_open = f->caught_up = 0;
}

void delta_follower_hello(delta_follower_t *f, uint64_t gen)
{
    follower_forget(f);
    f->want_gen = gen, f->resync = 0, f->chained = 0;
}

/* Queues a checked delta or chunk (h's step: when it may apply), then applies what is confirmed. */
static void follower_queue(delta_follower_t *f, decoder_t *dec, const wire_hdr_t *h, const wire_row_t *rows,
                           const float *x)
{
    const int q = (f->head + f->n) % f->cap;
    const size_t R = (size_t)f->rows_max, W = (size_t)f->width;
    f->qh[q] = *h;
    memcpy(f->qrows + q * R, rows, (size_t)h->B * sizeof *rows);
    if (W) memcpy(f->qx + q * R * W, x, (size_t)h->B * W * sizeof(float));
    f->n++;
    delta_follower_confirm(f, dec, f->confirmed); /* its confirmation may have come first (another link) */
}

/* A snapshot's header (WIRE_SNAP) answering the last hello: every slot's sequence, owed by chunks. */
static int follower_take_header(delta_follower_t *f, decoder_t *dec, const wire_hdr_t *h, const wire_row_t *rows)
{
    if (!f->want_gen || h->aux != f->want_gen) return f->ignored++, MP_OK; /* another hello's: a newer one is due */
    int *len = malloc((size_t)f->slots * sizeof *len);
    uint64_t *last = malloc((size_t)f->slots * sizeof *last);
    int rc = len && last ? delta_report_get(rows, h->B, f->slots, f->T, len, last) : MP_FAIL("out of memory");
    if (rc != MP_OK) {
        f->refused++;
        free(len), free(last);
        return MP_FAIL("standby: refused a snapshot header of %d rows after step %llu", h->B, (unsigned long long)h->step);
    }
    follower_forget(f);
    f->snap_stamp = 0;
    for (int s = 0; s < f->slots; s++) {
        f->len[s] = len[s], f->last_step[s] = last[s];
        f->miss_lo[s] = 0, f->miss_hi[s] = len[s];
        if (len[s] && last[s] > f->snap_stamp) f->snap_stamp = last[s];
    }
    free(len), free(last);
    f->snap_gen = h->aux, f->snap_at = h->step, f->snap_open = 1, f->want_gen = 0;
    f->chained = 1, f->received = h->step; /* the next delta names this step as its chain */
    delta_follower_confirm(f, dec, h->durable);
    return MP_OK;
}

/* A snapshot's chunk (WIRE_CHUNK) of the snapshot taken: queued, to apply once its stamp is confirmed. */
static int follower_take_chunk(delta_follower_t *f, decoder_t *dec, const wire_hdr_t *h, const wire_row_t *rows,
                               const float *x)
{
    if (!f->snap_open || h->aux != f->snap_gen || h->step != f->snap_at) return f->ignored++, MP_OK;
    if (f->n == f->cap) {
        f->gaps++, f->resync = 1;
        MP_WARN("standby: %d deltas wait for their confirmation; a snapshot chunk dropped: asking for a new snapshot", f->cap);
        follower_forget(f);
        return MP_OK;
    }
    wire_hdr_t q = *h;
    q.step = f->snap_stamp; /* every row of the snapshot is of a step ≤ its stamp */
    follower_queue(f, dec, &q, rows, x);
    return MP_OK;
}

int delta_follower_take(delta_follower_t *f, decoder_t *dec, const wire_hdr_t *h, const wire_row_t *rows,
                        const float *x)
{
    if (h->kind == WIRE_SNAP && h->width == 0) return follower_take_header(f, dec, h, rows);
    const int max = h->kind == WIRE_CHUNK ? f->rows_max : f->slots;
    if ((h->kind != WIRE_DELTA && h->kind != WIRE_CHUNK) || h->width != f->width || h->B < 1 || h->B > max)
        return f->refused++, MP_FAIL("standby: refused a message of kind %u, %d rows of %d floats (this stage's: up "
                                     "to %d of %d)", h->kind, h->B, h->width, max, f->width);
    for (int r = 0; r < h->B; r++)
        if (rows[r].slot < 0 || rows[r].slot >= f->slots || rows[r].pos < 0 || rows[r].pos >= f->T)
            return f->refused++, MP_FAIL("standby: refused a %s of step %llu: row (slot %d, position %d) outside the cache",
                                         h->kind == WIRE_CHUNK ? "snapshot chunk" : "delta", (unsigned long long)h->step,
                                         rows[r].slot, rows[r].pos);
    if (h->kind == WIRE_CHUNK) return follower_take_chunk(f, dec, h, rows, x);
    if (f->want_gen) return f->ignored++, MP_OK; /* its snapshot will hold what this delta brings */
    if (f->chained && h->step <= f->received)
        return f->refused++, MP_FAIL("standby: refused a delta of step %llu: not after the last one received (%llu)",
                                     (unsigned long long)h->step, (unsigned long long)f->received);
    delta_follower_confirm(f, dec, h->durable); /* what its watermark confirms, before a gap forgets it */
    if (f->chained && h->aux != f->received) {
        f->gaps++;
        MP_WARN("standby: a delta was lost (step %llu follows %llu, last received %llu): every slot holds nothing; "
                "asking for a new snapshot", (unsigned long long)h->step, (unsigned long long)h->aux,
                (unsigned long long)f->received);
        follower_forget(f);
        f->resync = 1;
    } else if (f->n == f->cap) {
        f->gaps++;
        MP_WARN("standby: %d deltas wait for their confirmation; dropped: asking for a new snapshot", f->cap);
        follower_forget(f);
        f->resync = 1;
    }
    f->chained = 1, f->received = h->step;
    follower_queue(f, dec, h, rows, x);
    return MP_OK;
}

void delta_follower_confirm(delta_follower_t *f, decoder_t *dec, uint64_t step)
{
    if (step > f->confirmed) f->confirmed = step;
    const size_t R = (size_t)f->rows_max, W = (size_t)f->width;
    while (f->n && f->qh[f->head].step <= f->confirmed) {
        const wire_hdr_t *h = &f->qh[f->head];
        for (int r = 0; r < h->B; r++) {
            const wire_row_t *row = &f->qrows[f->head * R + (size_t)r];
            const float *x = f->qx + (f->head * R + (size_t)r) * W;
            if (h->kind == WIRE_CHUNK) apply_chunk_row(f, dec, row, x);
            else apply_row(f, dec, h->step, row, x);
        }
        if (h->step > f->applied) f->applied = h->step; /* a chunk's: its snapshot's newest row */
        f->deltas_applied += h->kind == WIRE_DELTA;
        f->head = (f->head + 1) % f->cap, f->n--;
    }
    if (f->snap_open && !f->caught_up && f->snap_stamp <= f->confirmed) { /* every owed row applied? */
        int owed = 0;
        for (int s = 0; s < f->slots; s++) owed |= f->miss_lo[s] < f->miss_hi[s];
        f->caught_up = !owed && !f->resync; /* a lost chunk: not caught up until the next snapshot */
    }
}

void delta_state_rows(int S, const int *len, const uint64_t *last, wire_row_t *rows)
{
    for (int s = 0; s < S; s++) {
        rows[2 * s] = (wire_row_t){s, len[s], (int32_t)(last[s] & 0x7fffffffu)};
        rows[2 * s + 1] = (wire_row_t){s, len[s], (int32_t)((last[s] >> 31) & 0x7fffffffu)};
    }
}

void delta_report_rows(const delta_follower_t *f, wire_row_t *rows)
{
    for (int s = 0; s < f->slots; s++) {
        const int held = delta_follower_held(f, s);
        rows[2 * s] = (wire_row_t){s, held, (int32_t)(f->last_step[s] & 0x7fffffffu)};
        rows[2 * s + 1] = (wire_row_t){s, held, (int32_t)((f->last_step[s] >> 31) & 0x7fffffffu)};
    }
}

int delta_report_get(const wire_row_t *rows, int B, int S, int T, int *len_p, uint64_t *last_p)
{
    if (B != 2 * S) return MP_FAIL("a standby's report of %d rows for %d slots", B, S);
    for (int s = 0; s < S; s++) {
        const wire_row_t *a = &rows[2 * s], *b = &rows[2 * s + 1];
        if (a->slot != s || b->slot != s || a->pos != b->pos || a->pos < 0 || a->pos > T || a->token < 0 || b->token < 0)
            return MP_FAIL("a standby's report with a malformed row for slot %d", s);
    }
    for (int s = 0; s < S; s++)
        len_p[s] = rows[2 * s].pos, last_p[s] = (uint64_t)rows[2 * s].token | (uint64_t)rows[2 * s + 1].token << 31;
    return MP_OK;
}
