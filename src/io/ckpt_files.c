/* The files of a checkpoint directory: the step_%08ld.h5 name, listing, newest valid, pruning
 * (ckpt_files.h). */
#include "ckpt_files.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ckpt.h"

#define CKPT_NAME_FMT "step_%08ld.h5"
#define CKPT_NAME_DIGITS_MAX 18 /* a long holds any 18-digit step */

int ckpt_name_format(long step, char *name_p, size_t n)
{
    if (step < 0) return MP_FAIL("no checkpoint name for step %ld: steps count from 0", step);
    if ((size_t)snprintf(name_p, n, CKPT_NAME_FMT, step) >= n)
        return MP_FAIL("the checkpoint name of step %ld is longer than %zu bytes", step, n - 1);
    return MP_OK;
}

int ckpt_name_parse(const char *name, long *step_p)
{
    if (strncmp(name, "step_", 5) != 0) return 0;
    const char *p = name + 5;
    long step = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < CKPT_NAME_DIGITS_MAX; p++, digits++) step = step * 10 + (*p - '0');
    if (!digits || strcmp(p, ".h5") != 0) return 0;
    /* only the name the format writes: step_12.h5 or step_000000012.h5 would be a second file
     * for the same step */
    char canon[CKPT_NAME_MAX];
    snprintf(canon, sizeof canon, CKPT_NAME_FMT, step);
    if (strcmp(canon, name) != 0) return 0;
    *step_p = step;
    return 1;
}

int ckpt_name_path(const char *dir, long step, char *path_p, size_t n)
{
    char name[CKPT_NAME_MAX];
    if (ckpt_name_format(step, name, sizeof name) != MP_OK) return MP_ERR;
    if ((size_t)snprintf(path_p, n, "%s/%s", dir, name) >= n)
        return MP_FAIL("checkpoint path %s/%s is longer than %zu bytes", dir, name, n - 1);
    return MP_OK;
}

static int ckpt_file_older_first(const void *a, const void *b)
{
    long sa = ((const ckpt_file_t *)a)->step, sb = ((const ckpt_file_t *)b)->step;
    return sa < sb ? -1 : sa > sb ? 1 : 0;
}

/* Appends step's checkpoint to *files_p (capacity *cap_p, count *n_p), growing it. MP_OK, or
 * MP_ERR with errno = ENOMEM (the list is left as it was). */
static int ckpt_files_append(ckpt_file_t **files_p, int *n_p, int *cap_p, long step)
{
    if (*n_p == *cap_p) {
        int cap = *cap_p ? 2 * *cap_p : 16;
        ckpt_file_t *grown = realloc(*files_p, (size_t)cap * sizeof *grown);
        if (!grown) {
            errno = ENOMEM;
            return MP_ERR;
        }
        *files_p = grown;
        *cap_p = cap;
    }
    ckpt_file_t *f = &(*files_p)[(*n_p)++];
    f->step = step;
    snprintf(f->name, sizeof f->name, CKPT_NAME_FMT, step); /* the name parsed: only it parses to step */
    return MP_OK;
}

int ckpt_dir_list(const char *dir, ckpt_file_t **files_p, int *n_p)
{
    DIR *dh = opendir(dir);
    if (!dh) return MP_ERR;
    ckpt_file_t *files = NULL;
    int n = 0, cap = 0, rc = MP_OK;
    for (struct dirent *de; rc == MP_OK && (de = readdir(dh));) {
        long step;
        if (ckpt_name_parse(de->d_name, &step)) rc = ckpt_files_append(&files, &n, &cap, step);
    }
    closedir(dh);
    if (rc != MP_OK) {
        free(files);
        errno = ENOMEM;
        return MP_ERR;
    }
    if (n > 1) qsort(files, (size_t)n, sizeof *files, ckpt_file_older_first);
    *files_p = files;
    *n_p = n;
    return MP_OK;
}

int ckpt_dir_has_any(const char *dir)
{
    ckpt_file_t *files;
    int n = 0;
    if (ckpt_dir_list(dir, &files, &n) != MP_OK) return 0;
    free(files);
    return n > 0;
}

int ckpt_dir_find_latest(const char *dir, char *path_p, size_t n)
{
    ckpt_file_t *files;
    int count, rc = MP_ERR;
    if (ckpt_dir_list(dir, &files, &count) != MP_OK) {
        if (errno != ENOENT) MP_ERROR("cannot list checkpoint directory %s: %s", dir, strerror(errno));
        return MP_ERR;
    }
    for (int i = count - 1; i >= 0 && rc != MP_OK; i--) {
        char path[4400], reason[600];
        snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
        if (ckpt_verify(path, reason, sizeof reason) != MP_OK) {
            MP_WARN("skipping %s: %s", path, reason);
        } else if ((size_t)snprintf(path_p, n, "%s", path) >= n) {
            MP_ERROR("checkpoint path %s is longer than %zu bytes", path, n - 1);
            break;
        } else {
            rc = MP_OK;
        }
    }
    free(files);
    return rc;
}

int ckpt_dir_prune(const char *dir, int keep)
{
    if (keep <= 0) return MP_OK;
    ckpt_file_t *files;
    int count, rc = MP_OK;
    if (ckpt_dir_list(dir, &files, &count) != MP_OK)
        return MP_FAIL("cannot list checkpoint directory %s: %s", dir, strerror(errno));
    for (int i = 0; i < count - keep; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
        if (unlink(path) != 0 && errno != ENOENT) rc = MP_FAIL("cannot remove old checkpoint %s: %s", path, strerror(errno));
    }
    free(files);
    return rc;
}
