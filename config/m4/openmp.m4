# MP_CHECK_OPENMP: OpenMP for the elementwise CPU kernels (required: the kernels rely on it for speed).
AC_DEFUN([MP_CHECK_OPENMP], [
  AC_OPENMP
  AS_IF([test -z "$OPENMP_CFLAGS" && test "x$ac_cv_prog_c_openmp" != "xnone needed"],
    [AC_MSG_ERROR([the C compiler does not support OpenMP])])
])
