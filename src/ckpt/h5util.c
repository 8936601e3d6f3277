#include "h5util.h"

#include <stdio.h>
#include <stdlib.h>
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

/* The string attribute a's text into a malloc'd buffer (*text_p). MP_OK or MP_ERR (reported). */
static int h5_attr_text_alloc(hid_t a, char **text_p, const char *where)
{
    int rc = MP_ERR;
    hid_t t = -1, mt = -1;
    H5_TRY(t = H5Aget_type(a), out, where);
    if (H5Tget_class(t) != H5T_STRING) {
        MP_ERROR("%s is not a string", where);
        goto err_close_type;
    }
    H5_TRY(mt = H5Tcopy(H5T_C_S1), err_close_type, where);
    const htri_t var = H5Tis_variable_str(t);
    if (var > 0) {
        char *v = NULL;
        H5_TRY(H5Tset_size(mt, H5T_VARIABLE), err_close_mem, where);
        H5_TRY(H5Aread(a, mt, &v), err_close_mem, where);
        *text_p = strdup(v ? v : "");
        if (v) H5free_memory(v);
    } else {
        const size_t size = H5Tget_size(t);
        char *text = calloc(size + 1, 1);
        if (!text || H5Tset_size(mt, size) < 0 || H5Tset_strpad(mt, H5T_STR_NULLPAD) < 0 || H5Aread(a, mt, text) < 0) {
            free(text);
            MP_ERROR("%s cannot be read as a string", where);
            goto err_close_mem;
        }
        *text_p = text;
    }
    if (!*text_p) MP_ERROR("%s: out of memory", where);
    else rc = MP_OK;
err_close_mem:
    H5Tclose(mt);
err_close_type:
    H5Tclose(t);
out:
    return rc;
}

int h5_attr_one(hid_t a)
{
    const hid_t s = H5Aget_space(a);
    if (s < 0) return 0;
    const hssize_t n = H5Sget_simple_extent_npoints(s);
    H5Sclose(s);
    return n == 1;
}

/* Attribute name of loc opened into *a_p (the caller closes it): 1, 0 absent, or MP_ERR (reported).
 * It must hold one value: every reader reads into one scalar or one string, and H5Aread writes all
 * the values a foreign file's attribute holds (two would overrun the caller's variable). */
static int h5_attr_open(hid_t loc, const char *name, hid_t *a_p, const char *where)
{
    htri_t have;
    hid_t s = -1;
    hssize_t n = -1;
    H5_TRY(have = H5Aexists(loc, name), err, where);
    if (!have) return 0;
    H5_TRY(*a_p = H5Aopen(loc, name, H5P_DEFAULT), err, where);
    H5_TRY(s = H5Aget_space(*a_p), err_close, where);
    n = H5Sget_simple_extent_npoints(s);
    H5Sclose(s);
    if (n == 1) return 1;
    MP_ERROR("%s holds %lld values, not one", where, (long long)n);
err_close:
    H5Aclose(*a_p);
err:
    return MP_ERR;
}

int h5_attr_read(hid_t loc, const char *name, hid_t mem_type, void *value_p, const char *where)
{
    hid_t a = -1;
    const int have = h5_attr_open(loc, name, &a, where);
    if (have != 1) return have;
    int rc = MP_ERR;
    H5_TRY(H5Aread(a, mem_type, value_p), out, where);
    rc = 1;
out:
    H5Aclose(a);
    return rc;
}

int h5_attr_read_alloc(hid_t loc, const char *name, char **text_p, const char *where)
{
    hid_t a = -1;
    const int have = h5_attr_open(loc, name, &a, where);
    if (have != 1) return have;
    const int rc = h5_attr_text_alloc(a, text_p, where);
    H5Aclose(a);
    return rc == MP_OK ? 1 : MP_ERR;
}

int h5_attr_read_text(hid_t loc, const char *name, char *buf, size_t n, const char *where)
{
    char *text = NULL;
    const int have = h5_attr_read_alloc(loc, name, &text, where);
    if (have != 1) return have;
    const size_t len = strlen(text);
    if (len >= n) {
        MP_ERROR("%s: %zu bytes, longer than the %zu expected", where, len, n - 1);
        free(text);
        return MP_ERR;
    }
    memcpy(buf, text, len + 1);
    free(text);
    return 1;
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
