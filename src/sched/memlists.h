/* Memory instructions in the lists (ARCHITECTURE.md §5, §6): offload's OFFLOAD/PREFETCH and BPipe's
 * EVICT/ACCEPT/RETURN/RECLAIM, inserted into a schedule's lists before they are lowered, and the
 * device peaks they leave. Pure functions of the lists, like the schedules: the executor, the
 * memory plan and the simulator use the same ones. */
#ifndef MP_MEMLISTS_H
#define MP_MEMLISTS_H

#include "schedule.h"

/* OFFLOAD(k) after each FORWARD(k) (after its SEND_ACT when one follows), and PREFETCH(k) `prefetch`
 * instructions (of the original list) before each BACKWARD(k) or, split, each BACKWARD_B(k) (B reads
 * the stash first; it stays on the device until W), never before that key's OFFLOAD (0: right before
 * the backward). A backward whose forward ran in an earlier list (2bw) gets its PREFETCH at the
 * latest at the list's start. MP_OK, or MP_ERR (allocation; l unchanged). */
int sched_add_offload(instr_list_t *l, int prefetch);

/* Most keys whose movable stash is on the device at once in l: from FORWARD to OFFLOAD or EVICT, and
 * from PREFETCH or RECLAIM to BACKWARD or BACKWARD_W (both inclusive); `carried` keys forwarded (and
 * moved off) in an earlier list. Without OFFLOAD and EVICT it is sched_list_peak. */
int sched_list_device_peak(const instr_list_t *l, int carried);

/* Whether BPipe's balance runs with (kind, pp, m, v); on MP_ERR, why (naming the rule). */
int sched_balance_check(sched_kind_t kind, int pp, int m, int v, char *why, int why_len);

/* The balance of 1F1B's lists of all pp stages, in place: each stage s < pp−1−s (the evictor)
 * keeps at most `keep` stashes on its device (at least 2; keep <= 0: per pair, the keep that leaves
 * the fewest stashes on the fuller of the two devices, the acceptor's guests counted from ACCEPT to
 * RETURN, the smaller keep on a tie) and sends the others to stage pp−1−s:
 *   evictor:  before an instruction that brings a stash to the device (a FORWARD, or a RECLAIM)
 *             would exceed keep, EVICT(v) of the stash whose backward is furthest; RECLAIM(k)
 *             before BACKWARD(k)'s RECV_GRAD, so the transfer back overlaps the gradient's wait
 *   acceptor: ACCEPT(k) before its RECV_ACT(k) (posting a receive never blocks); RETURN(k) right
 *             after its BACKWARD(k) (and its SEND_GRAD), which depends on nothing the evictor does
 *             after FORWARD(k)
 * MP_OK or MP_ERR (allocation). */
int sched_add_balance(instr_list_t *lists, int pp, int m, int keep);

/* Guests an acceptor's list accepts in one step. */
int sched_list_guests(const instr_list_t *l);

/* The device guests an acceptor's list holds at once: each from its ACCEPT to its RETURN (the send
 * back leaves from a host copy, balance.h). */
int sched_balance_guest_peak(const instr_list_t *l);

/* The balance instructions of all lists matched: every EVICT(k) of stage s has one ACCEPT and one
 * RETURN on stage pp−1−s naming s, one RECLAIM on s before the BACKWARD(k), in that order per list.
 * MP_OK, or MP_ERR with why. */
int sched_balance_check_lists(const instr_list_t *lists, int pp, char *why, int why_len);

#endif
