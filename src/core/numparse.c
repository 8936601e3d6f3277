#include "numparse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "check.h"

int num_parse_long(const char *s, long long *x)
{
    char *end;
    if (!*s || isspace((unsigned char)*s)) return MP_ERR;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != 0) return MP_ERR;
    *x = v;
    return MP_OK;
}

int num_parse_u64(const char *s, uint64_t *x)
{
    char *end;
    if (!isdigit((unsigned char)*s)) return MP_ERR; /* strtoull would accept "-1" */
    errno = 0;
    const unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != 0) return MP_ERR;
    *x = v;
    return MP_OK;
}

int num_parse_double(const char *s, double *x)
{
    char *end;
    if (!*s || isspace((unsigned char)*s)) return MP_ERR;
    errno = 0;
    const double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v)) return MP_ERR;
    *x = v;
    return MP_OK;
}
