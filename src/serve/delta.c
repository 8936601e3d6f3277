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
    return cfg_heads(&dec->cfg, l) ? cfg_attn_width(&dec->cfg, l) : 0;
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

int delta_ship(delta_shipper_t *d, const decoder_t *dec, const unsigned char *secret, const wire_hdr_t *step,
               const wire_row_t *rows)
{
    if (!d->sock || step->B == 0) return MP_OK;
    const wire_hdr_t h = {WIRE_MAGIC, WIRE_DELTA, step->step, step->B, delta_width(dec), d->chain, step->durable};
    if (d->holding && shipper_send_held(d, 1) < 0) return MP_ERR;
    float *x;
    if (wire_msg_build(&d->held, secret, &h, rows, &x) != MP_OK) return MP_ERR;
    delta_pack(dec, rows, step->B, x);
    d->holding = 1, d->chain = step->step;
    if (d->parts++ == 0) d->t_first = perf_now();
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

/* Row r of a delta into the cache and the slot's counters. */
static void apply_row(delta_follower_t *f, decoder_t *dec, uint64_t step, const wire_row_t *row, const float *x)
{
    const int s = row->slot, p = row->pos;
    if (p > f->len[s]) { /* it missed this sequence's start: holds nothing until the next */
        f->len[s] = 0;
        return;
    }
    for (int b = 0; b < dec->nlayers; b++) {
        const size_t A = (size_t)block_A(dec, b);
        for (int which = 0; which < 2; which++, x += A) memcpy(kv_row(dec, b, s, which, p), x, A * sizeof(float));
    }
    f->len[s] = p + 1, f->last_step[s] = step;
}

int delta_follower_init(delta_follower_t *f, const decoder_t *dec, int cap)
{
    memset(f, 0, sizeof *f);
    f->slots = dec->slots, f->width = delta_width(dec), f->T = dec->T, f->cap = cap;
    const size_t S = (size_t)f->slots, W = (size_t)(f->width ? f->width : 1);
    f->len = MP_CALLOC(S, sizeof *f->len);
    f->last_step = MP_CALLOC(S, sizeof *f->last_step);
    f->qh = MP_CALLOC((size_t)cap, sizeof *f->qh);
    f->qrows = MP_CALLOC((size_t)cap * S, sizeof *f->qrows);
    f->qx = MP_CALLOC((size_t)cap * S * W, sizeof *f->qx);
    if (f->len && f->last_step && f->qh && f->qrows && f->qx) return MP_OK;
    delta_follower_free(f);
    return MP_ERR;
}

void delta_follower_free(delta_follower_t *f)
{
    free(f->len), free(f->last_step), free(f->qh), free(f->qrows), free(f->qx);
    memset(f, 0, sizeof *f);
}

/* Every slot holds nothing and the queue is dropped: after a gap, its state is not a prefix. */
static void follower_forget(delta_follower_t *f)
{
    for (int s = 0; s < f->slots; s++) f->len[s] = 0;
    f->n = 0;
}

int delta_follower_take(delta_follower_t *f, decoder_t *dec, const wire_hdr_t *h, const wire_row_t *rows,
                        const float *x)
{
    if (h->kind != WIRE_DELTA || h->width != f->width || h->B < 1 || h->B > f->slots)
        return f->refused++, MP_FAIL("standby: refused a delta of %d rows of %d floats (this stage's: up to %d of %d)",
                                     h->B, h->width, f->slots, f->width);
    for (int r = 0; r < h->B; r++)
        if (rows[r].slot < 0 || rows[r].slot >= f->slots || rows[r].pos < 0 || rows[r].pos >= f->T)
            return f->refused++, MP_FAIL("standby: refused a delta of step %llu: row (slot %d, position %d) outside the cache",
                                         (unsigned long long)h->step, rows[r].slot, rows[r].pos);
    if (f->chained && h->step <= f->received)
        return f->refused++, MP_FAIL("standby: refused a delta of step %llu: not after the last one received (%llu)",
                                     (unsigned long long)h->step, (unsigned long long)f->received);
    delta_follower_confirm(f, dec, h->durable); /* what its watermark confirms, before a gap forgets it */
    if (f->chained && h->aux != f->received) {
        f->gaps++;
        MP_WARN("standby: a delta was lost (step %llu follows %llu, last received %llu): every slot resynchronises "
                "at its next sequence", (unsigned long long)h->step, (unsigned long long)h->aux,
                (unsigned long long)f->received);
        follower_forget(f);
    } else if (f->n == f->cap) {
        f->gaps++;
        MP_WARN("standby: %d deltas wait for their confirmation; dropped: every slot resynchronises", f->cap);
        follower_forget(f);
    }
    const int q = (f->head + f->n) % f->cap;
    const size_t S = (size_t)f->slots, W = (size_t)f->width;
    f->qh[q] = *h;
    memcpy(f->qrows + q * S, rows, (size_t)h->B * sizeof *rows);
    if (W) memcpy(f->qx + q * S * W, x, (size_t)h->B * W * sizeof(float));
    f->n++;
    f->chained = 1, f->received = h->step;
    delta_follower_confirm(f, dec, f->confirmed); /* its confirmation may have come first (another link) */
    return MP_OK;
}

void delta_follower_confirm(delta_follower_t *f, decoder_t *dec, uint64_t step)
{
    if (step > f->confirmed) f->confirmed = step;
    const size_t S = (size_t)f->slots, W = (size_t)f->width;
    while (f->n && f->qh[f->head].step <= f->confirmed) {
        const wire_hdr_t *h = &f->qh[f->head];
        for (int r = 0; r < h->B; r++)
            apply_row(f, dec, h->step, &f->qrows[f->head * S + (size_t)r], f->qx + (f->head * S + (size_t)r) * W);
        f->applied = h->step;
        f->deltas_applied++;
        f->head = (f->head + 1) % f->cap, f->n--;
    }
}

void delta_report_rows(const delta_follower_t *f, wire_row_t *rows)
{
    for (int s = 0; s < f->slots; s++) {
        rows[2 * s] = (wire_row_t){s, f->len[s], (int32_t)(f->last_step[s] & 0x7fffffffu)};
        rows[2 * s + 1] = (wire_row_t){s, f->len[s], (int32_t)((f->last_step[s] >> 31) & 0x7fffffffu)};
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
