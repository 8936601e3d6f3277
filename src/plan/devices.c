#include "devices.h"

#include <ini.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#ifndef MP_DEVICES_INI
#define MP_DEVICES_INI "inputs/devices.ini"
#endif

const char *devices_default_path(void)
{
    const char *e = getenv("MINDPIPE_DEVICES");
    return e && *e ? e : MP_DEVICES_INI;
}

/* The keys every kind must set (bit i of devices_parse_t.seen), in this order. */
static const char *const devices_required[] = {"peak_bf16", "peak_tf32", "peak_fp32", "mem_bw", "memory",
                                               "idle_w", "busy_w", "per_node", "intra_bw", "intra_lat",
                                               "inter_bw", "inter_lat", "host_bw"};
#define DEVICES_NREQ (int)(sizeof devices_required / sizeof devices_required[0])

typedef struct {
    const char *path, *kind;
    dev_kind_t d;
    int found, seen, nerr;
    char kinds[1024];   /* the sections seen, for the message naming an unknown kind */
} devices_parse_t;

static int devices_num(devices_parse_t *p, const char *key, const char *value, double *out)
{
    char *end;
    const double v = strtod(value, &end);
    if (end == value || *end) {
        p->nerr++;
        return MP_ERROR("%s: [%s] %s = '%s' is not a number", p->path, p->kind, key, value), 0;
    }
    *out = v;
    return 1;
}

/* eff_curve = s1:e1,s2:e2,... */
static int devices_curve(devices_parse_t *p, const char *value)
{
    p->d.neff = 0;
    for (const char *s = value; *s;) {
        char *end;
        if (p->d.neff == DEV_EFF_POINTS) break;
        const double size = strtod(s, &end);
        if (end == s || *end != ':') break;
        s = end + 1;
        const double e = strtod(s, &end);
        if (end == s || (*end && *end != ',')) break;
        p->d.eff_size[p->d.neff] = size, p->d.eff[p->d.neff++] = e;
        s = *end ? end + 1 : end;
        if (!*s) return 1;
    }
    p->nerr++;
    return MP_ERROR("%s: [%s] eff_curve = '%s': expected size:efficiency pairs separated by commas (at most %d)",
                    p->path, p->kind, value, DEV_EFF_POINTS), 0;
}

/* Appends section to the comma-separated list (libinih calls handlers per key only: the first key
 * of a section announces it). */
static void devices_note_section(char *list, size_t cap, const char *section)
{
    const size_t n = strlen(list), k = strlen(section);
    const char *last = strrchr(list, ' ');
    last = last ? last + 1 : list;
    if (!strcmp(last, section) || n + k + 3 >= cap) return;
    snprintf(list + n, cap - n, "%s%s", n ? ", " : "", section);
}

static int devices_handler(void *user, const char *section, const char *key, const char *value)
{
    devices_parse_t *p = user;
    devices_note_section(p->kinds, sizeof p->kinds, section);
    if (strcmp(section, p->kind)) return 1;
    p->found = 1;
    double v;
    dev_kind_t *d = &p->d;
    double *targets[] = {&d->peak[DEV_PREC_BF16], &d->peak[DEV_PREC_TF32], &d->peak[DEV_PREC_FP32], &d->mem_bw,
                         &d->mem_bytes, &d->idle_w, &d->busy_w, NULL, &d->intra.bw, &d->intra.lat, &d->inter.bw,
                         &d->inter.lat, &d->host_bw};
    for (int i = 0; i < DEVICES_NREQ; i++)
        if (!strcmp(key, devices_required[i])) {
            if (!devices_num(p, key, value, &v)) return 1;
            if (targets[i]) *targets[i] = v;
            else d->per_node = (int)v;
            p->seen |= 1 << i;
            return 1;
        }
    if (!strcmp(key, "eff_curve")) return devices_curve(p, value), 1;
    if (!strcmp(key, "node_cores")) return devices_num(p, key, value, &d->node_cores), 1;
    p->nerr++;
    MP_ERROR("%s: [%s] unknown key '%s' (docs/PLAN.md lists the keys of a device kind)", p->path, p->kind, key);
    return 1;
}

int devices_load(const char *path, const char *kind, dev_kind_t *d)
{
    devices_parse_t *p = calloc(1, sizeof *p);
    if (!p) return MP_FAIL("out of memory reading %s", path);
    p->path = path, p->kind = kind;
    int rc = MP_ERR;
    const int r = ini_parse(path, devices_handler, p);
    if (r < 0) {
        MP_ERROR("cannot read the device file %s (--devices FILE or MINDPIPE_DEVICES name another)", path);
        goto out;
    }
    if (r > 0) {
        MP_ERROR("%s:%d: not an INI line", path, r);
        goto out;
    }
    if (!p->found) {
        MP_ERROR("%s has no device kind '%s' (it has: %s)", path, kind, p->kinds);
        goto out;
    }
    for (int i = 0; i < DEVICES_NREQ; i++)
        if (!(p->seen & (1 << i))) p->nerr++, MP_ERROR("%s: [%s] needs %s", path, kind, devices_required[i]);
    char why[160];
    if (!p->nerr && dev_kind_check(&p->d, why, sizeof why) != MP_OK) p->nerr++, MP_ERROR("%s: [%s] %s", path, kind, why);
    if (p->nerr) goto out;
    snprintf(p->d.name, sizeof p->d.name, "%s", kind);
    *d = p->d;
    rc = MP_OK;
out:
    free(p);
    return rc;
}

static int devices_list_handler(void *user, const char *section, const char *key, const char *value)
{
    (void)key, (void)value;
    devices_note_section(user, 1024, section);
    return 1;
}

int devices_list(const char *path, FILE *f)
{
    char kinds[1024] = "";
    if (ini_parse(path, devices_list_handler, kinds) != 0) return MP_FAIL("cannot read the device file %s", path);
    fprintf(f, "%s\n", kinds);
    return MP_OK;
}
