/* One thread count for the OpenMP loops and the BLAS. With Debian's OpenMP build of OpenBLAS
 * both use the same pool; with a pthreads OpenBLAS the two pools would fight for the cores. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <omp.h>

#include "kernels.h"

#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
void openblas_set_num_threads(int n);
#endif

void kernels_set_threads(int n)
{
    if (n < 1) n = 1;
    omp_set_num_threads(n);
#ifdef HAVE_OPENBLAS_SET_NUM_THREADS
    openblas_set_num_threads(n);
#endif
}
