/* MP_HD marks per-element math that compiles for both backends: __host__ __device__ under nvcc,
 * static inline C elsewhere. Only small pure functions of scalars live behind it. */
#ifndef MP_HD_H
#define MP_HD_H

#ifdef __CUDACC__
#define MP_HD static inline __host__ __device__
#else
#define MP_HD static inline
#endif

#endif
