# MP_CHECK_JANSSON: jansson, the serving front end's JSON, from a kept library (Debian: libjansson-dev).
# Required: CI installs it (.ci/deps.sh); there is no build of MindPipe without serving.
AC_DEFUN([MP_CHECK_JANSSON], [
  PKG_CHECK_MODULES([JANSSON], [jansson], [],
    [AC_MSG_ERROR([jansson not found by pkg-config: install libjansson-dev (bash .ci/deps.sh)])])
  mp_jansson_summary="$JANSSON_LIBS"
])
