#!/bin/sh
# chorus-perf end to end against the library: output format, JSON, option
# errors, and every collective, dtype and op at 6 ranks with no wrong element.
#
# usage: test_chorus_perf.sh PATH_TO_CHORUS_PERF   (or set CHORUS_PERF)
set -u

PERF=${CHORUS_PERF:-${1:-./chorus-perf}}
if [ ! -x "$PERF" ]; then
    echo "test_chorus_perf: '$PERF' is not an executable chorus-perf" >&2
    exit 2
fi
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_chorus_perf
perf() { timeout -k 5 60 "$PERF" "$@"; }
rows() { grep -v '^#' "$1" | grep -c .; }

perf allreduce -b 8 -e 1K -n 2 -w 1 -np 1 > "$TMP/out"
rc=$?
check "allreduce exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "8 rows for 8..1024 bytes" [ "$(rows "$TMP/out")" -eq 8 ]
check "header names the collective" grep -q '^# chorus-perf: allreduce, nranks 1' "$TMP/out"
check "row 1024 bytes = 256 float32 sum" \
    grep -qE '^ +1024 +256 +float32 +sum +-1 ' "$TMP/out"
check "wrong total line" grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/out"
check "avg busbw line" grep -qE '^# avg bus bandwidth: [0-9.]+ GB/s$' "$TMP/out"

perf all -np 1 -b 0 -e 64 -d all -o all -r all -n 1 -w 0 --json "$TMP/all.json" > "$TMP/all"
rc=$?
check "all collectives, dtypes and ops exit 0 (got $rc)" [ "$rc" -eq 0 ]
for c in allreduce allgather broadcast reduce_scatter reduce alltoall barrier; do
    check "header for $c" grep -q "^# chorus-perf: $c," "$TMP/all"
done
check "count-0 rows with -b 0" grep -qE '^ +0 +0 +int8 +sum ' "$TMP/all"
check "no wrong element" grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/all"
# 10 dtypes; sizes 0,1,2,...,64 deduplicated per element size: 8 (1 B), 7 (2 B),
# 6 (4 B), 5 (8 B) rows -> 2*8 + 2*7 + 3*6 + 3*5 = 63 rows per (op, root) pass.
# allreduce/reduce_scatter/reduce: 5 ops each; the others: 1; barrier: 1 row.
check "row count ($(rows "$TMP/all"))" [ "$(rows "$TMP/all")" -eq $((63 * (5 + 1 + 5 + 5 + 1 + 1) + 1)) ]
if command -v python3 >/dev/null 2>&1; then
    python3 - "$TMP/all.json" "$(rows "$TMP/all")" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["nranks"] == 1 and doc["wrong_total"] == 0, doc
assert len(doc["results"]) == int(sys.argv[2]), len(doc["results"])
r = doc["results"][0]
assert set(r) == {"collective", "size", "count", "type", "redop", "root",
                  "out_of_place", "in_place"}, r
assert set(r["in_place"]) == {"time_us", "algbw_gbs", "busbw_gbs", "wrong"}, r
EOF
    check "JSON holds the same rows" [ $? -eq 0 ]
fi

perf broadcast -np 1 -e 64 -c 0 > "$TMP/nocheck"
check "-c 0 prints N/A" grep -q 'N/A (not checked)' "$TMP/nocheck"

# Every collective, dtype, op and root at 6 ranks: 0 wrong elements.
timeout -k 5 300 "$PERF" all -np 6 -b 0 -e 4K -f 4 -d all -o all -r all -n 1 -w 0 -c 1 \
    > "$TMP/np6" 2>&1
rc=$?
check "6 ranks, every collective exits 0 (got $rc)" [ "$rc" -eq 0 ]
for c in allreduce allgather broadcast reduce_scatter reduce alltoall barrier; do
    check "6 ranks: header for $c" grep -q "^# chorus-perf: $c, nranks 6" "$TMP/np6"
done
check "6 ranks: no wrong element" \
    grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/np6"
[ "$FAILED" -eq 0 ] || tail -n 20 "$TMP/np6"

perf broadcast -np 1 -r 5 2> "$TMP/err"
check "root out of range gives 2 (got $?)" [ $? -eq 2 ]
check "root error message" grep -q "invalid root 5" "$TMP/err"
for bad in "allreduce -b 1Q" "gather" "allreduce -np 0" "allreduce -d quad" "" ; do
    # shellcheck disable=SC2086
    perf $bad > /dev/null 2>&1
    rc=$?
    check "'$bad' rejected with 2 (got $rc)" [ "$rc" -eq 2 ]
done
check "--help" sh -c '"$0" --help | grep -q "usage: chorus-perf"' "$PERF"

checks_end
