/* Numbers from text, whole or not at all: the deck's values and the command line's options both
 * read through these, so "3x", " 3", "", an overflow, "-1" for an unsigned value and a non-finite
 * double are refused the same way everywhere. MP_OK, or MP_ERR with *x untouched. */
#ifndef MP_NUMPARSE_H
#define MP_NUMPARSE_H

#include <stdint.h>

int num_parse_long(const char *s, long long *x);
int num_parse_u64(const char *s, uint64_t *x);
int num_parse_double(const char *s, double *x); /* finite only */

#endif
