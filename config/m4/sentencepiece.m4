# MP_CHECK_SENTENCEPIECE: SentencePiece (Debian: libsentencepiece-dev) for `mindpipe prep --tokenizer
# sp`, through the C++ shim src/tok/sp_shim.cc. --with-sentencepiece=guess|yes|no|DIR. guess: used when
# found; yes: an error when not found; no: not used (`--tokenizer sp` then says the build has none);
# DIR: DIR/include and DIR/lib. Needs AC_PROG_CXX first. Sets SP_CPPFLAGS, SP_LDFLAGS, SP_LIBS
# without touching the global flags; defines MP_HAVE_SENTENCEPIECE; conditional HAVE_SENTENCEPIECE.
# SP_LIBS names libstdc++: the programs are linked by the C compiler driver (their sources are C),
# and the shim's own references into the C++ runtime must be resolved at link time.
AC_DEFUN([MP_CHECK_SENTENCEPIECE], [
  AC_ARG_WITH([sentencepiece],
    [AS_HELP_STRING([--with-sentencepiece=guess|yes|no|DIR], [SentencePiece for prep --tokenizer sp (default guess)])],
    [], [with_sentencepiece=guess])
  SP_CPPFLAGS=""; SP_LDFLAGS=""; SP_LIBS=""
  mp_sp_found=no
  AS_IF([test "x$with_sentencepiece" != xno], [
    AS_CASE([$with_sentencepiece],
      [guess|yes], [],
      [SP_CPPFLAGS="-I$with_sentencepiece/include"; SP_LDFLAGS="-L$with_sentencepiece/lib"])
    AC_LANG_PUSH([C++])
    mp_save_CPPFLAGS="$CPPFLAGS"; mp_save_LDFLAGS="$LDFLAGS"; mp_save_LIBS="$LIBS"
    CPPFLAGS="$CPPFLAGS $SP_CPPFLAGS"; LDFLAGS="$LDFLAGS $SP_LDFLAGS"
    LIBS="-lsentencepiece_train -lsentencepiece $LIBS"
    AC_MSG_CHECKING([for SentencePiece (sentencepiece_trainer.h, libsentencepiece_train)])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <sentencepiece_trainer.h>
#include <sentencepiece_processor.h>]],
        [[sentencepiece::SentencePieceProcessor p; std::string m;
          return sentencepiece::SentencePieceTrainer::Train("", nullptr, &m).ok() + p.GetPieceSize();]])],
      [mp_sp_found=yes], [])
    AC_MSG_RESULT([$mp_sp_found])
    CPPFLAGS="$mp_save_CPPFLAGS"; LDFLAGS="$mp_save_LDFLAGS"; LIBS="$mp_save_LIBS"
    AC_LANG_POP([C++])
    AS_IF([test "x$mp_sp_found" = xno && test "x$with_sentencepiece" != xguess],
      [AC_MSG_ERROR([SentencePiece not found: install libsentencepiece-dev (bash .ci/deps.sh) or pass --with-sentencepiece=DIR])])
  ])
  AS_IF([test "x$mp_sp_found" = xyes],
    [SP_LIBS="-lsentencepiece_train -lsentencepiece -lstdc++"
     AC_DEFINE([MP_HAVE_SENTENCEPIECE], [1], [Define when prep --tokenizer sp is built])
     mp_sentencepiece_summary="$SP_CPPFLAGS $SP_LDFLAGS $SP_LIBS"],
    [SP_CPPFLAGS=""; SP_LDFLAGS=""
     mp_sentencepiece_summary="no (prep --tokenizer sp refused)"])
  AM_CONDITIONAL([HAVE_SENTENCEPIECE], [test "x$mp_sp_found" = xyes])
  AC_SUBST([SP_CPPFLAGS]) AC_SUBST([SP_LDFLAGS]) AC_SUBST([SP_LIBS])
])
