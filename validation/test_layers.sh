#!/bin/sh
# The layering of Makefile.am, checked on the built libraries' symbols:
#  (a) every symbol a layer library needs is defined in itself, in a layer below it (one whose
#      headers its I_<LAYER> include flags let it see), or outside the project (libc, MPI, HDF5,
#      BLAS: defined by no project library); an upward or sideways call names the symbol and both
#      libraries;
#  (b) core and sched need no MPI_* or H5* symbol;
#  (c) a program linked with plain cc (not mpicc) against only libmp_sched.a and libmp_core.a
#      (validation/unit/test_sim_nompi.c) links, runs its checks, and loads neither MPI nor HDF5;
#  (d) the tokenizers need no HDF5: no file of src/tok includes hdf5.h or a header that reads HDF5,
#      and libmp_tok.a needs no H5* symbol.
. "$(dirname "$0")/lib.sh"
mp_scratch_init

# Layers, lowest first (Makefile.am's comment); kernels and sched are side branches, which is why
# "below" means what the include flags allow, not the position in this list.
LAYERS="kernels core sched config comm obs device model tok ckpt data hf serve exec plan runtime train search infer cli"
lib_of() {
    case $1 in
        kernels) echo "$MP_BUILDDIR/kernels/libmp_kernels.a" ;;
        device) # the CUDA build's device code lives in a second library of the same layer
            echo "$MP_BUILDDIR/src/device/libmp_device.a"
            [ -f "$MP_BUILDDIR/src/device/libmp_cuda.a" ] && echo "$MP_BUILDDIR/src/device/libmp_cuda.a" ;;
        *) echo "$MP_BUILDDIR/src/$1/libmp_$1.a" ;;
    esac
}

missing=""
for l in $LAYERS; do
    for a in $(lib_of "$l"); do [ -f "$a" ] || missing="$missing $a"; done
done
ok "$([ -z "$missing" ] && echo 0 || echo 1)" "every layer library is built${missing:+ (missing:$missing)}"
[ -z "$missing" ] || done_testing

# What each layer may see: the folders in the expansion of its I_<LAYER> variable in Makefile.am.
# A variable's layer is the folder it adds itself, else its name: I_DATASETS adds src/data (automake
# takes any variable named X_DATA for files to install).
awk '
    /^I_[A-Z]+ = / { name = substr($1, 3); $1 = ""; $2 = ""; raw[name] = $0 }
    function own(n,    toks, i, t, k, o) {
        o = tolower(n)
        k = split(raw[n], toks, " ")
        for (i = 1; i <= k; i++) {
            t = toks[i]
            if (t ~ /^-I\$\(top_srcdir\)\/src\/[a-z]+$/) { sub(/^-I\$\(top_srcdir\)\/src\//, "", t); o = t }
            else if (t == "-I$(top_srcdir)/kernels") o = "kernels"
        }
        return o
    }
    function expand(n,    toks, i, t, out, k, m) {
        out = ""
        k = split(raw[n], toks, " ")
        for (i = 1; i <= k; i++) {
            t = toks[i]
            if (t ~ /^\$\(I_[A-Z]+\)$/) { m = substr(t, 5, length(t) - 5); out = out " " expand(m) }
            else if (t ~ /^-I\$\(top_srcdir\)\/src\/[a-z]+$/) { sub(/^-I\$\(top_srcdir\)\/src\//, "", t); out = out " " t }
            else if (t == "-I$(top_srcdir)/kernels") out = out " kernels"
        }
        return out
    }
    END { for (n in raw) print own(n) ":" expand(n) }
' "$MP_SRCDIR/Makefile.am" > "$SCRATCH/allowed.raw"
: > "$SCRATCH/allowed"
diag "what each layer may see (Makefile.am's I_* flags):"
for l in $LAYERS; do
    deps=$(sed -n "s/^$l://p" "$SCRATCH/allowed.raw" | tr ' ' '\n' | awk 'NF && !seen[$0]++' | tr '\n' ' ')
    echo "$l: $deps" >> "$SCRATCH/allowed"
    diag "  $l: $deps"
done

# The include graph must itself point down the documented order, and name every layer.
order_bad=""
pos=0
for l in $LAYERS; do
    pos=$((pos + 1))
    deps=$(sed -n "s/^$l://p" "$SCRATCH/allowed")
    case " $deps " in *" $l "*) ;; *) order_bad="$order_bad $l(no I_ flags naming itself)" ;; esac
    for d in $deps; do
        dpos=0 i=0
        for x in $LAYERS; do i=$((i + 1)); [ "$x" = "$d" ] && dpos=$i; done
        [ "$dpos" -gt 0 ] && [ "$dpos" -le "$pos" ] || order_bad="$order_bad $l->$d"
    done
done
ok "$([ -z "$order_bad" ] && echo 0 || echo 1)" \
    "Makefile.am's include flags point only down the layer order $LAYERS${order_bad:+ (wrong:$order_bad)}"

# One table of symbols: "D layer sym" (defined, global) and "U layer sym" (needed).
: > "$SCRATCH/syms"
for l in $LAYERS; do
    for a in $(lib_of "$l"); do
        nm -g --defined-only "$a" | awk -v l="$l" 'NF >= 3 { print "D", l, $3 }' >> "$SCRATCH/syms"
        nm -g -u "$a" | awk -v l="$l" '$1 == "U" || $1 == "w" { print "U", l, $2 }' >> "$SCRATCH/syms"
    done
done
sort -u "$SCRATCH/syms" -o "$SCRATCH/syms"

# A symbol defined by two layer libraries: which one a program gets depends on the link order.
dups=$(awk '$1 == "D" { n[$3]++; w[$3] = w[$3] " " $2 } END { for (s in n) if (n[s] > 1) print s " (" w[s] " )" }' \
    "$SCRATCH/syms" | sort)
ok "$([ -z "$dups" ] && echo 0 || echo 1)" "no symbol is defined by two layer libraries"
[ -z "$dups" ] || echo "$dups" | while IFS= read -r line; do diag "  defined twice: $line"; done

# (a) per layer: the needed symbols defined by another layer must come from one it may see.
for l in $LAYERS; do
    deps=$(sed -n "s/^$l://p" "$SCRATCH/allowed")
    awk -v l="$l" -v deps="$deps" '
        BEGIN { n = split(deps, d, " "); for (i = 1; i <= n; i++) ok[d[i]] = 1 }
        $1 == "D" { owner[$3] = $2; if ($2 == l) mine[$3] = 1 }
        $1 == "U" && $2 == l { need[$3] = 1 }
        END {
            for (s in need) {
                if (s in mine || !(s in owner)) continue
                o = owner[s]
                if (o in ok) used[o]++
                else printf "BAD %s: needed by libmp_%s.a (layer %s), defined in libmp_%s.a (layer %s, not below it)\n", s, l, l, o, o
            }
            for (o in used) printf "USES %s:%d\n", o, used[o]
        }
    ' "$SCRATCH/syms" | sort > "$SCRATCH/check.$l"
    bad=$(grep -c '^BAD' "$SCRATCH/check.$l")
    uses=$(sed -n 's/^USES //p' "$SCRATCH/check.$l" | tr '\n' ' ')
    ok "$([ "$bad" -eq 0 ] && echo 0 || echo 1)" \
        "layer $l: every project symbol it needs is its own or from a layer below (${uses:-none from other layers})"
    sed -n 's/^BAD /  upward: /p' "$SCRATCH/check.$l" | while IFS= read -r line; do diag "$line"; done
done

# (a') inside a layer: no circle between its files (object files of one library calling each other
# round). One layer still has one, listed and held where it is (files in circles, at most): device
# (backend.c's table of backends names backend_cpu/emu, whose functions call back into backend.c's
# helpers). A new circle anywhere, or a larger one, fails.
CIRCLES_KNOWN="device:5"
# the CUDA build's backend_cuda and backend_cuda_coll join device's (the same table)
[ -f "$MP_BUILDDIR/src/device/libmp_cuda.a" ] && CIRCLES_KNOWN="device:7"
for l in $LAYERS; do
    for a in $(lib_of "$l"); do
        nm -A -g "$a" 2>/dev/null | awk -F'[: ]+' 'NF >= 4 && $(NF-1) ~ /^[TDBRCVW]$/ { print "D", $2, $NF }
                                                    NF >= 3 && $(NF-1) == "U" { print "U", $2, $NF }'
    done > "$SCRATCH/objs.$l"
    "$TORCH_PYTHON" - "$SCRATCH/objs.$l" > "$SCRATCH/cyc.$l" 2>&1 <<'PY'
import sys
defs, uses = {}, []
for line in open(sys.argv[1]):
    k, obj, sym = line.split()
    obj = obj.split("-", 1)[-1].rsplit(".o", 1)[0]  # libmp_runtime_a-run.o -> run
    if k == "D":
        defs[sym] = obj
    else:
        uses.append((obj, sym))
g = {}
for obj, sym in uses:
    o = defs.get(sym)
    if o and o != obj:
        g.setdefault(obj, set()).add(o)
# strongly connected components (Tarjan): each one of two or more files is a circle
idx, low, st, on, out, n = {}, {}, [], set(), [], [0]
def visit(v):
    idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
    for w in sorted(g.get(v, ())):
        if w not in idx:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        c = []
        while True:
            w = st.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1: out.append(sorted(c))
sys.setrecursionlimit(10000)
for v in sorted(set(g) | {w for s in g.values() for w in s}):
    if v not in idx: visit(v)
for c in out: print("CYCLE " + " ".join(c))
print("FILES %d" % len(set(defs.values())))
PY
    ncyc=$(grep -c '^CYCLE' "$SCRATCH/cyc.$l")
    nfiles=$(sed -n 's/^FILES //p' "$SCRATCH/cyc.$l")
    known=$(echo "$CIRCLES_KNOWN" | tr ' ' '\n' | sed -n "s/^$l://p")
    nin=$(( $(grep '^CYCLE' "$SCRATCH/cyc.$l" | wc -w) - ncyc ))
    if [ -n "$known" ]; then
        ok "$([ -n "$nfiles" ] && [ "$ncyc" -le 1 ] && [ "$nin" -le "$known" ] && echo 0 || echo 1)" \
            "layer $l: its one known circle does not grow ($ncyc circle(s) of $nin of its $nfiles files; at most 1 of $known)"
    else
        ok "$([ -n "$nfiles" ] && [ "$ncyc" -eq 0 ] && echo 0 || echo 1)" "layer $l: no circle between its $nfiles files"
    fi
    sed -n 's/^CYCLE /  calls each other round: /p' "$SCRATCH/cyc.$l" | while IFS= read -r line; do diag "$line"; done
done

# (b) the MPI-free layers need no MPI and no HDF5.
for l in core sched; do
    found=$(awk -v l="$l" '$1 == "U" && $2 == l && $3 ~ /^(P?MPI_|H5|MPIX_|ompi_|mpich)/ { print $3 }' "$SCRATCH/syms" |
        tr '\n' ' ')
    ok "$([ -z "$found" ] && echo 0 || echo 1)" "libmp_$l.a needs no MPI_* or H5* symbol${found:+ (needs: $found)}"
done

# (c) plain cc against sched and core only. Sanitizer builds: the same runtime flags as the libraries.
CC_PLAIN=${MP_PLAIN_CC:-cc}
san=""
nm "$MP_BUILDDIR/src/core/libmp_core.a" 2>/dev/null | grep -q ' U __asan_' && san="$san -fsanitize=address"
nm "$MP_BUILDDIR/src/core/libmp_core.a" 2>/dev/null | grep -q ' U __ubsan_' && san="$san -fsanitize=undefined"
prog="$SCRATCH/test_sim_nompi"
# shellcheck disable=SC2086
$CC_PLAIN -std=c11 -D_POSIX_C_SOURCE=200809L $san -I"$MP_SRCDIR/src/core" -I"$MP_SRCDIR/src/sched" \
    -I"$MP_SRCDIR/validation/unit" "$MP_SRCDIR/validation/unit/test_sim_nompi.c" \
    "$MP_BUILDDIR/src/sched/libmp_sched.a" "$MP_BUILDDIR/src/core/libmp_core.a" -lm -o "$prog" \
    > "$SCRATCH/cc.log" 2>&1
rc=$?
ok $rc "plain $CC_PLAIN (no mpicc, no MPI or HDF5 flags) links test_sim_nompi.c against libmp_sched.a and libmp_core.a only"
[ $rc -eq 0 ] || while IFS= read -r line; do diag "  $line"; done < "$SCRATCH/cc.log"
if [ $rc -eq 0 ]; then
    "$prog" > "$SCRATCH/run.log" 2>&1
    rc=$?
    while IFS= read -r line; do diag "  $line"; done < "$SCRATCH/run.log"
    grep -q '^1\.\.[1-9]' "$SCRATCH/run.log" && ! grep -q '^not ok' "$SCRATCH/run.log"
    ok $((rc + $?)) "it runs: sim_run 1f1b pp=4 m=8 peak stash [4,3,2,1], sim_nccl_run passes (every check ok)"
    libs=$(ldd "$prog" 2>&1)
    found=$(echo "$libs" | grep -Ei 'libmpi|mpich|hdf5|libucp|libucs' | awk '{print $1}' | tr '\n' ' ')
    ok "$([ -z "$found" ] && echo 0 || echo 1)" "ldd: the program loads no MPI and no HDF5${found:+ (loads: $found)}"
else
    ok 1 "it runs (not built)"
    ok 1 "ldd: the program loads no MPI and no HDF5 (not built)"
fi

# Config sees sched (the deck's parallel.schedule is a sched_kind_t), and through it every room above
# config could; but only config, exec and the rooms above exec include a sched header: the model,
# tokenizers, checkpoints, datasets, Hugging Face formats, backends and serving know nothing of
# schedules (ARCHITECTURE.md "Layers").
sched_h=$(cd "$MP_SRCDIR/src/sched" && ls ./*.h | sed 's|^\./||')
blind=""
for l in comm obs device model tok ckpt data hf serve; do
    for h in $sched_h; do
        hits=$(grep -l "#include \"$h\"" "$MP_SRCDIR/src/$l"/*.[ch] 2>/dev/null | sed "s|^$MP_SRCDIR/||" | tr '\n' ' ')
        [ -n "$hits" ] && blind="$blind $h in $hits"
    done
done
ok "$([ -z "$blind" ] && echo 0 || echo 1)" \
    "no file of comm, obs, device, model, tok, ckpt, data, hf or serve includes a sched header ($(echo $sched_h | wc -w) headers)${blind:+ (found:$blind)}"

# (d) The tokenizers need no HDF5 (they compile without its flags): the HDF5 half of them, what a
# token file or checkpoint records, is ckpt's tok_files. The headers that read HDF5: hdf5.h, every
# project header that includes it, and every header of ckpt and data (the rooms that read HDF5 files).
h5_h=$(cd "$MP_SRCDIR/src" && { echo hdf5.h; grep -lE '#include *<hdf5\.h>' ./*/*.h; ls ckpt/*.h data/*.h; } |
    sed 's|.*/||' | sort -u | tr '\n' ' ')
tok_h5=""
for h in $h5_h; do
    hits=$(grep -lF -e "#include <$h>" -e "#include \"$h\"" "$MP_SRCDIR/src/tok"/*.[ch] "$MP_SRCDIR/src/tok"/*.cc \
        2>/dev/null | sed "s|^$MP_SRCDIR/||" | tr '\n' ' ')
    [ -n "$hits" ] && tok_h5="$tok_h5 $h in $hits"
done
ok "$([ -z "$tok_h5" ] && echo 0 || echo 1)" \
    "no file of src/tok includes hdf5.h or a header that reads HDF5 ($(echo $h5_h))${tok_h5:+ (found:$tok_h5)}"
found=$(awk '$1 == "U" && $2 == "tok" && $3 ~ /^H5/ { print $3 }' "$SCRATCH/syms" | tr '\n' ' ')
ok "$([ -z "$found" ] && echo 0 || echo 1)" "libmp_tok.a needs no H5* symbol${found:+ (needs: $found)}"
done_testing
