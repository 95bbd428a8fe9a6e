#!/bin/sh
# Every tool answers --version, --help, and refuses an unknown option with
# exit code 2 and a message naming it; chorus-info tells what the build uses
# apart from what configure only detected, and names each -c section once.
#
# usage: test_tool_options.sh   (CHORUS_INFO, CHORUS_RUN, CHORUS_PERF, CHORUS_TRAIN_STEP,
#        CHORUS_TRACE_TOOL and QUICKSTART name the programs; make check sets them)
set -u

. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_tool_options
for var in CHORUS_INFO CHORUS_RUN CHORUS_PERF CHORUS_TRAIN_STEP CHORUS_TRACE_TOOL QUICKSTART; do
    eval "path=\${$var:-}"
    if [ -z "$path" ] || [ ! -x "$path" ]; then
        echo "test_tool_options: $var ('$path') is not an executable" >&2
        exit 2
    fi
done
run() { timeout -k 5 60 "$@"; }
version=$(sed -n 's/^AC_INIT(\[chorus\], \[\([^]]*\)\].*/\1/p' \
    "$(dirname "$QUICKSTART")/configure.ac")
check "the version is known ('$version')" [ -n "$version" ]

# name path: the tool's --version, --help and unknown options.
tool_options() {
    name=$1
    path=$2
    run "$path" --version > "$TMP/out" 2> "$TMP/err"
    rc=$?
    check "$name --version exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "$name --version names the tool and the version" \
        grep -qx "$name (chorus) $version" "$TMP/out"
    check "$name --version prints nothing on stderr" [ ! -s "$TMP/err" ]
    run "$path" --help > "$TMP/out" 2>&1
    rc=$?
    check "$name --help exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "$name --help shows the usage" grep -q "usage:" "$TMP/out"
    check "$name --help lists --version" grep -q -- "--version" "$TMP/out"
    for bad in --bogus -Z --versio; do
        run "$path" "$bad" > "$TMP/out" 2> "$TMP/err"
        rc=$?
        check "$name $bad exits 2 (got $rc)" [ "$rc" -eq 2 ]
        check "$name $bad: the message names it" grep -q -- "'$bad'" "$TMP/err"
        check "$name $bad: nothing on stdout" [ ! -s "$TMP/out" ]
    done
}

tool_options chorus-info "$CHORUS_INFO"
tool_options chorus-run "$CHORUS_RUN"
tool_options chorus-perf "$CHORUS_PERF"
tool_options chorus-train-step "$CHORUS_TRAIN_STEP"
tool_options chorus-trace "$CHORUS_TRACE_TOOL"
tool_options quickstart "$QUICKSTART"

# The library's version beside the tool's, for the tools that load it.
for t in "$CHORUS_INFO" "$CHORUS_PERF" "$CHORUS_TRAIN_STEP"; do
    run "$t" --version > "$TMP/out" 2>&1
    check "$(basename "$t") --version names the library" \
        grep -qx "library: libchorus $version" "$TMP/out"
done

# An unknown option after a valid one is refused too, before anything runs.
for args in "-c --bogus" "--tune --bogus" "--topo --bogus" "-n" "--nodes" "-n 0 --tune" \
            "-n 3x --tune" "-n 4" "--nodes many" "-c --tune"; do
    # shellcheck disable=SC2086
    run "$CHORUS_INFO" $args > "$TMP/out" 2> "$TMP/err"
    rc=$?
    check "chorus-info $args exits 2 (got $rc)" [ "$rc" -eq 2 ]
    check "chorus-info $args prints a reason" grep -q "^chorus-info: " "$TMP/err"
done
run "$CHORUS_INFO" -n > /dev/null 2> "$TMP/err"
check "chorus-info -n says it needs a value" grep -q "option -n needs a value" "$TMP/err"
run "$CHORUS_RUN" --bogus true > /dev/null 2>&1
check "chorus-run --bogus PROGRAM exits 2 (got $?)" [ $? -eq 2 ]
run "$QUICKSTART" > /dev/null 2> "$TMP/err"
check "quickstart without a command exits 2 (got $?)" [ $? -eq 2 ]
check "quickstart without a command prints the usage" grep -q "^usage:" "$TMP/err"
# (Where a regression let it build, it would build in the scratch folder.)
run env BUILD_DIR="$TMP/build" PREFIX="$TMP/install" QUICKSTART_DEPS=no \
    "$QUICKSTART" build extra > /dev/null 2> "$TMP/err"
check "quickstart build with an argument exits 2 (got $?)" [ $? -eq 2 ]

# chorus-info: what is built and used apart from what configure only found.
run "$CHORUS_INFO" > "$TMP/summary" 2>&1
check "chorus-info exits 0" [ $? -eq 0 ]
check "chorus-info lists what the build uses" grep -q "^built with:" "$TMP/summary"
check "chorus-info lists what was only detected" \
    grep -q "^detected, not used by this version:" "$TMP/summary"
for unused in verbs mpi; do
    check "chorus-info does not list $unused as built in" \
        sh -c "! grep '^built with:' '$TMP/summary' | grep -qw '$unused'"
done
# A CBLAS runs chorus_fc_weight_grad's products, PMIx launches under mpirun, CUDA takes
# device buffers, and UCX is a transport (listed among the transports too), where configure
# found them.
for used in blas pmix cuda ucx; do
    if grep -q "^#define HAVE_$(echo $used | tr a-z A-Z) 1" "$CHORUS_PC_DIR/config.h" \
        2>/dev/null; then
        check "chorus-info lists $used as built in" \
            sh -c "grep '^built with:' '$TMP/summary' | grep -qw $used"
    fi
done
if grep -q "^#define HAVE_UCX 1" "$CHORUS_PC_DIR/config.h" 2>/dev/null; then
    check "chorus-info lists ucx among the transports" \
        grep -q '^transports: .*ucx (point to point' "$TMP/summary"
else
    check "chorus-info lists no ucx transport" sh -c "! grep -q '^transports: .*ucx' '$TMP/summary'"
fi
check "chorus-info has no 'features:' line" sh -c "! grep -q '^features:' '$TMP/summary'"

# chorus-info -c: each section heading once, naming its component once.
run "$CHORUS_INFO" -c > "$TMP/config" 2>&1
check "chorus-info -c exits 0" [ $? -eq 0 ]
grep '^# ' "$TMP/config" > "$TMP/headings"
check "chorus-info -c has sections" [ "$(wc -l < "$TMP/headings")" -ge 5 ]
check "every section heading is 'NAME: description'" \
    sh -c "! grep -vE '^# [a-z_]+: [^ ]' '$TMP/headings'"
cut -d: -f1 "$TMP/headings" | sort | uniq -d > "$TMP/dups"
check "no section is printed twice ($(cat "$TMP/dups"))" [ ! -s "$TMP/dups" ]
check "no heading repeats its name" sh -c "! grep -E '^# ([a-z_]+): \\1:' '$TMP/headings'"
run "$CHORUS_INFO" --man-config > "$TMP/man" 2>&1
check "--man-config sections name their component once" \
    sh -c "! grep -E '^\\.SS ([a-z_]+): \\1:' '$TMP/man'"
check "--man-config has as many sections as -c" \
    [ "$(grep -c '^\.SS ' "$TMP/man")" -eq "$(wc -l < "$TMP/headings")" ]

checks_end
