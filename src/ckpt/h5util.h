/* Small HDF5 helpers shared by the dataset, checkpoint, boundary log and dump modules, and the one
 * API that reads and writes their attributes (publishing a finished file: core/publish.h). */
#ifndef MP_H5UTIL_H
#define MP_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>

/* HDF5's automatic error printer, saved and silenced while one of our calls runs: the user sees
 * our one-line message (with HDF5's innermost reason), not HDF5's stack dump. */
typedef struct {
    H5E_auto2_t func;
    void *data;
} h5_quiet_t;

void h5_quiet_begin(h5_quiet_t *q);
void h5_quiet_end(const h5_quiet_t *q);

/* Scalar attribute `name` on loc, stored as file_type, given in memory as mem_type. fname names
 * the file in messages. MP_OK or MP_ERR. */
int h5_attr_write(hid_t loc, const char *name, hid_t file_type, hid_t mem_type, const void *value, const char *fname);
/* Fixed-length string attribute sized to the text (HDF5 refuses size 0: "" is stored as one NUL). */
int h5_attr_write_string(hid_t loc, const char *name, const char *text, const char *fname);

/* Reading attribute `name` of loc. Each returns 1 (read); 0 when it is absent (nothing printed, the
 * value untouched: the caller says what a missing one means, an older file's default or a file that
 * is not its own); or MP_ERR (reported, naming where: the attribute as the caller words it, or the
 * file or object it is on). An attribute holding other than one value is refused ("holds N values,
 * not one"): H5Aread writes every value a foreign file's attribute holds into the one variable. */


/* The same, quiet: MP_ERR with why (words to follow the attribute's name: "holds 2 values, not one",
 * "is not an integer") and nothing printed, for the readers that report into a reason of their own
 * (the run directory's scan, ckpt_files.h). h5_attr_read and h5_attr_read_alloc are these, printed. */
int h5_attr_get(hid_t loc, const char *name, hid_t mem_type, void *value_p, char *why, size_t n);
int h5_attr_get_alloc(hid_t loc, const char *name, char **text_p, char *why, size_t n);

/* A scalar attribute, converted by HDF5 to mem_type into *value_p; MP_ERR too when it is not of
 * mem_type's class (an integer for an integer, a float for a float). */
int h5_attr_read(hid_t loc, const char *name, hid_t mem_type, void *value_p, const char *where);
/* A string attribute (fixed or variable length, as h5py writes) into a malloc'd *text_p (the caller
 * frees it). MP_ERR too when it is not a string or cannot be read as one. */
int h5_attr_read_alloc(hid_t loc, const char *name, char **text_p, const char *where);
/* The same into buf (n bytes, NUL-terminated; untouched when absent). MP_ERR too when it does not fit. */
int h5_attr_read_text(hid_t loc, const char *name, char *buf, size_t n, const char *where);

#endif
