/* The handler of each command of the table (commands.c): cli_t filled in and checked against the
 * options' types, ranges and required ones; what is left is each command's own rules. Exit
 * status: 0, 1 failed, 2 bad arguments. (cli-reference's is the table's own, in commands.c: the
 * handlers never call back into the table.) */
#ifndef MP_HANDLERS_H
#define MP_HANDLERS_H

#include "commands.h"

int cmd_train(cli_t *c);
int cmd_debug_grads(cli_t *c);
int cmd_prep(cli_t *c);
int cmd_eval(cli_t *c);
int cmd_search(cli_t *c);
int cmd_export(cli_t *c);
int cmd_generate(cli_t *c);
int cmd_serve(cli_t *c);
int cmd_serve_stage(cli_t *c);
int cmd_inspect(cli_t *c);
int cmd_peak(cli_t *c);
int cmd_sim(cli_t *c);
int cmd_plan(cli_t *c);
int cmd_profile(cli_t *c);
int cmd_selftest(cli_t *c);
int cmd_deck_reference(cli_t *c);

#endif
