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

/* Whether the open attribute a holds exactly one value (0 too when its space cannot be read), for the
 * readers that word their own messages; nothing printed. */
int h5_attr_one(hid_t a);

/* A scalar attribute, converted by HDF5 to mem_type into *value_p. */
int h5_attr_read(hid_t loc, const char *name, hid_t mem_type, void *value_p, const char *where);
/* A string attribute (fixed or variable length, as h5py writes) into a malloc'd *text_p (the caller
 * frees it). MP_ERR too when it is not a string or cannot be read as one. */
int h5_attr_read_alloc(hid_t loc, const char *name, char **text_p, const char *where);
/* The same into buf (n bytes, NUL-terminated; untouched when absent). MP_ERR too when it does not fit. */
int h5_attr_read_text(hid_t loc, const char *name, char *buf, size_t n, const char *where);

#endif
