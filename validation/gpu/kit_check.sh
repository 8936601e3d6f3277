#!/usr/bin/env bash
# Checks that an unpacked GPU kit (validation/gpu/kit.sh) needs nothing of this machine but the C
# library, libstdc++ and CUDA's own libraries:
#
#   kit_check.sh KIT LD_LIBRARY_PATH [--run DATA]
#
# 1. ldd of every program in KIT/bin and every library in KIT/lib, with the given library path:
#    each dependency resolves, and outside the C library (glibc, libstdc++, libgcc_s) and CUDA
#    (cudart, cuBLAS, NCCL, the driver's libcuda and NVML) it resolves into KIT/lib.
# 2. with --run: two ranks of the kit's mindpipe under the kit's mpiexec train 2 steps on cpu with
#    LD_DEBUG=files, and every library the processes loaded, dlopen'd ones too (UCX's transports),
#    passes the same rule. Prints one line per finding; exit 0 when all pass.
set -uo pipefail
kit=${1:?usage: kit_check.sh KIT LD_LIBRARY_PATH [--run DATA]}
ld=${2:?usage: kit_check.sh KIT LD_LIBRARY_PATH [--run DATA]}
data=""
[ "${3:-}" = "--run" ] && data=${4:?--run needs the data file}
kit=$(cd "$kit" && pwd)
bad=0 n=0

. "$(dirname "$0")/kit_libs.sh"

# judge NAME PATH WHO: one dependency of WHO
judge() {
    local name=$1 path=$2 who=$3
    n=$((n + 1))
    if [ "$path" = "not found" ] || [ -z "$path" ]; then
        echo "FAIL $who: $name not found"; bad=$((bad + 1)); return
    fi
    case "$path" in "$kit"/lib/*) return ;; esac
    if [[ $name =~ $KIT_GLIBC_RE ]] || [[ $name =~ $KIT_COMPAT_RE ]] || [[ $name =~ $KIT_CUDA_RE ]]; then return; fi
    echo "FAIL $who: $name from $path, not from the kit"; bad=$((bad + 1))
}

files=$(find "$kit/bin" -type f; find "$kit/lib" -name '*.so*' -type f)
for f in $files; do
    out=$(LD_LIBRARY_PATH="$ld" ldd "$f" 2>&1)
    if echo "$out" | grep -q "version .* not found"; then
        echo "FAIL ${f#$kit/}: $(echo "$out" | grep -m1 'version .* not found')"; bad=$((bad + 1))
    fi
    while read -r name arrow path _; do
        case "$name" in statically|not) continue ;; esac
        if [ "$arrow" = "=>" ]; then
            judge "$name" "$path" "${f#$kit/}"
        elif [[ $name == /* ]]; then
            judge "$(basename "$name")" "$name" "${f#$kit/}"
        fi
    done <<< "$out"
done
echo "kit_check: ldd of $(echo "$files" | wc -w) files, $n dependencies, $bad outside the kit or missing"

if [ -n "$data" ]; then
    tmp=$(mktemp -d)
    LD_DEBUG=files LD_DEBUG_OUTPUT=$tmp/ld LD_LIBRARY_PATH="$ld" UCX_MODULE_DIR="$kit/lib/ucx" OMP_WAIT_POLICY=PASSIVE \
        timeout -k 5 60 "$kit/bin/mpiexec" -n 2 "$kit/bin/mindpipe" train -c "$kit/decks/tiny.ini" \
        --set "data.path=$data" --set train.device=cpu --set train.steps=2 --set train.warmup=1 --set parallel.dp=2 \
        --set checkpoint.every=0 --out "$tmp/run" --quiet > "$tmp/run.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then echo "FAIL the 2-rank run exited $rc: $(tail -n 3 "$tmp/run.log")"; bad=$((bad + 1)); fi
    loaded=$(cat "$tmp"/ld.* 2>/dev/null | sed -n 's/.*calling init: \(.*\)$/\1/p' | sort -u)
    m=0
    for p in $loaded; do
        m=$((m + 1))
        judge "$(basename "$p")" "$p" "loaded at run time"
    done
    [ "$m" -gt 10 ] || { echo "FAIL LD_DEBUG saw only $m loaded libraries"; bad=$((bad + 1)); }
    echo "kit_check: 2 ranks under the kit's mpiexec loaded $m libraries (LD_DEBUG), $(echo "$loaded" | grep -c "$kit/lib/") from the kit"
    rm -rf "$tmp"
fi
[ "$bad" -eq 0 ]
