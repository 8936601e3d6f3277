/* `mindpipe selftest --device cpu|cuda[:N]`: every GPU kernel against its CPU twin on one node.
 *
 * For "cuda" each kernel runs on fixed-seed random inputs through kernels.h (CPU) and kernels_cuda.h
 * (GPU): outputs assigned (=) start as NaN on the GPU, so an element the kernel forgot stays NaN and
 * fails; outputs accumulated (+=) start from the same random values on both sides. A kernel passes
 * when nothing is NaN and the norm-wise relative error ||gpu − cpu|| / ||cpu|| is below 1e-5 in fp32
 * (1e-2 for products with bf16 inputs; matmul and attention run in both precisions). One line per
 * kernel: "ok|FAIL name rel=...". */
#ifndef MP_SELFTEST_H
#define MP_SELFTEST_H

/* Process exit code: 0 all passed (or device "cpu": those kernels are checked by make check),
 * 1 a kernel failed or no usable CUDA device, 2 a build without the CUDA backend or an unknown
 * device. verbose prints every output's error. Not collective: run it on one rank. */
int selftest_run(const char *device, int verbose);

#endif
