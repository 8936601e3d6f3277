/* What the command line gives every command that reads a deck: its own header, so that the
 * command-line room and the commands' headers need not see the run context (run.h). */
#ifndef MP_RUN_OPTS_H
#define MP_RUN_OPTS_H

typedef struct {
    const char *deck_path;   /* -c */
    char *const *sets;       /* --set section.key=value, in order */
    int nsets;
    const char *out_dir;     /* --out (default "run") */
    const char *resume;      /* --resume PATH | auto | NULL */
    const char *init_from;   /* --init-from hf:DIR: a fresh run from Hugging Face GPT-2 weights (NULL: the seed's) */
    int restart;             /* --restart: a fresh run moves the directory's checkpoints aside (rundir.h) */
    int quiet;               /* no console output */
    const struct run_plug *plug; /* a plug-in the command offers the run (run.h's run_plug_t; NULL: none) */
} run_opts_t;

#endif
