#!/bin/sh
# The Llama kernels against PyTorch (Debian's python3-torch): validation/unit/llama_dump writes the
# kernels' inputs, outputs and gradients, validation/llama_kernels_torch.py recomputes them in
# Hugging Face's formulas with autograd and prints one PASS/FAIL line per tensor.
. "${MP_SRCDIR:-$(dirname "$0")/..}/validation/lib.sh"
mp_require_torch
mp_scratch_init
"$MP_BUILDDIR/validation/unit/llama_dump" "$SCRATCH" > "$SCRATCH/dump.out" 2>&1
ok $? "llama_dump wrote the kernels' tensors"
"$TORCH_PYTHON" "$MP_SRCDIR/validation/llama_kernels_torch.py" "$SCRATCH" > "$SCRATCH/torch.out" 2>&1
tap_checker torch llama_kernels_torch.py $? "$SCRATCH/torch.out"
done_testing
