/* The stash policies (DESIGN.md §6): what a stage does with a layer's activations between its forward
 * and its backward. One enum for the deck (memory.policy, memory.layers), the cost model, the planner
 * and the runtime: the first four are what a stage chooses among (the cost model's per-policy arrays);
 * balance pairs stages (a layout's flag in the cost model), auto is resolved at start. */
#ifndef MP_POLICY_H
#define MP_POLICY_H

typedef enum {
    POLICY_KEEP,                            /* the whole stash stays on the device */
    POLICY_SELECTIVE,                       /* attention's internals recomputed in the backward */
    POLICY_RECOMPUTE,                       /* the block's forward run again from its input */
    POLICY_OFFLOAD,                         /* the movable stash to host memory and back */
    POLICY_STAGE_CHOICES,                   /* (the four a stage chooses among) */
    POLICY_BALANCE = POLICY_STAGE_CHOICES,  /* BPipe: stashes moved between stages s and pp−1−s */
    POLICY_AUTO,                            /* chosen at start under memory.device_limit (run_auto_policy) */
    POLICY_COUNT
} policy_t;

/* Their names in the deck and in reports: "keep", "selective", "recompute", "offload", "balance", "auto". */
extern const char *const policy_names[POLICY_COUNT];
/* memory.layers' letters, by policy (auto has none: it cannot be given per layer): k s r o b. */
extern const char policy_letters[POLICY_AUTO];

#endif
