/* The commands of `mindpipe`: one table (commands.c) from which the parsing of the command line,
 * every check of an option's value, `mindpipe --help`, `mindpipe COMMAND --help`, the usage errors
 * and docs/CLI.md (`mindpipe cli-reference`) all come, so none of them can disagree with another.
 *
 * An option is declared once, in the catalogue: its spelling, an alias, its type, where its value
 * goes in cli_t and, for numbers, the range it must lie in. A command lists the options it takes,
 * each with the placeholder and help text it shows, whether it is required, and its handler
 * (handlers.c) runs with cli_t filled in. A new command is one entry and one handler. */
#ifndef MP_COMMANDS_H
#define MP_COMMANDS_H

#include <stddef.h>
#include <stdio.h>

#include "plan.h"
#include "run_opts.h"

#define CLI_MAX_SETS 256

/* Every option's value, after parsing. The defaults are cli_parse's; a command's handler may read
 * only the options its table entry lists (the others keep their defaults). */
typedef struct {
    run_opts_t run;            /* -c, --set, --resume, --restart, --quiet; run.out_dir = out */
    char *sets[CLI_MAX_SETS];
    const char *text, *out, *ckpt, *subnet, *method, *prompt;
    const char *format, *dtype, *max_shard_size; /* export's */
    const char *tokenizer, *tokenizer_dir; /* prep's */
    const char *sp_model, *sp_model_file;  /* prep --tokenizer sp's */
    int vocab_size;
    unsigned long long request_id;
    int max_tokens, top_k, stages, slots, stage, standby, public, slot;
    const char *listen, *links, *http_limits;
    double temperature;
    int population, generations, seed_set;
    double mutation, max_params, max_flops;
    unsigned long long seed;
    double val_fraction;
    int threads, pp, m, v, list, swap;
    double alpha;
    const char *schedule, *costs;
    const char *positional;    /* inspect's checkpoint */
    const char *device;
    int verbose;
    plan_cli_t plan;           /* mindpipe plan's own options */
} cli_t;

/* command_t.flags */
#define CMD_MPI 1        /* initialises MPI: its work is collective, or it probes MPI links. The others
                          * never do: no UCX transport is opened, so a serving process or a file tool
                          * holds no listener beyond what it asks for (docs/SERVING.md "What listens") */
#define CMD_POSITIONAL 2 /* takes one argument that is not an option (inspect's file) */
#define CMD_RUN 4        /* sets up a run (run_setup): MPI_Init's deadline lasts until the run's watchdog
                          * is armed (mpi_startup_deadline_end) */

/* One option of one command, as its help shows it. */
typedef struct {
    const char *name;      /* the catalogue's spelling, e.g. "--max-tokens" */
    const char *meta;      /* the value's placeholder ("N", "DIR"), NULL for a flag */
    const char *help;      /* what it does here; "\n" starts a continuation line */
    int required;
} cmd_opt_t;

#define CMD_MAX_OPTS 20

typedef struct command {
    const char *name;
    int flags;                 /* CMD_MPI, CMD_POSITIONAL */
    int (*handler)(cli_t *c);  /* its exit status: 0, 1 failed, 2 bad arguments */
    const char *synopsis;      /* the arguments, as in the overall usage */
    const char *summary;       /* one line: what it does */
    cmd_opt_t opts[CMD_MAX_OPTS]; /* the options it takes, ended by a zero entry */
    const char *notes;         /* more of its --help after the options ("" for none) */
} command_t;

/* The command called name, NULL if there is none. */
const command_t *command_find(const char *name);

/* Whether cmd takes option opt, by its name or its alias (e.g. "--set", "-c"). */
int command_takes(const command_t *cmd, const char *opt);

/* Fills c from argv[2..argc) for cmd: every option the command takes, every value checked against
 * its type and range, every required option present. MP_OK, or MP_ERR after a message that names
 * the option (the caller exits 2). */
int cli_parse(cli_t *c, const command_t *cmd, int argc, char **argv);

/* `mindpipe --help`: every command's synopsis and summary. */
void commands_usage(FILE *f);

/* `mindpipe COMMAND --help`: its synopsis, summary, options and notes. */
void command_usage(FILE *f, const command_t *cmd);

/* `mindpipe cli-reference`: every command as Markdown, with each option's type and range
 * (docs/CLI.md is its output). */
void commands_reference(FILE *f);

#endif
