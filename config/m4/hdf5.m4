# MP_CHECK_HDF5: parallel HDF5 (MPI-IO driver) for datasets and checkpoints.
# --with-hdf5=guess|yes|DIR. guess/yes: pkg-config hdf5-mpich (Debian names the MPICH flavour
# explicitly; "hdf5" is an alternatives link). DIR: DIR/include and DIR/lib.
# Sets HDF5_CPPFLAGS, HDF5_LDFLAGS, HDF5_LIBS without touching the global flags.
AC_DEFUN([MP_CHECK_HDF5], [
  AC_ARG_WITH([hdf5],
    [AS_HELP_STRING([--with-hdf5=guess|yes|DIR], [parallel HDF5 (required)])],
    [], [with_hdf5=guess])
  AS_IF([test "x$with_hdf5" = xno], [AC_MSG_ERROR([HDF5 is required (datasets and checkpoints)])])
  AC_REQUIRE([PKG_PROG_PKG_CONFIG])
  HDF5_CPPFLAGS=""; HDF5_LDFLAGS=""; HDF5_LIBS=""
  AS_CASE([$with_hdf5],
    [guess|yes], [PKG_CHECK_MODULES([HDF5PC], [hdf5-mpich],
                    [HDF5_CPPFLAGS="$HDF5PC_CFLAGS"; HDF5_LIBS="$HDF5PC_LIBS"],
                    [HDF5_LIBS="-lhdf5"])],
    [HDF5_CPPFLAGS="-I$with_hdf5/include"; HDF5_LDFLAGS="-L$with_hdf5/lib"; HDF5_LIBS="-lhdf5"])
  mp_save_CPPFLAGS="$CPPFLAGS"; mp_save_LDFLAGS="$LDFLAGS"; mp_save_LIBS="$LIBS"
  CPPFLAGS="$CPPFLAGS $HDF5_CPPFLAGS"; LDFLAGS="$LDFLAGS $HDF5_LDFLAGS"; LIBS="$HDF5_LIBS $LIBS"
  AC_MSG_CHECKING([for parallel HDF5 (H5Pset_fapl_mpio)])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <hdf5.h>]],
      [[hid_t p = H5Pcreate(H5P_FILE_ACCESS); H5Pset_fapl_mpio(p, MPI_COMM_WORLD, MPI_INFO_NULL);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([parallel HDF5 not found: install libhdf5-mpich-dev or pass --with-hdf5=DIR])])
  CPPFLAGS="$mp_save_CPPFLAGS"; LDFLAGS="$mp_save_LDFLAGS"; LIBS="$mp_save_LIBS"
  mp_hdf5_summary="$HDF5_CPPFLAGS $HDF5_LIBS"
  AC_SUBST([HDF5_CPPFLAGS]) AC_SUBST([HDF5_LDFLAGS]) AC_SUBST([HDF5_LIBS])
])
