/* libFuzzer harness for the checkpoint readers (issue 15: every reader survives any file).
 *
 * Each input is written to a temporary file and given to every entry point that reads a checkpoint:
 * filesum_check (the file checksum header, POSIX I/O only), ckpt_verify (what --resume auto and
 * pruning use) and ckpt_read into the table of the seed corpus's tiny model (layers=1 dim=8
 * heads=2 seq_len=8 vocab=256 mlp_ratio=4, validation/fuzz/corpus_ckpt/make_corpus.sh), with and
 * without the optimizer state. `inspect` runs the same checks and the same HDF5 parsing, in a
 * forked child (not called here: a fork per input would hide a sanitizer report in the child).
 *
 * What to expect: every reader checks the file checksum (filesum.h) before libhdf5 opens the file,
 * so nearly every mutation is refused right there, with a message; libhdf5 (which crashes on some
 * damaged metadata, and which we cannot fix) parses only inputs whose metadata hash matches their
 * header, in practice the unchanged seeds and mutations of tensor bytes (outside the hash, caught by
 * each tensor's checksum). A crash found here is ours: the header parsing, the hash, or our reading
 * of a file that passed it.
 *
 * Built by validation/fuzz/run.sh: mpicc -cc=clang -fsanitize=fuzzer,address,undefined, linked with
 * the src/ objects (not src/cli/main.c) and HDF5. No main(): libFuzzer's. MPI is initialised once,
 * on the first input (the readers run over MPI_COMM_SELF). The readers' refusals print one line
 * each to stderr; run with -close_fd_mask=2 to silence them (sanitizer reports still show). */
#include <fcntl.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ckpt.h"
#include "filesum.h"
#include "params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__lsan_default_suppressions(void);

/* LeakSanitizer's hook: what MPI_Init allocates inside UCX (MPICH's transport) and never frees is
 * not ours; without this the first input "leaks" and stops the run. */
const char *__lsan_default_suppressions(void) { return "leak:libucs.so\nleak:libuct.so\nleak:libucp.so\n"; }

static char fuzz_path[64];
static param_table_t fuzz_tab;
static float *fuzz_bufs[3];

/* MPI, the temporary file and the tiny model's table and buffers, once. 0, or -1. */
static int fuzz_setup(void)
{
    static int done = 0;
    if (done) return done > 0 ? 0 : -1;
    done = -1;
    int inited = 0, provided;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return -1;
    snprintf(fuzz_path, sizeof fuzz_path, "/tmp/fuzz_ckpt.%ld.h5", (long)getpid());
    model_cfg_t cfg = {.layers = 1, .dim = 8, .heads = 2, .seq_len = 8, .vocab = 256, .mlp_ratio = 4};
    if (param_table_build(&fuzz_tab, &cfg, 0, cfg.layers, 1, 1, 1, 0) != MP_OK) return -1;
    for (int k = 0; k < 3; k++)
        if (!(fuzz_bufs[k] = calloc(fuzz_tab.total, sizeof(float)))) return -1;
    done = 1;
    return 0;
}

/* The input as the file at fuzz_path. 0, or -1. */
static int fuzz_write(const uint8_t *data, size_t size)
{
    int fd = open(fuzz_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return -1;
    size_t put = 0;
    while (put < size) {
        ssize_t w = write(fd, data + put, size - put);
        if (w <= 0) break;
        put += (size_t)w;
    }
    return close(fd) == 0 && put == size ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_setup() != 0) abort(); /* the harness itself is broken: say so at once */
    if (fuzz_write(data, size) != 0) return 0;
    char why[600];
    (void)filesum_check(fuzz_path, why, sizeof why);
    (void)ckpt_verify(fuzz_path, why, sizeof why);
    ckpt_state_t st;
    if (ckpt_read(fuzz_path, &fuzz_tab, fuzz_bufs[0], fuzz_bufs[1], fuzz_bufs[2], &st) == MP_OK) free(st.deck);
    if (ckpt_read(fuzz_path, &fuzz_tab, fuzz_bufs[0], NULL, NULL, &st) == MP_OK) free(st.deck);
    unlink(fuzz_path);
    return 0;
}
