#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "zerobubble.h"

const char *const sched_kind_names[SCHED_KINDS] = {"gpipe", "1f1b", "interleaved", "2bw", "zb1p", "zbv", "dualpipev"};

int sched_kind_parse(const char *name, sched_kind_t *kind_p)
{
    for (int k = 0; k < SCHED_KINDS; k++)
        if (strcmp(name, sched_kind_names[k]) == 0) return *kind_p = (sched_kind_t)k, MP_OK;
    return MP_ERR;
}

/* The kinds' properties, one row each (what each runs with is compose.c's table) */
static const struct {
    int split;           /* each backward split into B and W */
    int played;          /* its lists played out from times */
    sched_place_t place; /* the loop or the V */
    int versions;        /* weight versions a stage keeps (2bw's double buffer: 2) */
} kind_props[SCHED_KINDS] = {
    [SCHED_GPIPE] = {0, 0, SCHED_PLACE_LOOP, 1}, [SCHED_1F1B] = {0, 0, SCHED_PLACE_LOOP, 1},
    [SCHED_INTERLEAVED] = {0, 0, SCHED_PLACE_LOOP, 1}, [SCHED_2BW] = {0, 0, SCHED_PLACE_LOOP, 2},
    [SCHED_ZB1P] = {1, 1, SCHED_PLACE_LOOP, 1}, [SCHED_ZBV] = {1, 1, SCHED_PLACE_V, 1},
    [SCHED_DUALPIPEV] = {1, 0, SCHED_PLACE_V, 1},
};

static int kind_ok(sched_kind_t kind) { return (int)kind >= 0 && kind < SCHED_KINDS; }
sched_place_t sched_kind_place(sched_kind_t kind) { return kind_ok(kind) ? kind_props[kind].place : SCHED_PLACE_LOOP; }
int sched_kind_split(sched_kind_t kind) { return kind_ok(kind) && kind_props[kind].split; }
int sched_kind_played(sched_kind_t kind) { return kind_ok(kind) && kind_props[kind].played; }
int sched_kind_versions(sched_kind_t kind) { return kind_ok(kind) ? kind_props[kind].versions : 1; }

int sched_kind_default_v(sched_kind_t kind) { return sched_kind_place(kind) == SCHED_PLACE_V ? 2 : 1; }

int sched_chunk_stage(sched_kind_t kind, int k, int pp) { return sched_place_stage(sched_kind_place(kind), k, pp); }
int sched_chunk_local(sched_kind_t kind, int k, int pp) { return sched_place_local(sched_kind_place(kind), k, pp); }
int sched_stage_chunk(sched_kind_t kind, int stage, int local, int pp)
{
    return sched_place_chunk(sched_kind_place(kind), stage, local, pp);
}

int sched_check(sched_kind_t kind, int pp, int m, int v, char *why, int why_len)
{
    const size_t n = (size_t)why_len;
    if ((int)kind < 0 || (int)kind >= SCHED_KINDS) return snprintf(why, n, "unknown schedule kind %d", (int)kind), MP_ERR;
    if (pp < 1 || m < 1 || v < 1) return snprintf(why, n, "pp, m and v must be >= 1"), MP_ERR;
    if (sched_kind_place(kind) == SCHED_PLACE_V && v != 2)
        return snprintf(why, n, "the %s schedule places two chunks per stage in a V (v = 2), not %d", sched_kind_names[kind],
                        v), MP_ERR;
    if (kind != SCHED_INTERLEAVED && sched_kind_place(kind) != SCHED_PLACE_V && v != 1)
        return snprintf(why, n, "parallel.virtual_stages = %d needs schedule = interleaved", v), MP_ERR;
    if (kind == SCHED_INTERLEAVED && pp > 1 && m % pp != 0)
        return snprintf(why, n,
                        "parallel.schedule=interleaved needs the micro-batches per step (%d) to be a multiple of "
                        "parallel.pp (%d)", m, pp), MP_ERR;
    if (kind == SCHED_DUALPIPEV && m < 2 * pp)
        return snprintf(why, n,
                        "parallel.schedule=dualpipev needs at least 2 × parallel.pp = %d micro-batches per step (it "
                        "has %d): its warm-up fills both arms of the V before the steady forward-backward pairs; use "
                        "more micro-batches, or zbv", 2 * pp, m), MP_ERR;
    return MP_OK;
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

int sched_build(instr_list_t *out, sched_kind_t kind, int stage, int pp, int m, int v)
{
    return sched_build_costs(out, kind, stage, pp, m, v, NULL);
}

int sched_build_costs(instr_list_t *out, sched_kind_t kind, int stage, int pp, int m, int v, const sched_costs_t *costs)
{
    char why[256];
    if (sched_check(kind, pp, m, v, why, sizeof why) != MP_OK) return MP_FAIL("%s", why);
    if (stage < 0 || stage >= pp) return MP_FAIL("stage %d outside [0, %d)", stage, pp);
    if (sched_kind_split(kind)) return zb_build(out, kind, stage, pp, m, costs ? costs : &sched_costs_unit);
    instr_list_t l = {0};
    const int K = pp * v, total = m * v;
    int rc = MP_OK;
    if (kind == SCHED_GPIPE) {
        for (int mb = 0; mb < m; mb++) rc |= sched_emit_forward(&l, mb, stage, K, pp);
        for (int mb = 0; mb < m; mb++) rc |= sched_emit_backward(&l, mb, stage, K, pp);
    } else {
        /* 1F1B family: warm-up forwards, then one forward and one backward in turn, then the
         * remaining backwards. Interleaved: Megatron's warm-up of (pp-s-1)·2 + (v-1)·pp. */
        int warm = kind == SCHED_INTERLEAVED && v > 1 ? (pp - stage - 1) * 2 + (v - 1) * pp : pp - stage - 1;
        if (warm > total) warm = total;
        int f = 0, b = 0, mb, k;
        for (; f < warm; f++) interleaved_step(f, pp, v, 0, stage, &mb, &k), rc |= sched_emit_forward(&l, mb, k, K, pp);
        for (; f < total; f++, b++) {
            interleaved_step(f, pp, v, 0, stage, &mb, &k), rc |= sched_emit_forward(&l, mb, k, K, pp);
            interleaved_step(b, pp, v, 1, stage, &mb, &k), rc |= sched_emit_backward(&l, mb, k, K, pp);
        }
        for (; b < total; b++) interleaved_step(b, pp, v, 1, stage, &mb, &k), rc |= sched_emit_backward(&l, mb, k, K, pp);
    }
    return sched_finish(&l, rc, out);
}

int sched_build_2bw(instr_list_t *out, int stage, int pp, int m, int first, int drain)
{
    if (pp < 1 || m < 1 || stage < 0 || stage >= pp) return MP_FAIL("2bw: bad stage %d of pp=%d, m=%d", stage, pp, m);
    instr_list_t l = {0};
    const int w = pp - stage - 1 < m ? pp - stage - 1 : m;
    int rc = MP_OK;
    for (int f = 0; first && f < w; f++) rc |= sched_emit_forward(&l, f, stage, pp, pp);
    for (int b = 0; b < m; b++) {
        const int f = b + w; /* f >= m: the next batch's micro-batch f - m */
        if (f < m || !drain) rc |= sched_emit_forward(&l, f, stage, pp, pp);
        rc |= sched_emit_backward(&l, b, stage, pp, pp);
    }
    return sched_finish(&l, rc, out);
}
