#include "actdump.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "h5util.h"
#include "params.h"
#include "publish.h"

int actdump_init(actdump_t *d, long step, int capture, int L, int B, int T, int C)
{
    memset(d, 0, sizeof *d);
    d->step = step;
    if (step < 0) return MP_OK;
    d->capture = capture;
    d->L = L, d->B = B, d->T = T, d->C = C;
    d->buf = MP_CALLOC((size_t)(L + 2) * B * T * C, sizeof(float));
    d->tokens = MP_CALLOC((size_t)B * T, sizeof(int));
    d->have = MP_CALLOC((size_t)L + 3, 1);
    return d->buf && d->tokens && d->have ? MP_OK : MP_ERR;
}

void actdump_free(actdump_t *d)
{
    free(d->buf);
    free(d->tokens);
    free(d->have);
    memset(d, 0, sizeof *d);
    d->step = -1;
}

static void keep(actdump_t *d, const model_t *m, int slot, const float *x)
{
    const size_t n = (size_t)d->B * d->T * d->C;
    be_to_host(m->be, d->buf + (size_t)slot * n, x, n * sizeof(float));
    d->have[slot] = 1;
}

void actdump_capture(actdump_t *d, const model_t *m, const model_part_t *pt, const acts_t *a, long t, int mb)
{
    if (d->step < 0 || !d->capture || t != d->step || mb != 0) return;
    if (pt->embed) {
        keep(d, m, 0, a->encoded);
        memcpy(d->tokens, a->inputs, (size_t)d->B * d->T * sizeof(int));
        d->have[d->L + 2] = 1;
    }
    for (int i = 0; i < pt->n; i++) keep(d, m, 1 + param_block_layer(&m->tab, pt->b0 + i), a->h[i].res3);
    if (pt->final) keep(d, m, d->L + 1, a->lnf);
}

/* Creates every dataset on every rank (HDF5's metadata is collective) and writes the ones this
 * rank holds with independent transfers: each dataset has exactly one writer. */
static int actdump_file(const actdump_t *d, MPI_Comm comm, const char *fname)
{
    int rc = MP_ERR;
    hid_t fapl = -1, f = -1;
    H5_TRY(fapl = H5Pcreate(H5P_FILE_ACCESS), out, fname);
    H5_TRY(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL), out, fname);
    H5_TRY(f = H5Fcreate(fname, H5F_ACC_EXCL, H5P_DEFAULT, fapl), out, fname);
    const size_t n = (size_t)d->B * d->T * d->C;
    for (int s = 0; s < d->L + 3; s++) {
        char name[32];
        const int tok = s == d->L + 2;
        if (s == 0) snprintf(name, sizeof name, "embed");
        else if (s <= d->L) snprintf(name, sizeof name, "h.%d", s - 1);
        else snprintf(name, sizeof name, tok ? "tokens" : "lnf");
        hsize_t dims[3] = {(hsize_t)d->B, (hsize_t)d->T, (hsize_t)d->C};
        hid_t sp = -1, ds = -1;
        int ok = 0;
        H5_TRY(sp = H5Screate_simple(tok ? 2 : 3, dims, NULL), next, fname);
        H5_TRY(ds = H5Dcreate2(f, name, tok ? H5T_STD_I32LE : H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT), next, fname);
        if (d->have[s]) {
            if (tok) H5_TRY(H5Dwrite(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, d->tokens), next, fname);
            else H5_TRY(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, d->buf + (size_t)s * n), next,
                        fname);
        }
        ok = 1;
    next:
        if (ds >= 0) H5Dclose(ds);
        if (sp >= 0) H5Sclose(sp);
        if (!ok) goto out;
    }
    rc = MP_OK;
out:
    if (f >= 0 && H5Fclose(f) < 0 && rc == MP_OK) rc = MP_FAIL("cannot close %s", fname);
    if (fapl >= 0) H5Pclose(fapl);
    return rc;
}

int actdump_write(actdump_t *d, MPI_Comm comm, const char *dir, const wait_cfg_t *w)
{
    int rank, bad;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    /* every slot must have been captured by some rank, or the file would hold zeros */
    unsigned char *all = MP_CALLOC((size_t)d->L + 3, 1);
    if (!all) MP_ABORT("out of memory");
    memcpy(all, d->have, (size_t)d->L + 3);
    wait_allreduce(w, all, d->L + 3, MPI_UNSIGNED_CHAR, MPI_MAX, comm, "the activation dump's inventory");
    int missing = 0;
    for (int s = 0; s < d->L + 3; s++) missing += !all[s];
    free(all);
    if (missing) {
        if (rank == 0) MP_ERROR("debug.dump_activations=%ld: %d of the %d tensors were not captured", d->step, missing,
                                d->L + 3);
        return MP_ERR;
    }
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/activations_step_%08ld.h5", dir, d->step);
    publish_tmp_name(path, tmp, sizeof tmp); /* fits: tmp has room for path and ".tmp" */
    bad = rank == 0 && publish_tmp_prepare(tmp) != MP_OK; /* before the collective create, agreed on */
    wait_allreduce(w, &bad, 1, MPI_INT, MPI_MAX, comm, "the activation dump's temporary name");
    if (bad) return MP_ERR;
    h5_quiet_t q;
    h5_quiet_begin(&q);
    bad = actdump_file(d, comm, tmp) != MP_OK;
    h5_quiet_end(&q);
    wait_allreduce(w, &bad, 1, MPI_INT, MPI_MAX, comm, "the activation dump's outcome");
    /* one rank publishes the file every rank wrote its part of */
    if (rank == 0 && !bad) bad = publish_commit(tmp, path) != MP_OK;
    else if (rank == 0) publish_discard(tmp);
    wait_allreduce(w, &bad, 1, MPI_INT, MPI_MAX, comm, "the activation dump's publication");
    return bad ? MP_ERR : MP_OK;
}
