/* Supernet parallelism (SP, DESIGN §4 "SP"): sp replicas of a pp-stage pipeline run the subnets of
 * one window under NASPipe's causal rule, as instruction lists for all sp × pp ranks, and an
 * event-driven simulator that proves them (docs/SUPERNET.md "SP replicas (simulated)").
 *
 * Ranks: rank = r·pp + s is stage s of replica r (pp fastest). Every replica holds a copy of every
 * candidate and of the shared tensors of its stages. Subnet j of the window runs all its `per`
 * micro-batches on one replica ρ(j) (unit u = j·per + k, as in causal.h): j mod sp by default
 * (round robin); csp_build_best also plays an affinity assignment (a subnet joins the replica of the
 * latest earlier subnet it conflicts with, which it must wait for anyway; else the replica idle
 * longest) and one pipeline, and keeps the fastest. Each is a pure function of the sampling: every
 * rank computes the same assignment with no exchange.
 *
 * The rules (each rank's list plays them; the simulator checks them):
 * - Causal, across replicas on each stage index s: subnet j's forward on (ρ(j), s) waits until
 *   every earlier subnet that activates a candidate (with weights) of stage s that j activates has
 *   done its OPTIMIZER_STEP on s. It is enough to wait for p = the previous user of each of j's
 *   candidates: p itself waited for the users before it.
 * - Candidate shipping: when p ran on another replica, p's rank sends the candidate's state
 *   (weights, AdamW moments) to (ρ(j), s) right after p's step (CAND, one message per candidate and
 *   pair of users), and (ρ(j), s) receives it before j's first forward there. The step counter
 *   travels free: every rank knows the sampling.
 * - Shared tensors: subnet j's own gradient of the stage's shared tensors is summed over its
 *   micro-batches in its own buffer (as at sp = 1, supernet_update); after j's step, ADD(j) adds it to
 *   the window's running sum, which (ρ(j), s) receives from (ρ(j − 1), s) (SUM; none when they are
 *   the same replica, so none at sp = 1) and sends on to (ρ(j + 1), s). The sum is formed in
 *   subnet order, bit for bit the sequential one. At the window's end the last holder ρ(n − 1)
 *   broadcasts it to every other replica of the stage (FINAL, sp − 1 messages per stage), and every
 *   rank takes the shared AdamW step itself (SHARED_STEP): identical sums on identical copies.
 * - End-of-window sync: every candidate stepped during the window goes, right after its last
 *   user's step, to every other replica (SYNC, sp − 1 messages per candidate stepped), received at
 *   the window's end. So every window starts with every replica holding every candidate's newest
 *   state: windows are independent, and replica 0 alone can write a checkpoint. */
#ifndef MP_CAUSAL_SP_H
#define MP_CAUSAL_SP_H

#include "causal.h"

/* What a rank does. Messages carry a kind, a peer rank and an id (see csp_msg_t). */
typedef enum {
    CSP_LOAD,        /* unit mb's batch, on stage 0 */
    CSP_FORWARD,     /* unit mb */
    CSP_BACKWARD,    /* unit mb */
    CSP_STEP,        /* subnet `subnet`'s candidates of this stage step (after its last backward) */
    CSP_ADD,         /* the running shared sum += subnet `subnet`'s shared gradient of this stage */
    CSP_SHARED_STEP, /* the window's end: the shared tensors step with the full sum */
    CSP_SEND,
    CSP_RECV,
    CSP_OPS
} csp_op_t;

typedef enum {
    CSP_MSG_ACT,     /* activation of unit id, stage s → s + 1 of one replica */
    CSP_MSG_GRAD,    /* its gradient, s + 1 → s */
    CSP_MSG_CAND,    /* candidate `what`'s state after subnet id's step, to the next user's replica */
    CSP_MSG_SUM,     /* the running shared sum with subnets 0..id, to ρ(id + 1) */
    CSP_MSG_FINAL,   /* the window's full shared sum (id 0), from ρ(n − 1) to each other replica */
    CSP_MSG_SYNC,    /* candidate `what`'s final state of the window (id: its last user), to each other replica */
    CSP_MSGS
} csp_msg_t;

typedef struct {
    csp_op_t op;
    csp_msg_t msg;   /* SEND / RECV */
    int id;          /* unit (LOAD, FORWARD, BACKWARD, ACT, GRAD), subnet (STEP, ADD, CAND, SUM, SYNC), 0 */
    int what;        /* CAND / SYNC: the candidate l·ncand + k of layer l; else -1 */
    int peer;        /* SEND / RECV: the other rank; else -1 */
} csp_instr_t;

typedef struct {
    csp_instr_t *ins;
    int n, cap;
} csp_list_t;

extern const char *const csp_op_names[CSP_OPS];
extern const char *const csp_msg_names[CSP_MSGS];

/* Durations in forward times of one stage. Messages cost their kind's time from send to arrival
 * (no contention); a send never blocks. ACT and GRAD are free, as in causal.h. */
typedef struct {
    double tf, tb;   /* a forward, a backward of one stage (the unit model: 1, 2) */
    double step;     /* a subnet's candidate step, the shared step (0: folded into the backward) */
    double cand;     /* a CAND or SYNC message (a candidate's weights and moments) */
    double sum;      /* a SUM or FINAL message (a stage's shared gradient sum) */
} csp_costs_t;

typedef struct {
    causal_cfg_t c;  /* the window, as for one pipeline (in_flight per replica; serial: refused, build it with causal.h) */
    int sp;          /* replicas */
    const int *replica; /* n: the replica of subnet j (NULL: round robin, j mod sp) */
} csp_cfg_t;

typedef struct {
    double makespan;     /* when the last rank's list ends, window-end sync included */
    double stalls;       /* rank-time a free rank spent with a forward whose activation was there
                            blocked by the causal rule only (sum over ranks; causal.h's stalls at sp = 1) */
    int msgs[CSP_MSGS];  /* messages per kind */
    double bytes;        /* SP messages in units of one candidate's weights: CAND and SYNC 3 (weights and
                            two moments), SUM and FINAL 1 (a stage's shared tensors taken as one block) */
    char error[256];     /* the simulator: why the lists are invalid ("" when valid) */
} csp_result_t;

/* Who uses which candidate in the window, shared by the builder and the simulator. Candidate
 * c = l·ncand + k is candidate k of layer l; only candidates with weights have users. Tables are
 * n × layers, entry (j, l) about j's candidate of layer l (-1: none, or no choice block, or weightless). */
typedef struct {
    int *prev;       /* the previous subnet that uses it (-1: j is its first user) */
    int *next;       /* the next subnet that uses it (-1: j is its last user) */
    int *before;     /* how many earlier subnets stepped it: the version j's forward must see */
    int *last;       /* layers·ncand: the candidate's last user (-1: unused in the window) */
    int *uses;       /* layers·ncand: its users in the window: the version every replica ends with */
    int *subs, *sub0;/* n, sp + 1: replica r's subnets in order are subs[sub0[r] .. sub0[r + 1]) */
} csp_users_t;

/* MP_OK, or MP_ERR (allocation; nothing left allocated). */
int csp_users_init(const csp_cfg_t *g, csp_users_t *u);
void csp_users_free(csp_users_t *u);

/* The stage that holds layer l. */
int csp_stage_of(const causal_cfg_t *c, int l);

/* The replica that runs subnet j. */
static inline int csp_replica(const csp_cfg_t *g, int j) { return g->replica ? g->replica[j] : j % g->sp; }

/* The affinity assignment of the window's subnets (n entries of replica_p). */
void csp_assign_affinity(const csp_cfg_t *g, int *replica_p);

/* Every rank's list of the window (lists[0 .. sp·pp)), played out against `costs` (the builder's
 * timeline: makespan, stalls and messages in *res). MP_OK, or MP_ERR (allocation; nothing left
 * allocated). Free with csp_free_lists. */
int csp_build(const csp_cfg_t *g, const csp_costs_t *costs, csp_list_t *lists, csp_result_t *res);
void csp_free_lists(csp_list_t *lists, int n);

/* csp_build with g's assignment replaced by the fastest of round robin, affinity and everything on
 * replica 0 (one pipeline: when conflicts leave the replicas nothing to gain; on a tie the earlier
 * of these): the chosen one in replica_p (n entries; simulate with it as g->replica). MP_OK or MP_ERR. */
int csp_build_best(const csp_cfg_t *g, const csp_costs_t *costs, int *replica_p, csp_list_t *lists, csp_result_t *res);

/* Runs the lists of all sp·pp ranks against `costs`: each rank its list in order, sends non-blocking,
 * receives blocking. MP_OK when valid, with makespan and messages in *res; MP_ERR with res->error
 * on: a deadlock; a message not sent and received exactly once with the same (from, to, kind, id,
 * what); a unit not forwarded and backwarded exactly once on its rank, backwards out of order; a
 * forward, backward or step seeing a candidate version other than the sequential order's (the
 * number of earlier subnets of the window that stepped it); a conflicting subnet's forward starting
 * on a stage index before the earlier one's step ended there, on any replica; the shared sum added
 * out of subnet order; a rank ending the window without the full sum or a candidate's last state. */
int csp_sim(const csp_cfg_t *g, const csp_costs_t *costs, const csp_list_t *lists, csp_result_t *res);

#endif
