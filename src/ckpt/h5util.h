/* Small HDF5 helpers shared by the dataset, checkpoint and dump modules (publishing a finished
 * file: core/publish.h). */
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
/* String attribute `name` of loc (fixed or variable length) into buf (n bytes, NUL-terminated).
 * 1 read; 0 absent (buf untouched); MP_ERR (reported, naming where) when it is not a string, cannot
 * be read or does not fit. */
int h5_attr_read_text(hid_t loc, const char *name, char *buf, size_t n, const char *where);

#endif
