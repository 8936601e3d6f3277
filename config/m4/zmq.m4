# MP_CHECK_ZMQ: ZeroMQ, the serving stages' messages (mindpipe serve), from a kept library (Debian: libzmq3-dev).
# Required: CI installs it (.ci/deps.sh); there is no build of MindPipe without serving.
AC_DEFUN([MP_CHECK_ZMQ], [
  PKG_CHECK_MODULES([ZMQ], [libzmq], [],
    [AC_MSG_ERROR([libzmq not found by pkg-config: install libzmq3-dev (bash .ci/deps.sh)])])
  mp_zmq_summary="$ZMQ_LIBS"
])
