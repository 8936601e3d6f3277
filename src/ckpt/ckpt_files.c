/* The files of a checkpoint directory: the step_%08ld.h5 name, listing, newest valid, a file's
 * head, the verdict cache, pruning (ckpt_files.h). */
#include "ckpt_files.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ckpt.h"
#include "deck.h"
#include "filesum.h"
#include "h5util.h"
#include "tok_files.h"

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

/* ---- a file's head ----------------------------------------------------------------------------- */

/* /state's string attribute `name` into a malloc'd *text_p: 1, 0 absent, or MP_ERR with why in reason. */
static int ckpt_head_string(hid_t g, const char *name, char **text_p, char *reason, size_t n)
{
    char why[512];
    const int rc = h5_attr_get_alloc(g, name, text_p, why, sizeof why);
    if (rc == MP_ERR) snprintf(reason, n, "/state %s %s", name, why);
    return rc;
}

/* /state's scalar numeric attribute `name`, converted to mem_type: MP_OK, or MP_ERR with why in
 * reason (missing too: every one of these is written by every format). */
static int ckpt_head_int(hid_t g, const char *name, hid_t mem_type, void *value_p, char *reason, size_t n)
{
    char why[512];
    const int rc = h5_attr_get(g, name, mem_type, value_p, why, sizeof why);
    if (rc == 0) return snprintf(reason, n, "/state has no %s", name), MP_ERR;
    if (rc == MP_ERR) return snprintf(reason, n, "/state %s %s", name, why), MP_ERR;
    return MP_OK;
}

/* What ckpt_state_check judges (every reader's checks), from the open /state group g of a file
 * whose head h is read (the deck and the shape from h); h->seed is set. */
static int ckpt_head_check(hid_t g, ckpt_head_info_t *h, char *reason, size_t n)
{
    ckpt_facts_t s = {.layers = h->layers, .dim = h->dim, .heads = h->heads, .seq_len = h->seq_len,
                      .vocab = h->vocab, .mlp_ratio = h->mlp_ratio, .fam = h->fam, .step = h->step, .deck = h->deck,
                      .has_optim = h->has_optim};
    int64_t adam_t = 0, cursor = 0;
    if (ckpt_head_int(g, "format", H5T_NATIVE_INT, &s.format, reason, n) != MP_OK ||
        ckpt_head_int(g, "adam_t", H5T_NATIVE_INT64, &adam_t, reason, n) != MP_OK ||
        ckpt_head_int(g, "seed", H5T_NATIVE_UINT64, &s.seed, reason, n) != MP_OK ||
        (s.format >= 2 && ckpt_head_int(g, "data_cursor", H5T_NATIVE_INT64, &cursor, reason, n) != MP_OK))
        return MP_ERR;
    s.adam_t = adam_t, s.data_cursor = cursor;
    h->seed = s.seed;
    return ckpt_state_check(&s, reason, n);
}

/* /state's tokenizer attributes into h->tok: absent (files before them) is byte. */
static int ckpt_head_tok(hid_t g, ckpt_head_info_t *h, char *reason, size_t n)
{
    char *name = NULL, *sha = NULL, why[200];
    int rc = MP_ERR;
    if (ckpt_head_string(g, "tokenizer", &name, reason, n) == MP_ERR ||
        ckpt_head_string(g, "tokenizer_sha256", &sha, reason, n) == MP_ERR) {
        /* reason says which */
    } else if (tok_ident_set(&h->tok, name ? name : "byte", sha, why, sizeof why) != MP_OK)
        snprintf(reason, n, "/state: %s", why);
    else
        rc = MP_OK;
    free(name);
    free(sha);
    return rc;
}

/* The attributes of the open /state group g into h (blocks and deck malloc'd). */
static int ckpt_head_attrs(hid_t g, ckpt_head_info_t *h, char *reason, size_t n)
{
    int *const ints[] = {&h->layers, &h->dim, &h->heads, &h->seq_len, &h->vocab, &h->mlp_ratio};
    static const char *const names[] = {"layers", "dim", "heads", "seq_len", "vocab", "mlp_ratio"};
    int64_t step = 0;
    for (int i = 0; i < 6; i++)
        if (ckpt_head_int(g, names[i], H5T_NATIVE_INT, ints[i], reason, n) != MP_OK) return MP_ERR;
    if (ckpt_head_int(g, "step", H5T_NATIVE_INT64, &step, reason, n) != MP_OK) return MP_ERR;
    h->step = (long)step;
    if (ckpt_family_read(g, h->heads, &h->fam, reason, n) != MP_OK) return MP_ERR; /* absent: gpt2 */
    const int has_deck = ckpt_head_string(g, "deck", &h->deck, reason, n);
    if (has_deck == 0) snprintf(reason, n, "/state has no deck");
    if (has_deck != 1) return MP_ERR;
    /* blocks and run_id are absent in files before them: "" */
    if (ckpt_head_string(g, "blocks", &h->blocks, reason, n) == MP_ERR) return MP_ERR;
    if (!h->blocks && !(h->blocks = strdup(""))) return snprintf(reason, n, "out of memory"), MP_ERR;
    char *id = NULL;
    if (ckpt_head_string(g, "run_id", &id, reason, n) == MP_ERR) return MP_ERR;
    snprintf(h->run_id, sizeof h->run_id, "%s", id ? id : "");
    free(id);
    return ckpt_head_tok(g, h, reason, n);
}

static int ckpt_head_file(const char *path, ckpt_head_info_t *h, char *reason, size_t n)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), g = -1;
    if (f < 0) return snprintf(reason, n, "cannot be opened as HDF5"), MP_ERR;
    int rc = MP_ERR;
    if (H5Lexists(f, "state", H5P_DEFAULT) <= 0 || (g = H5Gopen2(f, "state", H5P_DEFAULT)) < 0) {
        snprintf(reason, n, "no readable /state");
        goto out;
    }
    if (ckpt_head_attrs(g, h, reason, n) != MP_OK) goto out;
    h->has_model_prev = H5Lexists(f, "model_prev", H5P_DEFAULT) > 0;
    h->has_optim = H5Lexists(f, "optim", H5P_DEFAULT) > 0 && H5Lexists(f, "optim/m", H5P_DEFAULT) > 0 &&
                   H5Lexists(f, "optim/v", H5P_DEFAULT) > 0;
    if (ckpt_head_check(g, h, reason, n) != MP_OK) goto out;
    rc = MP_OK;
out:
    if (g >= 0) H5Gclose(g);
    H5Fclose(f);
    return rc;
}

int ckpt_file_head(const char *path, ckpt_head_info_t *h_p, char *reason_p, size_t n)
{
    ckpt_head_info_t h = {0};
    /* the file checksum first, with POSIX reads only: libhdf5 may crash on damaged metadata */
    char why[512];
    const int fs = filesum_check(path, why, sizeof why);
    if (fs != FILESUM_OK) {
        snprintf(reason_p, n, "%s", fs == FILESUM_NONE ? "no file checksum (not a checkpoint of this version)" : why);
        return MP_ERR;
    }
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = ckpt_head_file(path, &h, reason_p, n);
    h5_quiet_end(&q);
    if (rc != MP_OK) {
        ckpt_file_head_free(&h);
        return MP_ERR;
    }
    *h_p = h;
    return MP_OK;
}

void ckpt_file_head_free(ckpt_head_info_t *h)
{
    free(h->blocks);
    free(h->deck);
    h->blocks = h->deck = NULL;
}

int ckpt_file_tokenizer(const char *path, const char *dir, tokenizer_t *tok_p)
{
    ckpt_head_info_t h;
    char why[600];
    if (ckpt_file_head(path, &h, why, sizeof why) != MP_OK) return MP_FAIL("%s: %s", path, why);
    const tok_ident_t ident = h.tok;
    /* sp and hf: the model is in the token file the run trained on (the deck's data.path, the first
     * of its shards), unless dir names another copy */
    char src[4096] = "";
    if (!dir && (!strcmp(ident.name, "sp") || !strcmp(ident.name, "hf")) && h.deck) {
        deck_t d;
        glob_t g;
        if (deck_parse_text(&d, h.deck, NULL, why, sizeof why) == MP_OK && d.data.path[0]) {
            if (glob(d.data.path, 0, NULL, &g) == 0) {
                if (g.gl_pathc > 0) snprintf(src, sizeof src, "%s", g.gl_pathv[0]);
                globfree(&g);
            }
            if (!src[0]) snprintf(src, sizeof src, "%s", d.data.path);
            dir = src;
        }
    }
    ckpt_file_head_free(&h);
    return tok_open_ident(tok_p, &ident, dir, path);
}

/* ---- verdicts ------------------------------------------------------------------------------------ */

void ckpt_verdicts_free(ckpt_verdicts_t *c)
{
    free(c->v);
    *c = (ckpt_verdicts_t){0};
}

/* c's entry for dir/name at its current size and mtime, a fresh one (nothing known) if the file
 * changed or is new. */
static int ckpt_verdict_entry(ckpt_verdicts_t *c, const char *dir, const char *name, ckpt_verdict_t **v_p)
{
    char path[4400];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (stat(path, &sb) != 0) return MP_FAIL("cannot stat checkpoint %s: %s", path, strerror(errno));
    const long long size = (long long)sb.st_size, mt = (long long)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
    ckpt_verdict_t *v = NULL;
    for (int i = 0; i < c->n && !v; i++)
        if (!strcmp(c->v[i].name, name)) v = &c->v[i];
    if (!v) {
        if (c->n == c->cap) {
            int cap = c->cap ? 2 * c->cap : 16;
            ckpt_verdict_t *grown = realloc(c->v, (size_t)cap * sizeof *grown);
            if (!grown) return MP_FAIL("out of memory judging checkpoint %s", path);
            c->v = grown;
            c->cap = cap;
        }
        v = &c->v[c->n++];
        v->name[0] = 0;
        v->size = -1; /* judged below as a new file */
    }
    if (v->size != size || v->mtime_ns != mt) { /* new, or another file under the same name */
        memset(v, 0, sizeof *v);
        snprintf(v->name, sizeof v->name, "%s", name);
        v->size = size, v->mtime_ns = mt, v->verified = -1;
    }
    *v_p = v;
    return MP_OK;
}

int ckpt_verdict_get(ckpt_verdicts_t *c, const char *dir, const char *name, int full, const ckpt_verdict_t **v_p)
{
    ckpt_verdict_t *v;
    if (ckpt_verdict_entry(c, dir, name, &v) != MP_OK) return MP_ERR;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!v->head_ok && v->verified != 0) {
        ckpt_head_info_t h;
        if (ckpt_file_head(path, &h, v->reason, sizeof v->reason) == MP_OK) {
            v->head_ok = 1;
            snprintf(v->run_id, sizeof v->run_id, "%s", h.run_id);
            ckpt_file_head_free(&h);
        } else {
            v->verified = 0; /* a file whose /state cannot be read does not verify */
        }
    }
    if (full && v->verified < 0) v->verified = ckpt_verify(path, v->reason, sizeof v->reason) == MP_OK;
    *v_p = v;
    return MP_OK;
}

int ckpt_verdict_written(ckpt_verdicts_t *c, const char *dir, const char *name, const char *run_id)
{
    ckpt_verdict_t *v;
    if (ckpt_verdict_entry(c, dir, name, &v) != MP_OK) return MP_ERR;
    v->head_ok = 1;
    v->verified = 1;
    snprintf(v->run_id, sizeof v->run_id, "%s", run_id ? run_id : "");
    return MP_OK;
}

/* ---- pruning ------------------------------------------------------------------------------------- */

/* Whether pruning may count dir/name (a verdict v) as one of run_id's good checkpoints; if not, says
 * why once per file version. */
static int ckpt_prune_candidate(const char *dir, ckpt_verdict_t *v, const char *run_id)
{
    const char *why = NULL;
    char other[200];
    if (v->verified == 0) {
        why = v->reason;
    } else if (run_id && !v->run_id[0]) {
        why = "it was written before run ids (it may belong to another run)";
    } else if (run_id && strcmp(v->run_id, run_id) != 0) {
        snprintf(other, sizeof other, "it belongs to another run (run_id %s; this run is %s)", v->run_id, run_id);
        why = other;
    } else {
        return 1;
    }
    if (!v->warned)
        MP_WARN("checkpoint.keep: leaving %s/%s alone: %s%s", dir, v->name, why,
                v->verified == 0 ? " (it does not verify; remove it yourself once you no longer need it)" : "");
    v->warned = 1;
    return 0;
}

int ckpt_dir_prune_run(const char *dir, int keep, const char *run_id, const char *written, ckpt_verdicts_t *c)
{
    if (keep <= 0) return MP_OK;
    ckpt_verdicts_t own = {0};
    if (!c) c = &own;
    ckpt_file_t *files;
    int count, rc = MP_OK, kept = 0;
    if (ckpt_dir_list(dir, &files, &count) != MP_OK)
        return MP_FAIL("cannot list checkpoint directory %s: %s", dir, strerror(errno));
    for (int i = count - 1; i >= 0; i--) { /* newest first */
        const ckpt_verdict_t *cv;
        const int mine_written = written && !strcmp(files[i].name, written);
        /* the head (run id) first: another run's files are never read through */
        if (ckpt_verdict_get(c, dir, files[i].name, 0, &cv) != MP_OK) {
            rc = MP_ERR;
            continue;
        }
        ckpt_verdict_t *v = (ckpt_verdict_t *)cv;
        if (!ckpt_prune_candidate(dir, v, run_id)) continue;
        if (!mine_written && ckpt_verdict_get(c, dir, files[i].name, 1, &cv) != MP_OK) {
            rc = MP_ERR;
            continue;
        }
        if (!ckpt_prune_candidate(dir, v, run_id)) continue;
        if (++kept <= keep || mine_written) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
        if (unlink(path) != 0 && errno != ENOENT) rc = MP_FAIL("cannot remove old checkpoint %s: %s", path, strerror(errno));
    }
    free(files);
    ckpt_verdicts_free(&own);
    return rc;
}

int ckpt_dir_prune(const char *dir, int keep) { return ckpt_dir_prune_run(dir, keep, NULL, NULL, NULL); }
