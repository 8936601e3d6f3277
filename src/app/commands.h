/* The commands of `mindpipe`: their usage, the options each takes, and `mindpipe COMMAND --help`. One
 * table, so the overall usage, each command's help and the refusal of an option a command does not
 * take cannot disagree. */
#ifndef MP_COMMANDS_H
#define MP_COMMANDS_H

#include <stdio.h>

/* command_t.flags: the command initialises MPI (its work is collective, or it probes MPI links).
 * The others never do: no UCX transport is opened, so a serving process or a file tool holds no
 * listener beyond what it asks for (docs/SERVING.md "What listens"). */
#define CMD_MPI 1

typedef struct {
    const char *name;
    int flags;                 /* CMD_MPI or 0 */
    const char *synopsis;      /* the arguments, as in the overall usage */
    const char *summary;       /* one line: what it does */
    const char *options[20];   /* the options it takes (NULL-terminated), as typed */
    const char *details;       /* the options explained, for COMMAND --help */
} command_t;

/* The command called name, NULL if there is none. */
const command_t *command_find(const char *name);

/* Whether cmd takes option opt (e.g. "--set"). */
int command_takes(const command_t *cmd, const char *opt);

/* `mindpipe --help`: every command's synopsis and summary. */
void commands_usage(FILE *f);

/* `mindpipe COMMAND --help`: its synopsis, summary and options. */
void command_usage(FILE *f, const command_t *cmd);

#endif
