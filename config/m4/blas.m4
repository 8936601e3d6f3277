# MP_CHECK_BLAS: a CBLAS for the products. --with-blas=guess|LIBS.
# guess: pkg-config openblas, then -lopenblas, then -lcblas -lblas. Debian's OpenMP build of
# OpenBLAS (libopenblas-openmp-dev) is preferred at run time: it shares one thread pool with our
# OpenMP loops instead of fighting them for the cores.
AC_DEFUN([MP_CHECK_BLAS], [
  AC_ARG_WITH([blas],
    [AS_HELP_STRING([--with-blas=guess|LIBS], [CBLAS library flags (default: OpenBLAS)])],
    [], [with_blas=guess])
  BLAS_CPPFLAGS=""; BLAS_LIBS=""
  AS_IF([test "x$with_blas" = xguess],
    [PKG_CHECK_MODULES([OPENBLASPC], [openblas],
       [BLAS_CPPFLAGS="$OPENBLASPC_CFLAGS"; BLAS_LIBS="$OPENBLASPC_LIBS"],
       [BLAS_LIBS="-lopenblas"])],
    [BLAS_LIBS="$with_blas"])
  # Pin the library pkg-config chose (Debian's openblas-openmp directory): with both the pthreads
  # and the OpenMP builds installed, the run-time alternatives link could pick the other one.
  for mp_flag in $BLAS_LIBS; do
    AS_CASE([$mp_flag], [-L*], [BLAS_LIBS="$BLAS_LIBS -Wl,-rpath,`echo "$mp_flag" | sed 's/^-L//'`"])
  done
  mp_save_CPPFLAGS="$CPPFLAGS"; mp_save_LIBS="$LIBS"
  CPPFLAGS="$CPPFLAGS $BLAS_CPPFLAGS"; LIBS="$BLAS_LIBS $LIBS"
  AC_MSG_CHECKING([for cblas_sgemm in $BLAS_LIBS])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cblas.h>]],
      [[float a = 1, b = 1, c = 0; cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([no CBLAS: install libopenblas-openmp-dev (or libopenblas-dev), or pass --with-blas=LIBS])])
  AC_CHECK_FUNCS([openblas_set_num_threads])
  CPPFLAGS="$mp_save_CPPFLAGS"; LIBS="$mp_save_LIBS"
  mp_blas_summary="$BLAS_LIBS"
  AC_SUBST([BLAS_CPPFLAGS]) AC_SUBST([BLAS_LIBS])
])
