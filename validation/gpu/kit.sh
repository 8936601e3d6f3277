#!/usr/bin/env bash
# Makes the GPU kit (docs/GPU.md): everything a GPU machine that has CUDA, cuBLAS, NCCL and python
# but no MPI, HDF5, BLAS or our other libraries needs to run validation/gpu/bringup.sh.
#
#   bash validation/gpu/kit.sh [--build DIR] [--gencode FLAGS] [--out DIR]
#
# 1. builds ./configure --with-cuda --with-nvcc-gencode=FLAGS (default sm_90: H100, H200) in its own
#    folder (default build-gpukit; an existing configured folder is reused, e.g. CI's build-cuda);
# 2. stages bin/ (mindpipe, MPICH's mpiexec and hydra_pmi_proxy, the NCCL stand-in's standin_test),
#    lib/standin (the NCCL stand-in, validation/nccl_standin), lib/ (every shared library they
#    load that is not glibc or CUDA's: ldd's closure, UCX's transport modules in lib/ucx,
#    libstdc++ and libgcc_s apart in lib/compat, used only where the device's are older), data/
#    (the bundled KJV as tokens), decks/ (validation/gpu/decks), ref/ (the CPU reference runs the
#    bring-up compares against, made here with the staged programs) and MANIFEST.txt;
# 3. packs it, stripped and xz-compressed, as OUT/kit.tar.xz (default gpukit/, git-ignored) and
#    checks it: the libraries resolve from the kit (kit_check.sh), and what travels to a device
#    machine (the working tree plus gpukit/) stays under 64 MiB.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=$top/build-gpukit
gencode="-gencode=arch=compute_90,code=sm_90"
out=$top/gpukit
cuda=${CUDA_HOME:-/usr/local/cuda}
while [ $# -gt 0 ]; do
    case "$1" in
        --build) build=$2; shift ;;
        --gencode) gencode=$2; shift ;;
        --out) out=$2; shift ;;
        *) echo "usage: kit.sh [--build DIR] [--gencode FLAGS] [--out DIR]" >&2; exit 2 ;;
    esac
    shift
done
limit=$((64 * 1024 * 1024))
say() { echo "kit: $*"; }
t0=$(date +%s)

# ---- 1. the CUDA build ----
mkdir -p "$build"
build=$(cd "$build" && pwd)
if [ ! -f "$build/Makefile" ]; then
    [ -x "$top/configure" ] || (cd "$top" && autoreconf -fi >/dev/null)
    say "configure --with-cuda=$cuda --with-nvcc-gencode=\"$gencode\" in $build"
    (cd "$build" && "$top/configure" --with-cuda="$cuda" --with-nvcc-gencode="$gencode" > configure.log 2>&1) ||
        { tail -n 30 "$build/configure.log"; exit 1; }
fi
grep -q -- "--with-cuda" "$build/config.log" || { echo "kit: $build is not a --with-cuda build" >&2; exit 1; }
built_gencode=$(sed -n 's/^ *CUDA \.* .*(.*; \(.*\))$/\1/p' "$build/configure.log" 2>/dev/null | tail -n 1)
case "$built_gencode" in
    *sm_90*) ;;
    *) echo "kit: $build was configured for '${built_gencode:-?}', not sm_90 (H100/H200): use another --build" >&2; exit 1 ;;
esac
say "make in $build"
(cd "$build" && make -j2 > make.log 2>&1 && make validation/nccl_standin/standin_test >> make.log 2>&1) ||
    { tail -n 40 "$build/make.log"; exit 1; }
bin=$build/src/mindpipe

# ---- 2. the stage ----
stage=$build/kit-stage
rm -rf "$stage"
mkdir -p "$stage"/{bin,lib/ucx,lib/compat,lib/standin,data,decks,ref}
install -m 755 "$bin" "$stage/bin/mindpipe"
# the NCCL stand-in (validation/nccl_standin): ranks_nccl puts lib/standin first on the library path;
# its core's test program for the dry run's planted mismatch
install -m 755 "$build/validation/nccl_standin/libnccl.so.2" "$stage/lib/standin/libnccl.so.2"
install -m 755 "$build/validation/nccl_standin/standin_test" "$stage/bin/standin_test"
hydra=$(readlink -f "$(command -v mpiexec.hydra)")
install -m 755 "$hydra" "$stage/bin/mpiexec"
install -m 755 "$(dirname "$hydra")/hydra_pmi_proxy" "$stage/bin/hydra_pmi_proxy"
strip --strip-unneeded "$stage"/bin/*

# libraries: the closure of ldd over the programs and UCX's modules, less glibc and CUDA
. "$here/kit_libs.sh"
ucxdir=$(dirname "$(ldd "$bin" | awk '/libucs\.so/ {print $3}')")/ucx
add_deps() {  # add_deps FILE: copies FILE's dependencies into the stage
    ldd "$1" | while read -r name arrow path _; do
        [ "$arrow" = "=>" ] || continue
        [[ $name =~ $KIT_GLIBC_RE ]] || [[ $name =~ $KIT_CUDA_RE ]] && continue
        [ "$path" = "not found" ] && { echo "kit: $1 needs $name, not found here" >&2; exit 1; }
        if [[ $name =~ $KIT_COMPAT_RE ]]; then dest=$stage/lib/compat/$name; else dest=$stage/lib/$name; fi
        [ -e "$dest" ] || cp -L "$path" "$dest"
    done
}
for f in "$stage"/bin/*; do add_deps "$f"; done
# UCX's shared-memory transport (cma) is a module UCX loads from lib/ucx beside libucs; the
# InfiniBand and RDMA-CM modules are left out (they need the verbs libraries, and one node
# needs neither)
for m in "$ucxdir"/libuct_cma.so.0; do
    [ -e "$m" ] && cp -L "$m" "$stage/lib/ucx/$(basename "$m")" && add_deps "$m"
done
for f in "$stage"/lib/*.so* "$stage"/lib/ucx/*.so*; do add_deps "$f"; done
add_deps "$stage/lib/standin/libnccl.so.2"
chmod 644 "$stage"/lib/*.so* "$stage"/lib/ucx/*.so* "$stage"/lib/compat/*.so* "$stage"/lib/standin/*.so* 2>/dev/null || true
strip --strip-unneeded "$stage"/lib/*.so* "$stage"/lib/ucx/*.so* "$stage"/lib/compat/*.so* "$stage"/lib/standin/*.so* 2>/dev/null || true

# data and decks
data=$top/build/validation/kjv.h5
if [ ! -s "$data" ]; then
    mkdir -p "$build/validation"
    data=$build/validation/kjv.h5
    [ -s "$build/validation/kjv.txt" ] || sh "$top/inputs/make_kjv.sh" "$build/validation/kjv.txt"
    [ -s "$data" ] || LD_LIBRARY_PATH="$stage/lib:$cuda/lib64:$cuda/lib" "$stage/bin/mindpipe" prep \
        --text "$build/validation/kjv.txt" --out "$data" > /dev/null
fi
cp "$data" "$stage/data/kjv.h5"
cp "$here"/decks/*.ini "$stage/decks/"

# the CPU references, made by the staged programs with the staged libraries
kit_ld="$stage/lib:$cuda/lib64:$cuda/lib"
say "CPU reference runs (bringup.sh --make-refs)"
KIT=$stage KIT_LD=$kit_ld PY=/usr/bin/python3 bash "$here/bringup.sh" --make-refs "$stage/ref" ||
    { echo "kit: a reference run failed:" >&2; tail -n 5 "$stage"/ref/*.log >&2; exit 1; }

# the manifest: what is inside and what it needs of the device machine
glibc=$(for f in "$stage"/bin/* "$stage"/lib/*.so* "$stage"/lib/ucx/*.so*; do objdump -T "$f" 2>/dev/null; done |
        grep -o 'GLIBC_[0-9.]*' | sort -t. -k2,2n -k3,3n -u | tail -n 1)
glibcxx=$(for f in "$stage"/bin/* "$stage"/lib/*.so*; do objdump -T "$f" 2>/dev/null; done |
          grep -o 'GLIBCXX_[0-9.]*' | sort -t. -k2,2n -k3,3n -u | tail -n 1)
{
    echo "MindPipe GPU kit, made $(date -u +%FT%TZ) on $(hostname)"
    echo "commit: $(git -C "$top" rev-parse HEAD 2>/dev/null)$(git -C "$top" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "nvcc: $("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'); gencode: $built_gencode"
    echo "needs of the device machine: glibc with $glibc, libstdc++ with $glibcxx (else lib/compat), CUDA 13's"
    echo "cudart, cuBLAS and cuBLASLt, NCCL 2 (found there by bringup.sh), python3 with numpy and h5py (torch for the peer)"
    echo "MPICH: $(mpichversion 2>/dev/null | sed -n 's/MPICH Version: *//p' | head -n 1)"
    echo
    (cd "$stage" && find . -type f | sort | while read -r f; do printf '%10d  %s\n' "$(stat -c %s "$f")" "$f"; done)
} > "$stage/MANIFEST.txt"

# ---- 3. pack and check ----
mkdir -p "$out"
tar -C "$stage" -cf - . | xz -T2 -6 > "$out/kit.tar.xz.tmp"
mv "$out/kit.tar.xz.tmp" "$out/kit.tar.xz"
cp "$stage/MANIFEST.txt" "$out/MANIFEST.txt"
say "checking the kit's libraries (kit_check.sh)"
bash "$here/kit_check.sh" "$stage" "$kit_ld" --run "$stage/data/kjv.h5"

unpacked=$(du -sb "$stage" | cut -f1)
packed=$(stat -c %s "$out/kit.tar.xz")
tree=$(cd "$top" && git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)
kitdir=$(du -sb "$out" | cut -f1)
travel=$((tree + kitdir))
say "unpacked $((unpacked / 1024)) KiB, packed $((packed / 1024)) KiB ($out/kit.tar.xz)"
say "what travels to a device machine: working tree $((tree / 1024)) KiB + $(basename "$out")/ $((kitdir / 1024)) KiB = $((travel / 1024)) KiB of $((limit / 1024)) KiB"
say "done in $(( $(date +%s) - t0 )) s"
[ "$travel" -lt "$limit" ] || { echo "kit: over the 64 MiB that may travel" >&2; exit 1; }
