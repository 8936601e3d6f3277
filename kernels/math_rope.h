/* Rotary position embeddings per pair, in Hugging Face's rotate-half convention (Llama's
 * apply_rotary_pos_emb): a head of size hs is split in halves, and element i pairs with element
 * i + hs/2 (i < hs/2), rotated by the angle pos · theta^(−2i/hs) (theta = model.rope_theta):
 *   y_lo = x_lo·cos − x_hi·sin,   y_hi = x_hi·cos + x_lo·sin.
 * The backward is the transpose of that rotation, i.e. the rotation by −angle: the same two
 * functions with −sin.
 * cos and sin come from a table (rope_table_init, kernels.h) that the host fills once in double
 * and rounds to float: forward and backward read the same floats, a device backend can copy the
 * table instead of evaluating its own (less exact) sincos, and no kernel evaluates a transcendental. */
#ifndef MP_MATH_ROPE_H
#define MP_MATH_ROPE_H

#include <math.h>

#include "hd.h"

/* The angle of pair i at position pos, in double: a float product pos·freq loses the angle's low
 * bits at long positions (at pos 4096 a float ulp is 5e-4 rad). */
MP_HD double mp_rope_angle(int pos, int i, int hs, double theta)
{
    return (double)pos * pow(theta, -2.0 * i / hs);
}

MP_HD float mp_rope_lo(float lo, float hi, float c, float s) { return lo * c - hi * s; }

MP_HD float mp_rope_hi(float lo, float hi, float c, float s) { return hi * c + lo * s; }

#endif
