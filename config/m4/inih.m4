# MP_CHECK_INIH: the INI parser for input decks, from a kept library (Debian: libinih-dev).
# Link it before MPI/HDF5: UCX bundles inih's functions under the same names (Makefile.am).
AC_DEFUN([MP_CHECK_INIH], [
  PKG_CHECK_MODULES([INIH], [inih], [],
    [mp_save_LIBS="$LIBS"
     AC_CHECK_LIB([inih], [ini_parse_file], [INIH_LIBS="-linih"],
       [AC_MSG_ERROR([libinih not found: install libinih-dev])])
     LIBS="$mp_save_LIBS"])
  mp_inih_summary="$INIH_LIBS"
  AC_SUBST([INIH_CFLAGS]) AC_SUBST([INIH_LIBS])
])
