# MP_CHECK_NCCL: --with-nccl=guess|DIR, only with --with-cuda. guess looks next to CUDA
# (DIR/include, DIR/lib and DIR/lib64). Fails only when asked for explicitly or when CUDA is on
# (the CUDA backend needs NCCL for its collectives).
AC_DEFUN([MP_CHECK_NCCL], [
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl=DIR], [NCCL location (default: next to CUDA)])],
    [], [with_nccl=guess])
  mp_nccl_summary="no"
  NCCL_CPPFLAGS=""; NCCL_LDFLAGS=""; NCCL_LIBS=""
  AS_IF([test "x$with_cuda" != xno], [
    AS_IF([test "x$with_nccl" = xguess || test "x$with_nccl" = xyes], [mp_nccl_dir="$mp_cuda_dir_used"], [mp_nccl_dir="$with_nccl"])
    NCCL_CPPFLAGS="-I$mp_nccl_dir/include"
    NCCL_LDFLAGS="-L$mp_nccl_dir/lib -L$mp_nccl_dir/lib64"
    mp_save_CPPFLAGS="$CPPFLAGS"; mp_save_LDFLAGS="$LDFLAGS"; mp_save_LIBS="$LIBS"
    CPPFLAGS="$CPPFLAGS $NCCL_CPPFLAGS $CUDA_CPPFLAGS"; LDFLAGS="$LDFLAGS $NCCL_LDFLAGS $CUDA_LDFLAGS"
    AC_CHECK_HEADER([nccl.h], [], [AC_MSG_ERROR([NCCL header nccl.h not found under $mp_nccl_dir/include])])
    AC_CHECK_LIB([nccl], [ncclCommInitRank], [], [AC_MSG_ERROR([libnccl not found under $mp_nccl_dir])], [-lcudart])
    CPPFLAGS="$mp_save_CPPFLAGS"; LDFLAGS="$mp_save_LDFLAGS"; LIBS="$mp_save_LIBS"
    NCCL_LIBS="-lnccl"
    mp_nccl_summary="$mp_nccl_dir"
  ], [AS_IF([test "x$with_nccl" != xguess && test "x$with_nccl" != xno],
        [AC_MSG_ERROR([--with-nccl needs --with-cuda])])])
  AC_SUBST([NCCL_CPPFLAGS]) AC_SUBST([NCCL_LDFLAGS]) AC_SUBST([NCCL_LIBS])
])
