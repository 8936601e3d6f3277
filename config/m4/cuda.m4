# MP_CHECK_CUDA: --with-cuda=no|yes|DIR (default no), --with-nvcc-gencode=FLAGS.
# Links against CUDA's lib64/stubs as well, so a build links on a machine with no driver.
# Sets CUDA_CPPFLAGS, CUDA_LDFLAGS, CUDA_LIBS, NVCC, NVCC_GENCODE; conditional HAVE_CUDA.
AC_DEFUN([MP_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build the CUDA backend (cuBLAS, cuBLASLt, NCCL); DIR default /usr/local/cuda])],
    [], [with_cuda=no])
  AC_ARG_WITH([nvcc-gencode],
    [AS_HELP_STRING([--with-nvcc-gencode=FLAGS], [nvcc -gencode flags (default sm_80 and sm_90)])],
    [NVCC_GENCODE="$withval"],
    [NVCC_GENCODE="-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90"])
  mp_cuda_summary="no"
  CUDA_CPPFLAGS=""; CUDA_LDFLAGS=""; CUDA_LIBS=""; NVCC=""
  AS_IF([test "x$with_cuda" != xno], [
    AS_IF([test "x$with_cuda" = xyes || test "x$with_cuda" = xguess], [mp_cuda_dir=/usr/local/cuda], [mp_cuda_dir="$with_cuda"])
    AC_PATH_PROG([NVCC], [nvcc], [], [$mp_cuda_dir/bin])
    AS_IF([test -z "$NVCC"], [AC_MSG_ERROR([--with-cuda: nvcc not found in $mp_cuda_dir/bin])])
    CUDA_CPPFLAGS="-I$mp_cuda_dir/include"
    CUDA_LDFLAGS="-L$mp_cuda_dir/lib64 -L$mp_cuda_dir/lib64/stubs"
    mp_save_CPPFLAGS="$CPPFLAGS"; mp_save_LDFLAGS="$LDFLAGS"; mp_save_LIBS="$LIBS"
    CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"; LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
    AC_CHECK_HEADERS([cuda_runtime.h cublas_v2.h cublasLt.h], [],
      [AC_MSG_ERROR([--with-cuda: CUDA headers not found in $mp_cuda_dir/include])])
    AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [],
      [AC_MSG_ERROR([--with-cuda: libcudart not found in $mp_cuda_dir/lib64])])
    AC_CHECK_LIB([cublas], [cublasCreate_v2], [],
      [AC_MSG_ERROR([--with-cuda: libcublas not found in $mp_cuda_dir/lib64])])
    AC_CHECK_LIB([cublasLt], [cublasLtCreate], [],
      [AC_MSG_ERROR([--with-cuda: libcublasLt not found in $mp_cuda_dir/lib64])])
    CPPFLAGS="$mp_save_CPPFLAGS"; LDFLAGS="$mp_save_LDFLAGS"; LIBS="$mp_save_LIBS"
    CUDA_LIBS="-lcublas -lcublasLt -lcudart -lstdc++"
    mp_cuda_dir_used="$mp_cuda_dir"
    mp_cuda_summary="$mp_cuda_dir ($NVCC; $NVCC_GENCODE)"
    AC_DEFINE([MP_HAVE_CUDA], [1], [Define when the CUDA backend is built])
  ])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$with_cuda" != xno])
  AC_SUBST([CUDA_CPPFLAGS]) AC_SUBST([CUDA_LDFLAGS]) AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCC]) AC_SUBST([NVCC_GENCODE])
])
