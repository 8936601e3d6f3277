# MP_CHECK_MHD: libmicrohttpd, the serving HTTP front end, from a kept library (Debian: libmicrohttpd-dev).
# Required: CI installs it (.ci/deps.sh); there is no build of MindPipe without serving.
AC_DEFUN([MP_CHECK_MHD], [
  PKG_CHECK_MODULES([MHD], [libmicrohttpd], [],
    [AC_MSG_ERROR([libmicrohttpd not found by pkg-config: install libmicrohttpd-dev (bash .ci/deps.sh)])])
  mp_microhttpd_summary="$MHD_LIBS"
])
