# The kit's rule for shared libraries, sourced by kit.sh (what to pack) and kit_check.sh (what may
# come from outside the kit): glibc's come from the machine, libstdc++ and libgcc_s too unless too
# old (then lib/compat), CUDA's (runtime, cuBLAS, NCCL, the driver's libcuda and NVML) always.
KIT_GLIBC_RE='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so)'
KIT_COMPAT_RE='^(libstdc\+\+\.so|libgcc_s\.so)'
KIT_CUDA_RE='^(libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libcuda\.so|libnvidia-ml\.so|libnvidia-)'
