/* Test fillers shared by the whole-model unit tests: parameters larger than GPT-2's initialisation,
 * with norm weights off 1, so every path carries gradient; and seeded tokens. Header-only: each test
 * is one program. */
#ifndef MP_TEST_MODEL_FILL_H
#define MP_TEST_MODEL_FILL_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "params.h"
#include "rng.h"

/* params[e] ~ 0.3·N(0,1), norm weights 1 + 0.2·N(0,1), keyed by each tensor's name. */
static inline void test_params_fill(const param_table_t *tab, float *params)
{
    for (int i = 0; i < tab->count; i++) {
        const param_entry_t *e = &tab->entries[i];
        const uint64_t h = rng_name_hash(e->name);
        const int norm_w = e->kind == PK_LN1_W || e->kind == PK_LN2_W || e->kind == PK_LNF_W;
        for (size_t j = 0; j < e->numel; j++) {
            const float z = rng_normal(5, h, j);
            params[e->offset + j] = norm_w ? 1.0f + 0.2f * z : 0.3f * z;
        }
    }
}

/* Inputs and targets below V of the rows row0.. row0 + B of stream `seed`. */
static inline void test_tokens_fill(acts_t *a, int V, uint64_t seed, int row0)
{
    for (int b = 0; b < a->B; b++)
        for (int t = 0; t < a->T; t++) {
            const size_t i = (size_t)b * a->T + t;
            a->inputs[i] = (int)(rng_key(seed, 9, (uint64_t)(row0 + b), (uint64_t)t) % (uint64_t)V);
            a->targets[i] = (int)(rng_key(seed, 10, (uint64_t)(row0 + b), (uint64_t)t) % (uint64_t)V);
        }
}

#endif
