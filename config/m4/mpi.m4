# MP_MPI_CC: choose the MPI compiler wrapper as CC (call before AC_PROG_CC). An explicit CC or
# MPICC wins; otherwise mpicc.mpich (Debian's MPICH), then mpicc.
AC_DEFUN([MP_MPI_CC], [
  AC_ARG_VAR([MPICC], [MPI C compiler wrapper (default: mpicc.mpich, then mpicc)])
  AS_IF([test -z "$CC"], [
    AS_IF([test -n "$MPICC"], [CC="$MPICC"],
          [AC_CHECK_PROGS([CC], [mpicc.mpich mpicc])])
  ])
  AS_IF([test -z "$CC"],
    [AC_MSG_ERROR([no MPI compiler wrapper found: install MPICH (Debian: mpich libmpich-dev) or set CC/MPICC])])
])

# MP_CHECK_MPI: CC must build and link an MPI program (call after AC_PROG_CC).
AC_DEFUN([MP_CHECK_MPI], [
  AC_MSG_CHECKING([whether $CC builds MPI programs])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                                  [[int p; MPI_Init_thread(0, 0, MPI_THREAD_FUNNELED, &p); MPI_Finalize();]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([$CC cannot build an MPI program (mpi.h / MPI_Init_thread): use MPICH's mpicc])])
  AC_PATH_PROGS([MPIEXEC], [mpiexec.mpich mpiexec mpirun], [mpiexec])
  AC_SUBST([MPIEXEC])
])
