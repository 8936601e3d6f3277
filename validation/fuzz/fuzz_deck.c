/* libFuzzer harness for the deck parser (src/config/deck.c): the input is a deck file, optionally
 * followed by --set overrides. Everything before the first line that reads exactly ";--set" is written
 * to a file and loaded with deck_load; each line after it (at most MAX_SETS) is one --set assignment.
 *
 * Besides the sanitizers' checks it asserts the deck's own contract: a deck that loads is written
 * by deck_write as text that loads again to the same deck and writes back identically (round trip).
 *
 * Build and run: bash validation/fuzz/run.sh SECONDS build fuzz_deck (seeds: corpus_deck/). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "deck.h"

#define MAX_SETS 8

static char deck_path[64];

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_deck: %s\n", what);
    abort();
}

static void remove_deck(void) { unlink(deck_path); }

static void write_file(const char *path, const uint8_t *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) fail("cannot write the deck file");
}

/* A deck that loaded must survive deck_write -> deck_load -> deck_write unchanged. */
static void check_round_trip(const deck_t *d)
{
    char *s1 = deck_to_string(d);
    if (!s1) fail("deck_to_string failed on a loaded deck");
    write_file(deck_path, (const uint8_t *)s1, strlen(s1));
    deck_t *again = malloc(sizeof *again);
    if (!again) fail("out of memory");
    if (deck_load(again, deck_path, NULL, 0) != MP_OK) fail("the written deck does not load again");
    char *s2 = deck_to_string(again);
    if (!s2 || strcmp(s1, s2)) fail("the written deck loads to a different deck");
    free(s2);
    free(again);
    free(s1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!deck_path[0]) {
        int fd;
        snprintf(deck_path, sizeof deck_path, "/tmp/fuzz_deck.%ld.XXXXXX", (long)getpid());
        if ((fd = mkstemp(deck_path)) < 0) fail("mkstemp");
        close(fd);
        atexit(remove_deck);
    }
    static const char marker[] = "\n;--set\n";
    const uint8_t *cut = NULL;
    for (size_t i = 0; i + sizeof marker - 1 <= size && !cut; i++)
        if (!memcmp(data + i, marker, sizeof marker - 1)) cut = data + i;
    const size_t file_len = cut ? (size_t)(cut - data) + 1 : size;
    write_file(deck_path, data, file_len);

    /* the --set lines, NUL-terminated (a NUL inside a line ends that assignment, as argv would) */
    char *sets_text = NULL, *sets[MAX_SETS];
    int nsets = 0;
    if (cut) {
        const size_t off = file_len + sizeof marker - 2, n = size - off;
        sets_text = malloc(n + 1);
        if (!sets_text) fail("out of memory");
        memcpy(sets_text, data + off, n);
        sets_text[n] = 0;
        for (char *p = sets_text, *nl; p && *p && nsets < MAX_SETS; p = nl ? nl + 1 : NULL) {
            if ((nl = strchr(p, '\n'))) *nl = 0;
            sets[nsets++] = p;
        }
    }
    deck_t *d = malloc(sizeof *d);
    if (!d) fail("out of memory");
    if (deck_load(d, deck_path, sets, nsets) == MP_OK) check_round_trip(d);
    free(d);
    free(sets_text);
    return 0;
}
