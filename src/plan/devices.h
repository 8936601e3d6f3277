/* inputs/devices.ini: the device and network kinds `mindpipe plan --device KIND` plans for
 * (devmodel.h holds the kind and its arithmetic; docs/PLAN.md documents every key and where each
 * number comes from). */
#ifndef MP_DEVICES_H
#define MP_DEVICES_H

#include <stdio.h>

#include "devmodel.h"

/* The device file used when --devices is not given: $MINDPIPE_DEVICES, else the source tree's
 * inputs/devices.ini (configure's path). */
const char *devices_default_path(void);

/* Reads kind `kind` from `path` into *d (set only on success). An unknown key, a value that does not
 * parse, a missing required key or numbers devmodel rejects are errors naming the file, kind and
 * key; an unknown kind names the kinds the file has. MP_OK or MP_ERR. */
int devices_load(const char *path, const char *kind, dev_kind_t *d);

/* The kinds of `path`, one per line, to f. MP_OK or MP_ERR. */
int devices_list(const char *path, FILE *f);

#endif
