/* Helpers for unit tests that check what users are told: stderr captured to a file in the test's
 * scratch directory, shown back as TAP comments, and paths inside that directory. The including
 * test defines `static char tmpdir[]` (a mkdtemp pattern) before including this header. */
#ifndef MP_CAPTURE_H
#define MP_CAPTURE_H

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"

static char errtext[8192]; /* stderr of the last captured call */
static int capture_saved_fd = -1;

static inline void capture_path(char *path, size_t n) { snprintf(path, n, "%s/stderr.txt", tmpdir); }

static inline void capture_begin(void)
{
    char path[1024];
    capture_path(path, sizeof path);
    fflush(stderr);
    capture_saved_fd = dup(2);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    dup2(fd, 2);
    close(fd);
}

static inline void capture_end(void)
{
    char path[1024];
    capture_path(path, sizeof path);
    fflush(stderr);
    dup2(capture_saved_fd, 2);
    close(capture_saved_fd);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(errtext, 1, sizeof errtext - 1, f) : 0;
    errtext[n] = 0;
    if (f) fclose(f);
    unlink(path);
}

/* Shows the captured messages as TAP comments (so a reader sees what users see). */
static inline void show_errtext(void)
{
    char *save = NULL;
    char copy[sizeof errtext];
    memcpy(copy, errtext, sizeof copy);
    for (char *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) tap_diag("  %s", l);
}

/* tmpdir/name, in one of four rotating static buffers. */
static inline const char *tpath(const char *name)
{
    static char path[4][1024];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", tmpdir, name);
    return path[k];
}

#endif
