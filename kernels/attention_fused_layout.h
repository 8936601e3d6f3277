/* What the fused (flash) attention keeps in its att and datt buffers, as functions of the shape
 * alone, so that the planner, the model's carving, the CPU emulation (attention_flash_cpu.c) and
 * the CUDA kernels (attention_flash_cuda.cu, attention_fa2_cuda.cu) read one rule. Legend in
 * kernels.h; every count is in floats.
 *
 * att: the natural log-sum-exp of each (b, h, query) row at [0, B·NH·T); a copy of out (B,T,C) at
 * mp_att_fused_o_offset (backward's D_i = Σ dO·O needs O, and its signature carries only att);
 * then, where mp_att_fused_keeps_qkv16, the forward's bf16 q, k, v planes (3·B·T·C bf16, head-major)
 * at mp_att_fused_qkv16_offset, which the FA2 backward reads instead of rounding qkv again.
 * datt: D_i, one float per (b, h, query) row.
 * The probabilities' path (attention_forward) needs (B,NH,T,T) for each instead; "keeps" and
 * "fits" compare against that size because the fused kernels were first written into the
 * probabilities' buffer: a shape whose fused contents would not fit there takes the probabilities'
 * path, whatever the buffer is carved to now. */
#ifndef MP_ATTENTION_FUSED_LAYOUT_H
#define MP_ATTENTION_FUSED_LAYOUT_H

#include <stddef.h>

#include "hd.h"

/* The probabilities' buffer, (B,NH,T,T). */
MP_HD size_t mp_att_probs_floats(int B, int T, int NH) { return (size_t)B * NH * T * T; }

/* Where the output's copy starts: past the log-sum-exps, 256-byte aligned for float4 reads. */
MP_HD size_t mp_att_fused_o_offset(int B, int T, int NH) { return ((size_t)B * NH * T + 63) & ~(size_t)63; }

/* Where the bf16 q, k, v planes start: past the output's copy, 256-byte aligned for cp.async. */
MP_HD size_t mp_att_fused_qkv16_offset(int B, int T, int C, int NH)
{
    return (mp_att_fused_o_offset(B, T, NH) + (size_t)B * T * C + 63) & ~(size_t)63;
}

/* 1 when the forward keeps the bf16 planes in att (about 2.5·C <= NH·T; at GPT-2's T = 1024 it
 * does); else the backward rounds qkv into context scratch again. */
MP_HD int mp_att_fused_keeps_qkv16(int B, int T, int C, int NH)
{
    return mp_att_fused_qkv16_offset(B, T, C, NH) + (3 * (size_t)B * T * C + 1) / 2 <= mp_att_probs_floats(B, T, NH);
}

/* The shape half of the fused path's condition (the device half, bf16 and the head sizes its
 * kernels were set up for, is cu_attention_flash_fits'): a head size of 16, 32, 64 or 128, rows of
 * whole float4s, and the log-sum-exps and output's copy within the probabilities' size. */
MP_HD int mp_att_fused_shape_fits(int B, int T, int C, int NH)
{
    if (NH <= 0 || C % NH || C % 4) return 0;
    const int hs = C / NH;
    if (hs != 16 && hs != 32 && hs != 64 && hs != 128) return 0;
    return mp_att_fused_o_offset(B, T, NH) + (size_t)B * T * C <= mp_att_probs_floats(B, T, NH);
}

/* att's floats on the fused path: up to the output copy's end, or the planes' end where kept. */
MP_HD size_t mp_att_fused_floats(int B, int T, int C, int NH)
{
    if (mp_att_fused_keeps_qkv16(B, T, C, NH))
        return mp_att_fused_qkv16_offset(B, T, C, NH) + (3 * (size_t)B * T * C + 1) / 2;
    return mp_att_fused_o_offset(B, T, NH) + (size_t)B * T * C;
}

/* datt's floats on the fused path: D_i per row. */
MP_HD size_t mp_att_fused_dfloats(int B, int T, int NH) { return (size_t)B * NH * T; }

#endif
