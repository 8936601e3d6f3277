/* RMSNorm per element (Llama; Hugging Face's LlamaRMSNorm): y = (x·rstd)·w, rstd = 1/√(mean(x²) + eps),
 * no mean subtracted and no bias. eps is the model's (model.norm_eps: 1e-5 or 1e-6 in Llama decks),
 * so it is an argument, not a constant as LayerNorm's MP_LN_EPS.
 * Backward of one element given one row sum: with n = x·rstd and dn = dy·w,
 *   dx = rstd · (dn − n · mean(dn · n)),
 * LayerNorm's mp_ln_dx without the mean(dn) term (d rstd/dx_j = −rstd³·x_j/C is the only coupling). */
#ifndef MP_MATH_RMSNORM_H
#define MP_MATH_RMSNORM_H

#include <math.h>

#include "hd.h"

/* msq = mean(x²) over the row. */
MP_HD float mp_rms_rstd(float msq, float eps) { return 1.0f / sqrtf(msq + eps); }

/* HF multiplies by rstd first, then by the weight: the same order keeps the same rounding. */
MP_HD float mp_rms_out(float x, float rstd, float w) { return (x * rstd) * w; }

/* dx for one element; dnn_mean = mean of dn·n over the row. */
MP_HD float mp_rms_dx(float dn, float n, float rstd, float dnn_mean) { return rstd * (dn - n * dnn_mean); }

#endif
