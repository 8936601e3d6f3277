/* `mindpipe sim`'s options and its whole run (sim_main.c). */
#ifndef MP_SIM_MAIN_H
#define MP_SIM_MAIN_H

typedef struct {
    const char *schedule; /* --schedule gpipe|1f1b|interleaved|2bw|zb1p|zbv|dualpipev */
    int pp, m, v;         /* --pp, --m; --v (0: the schedule's default) */
    const char *costs;    /* --costs unit|TF,TB,TW, or NULL: the unit times */
    int list;             /* --list: each stage's instructions too */
    int swap;             /* --swap: the swap simulator's tables (docs/MEMORY.md) instead */
    double alpha;         /* --alpha for --swap (< 0: swapsim's default) */
} sim_opts_t;

/* The process's exit status: 0, a valid schedule (its report on stdout); 1, invalid (said why);
 * 2, the options are wrong. */
int sim_main(const sim_opts_t *o);

#endif
