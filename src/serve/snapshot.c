/* A primary's snapshots for its standby (snapshot.h). */
#include "snapshot.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

int snap_init(snap_sender_t *sn, const decoder_t *dec)
{
    memset(sn, 0, sizeof *sn);
    sn->slots = dec->slots, sn->T = dec->T, sn->chunk_rows = delta_chunk_rows(dec);
    const size_t S = (size_t)sn->slots, R = (size_t)(sn->chunk_rows > 2 * sn->slots ? sn->chunk_rows : 2 * sn->slots);
    sn->len = MP_CALLOC(S, sizeof *sn->len);
    sn->last = MP_CALLOC(S, sizeof *sn->last);
    sn->next = MP_CALLOC(S, sizeof *sn->next);
    sn->end = MP_CALLOC(S, sizeof *sn->end);
    sn->rows = MP_CALLOC(R, sizeof *sn->rows);
    if (sn->len && sn->last && sn->next && sn->end && sn->rows) return MP_OK;
    snap_free(sn);
    return MP_ERR;
}

void snap_free(snap_sender_t *sn)
{
    free(sn->len), free(sn->last), free(sn->next), free(sn->end), free(sn->rows);
    memset(sn, 0, sizeof *sn);
}

void snap_seed(snap_sender_t *sn, const int *len, const uint64_t *last)
{
    for (int s = 0; s < sn->slots; s++) sn->len[s] = len[s], sn->last[s] = last[s];
}

void snap_track(snap_sender_t *sn, const wire_row_t *rows, int B, uint64_t step)
{
    for (int r = 0; r < B; r++) {
        const int s = rows[r].slot, p = rows[r].pos, follows = p <= sn->len[s];
        /* p > len cannot follow from the rows a primary is sent; if it did, claim nothing */
        sn->len[s] = follows ? p + 1 : 0;
        if (follows) sn->last[s] = step;
        /* the standby takes positions ≥ p from this row's delta on, all of them when the row starts a
         * sequence or does not follow (delta.h's apply_row): the snapshot owes no more of them */
        if (p == 0 || !follows) sn->end[s] = 0;
        else if (p < sn->end[s]) sn->end[s] = p;
        if (sn->next[s] >= sn->end[s]) sn->next[s] = sn->end[s] = 0;
    }
}

int snap_begin(snap_sender_t *sn, delta_shipper_t *d, const unsigned char *secret, uint64_t gen, uint64_t durable)
{
    if (!d->sock) return MP_OK;
    sn->active = 1, sn->gen = gen, sn->at = d->chain, sn->cursor = 0;
    for (int s = 0; s < sn->slots; s++) sn->next[s] = 0, sn->end[s] = sn->len[s];
    sn->snapshots++;
    const wire_hdr_t h = {WIRE_MAGIC, WIRE_SNAP, sn->at, 2 * sn->slots, 0, gen, durable};
    delta_state_rows(sn->slots, sn->len, sn->last, sn->rows);
    float *x;
    return delta_ship_frame(d, secret, &h, sn->rows, &x);
}

int snap_pending(const snap_sender_t *sn)
{
    if (!sn->active) return 0;
    for (int s = sn->cursor; s < sn->slots; s++)
        if (sn->next[s] < sn->end[s]) return 1;
    return 0;
}

int snap_ship_chunk(snap_sender_t *sn, delta_shipper_t *d, const decoder_t *dec, const unsigned char *secret,
                    uint64_t durable)
{
    int B = 0;
    for (; sn->cursor < sn->slots && B < sn->chunk_rows; sn->cursor++) {
        const int s = sn->cursor;
        while (sn->next[s] < sn->end[s] && B < sn->chunk_rows) sn->rows[B++] = (wire_row_t){s, sn->next[s]++, 0};
        if (sn->next[s] < sn->end[s]) break; /* the chunk is full: this slot goes on in the next */
    }
    if (!snap_pending(sn)) sn->active = 0;
    if (!B) return MP_OK;
    sn->rows_sent += (uint64_t)B;
    const wire_hdr_t h = {WIRE_MAGIC, WIRE_CHUNK, sn->at, B, delta_width(dec), sn->gen, durable};
    float *x;
    if (delta_ship_frame(d, secret, &h, sn->rows, &x) != MP_OK) return MP_ERR;
    delta_pack(dec, sn->rows, B, x);
    return MP_OK;
}
