#include "memlists.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* A list being rebuilt: instructions to insert before and after each original one. */
typedef struct {
    instr_t *ins;
    int n, cap;
} grow_t;

static int grow_push(grow_t *g, instr_t in)
{
    if (g->n == g->cap) {
        const int cap = g->cap ? 2 * g->cap : 64;
        instr_t *p = realloc(g->ins, (size_t)cap * sizeof *p);
        if (!p) return MP_ERR;
        g->ins = p, g->cap = cap;
    }
    g->ins[g->n++] = in;
    return MP_OK;
}

static void grow_into(grow_t *g, instr_list_t *l)
{
    free(l->ins);
    l->ins = g->ins, l->n = g->n, l->cap = g->cap;
}

static int same_key(const instr_t *a, const instr_t *b) { return a->mb == b->mb && a->chunk == b->chunk; }

/* The index after which a key's stash may move: its FORWARD, or the SEND_ACT right after it. */
static int after_forward(const instr_list_t *l, int f)
{
    return f + 1 < l->n && l->ins[f + 1].op == OP_SEND_ACT && same_key(&l->ins[f + 1], &l->ins[f]) ? f + 1 : f;
}

int sched_add_offload(instr_list_t *l, int prefetch)
{
    const int n = l->n;
    int *pre = malloc(((size_t)n + 1) * sizeof *pre); /* per BACKWARD: the index it is prefetched before */
    grow_t g = {0};
    if (!pre) return MP_ERR;
    for (int j = 0; j < n; j++) {
        pre[j] = -1;
        /* a split backward's stash comes back before its B, which reads it first, and stays on the
         * device until its W (sched_list_device_peak) */
        if (l->ins[j].op != OP_BACKWARD && l->ins[j].op != OP_BACKWARD_B) continue;
        int lo = 0;
        for (int f = 0; f < j; f++)
            if (l->ins[f].op == OP_FORWARD && same_key(&l->ins[f], &l->ins[j])) lo = after_forward(l, f) + 1;
        pre[j] = j - prefetch < lo ? lo : j - prefetch;
    }
    for (int i = 0; i < n; i++) {
        for (int j = i; j < n; j++)
            if (pre[j] == i && grow_push(&g, (instr_t){OP_PREFETCH, l->ins[j].mb, l->ins[j].chunk, -1}) != MP_OK) goto err;
        if (grow_push(&g, l->ins[i]) != MP_OK) goto err;
        const instr_t *x = &l->ins[i];
        const int moves = (x->op == OP_FORWARD && after_forward(l, i) == i) ||
                          (x->op == OP_SEND_ACT && i > 0 && l->ins[i - 1].op == OP_FORWARD && same_key(&l->ins[i - 1], x));
        if (moves && grow_push(&g, (instr_t){OP_OFFLOAD, x->mb, x->chunk, -1}) != MP_OK) goto err;
    }
    free(pre);
    grow_into(&g, l);
    return MP_OK;
err:
    free(pre);
    free(g.ins);
    return MP_ERR;
}

int sched_list_device_peak(const instr_list_t *l, int carried)
{
    int on = 0, peak = 0;
    (void)carried; /* carried keys were moved off by their own list: they count from PREFETCH */
    for (int i = 0; i < l->n; i++) {
        const op_t op = l->ins[i].op;
        if (op == OP_FORWARD || op == OP_PREFETCH || op == OP_RECLAIM) on++;
        if (on > peak) peak = on;
        if (op == OP_OFFLOAD || op == OP_EVICT || op == OP_BACKWARD || op == OP_BACKWARD_W) on--;
    }
    /* a key forwarded and never moved off stays from FORWARD to its (W of the) backward: counted above */
    return peak;
}

int sched_balance_check(sched_kind_t kind, int pp, int m, int v, char *why, int why_len)
{
    if (pp < 2) return snprintf(why, (size_t)why_len, "balance needs parallel.pp >= 2: one stage has no partner"), MP_ERR;
    if (kind != SCHED_1F1B)
        return snprintf(why, (size_t)why_len,
                        "balance needs parallel.schedule=1f1b: under %s %s", sched_kind_names[kind],
                        kind == SCHED_GPIPE         ? "every stage stashes all m micro-batches, so no stage has room to accept"
                        : kind == SCHED_2BW         ? "stashes outlive the step (the next batch's forwards), which BPipe's per-step pairing does not cover"
                        : sched_kind_split(kind)    ? "a stash is held until its weight gradient (W) runs, whose place BPipe's pairing does not know"
                        : "a stage holds several chunks whose stashes are not 1F1B's decreasing p − s"),
               MP_ERR;
    if (v != 1) return snprintf(why, (size_t)why_len, "balance needs one model chunk per stage"), MP_ERR;
    (void)m;
    return MP_OK;
}

/* The evictor's list rebuilt in one pass: before each instruction that needs a key's stash on the
 * device (its FORWARD, or the RECLAIM placed before its backward's RECV_GRAD), when that would make
 * more than keep on the device, the stash whose backward is furthest (the highest micro-batch on
 * the device, never evicted before) leaves first (EVICT). evicted[mb] marks what leaves. */
static int rebuild_evictor(instr_list_t *l, int m, int keep, int peer, char *evicted)
{
    grow_t g = {0};
    char *on = calloc((size_t)m, 1);
    if (!on) return MP_ERR;
    for (int i = 0; i < l->n; i++) {
        const instr_t *x = &l->ins[i];
        int need = -1; /* the key this instruction brings to the device */
        const int reclaim = x->mb >= 0 && evicted[x->mb] && !on[x->mb] && /* mb -1: LOAD_BATCH, the step's end */
                            ((x->op == OP_RECV_GRAD) || (x->op == OP_BACKWARD && !(i > 0 && l->ins[i - 1].op == OP_RECV_GRAD)));
        if (reclaim || x->op == OP_FORWARD) need = x->mb;
        if (need >= 0) {
            int count = 0;
            for (int k = 0; k < m; k++) count += on[k];
            for (int v = m - 1; v >= 0 && count + 1 > keep; v--)
                if (on[v] && v != need && !evicted[v]) {
                    if (grow_push(&g, (instr_t){OP_EVICT, v, x->chunk, peer}) != MP_OK) goto err;
                    evicted[v] = 1, on[v] = 0, count--;
                }
            on[need] = 1;
        }
        if (reclaim && grow_push(&g, (instr_t){OP_RECLAIM, x->mb, x->chunk, peer}) != MP_OK) goto err;
        if (grow_push(&g, *x) != MP_OK) goto err;
        if (x->op == OP_BACKWARD) on[x->mb] = 0;
    }
    free(on);
    grow_into(&g, l);
    return MP_OK;
err:
    free(on);
    free(g.ins);
    return MP_ERR;
}

static int rebuild_acceptor(instr_list_t *l, const char *evict, int peer, int peer_chunk)
{
    grow_t g = {0};
    for (int i = 0; i < l->n; i++) {
        const instr_t *x = &l->ins[i];
        if (x->op == OP_RECV_ACT && evict[x->mb] &&
            grow_push(&g, (instr_t){OP_ACCEPT, x->mb, peer_chunk, peer}) != MP_OK)
            goto err;
        if (grow_push(&g, *x) != MP_OK) goto err;
        const int after_b = x->op == OP_SEND_GRAD || (x->op == OP_BACKWARD && !(i + 1 < l->n && l->ins[i + 1].op == OP_SEND_GRAD));
        if (after_b && evict[x->mb] && grow_push(&g, (instr_t){OP_RETURN, x->mb, peer_chunk, peer}) != MP_OK) goto err;
    }
    grow_into(&g, l);
    return MP_OK;
err:
    free(g.ins);
    return MP_ERR;
}

static int list_copy(instr_list_t *dst, const instr_list_t *src)
{
    *dst = (instr_list_t){0};
    if (!(dst->ins = malloc(((size_t)src->n + 1) * sizeof *dst->ins))) return MP_ERR;
    memcpy(dst->ins, src->ins, (size_t)src->n * sizeof *dst->ins);
    dst->n = dst->cap = src->n;
    dst->place = src->place;
    return MP_OK;
}

/* Pair (s, a) rebuilt with keep stashes on s; its fuller side's device count in *most. */
static int balance_pair(instr_list_t *ls, instr_list_t *la, int s, int a, int m, int keep, char *evict, int *most)
{
    memset(evict, 0, (size_t)m);
    if (rebuild_evictor(ls, m, keep, a, evict) != MP_OK || rebuild_acceptor(la, evict, s, s) != MP_OK) return MP_ERR;
    const int ds = sched_list_device_peak(ls, 0), da = sched_list_device_peak(la, 0) + sched_balance_guest_peak(la);
    *most = ds > da ? ds : da;
    return MP_OK;
}

/* keep <= 0: per pair, the keep whose fuller side holds the fewest stashes, the smaller on a tie
 * (a balanced stage pays its pool buffers' page slack whether it evicts or not, measured smaller) */
static int pair_keep(const instr_list_t *ls, const instr_list_t *la, int s, int a, int m, char *evict, int *keep)
{
    int best = -1;
    *keep = 2;
    for (int k = 2; k <= sched_list_peak(ls, 0); k++) {
        instr_list_t cs, ca;
        int most = 0, rc = list_copy(&cs, ls);
        if (rc == MP_OK && (rc = list_copy(&ca, la)) != MP_OK) sched_free(&cs);
        if (rc != MP_OK) return MP_ERR;
        rc = balance_pair(&cs, &ca, s, a, m, k, evict, &most);
        sched_free(&cs), sched_free(&ca);
        if (rc != MP_OK) return MP_ERR;
        if (best < 0 || most < best) best = most, *keep = k;
    }
    return MP_OK;
}

int sched_add_balance(instr_list_t *lists, int pp, int m, int keep)
{
    char *evict = malloc((size_t)m);
    if (!evict) return MP_ERR;
    int rc = MP_OK;
    for (int s = 0; s < pp && rc == MP_OK; s++) {
        const int a = pp - 1 - s;
        if (s >= a) break;
        /* at least one slot for the forward running and one for the backward's stash back */
        int k = keep < 2 ? 2 : keep, most;
        if (keep <= 0) rc = pair_keep(&lists[s], &lists[a], s, a, m, evict, &k);
        if (rc == MP_OK) rc = balance_pair(&lists[s], &lists[a], s, a, m, k, evict, &most);
    }
    free(evict);
    return rc;
}

int sched_list_guests(const instr_list_t *l)
{
    int n = 0;
    for (int i = 0; i < l->n; i++) n += l->ins[i].op == OP_ACCEPT;
    return n;
}

int sched_balance_guest_peak(const instr_list_t *l)
{
    int live = 0, peak = 0;
    for (int i = 0; i < l->n; i++) {
        live += (l->ins[i].op == OP_ACCEPT) - (l->ins[i].op == OP_RETURN);
        if (live > peak) peak = live;
    }
    return peak;
}

int sched_balance_check_lists(const instr_list_t *lists, int pp, char *why, int why_len)
{
    for (int s = 0; s < pp; s++) {
        const instr_list_t *l = &lists[s];
        for (int i = 0; i < l->n; i++) {
            const instr_t *x = &l->ins[i];
            if (x->op != OP_EVICT) continue;
            const int a = pp - 1 - s;
            if (x->peer != a) return snprintf(why, (size_t)why_len, "stage %d evicts micro-batch %d to stage %d, not %d", s, x->mb, x->peer, a), MP_ERR;
            int reclaim = -1, bwd = -1, accept = -1, ret = -1, n_acc = 0, n_ret = 0, n_rec = 0;
            for (int j = 0; j < l->n; j++) {
                const instr_t *y = &l->ins[j];
                if (!same_key(y, x)) continue;
                if (y->op == OP_RECLAIM) reclaim = j, n_rec++;
                if (y->op == OP_BACKWARD) bwd = j;
            }
            const instr_list_t *la = &lists[a];
            for (int j = 0; j < la->n; j++) {
                const instr_t *y = &la->ins[j];
                if (!same_key(y, x) || y->peer != s) continue;
                if (y->op == OP_ACCEPT) accept = j, n_acc++;
                if (y->op == OP_RETURN) ret = j, n_ret++;
            }
            if (n_rec != 1 || n_acc != 1 || n_ret != 1 || !(i < reclaim && reclaim < bwd) || !(accept < ret))
                return snprintf(why, (size_t)why_len,
                                "micro-batch %d evicted by stage %d: %d RECLAIM, %d ACCEPT, %d RETURN, or out of order",
                                x->mb, s, n_rec, n_acc, n_ret),
                       MP_ERR;
        }
    }
    return MP_OK;
}
