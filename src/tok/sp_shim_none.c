/* The SentencePiece shim of a build without SentencePiece (configure found none, or was told
 * --with-sentencepiece=no): every call fails saying so, and what to do about it. */
#include "sp_shim.h"

#include <stdio.h>

static int sp_shim_none(char *err, size_t n_err)
{
    snprintf(err, n_err, "this mindpipe was built without SentencePiece: install libsentencepiece-dev "
                         "(bash .ci/deps.sh) and run ./configure again");
    return -1;
}

int sp_shim_available(void) { return 0; }

int sp_shim_train(const char *text, size_t n, int vocab, const char *model_type, char **model_p,
                  size_t *n_model_p, char *err, size_t n_err)
{
    return sp_shim_none(err, n_err);
}

int sp_shim_load(const char *model, size_t n, sp_shim_t **sp_p, char *err, size_t n_err)
{
    return sp_shim_none(err, n_err);
}

void sp_shim_free(sp_shim_t *sp) {}

int sp_shim_size(const sp_shim_t *sp) { return 0; }

int sp_shim_piece(const sp_shim_t *sp, int id, char *buf, size_t n_buf, size_t *len_p, char *err, size_t n_err)
{
    return sp_shim_none(err, n_err);
}

int sp_shim_encode(const sp_shim_t *sp, const char *text, size_t n, int *ids, size_t cap, size_t *n_ids_p,
                   char *err, size_t n_err)
{
    return sp_shim_none(err, n_err);
}
