/* Which matrix element each lane of a warp holds in the fragments of mma.sync m16n8k16 (bf16 in,
 * fp32 accumulate), and which shared-memory row and column each lane hands to ldmatrix .x4 so that
 * the four 8x8 matrices it returns are exactly those fragments. The FA2 attention kernels
 * (attention_fa2_cuda.cu) index through these functions only, so that the host-side emulation in
 * validation/cuda/fa2_layout_test.cc checks the same arithmetic the device runs: a wrong lane map
 * would not crash, it would quietly give wrong attention.
 *
 * Notation: g = lane / 4 (the PTX ISA's groupID), q = lane % 4 (threadID_in_group). A register
 * holds two bf16, the lower-indexed element in the low half (`h` = 0). C++ only (kernels/ and the
 * test); both host and device under nvcc. */
#ifndef MP_MMA_FRAG_H
#define MP_MMA_FRAG_H

#ifdef __CUDACC__
#define MP_FRAG static inline __host__ __device__
#else
#define MP_FRAG static inline
#endif

/* A, 16 x 16 (rows m, columns k), registers r = 0..3 */
MP_FRAG int frag_a_row(int lane, int r) { return lane / 4 + 8 * (r & 1); }
MP_FRAG int frag_a_col(int lane, int r, int h) { return 2 * (lane % 4) + h + 8 * (r >> 1); }
/* B, 16 x 8 (rows k, columns n), registers r = 0..1 */
MP_FRAG int frag_b_row(int lane, int r, int h) { return 2 * (lane % 4) + h + 8 * r; }
MP_FRAG int frag_b_col(int lane) { return lane / 4; }
/* C and D, 16 x 8 fp32, elements e = 0..3 */
MP_FRAG int frag_c_row(int lane, int e) { return lane / 4 + 8 * (e >> 1); }
MP_FRAG int frag_c_col(int lane, int e) { return 2 * (lane % 4) + (e & 1); }

/* Two C tiles side by side (columns 16kk..16kk+15 of a 16-row strip: tiles 2kk and 2kk+1) are the
 * A operand of k-block kk of the next product, once rounded to bf16: A register r is the pair of
 * elements (c_to_a_elem(r), +1) of C tile 2kk + c_to_a_tile(r). Why it works: C's row g / g+8 and
 * column pair 2q, 2q+1 are A's for the same lane. */
MP_FRAG int c_to_a_tile(int r) { return r >> 1; }
MP_FRAG int c_to_a_elem(int r) { return 2 * (r & 1); }

/* ldmatrix.x4: lanes 8i..8i+7 give the row addresses of matrix i, which lands in register i.
 * The (row, column) each lane points at, relative to the 16 x 16 block being loaded: */

/* A from a row-major (m x k) tile, no transpose: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7),
 * (rows 0-7, k 8-15), (rows 8-15, k 8-15) = registers a0..a3. */
MP_FRAG int ldsm_a_row(int lane) { return lane % 8 + 8 * ((lane / 8) & 1); }
MP_FRAG int ldsm_a_col(int lane) { return 8 * (lane / 16); }

/* B for two n-tiles (n 0-7 and 8-15) of one k-block, from a tile stored n-major (row n, column k:
 * K's rows for S = Q Kᵀ), no transpose: registers b0, b1 of n-tile 0, then b0, b1 of n-tile 1. */
MP_FRAG int ldsm_bn_row(int lane) { return lane % 8 + 8 * (lane / 16); }      /* n */
MP_FRAG int ldsm_bn_col(int lane) { return 8 * ((lane / 8) & 1); }           /* k */

/* B for two n-tiles of one k-block, from a tile stored k-major (row k, column n: V's rows for P V),
 * with .trans: registers b0, b1 of n-tile 0, then b0, b1 of n-tile 1. */
MP_FRAG int ldsm_bk_row(int lane) { return lane % 8 + 8 * ((lane / 8) & 1); } /* k */
MP_FRAG int ldsm_bk_col(int lane) { return 8 * (lane / 16); }                /* n */

#undef MP_FRAG
#endif
