#!/usr/bin/env bash
# The kernels' inner loops under llvm-mca (docs/kernels.md, "Inner loops under llvm-mca").
#
#   tools/mca_loops.sh [-o DIR] [-t]   prints markdown (from any directory)
#
# Each vector ISA's kernel files (the rows of src/kernels/isa_table.def that have flags)
# are compiled to assembly with the build's compiler and flags (CMakeLists.txt: the
# Release flags, -fPIC, -fopenmp, -std=c11, -D_GNU_SOURCE, the row's cflags) plus -g,
# which adds only debug directives: gcc emits the same instructions with and without it.
# No source is changed or copied. A loop is found by its backward conditional branch: the
# lines from the branch's target label down to the branch are one iteration of the hot
# path (a block placed after the branch, like qk_micro's prefetches of every 16th step,
# is not in it). Of the innermost loops of the kernel function whose lines carry a `.loc`
# of the template line that names the loop (LOOPS below), the instance is chosen by its
# FMA and broadcast counts (LOOPS' "which instance"), then the fewest masked
# instructions: the micro-tile the kernel runs, not a tail. Every loop of LOOPS must be
# found in every vector ISA: a template line that moved or an instance that changed
# shape stops the script with a message naming the loop and listing the candidates
# (exit 1), so the table cannot silently lose rows.
#
# Its instructions go to llvm-mca for each model. Per iteration: the predicted cycles,
# FMAs, loads, uops; the FMAs' share of the issue slots (FMAs / (cycles x dispatch width));
# how busy the FMA pipes are (FMAs / (cycles x the model's FMA rate), the rate measured by
# llvm-mca on independent FMAs of the loop's width and printed below the table; "hw" where
# the hardware's rate differs, see hw_rate); and what bounds the loop: the FMA pipes when
# >= 90% busy (unless load, store or integer ports are busier than the FMAs need: then
# those, with the FMA pipes' share), else the dispatch width when uops / width is >= 80%
# of the cycles and at least the busiest unit's pressure, else the busiest units (loads,
# stores, vector ports, integer ports) when their pressure is >= 80% of the cycles, else a
# dependency chain (the instruction llvm-mca's -bottleneck-analysis puts on the critical
# sequence).
#
# Environment: CC (default cc, as CMake; the legend "one iteration is" and the instance
# counts describe gcc's code: another compiler may unroll, clang 14 does the softmax max
# loop by 4), BUILD (the build directory checked against, default build), LLVM_MCA
# (default llvm-mca-14), MCA_CPUS (default: sapphirerapids znver3 znver4, each if this
# llvm-mca knows it).
# -o DIR keeps each loop's assembly (<loop>.<isa>.s) and llvm-mca's reports there.
# -t (the CTest entry, CMakeLists.txt): exit 77 (skipped) when llvm-mca is not installed.
set -euo pipefail

usage() { echo "usage: tools/mca_loops.sh [-o DIR] [-t]" >&2; exit 2; }
keep=""
absent=1
while getopts "o:th" opt; do
    case "$opt" in
    o) keep="$OPTARG" ;;
    t) absent=77 ;;
    *) usage ;;
    esac
done
[ "$OPTIND" -gt $# ] || usage
if [ -n "$keep" ]; then mkdir -p "$keep" && keep=$(cd "$keep" && pwd); fi
cd "$(dirname "$0")/.."
[ -f src/kernels/isa_table.def ] || { echo "mca_loops.sh: not in a tensorattn checkout" >&2; exit 2; }

CC="${CC:-cc}"
MCA="${LLVM_MCA:-llvm-mca-14}"
command -v "$MCA" >/dev/null || {
    echo "mca_loops.sh: $MCA not found (Debian: apt-get install llvm-14; or set LLVM_MCA)" >&2; exit "$absent"; }
command -v "$CC" >/dev/null || { echo "mca_loops.sh: compiler $CC not found" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mca() { "$MCA" -mtriple=x86_64-unknown-linux-gnu -iterations=1000 "$@"; }

# ---- the models this llvm-mca knows, and each one's FMA rate per vector width: 14
# independent FMAs (no chain is latency-bound) per iteration, FMAs per cycle; "-" where
# the model lacks the instructions (no AVX-512 on Zen 3)
known=$("$MCA" -mtriple=x86_64-unknown-linux-gnu -mcpu=help 2>&1 || true)
cpus=""
for c in ${MCA_CPUS:-sapphirerapids znver3 znver4}; do
    if grep -q "^ *$c " <<<"$known"; then cpus="$cpus $c"; else echo "mca_loops.sh: $MCA has no model '$c': left out" >&2; fi
done
[ -n "$cpus" ] || { echo "mca_loops.sh: no model to run" >&2; exit 1; }
rates=""
for c in $cpus; do
    for w in ymm zmm; do
        for i in $(seq 0 13); do echo "vfmadd231ps %${w}14, %${w}15, %${w}$i"; done >"$work/fma.$w.s"
        if r=$(mca -mcpu="$c" "$work/fma.$w.s" 2>/dev/null |
               awk '/^Iterations:/ { it = $2 } /^Instructions:/ { n = $2 } /^Total Cycles:/ { printf "%.2f", n / $3 }'); then
            rates="$rates $c:$w:$r"
        else
            rates="$rates $c:$w:-"
        fi
    done
done
rate_of() { tr ' ' '\n' <<<"$rates" | sed -n "s/^$1:$2://p"; }
# The hardware's FMA rate, where it differs from a model's: Sapphire Rapids two FMA ports
# (p0 and p1 for 256 bits, p0 and p5 for 512), Zen 3 and Zen 4 two 256-bit FMA pipes (Zen 4
# splits a 512-bit FMA into two halves). llvm-14's znver3 model issues one 256-bit FMA per
# cycle (its FPP0/FPP1 each held 2 cycles).
hw_rate() {
    case "$1:$2" in
    sapphirerapids:*|znver3:ymm|znver4:ymm) echo 2 ;;
    znver4:zmm) echo 1 ;;
    *) echo "$3" ;;
    esac
}

# ---- the build's flags (CMakeLists.txt) and the vector ISAs (isa_table.def rows with cflags)
release=$(sed -n 's/^set(CMAKE_C_FLAGS_RELEASE "\(.*\)")$/\1/p' CMakeLists.txt)
base="$release -fPIC -fopenmp -std=c11 -D_GNU_SOURCE -Iinclude -Isrc"
isas=$(sed -n 's/^TA_ISA([^,]*, *\([a-z0-9_]*\),.*"\(..*\)")$/\1/p' src/kernels/isa_table.def)
isa_flags() { sed -n "s/^TA_ISA([^,]*, *$1,.*\"\(.*\)\")\$/\1/p" src/kernels/isa_table.def; }

for isa in $isas; do
    for f in gemm attn attn_bwd attn_variants attn_rows; do
        src="src/kernels/${f}_${isa}.c"
        [ -f "$src" ] || continue
        # shellcheck disable=SC2046,SC2086
        "$CC" $base $(isa_flags "$isa") -g -S -o "$work/${f}_${isa}.s" "$src" &
    done
done
fail=0
for job in $(jobs -p); do wait "$job" || fail=1; done
[ "$fail" = 0 ] || { echo "mca_loops.sh: compiling the kernels failed" >&2; exit 1; }
# Where a CMake build holds these objects, check that its code is this code (a build
# older than the sources, or other flags, would differ): the instructions, not the debug
# sections, of the assembled .s against the build's .o.
objdir="${BUILD:-build}/CMakeFiles/tensorattn_objects.dir/src/kernels"
if command -v objdump >/dev/null; then
    for s in "$work"/*.s; do
        o="$objdir/$(basename "$s" .s).c.o"
        [ -f "$o" ] || continue
        "$CC" -c -o "$work/check.o" "$s"
        if ! cmp -s <(objdump -d --no-show-raw-insn "$work/check.o" | tail -n +4) \
                    <(objdump -d --no-show-raw-insn "$o" | tail -n +4); then
            echo "mca_loops.sh: note: $o differs from this compile (stale build or other flags)" >&2
        fi
    done
fi

# ---- the loops: name | kernel file | function (a regex; ISA stands for the ISA's name) |
#      template | an extended regular expression matching exactly one line of the
#      template, inside the loop | which instance (below) | what one iteration does
# Which instance: empty takes, of the innermost loops in the function that carry the
# line, the one with the most FMAs; "fma=E" the one with E FMAs, "bcast=E" the one with
# E broadcasts (distinct broadcast sources: a broadcast folded into several FMAs counts
# once), E an integer expression over the tile constants that the ISA's kernel file
# defines (#define KJ 8 ...). Ties go to the fewest masked instructions (a full tile,
# not a tail), or with "masked=most" to the most (of a function instantiated twice, the
# copy whose exps mask lanes: attn_template.h's SAFE), then the fewest instructions (gcc
# may keep a leaner copy of a loop for a special case the caller takes, like a packed A
# panel).
LOOPS='sgemm k loop|gemm|ta_sgemm_ISA_[0-9]+x[0-9]+|gemm_template.h|acc\[i\]\[v\] = V_FMA\(||one k step of the MR x NR tile
qk_micro d loop, NQ = 3 (full)|attn|ta_attn_qk_ISA_[0-9]+x[0-9]+|attn_template.h|acc\[j\]\[q\] = V_FMA\(kb|fma=3*KJ,bcast=KJ|one step of p: 3 query vectors x KJ keys
qk_micro d loop, NQ = 2|attn|ta_attn_qk_ISA_[0-9]+x[0-9]+|attn_template.h|acc\[j\]\[q\] = V_FMA\(kb|fma=2*KJ,bcast=KJ|one step of p: 2 query vectors x KJ keys
qk_micro d loop, NQ = 1|attn|ta_attn_qk_ISA_[0-9]+x[0-9]+|attn_template.h|acc\[j\]\[q\] = V_FMA\(kb|fma=KJ,bcast=KJ|one step of p: 1 query vector x KJ keys
attn_qk_rows d loop, DR rows|attn|ta_attn_qk_rows_ISA_[0-9]+|attn_template.h|acc\[r\]\[c\] = V_FMA\(V_LOADU\(q|fma=DR*DC|DC vectors of d for DR rows and one key (DC vectors of k, DR x DC of q)
attn_qk_rows d loop, 1 row|attn|ta_attn_qk_rows_ISA_[0-9]+|attn_template.h|acc\[r\]\[c\] = V_FMA\(V_LOADU\(q|fma=DC_FEW|DC_FEW vectors of d for 1 row and one key
pv_micro key loop (full tile)|attn|ta_attn_pv_ISA_[0-9]+x[0-9]+|attn_template.h|acc\[r\]\[c\] = V_FMA\(pb|fma=PR*PC,bcast=PR|one key: PR rows x PC vectors
few-rows P.V key loop, RP rows|attn|ta_attn_pv_ISA_[0-9]+x[0-9]+|attn_template.h|acc\[r\]\[c\] = V_FMA\(pb|fma=RP*PCW,bcast=RP|one key (pv_whole_rows): RP rows x PCW vectors (a whole V row of PCW vectors)
few-rows P.V key loop, 1 row|attn|ta_attn_pv_ISA_[0-9]+x[0-9]+|attn_template.h|acc\[r\]\[c\] = V_FMA\(pb|fma=PCW,bcast=1|one key (pv_whole_rows): 1 row x PCW vectors
pv_stream column loop, 1 row|attn|ta_attn_pv_ISA_[0-9]+x[0-9]+|attn_template.h|VT vv = V_LOADU\(vr \+ c \* VL\)|fma=1|one vector of a V row wider than PCW vectors, 1 row: o += p v, o read and written in L1
rows_kv Q.K^T d loop, bf16|attn_rows|ta_attn_qk_rows_bf16_ISA|attn_rows_template.h|acc\[j \* R \+ r\] = V_FMA\(qo\[r\], ko||one block of 2 VL of d (a shift and a mask widen a K block into its even and odd halves): R rows x VL / R keys, 2 VL FMAs
rows_kv Q.K^T d loop, bf16 dot|attn_rows|ta_attn_qk_rows_bf16dot_ISA|attn_rows_template.h|acc\[j \* R \+ r\] = V_DOT_BF16\(acc\[j \* R \+ r\], qv|isa=avx512bf16|one block of 2 VL of d, q and K as they lie (vdpbf16ps: 2 VL products each): R rows x VL / R keys, VL dot products (counted as FMAs)
qk_tile d loop, bf16 dot|attn_rows|ta_attn_qk_bf16dot_ISA_[0-9]+x[0-9]+|attn_rows_template.h|acc\[j\]\[q\] = V_DOT_BF16\(|isa=avx512bf16,fma=TILE_QV*TILE_KJ|one pair of d: TILE_QV vectors of query pairs x TILE_KJ keys (the pair of each key broadcast), TILE_QV x TILE_KJ dot products (counted as FMAs)
rows_kv Q.K^T d loop, f16|attn_rows|ta_attn_qk_rows_f16_ISA|attn_rows_template.h|acc\[j \* R \+ r\] = V_FMA\(qv\[r\], kv||one vector of d (vcvtph2ps widens each key row): R rows x VL / R keys, VL FMAs
rows_kv P.V key loop, bf16, 4 rows|attn_rows|ta_attn_pv_rows_bf16_ISA|attn_rows_template.h|acc\[r\]\[c\] = V_FMA\(pb\[r\], v0|fma=PV_ACC,bcast=4|one key: 4 rows x PV_ACC / 4 vectors of its V row, in pairs widened by a shift (even columns) and a mask (odd)
rows_kv P.V key loop, f16, 4 rows|attn_rows|ta_attn_pv_rows_f16_ISA|attn_rows_template.h|acc\[r\]\[c\] = V_FMA\(pb\[r\], v0|fma=PV_ACC,bcast=4|one key: 4 rows x PV_ACC / 4 vectors of its V row, widened by vcvtph2ps
softmax_rows exp loop|attn_rows|ta_attn_softmax_rows_ISA|attn_rows_template.h|const VT p1 = sm_p||two vectors of (key, row) lanes (two one-pass exps)
softmax max loop|attn|ta_attn_softmax_ISA_[0-9]+|attn_template.h|for \(; i \+ 4 <= full; i \+= 4\) SM_MAX4||four keys of one query vector (four chains)
softmax exp loop|attn|ta_attn_softmax_ISA_[0-9]+|attn_template.h|for \(; j \+ 2 <= full; j \+= 2\) SM_EXP2||two keys of one query vector (two one-pass exps: ta_exp_denormal_assist = 0)
softmax exp loop, Intel|attn|ta_attn_softmax_ISA_[0-9]+|attn_template.h|for \(; j \+ 2 <= full; j \+= 2\) SM_EXP2|masked=most|two keys of one query vector (two exps that mask the lanes below -87 and branch on them: ta_exp_denormal_assist = 1)
attn_exp loop|attn|ta_expf_ISA|attn_template.h|V_STOREU\(y \+ i, SM_EXPF||one vector (one one-pass exp)
attn_pack_t 8x8 block|attn|ta_attn_pack_t_ISA|attn_template.h|V_TRANSPOSE8_SCALED\(qp||one 8 x 8 block: 8 row loads, 24 shuffles, 8 multiplies by the scale, 8 stores
bwd_gemm k loop|attn_bwd|ta_attn_bwd_gemm_ISA_[0-9]+x[0-9]+|attn_bwd_template.h|cr\[r\]\[v\] = V_FMA\(ab||one k step: MR rows x NV vectors
bwd_gemm k loop, bf16 dot|attn_bwd|ta_attn_bwd_gemm_bf16dot_ISA_[0-9]+x[0-9]+|attn_bwd_template.h|cr\[r\]\[v\] = V_DOT_BF16\(|isa=avx512bf16,fma=MR*NV|one pair of k: MR rows (a broadcast pair each) x NV vectors of B pairs, MR x NV dot products (counted as FMAs)
dsoftmax scale loop|attn_bwd|ta_attn_bwd_dsoftmax_ISA|attn_bwd_template.h|V_STOREU\(sr \+ j, V_SUB\(V_MUL||one vector: s * scale - lse
dsoftmax dS loop|attn_bwd|ta_attn_bwd_dsoftmax_ISA|attn_bwd_template.h|V_STOREU\(dr \+ j, V_MUL||one vector: P * (dP - di)
attn_row_dot loop|attn_bwd|ta_attn_row_dot_ISA|attn_bwd_template.h|acc\[v\] = VD_ADD\(acc||8 terms of D = rowsum(dO * O): 8 / VDL vectors of floats widened to doubles, a product and a sum each
attn_softcap loop|attn_variants|ta_attn_softcap_ISA|attn_variants_template.h|V_STOREU\(s \+ i, V_SOFTCAP||one vector: cap * tanh(s / cap) (polynomial, exp, division, blend)'

# The tile constants of kernel file $1 (#define NAME <integer>), as NAME=value lines.
tile_consts() { sed -n 's/^#define \([A-Z][A-Z0-9_]*\) \([0-9][0-9]*\)[[:space:]]*$/\1=\2/p' "$1"; }

# Evaluates the pick "fma=E,bcast=E,masked=most" against the constants of kernel file
# $2: prints "FMA BCAST MOST" (-1 where not asked; MOST 1 for masked=most, else 0), or
# fails naming the bad term.
eval_pick() {
    local fma=-1 bcast=-1 most=0 term key expr val consts
    consts=$(tile_consts "$2")
    IFS=, read -ra terms <<<"$1"
    for term in "${terms[@]}"; do
        key=${term%%=*}; expr=${term#*=}
        if [ "$term" = "masked=most" ]; then most=1; continue; fi
        # shellcheck disable=SC2001
        val=$(awk -v e="$expr" -v c="$consts" 'BEGIN {
            n = split(c, l, "\n"); for (i = 1; i <= n; i++) { split(l[i], kv, "="); v[kv[1]] = kv[2] }
            # replace each name by its value, then allow only digits, + - * ( )
            out = ""; while (match(e, /[A-Z][A-Z0-9_]*/)) {
                nm = substr(e, RSTART, RLENGTH); if (!(nm in v)) { print "undefined " nm; exit 1 }
                out = out substr(e, 1, RSTART - 1) v[nm]; e = substr(e, RSTART + RLENGTH) }
            print out e }') || { echo "$val in $2" >&2; return 1; }
        [[ "$val" =~ ^[0-9+*()\ -]+$ ]] || { echo "bad expression '$expr'" >&2; return 1; }
        case "$key" in
        fma) fma=$((val)) ;;
        bcast) bcast=$((val)) ;;
        *) echo "unknown pick '$key'" >&2; return 1 ;;
        esac
    done
    echo "$fma $bcast $most"
}

# Prints one iteration of the hot loop of function $2 in assembly $1 that carries a .loc of
# line $4 of file $3 (basename), after a comment line: of the innermost such loops, the one
# with $5 FMAs and $6 broadcasts (-1: the most FMAs, any broadcasts), then the fewest
# masked instructions ($7 = 1: the most), then the fewest instructions. Fails listing the candidates when
# none fits.
extract_loop() {
    awk -v fn="$2" -v tfile="$3" -v tline="$4" -v wfma="$5" -v wbc="$6" -v most="${7:-0}" '
    function base(p) { sub(/.*\//, "", p); return p }
    $1 == ".file" { f = ""; for (i = 3; i <= NF; i++) if ($i ~ /^"/) f = $i  # the last name
                    gsub(/"/, "", f); fname[$2] = base(f); next }
    $0 ~ "^" fn ":" { infn = 1; nfn++; name = $0; sub(/:.*/, "", name); n = 0; next }
    infn && $1 == ".size" && $2 ~ "^" fn "," { infn = 0 }
    !infn { next }
    { n++; L[n] = $0 }
    /^\.L[0-9A-Za-z_]+:/ { l = $0; sub(/:.*/, "", l); lab[l] = n; next }
    $1 == ".loc" { if (fname[$2] == tfile && $3 == tline) hit[n] = 1; next }
    /^[ \t]+[a-z]/ && $1 ~ /^j/ && $1 != "jmp" && ($2 in lab) { nl++; ls[nl] = lab[$2]; le[nl] = n }
    END {
        if (nfn != 1) { printf "%d functions match %s (want 1)\n", nfn, fn > "/dev/stderr"; exit 1 }
        best = 0
        for (a = 1; a <= nl; a++) {
            inner = 1
            for (b = 1; b <= nl; b++)
                if (b != a && ls[b] >= ls[a] && le[b] <= le[a] && (ls[b] != ls[a] || le[b] != le[a])) inner = 0
            if (!inner) continue
            h = 0; fma = 0; msk = 0; ins = 0; bc = 0; out = 0; ld = 0; delete src
            for (i = ls[a]; i <= le[a]; i++) {
                if (i in hit) h = 1
                if (L[i] !~ /^[ \t]+[a-z]/) continue
                ins++
                if (L[i] ~ /\)[ \t]*,/) ld = 1  # a memory operand before the last: a load
                split(L[i], w, /[ \t]+/)   # w[2] the mnemonic, w[3] the first operand
                if (w[2] == "jmp" && (!(w[3] in lab) || lab[w[3]] < ls[a] || lab[w[3]] > le[a])) out = 1
                if (w[2] ~ /^vf(n)?m(add|sub)(sub|add)?[0-9]+[ps]s$/ || w[2] == "vdpbf16ps") fma++
                if (L[i] ~ /%k[1-7]/ || L[i] ~ /vmaskmov/) msk++
                if (w[2] ~ /^vbroadcastss$/ && !(w[3] in src)) { src[w[3]] = 1; bc++ }
                if (match(L[i], /[^ \t]*[{]1to[0-9]+[}]/)) { s = substr(L[i], RSTART, RLENGTH); if (!(s in src)) { src[s] = 1; bc++ } }
            }
            if (!h || out) continue  # out: out-of-line blocks that jump back, not a loop
            if (!fma && !ld) continue  # no FMA and no load: a fill or store loop that the
                                       # same .loc marks (avx512 attn_pack_t), not the work
            cands++
            lb = L[ls[a]]; sub(/:.*/, "", lb)
            cl = cl sprintf("  %s: %d FMAs, %d broadcasts, %d masked, %d instructions\n", lb, fma, bc, msk, ins)
            if (wfma >= 0 && fma != wfma) continue
            if (wbc >= 0 && bc != wbc) continue
            mb = most ? msk > bm : msk < bm
            if (!best || (wfma < 0 && fma > bf) || (fma == bf && (mb || (msk == bm && ins < bi)))) {
                best = a; bf = fma; bm = msk; bi = ins; bb = bc
            }
        }
        if (!best) {
            printf "no loop of %s carries %s line %d with %s FMAs and %s broadcasts; the loops that carry it:\n%s",
                   name, tfile, tline, wfma < 0 ? "any" : wfma, wbc < 0 ? "any" : wbc, cands ? cl : "  none\n" > "/dev/stderr"
            exit 1
        }
        printf "# %s: the loop at %s %d FMAs, %d broadcasts, %d masked, %d instructions (%d candidate loops)\n",
               name, L[ls[best]], bf, bb, bm, bi, cands
        for (i = ls[best]; i <= le[best]; i++)
            if (L[i] ~ /^[ \t]+[a-z]/) print L[i]
    }' "$1"
}

# Reads llvm-mca's report on stdin; prints "cycles uops width loads busy rp dd dep": per
# iteration; the busiest units (pressure within 5% of the top one), as "unit=pressure,..."
# (short names: SKXPort0 -> p0, Zn3FPP0 -> FPP0); llvm-mca's shares of cycles with resource
# pressure and with data dependencies; the instruction its critical sequence's dependency
# runs through, or -.
parse_report() {
    awk '
    function short(u) { sub(/^SKXPort/, "p", u); sub(/^Zn[0-9]+/, "", u); return u }
    /^Iterations:/ { it = $2 }
    /^Total Cycles:/ { cyc = $3 }
    /^Total uOps:/ { uops = $3 }
    /^Dispatch Width:/ { w = $3 }
    /^  Resource Pressure/ { v = $0; gsub(/[^0-9.]/, "", v); rp = v }
    /^  Data Dependencies:/ { v = $0; gsub(/[^0-9.]/, "", v); dd = v }
    /## (REGISTER|MEMORY) dependency/ && dep == "" { dep = $3 }
    /Instructions:$/ && /\[4\]/ { c4 = index($0, "[4]"); ii = 1; next }
    ii && /^ *$/ { ii = 0 }
    ii { if (substr($0, c4, 3) ~ /\*/) ld++ }
    /^Resources:/ { rs = 1; nr = 0; next }
    rs && /^\[/ { nr++; name[nr] = short($3); next }
    rs { rs = 0 }
    /^Resource pressure per iteration:/ { rpi = 1; next }
    rpi == 1 { rpi = 2; next }
    rpi == 2 {
        for (i = 1; i <= nr; i++) { p[i] = ($i == "-") ? 0 : $i; if (p[i] > top) top = p[i] }
        for (i = 1; i <= nr; i++) {
            if (top == 0 || p[i] < 0.95 * top || index("," busy, "," name[i] "=")) continue
            busy = busy (busy == "" ? "" : ",") name[i] "=" sprintf("%.2f", p[i])
        }
        rpi = 0
    }
    END {
        if (!it) exit 1
        printf "%.2f %.2f %d %d %s %s %s %s\n", cyc / it, uops / it, w, ld,
               busy == "" ? "-" : busy, rp == "" ? 0 : rp, dd == "" ? 0 : dd, dep == "" ? "-" : dep
    }'
}

# The verdict on one loop under one model (see the header): prints the table's row.
verdict() {
    awk -v c="$1" -v u="$2" -v w="$3" -v ld="$4" -v busy="$5" -v rp="$6" -v dd="$7" -v dep="$8" \
        -v f="$9" -v r="${10}" -v hw="${11}" -v row="${12}" 'BEGIN {
        n = split(busy, b, ",")
        top = 0
        for (i = 1; i <= n; i++) {
            split(b[i], kv, "="); unit[i] = kv[1]; pr[i] = kv[2] + 0; if (pr[i] > top) top = pr[i]
            k = unit[i] ~ /^(p[23]|Load|AGU|LSU)/ ? "loads" : unit[i] ~ /^(p[47]|Store|FPSt)/ ? "stores" : \
                unit[i] ~ /^(p[015]|FP)/ ? "vector ports" : "integer ports"
            if (!(k in seen)) { seen[k] = 1; kinds = kinds (kinds == "" ? "" : " + ") k }
            units = units (units == "" ? "" : ", ") unit[i] " " sprintf("%.2f", pr[i])
        }
        fb = f / (c * r)
        if (fb >= 0.9 && top > 1.02 * f / r && kinds !~ /vector ports/)
            bound = sprintf("%s: %s (FMA pipes %.0f%%)", kinds, units, 100 * fb)
        else if (fb >= 0.9) bound = "FMA pipes (" units ")"
        else if (u / w >= 0.8 * c && u / w >= top) bound = sprintf("dispatch: %.1f uops / %d", u, w)
        else if (top >= 0.8 * c) bound = kinds ": " units
        else bound = "dependency through " dep " (busiest: " units ")"
        if (f == 0) busyhw = "-"
        else if (hw == r) busyhw = sprintf("%.0f%%", 100 * fb)
        else busyhw = sprintf("%.0f%% (hw %.0f%%)", 100 * fb, 100 * f / (c * hw))
        printf "| %s | %.2f | %d | %d | %.1f | %.0f%% | %s | %s | %s%% / %s%% |\n",
               row, c, f, ld, u, 100 * f / (c * w), busyhw, bound, rp, dd
    }'
}

echo "| loop | isa | model | cycles/iter | FMAs/iter | loads/iter | uops/iter | FMA share of issue slots | FMA pipes busy (model) | bound by | llvm-mca: cycles with resource pressure / data dependency |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|"
legend=""
skipped=""
nrows=0
declare -A prevname
while IFS='|' read -r lname file fnpat tmpl lre pick unit; do
    tpath="src/kernels/$tmpl"
    tl=$(grep -nE "$lre" "$tpath" | cut -d: -f1 || true)
    [ "$(wc -w <<<"$tl")" = 1 ] || {
        echo "mca_loops.sh: $lname: '$lre' must match one line of $tpath (matches: ${tl:-none})" >&2; exit 1; }
    legend="$legend
- $lname: $unit (\`$tmpl\` line $tl${pick:+; $pick})"
    # "isa=NAME" in the pick: a kernel only that ISA has (attn_qk_rows_bf16dot)
    only=$(sed -n 's/.*isa=\([a-z0-9_]*\).*/\1/p' <<<"$pick")
    pick=$(sed 's/,\{0,1\}isa=[a-z0-9_]*//; s/^,//' <<<"$pick")
    found=0
    for isa in $isas; do
        asm="$work/${file}_${isa}.s"
        fn="${fnpat//ISA/$isa}"
        if [ -n "$only" ] && [ "$isa" != "$only" ]; then continue; fi
        # an ISA without its own SGEMM (gemm_<isa>.c: avx512bf16) overrides a few of its
        # parent's entries: it shows only the loops its own kernels have
        if [ -z "$only" ] && [ ! -f "src/kernels/gemm_${isa}.c" ]; then continue; fi
        [ -f "$asm" ] || { echo "mca_loops.sh: $lname: no src/kernels/${file}_${isa}.c" >&2; exit 1; }
        found=1
        want=$(eval_pick "$pick" "src/kernels/${file}_${isa}.c" 2>"$work/err") || {
            echo "mca_loops.sh: $lname ($isa): pick '$pick': $(cat "$work/err")" >&2; exit 1; }
        slug="$(sed 's/[^A-Za-z0-9]\{1,\}/_/g; s/_$//' <<<"$lname").$isa"
        body="$work/$slug.s"
        # shellcheck disable=SC2086
        if ! extract_loop "$asm" "$fn" "$tmpl" "$tl" $want >"$body" 2>"$work/err"; then
            echo "mca_loops.sh: $lname ($isa): $(cat "$work/err")" >&2; exit 1
        fi
        fma=$(grep -cE '^[[:space:]]+(vf(n)?m(add|sub)(sub|add)?[0-9]+[ps]s|vdpbf16ps)' "$body" || true)
        width=ymm; grep -q '%zmm' "$body" && width=zmm
        # the models that lack the ISA's instructions (Zen 3: AVX-512) skip all its loops
        isaw=ymm; case " $(isa_flags "$isa") " in *" -mavx512f "*) isaw=zmm ;; esac
        # a loop that another row of this ISA already shows (avx2's RP = 1: its few-rows
        # P.V pass is the 1-row one) gets no rows of its own, a line in the legend
        same=""
        for prev in "${!prevname[@]}"; do
            [[ "$prev" == *".$isa.s" ]] || continue
            if cmp -s <(tail -n +2 "$prev") <(tail -n +2 "$body"); then same=${prevname[$prev]}; break; fi
        done
        if [ -n "$same" ]; then
            legend="$legend (on $isa, the same loop as \"$same\")"
            rm -f "$body"
            continue
        fi
        prevname[$body]=$lname
        if grep -q prefetch "$body"; then echo "mca_loops.sh: note: $lname ($isa) has prefetches in its iteration" >&2; fi
        if [ -n "$keep" ]; then cp "$body" "$keep/$slug.s"; fi
        for cpu in $cpus; do
            if [ "$(rate_of "$cpu" "$isaw")" = "-" ]; then
                case " $skipped " in *" $cpu/$isa "*) ;; *) skipped="$skipped $cpu/$isa" ;; esac
                continue
            fi
            rate=$(rate_of "$cpu" "$width")
            rep="$work/$slug.$cpu.txt"
            mca -mcpu="$cpu" -bottleneck-analysis "$body" >"$rep" 2>&1 || {
                echo "mca_loops.sh: llvm-mca failed on $lname ($isa, $cpu): $(head -3 "$rep")" >&2; exit 1; }
            if [ -n "$keep" ]; then cp "$rep" "$keep/"; fi
            read -r cyc uops w ld busy rp dd dep < <(parse_report <"$rep" || true)
            [ -n "${dep:-}" ] || {
                echo "mca_loops.sh: $lname ($isa, $cpu): cannot read llvm-mca's report (kept with -o)" >&2; exit 1; }
            verdict "$cyc" "$uops" "$w" "$ld" "$busy" "$rp" "$dd" "$dep" "$fma" "$rate" \
                "$(hw_rate "$cpu" "$width" "$rate")" "$lname | $isa | $cpu"
            nrows=$((nrows + 1))
        done
    done
    [ "$found" = 1 ] || { echo "mca_loops.sh: $lname: no ISA ${only:+named $only }has it" >&2; exit 1; }
done <<<"$LOOPS"
[ "$nrows" -gt 0 ] || { echo "mca_loops.sh: no row" >&2; exit 1; }

echo
sep=""
printf "FMA rate of each model (independent FMAs per cycle, measured by %s):" "$MCA"
for x in $rates; do
    IFS=: read -r c w r <<<"$x"
    [ "$r" = "-" ] || { printf "%s %s %s %s" "$sep" "$c" "$w" "$r"; sep=","; }
done
echo "."
if [ -n "$skipped" ]; then echo "Not run (the model lacks the ISA's instructions):$skipped."; fi
echo
printf "Tile constants (the kernel files' #defines):"
for isa in $isas; do
    for f in gemm attn attn_bwd attn_variants attn_rows; do
        [ -f "src/kernels/${f}_${isa}.c" ] || continue
        c=$(tile_consts "src/kernels/${f}_${isa}.c" | tr '\n' ' ' | sed 's/ $//')
        if [ -n "$c" ]; then printf "\n- \`%s\`: %s" "${f}_${isa}.c" "$c"; fi
    done
done
echo
echo
echo "One iteration is:$legend"
