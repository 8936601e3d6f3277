#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

const char *const op_names[OP_COUNT] = {"LOAD_BATCH", "FORWARD", "BACKWARD", "SEND_ACT", "RECV_ACT", "SEND_GRAD",
                                        "RECV_GRAD", "OFFLOAD", "PREFETCH", "REDUCE_GRADS", "OPTIMIZER_STEP",
                                        "BACKWARD_B", "BACKWARD_W", "EVICT", "ACCEPT", "RETURN", "RECLAIM"};

const sched_costs_t sched_costs_unit = {1.0, 1.0, 1.0};

const char *const sched_kind_names[SCHED_KINDS] = {"gpipe", "1f1b", "interleaved", "2bw"};

int sched_kind_parse(const char *name, sched_kind_t *kind_p)
{
    for (int k = 0; k < SCHED_KINDS; k++)
        if (strcmp(name, sched_kind_names[k]) == 0) return *kind_p = (sched_kind_t)k, MP_OK;
    return MP_ERR;
}

sched_place_t sched_kind_place(sched_kind_t kind)
{
    (void)kind;
    return SCHED_PLACE_LOOP;
}

int sched_place_stage(sched_place_t place, int k, int pp)
{
    if (place == SCHED_PLACE_V) return k < pp ? k : 2 * pp - 1 - k;
    return k % pp;
}

int sched_place_local(sched_place_t place, int k, int pp)
{
    if (place == SCHED_PLACE_V) return k >= pp;
    return k / pp;
}

int sched_place_chunk(sched_place_t place, int stage, int local, int pp)
{
    if (place == SCHED_PLACE_V) return local ? 2 * pp - 1 - stage : stage;
    return local * pp + stage;
}

int sched_place_edge_local(sched_place_t place, int k, int pp) { return place == SCHED_PLACE_V && k == pp - 1; }

int sched_place_lane(sched_place_t place, int k, int K) { return place == SCHED_PLACE_V && k >= K / 2; }

int sched_chunk_stage(sched_kind_t kind, int k, int pp) { return sched_place_stage(sched_kind_place(kind), k, pp); }
int sched_chunk_local(sched_kind_t kind, int k, int pp) { return sched_place_local(sched_kind_place(kind), k, pp); }
int sched_stage_chunk(sched_kind_t kind, int stage, int local, int pp)
{
    return sched_place_chunk(sched_kind_place(kind), stage, local, pp);
}

/* Most FORWARDs not yet followed by their `until` (or by a fused BACKWARD) at once. */
static int list_peak(const instr_list_t *l, int carried, op_t until)
{
    int live = carried, peak = carried;
    for (int i = 0; i < l->n; i++) {
        if (l->ins[i].op == OP_FORWARD && ++live > peak) peak = live;
        if (l->ins[i].op == OP_BACKWARD || l->ins[i].op == until) live--;
    }
    return peak;
}

int sched_list_peak(const instr_list_t *l, int carried) { return list_peak(l, carried, OP_BACKWARD_W); }
int sched_list_peak_b(const instr_list_t *l, int carried) { return list_peak(l, carried, OP_BACKWARD_B); }

int sched_check(sched_kind_t kind, int pp, int m, int v, char *why, int why_len)
{
    if (pp < 1 || m < 1 || v < 1) return snprintf(why, (size_t)why_len, "pp, m and v must be >= 1"), MP_ERR;
    if (kind != SCHED_INTERLEAVED && v != 1)
        return snprintf(why, (size_t)why_len, "parallel.virtual_stages = %d needs schedule = interleaved", v), MP_ERR;
    if (kind == SCHED_INTERLEAVED && pp > 1 && m % pp != 0)
        return snprintf(why, (size_t)why_len,
                        "the interleaved schedule needs the micro-batches per step (%d) to be a multiple of "
                        "parallel.pp (%d)", m, pp), MP_ERR;
    return MP_OK;
}

static int push(instr_list_t *l, op_t op, int mb, int chunk, int peer)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        instr_t *p = realloc(l->ins, (size_t)cap * sizeof *p);
        if (!p) return MP_FAIL("out of memory building a schedule");
        l->ins = p;
        l->cap = cap;
    }
    l->ins[l->n++] = (instr_t){op, mb, chunk, peer};
    return MP_OK;
}

/* A forward of (mb, chunk k) with its receive before and its send after; the peers are where the
 * list's placement puts chunks k-1 and k+1, and a boundary inside the stage needs no message. */
static int emit_forward(instr_list_t *l, int mb, int k, int K, int pp)
{
    const sched_place_t pl = l->place;
    int rc = k == 0                                ? push(l, OP_LOAD_BATCH, mb, k, -1)
             : sched_place_edge_local(pl, k - 1, pp) ? MP_OK
                                                     : push(l, OP_RECV_ACT, mb, k, sched_place_stage(pl, k - 1, pp));
    rc |= push(l, OP_FORWARD, mb, k, -1);
    if (k < K - 1 && !sched_place_edge_local(pl, k, pp)) rc |= push(l, OP_SEND_ACT, mb, k, sched_place_stage(pl, k + 1, pp));
    return rc ? MP_ERR : MP_OK;
}

static int emit_backward(instr_list_t *l, int mb, int k, int K, int pp)
{
    const sched_place_t pl = l->place;
    int rc = k < K - 1 && !sched_place_edge_local(pl, k, pp) ? push(l, OP_RECV_GRAD, mb, k, sched_place_stage(pl, k + 1, pp))
                                                            : MP_OK;
    rc |= push(l, OP_BACKWARD, mb, k, -1);
    if (k > 0 && !sched_place_edge_local(pl, k - 1, pp)) rc |= push(l, OP_SEND_GRAD, mb, k, sched_place_stage(pl, k - 1, pp));
    return rc ? MP_ERR : MP_OK;
}

int sched_emit_forward(instr_list_t *l, int mb, int k, int K, int pp) { return emit_forward(l, mb, k, K, pp); }
int sched_emit_backward(instr_list_t *l, int mb, int k, int K, int pp) { return emit_backward(l, mb, k, K, pp); }
int sched_emit_subnet_step(instr_list_t *l, int mb, int stage) { return push(l, OP_OPTIMIZER_STEP, mb, stage, -1); }
int sched_emit_step_end(instr_list_t *l)
{
    return push(l, OP_REDUCE_GRADS, -1, -1, -1) | push(l, OP_OPTIMIZER_STEP, -1, -1, -1) ? MP_ERR : MP_OK;
}

/* Micro-step i of this stage's forward (or backward) sequence in Megatron's interleaved order:
 * groups of pp micro-batches per chunk, chunks ascending for forwards, descending for backwards. */
static void interleaved_step(int i, int pp, int v, int backward, int stage, int *mb_p, int *k_p)
{
    int group = i / pp, c = group % v;
    if (backward) c = v - 1 - c;
    *mb_p = (i / (pp * v)) * pp + i % pp;
    *k_p = sched_place_chunk(SCHED_PLACE_LOOP, stage, c, pp);
}

/* Every step ends by reducing the gradients and stepping the optimizer; *out gets the list, or
 * nothing is left allocated when an append failed. */
static int sched_finish(instr_list_t *l, int rc, instr_list_t *out)
{
    rc |= push(l, OP_REDUCE_GRADS, -1, -1, -1);
    rc |= push(l, OP_OPTIMIZER_STEP, -1, -1, -1);
    if (rc != MP_OK) {
        free(l->ins);
        return MP_ERR;
    }
    *out = *l;
    return MP_OK;
}

int sched_build(instr_list_t *out, sched_kind_t kind, int stage, int pp, int m, int v)
{
    return sched_build_costs(out, kind, stage, pp, m, v, NULL);
}

int sched_build_costs(instr_list_t *out, sched_kind_t kind, int stage, int pp, int m, int v, const sched_costs_t *costs)
{
    (void)costs;
    char why[256];
    if (sched_check(kind, pp, m, v, why, sizeof why) != MP_OK) return MP_FAIL("%s", why);
    if (stage < 0 || stage >= pp) return MP_FAIL("stage %d outside [0, %d)", stage, pp);
    instr_list_t l = {0};
    const int K = pp * v, total = m * v;
    int rc = MP_OK;
    if (kind == SCHED_GPIPE) {
        for (int mb = 0; mb < m; mb++) rc |= emit_forward(&l, mb, stage, K, pp);
        for (int mb = 0; mb < m; mb++) rc |= emit_backward(&l, mb, stage, K, pp);
    } else {
        /* 1F1B family: warm-up forwards, then one forward and one backward in turn, then the
         * remaining backwards. Interleaved: Megatron's warm-up of (pp-s-1)·2 + (v-1)·pp. */
        int warm = kind == SCHED_INTERLEAVED && v > 1 ? (pp - stage - 1) * 2 + (v - 1) * pp : pp - stage - 1;
        if (warm > total) warm = total;
        int f = 0, b = 0, mb, k;
        for (; f < warm; f++) interleaved_step(f, pp, v, 0, stage, &mb, &k), rc |= emit_forward(&l, mb, k, K, pp);
        for (; f < total; f++, b++) {
            interleaved_step(f, pp, v, 0, stage, &mb, &k), rc |= emit_forward(&l, mb, k, K, pp);
            interleaved_step(b, pp, v, 1, stage, &mb, &k), rc |= emit_backward(&l, mb, k, K, pp);
        }
        for (; b < total; b++) interleaved_step(b, pp, v, 1, stage, &mb, &k), rc |= emit_backward(&l, mb, k, K, pp);
    }
    return sched_finish(&l, rc, out);
}

int sched_build_2bw(instr_list_t *out, int stage, int pp, int m, int first, int drain)
{
    if (pp < 1 || m < 1 || stage < 0 || stage >= pp) return MP_FAIL("2bw: bad stage %d of pp=%d, m=%d", stage, pp, m);
    instr_list_t l = {0};
    const int w = pp - stage - 1 < m ? pp - stage - 1 : m;
    int rc = MP_OK;
    for (int f = 0; first && f < w; f++) rc |= emit_forward(&l, f, stage, pp, pp);
    for (int b = 0; b < m; b++) {
        const int f = b + w; /* f >= m: the next batch's micro-batch f - m */
        if (f < m || !drain) rc |= emit_forward(&l, f, stage, pp, pp);
        rc |= emit_backward(&l, b, stage, pp, pp);
    }
    return sched_finish(&l, rc, out);
}

void sched_free(instr_list_t *l)
{
    free(l->ins);
    l->ins = NULL;
    l->n = l->cap = 0;
}
