/* The serving front end's request parsing and completion text (src/serve/request.c) with a
 * tokenizer: a prompt is encoded by the checkpoint's tokenizer and limited by its tokens (bytes: its
 * bytes, as before); decoded bytes become client text with U+FFFD for invalid bytes; a streamed
 * text stops before a character whose bytes have not all come.
 * Needs GPT-2's vocabulary where tok_default_dir looks (bash .ci/deps.sh): without it, one failing line. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "request.h"
#include "tap.h"
#include "tokenizer.h"

enum { T = 32, V = 50304 };

/* request_parse of body for a context of T tokens into r (prompt room for T). 0 or 1 (why filled). */
static int parse(const tokenizer_t *tok, const char *body, serve_req_t *r, char *why, size_t n)
{
    int stream = 0;
    memset(r, 0, sizeof *r);
    static int prompt[T];
    r->prompt = prompt;
    why[0] = 0;
    return request_parse(body, strlen(body), T, V, tok, r, &stream, why, n);
}

static void test_prompts(const tokenizer_t *gpt2)
{
    serve_req_t r;
    char why[320];
    tap_ok(!parse(gpt2, "{\"prompt\": \"Hello world\"}", &r, why, sizeof why) && r.nprompt == 2 && r.prompt[0] == 15496 &&
               r.prompt[1] == 995,
           "gpt2: \"Hello world\" is tokens 15496, 995");
    tap_ok(!parse(NULL, "{\"prompt\": \"Hello world\"}", &r, why, sizeof why) && r.nprompt == 11 && r.prompt[0] == 'H',
           "no tokenizer (byte): the prompt's 11 bytes are its tokens");
    char body[400] = "{\"prompt\": \"word";
    for (int i = 0; i < 31; i++) strcat(body, " word");
    strcat(body, "\"}");
    tap_ok(parse(gpt2, body, &r, why, sizeof why) && strstr(why, "32 gpt2 tokens; the context allows at most 31"),
           "gpt2: 32 tokens (159 bytes) on a context of 32 are refused by their tokens: %s", why);
    strcpy(body + strlen(body) - 7, "\"}"); /* one word fewer: 31 tokens */
    tap_ok(!parse(gpt2, body, &r, why, sizeof why) && r.nprompt == 31, "gpt2: 31 tokens (154 bytes) fit");
    tap_ok(parse(NULL, body, &r, why, sizeof why) && strstr(why, "154 bytes; the context allows at most 31"),
           "byte: the same 154 bytes are refused by their bytes: %s", why);
}

static void test_text(void)
{
    const unsigned char euro[] = {'a', 0xe2, 0x82, 0xac}, bad[] = {'a', 0xff, 'b', 0xe2, 0x82};
    tap_ok(request_text_whole(euro, 4) == 4 && request_text_whole(euro, 3) == 1 && request_text_whole(euro, 2) == 1 &&
               request_text_whole(euro, 1) == 1,
           "whole characters: a + the euro sign's 3 bytes end at 4; cut after 1 or 2 of them, at 1");
    const unsigned char four[] = {0xf0, 0x9f, 0x98, 0x80};
    tap_ok(request_text_whole(four, 4) == 4 && request_text_whole(four, 3) == 0, "a 4-byte character cut after 3: at 0");
    size_t n;
    char *s = request_text_clean(bad, sizeof bad, &n);
    tap_ok(s && n == 11 && !memcmp(s, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd", 11),
           "invalid bytes (0xff, a cut character) become U+FFFD each");
    free(s);
    s = request_text_clean(euro, sizeof euro, &n);
    tap_ok(s && n == 4 && !memcmp(s, euro, 4), "valid UTF-8 is kept as it is");
    free(s);
}

int main(void)
{
    tokenizer_t gpt2;
    test_text();
    if (tap_ok(tok_open(&gpt2, TOK_GPT2, NULL) == MP_OK, "GPT-2's vocabulary loads (bash .ci/deps.sh fetches it)")) {
        test_prompts(&gpt2);
        tok_close(&gpt2);
    }
    return tap_done();
}
