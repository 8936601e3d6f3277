/* What training reports at its end besides the profile (ARCHITECTURE.md §9): its time and energy (the
 * log's "done:" line and RUN/energy.json) and, with debug.kernel_times, each kernel's calls and
 * seconds (RUN/kernel_times.r<rank>.json and a table of the top 8 in the log). */
#ifndef MP_TRAIN_REPORT_H
#define MP_TRAIN_REPORT_H

#include "energy.h"
#include "run.h"

/* The "done:" line (rank 0's log; a line before it when the GPU part could not be measured) and
 * RUN/energy.json (rank 0), for `steps` steps in `seconds` with energy u. MP_OK, or MP_ERR when the
 * file could not be written (message printed). Not collective. */
int train_report_energy(const deck_t *d, run_files_t *files, const run_layout_t *lay, const energy_use_t *u, long steps, double seconds);

/* debug.kernel_times > 0: collects the backend's pending timings, writes this rank's
 * RUN/kernel_times.r<rank>.json and logs rank 0's top 8 kernels with their share of the timed steps'
 * wall time. Nothing when off. MP_OK, or MP_ERR when the file could not be written (message printed).
 * Not collective. */
int train_report_kernels(run_t *r);

#endif
