#!/bin/sh
# chorus-perf end to end against the library: output format, JSON, option
# errors, and every collective, dtype and op at 6 ranks with no wrong element;
# the sweep's last size, the root and algorithm columns, skipped sizes, the
# warning for more ranks than cores, and a run under torchrun's variables;
# fc_weight_grad's strategies, choice and checks at 3 ranks, and its options. Allreduce and
# reduce_scatter compressed on the wire, and the commands compression refuses.
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
check "row 1024 bytes = 256 float32 sum, no root column" \
    grep -qE '^ +1024 +256 +float32 +sum +[0-9.]+ ' "$TMP/out"
check "allreduce has no root column" sh -c "! grep -q ' root ' '$TMP/out'"
check "the heading names the algorithm column" grep -qE '^#.* algorithm$' "$TMP/out"
check "every row ends with an algorithm name" \
    sh -c "! grep -v '^#' '$TMP/out' | grep -vqE ' [a-z][a-z0-9_]*$'"
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
assert set(r) == {"collective", "size", "count", "type", "redop", "root", "algorithm",
                  "out_of_place", "in_place"}, r
assert set(r["in_place"]) == {"time_us", "algbw_gbs", "busbw_gbs", "wrong"}, r
for r in doc["results"]:
    assert isinstance(r["algorithm"], str) and r["algorithm"], r
    rooted = r["collective"] in ("broadcast", "reduce")
    assert (r["root"] is not None) == rooted, r
assert {r["root"] for r in doc["results"] if r["collective"] == "reduce"} == {0}, doc
EOF
    check "JSON holds the same rows" [ $? -eq 0 ]
fi

# The sweep ends on the size it announces, even where the factor steps past it.
perf allreduce -np 1 -b 8 -e 1M -f 4 -n 1 -w 0 > "$TMP/max"
check "-e 1M -f 4 exits 0 (got $?)" [ $? -eq 0 ]
check "-e 1M -f 4: the last row is 1048576 bytes" \
    [ "$(grep -v '^#' "$TMP/max" | tail -n 1 | awk '{print $1}')" = 1048576 ]
check "-e 1M -f 4: 512K is the row before" grep -qE '^ +524288 ' "$TMP/max"

# Sizes with no whole element for each rank are skipped with a note; the largest,
# rounded down, says so.
perf allgather -np 3 -b 1 -e 64 -d float64 -n 1 -w 0 > "$TMP/skip" 2>&1
check "allgather at 3 ranks exits 0 (got $?)" [ $? -eq 0 ]
for b in 1 2 4 8 16; do
    check "$b bytes skipped with a note" \
        grep -qx "# $b bytes skipped: less than one float64 element for each of 3 ranks" \
        "$TMP/skip"
done
check "no row of 0 elements" sh -c "! grep -qE '^ +0 +0 ' '$TMP/skip'"
check "rows for 32 and 64 bytes as 24 and 48" \
    [ "$(grep -v '^#' "$TMP/skip" | awk '{print $1}' | tr '\n' ' ')" = "24 48 " ]
check "the rounded maximum is named" \
    grep -q '^# 64 bytes ran as 48: whole float64 elements' "$TMP/skip"

# Compressed allreduce: float16 and bfloat16 on the wire, checked within the bound; refused
# where compression does not apply.
for w in fp16 bf16; do
    perf allreduce -np 3 -b 4 -e 1M -f 16 -o avg -n 2 -w 1 --compress $w > "$TMP/cmp" 2>&1
    check "allreduce --compress $w at 3 ranks exits 0 (got $?)" [ $? -eq 0 ]
    check "--compress $w: the header says so" grep -q '^# compressed to .* on the wire' "$TMP/cmp"
    check "--compress $w: every element within the bound" \
        grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/cmp"
done
perf reduce_scatter -np 3 -b 12 -e 96K -f 16 -n 2 -w 1 --compress fp16 > "$TMP/cmp" 2>&1
check "reduce_scatter --compress fp16 at 3 ranks exits 0 (got $?)" [ $? -eq 0 ]
check "reduce_scatter --compress fp16: every element within the bound" \
    grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/cmp"
for args in "allgather --compress fp16" "allreduce -d int32 --compress fp16" \
            "allreduce -o max --compress bf16" "allreduce --compress fp8"; do
    # shellcheck disable=SC2086
    perf $args -np 2 > "$TMP/cmp" 2>&1
    check "chorus-perf $args exits 2 (got $?)" [ $? -eq 2 ]
done

# --mem: host buffers as by default; chorus_mem_alloc buffers for every collective that
# uses them in place; device buffers where a CUDA device is, else a clear
# failure; an unknown memory, or --mem on fc_weight_grad, is a usage error.
perf allreduce -np 2 -b 4 -e 64K -f 16 -n 2 -w 1 --mem host > "$TMP/mem" 2>&1
check "allreduce --mem host exits 0 (got $?)" [ $? -eq 0 ]
check "--mem host: no wrong element" \
    grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/mem"
for coll in allreduce reduce_scatter allgather broadcast reduce; do
    perf $coll -np 2 -b 4 -e 1M -f 16 -n 2 -w 1 --mem chorus > "$TMP/mem" 2>&1
    check "$coll --mem chorus exits 0 (got $?)" [ $? -eq 0 ]
    check "--mem chorus: the header names chorus_mem_alloc" \
        grep -q 'from chorus_mem_alloc' "$TMP/mem"
    check "$coll --mem chorus: no wrong element" \
        grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/mem"
done
perf allreduce -np 2 -b 4 -e 64K -f 16 -n 2 -w 1 --mem cuda > "$TMP/mem" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
    check "--mem cuda: the header names device memory" grep -q 'in CUDA device memory' "$TMP/mem"
    check "--mem cuda: no wrong element" \
        grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/mem"
else
    check "--mem cuda without a device exits 1 (got $rc)" [ $rc -eq 1 ]
    check "--mem cuda without a device says why" \
        grep -Eq -- '--mem cuda: (no CUDA device|this chorus-perf was built without CUDA)' \
        "$TMP/mem"
fi
for args in "allreduce --mem gpu" "fc_weight_grad --mem cuda"; do
    # shellcheck disable=SC2086
    perf $args -np 2 > "$TMP/mem" 2>&1
    check "chorus-perf $args exits 2 (got $?)" [ $? -eq 2 ]
done

# The root column only where there is a root: broadcast and reduce, every root.
perf broadcast -np 2 -b 4 -e 8 -r all -n 1 -w 0 > "$TMP/root" 2>&1
check "broadcast -r all exits 0 (got $?)" [ $? -eq 0 ]
check "broadcast has a root column" grep -qE '^# +size +count +type +redop +root ' "$TMP/root"
check "broadcast rows for root 0 and 1" \
    [ "$(grep -v '^#' "$TMP/root" | awk '{print $5}' | sort -u | tr '\n' ' ')" = "0 1 " ]

# More ranks than cores: one warning line (the job sees one core under taskset).
if command -v taskset >/dev/null 2>&1; then
    taskset -c 0 timeout -k 5 60 "$PERF" allreduce -np 2 -b 8 -e 8 -n 1 -w 0 \
        > "$TMP/over" 2>&1
    check "2 ranks on 1 core exit 0 (got $?)" [ $? -eq 0 ]
    check "2 ranks on 1 core: one warning line" \
        [ "$(grep -c '^# warning: 2 ranks on this node share 1 core' "$TMP/over")" -eq 1 ]
fi
check "1 rank: no warning" sh -c "! grep -q warning '$TMP/out'"

# JSON: version, host, cores, ranks, and per row the algorithm the table names.
perf reduce -np 2 -b 64 -e 64 -n 1 -w 0 --json "$TMP/run.json" > "$TMP/run.out" 2>&1
check "--json at 2 ranks exits 0 (got $?)" [ $? -eq 0 ]
if command -v python3 >/dev/null 2>&1; then
    python3 - "$TMP/run.json" "$("$PERF" --version | sed -n 's/^library: libchorus //p')" \
        "$(hostname)" "$TMP/run.out" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["version"] == sys.argv[2], (doc["version"], sys.argv[2])
assert doc["host"] == sys.argv[3], (doc["host"], sys.argv[3])
assert isinstance(doc["cores"], int) and doc["cores"] >= 1, doc
assert doc["nranks"] == 2 and doc["local_ranks"] == 2, doc
rows = [l.split() for l in open(sys.argv[4]) if l.strip() and not l.startswith("#")]
assert [r["algorithm"] for r in doc["results"]] == [r[-1] for r in rows], (doc, rows)
assert [r["root"] for r in doc["results"]] == [0], doc
EOF
    check "JSON names the version, host, cores, ranks and algorithms" [ $? -eq 0 ]
fi

# Under torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) instead of
# chorus-run's: chorus-run only provides the port and the secret here.
if [ -n "${CHORUS_RUN:-}" ] && [ -x "$CHORUS_RUN" ]; then
    # shellcheck disable=SC2016 # expanded by each rank's shell, from chorus-run's values
    timeout -k 5 60 "$CHORUS_RUN" -n 2 sh -c 'exec env -u CHORUS_RANK -u CHORUS_SIZE \
        -u CHORUS_ADDR -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_SIZE RANK=$CHORUS_RANK \
        WORLD_SIZE=$CHORUS_SIZE MASTER_ADDR=127.0.0.1 MASTER_PORT=${CHORUS_ADDR##*:} \
        "$0" allreduce -b 64 -e 256 -n 1 -w 0' "$PERF" > "$TMP/torch" 2>&1
    check "runs under torchrun's variables (got $?)" [ $? -eq 0 ]
    check "torchrun's variables: 2 ranks" grep -q '^# chorus-perf: allreduce, nranks 2' \
        "$TMP/torch"
    check "torchrun's variables: no wrong element" \
        grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/torch"
fi
"$PERF" --help > "$TMP/help"
check "--help names the variables it runs under" \
    sh -c "grep -q 'RANK, WORLD_SIZE, MASTER_ADDR' '$TMP/help' && grep -q CHORUS_RANK '$TMP/help'"
check "--help names mpirun, mpiexec and srun, and PMIx" \
    sh -c "grep -q mpirun '$TMP/help' && grep -q mpiexec '$TMP/help' &&
           grep -q srun '$TMP/help' && grep -q PMIx '$TMP/help'"
check "--help claims no launcher it does not support" \
    sh -c "! grep -q 'e.g. chorus-run or mpirun' '$TMP/help'"

# Setup failures end every rank, not only the one that failed.
perf allreduce -np 2 -b 8 -e 8 --json "$TMP/no/such/dir/x.json" > /dev/null 2> "$TMP/err"
check "an unwritable --json ends the job with 1 (got $?)" [ $? -eq 1 ]
check "an unwritable --json is named" grep -q "no/such/dir/x.json" "$TMP/err"
# Under AddressSanitizer an impossible malloc aborts unless the allocator may return NULL.
env ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}allocator_may_return_null=1" \
    timeout -k 5 60 "$PERF" allreduce -np 2 -b 8 -e 1073741824G > /dev/null 2> "$TMP/err"
check "buffers that cannot be allocated end the job with 1 (got $?)" [ $? -eq 1 ]
check "the allocation failure is reported" grep -q "cannot allocate" "$TMP/err"

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

# fc_weight_grad at 3 ranks, under chorus-run as the manual shows it (-np without it):
# per shape both strategies forced, auto, the choice and whether it was the faster.
fc3() {
    if [ -n "${CHORUS_RUN:-}" ] && [ -x "$CHORUS_RUN" ]; then
        timeout -k 5 120 "$CHORUS_RUN" -n 3 "$PERF" fc_weight_grad "$@"
    else
        timeout -k 5 120 "$PERF" fc_weight_grad -np 3 "$@"
    fi
}
fc3 --rows 4,0 --in 16 --out 8 -n 3 --json "$TMP/fc.json" > "$TMP/fc" 2>&1
rc=$?
check "fc_weight_grad at 3 ranks exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "fc_weight_grad: header" grep -q '^# chorus-perf: fc_weight_grad, nranks 3' "$TMP/fc"
check "fc_weight_grad: the heading names both strategies, auto and the choice" \
    grep -qE '^# +rows +in +out +type +late +allreduce +auto +#wrong +chosen +faster$' \
    "$TMP/fc"
check "fc_weight_grad: one row per shape ($(rows "$TMP/fc"))" [ "$(rows "$TMP/fc")" -eq 2 ]
for r in 4 0; do
    check "fc_weight_grad: rows $r: three times, no wrong element, a choice, yes or no" \
        grep -qE "^ +$r +16 +8 +float32( +[0-9.]+){3} +0 +(late|allreduce) +(yes|no)$" \
        "$TMP/fc"
done
check "fc_weight_grad: no wrong element" \
    grep -qx '# late/allreduce/auto wrong elements total: 0' "$TMP/fc"
check "fc_weight_grad: how often auto chose the faster" \
    grep -qE '^# auto chose the faster strategy for [012] of 2 shapes$' "$TMP/fc"
[ "$FAILED" -eq 0 ] || cat "$TMP/fc"
if command -v python3 >/dev/null 2>&1; then
    python3 - "$TMP/fc.json" "$TMP/fc" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["nranks"] == 3 and doc["wrong_total"] == 0, doc
assert (doc["rows"], doc["in"], doc["out"]) == ([4, 0], [16], [8]), doc
assert doc["shapes"] == len(doc["results"]) == 2, doc
table = [l.split() for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")]
for r, t in zip(doc["results"], table):
    assert set(r) == {"collective", "rows", "in", "out", "type", "chosen", "chose_faster",
                      "late", "allreduce", "auto"}, r
    assert [r["rows"], r["in"], r["out"], r["type"]] == [int(t[0]), int(t[1]), int(t[2]),
                                                         t[3]], (r, t)
    assert r["chosen"] == t[-2] and r["chosen"] in ("late", "allreduce"), (r, t)
    assert r["chose_faster"] == (t[-1] == "yes"), (r, t)
    for v in ("late", "allreduce", "auto"):
        assert r[v]["wrong"] == 0 and r[v]["time_us"] > 0, r
assert doc["chose_faster_shapes"] == sum(r["chose_faster"] for r in doc["results"]), doc
EOF
    check "fc_weight_grad: JSON holds the same rows" [ $? -eq 0 ]
fi
# Every dtype it takes, exact also where float16 and bfloat16 must round the gradient.
perf fc_weight_grad -np 2 --rows 300 --in 5,1 --out 3 -d all -n 1 -w 0 > "$TMP/fcall" 2>&1
check "fc_weight_grad -d all exits 0 (got $?)" [ $? -eq 0 ]
check "fc_weight_grad -d all: 2 shapes for each of 4 dtypes" [ "$(rows "$TMP/fcall")" -eq 8 ]
check "fc_weight_grad -d all: no wrong element" \
    grep -qx '# late/allreduce/auto wrong elements total: 0' "$TMP/fcall"
perf fc_weight_grad --rows x 2> "$TMP/err"
check "fc_weight_grad --rows x gives 2 (got $?)" [ $? -eq 2 ]
check "fc_weight_grad --rows x: the message names it" grep -q "'x' for --rows" "$TMP/err"
perf allreduce -np 1 --rows 4 2> "$TMP/err"
check "--rows with a collective gives 2 (got $?)" [ $? -eq 2 ]
check "--rows with a collective: the message says why" \
    grep -q "option --rows applies to fc_weight_grad only" "$TMP/err"

perf broadcast -np 1 -r 5 2> "$TMP/err"
check "root out of range gives 2 (got $?)" [ $? -eq 2 ]
check "root error message" grep -q "invalid root 5" "$TMP/err"
for bad in "allreduce -b 1Q" "gather" "allreduce -np 0" "allreduce -d quad" "" \
           "fc_weight_grad --rows 4," "fc_weight_grad --in 0" "fc_weight_grad --out" \
           "fc_weight_grad -b 8" "fc_weight_grad -d int32" "fc_weight_grad allreduce"; do
    # shellcheck disable=SC2086
    perf $bad > /dev/null 2>&1
    rc=$?
    check "'$bad' rejected with 2 (got $rc)" [ "$rc" -eq 2 ]
done
check "--help" sh -c '"$0" --help | grep -q "usage: chorus-perf"' "$PERF"

checks_end
