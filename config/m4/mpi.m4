# MP_CHECK_MPI: the C compiler must be an MPI wrapper (MPICH's mpicc by default).
# An explicit CC wins; otherwise mpicc.mpich, then mpicc. Fails when no wrapper can build MPI_Init.
AC_DEFUN([MP_CHECK_MPI], [
  AC_ARG_VAR([MPICC], [MPI C compiler wrapper (default: mpicc.mpich, then mpicc)])
  AS_IF([test -z "$CC"], [
    AS_IF([test -n "$MPICC"], [CC="$MPICC"],
          [AC_CHECK_PROGS([CC], [mpicc.mpich mpicc])])
  ])
  AS_IF([test -z "$CC"],
    [AC_MSG_ERROR([no MPI compiler wrapper found: install MPICH (Debian: mpich libmpich-dev) or set CC/MPICC])])
  AC_REQUIRE([AC_PROG_CC])
  AC_MSG_CHECKING([whether $CC builds MPI programs])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                                  [[int p; MPI_Init_thread(0, 0, MPI_THREAD_FUNNELED, &p); MPI_Finalize();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([$CC cannot build an MPI program (mpi.h / MPI_Init_thread): use MPICH's mpicc])])
])
