#include "h5util.h"

#include <stdio.h>
#include <string.h>

#include "check.h"

void h5_quiet_begin(h5_quiet_t *q)
{
    H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void h5_quiet_end(const h5_quiet_t *q) { H5Eset_auto2(H5E_DEFAULT, q->func, q->data); }

int h5_attr_write(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *value, const char *fname)
{
    int rc = MP_ERR;
    hid_t s = -1, a = -1;
    H5_TRY(s = H5Screate(H5S_SCALAR), out, fname);
    H5_TRY(a = H5Acreate2(loc, name, file_type, s, H5P_DEFAULT, H5P_DEFAULT), err_close_space, fname);
    H5_TRY(H5Awrite(a, mem_type, value), err_close_attr, fname);
    rc = MP_OK;
err_close_attr:
    H5Aclose(a);
err_close_space:
    H5Sclose(s);
out:
    return rc;
}

int h5_attr_write_string(hid_t loc, const char *name, const char *text, const char *fname)
{
    int rc = MP_ERR;
    hid_t t = -1;
    size_t len = strlen(text);
    H5_TRY(t = H5Tcopy(H5T_C_S1), out, fname);
    H5_TRY(H5Tset_size(t, len ? len : 1), err_close_type, fname);
    H5_TRY(H5Tset_strpad(t, H5T_STR_NULLPAD), err_close_type, fname);
    rc = h5_attr_write(loc, name, t, t, len ? text : "", fname);
err_close_type:
    H5Tclose(t);
out:
    return rc;
}

/* Walks HDF5's error stack and prints its innermost description: the library's own reason. */
static herr_t mp_h5_walk(unsigned n, const H5E_error2_t *e, void *data)
{
    const char **desc_p = data;
    if (n == 0 && e->desc) *desc_p = e->desc;
    return 0;
}

void mp_h5_fail(const char *file, int line, const char *what, const char *h5file)
{
    const char *desc = "no HDF5 error message";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, mp_h5_walk, &desc);
    mp_errorf(file, line, "HDF5 call failed on %s: %s: %s", h5file ? h5file : "?", what, desc);
    H5Eclear2(H5E_DEFAULT);
}
