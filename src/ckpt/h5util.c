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

int h5_attr_one(hid_t a)
{
    const hid_t s = H5Aget_space(a);
    if (s < 0) return 0;
    const hssize_t n = H5Sget_simple_extent_npoints(s);
    H5Sclose(s);
    return n == 1;
}

/* Walks HDF5's error stack for its innermost description: the library's own reason. */
static herr_t mp_h5_walk(unsigned k, const H5E_error2_t *e, void *data)
{
    const char **desc_p = data;
    if (k == 0 && e->desc) *desc_p = e->desc;
    return 0;
}

/* That description into why after `what`; the stack is cleared. MP_ERR, for the callers' returns. */
static int h5_why(char *why, size_t n, const char *what)
{
    const char *desc = "no HDF5 error message";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, mp_h5_walk, &desc);
    snprintf(why, n, "%s (HDF5: %s)", what, desc);
    H5Eclear2(H5E_DEFAULT);
    return MP_ERR;
}

/* The one reader every attribute goes through: attribute `name` of loc, opened and checked to hold
 * one value (H5Aread writes every value a foreign file's attribute holds into the one variable),
 * then read as a string into a malloc'd *text_p (text_p set) or as mem_type's class into *value_p.
 * 1 read, 0 absent, MP_ERR with why (words after the attribute's name); nothing printed. */
static int h5_attr_get_any(hid_t loc, const char *name, hid_t mem_type, void *value_p, char **text_p, char *why,
                           size_t n)
{
    const htri_t have = H5Aexists(loc, name);
    if (have < 0) return h5_why(why, n, "cannot be looked for");
    if (!have) return 0;
    const hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return h5_why(why, n, "cannot be opened");
    int rc = MP_ERR;
    hid_t s = -1, t = -1, mt = -1;
    if ((s = H5Aget_space(a)) < 0 || (t = H5Aget_type(a)) < 0) {
        h5_why(why, n, "cannot be read");
        goto out;
    }
    const hssize_t count = H5Sget_simple_extent_npoints(s);
    const H5T_class_t cls = H5Tget_class(t);
    if (count != 1) {
        snprintf(why, n, "holds %lld values, not one", (long long)count);
    } else if (!text_p) {
        /* HDF5 would convert a float into an integer (3.7 read as 3): the class must be the one asked for */
        if (cls != H5Tget_class(mem_type))
            snprintf(why, n, "is not %s", H5Tget_class(mem_type) == H5T_INTEGER ? "an integer" : "a number");
        else if (H5Aread(a, mem_type, value_p) < 0)
            h5_why(why, n, "cannot be read");
        else
            rc = 1;
    } else if (cls != H5T_STRING) {
        snprintf(why, n, "is not a string");
    } else if ((mt = H5Tcopy(H5T_C_S1)) < 0) {
        h5_why(why, n, "cannot be read");
    } else if (H5Tis_variable_str(t) > 0) {
        char *v = NULL;
        if (H5Tset_size(mt, H5T_VARIABLE) < 0 || H5Aread(a, mt, &v) < 0)
            h5_why(why, n, "cannot be read as a string");
        else if (!(*text_p = strdup(v ? v : "")))
            snprintf(why, n, "out of memory");
        else
            rc = 1;
        if (v) H5free_memory(v);
    } else {
        const size_t size = H5Tget_size(t);
        char *text = calloc(size + 1, 1);
        if (!text)
            snprintf(why, n, "out of memory");
        else if (H5Tset_size(mt, size) < 0 || H5Tset_strpad(mt, H5T_STR_NULLPAD) < 0 || H5Aread(a, mt, text) < 0)
            h5_why(why, n, "cannot be read as a string");
        else
            *text_p = text, text = NULL, rc = 1;
        free(text);
    }
out:
    if (mt >= 0) H5Tclose(mt);
    if (t >= 0) H5Tclose(t);
    if (s >= 0) H5Sclose(s);
    H5Aclose(a);
    return rc;
}

int h5_attr_get(hid_t loc, const char *name, hid_t mem_type, void *value_p, char *why, size_t n)
{
    return h5_attr_get_any(loc, name, mem_type, value_p, NULL, why, n);
}

int h5_attr_get_alloc(hid_t loc, const char *name, char **text_p, char *why, size_t n)
{
    return h5_attr_get_any(loc, name, -1, NULL, text_p, why, n);
}

int h5_attr_read(hid_t loc, const char *name, hid_t mem_type, void *value_p, const char *where)
{
    char why[512];
    const int rc = h5_attr_get(loc, name, mem_type, value_p, why, sizeof why);
    if (rc == MP_ERR) MP_ERROR("%s %s", where, why);
    return rc;
}

int h5_attr_read_alloc(hid_t loc, const char *name, char **text_p, const char *where)
{
    char why[512];
    const int rc = h5_attr_get_alloc(loc, name, text_p, why, sizeof why);
    if (rc == MP_ERR) MP_ERROR("%s %s", where, why);
    return rc;
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

void mp_h5_fail(const char *file, int line, const char *what, const char *h5file)
{
    const char *desc = "no HDF5 error message";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, mp_h5_walk, &desc);
    mp_errorf(file, line, "HDF5 call failed on %s: %s: %s", h5file ? h5file : "?", what, desc);
    H5Eclear2(H5E_DEFAULT);
}
