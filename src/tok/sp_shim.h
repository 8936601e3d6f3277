/* The C face of SentencePiece (sp_shim.cc, C++; sp_shim_none.c when the build has no SentencePiece):
 * only what tok_sp.c needs. No function throws or prints: each returns 0 on success, or -1 with a
 * one-line reason (SentencePiece's own message where it gave one) in err[0..n_err). */
#ifndef MP_SP_SHIM_H
#define MP_SP_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_shim sp_shim_t;

/* 1 when the build has SentencePiece, 0 when every other function fails saying it has none. */
int sp_shim_available(void);

/* Trains a model of vocab pieces (model_type "unigram" or "bpe") on the lines of text[0..n), one
 * thread, so that the same text gives the same bytes; the serialized model (.model file contents) in
 * a malloc'd *model_p of *n_model_p bytes. The model keeps text exactly: no normalization, spaces as
 * they are, bytes it has no piece for as byte pieces (byte_fallback). */
int sp_shim_train(const char *text, size_t n, int vocab, const char *model_type, char **model_p,
                  size_t *n_model_p, char *err, size_t n_err);

/* A processor for the serialized model model[0..n) (a .model file's bytes). */
int sp_shim_load(const char *model, size_t n, sp_shim_t **sp_p, char *err, size_t n_err);
void sp_shim_free(sp_shim_t *sp);

/* The model's number of pieces (ids are below it). */
int sp_shim_size(const sp_shim_t *sp);

/* Piece id's surface: its text with the whitespace mark U+2581 as a space, one byte for a byte piece
 * (<0xNN>), nothing for a control or unknown piece; into buf (room for n_buf, which 4 times the
 * longest piece fills), its length in *len_p. -1 when id is out of range or buf too small. */
int sp_shim_piece(const sp_shim_t *sp, int id, char *buf, size_t n_buf, size_t *len_p, char *err, size_t n_err);

/* The ids of text[0..n) into ids (room for cap; a text never makes more ids than bytes), their
 * count in *n_ids_p. */
int sp_shim_encode(const sp_shim_t *sp, const char *text, size_t n, int *ids, size_t cap, size_t *n_ids_p,
                   char *err, size_t n_err);

#ifdef __cplusplus
}
#endif
#endif
