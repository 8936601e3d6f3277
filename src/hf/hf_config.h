/* config.json of a Hugging Face model directory: the top-level keys of one JSON object and their
 * values where they are scalars (the sizes and switches a model's checks read), and the directory
 * made for an export; a sharded model's index. Shared by GPT-2 (hf_gpt2.c) and Llama (hf_llama.c). */
#ifndef MP_HF_CONFIG_H
#define MP_HF_CONFIG_H

#include <stddef.h>

#define HF_KEYS_MAX 256

/* One top-level key: its value's kind ('n' number, 's' string, 'z' null, 't' true, 'f' false, 'o' an
 * array or object, which no check reads), the value; a number's text in str and whether it is written
 * as an integer (no fraction, no exponent: what Python's json gives an int). */
typedef struct {
    char key[256];
    char kind;
    int integral;
    double num;
    char str[64]; /* a string cut to fit (no value a check reads is long), or a number's text */
} hf_val_t;

/* dir and its parents, as mkdir -p. MP_OK, or MP_ERR naming the directory. */
int hf_mkdir(const char *dir);

/* path's top-level keys into v (HF_KEYS_MAX entries), their count into *n_p. Strict where Python's
 * json is (RFC 8259, UTF-8) and refusing a key given twice. MP_OK, or MP_ERR naming path. */
int hf_config_read(const char *path, hf_val_t *v, int *n_p);

/* One entry of a sharded model's index (model.safetensors.index.json): tensor name, its shard. */
typedef struct {
    char name[128];
    char file[256];
} hf_map_t;

/* path, an index {"metadata": {...}, "weight_map": {"tensor": "shard file", ...}}: its weight_map into
 * a malloc'd *map_p (*n_p entries; the caller frees it). A tensor named twice, no weight_map or one
 * not an object of strings, and the JSON faults of hf_config_read are refused naming path. */
int hf_index_read(const char *path, hf_map_t **map_p, int *n_p);

/* The entry called key, or NULL. */
const hf_val_t *hf_key(const hf_val_t *v, int n, const char *key);

/* x's value as a message shows it (a number's text, a string quoted, null, true, false). */
const char *hf_what(const hf_val_t *x, char *buf, size_t n);

/* Key key of path, an integer of magnitude at most 2^31 - 1 written as one, into *x_p; MP_ERR naming
 * the key when it is missing or no such integer. */
int hf_int(const char *path, const hf_val_t *v, int n, const char *key, long *x_p);

#endif
