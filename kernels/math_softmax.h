/* Softmax and cross-entropy per element (max-subtracted for range). */
#ifndef MP_MATH_SOFTMAX_H
#define MP_MATH_SOFTMAX_H

#include <math.h>

#include "hd.h"
#include "math_exp.h"

/* exp(x − max): the unnormalised probability. */
MP_HD float mp_softmax_exp(float x, float max) { return mp_expf(x - max); }

/* Cross-entropy of a row from its max, Σ exp(x − max) and the target's logit: logsumexp − x_t. */
MP_HD float mp_xent_loss(float max, float sumexp, float logit_target) { return logf(sumexp) + max - logit_target; }

/* d loss / d logit_j = (p_j − [j == target]) · dloss. */
MP_HD float mp_xent_dlogit(float p, int is_target, float dloss) { return (p - (is_target ? 1.0f : 0.0f)) * dloss; }

/* Softmax backward of one element: dS_j = P_j (dP_j − Σ_k P_k dP_k). */
MP_HD float mp_softmax_dx(float p, float dp, float dot) { return p * (dp - dot); }

#endif
