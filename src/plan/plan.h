/* `mindpipe plan` (docs/PLAN.md): predicts one layout (--layout) or searches the best ones
 * (planner.h) for a deck on N ranks of a device kind (devices.h) or with a measured profile
 * (profile.h), and prints them as a table or as JSON, optionally writing a deck that runs the best. */
#ifndef MP_PLAN_H
#define MP_PLAN_H

#include "deck.h"
#include "instr.h"

typedef struct {
    const char *deck_path;
    char *const *sets;
    int nsets;
    int ranks;                 /* 0: from --layout */
    const char *device;        /* kind in the device file (default cpu) */
    const char *devices;       /* the device file (NULL: devices_default_path) */
    const char *layout;        /* "tp=..,pp=..,dp=..,v=..,micro_batch=..,schedule=..,zero=..,policy=.." */
    const char *profile;       /* prof.json from `mindpipe profile` */
    const char *precision;     /* bf16 | tf32 | fp32 (default: the deck's train.precision) */
    const char *objective;     /* time | energy | carbon */
    const char *emit;          /* write a deck running the first plan here */
    double tokens;             /* the run's tokens for energy and CO2 totals (0: per step only) */
    double deadline_h;         /* hours the run of `tokens` must fit in (0: no deadline) */
    int top, json;
    int per_node;              /* --nodes-of: ranks per node (0: the kind's per_node; a CPU kind: all) */
} plan_cli_t;

/* Exit status: 0 plans printed, 1 none fits or a file failed, 2 bad arguments. */
int plan_main(const plan_cli_t *o);

/* The times a run's zb1p or zbv lists are played out with, from the deck's
 * parallel.schedule_profile (a profile of the deck's model): cm_play_costs over the run's K chunks
 * of chunk_layers layers, each under its first layer's memory policy, at the deck's micro-batch and
 * tp (tp's all-reduces left out). MP_OK, or MP_ERR naming the file (unreadable, another model's, no
 * B/W split). */
int plan_schedule_costs(const deck_t *dk, int K, const int *chunk_layers, sched_costs_t *out);

#endif
