#!/usr/bin/env bash
# Fuzzing: builds every libFuzzer harness validation/fuzz/fuzz_NAME.c (clang through MPICH's
# wrapper, ASan + UBSan, UBSan fatal) against the project's C sources (the CPU build: every src/**/*.c
# but src/cli/main.c and the CUDA files; kernels/*.c) and runs each for SECONDS_EACH seconds on a
# scratch copy of its seed corpus validation/fuzz/corpus_NAME/ (the repository's corpora never grow).
#
#   bash validation/fuzz/run.sh [SECONDS_EACH] [BUILD_DIR] [NAME...]
#
# SECONDS_EACH: default 60 (CI); 3600 for a longer run. BUILD_DIR: a configured build tree (default
# build): its config.h and the HDF5, BLAS and inih flags configure found. NAME: fuzz_deck, fuzz_data,
# ... (default: every harness). Objects go to BUILD_DIR/fuzz (rebuilt when their sources change),
# crash inputs to BUILD_DIR/fuzz/crashes. Prints one line per harness,
#   fuzz_deck: 123456 runs, 0 crashes
# and exits non-zero if any harness crashed (its input kept and named) or did not build.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-60}
build=${2:-build}
shift $(( $# < 2 ? $# : 2 ))
case $build in /*) ;; *) build=$top/$build ;; esac
[ -f "$build/config.h" ] && [ -f "$build/Makefile" ] ||
    { echo "fuzz: $build is not a configured build tree (run ../configure there first)"; exit 2; }
command -v clang > /dev/null || { echo "fuzz: clang not found (bash .ci/deps.sh installs it)"; exit 2; }

out=$build/fuzz
mkdir -p "$out/obj" "$out/crashes"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in "$top"/validation/fuzz/fuzz_*.c; do names+=("$(basename "$f" .c)"); done
fi

# configure's flags for the dependencies, read from the build tree's Makefile.
mkvar() { sed -n "s/^$1 = //p" "$build/Makefile" | head -n 1; }
deps_cppflags="$(mkvar HDF5_CPPFLAGS) $(mkvar BLAS_CPPFLAGS) $(mkvar INIH_CFLAGS) $(mkvar ZMQ_CFLAGS) $(mkvar MHD_CFLAGS)
    $(mkvar JANSSON_CFLAGS)"
deps_libs="$(mkvar INIH_LIBS) $(mkvar ZMQ_LIBS) $(mkvar MHD_LIBS) $(mkvar JANSSON_LIBS) $(mkvar HDF5_LIBS) $(mkvar BLAS_LIBS) -lm"
san="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
incs="-I$build -I$top/kernels"
for d in "$top"/src/*/; do incs="$incs -I${d%/}"; done
cflags="-std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -DHAVE_CONFIG_H -g -O1 -fopenmp $san $incs $deps_cppflags"

# The library: every C source of the CPU build, one archive; each harness links what it needs.
cuda_only="src/device/nccl_grid.c src/device/backend_cuda.c src/device/backend_cuda_coll.c
    src/device/backend_cuda_p2p.c src/device/backend_cuda_offload.c src/device/backend_cuda_time.c"
srcs=()
for f in "$top"/kernels/*.c "$top"/src/*/*.c; do
    rel=${f#"$top"/}
    [ "$rel" = src/cli/main.c ] && continue
    case " $(echo $cuda_only) " in *" $rel "*) continue ;; esac
    srcs+=("$rel")
done
objname() { local o=${1//\//_}; echo "obj/${o%.c}.o"; }
{
    echo "CC = mpicc -cc=clang"
    echo "CFLAGS = $cflags"
    echo "OBJS = $(for s in "${srcs[@]}"; do printf '%s ' "$(objname "$s")"; done)"
    echo "libmp_fuzz.a: \$(OBJS)"
    printf '\trm -f $@ && ar rcs $@ $(OBJS)\n'
    for s in "${srcs[@]}"; do
        printf '%s: %s\n\t$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<\n' "$(objname "$s")" "$top/$s"
    done
    echo "-include \$(OBJS:.o=.d)"
} > "$out/Makefile"
echo "fuzz: building the library (clang, ASan + UBSan + libFuzzer) in $out"
if ! make -s -C "$out" -j2 libmp_fuzz.a > "$out/build.log" 2>&1; then
    tail -n 40 "$out/build.log"; echo "fuzz: the library did not build"; exit 1
fi

# allocator_may_return_null: a corrupt file may make HDF5 ask for terabytes; it copes with NULL.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$top/.ci/lsan.supp:print_suppressions=0
export HDF5_USE_FILE_LOCKING=FALSE OMP_NUM_THREADS=1
status=0
for name in "${names[@]}"; do
    src=$top/validation/fuzz/$name.c corpus=$top/validation/fuzz/corpus_${name#fuzz_}
    [ -f "$src" ] || { echo "$name: no $src"; status=1; continue; }
    # shellcheck disable=SC2086
    if ! mpicc -cc=clang $cflags -o "$out/$name" "$src" "$out/libmp_fuzz.a" $deps_libs > "$out/$name.build.log" 2>&1; then
        tail -n 20 "$out/$name.build.log"; echo "$name: did not build"; status=1; continue
    fi
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
    [ -d "$corpus" ] && cp -r "$corpus/." "$scratch/"
    # -close_fd_mask=3: the code under test reports every refused input on stderr; libFuzzer and the
    # sanitizers keep their own copy of it for their reports. -malloc_limit_mb: a single large malloc
    # is no fault (HDF5 allocates what a corrupt header claims and then fails the read; a real token
    # file may take gigabytes): memory actually used is what -rss_limit_mb bounds.
    "$out/$name" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=1048576 \
        -close_fd_mask=3 -print_final_stats=1 \
        -artifact_prefix="$out/crashes/$name-" "$scratch" > "$out/$name.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$name.log" | tail -n 1)
    [ -n "$runs" ] || runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$out/$name.log" | tail -n 1)
    rm -rf "$scratch"
    if [ $rc -eq 0 ]; then
        echo "$name: ${runs:-0} runs, 0 crashes"
    else
        status=1
        input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$out/$name.log" | tail -n 1)
        grep -E -m 12 'ERROR|SUMMARY|runtime error|#[0-9]+ 0x' "$out/$name.log"
        echo "$name: ${runs:-?} runs, 1 crash (exit $rc; input kept in ${input:-$out/crashes}; log $out/$name.log;" \
             "replay: $out/$name INPUT)"
    fi
done
exit $status
