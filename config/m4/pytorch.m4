# MP_CHECK_PYTORCH: the Python that runs the PyTorch reference tests (Debian's python3-torch works
# only with /usr/bin/python3). TORCH_PYTHON may name another interpreter. The reference is part of
# `make check`: when torch cannot be imported the check fails loudly rather than skipping.
AC_DEFUN([MP_CHECK_PYTORCH], [
  AC_ARG_VAR([TORCH_PYTHON], [Python interpreter with torch, h5py and numpy (default /usr/bin/python3)])
  AS_IF([test -z "$TORCH_PYTHON"], [TORCH_PYTHON=/usr/bin/python3])
  AC_MSG_CHECKING([whether $TORCH_PYTHON imports torch, h5py and numpy])
  AS_IF([$TORCH_PYTHON -c "import torch, h5py, numpy" >/dev/null 2>&1],
    [AC_MSG_RESULT([yes]); mp_torch_summary="$TORCH_PYTHON (torch `$TORCH_PYTHON -c 'import torch; print(torch.__version__)'`)"],
    [AC_MSG_RESULT([no]); mp_torch_summary="NOT FOUND: make check will fail its reference tests"
     AC_MSG_WARN([$TORCH_PYTHON cannot import torch/h5py/numpy: install python3-torch python3-h5py python3-numpy])])
])
