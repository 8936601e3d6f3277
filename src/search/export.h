/* `mindpipe export`: a subnet of a trained supernet as a plain model (docs/SUPERNET.md); --format hf
 * of a plain model is hf_export.h's, in hf. */
#ifndef MP_EXPORT_H
#define MP_EXPORT_H

#include "run_opts.h"

/* `mindpipe export`: subnet `subnet` of supernet checkpoint `ckpt` (the deck's supernet) as a plain
 * model checkpoint `out`: model.blocks the shapes of its candidates, h.{l}.c{k}.* renamed h.{l}.*,
 * the shared tensors as they are, no optimizer state; prints the model.blocks line that trains it.
 * One rank. Returns the process exit code. */
int export_main(const run_opts_t *opts, const char *ckpt, const char *subnet, const char *out);

#endif
