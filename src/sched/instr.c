#include "instr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

const char *const op_names[OP_COUNT] = {"LOAD_BATCH", "FORWARD", "BACKWARD", "SEND_ACT", "RECV_ACT", "SEND_GRAD",
                                        "RECV_GRAD", "OFFLOAD", "PREFETCH", "REDUCE_GRADS", "OPTIMIZER_STEP",
                                        "BACKWARD_B", "BACKWARD_W", "EVICT", "ACCEPT", "RETURN", "RECLAIM"};

const sched_costs_t sched_costs_unit = {1.0, 1.0, 1.0};

int sched_costs_parse(const char *text, sched_costs_t *c, char *why, size_t nwhy)
{
    *c = (sched_costs_t){0.0, 0.0, 0.0};
    if (!strcmp(text, "unit")) return MP_OK;
    double t[3];
    char tail;
    if (sscanf(text, "%lf,%lf,%lf%c", &t[0], &t[1], &t[2], &tail) != 3 || !(t[0] > 0.0 && t[1] > 0.0 && t[2] > 0.0) ||
        !isfinite(t[0] + t[1] + t[2])) {
        snprintf(why, nwhy, "not three positive times TF,TB,TW, nor unit");
        return MP_ERR;
    }
    *c = (sched_costs_t){t[0], t[1], t[2]};
    return MP_OK;
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

int sched_list_peak_w(const instr_list_t *l)
{
    int live = 0, peak = 0;
    for (int i = 0; i < l->n; i++) {
        if (l->ins[i].op == OP_BACKWARD_B && ++live > peak) peak = live;
        if (l->ins[i].op == OP_BACKWARD_W) live--;
    }
    return peak;
}

int sched_emit(instr_list_t *l, op_t op, int mb, int chunk, int peer)
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

int sched_emit_forward_recv(instr_list_t *l, int mb, int k, int pp)
{
    if (k == 0) return sched_emit(l, OP_LOAD_BATCH, mb, k, -1);
    if (sched_place_edge_local(l->place, k - 1, pp)) return MP_OK;
    return sched_emit(l, OP_RECV_ACT, mb, k, sched_place_stage(l->place, k - 1, pp));
}

int sched_emit_forward_send(instr_list_t *l, int mb, int k, int K, int pp)
{
    if (k == K - 1 || sched_place_edge_local(l->place, k, pp)) return MP_OK;
    return sched_emit(l, OP_SEND_ACT, mb, k, sched_place_stage(l->place, k + 1, pp));
}

int sched_emit_backward_recv(instr_list_t *l, int mb, int k, int K, int pp)
{
    if (k == K - 1 || sched_place_edge_local(l->place, k, pp)) return MP_OK;
    return sched_emit(l, OP_RECV_GRAD, mb, k, sched_place_stage(l->place, k + 1, pp));
}

int sched_emit_backward_send(instr_list_t *l, int mb, int k, int pp)
{
    if (k == 0 || sched_place_edge_local(l->place, k - 1, pp)) return MP_OK;
    return sched_emit(l, OP_SEND_GRAD, mb, k, sched_place_stage(l->place, k - 1, pp));
}

int sched_emit_forward(instr_list_t *l, int mb, int k, int K, int pp)
{
    int rc = sched_emit_forward_recv(l, mb, k, pp);
    rc |= sched_emit(l, OP_FORWARD, mb, k, -1);
    rc |= sched_emit_forward_send(l, mb, k, K, pp);
    return rc ? MP_ERR : MP_OK;
}

int sched_emit_backward_op(instr_list_t *l, op_t op, int mb, int k, int K, int pp)
{
    int rc = sched_emit_backward_recv(l, mb, k, K, pp);
    rc |= sched_emit(l, op, mb, k, -1);
    rc |= sched_emit_backward_send(l, mb, k, pp);
    return rc ? MP_ERR : MP_OK;
}

int sched_emit_backward(instr_list_t *l, int mb, int k, int K, int pp)
{
    return sched_emit_backward_op(l, OP_BACKWARD, mb, k, K, pp);
}

int sched_emit_subnet_step(instr_list_t *l, int mb, int stage) { return sched_emit(l, OP_OPTIMIZER_STEP, mb, stage, -1); }

int sched_emit_step_end(instr_list_t *l)
{
    return sched_emit(l, OP_REDUCE_GRADS, -1, -1, -1) | sched_emit(l, OP_OPTIMIZER_STEP, -1, -1, -1) ? MP_ERR : MP_OK;
}

int sched_finish(instr_list_t *l, int rc, instr_list_t *out)
{
    rc |= sched_emit_step_end(l);
    if (rc != MP_OK) {
        free(l->ins);
        return MP_ERR;
    }
    *out = *l;
    return MP_OK;
}

void sched_free(instr_list_t *l)
{
    free(l->ins);
    l->ins = NULL;
    l->n = l->cap = 0;
}
