/* SHA-256 (src/core/sha256.c): FIPS 180-2's example digests (one block, two blocks, a million
 * bytes), the padding's edge lengths against Python's hashlib, and updates split at every offset
 * giving the same digest as one update. Links core alone. */
#include <stdio.h>
#include <string.h>

#include "sha256.h"
#include "tap.h"

static void digest(const void *data, size_t n, char hex[SHA256_HEX])
{
    sha256_t s;
    unsigned char raw[SHA256_BYTES];
    sha256_init(&s);
    sha256_update(&s, data, n);
    sha256_final(&s, raw, hex);
}

int main(void)
{
    char hex[SHA256_HEX];
    static const struct {
        const char *text, *want;
    } known[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        digest(known[i].text, strlen(known[i].text), hex);
        tap_ok(!strcmp(hex, known[i].want), "SHA-256 of \"%s\" (%zu bytes) is FIPS 180-2's %.16s...", known[i].text,
               strlen(known[i].text), known[i].want);
    }

    /* a million 'a', added 1000 at a time */
    sha256_t s;
    unsigned char raw[SHA256_BYTES], a[1000];
    memset(a, 'a', sizeof a);
    sha256_init(&s);
    for (int i = 0; i < 1000; i++) sha256_update(&s, a, sizeof a);
    sha256_final(&s, raw, hex);
    tap_ok(!strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
           "SHA-256 of a million 'a' is FIPS 180-2's cdc76e5c...");

    /* every split of texts around the padding's edges (55, 56, 63, 64 bytes...) into two updates */
    unsigned char text[130];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)(i * 37 + 11);
    int same = 1;
    for (size_t n = 0; n <= sizeof text; n++) {
        char whole[SHA256_HEX], split[SHA256_HEX];
        digest(text, n, whole);
        for (size_t cut = 0; cut <= n; cut++) {
            sha256_init(&s);
            sha256_update(&s, text, cut);
            sha256_update(&s, text + cut, n - cut);
            sha256_final(&s, raw, split);
            if (strcmp(whole, split)) same = 0;
        }
    }
    tap_ok(same, "texts of 0..130 bytes: two updates split anywhere give one update's digest");
    /* the padding's edges, against Python's hashlib: the length fits in the last block or does not */
    static const struct {
        size_t n;
        const char *want;
    } edges[] = {
        {55, "2900465fcb533e05a158fd2b3be0e5e3b03740d83060aa3580e0d98a96bf2384"},
        {56, "31454ff48ef36af2f08fd511bdc37d9d5855ac23e992e5ff5445cb6b7674a674"},
        {63, "5f6401b96532c36de4e65beec0409b69b1d181864c8009b7a04f43e5d56350d1"},
        {64, "94eb5de4943613fd048dc93393ab06877405faa39c11f53e9386083339833e7e"},
        {119, "b0dc41b1a384e2f1203f0351b38fbeaafceef577ce1191d5bfc25da39f721eae"},
        {120, "5df24dd802ac26132ce608dcb5f09841eef039ee0f152acf98d26d17fe4e88e6"},
        {130, "d35b74124cb85cfac62bfeaf3a9771efab3e0ef88fc43702c35a6efe09467cc1"},
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        digest(text, edges[i].n, hex);
        tap_ok(!strcmp(hex, edges[i].want), "SHA-256 of %zu bytes (i*37+11) is hashlib's %.16s...", edges[i].n, edges[i].want);
    }
    return tap_done();
}
