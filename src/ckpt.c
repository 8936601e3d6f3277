/* Checkpoints (DESIGN §7): one HDF5 file per checkpoint, every tensor at its global shape with a
 * checksum attribute, /state with the counters and the resolved deck.
 *
 * Durability: a checkpoint is written as PATH.tmp, flushed, closed, fsynced and renamed over PATH,
 * then the directory is fsynced; a crash leaves either the old file or the complete new one.
 * Reading verifies everything into temporary buffers before touching the caller's, so a refused
 * file never leaves a model half-loaded.
 *
 * This version writes from one process with the default file driver. The collective MPI-IO
 * version replaces ckpt_tensor_write only: each rank writes its hyperslab and the checksum is the
 * sum of the ranks' partial sums (ckpt_checksum is order-free and keyed by the global index).
 *
 * HDF5's automatic error printing is switched off around every public entry point (and restored
 * after): each failure is reported once, as our own message naming the file and the dataset. */
#include <stdio.h>

#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "h5util.h"
#include "rng.h"

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef PACKAGE_VERSION
#define CKPT_VERSION PACKAGE_VERSION
#else
#define CKPT_VERSION "unknown"
#endif

#define CKPT_FORMAT 1
#define CKPT_WHERE_MAX 4400 /* "FILE (/optim/m/NAME)" */

/* The float groups, in file order. Index 0 is the model; 1 and 2 the AdamW moments. */
static const char *const ckpt_groups[3] = {"model", "optim/m", "optim/v"};


/* Checksum of element i (global index g = first + i, float bits b):
 *     rng_mix(rotl64(g, 32) ^ b),  summed mod 2^64.
 * For g < 2^32 the key (g << 32 | b) is injective in (position, value), so a changed value or a
 * moved one changes the term; beyond 2^32 elements (16 GiB in one tensor) the high bits of g fold
 * into the low word. The sum is order-free: a rank's hyperslab sum added to the others' gives the
 * whole tensor's sum. Bits, not values, are summed: -0.0 and NaN payloads are covered too. */
uint64_t ckpt_checksum(const float *x, size_t n, size_t first)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        uint64_t g = (uint64_t)(first + i);
        sum += rng_mix(((g << 32) | (g >> 32)) ^ bits);
    }
    return sum;
}

/* ---- small helpers ---------------------------------------------------------------------------- */

static void ckpt_shape_str(int ndim, const hsize_t *dims, char *buf, size_t n)
{
    if (ndim == 2)
        snprintf(buf, n, "(%llu, %llu)", (unsigned long long)dims[0], (unsigned long long)dims[1]);
    else if (ndim == 1)
        snprintf(buf, n, "(%llu)", (unsigned long long)dims[0]);
    else
        snprintf(buf, n, "(rank %d)", ndim);
}

/* 1 if every component of the relative path "a/b/c" exists under loc, 0 if not, MP_ERR on error. */
static int ckpt_path_exists(hid_t loc, const char *rel, const char *fname)
{
    char part[256];
    for (const char *slash = rel;; slash++) {
        slash = strchr(slash, '/');
        size_t len = slash ? (size_t)(slash - rel) : strlen(rel);
        if (len >= sizeof part) return 0;
        memcpy(part, rel, len);
        part[len] = 0;
        htri_t have;
        H5_TRY(have = H5Lexists(loc, part, H5P_DEFAULT), err, fname);
        if (!have) return 0;
        if (!slash) return 1;
    }
err:
    return MP_ERR;
}



/* ---- attributes ------------------------------------------------------------------------------- */



static int ckpt_attr_open(hid_t loc, const char *name, const char *where, hid_t *a_p)
{
    htri_t have;
    H5_TRY(have = H5Aexists(loc, name), err, where);
    if (!have) return MP_FAIL("%s has no attribute %s", where, name);
    H5_TRY(*a_p = H5Aopen(loc, name, H5P_DEFAULT), err, where);
    return MP_OK;
err:
    return MP_ERR;
}

/* Scalar numeric attribute, converted by HDF5 to mem_type. */
static int ckpt_attr_read(hid_t loc, const char *name, hid_t mem_type, void *value_p, const char *where)
{
    hid_t a = -1;
    if (ckpt_attr_open(loc, name, where, &a) != MP_OK) return MP_ERR;
    int rc = MP_ERR;
    H5_TRY(H5Aread(a, mem_type, value_p), err_close_attr, where);
    rc = MP_OK;
err_close_attr:
    H5Aclose(a);
    return rc;
}

/* String attribute (fixed-length or variable-length, as h5py writes) into a malloc'd text. */
static int ckpt_attr_read_string(hid_t loc, const char *name, char **text_p, const char *where)
{
    hid_t a = -1, t = -1, mt = -1;
    if (ckpt_attr_open(loc, name, where, &a) != MP_OK) return MP_ERR;
    int rc = MP_ERR;
    char *text = NULL, *vtext = NULL;
    htri_t var;
    H5_TRY(t = H5Aget_type(a), err_close_attr, where);
    if (H5Tget_class(t) != H5T_STRING) {
        MP_ERROR("%s: attribute %s is not a string", where, name);
        goto err_close_type;
    }
    H5_TRY(var = H5Tis_variable_str(t), err_close_type, where);
    H5_TRY(mt = H5Tcopy(H5T_C_S1), err_close_type, where);
    if (var) {
        H5_TRY(H5Tset_size(mt, H5T_VARIABLE), err_close_memtype, where);
        H5_TRY(H5Aread(a, mt, &vtext), err_close_memtype, where);
        text = strdup(vtext ? vtext : "");
        H5free_memory(vtext);
    } else {
        size_t size = H5Tget_size(t);
        H5_TRY(H5Tset_size(mt, size), err_close_memtype, where);
        H5_TRY(H5Tset_strpad(mt, H5T_STR_NULLPAD), err_close_memtype, where); /* all size bytes are text */
        if (!(text = MP_CALLOC(size + 1, 1))) goto err_close_memtype;
        H5_TRY(H5Aread(a, mt, text), err_free_text, where);
    }
    if (!text) goto err_close_memtype;
    *text_p = text;
    text = NULL; /* handed to the caller */
    rc = MP_OK;
err_free_text:
    free(text);
err_close_memtype:
    H5Tclose(mt);
err_close_type:
    H5Tclose(t);
err_close_attr:
    H5Aclose(a);
    return rc;
}

/* ---- writing ---------------------------------------------------------------------------------- */

/* One tensor: dataset e->name in group at the table's shape (float32), with its checksum.
 * Single-process version; the collective one writes each rank's hyperslab. */
static int ckpt_tensor_write(hid_t group, const param_entry_t *e, const float *data, const char *where)
{
    int rc = MP_ERR;
    hid_t s = -1, d = -1;
    hsize_t dims[PARAM_MAX_DIMS] = {(hsize_t)e->shape[0], (hsize_t)e->shape[1]};
    uint64_t sum = ckpt_checksum(data, e->numel, 0);
    H5_TRY(s = H5Screate_simple(e->ndim, dims, NULL), out, where);
    H5_TRY(d = H5Dcreate2(group, e->name, H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), err_close_space,
           where);
    H5_TRY(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), err_close_dset, where);
    rc = h5_attr_write(d, "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, &sum, where);
err_close_dset:
    H5Dclose(d);
err_close_space:
    H5Sclose(s);
out:
    return rc;
}

/* Group gname (parents created as needed) holding every tensor of tab from buf. Links are tracked
 * in creation order so `inspect` lists them in the table's order. */
static int ckpt_group_write(hid_t f, const char *gname, const param_table_t *tab, const float *buf, const char *fname)
{
    int rc = MP_ERR;
    hid_t lcpl = -1, gcpl = -1, g = -1;
    char where[CKPT_WHERE_MAX];
    H5_TRY(lcpl = H5Pcreate(H5P_LINK_CREATE), out, fname);
    H5_TRY(H5Pset_create_intermediate_group(lcpl, 1), err_close_lcpl, fname);
    H5_TRY(gcpl = H5Pcreate(H5P_GROUP_CREATE), err_close_lcpl, fname);
    H5_TRY(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), err_close_gcpl, fname);
    H5_TRY(g = H5Gcreate2(f, gname, lcpl, gcpl, H5P_DEFAULT), err_close_gcpl, fname);
    for (int i = 0; i < tab->count; i++) {
        const param_entry_t *e = &tab->entries[i];
        snprintf(where, sizeof where, "%s (/%s/%s)", fname, gname, e->name);
        if (ckpt_tensor_write(g, e, buf + e->offset, where) != MP_OK) goto err_close_group;
    }
    rc = MP_OK;
err_close_group:
    H5Gclose(g);
err_close_gcpl:
    H5Pclose(gcpl);
err_close_lcpl:
    H5Pclose(lcpl);
out:
    return rc;
}

static int ckpt_state_write(hid_t f, const model_cfg_t *c, const ckpt_state_t *st, const char *deck_text,
                            const char *fname)
{
    hid_t g = -1;
    int rc = MP_ERR;
    char where[CKPT_WHERE_MAX];
    snprintf(where, sizeof where, "%s (/state)", fname);
    const struct {
        const char *name;
        int value;
    } ints[] = {{"format", CKPT_FORMAT}, {"layers", c->layers},   {"dim", c->dim},
                {"heads", c->heads},     {"seq_len", c->seq_len}, {"vocab", c->vocab},
                {"mlp_ratio", c->mlp_ratio}};
    int64_t step = st->step, adam_t = st->adam_t;
    H5_TRY(g = H5Gcreate2(f, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), out, where);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (h5_attr_write(g, ints[i].name, H5T_STD_I32LE, H5T_NATIVE_INT, &ints[i].value, where) != MP_OK)
            goto err_close_group;
    if (h5_attr_write(g, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &step, where) != MP_OK ||
        h5_attr_write(g, "adam_t", H5T_STD_I64LE, H5T_NATIVE_INT64, &adam_t, where) != MP_OK ||
        h5_attr_write(g, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &st->seed, where) != MP_OK ||
        h5_attr_write_string(g, "version", CKPT_VERSION, where) != MP_OK ||
        h5_attr_write_string(g, "layout", st->layout, where) != MP_OK ||
        h5_attr_write_string(g, "deck", deck_text ? deck_text : "", where) != MP_OK)
        goto err_close_group;
    rc = MP_OK;
err_close_group:
    H5Gclose(g);
out:
    return rc;
}

/* Creates fname, writes everything, flushes and closes it. */
static int ckpt_write_file(const char *fname, const param_table_t *tab, const float *const bufs[3],
                           const ckpt_state_t *st, const char *deck_text)
{
    hid_t f = -1;
    H5_TRY(f = H5Fcreate(fname, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), out, fname);
    for (int k = 0; k < 3; k++)
        if (bufs[k] && ckpt_group_write(f, ckpt_groups[k], tab, bufs[k], fname) != MP_OK) goto err_close_file;
    if (ckpt_state_write(f, &tab->cfg, st, deck_text, fname) != MP_OK) goto err_close_file;
    H5_TRY(H5Fflush(f, H5F_SCOPE_GLOBAL), err_close_file, fname);
    H5_TRY(H5Fclose(f), out, fname);
    return MP_OK;
err_close_file:
    H5Fclose(f);
out:
    return MP_ERR;
}

int ckpt_write(const char *path, const param_table_t *tab, const float *params, const float *m, const float *v,
               const ckpt_state_t *st, const char *deck_text)
{
    if (!m != !v) return MP_FAIL("checkpoint %s: m and v are written together (one of them is NULL)", path);
    char tmp[4200], dir[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    fs_dirname(path, dir, sizeof dir);
    const float *const bufs[3] = {params, m, v};
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = ckpt_write_file(tmp, tab, bufs, st, deck_text);
    h5_quiet_end(&q);
    if (rc != MP_OK || fs_fsync_path(tmp, 0) != MP_OK) goto err_remove_tmp;
    if (rename(tmp, path) != 0) {
        MP_ERROR("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto err_remove_tmp;
    }
    return fs_fsync_path(dir, 1);
err_remove_tmp:
    unlink(tmp);
    return MP_ERR;
}

/* ---- reading the state ------------------------------------------------------------------------ */

typedef struct {
    ckpt_state_t st; /* st.deck malloc'd */
    char *version;   /* malloc'd */
    model_cfg_t cfg;
    int format;
} ckpt_head_t;

static void ckpt_head_free(ckpt_head_t *h)
{
    free(h->st.deck);
    free(h->version);
    h->st.deck = h->version = NULL;
}

/* /state of an open checkpoint. Refuses a file without /state or of another format. */
static int ckpt_head_read(hid_t f, const char *path, ckpt_head_t *h_p)
{
    ckpt_head_t h = {0};
    hid_t g = -1;
    char where[CKPT_WHERE_MAX], *layout = NULL;
    int64_t step = 0, adam_t = 0;
    snprintf(where, sizeof where, "%s (/state)", path);
    int have = ckpt_path_exists(f, "state", path);
    if (have == 0) return MP_FAIL("%s has no /state group: not a MindPipe checkpoint", path);
    if (have != 1) return MP_ERR;
    H5_TRY(g = H5Gopen2(f, "state", H5P_DEFAULT), err, where);
    if (ckpt_attr_read(g, "format", H5T_NATIVE_INT, &h.format, where) != MP_OK) goto err_close_group;
    if (h.format != CKPT_FORMAT) {
        MP_ERROR("%s has checkpoint format %d; this build reads format %d", path, h.format, CKPT_FORMAT);
        goto err_close_group;
    }
    int *const ints[] = {&h.cfg.layers, &h.cfg.dim, &h.cfg.heads, &h.cfg.seq_len, &h.cfg.vocab, &h.cfg.mlp_ratio};
    static const char *const names[] = {"layers", "dim", "heads", "seq_len", "vocab", "mlp_ratio"};
    for (int i = 0; i < 6; i++)
        if (ckpt_attr_read(g, names[i], H5T_NATIVE_INT, ints[i], where) != MP_OK) goto err_close_group;
    if (ckpt_attr_read(g, "step", H5T_NATIVE_INT64, &step, where) != MP_OK ||
        ckpt_attr_read(g, "adam_t", H5T_NATIVE_INT64, &adam_t, where) != MP_OK ||
        ckpt_attr_read(g, "seed", H5T_NATIVE_UINT64, &h.st.seed, where) != MP_OK ||
        ckpt_attr_read_string(g, "layout", &layout, where) != MP_OK ||
        ckpt_attr_read_string(g, "version", &h.version, where) != MP_OK ||
        ckpt_attr_read_string(g, "deck", &h.st.deck, where) != MP_OK)
        goto err_free_head;
    H5Gclose(g);
    h.st.step = (long)step;
    h.st.adam_t = (long)adam_t;
    snprintf(h.st.layout, sizeof h.st.layout, "%s", layout);
    free(layout);
    *h_p = h;
    return MP_OK;
err_free_head:
    free(layout);
    ckpt_head_free(&h);
err_close_group:
    H5Gclose(g);
err:
    return MP_ERR;
}

/* ---- verifying datasets ----------------------------------------------------------------------- */

/* Reads the open float32 dataset d (numel elements) into buf and compares its checksum attribute.
 * 1 verified, 0 mismatch (sums in *stored_p, *computed_p), MP_ERR when it cannot be read (reported). */
static int ckpt_dset_check(hid_t d, float *buf, size_t numel, const char *where, uint64_t *stored_p,
                           uint64_t *computed_p)
{
    H5_TRY(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), err, where);
    if (ckpt_attr_read(d, "checksum", H5T_NATIVE_UINT64, stored_p, where) != MP_OK) goto err;
    *computed_p = ckpt_checksum(buf, numel, 0);
    return *stored_p == *computed_p;
err:
    return MP_ERR;
}

/* Rank and dims (up to PARAM_MAX_DIMS) of the open dataset d; refuses anything but float32. */
static int ckpt_dset_shape(hid_t d, int *ndim_p, hsize_t *dims, const char *where)
{
    int rc = MP_ERR, ndim;
    hid_t s = -1, t = -1;
    H5_TRY(t = H5Dget_type(d), out, where);
    if (H5Tget_class(t) != H5T_FLOAT || H5Tget_size(t) != 4) {
        MP_ERROR("%s is not float32", where);
        goto err_close_type;
    }
    H5_TRY(s = H5Dget_space(d), err_close_type, where);
    H5_TRY(ndim = H5Sget_simple_extent_ndims(s), err_close_space, where);
    if (ndim < 1 || ndim > PARAM_MAX_DIMS) {
        MP_ERROR("%s has rank %d; tensors are 1-D or 2-D", where, ndim);
        goto err_close_space;
    }
    H5_TRY(H5Sget_simple_extent_dims(s, dims, NULL), err_close_space, where);
    *ndim_p = ndim;
    rc = MP_OK;
err_close_space:
    H5Sclose(s);
err_close_type:
    H5Tclose(t);
out:
    return rc;
}

/* Dataset gname/e->name of f into out (e->numel floats): it must exist, have the table's shape and
 * its checksum must verify. Errors name the file and the dataset. */
static int ckpt_tensor_read(hid_t f, const char *path, const char *gname, const param_entry_t *e, float *out)
{
    char dname[PARAM_NAME_MAX + 16], where[CKPT_WHERE_MAX], have_s[64], want_s[64];
    snprintf(dname, sizeof dname, "%s/%s", gname, e->name);
    snprintf(where, sizeof where, "checkpoint %s (/%s)", path, dname);
    int exists = ckpt_path_exists(f, dname, where);
    if (exists == 0) return MP_FAIL("checkpoint %s has no dataset /%s", path, dname);
    if (exists != 1) return MP_ERR;
    int rc = MP_ERR, ndim = 0, st;
    hid_t d = -1;
    hsize_t dims[PARAM_MAX_DIMS] = {0, 0}, want[PARAM_MAX_DIMS] = {(hsize_t)e->shape[0], (hsize_t)e->shape[1]};
    uint64_t stored = 0, computed = 0;
    H5_TRY(d = H5Dopen2(f, dname, H5P_DEFAULT), out, where);
    if (ckpt_dset_shape(d, &ndim, dims, where) != MP_OK) goto err_close_dset;
    if (ndim != e->ndim || dims[0] != want[0] || (ndim == 2 && dims[1] != want[1])) {
        ckpt_shape_str(ndim, dims, have_s, sizeof have_s);
        ckpt_shape_str(e->ndim, want, want_s, sizeof want_s);
        MP_ERROR("checkpoint %s: /%s has shape %s, the model needs %s", path, dname, have_s, want_s);
        goto err_close_dset;
    }
    if ((st = ckpt_dset_check(d, out, e->numel, where, &stored, &computed)) == MP_ERR) goto err_close_dset;
    if (st == 0) {
        MP_ERROR("checkpoint %s: /%s checksum mismatch (stored %016llx, computed %016llx): the file is corrupt", path,
                 dname, (unsigned long long)stored, (unsigned long long)computed);
        goto err_close_dset;
    }
    rc = MP_OK;
err_close_dset:
    H5Dclose(d);
out:
    return rc;
}

/* Verification of every dataset of a file without a table (find_latest, inspect). */
typedef struct {
    const char *path;  /* the file, for messages */
    FILE *out;         /* inspect: one line per dataset; NULL: stop at the first failure */
    const char *gname; /* group being iterated */
    int count, bad;    /* datasets seen, datasets that failed */
    char reason[512];  /* the first failure */
} ckpt_verify_t;

/* Records a failure of /gname/name (name NULL: of the group itself); the first one is the reason. */
static void ckpt_verify_fail(ckpt_verify_t *vf, const char *name, const char *what)
{
    if (vf->bad++ == 0)
        snprintf(vf->reason, sizeof vf->reason, "/%s%s%s: %s", vf->gname, name ? "/" : "", name ? name : "", what);
}

/* 1 verified, 0 checksum mismatch, MP_ERR unreadable (reported). One line to vf->out if set. */
static int ckpt_verify_dset(hid_t d, const char *name, ckpt_verify_t *vf)
{
    char where[CKPT_WHERE_MAX], shape[64];
    snprintf(where, sizeof where, "checkpoint %s (/%s/%s)", vf->path, vf->gname, name);
    int ndim = 0, st = MP_ERR;
    hsize_t dims[PARAM_MAX_DIMS] = {0, 0};
    uint64_t stored = 0, computed = 0;
    if (ckpt_dset_shape(d, &ndim, dims, where) == MP_OK) {
        size_t numel = (size_t)dims[0] * (ndim == 2 ? (size_t)dims[1] : 1);
        float *buf = MP_MALLOC(numel * sizeof *buf);
        if (buf) st = ckpt_dset_check(d, buf, numel, where, &stored, &computed);
        free(buf);
    }
    ckpt_shape_str(ndim, dims, shape, sizeof shape);
    if (vf->out)
        fprintf(vf->out, "  /%s/%s %s %s\n", vf->gname, name, shape,
                st == 1 ? "checksum ok" : st == 0 ? "CHECKSUM MISMATCH" : "UNREADABLE");
    if (st == 0) ckpt_verify_fail(vf, name, "checksum mismatch");
    if (st == MP_ERR) ckpt_verify_fail(vf, name, "cannot be read");
    return st;
}

/* H5Literate callback: verifies link `name` of the group if it is a dataset. Without an output
 * stream (find_latest) it stops at the first failure. */
static herr_t ckpt_verify_link(hid_t g, const char *name, const H5L_info_t *info, void *arg)
{
    ckpt_verify_t *vf = arg;
    char where[CKPT_WHERE_MAX];
    snprintf(where, sizeof where, "checkpoint %s (/%s/%s)", vf->path, vf->gname, name);
    hid_t o = -1;
    vf->count++;
    H5_TRY(o = H5Oopen(g, name, H5P_DEFAULT), err, where);
    int st = H5Iget_type(o) == H5I_DATASET ? ckpt_verify_dset(o, name, vf) : 1;
    H5Oclose(o);
    return st != 1 && !vf->out;
err:
    ckpt_verify_fail(vf, name, "cannot be opened");
    return !vf->out;
}

/* Verifies every dataset of group vf->gname, in creation order when the file tracks it (ours do). */
static int ckpt_verify_group(hid_t f, ckpt_verify_t *vf)
{
    int rc = MP_ERR;
    hid_t g = -1, gcpl = -1;
    unsigned order = 0;
    H5_TRY(g = H5Gopen2(f, vf->gname, H5P_DEFAULT), out, vf->path);
    H5_TRY(gcpl = H5Gget_create_plist(g), err_close_group, vf->path);
    H5_TRY(H5Pget_link_creation_order(gcpl, &order), err_close_gcpl, vf->path);
    H5_index_t idx = (order & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
    H5_TRY(H5Literate(g, idx, H5_ITER_INC, NULL, ckpt_verify_link, vf), err_close_gcpl, vf->path);
    rc = MP_OK;
err_close_gcpl:
    H5Pclose(gcpl);
err_close_group:
    H5Gclose(g);
out:
    if (rc != MP_OK) ckpt_verify_fail(vf, NULL, "cannot be read");
    return rc;
}

/* Verifies /model, /optim/m and /optim/v (the optimizer state is optional). MP_OK iff all verify;
 * vf->reason holds the first failure. */
static int ckpt_verify_groups(hid_t f, ckpt_verify_t *vf)
{
    for (int k = 0; k < 3 && (vf->out || !vf->bad); k++) {
        vf->gname = ckpt_groups[k];
        int have = ckpt_path_exists(f, vf->gname, vf->path);
        if (have == 1)
            ckpt_verify_group(f, vf);
        else if (have == MP_ERR)
            ckpt_verify_fail(vf, NULL, "cannot be read");
        else if (k == 0)
            ckpt_verify_fail(vf, NULL, "missing");
    }
    return vf->bad ? MP_ERR : MP_OK;
}

/* Does the file at path open, have a readable /state of our format, and verify? reason (n bytes)
 * says why not. */
static int ckpt_verify_path(const char *path, char *reason, size_t n)
{
    ckpt_verify_t vf = {.path = path};
    ckpt_head_t h;
    hid_t f = -1;
    int rc = MP_ERR;
    snprintf(reason, n, "cannot be opened as HDF5");
    H5_TRY(f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), out, path);
    snprintf(reason, n, "no readable /state");
    if (ckpt_head_read(f, path, &h) != MP_OK) goto err_close_file;
    ckpt_head_free(&h);
    rc = ckpt_verify_groups(f, &vf);
    if (rc != MP_OK) snprintf(reason, n, "%s", vf.reason);
err_close_file:
    H5Fclose(f);
out:
    return rc;
}

/* ---- reading ---------------------------------------------------------------------------------- */

static int ckpt_cfg_check(const char *path, const model_cfg_t *have, const model_cfg_t *want)
{
    const struct {
        const char *name;
        int have, want;
    } f[] = {{"layers", have->layers, want->layers},    {"dim", have->dim, want->dim},
             {"heads", have->heads, want->heads},       {"seq_len", have->seq_len, want->seq_len},
             {"vocab", have->vocab, want->vocab},       {"mlp_ratio", have->mlp_ratio, want->mlp_ratio}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].have != f[i].want)
            return MP_FAIL("checkpoint %s has model.%s=%d, the deck says %d", path, f[i].name, f[i].have, f[i].want);
    return MP_OK;
}

/* Every tensor of tab from the groups whose dst is set, into freshly allocated tmp buffers. */
static int ckpt_read_tensors(hid_t f, const char *path, const param_table_t *tab, float *const dst[3], float *tmp[3])
{
    for (int k = 0; k < 3; k++)
        if (dst[k] && !(tmp[k] = MP_MALLOC(tab->total * sizeof(float)))) return MP_ERR;
    for (int k = 0; k < 3; k++)
        for (int i = 0; dst[k] && i < tab->count; i++) {
            const param_entry_t *e = &tab->entries[i];
            if (ckpt_tensor_read(f, path, ckpt_groups[k], e, tmp[k] + e->offset) != MP_OK) return MP_ERR;
        }
    return MP_OK;
}

static int ckpt_read_file(const char *path, const param_table_t *tab, float *const dst[3], ckpt_state_t *st_p)
{
    ckpt_head_t h;
    float *tmp[3] = {NULL, NULL, NULL};
    hid_t f = -1;
    H5_TRY(f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), out, path);
    if (ckpt_head_read(f, path, &h) != MP_OK) goto err_close_file;
    int ok = ckpt_cfg_check(path, &h.cfg, &tab->cfg) == MP_OK && ckpt_read_tensors(f, path, tab, dst, tmp) == MP_OK;
    herr_t closed = H5Fclose(f);
    if (!ok) goto err_free_buffers;
    H5_TRY(closed, err_free_buffers, path);
    /* Everything verified: only now do the caller's buffers change. */
    for (int k = 0; k < 3; k++) {
        if (dst[k]) memcpy(dst[k], tmp[k], tab->total * sizeof(float));
        free(tmp[k]);
    }
    free(h.version);
    *st_p = h.st;
    return MP_OK;
err_free_buffers:
    for (int k = 0; k < 3; k++) free(tmp[k]);
    ckpt_head_free(&h);
    return MP_ERR;
err_close_file:
    H5Fclose(f);
out:
    return MP_ERR;
}

int ckpt_read(const char *path, const param_table_t *tab, float *params, float *m, float *v, ckpt_state_t *st_p)
{
    if (access(path, R_OK) != 0) return MP_FAIL("checkpoint %s: %s", path, strerror(errno));
    float *const dst[3] = {params, m, v};
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = ckpt_read_file(path, tab, dst, st_p);
    h5_quiet_end(&q);
    return rc;
}

/* ---- inspect ---------------------------------------------------------------------------------- */

static int ckpt_inspect_file(const char *path, FILE *out)
{
    ckpt_head_t h;
    ckpt_verify_t vf = {.path = path, .out = out};
    hid_t f = -1;
    H5_TRY(f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), err, path);
    if (ckpt_head_read(f, path, &h) != MP_OK) goto err_close_file;
    const model_cfg_t *c = &h.cfg;
    fprintf(out, "checkpoint %s\n", path);
    fprintf(out, "step %ld  adam_t %ld  seed %llu\n", h.st.step, h.st.adam_t, (unsigned long long)h.st.seed);
    fprintf(out, "layout %s\nversion %s (format %d)\n", h.st.layout, h.version, h.format);
    fprintf(out, "model layers=%d dim=%d heads=%d seq_len=%d vocab=%d mlp_ratio=%d\n", c->layers, c->dim, c->heads,
            c->seq_len, c->vocab, c->mlp_ratio);
    fprintf(out, "datasets:\n");
    int rc = ckpt_verify_groups(f, &vf);
    fprintf(out, "deck:\n%s%s", h.st.deck, h.st.deck[0] && h.st.deck[strlen(h.st.deck) - 1] != '\n' ? "\n" : "");
    ckpt_head_free(&h);
    H5Fclose(f);
    if (rc != MP_OK) MP_ERROR("checkpoint %s: %d of %d datasets do not verify (first: %s)", path, vf.bad, vf.count,
                              vf.reason);
    return rc;
err_close_file:
    H5Fclose(f);
err:
    return MP_ERR;
}

int ckpt_inspect(const char *path, FILE *out)
{
    if (access(path, R_OK) != 0) return MP_FAIL("checkpoint %s: %s", path, strerror(errno));
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = ckpt_inspect_file(path, out);
    h5_quiet_end(&q);
    return rc;
}

/* ---- the checkpoint directory ----------------------------------------------------------------- */

typedef struct {
    long step;
    char name[64];
} ckpt_file_t;

/* "step_<digits>.h5" exactly (not .tmp, not anything else); the step in *step_p. */
static int ckpt_name_parse(const char *name, long *step_p)
{
    if (strncmp(name, "step_", 5) != 0) return 0;
    const char *p = name + 5;
    long step = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 18; p++, digits++) step = step * 10 + (*p - '0');
    if (!digits || strcmp(p, ".h5") != 0) return 0;
    *step_p = step;
    return 1;
}

static int ckpt_file_newer_first(const void *a, const void *b)
{
    long sa = ((const ckpt_file_t *)a)->step, sb = ((const ckpt_file_t *)b)->step;
    return sa < sb ? 1 : sa > sb ? -1 : 0;
}

/* The checkpoints of dir, newest first (malloc'd). MP_ERR with errno set if dir cannot be read;
 * quiet (the caller decides whether a missing directory is an error). */
static int ckpt_list(const char *dir, ckpt_file_t **files_p, int *n_p)
{
    DIR *dh = opendir(dir);
    if (!dh) return MP_ERR;
    ckpt_file_t *files = NULL;
    int n = 0, cap = 0;
    for (struct dirent *de; (de = readdir(dh));) {
        long step;
        size_t len = strlen(de->d_name);
        if (!ckpt_name_parse(de->d_name, &step) || len >= sizeof files[0].name) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            ckpt_file_t *grown = realloc(files, (size_t)cap * sizeof *files);
            if (!grown) {
                free(files);
                closedir(dh);
                errno = ENOMEM;
                return MP_ERR;
            }
            files = grown;
        }
        files[n].step = step;
        memcpy(files[n].name, de->d_name, len + 1);
        n++;
    }
    closedir(dh);
    if (n > 1) qsort(files, (size_t)n, sizeof *files, ckpt_file_newer_first);
    *files_p = files;
    *n_p = n;
    return MP_OK;
}

/* Prints nothing when dir is missing or holds no checkpoint (a first run: the caller decides). */
int ckpt_find_latest(const char *dir, char *path_p, size_t n)
{
    ckpt_file_t *files;
    int count, rc = MP_ERR;
    if (ckpt_list(dir, &files, &count) != MP_OK) {
        if (errno != ENOENT) MP_ERROR("cannot list checkpoint directory %s: %s", dir, strerror(errno));
        return MP_ERR;
    }
    h5_quiet_t q;
    h5_quiet_begin(&q);
    for (int i = 0; i < count && rc != MP_OK; i++) {
        char path[4400], reason[600];
        snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
        if (ckpt_verify_path(path, reason, sizeof reason) != MP_OK) {
            MP_WARN("skipping %s: %s", path, reason);
        } else if ((size_t)snprintf(path_p, n, "%s", path) >= n) {
            MP_ERROR("checkpoint path %s is longer than %zu bytes", path, n - 1);
            break;
        } else {
            rc = MP_OK;
        }
    }
    h5_quiet_end(&q);
    free(files);
    return rc;
}

int ckpt_prune(const char *dir, int keep)
{
    if (keep <= 0) return MP_OK;
    ckpt_file_t *files;
    int count, rc = MP_OK;
    if (ckpt_list(dir, &files, &count) != MP_OK)
        return MP_FAIL("cannot list checkpoint directory %s: %s", dir, strerror(errno));
    for (int i = keep; i < count; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
        if (unlink(path) != 0 && errno != ENOENT) rc = MP_FAIL("cannot remove old checkpoint %s: %s", path, strerror(errno));
    }
    free(files);
    return rc;
}
