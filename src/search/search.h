/* `mindpipe search`: architecture search over the subnets of a trained supernet by val_loss
 * (ARCHITECTURE.md §3). */
#ifndef MP_SEARCH_H
#define MP_SEARCH_H

#include "run_opts.h"

typedef struct {
    const char *ckpt, *out_dir;
    int evolution;          /* 1: evolutionary search; 0: random search */
    int population, generations;
    double mutation;        /* evolution: the chance that a child's gene is redrawn */
    double max_params;      /* budget on the subnet's parameters (0: none) */
    double max_flops;       /* budget on its model FLOPs per token (0: none) */
    unsigned long long seed;
} search_cfg_t;

/* Loads the supernet checkpoint on this job's layout and evaluates subnets: random search draws
 * population × generations of them; evolution starts from `population` random ones and each
 * generation breeds as many children from the better half (uniform crossover, then mutation),
 * keeping the best `population`. Every subnet evaluated (each once) is a line of
 * OUT/search.jsonl; the console shows the best so far. Deterministic in the seed. Exit code. */
int search_main(const run_opts_t *opts, const search_cfg_t *cfg);

#endif
