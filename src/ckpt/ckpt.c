/* Checkpoints (ARCHITECTURE.md §7): one HDF5 file per checkpoint, every tensor at its global shape with a
 * checksum attribute, /state with the counters and the resolved deck.
 *
 * Durability: a checkpoint is written as PATH.tmp, flushed and closed, then published (publish.h:
 * fsynced, renamed over PATH, the directory fsynced); a crash leaves either the old file or the
 * complete new one. The files of a checkpoint directory (names, listing, newest valid, pruning) are
 * ckpt_files.c's.
 * Reading verifies everything into temporary buffers before touching the caller's, so a refused
 * file never leaves a model half-loaded.
 *
 * Writes and reads are collective (MPI-IO driver; transfers collective or independent, per
 * checkpoint.transfer): each rank moves the hyperslab of its TP shard of every tensor its stage
 * holds, and a dataset's checksum is the sum of the owning ranks' partial sums (ckpt_checksum is
 * order-free and keyed by the global index).
 *
 * HDF5's automatic error printing is switched off around every public entry point (and restored
 * after): each failure is reported once, as our own message naming the file and the dataset.
 *
 * File checksum (filesum.h): libhdf5 trusts a file's metadata and crashes on some damaged files, so
 * every file is created with a user block, sealed by rank 0 after the close (its metadata hashed,
 * the tensors' raw data left to their own checksums), and every reader checks the seal with plain
 * POSIX I/O before HDF5 opens the file: a damaged file is refused naming it, HDF5 never sees it.
 * Files without the seal (older MindPipe, foreign HDF5) are refused by the readers; inspect reports
 * that and reads them anyway in a child process, so a crash of libhdf5 becomes a message. */
#include <stdio.h>

#include "ckpt.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arena.h"
#include "check.h"
#include "ckpt_family.h"
#include "deck.h"
#include "deck_model.h"
#include "filesum.h"
#include "h5util.h"
#include "mpi_check.h"
#include "publish.h"
#include "rng.h"

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#ifdef PACKAGE_VERSION
#define CKPT_VERSION PACKAGE_VERSION
#else
#define CKPT_VERSION "unknown"
#endif

#define CKPT_FORMAT 2
#define CKPT_WHERE_MAX 4400 /* "FILE (/optim/m/NAME)" */
#define CKPT_BLOCKS_MAX 2048 /* model.blocks as text: DECK_LIST_MAX shapes */

/* The float groups, in file order (CKPT_MODEL ...). */
static const char *const ckpt_groups[CKPT_NGROUPS] = {"model", "model_prev", "optim/m", "optim/v"};


/* Checksum of element i (global index g = first + i, float bits b):
 *     rng_mix(rotl64(g, 32) ^ b),  summed mod 2^64.
 * For g < 2^32 the key (g << 32 | b) is injective in (position, value), so a changed value or a
 * moved one changes the term; beyond 2^32 elements (16 GiB in one tensor) the high bits of g fold
 * into the low word. The sum is order-free: a rank's hyperslab sum added to the others' gives the
 * whole tensor's sum. Bits, not values, are summed: -0.0 and NaN payloads are covered too. */
static uint64_t ckpt_checksum_term(uint64_t g, float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return rng_mix(((g << 32) | (g >> 32)) ^ bits);
}

uint64_t ckpt_checksum(const float *x, size_t n, size_t first)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += ckpt_checksum_term((uint64_t)(first + i), x[i]);
    return sum;
}

/* The part of the checksum of a tensor that this TP shard (elements x of local entry e) holds. */
static uint64_t ckpt_checksum_shard(const param_table_t *tab, const param_entry_t *e, const float *x)
{
    uint64_t sum = 0;
    for (size_t j = 0; j < e->numel; j++) {
        size_t g = param_global_index(tab, e, j, tab->tp_rank);
        if (g != (size_t)-1) sum += ckpt_checksum_term(g, x[j]);
    }
    return sum;
}

/* ---- small helpers ---------------------------------------------------------------------------- */

static int ckpt_dset_shape(hid_t d, int *ndim_p, hsize_t *dims, const char *where);

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

/* The readers are h5util.h's. Here a missing attribute is an error naming the group it is missing
 * from (the optional ones, blocks and run_id, are asked for with H5Aexists first). */

/* Scalar numeric attribute, converted by HDF5 to mem_type. */
static int ckpt_attr_read(hid_t loc, const char *name, hid_t mem_type, void *value_p, const char *where)
{
    char at[CKPT_WHERE_MAX + 80];
    snprintf(at, sizeof at, "%s: attribute %s", where, name);
    const int have = h5_attr_read(loc, name, mem_type, value_p, at);
    if (have == 0) return MP_FAIL("%s has no attribute %s", where, name);
    return have == 1 ? MP_OK : MP_ERR;
}

/* String attribute (fixed-length or variable-length, as h5py writes) into a malloc'd text. */
static int ckpt_attr_read_string(hid_t loc, const char *name, char **text_p, const char *where)
{
    char at[CKPT_WHERE_MAX + 80];
    snprintf(at, sizeof at, "%s: attribute %s", where, name);
    const int have = h5_attr_read_alloc(loc, name, text_p, at);
    if (have == 0) return MP_FAIL("%s has no attribute %s", where, name);
    return have == 1 ? MP_OK : MP_ERR;
}

/* ---- writing ---------------------------------------------------------------------------------- */

/* Does this rank write (and count in the checksum) local entry e? One replica; of replicated
 * tensors TP rank 0; of the tied embedding the first stage's copy (the last stage holds one too).
 * A file one process writes alone over MPI_COMM_SELF (a survivor's snapshot of its tp shard) holds
 * everything that process has: its replicated tensors too, whatever its tp rank (without them a tp
 * rank 1's snapshot read back zeros there, and its replay's weights were not the run's). */
static int ckpt_owns(const ckpt_part_t *pt, const param_entry_t *e)
{
    if (!pt->owner || !e) return 0;
    if (e->kind == PK_WTE && !pt->local->has_embed) return 0;
    return e->split != SPLIT_NONE || pt->local->tp_rank == 0 || pt->comm == MPI_COMM_SELF;
}

/* Selects local entry e's elements in the global dataset's space fs and in the shard's memory space
 * ms (e NULL: nothing). Row splits take this rank's share of each of `parts` ranges of rows (q, k, v
 * of qkv; gate, up), or one block clipped at the real vocabulary for the padded embedding; column
 * splits a block of columns. */
static int ckpt_select(const param_table_t *tab, const param_entry_t *e, hid_t fs, hid_t ms, const char *where)
{
    if (!e) {
        H5_TRY(H5Sselect_none(fs), err, where);
        H5_TRY(H5Sselect_none(ms), err, where);
        return MP_OK;
    }
    hsize_t fstart[2] = {0, 0}, mstart[2] = {0, 0}, stride[2] = {1, 1}, count[2] = {1, 1};
    hsize_t block[2] = {(hsize_t)e->shape[0], e->ndim == 2 ? (hsize_t)e->shape[1] : 1}, mstride[2] = {1, 1};
    if (e->split == SPLIT_ROWS && e->parts > 1) { /* each range's share, one block each (ranges may differ: q, k, v) */
        for (int p = 0; p < e->parts; p++) {
            size_t g0, gn, l0, ln;
            param_part(tab, e, p, &g0, &gn, &l0, &ln);
            fstart[0] = (hsize_t)(g0 + (size_t)tab->tp_rank * ln), mstart[0] = (hsize_t)l0, block[0] = (hsize_t)ln;
            const H5S_seloper_t op = p ? H5S_SELECT_OR : H5S_SELECT_SET;
            H5_TRY(H5Sselect_hyperslab(fs, op, fstart, stride, count, block), err, where);
            H5_TRY(H5Sselect_hyperslab(ms, op, mstart, mstride, count, block), err, where);
        }
        return MP_OK;
    }
    if (e->split == SPLIT_ROWS) { /* clipped at the real vocabulary for the padded embedding */
        const hsize_t lpart = (hsize_t)e->shape[0], r0 = (hsize_t)tab->tp_rank * lpart;
        const hsize_t valid = r0 >= (hsize_t)e->gshape[0] ? 0 : (hsize_t)e->gshape[0] - r0 < lpart ? (hsize_t)e->gshape[0] - r0 : lpart;
        fstart[0] = r0, block[0] = valid;
        if (valid == 0) return ckpt_select(tab, NULL, fs, ms, where);
    } else if (e->split == SPLIT_COLS) {
        fstart[1] = (hsize_t)tab->tp_rank * (hsize_t)e->shape[1];
    }
    H5_TRY(H5Sselect_hyperslab(fs, H5S_SELECT_SET, fstart, stride, count, block), err, where);
    H5_TRY(H5Sselect_hyperslab(ms, H5S_SELECT_SET, mstart, mstride, count, block), err, where);
    return MP_OK;
err:
    return MP_ERR;
}

/* One process's file (pt->comm MPI_COMM_SELF: a process that never initialised MPI, as serve,
 * generate and export (commands.h), debug-grads, or a survivor's snapshot written after a peer died,
 * when MPI may be failing) goes through HDF5's default (sec2) driver: no MPI function is called,
 * and the rank is 0 of 1. The files are the same format either way. */
static int ckpt_solo(const ckpt_part_t *pt) { return !mpi_check_up() || pt->comm == MPI_COMM_SELF; }

static int ckpt_comm_rank(const ckpt_part_t *pt)
{
    int rank = 0;
    if (!ckpt_solo(pt)) MPI_CHECK(MPI_Comm_rank(pt->comm, &rank));
    return rank;
}

static int ckpt_comm_size(const ckpt_part_t *pt)
{
    int n = 1;
    if (!ckpt_solo(pt)) MPI_CHECK(MPI_Comm_size(pt->comm, &n));
    return n;
}

/* Opens (ub = 0) or creates fname over the part's communicator with the MPI-IO driver (without MPI:
 * the default driver, ckpt_solo); a created file gets a user block of ub bytes for the file checksum
 * (filesum.h). */
static hid_t ckpt_open(const char *fname, const ckpt_part_t *pt, uint64_t ub)
{
    hid_t fapl = -1, fcpl = -1, f = -1;
    H5_TRY(fapl = H5Pcreate(H5P_FILE_ACCESS), out, fname);
    if (!ckpt_solo(pt)) H5_TRY(H5Pset_fapl_mpio(fapl, pt->comm, MPI_INFO_NULL), err_close_fapl, fname);
    if (ub) {
        H5_TRY(fcpl = H5Pcreate(H5P_FILE_CREATE), err_close_fapl, fname);
        H5_TRY(H5Pset_userblock(fcpl, (hsize_t)ub), err_close_fcpl, fname);
        H5_TRY(f = H5Fcreate(fname, H5F_ACC_EXCL, fcpl, fapl), err_close_fcpl, fname);
    } else {
        H5_TRY(f = H5Fopen(fname, H5F_ACC_RDONLY, fapl), err_close_fapl, fname);
    }
err_close_fcpl:
    if (fcpl >= 0) H5Pclose(fcpl);
err_close_fapl:
    H5Pclose(fapl);
out:
    return f;
}

/* In-place all-reduce over the part's communicator: through wait.h when the part has a wait
 * configuration (it yields the core and has a deadline, ARCHITECTURE.md §2), else blocking; without
 * MPI (one process) the identity. */
static void ckpt_allreduce(const ckpt_part_t *pt, void *buf, int n, MPI_Datatype type, MPI_Op op)
{
    if (ckpt_solo(pt)) return;
    if (pt->wait) wait_allreduce(pt->wait, buf, n, type, op, pt->comm, "a checkpoint all-reduce");
    else MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, n, type, op, pt->comm));
}

/* Every rank agrees: MP_ERR everywhere if rc failed anywhere (each failing rank said why). */
static int ckpt_agree(const ckpt_part_t *pt, int rc)
{
    int bad = rc != MP_OK;
    ckpt_allreduce(pt, &bad, 1, MPI_INT, MPI_MAX);
    return bad ? MP_ERR : MP_OK;
}

/* Moves every tensor of gtab in group gname: each rank its shard's hyperslab (collective
 * transfers: every rank takes part in every dataset, selecting nothing where it holds nothing).
 * Writing creates the datasets, stores checksums and puts each dataset's raw data extent in ext[i]
 * (for the file checksum); reading checks shapes, and sums[i] gets the rank's partial checksum of
 * dataset i (stored[i] the file's). */
static int ckpt_group_io(hid_t f, const char *gname, const param_table_t *gtab, const ckpt_part_t *pt, float *buf,
                         int writing, uint64_t *sums, uint64_t *stored, filesum_ext_t *ext, const char *fname)
{
    int rc = MP_ERR;
    hid_t lcpl = -1, gcpl = -1, g = -1, dxpl = -1, dcpl = -1;
    char where[CKPT_WHERE_MAX], have_s[64], want_s[64];
    float dummy = 0.0f;
    int moved = 1; /* moved: the last H5Dwrite/H5Dread returned success (or was not reached) */
    const int nranks = ckpt_comm_size(pt);
    H5_TRY(dxpl = H5Pcreate(H5P_DATASET_XFER), out, fname);
    if (!ckpt_solo(pt))
        H5_TRY(H5Pset_dxpl_mpio(dxpl, pt->independent ? H5FD_MPIO_INDEPENDENT : H5FD_MPIO_COLLECTIVE), err_close, fname);
    if (writing) {
        /* every dataset's checksum attribute holds the sum of its owners' partial sums: all of them
         * in one all-reduce up front, not one per dataset */
        for (int i = 0; i < gtab->count; i++) {
            const param_entry_t *e = param_table_find(pt->local, gtab->entries[i].name);
            sums[i] = ckpt_owns(pt, e) ? ckpt_checksum_shard(pt->local, e, buf + e->offset) : 0;
        }
        ckpt_allreduce(pt, sums, gtab->count, MPI_UINT64_T, MPI_SUM);
        H5_TRY(lcpl = H5Pcreate(H5P_LINK_CREATE), err_close, fname);
        H5_TRY(H5Pset_create_intermediate_group(lcpl, 1), err_close, fname);
        H5_TRY(gcpl = H5Pcreate(H5P_GROUP_CREATE), err_close, fname);
        H5_TRY(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), err_close, fname);
        H5_TRY(g = H5Gcreate2(f, gname, lcpl, gcpl, H5P_DEFAULT), err_close, fname);
        /* storage allocated at creation, as MPI-IO always does and the default driver (ckpt_solo)
         * does not: the file checksum needs every dataset's extent before its data is written */
        H5_TRY(dcpl = H5Pcreate(H5P_DATASET_CREATE), err_close, fname);
        H5_TRY(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), err_close, fname);
    } else {
        int have = ckpt_path_exists(f, gname, fname);
        if (have == 0) MP_ERROR("checkpoint %s has no group /%s/", fname, gname);
        if (have != 1) goto err_close;
        H5_TRY(g = H5Gopen2(f, gname, H5P_DEFAULT), err_close, fname);
    }
    for (int i = 0; i < gtab->count; i++) {
        const param_entry_t *ge = &gtab->entries[i], *e = param_table_find(pt->local, ge->name);
        hsize_t dims[2] = {(hsize_t)ge->gshape[0], (hsize_t)ge->gshape[1]}, mdims[2] = {1, 1}, fdims[2] = {0, 0};
        hid_t d = -1, fs = -1, ms = -1;
        int ok = 0, ndim = 0;
        snprintf(where, sizeof where, "checkpoint %s (/%s/%s)", fname, gname, ge->name);
        if (e) mdims[0] = (hsize_t)e->shape[0], mdims[1] = e->ndim == 2 ? (hsize_t)e->shape[1] : 1;
        H5_TRY(ms = H5Screate_simple(e ? e->ndim : 1, mdims, NULL), next, where);
        if (writing) {
            H5_TRY(fs = H5Screate_simple(ge->ndim, dims, NULL), next, where);
            H5_TRY(d = H5Dcreate2(g, ge->name, H5T_IEEE_F32LE, fs, H5P_DEFAULT, dcpl, H5P_DEFAULT), next, where);
            /* contiguous and allocated at creation (dcpl): its bytes are known and never move */
            ext[i] = (filesum_ext_t){H5Dget_offset(d), H5Dget_storage_size(d)};
            if (ext[i].offset == HADDR_UNDEF || ext[i].length == 0) {
                MP_ERROR("%s: HDF5 gives no file extent for the dataset (the file checksum needs it)", where);
                goto next;
            }
        } else {
            int exists = ckpt_path_exists(g, ge->name, where);
            if (exists == 0) MP_ERROR("checkpoint %s has no dataset /%s/%s", fname, gname, ge->name);
            if (exists != 1) goto next;
            H5_TRY(d = H5Dopen2(g, ge->name, H5P_DEFAULT), next, where);
            if (ckpt_dset_shape(d, &ndim, fdims, where) != MP_OK) goto next;
            if (ndim != ge->ndim || fdims[0] != dims[0] || (ndim == 2 && fdims[1] != dims[1])) {
                ckpt_shape_str(ndim, fdims, have_s, sizeof have_s);
                ckpt_shape_str(ge->ndim, dims, want_s, sizeof want_s);
                MP_ERROR("checkpoint %s: /%s/%s has shape %s, the model needs %s", fname, gname, ge->name, have_s,
                         want_s);
                goto next;
            }
            H5_TRY(fs = H5Dget_space(d), next, where);
            if (ckpt_attr_read(d, "checksum", H5T_NATIVE_UINT64, &stored[i], where) != MP_OK) goto next;
        }
        /* a rank that holds a tensor but does not own it (another replica) still reads it */
        const param_entry_t *sel = writing ? (ckpt_owns(pt, e) ? e : NULL) : e;
        if (ckpt_select(pt->local, sel, fs, ms, where) != MP_OK) goto next;
        float *data = sel ? buf + sel->offset : &dummy;
        moved = 0;
        if (writing) H5_TRY(H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, dxpl, data), next, where);
        else H5_TRY(H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, dxpl, data), next, where);
        moved = ok = 1;
        if (writing) /* the attribute is written collectively: every rank has the total */
            ok = h5_attr_write(d, "checksum", H5T_STD_U64LE, H5T_NATIVE_UINT64, &sums[i], where) == MP_OK;
        else
            sums[i] = ckpt_owns(pt, e) ? ckpt_checksum_shard(pt->local, e, buf + e->offset) : 0;
    next:
        /* A collective transfer that failed here (a full disk, an I/O error) returns early from
         * HDF5's and ROMIO's collective calls while its peers are still inside them (seen: they
         * wait in MPI_File_set_view's all-reduce forever), and nothing can cancel those: end the
         * job now, naming the failure above, rather than at checkpoint.timeout. */
        if (!moved && !pt->independent && nranks > 1)
            MP_ABORT("%s: a collective %s failed on this rank (the error above); its peers may be left inside "
                     "HDF5's collective calls, which cannot be cancelled: aborting the job (the newest complete "
                     "checkpoint is kept)", where, writing ? "write" : "read");
        if (d >= 0) H5Dclose(d);
        if (fs >= 0) H5Sclose(fs);
        if (ms >= 0) H5Sclose(ms);
        /* any other failure (independent transfers, metadata) is left together: no rank enters the
         * next dataset's collective calls while another closes the file */
        if (ckpt_agree(pt, ok ? MP_OK : MP_ERR) != MP_OK) goto err_close;
    }
    rc = MP_OK;
err_close:
    if (g >= 0) H5Gclose(g);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (gcpl >= 0) H5Pclose(gcpl);
    if (lcpl >= 0) H5Pclose(lcpl);
    H5Pclose(dxpl);
out:
    return rc;
}

/* model.blocks, the block shape per layer; absent (files before it) reads as "" (uniform). */
static int ckpt_blocks_write(hid_t g, const model_cfg_t *c, const char *where)
{
    char text[CKPT_BLOCKS_MAX];
    param_blocks_text(c, text, sizeof text);
    return h5_attr_write_string(g, "blocks", text, where);
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
    int64_t step = st->step, adam_t = st->adam_t, cursor = st->data_cursor;
    int versions = st->weight_versions > 0 ? st->weight_versions : 1;
    const ckpt_family_t fam = ckpt_family_of(c);
    H5_TRY(g = H5Gcreate2(f, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), out, where);
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (h5_attr_write(g, ints[i].name, H5T_STD_I32LE, H5T_NATIVE_INT, &ints[i].value, where) != MP_OK)
            goto err_close_group;
    if (h5_attr_write(g, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &step, where) != MP_OK ||
        h5_attr_write(g, "adam_t", H5T_STD_I64LE, H5T_NATIVE_INT64, &adam_t, where) != MP_OK ||
        h5_attr_write(g, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &st->seed, where) != MP_OK ||
        h5_attr_write(g, "data_cursor", H5T_STD_I64LE, H5T_NATIVE_INT64, &cursor, where) != MP_OK ||
        h5_attr_write(g, "weight_versions", H5T_STD_I32LE, H5T_NATIVE_INT, &versions, where) != MP_OK ||
        h5_attr_write_string(g, "schedule", st->schedule[0] ? st->schedule : "1f1b", where) != MP_OK ||
        h5_attr_write_string(g, "version", CKPT_VERSION, where) != MP_OK ||
        h5_attr_write_string(g, "layout", st->layout, where) != MP_OK ||
        h5_attr_write_string(g, "deck", deck_text ? deck_text : "", where) != MP_OK ||
        ckpt_blocks_write(g, c, where) != MP_OK || ckpt_family_write(g, &fam, where) != MP_OK)
        goto err_close_group;
    if (st->run_id[0] && h5_attr_write_string(g, "run_id", st->run_id, where) != MP_OK) goto err_close_group;
    if (st->tok.name[0] && h5_attr_write_string(g, "tokenizer", st->tok.name, where) != MP_OK) goto err_close_group;
    if (st->tok.sha256[0] && h5_attr_write_string(g, "tokenizer_sha256", st->tok.sha256, where) != MP_OK)
        goto err_close_group;
    rc = MP_OK;
err_close_group:
    H5Gclose(g);
out:
    return rc;
}

/* A write that failed between the collective create and the close (every rank knows: it was agreed)
 * cannot be closed safely over several ranks: HDF5's close after a failed write takes different
 * collective paths on different ranks (seen with a full disk: one rank in MPI_File_set_size's
 * all-reduce, the other in the metadata cache's barrier, forever). So the job ends here, rank 0
 * saying why, the others waiting for its abort; the newest complete checkpoint is untouched (this
 * file is still a temporary). One process alone closes and returns the error. */
static void ckpt_abort_unclosable(const ckpt_part_t *pt, const char *fname)
{
    if (ckpt_comm_size(pt) == 1) return;
    if (ckpt_comm_rank(pt) == 0)
        MP_ABORT("writing %s failed (the error above, on the rank that hit it); a parallel HDF5 file cannot be "
                 "closed safely after that: aborting the job (the newest complete checkpoint is kept)", fname);
    for (int i = 0; i < 600; i++) { /* rank 0 ends the job within moments */
        const struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    MP_ABORT("writing %s failed and rank 0 did not end the job within a minute: aborting", fname);
}

/* Creates fname over the part's communicator with a user block of ub bytes, writes everything and
 * closes it (collective). ext (room for every dataset) gets the raw data extents, *n_ext_p their count. */
static int ckpt_write_file(const char *fname, const param_table_t *gtab, const ckpt_part_t *pt,
                           const ckpt_state_t *st, const char *deck_text, uint64_t ub, filesum_ext_t *ext,
                           size_t *n_ext_p)
{
    hid_t f = ckpt_open(fname, pt, ub);
    if (f < 0) return MP_ERR;
    uint64_t *sums = MP_CALLOC((size_t)gtab->count, sizeof *sums), *stored = MP_CALLOC((size_t)gtab->count, 8);
    int rc = sums && stored ? MP_OK : MP_ERR;
    *n_ext_p = 0;
    for (int k = 0; k < CKPT_NGROUPS && rc == MP_OK; k++) {
        if (pt->bufs[k]) {
            rc = ckpt_group_io(f, ckpt_groups[k], gtab, pt, pt->bufs[k], 1, sums, stored, ext + *n_ext_p, fname);
            *n_ext_p += (size_t)gtab->count;
        }
        if (pt->fail_midway) { /* debug.fail_at RANK:STEP:write|stall: a crash or a stall, the file half-written */
            const int stop = pt->fail_midway == CKPT_FAIL_STOP;
            fprintf(stderr, "mindpipe: debug.fail_at: %s in the middle of writing %s\n", stop ? "stopped (SIGSTOP)" : "killed",
                    fname);
            fflush(stderr);
            if (stop) mp_stop_for_good();
            raise(SIGKILL);
        }
    }
    rc = ckpt_agree(pt, rc);
    if (rc == MP_OK) rc = ckpt_agree(pt, ckpt_state_write(f, &gtab->cfg, st, deck_text, fname));
    if (rc == MP_OK) rc = ckpt_agree(pt, H5Fflush(f, H5F_SCOPE_GLOBAL) < 0 ? MP_FAIL("cannot flush %s", fname) : MP_OK);
    if (rc != MP_OK) ckpt_abort_unclosable(pt, fname);
    if (H5Fclose(f) < 0 && rc == MP_OK) rc = MP_FAIL("cannot close %s", fname);
    free(sums);
    free(stored);
    return rc;
}

int ckpt_write_parallel(const char *path, const param_table_t *gtab, const ckpt_part_t *pt, const ckpt_state_t *st,
                        const char *deck_text)
{
    if (!pt->bufs[CKPT_M] != !pt->bufs[CKPT_V])
        return MP_FAIL("checkpoint %s: m and v are written together (one of them is NULL)", path);
    const int rank = ckpt_comm_rank(pt);
    char tmp[4200];
    if (publish_tmp_name(path, tmp, sizeof tmp) != MP_OK) return MP_ERR; /* the same path on every rank */
    int groups = 0; /* the user block holds one extent per dataset */
    for (int k = 0; k < CKPT_NGROUPS; k++) groups += pt->bufs[k] != NULL;
    const size_t n_max = (size_t)groups * (size_t)gtab->count;
    const uint64_t ub = filesum_userblock_size(n_max);
    if (!ub) return MP_FAIL("checkpoint %s: %zu datasets do not fit the file checksum header", path, n_max);
    filesum_ext_t *ext = MP_CALLOC(n_max ? n_max : 1, sizeof *ext);
    size_t n_ext = 0;
    /* rank 0 clears the name, and every rank knows it did before the collective create */
    if (ckpt_agree(pt, !ext ? MP_ERR : rank == 0 ? publish_tmp_prepare(tmp) : MP_OK) != MP_OK) {
        free(ext);
        return MP_ERR;
    }
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = ckpt_agree(pt, ckpt_write_file(tmp, gtab, pt, st, deck_text, ub, ext, &n_ext));
    h5_quiet_end(&q);
    /* one rank seals the complete file every rank wrote its part of (every rank has closed it), and
     * publishes it: the seal is inside what publish_commit fsyncs before the rename */
    if (rank == 0) {
        if (rc == MP_OK) rc = filesum_seal(tmp, ub, ext, n_ext);
        if (rc == MP_OK) rc = publish_commit(tmp, path);
        else publish_discard(tmp);
    }
    free(ext);
    return ckpt_agree(pt, rc);
}

int ckpt_write(const char *path, const param_table_t *tab, const float *params, const float *m, const float *v,
               const ckpt_state_t *st, const char *deck_text)
{
    ckpt_part_t pt = {.comm = MPI_COMM_SELF, .local = tab, .owner = 1,
                      .bufs = {(float *)params, NULL, (float *)m, (float *)v}};
    return ckpt_write_parallel(path, tab, &pt, st, deck_text);
}

/* ---- what every /state satisfies -------------------------------------------------------------- */

/* The keys a /state deck must set (deck_write sets them all): those the checks below and resume's
 * guard compare. */
static const char *const ckpt_deck_required[] = {"model.layers", "model.dim", "model.heads", "model.seq_len",
                                                 "model.vocab", "model.mlp_ratio", "train.seed", "train.batch",
                                                 "data.path", NULL};

/* The model's family: one a checkpoint can hold and, with a deck d, the one d says. */
static int ckpt_facts_family(const ckpt_facts_t *s, const deck_t *d, char *why, size_t n)
{
    if (ckpt_family_valid(&s->fam, s->heads, why, n) != MP_OK) return MP_ERR;
    if (!d) return MP_OK;
    const model_cfg_t cfg = deck_model_cfg(d, NULL);
    const ckpt_family_t says = ckpt_family_of(&cfg);
    char diff[300];
    if (ckpt_family_differs(&s->fam, &says, "its deck", diff, sizeof diff))
        return snprintf(why, n, "/state has %s", diff), MP_ERR;
    return MP_OK;
}

/* The model's shape: each attribute within its deck key's range and, with a deck d, what d says;
 * then its family likewise. */
static int ckpt_facts_shape(const ckpt_facts_t *s, const deck_t *d, char *why, size_t n)
{
    static const char *const names[] = {"layers", "dim", "heads", "seq_len", "vocab", "mlp_ratio"};
    const int have[] = {s->layers, s->dim, s->heads, s->seq_len, s->vocab, s->mlp_ratio};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        double lo = 0, hi = 0;
        if (deck_key_range("model", names[i], &lo, &hi) != MP_OK || have[i] < lo || have[i] > hi)
            return snprintf(why, n, "/state has %s %d, outside model.%s's range %g to %g", names[i], have[i],
                            names[i], lo, hi), MP_ERR;
        if (!d) continue;
        const int says[] = {d->model.layers, d->model.dim, d->model.heads, d->model.seq_len, d->model.vocab,
                            d->model.mlp_ratio};
        if (have[i] != says[i])
            return snprintf(why, n, "/state has %s %d, but its deck says model.%s = %d", names[i], have[i], names[i],
                            says[i]), MP_ERR;
    }
    return ckpt_facts_family(s, d, why, n);
}

/* The counters of a training checkpoint (with /optim) against its deck: the data cursor is step ×
 * train.batch (format 2); AdamW steps once per step, a supernet's shared parameters once per window. */
static int ckpt_facts_counters(const ckpt_facts_t *s, const deck_t *d, char *why, size_t n)
{
    if (s->format >= 2 && s->data_cursor != s->step * d->train.batch)
        return snprintf(why, n, "/state has data_cursor %lld, but step %lld × its deck's train.batch %d is %lld",
                        s->data_cursor, s->step, d->train.batch, s->step * d->train.batch), MP_ERR;
    if (!d->supernet.enabled && s->adam_t != s->step)
        return snprintf(why, n, "/state has step %lld but AdamW's counter adam_t %lld: a model's optimizer steps once "
                        "per step, so they are equal", s->step, s->adam_t), MP_ERR;
    /* a supernet's counter counts windows; supernet.window may change between resumes, so only
     * 1 <= adam_t <= step is fixed once a window has ended */
    if (d->supernet.enabled && s->step > 0 && s->adam_t < 1)
        return snprintf(why, n, "/state has step %lld but adam_t %lld: a supernet's shared parameters step once per "
                        "window, and a checkpoint ends a window", s->step, s->adam_t), MP_ERR;
    return MP_OK;
}

int ckpt_state_check(const ckpt_facts_t *s, char *why_p, size_t n)
{
    double lo = 0, hi = 0;
    if (deck_key_range("train", "steps", &lo, &hi) != MP_OK) hi = 0;
    /* nothing counts below zero, AdamW steps at most once per step (a supernet once per window) */
    if (s->step < 0 || s->adam_t < 0 || s->adam_t > s->step || s->data_cursor < 0)
        return snprintf(why_p, n, "/state is impossible (step %lld, adam_t %lld, data_cursor %lld: none may be "
                        "negative and adam_t is at most step)", s->step, s->adam_t, s->data_cursor), MP_ERR;
    if ((double)s->step > hi)
        return snprintf(why_p, n, "/state is impossible (step %lld: train.steps is at most %.0f)", s->step, hi),
               MP_ERR;
    if (ckpt_facts_shape(s, NULL, why_p, n) != MP_OK) return MP_ERR;
    deck_t *d = MP_MALLOC(sizeof *d);
    char why[900];
    int rc = MP_ERR;
    if (!d) return snprintf(why_p, n, "out of memory reading /state's deck"), MP_ERR;
    if (deck_parse_text(d, s->deck ? s->deck : "", ckpt_deck_required, why, sizeof why) != MP_OK)
        snprintf(why_p, n, "/state has no readable deck (%s)", why);
    else if (d->train.seed != s->seed)
        snprintf(why_p, n, "/state has seed %" PRIu64 ", but its deck says train.seed = %" PRIu64, s->seed,
                 d->train.seed);
    else if (ckpt_facts_shape(s, d, why_p, n) == MP_OK &&
             (!s->has_optim || ckpt_facts_counters(s, d, why_p, n) == MP_OK))
        rc = MP_OK;
    free(d);
    return rc;
}

/* ---- reading the state ------------------------------------------------------------------------ */

typedef struct {
    ckpt_state_t st; /* st.deck malloc'd */
    char *version;   /* malloc'd */
    char *blocks;    /* malloc'd: model.blocks as written ("" uniform); cfg.shape stays NULL */
    model_cfg_t cfg;
    int format;
} ckpt_head_t;

static void ckpt_head_free(ckpt_head_t *h)
{
    free(h->st.deck);
    free(h->version);
    free(h->blocks);
    h->st.deck = h->version = h->blocks = NULL;
}

/* /state's tokenizer attributes (g open; where names it): absent (older files) is byte. MP_OK, or
 * MP_ERR (reported, naming where and the attribute). */
static int ckpt_tok_read(hid_t g, const char *where, tok_ident_t *tok_p)
{
    char name[16] = "byte", sha[TOK_SHA256_HEX + 2] = "", at[CKPT_WHERE_MAX + 40], why[200];
    snprintf(at, sizeof at, "%s attribute tokenizer", where);
    if (h5_attr_read_text(g, "tokenizer", name, sizeof name, at) == MP_ERR) return MP_ERR;
    snprintf(at, sizeof at, "%s attribute tokenizer_sha256", where);
    const int has_sha = h5_attr_read_text(g, "tokenizer_sha256", sha, sizeof sha, at);
    if (has_sha == MP_ERR) return MP_ERR;
    if (tok_ident_set(tok_p, name, has_sha ? sha : NULL, why, sizeof why) != MP_OK)
        return MP_FAIL("%s: %s: a corrupt file", where, why);
    return MP_OK;
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
    if (h.format < 1 || h.format > CKPT_FORMAT) { /* format 1 lacks only the 2bw and cursor attributes */
        MP_ERROR("%s has checkpoint format %d; this build reads formats 1 to %d", path, h.format, CKPT_FORMAT);
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
    htri_t has_blocks;
    H5_TRY(has_blocks = H5Aexists(g, "blocks"), err_free_head, where);
    if (has_blocks > 0 ? ckpt_attr_read_string(g, "blocks", &h.blocks, where) != MP_OK : !(h.blocks = strdup("")))
        goto err_free_head;
    ckpt_family_t fam; /* absent in files before it: gpt2 (ckpt_family.h) */
    char fwhy[400];
    if (ckpt_family_read(g, h.cfg.heads, &fam, fwhy, sizeof fwhy) != MP_OK) {
        MP_ERROR("%s: %s", path, fwhy);
        goto err_free_head;
    }
    ckpt_family_apply(&fam, &h.cfg);
    int64_t cursor = 0;
    char *sched = NULL;
    h.st.weight_versions = 1;
    if (h.format >= 2 && (ckpt_attr_read(g, "data_cursor", H5T_NATIVE_INT64, &cursor, where) != MP_OK ||
                          ckpt_attr_read(g, "weight_versions", H5T_NATIVE_INT, &h.st.weight_versions, where) != MP_OK ||
                          ckpt_attr_read_string(g, "schedule", &sched, where) != MP_OK))
        goto err_free_head;
    h.st.data_cursor = (long)cursor;
    snprintf(h.st.schedule, sizeof h.st.schedule, "%s", sched ? sched : "");
    free(sched);
    htri_t has_id; /* absent in files written before run ids: "" (whichever run resumes them owns them) */
    char *run_id = NULL;
    H5_TRY(has_id = H5Aexists(g, "run_id"), err_free_head, where);
    if (has_id > 0 && ckpt_attr_read_string(g, "run_id", &run_id, where) != MP_OK) goto err_free_head;
    snprintf(h.st.run_id, sizeof h.st.run_id, "%s", run_id ? run_id : "");
    free(run_id);
    if (ckpt_tok_read(g, where, &h.st.tok) != MP_OK) goto err_free_head;
    int has_optim = ckpt_path_exists(f, "optim/m", path);
    if (has_optim == 1) has_optim = ckpt_path_exists(f, "optim/v", path);
    if (has_optim == MP_ERR) goto err_free_head;
    const ckpt_facts_t facts = {.format = h.format, .layers = h.cfg.layers, .dim = h.cfg.dim, .heads = h.cfg.heads,
                                .seq_len = h.cfg.seq_len, .vocab = h.cfg.vocab, .mlp_ratio = h.cfg.mlp_ratio,
                                .fam = fam, .step = step, .adam_t = adam_t, .data_cursor = cursor,
                                .seed = h.st.seed, .deck = h.st.deck, .has_optim = has_optim};
    char why[1200];
    if (ckpt_state_check(&facts, why, sizeof why) != MP_OK) {
        MP_ERROR("%s: %s: a corrupt file", path, why);
        goto err_free_head;
    }
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
    (void)info; /* clang's -Wextra, without the project's -Wno-unused-parameter (the fuzz build) */
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

/* Verifies /model, /model_prev, /optim/m and /optim/v (all but the model optional). MP_OK iff all verify;
 * vf->reason holds the first failure. */
static int ckpt_verify_groups(hid_t f, ckpt_verify_t *vf)
{
    for (int k = 0; k < CKPT_NGROUPS && (vf->out || !vf->bad); k++) {
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
static int ckpt_verify_file(const char *path, char *reason, size_t n)
{
    ckpt_verify_t vf = {.path = path};
    ckpt_head_t h;
    hid_t f = -1;
    int rc = MP_ERR;
    if (filesum_check(path, reason, n) != FILESUM_OK) return MP_ERR; /* before HDF5 sees it */
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

static int ckpt_cfg_check(const char *path, const model_cfg_t *have, const char *have_blocks, const model_cfg_t *want)
{
    /* the family first: another family's shape keys differ as a consequence (llama's mlp_ratio is 1) */
    const ckpt_family_t hf = ckpt_family_of(have), wf = ckpt_family_of(want);
    char diff[300];
    if (ckpt_family_differs(&hf, &wf, "the deck", diff, sizeof diff)) return MP_FAIL("checkpoint %s has %s", path, diff);
    char want_blocks[CKPT_BLOCKS_MAX];
    param_blocks_text(want, want_blocks, sizeof want_blocks);
    if (strcmp(have_blocks, want_blocks))
        return MP_FAIL("checkpoint %s has model.blocks='%s', the deck says '%s'", path, have_blocks, want_blocks);
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

/* Reads the groups whose bufs are set into tmp (shard layout), verifying checksums over the
 * communicator. Collective. */
static int ckpt_read_file(const char *path, const param_table_t *gtab, const ckpt_part_t *pt, float *tmp[],
                          ckpt_head_t *h)
{
    hid_t f = ckpt_open(path, pt, 0);
    if (f < 0) return MP_ERR;
    const int n = gtab->count;
    uint64_t *sums = MP_CALLOC((size_t)n, sizeof *sums), *stored = MP_CALLOC((size_t)n, sizeof *stored);
    int rc = sums && stored ? ckpt_head_read(f, path, h) : MP_ERR, have_head = rc == MP_OK;
    if (rc == MP_OK) rc = ckpt_cfg_check(path, &h->cfg, h->blocks, &gtab->cfg);
    /* Every step that can fail on one rank alone is agreed on before the next all-reduce: a rank
     * that stopped early would leave the others waiting in it. */
    rc = ckpt_agree(pt, rc);
    for (int k = 0; k < CKPT_NGROUPS && rc == MP_OK; k++) {
        if (!pt->bufs[k]) continue;
        if (k == CKPT_MODEL_PREV && ckpt_path_exists(f, ckpt_groups[k], path) == 0) {
            rc = MP_FAIL("checkpoint %s has no /model_prev (it was not written by a 2bw run): a 2bw run resumes "
                         "only from a 2bw checkpoint, which holds both weight versions", path);
            break;
        }
        rc = ckpt_agree(pt, ckpt_group_io(f, ckpt_groups[k], gtab, pt, tmp[k], 0, sums, stored, NULL, path));
        if (rc != MP_OK) break;
        ckpt_allreduce(pt, sums, n, MPI_UINT64_T, MPI_SUM);
        for (int i = 0; i < n && rc == MP_OK; i++)
            if (sums[i] != stored[i])
                rc = MP_FAIL("checkpoint %s: /%s/%s checksum mismatch (stored %016llx, computed %016llx): the file is "
                             "corrupt", path, ckpt_groups[k], gtab->entries[i].name, (unsigned long long)stored[i],
                             (unsigned long long)sums[i]);
    }
    if (H5Fclose(f) < 0 && rc == MP_OK) rc = MP_FAIL("cannot close %s", path);
    if (rc != MP_OK && have_head) ckpt_head_free(h);
    free(sums);
    free(stored);
    return rc;
}

/* The file checksum of path (filesum.h), checked before libhdf5 sees the file. MP_OK, or MP_ERR
 * with a message naming the file. */
static int ckpt_filesum_ok(const char *path)
{
    char why[600];
    return filesum_check(path, why, sizeof why) == FILESUM_OK ? MP_OK : MP_FAIL("checkpoint %s: %s", path, why);
}

int ckpt_read_parallel(const char *path, const param_table_t *gtab, const ckpt_part_t *pt, ckpt_state_t *st_p)
{
    const int rank = ckpt_comm_rank(pt);
    int rc = access(path, R_OK) == 0 ? MP_OK : MP_FAIL("checkpoint %s: %s", path, strerror(errno));
    /* rank 0 alone checks the file checksum (it reads the metadata, not the tensors, whose own
     * checksums the shard reads verify); the agreement tells every rank its verdict */
    if (rank == 0 && rc == MP_OK) rc = ckpt_filesum_ok(path);
    if (ckpt_agree(pt, rc) != MP_OK) return MP_ERR;
    float *tmp[CKPT_NGROUPS] = {NULL};
    const size_t bytes = pt->local->total * sizeof(float);
    for (int k = 0; k < CKPT_NGROUPS; k++)
        if (pt->bufs[k] && !(tmp[k] = mem_zalloc(bytes))) rc = MP_FAIL("out of memory reading %s", path);
    ckpt_head_t h;
    h5_quiet_t q;
    h5_quiet_begin(&q);
    if (ckpt_agree(pt, rc) == MP_OK) rc = ckpt_agree(pt, ckpt_read_file(path, gtab, pt, tmp, &h));
    else rc = MP_ERR;
    h5_quiet_end(&q);
    if (rc == MP_OK) { /* everything verified on every rank: only now do the caller's buffers change */
        for (int k = 0; k < CKPT_NGROUPS; k++)
            if (pt->bufs[k]) memcpy(pt->bufs[k], tmp[k], bytes);
        free(h.version), free(h.blocks);
        *st_p = h.st;
    }
    for (int k = 0; k < CKPT_NGROUPS; k++) free(tmp[k]);
    return rc;
}

int ckpt_read(const char *path, const param_table_t *tab, float *params, float *m, float *v, ckpt_state_t *st_p)
{
    ckpt_part_t pt = {.comm = MPI_COMM_SELF, .local = tab, .owner = 1, .bufs = {params, NULL, m, v}};
    return ckpt_read_parallel(path, tab, &pt, st_p);
}

/* ---- inspect ---------------------------------------------------------------------------------- */

void (*ckpt_inspect_child_hook)(void);

/* inspect's child: its output could not be written (a closed pipe with SIGPIPE ignored, a write
 * error); not a verdict on the file. */
#define CKPT_INSPECT_OUTPUT_CUT 3

/* What inspect prints; sum says how the file checksum went. */
static int ckpt_inspect_file(const char *path, FILE *out, const char *sum)
{
    ckpt_head_t h;
    ckpt_verify_t vf = {.path = path, .out = out};
    hid_t f = -1;
    H5_TRY(f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), err, path);
    if (ckpt_head_read(f, path, &h) != MP_OK) goto err_close_file;
    const model_cfg_t *c = &h.cfg;
    fprintf(out, "checkpoint %s\n", path);
    fprintf(out, "file checksum %s\n", sum);
    fprintf(out, "step %ld  adam_t %ld  seed %llu\n", h.st.step, h.st.adam_t, (unsigned long long)h.st.seed);
    fprintf(out, "layout %s\nversion %s (format %d)\n", h.st.layout, h.version, h.format);
    const ckpt_family_t fam = ckpt_family_of(c);
    char family[200];
    ckpt_family_text(&fam, family, sizeof family);
    fprintf(out, "model %s layers=%d dim=%d heads=%d seq_len=%d vocab=%d mlp_ratio=%d%s%s\n", family, c->layers, c->dim,
            c->heads, c->seq_len, c->vocab, c->mlp_ratio, h.blocks[0] ? " blocks=" : "", h.blocks);
    char tok[160];
    fprintf(out, "tokenizer %s\n", tok_ident_text(&h.st.tok, tok, sizeof tok));
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

/* inspect in the child process: the file checksum first; a damaged file is reported and never
 * reaches HDF5, a file without the checksum is read anyway (the parent survives a crash). */
static int ckpt_inspect_child(const char *path, FILE *out)
{
    char why[600], sum[700];
    const int fs = filesum_check(path, why, sizeof why);
    if (fs == MP_ERR) return MP_FAIL("checkpoint %s: %s", path, why);
    if (fs == FILESUM_NONE) MP_WARN("checkpoint %s: %s; reading it anyway", path, why);
    snprintf(sum, sizeof sum, "%s", fs == FILESUM_OK ? "ok" : "NONE (not a MindPipe checkpoint of this version)");
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = ckpt_inspect_file(path, out, sum);
    h5_quiet_end(&q);
    if (rc == MP_OK && fs == FILESUM_NONE)
        rc = MP_FAIL("checkpoint %s: its datasets verify, but it has no file checksum: MindPipe's readers refuse it",
                     path);
    return rc;
}

static const char *ckpt_signal_name(int sig)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {{SIGSEGV, "SIGSEGV"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"},
                 {SIGILL, "SIGILL"},   {SIGKILL, "SIGKILL"}, {SIGTRAP, "SIGTRAP"}, {SIGSYS, "SIGSYS"},
                 {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig) return names[i].name;
    return "another signal";
}

/* The parsing runs in a child process: libhdf5 can crash on a damaged file (one without our file
 * checksum gets that far), and a crash there becomes our message. The child never calls MPI and
 * leaves by _exit (no atexit handlers, no MPI or HDF5 teardown); its output goes to the same
 * descriptors, flushed before the fork and before it exits, so it arrives in order. */
int ckpt_inspect(const char *path, FILE *out) { return ckpt_inspect_within(path, out, 0.0); }

int ckpt_inspect_within(const char *path, FILE *out, double timeout_s)
{
    if (access(path, R_OK) != 0) return MP_FAIL("checkpoint %s: %s", path, strerror(errno));
    struct stat fst;
    if (timeout_s <= 0) timeout_s = 300.0 + (stat(path, &fst) == 0 ? (double)fst.st_size / (20 << 20) : 0.0);
    fflush(out), fflush(stdout), fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) return MP_FAIL("inspect %s: cannot fork: %s", path, strerror(errno));
    if (pid == 0) {
        /* libhdf5 can also loop on a damaged file: the child's deadline */
        alarm(timeout_s < 1.0 ? 1u : timeout_s > 1e6 ? 1000000u : (unsigned)timeout_s);
        if (ckpt_inspect_child_hook) ckpt_inspect_child_hook();
        const int rc = ckpt_inspect_child(path, out);
        const int cut = fflush(out) != 0 || ferror(out); /* with SIGPIPE ignored: EPIPE, or a write error */
        fflush(stdout), fflush(stderr);
        _exit(cut ? CKPT_INSPECT_OUTPUT_CUT : rc == MP_OK ? 0 : 1);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return MP_FAIL("inspect %s: waitpid: %s", path, strerror(errno));
    /* a reader that went away (`inspect F | head -1`) is no fault of the file: SIGPIPE, or EPIPE where
     * SIGPIPE is ignored, is said as what it is, never as a crash of libhdf5 */
    if ((WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE) ||
        (WIFEXITED(status) && WEXITSTATUS(status) == CKPT_INSPECT_OUTPUT_CUT))
        return MP_FAIL("inspect %s: output closed before the listing ended (nothing is said about the file)", path);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        return MP_FAIL("%s: corrupt file: the HDF5 library did not finish reading it within %.0f s (stopped)", path,
                       timeout_s);
    if (WIFSIGNALED(status))
        return MP_FAIL("%s: corrupt file: the HDF5 library crashed reading it (signal %d: %s)", path, WTERMSIG(status),
                       ckpt_signal_name(WTERMSIG(status)));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? MP_OK : MP_ERR;
}

int ckpt_reseal(const char *path) { return filesum_reseal(path); }

/* ---- verification without reading ------------------------------------------------------------- */

int ckpt_verify(const char *path, char *reason_p, size_t n)
{
    h5_quiet_t q;
    h5_quiet_begin(&q);
    int rc = ckpt_verify_file(path, reason_p, n);
    h5_quiet_end(&q);
    return rc;
}
