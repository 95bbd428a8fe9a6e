#!/bin/bash
# Fuzzes every parser of bytes that chorus takes from the wire or from a local
# peer's shared memory: builds one libFuzzer target per parser with ASan and
# UBSan, straight from the sources it needs (no autotools), and runs each on
# its corpus, one after the other.
#
#   tests/fuzz/run.sh [--smoke] [-runs=N] [--max-time S] [--work DIR] [target...]
#   tests/fuzz/run.sh --seeds        rewrite the seed files in tests/fuzz/corpus/
#
#   --smoke       a short bounded run of each target (CI): 500000 inputs or 15 s
#   -runs=N       inputs per target (default 10000000); also --runs N
#   --max-time S  stop a target after S seconds whatever it reached (default: none)
#   --work DIR    build outputs, logs, new corpus entries and crash inputs
#                 (default ${TMPDIR:-/tmp}/chorus-fuzz-$UID); keep it between
#                 runs to keep the corpus grown so far. Nothing is written to
#                 the source tree except by --seeds.
#
# Prints runs, seconds and the result of each target, then "N passed, N failed"
# (targets without and with a finding; .ci/run adds these up). Exit status: 0 when no
# target found anything (or when clang's libFuzzer is missing: skipped with a
# message), 1 on any crash, sanitizer report, broken invariant, leak or
# timeout, 2 on a usage or build error.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
CLANG=${CLANG:-clang}
TARGETS_ALL="fuzz_boot_header fuzz_boot_messages fuzz_tcp_header fuzz_tcp_hello fuzz_tcp_addr fuzz_tcp_stream fuzz_shm_peer"
# The UCX transport's decoders need UCX's headers, as its build does.
if pkg-config --exists ucx 2>/dev/null || [ -f /usr/include/ucp/api/ucp.h ]; then
    TARGETS_ALL="$TARGETS_ALL fuzz_ucx_wire"
fi

runs=10000000
max_time=0
smoke=0
seeds=0
work=${TMPDIR:-/tmp}/chorus-fuzz-$(id -u)
targets=""

usage() {
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case $1 in
    --smoke) smoke=1 ;;
    --seeds) seeds=1 ;;
    -runs=*|--runs=*) runs=${1#*=} ;;
    --runs) [ $# -ge 2 ] || usage; runs=$2; shift ;;
    --max-time) [ $# -ge 2 ] || usage; max_time=$2; shift ;;
    --work) [ $# -ge 2 ] || usage; work=$2; shift ;;
    -h|--help) usage ;;
    fuzz_*) targets="$targets $1" ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage ;;
    esac
    shift
done
case $runs$max_time in
*[!0-9]*) echo "run.sh: -runs and --max-time take integers" >&2; exit 2 ;;
esac
[ -n "$targets" ] || targets=" $TARGETS_ALL"
for t in $targets; do
    case " $TARGETS_ALL " in *" $t "*) ;; *) echo "run.sh: no target '$t'" >&2; exit 2 ;; esac
done
if [ "$smoke" = 1 ]; then
    runs=500000
    max_time=15
fi

# Sources each target is built from: the library's own files, not copies. The
# util layer and the tcp transport use nothing above them (docs/ARCHITECTURE.md),
# so all of their files are taken: a file added there needs no change here.
util_srcs="$(cd "$top" && echo src/util/*.c) tests/fuzz/fuzz_stubs.c"
boot_srcs="src/core/bootstrap_wire.c $util_srcs"
tcp_srcs="$(cd "$top" && echo transports/tcp/*.c) transports/base/req.c $util_srcs"
shm_srcs="transports/shm/shm_sync.c transports/shm/shm_desc.c transports/base/coll_args.c $util_srcs"

srcs_of() {
    case $1 in
    fuzz_boot_*) echo "tests/fuzz/$1.c $boot_srcs" ;;
    fuzz_tcp_*) echo "tests/fuzz/$1.c $tcp_srcs" ;;
    fuzz_shm_*) echo "tests/fuzz/$1.c $shm_srcs" ;;
    fuzz_ucx_*) echo "tests/fuzz/$1.c transports/ucx/ucx_wire.c $util_srcs" ;;
    gen_corpus) echo "tests/fuzz/gen_corpus.c src/core/bootstrap_wire.c $tcp_srcs" ;;
    esac
}

# Longest input worth trying: a JOIN carries up to 4136 bytes, a TCP stream a window's
# worth of frames; the rest are small.
max_len_of() {
    case $1 in
    fuzz_boot_messages) echo 4400 ;;
    fuzz_tcp_addr) echo 512 ;;
    fuzz_tcp_hello) echo 128 ;;
    fuzz_tcp_stream) echo 4096 ;;
    fuzz_shm_peer) echo 400 ;;
    fuzz_ucx_wire) echo 400 ;;
    *) echo 64 ;;
    esac
}

cppflags="-D_GNU_SOURCE -I$top/include -I$top/src -I$top -I$here"
fuzz_cflags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -pthread"

mkdir -p "$work/obj" "$work/bin" "$work/logs" || exit 2

# libFuzzer ships apart from clang on Debian (libclang-rt-<version>-dev).
probe=$work/obj/probe
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }' >"$probe.c"
if ! command -v "$CLANG" >/dev/null 2>&1; then
    echo "run.sh: SKIP: $CLANG not found; install clang (Debian: apt-get install clang)"
    echo "0 passed, 0 failed"
    exit 0
fi
if ! "$CLANG" -fsanitize=fuzzer,address,undefined "$probe.c" -o "$probe" >"$probe.log" 2>&1; then
    echo "run.sh: SKIP: $CLANG cannot link libFuzzer (libclang_rt.fuzzer is missing;" \
         "Debian: apt-get install libclang-rt-$("$CLANG" -dumpversion | cut -d. -f1)-dev)"
    echo "0 passed, 0 failed"
    exit 0
fi

# Every source once, two at a time; a target links the objects it needs.
obj_of() {
    local name=${1//\//_}
    echo "$work/obj/${name%.c}.$2.o"
}

build() {
    local flags=$1 kind=$2 t src objs list="" fail=0
    local -a pids=()
    shift 2
    for t in "$@"; do
        for src in $(srcs_of "$t"); do
            case " $list " in *" $src "*) ;; *) list="$list $src" ;; esac
        done
    done
    for src in $list; do
        # shellcheck disable=SC2086
        "$CLANG" $flags $cppflags -c "$top/$src" -o "$(obj_of "$src" "$kind")" &
        pids+=($!)
        if [ ${#pids[@]} -ge 2 ]; then
            wait "${pids[0]}" || fail=1
            pids=("${pids[@]:1}")
        fi
    done
    for t in "${pids[@]}"; do
        wait "$t" || fail=1
    done
    if [ $fail -ne 0 ]; then
        echo "run.sh: compiling failed" >&2
        return 1
    fi
    for t in "$@"; do
        objs=""
        for src in $(srcs_of "$t"); do
            objs="$objs $(obj_of "$src" "$kind")"
        done
        # shellcheck disable=SC2086
        if ! "$CLANG" $flags $objs -o "$work/bin/$t"; then
            echo "run.sh: linking $t failed" >&2
            return 1
        fi
    done
}

if [ "$seeds" = 1 ]; then
    build "-g -O1 -pthread" plain gen_corpus || exit 2
    "$work/bin/gen_corpus" "$here/corpus" || exit 2
    echo "run.sh: seeds written under $here/corpus"
    exit 0
fi

t0=$(date +%s)
# shellcheck disable=SC2086
build "$fuzz_cflags" fuzz $targets || exit 2
echo "run.sh: built${targets} in $(( $(date +%s) - t0 )) s (clang $("$CLANG" -dumpversion))"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
found=0
clean=0
printf '%-20s %10s %8s  %s\n' target runs seconds result
for t in $targets; do
    mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
    rm -f "$work/artifacts/$t"/*
    seeds_dir=$here/corpus/$t
    [ -d "$seeds_dir" ] || seeds_dir=""
    log=$work/logs/$t.log
    start=$(date +%s.%N)
    # New entries go to the first directory: the scratch one, never the repository's.
    # shellcheck disable=SC2086
    "$work/bin/$t" -runs="$runs" -max_total_time="$max_time" -max_len="$(max_len_of "$t")" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/$t/" "$work/corpus/$t" $seeds_dir >"$log" 2>&1
    rc=$?
    secs=$(echo "$start $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}')
    done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    result=ok
    if [ $rc -ne 0 ] || ls "$work/artifacts/$t"/* >/dev/null 2>&1; then
        result="FINDING (exit $rc; inputs in $work/artifacts/$t/, log $log)"
        found=$((found + 1))
    else
        clean=$((clean + 1))
    fi
    printf '%-20s %10s %8s  %s\n' "$t" "${done_runs:-?}" "$secs" "$result"
    if [ "$result" != ok ]; then
        grep -m1 -A12 -E '^==[0-9]+==ERROR|runtime error|invariant broken|Timeout|deadly signal' \
            "$log" | sed 's/^/    /'
    fi
done
# The summary line .ci/run counts: one per target.
echo "$clean passed, $found failed"
[ "$found" -eq 0 ]
