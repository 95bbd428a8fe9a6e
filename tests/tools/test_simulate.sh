#!/bin/sh
# The scaling model's inputs and outputs: chorus-info --estimate (the algorithm the
# selection table runs at each size and its estimate, a forced algorithm priced as forced,
# bad values refused), chorus-train-step --print-tensors (ResNet-50's 161 tensors with no
# launcher), and perf/simulate.py on a cluster file: its engine model on prices of its own
# (tests/tools/simulate_check.py), collectives and a training step priced by chorus-info,
# a projection, and bad clusters refused. The test bed's runs (calibrate, validate) need
# root and minutes; docs/SCALING.md has them.
#
# usage: test_simulate.sh   (CHORUS_INFO and CHORUS_TRAIN_STEP: the built tools)
set -u

for var in CHORUS_INFO CHORUS_TRAIN_STEP; do
    eval "path=\${$var:-}"
    if [ ! -x "$path" ]; then
        echo "test_simulate: $var='$path' is not an executable" >&2
        exit 2
    fi
done
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_simulate
HERE=$(cd "$(dirname "$0")" && pwd)
PERF=$(cd "$HERE/../../perf" && pwd)
BUILD=$(cd "$(dirname "$CHORUS_INFO")/../.." && pwd)
run() { timeout -k 5 120 "$@"; }
# The model's variables come from the command lines below, never from the caller.
unset CHORUS_TUNE CHORUS_TUNE_ALPHA_US CHORUS_TUNE_BANDWIDTH_GBS CHORUS_TUNE_REDUCE_GBS \
    CHORUS_TUNE_NET_ALPHA_US CHORUS_TUNE_NET_BANDWIDTH_GBS

# --estimate: one line per size, in the order given, with the table's algorithm.
run "$CHORUS_INFO" --estimate allreduce:8,1K,64M --estimate broadcast:4K --nodes 2,2 \
    > "$TMP/est" 2> "$TMP/err"
check "--estimate exits 0 (got $?)" [ $? -eq 0 ]
check "--estimate prints nothing on stderr" [ ! -s "$TMP/err" ]
check "--estimate: one line per size, no heading" [ "$(wc -l < "$TMP/est")" -eq 4 ]
check "--estimate: 'COLL BYTES ALGORITHM SECONDS'" \
    sh -c "! grep -vE '^(allreduce|broadcast) [0-9]+ [a-z_]+ [0-9.e+-]+$' '$TMP/est'"
check "--estimate: sizes as given (K, M)" \
    [ "$(cut -d' ' -f2 "$TMP/est" | tr '\n' ' ')" = "8 1024 67108864 4096 " ]
awk '$1 == "allreduce" { if (prev != "" && $4 + 0 <= prev + 0) bad = 1; prev = $4 }
     END { exit bad }' "$TMP/est"
check "--estimate: a larger allreduce costs more" [ $? -eq 0 ]
run "$CHORUS_INFO" --tune --nodes 2,2 > "$TMP/table" 2>&1
alg=$(awk '$1 == "allreduce" && $2 == "[0," { print $4 }' "$TMP/table")
check "--estimate takes the table's algorithm at 8 bytes ($alg)" \
    grep -q "^allreduce 8 $alg " "$TMP/est"
CHORUS_TUNE=allreduce=ring run "$CHORUS_INFO" --estimate allreduce:8 --nodes 2,2 > "$TMP/ring"
check "--estimate prices the algorithm CHORUS_TUNE forces" grep -q "^allreduce 8 ring " "$TMP/ring"
slow=$(CHORUS_TUNE_NET_BANDWIDTH_GBS=0.1 CHORUS_TUNE=allreduce=ring \
    run "$CHORUS_INFO" --estimate allreduce:64M --nodes 1,1 | cut -d' ' -f4)
fast=$(CHORUS_TUNE_NET_BANDWIDTH_GBS=1 CHORUS_TUNE=allreduce=ring \
    run "$CHORUS_INFO" --estimate allreduce:64M --nodes 1,1 | cut -d' ' -f4)
check "--estimate follows the network's rate ($slow s at 0.1 GB/s, $fast s at 1 GB/s)" \
    awk -v s="$slow" -v f="$fast" 'BEGIN { exit !(s > 8 * f && s < 11 * f) }'
one=$(run "$CHORUS_INFO" --estimate allreduce:64M -n 8 --cores 1 | cut -d' ' -f4)
eight=$(run "$CHORUS_INFO" --estimate allreduce:64M -n 8 --cores 8 | cut -d' ' -f4)
check "--cores: 8 ranks on 1 core cost more than on 8 ($one s, $eight s)" \
    awk -v a="$one" -v b="$eight" 'BEGIN { exit !(a > b) }'
for args in "--estimate" "--estimate allreduce" "--estimate allreduce:" \
            "--estimate bogus:8" "--estimate allreduce:8x" "--estimate allreduce:-1" \
            "--estimate allreduce:8 -c" "--cores 2" "--tune --cores 0" "--tune --cores x"; do
    # shellcheck disable=SC2086
    run "$CHORUS_INFO" $args > "$TMP/out" 2> "$TMP/err"
    rc=$?
    check "chorus-info $args exits 2 (got $rc)" [ "$rc" -eq 2 ]
    check "chorus-info $args: a reason, nothing on stdout" \
        sh -c "grep -q '^chorus-info: ' '$TMP/err' && [ ! -s '$TMP/out' ]"
done

# --print-tensors: the model, with no launcher.
run "$CHORUS_TRAIN_STEP" --print-tensors > "$TMP/tensors" 2> "$TMP/err"
check "--print-tensors exits 0 with no launcher (got $?)" [ $? -eq 0 ]
check "--print-tensors: ResNet-50's 161 tensors of 25,557,032 parameters" \
    [ "$(awk '{ n++; s += $2 } END { print n, s }' "$TMP/tensors")" = "161 25557032" ]
check "--print-tensors: layer order, conv1 first and fc.bias last" \
    sh -c "head -1 '$TMP/tensors' | grep -qx 'conv1.weight 9408' &&
           tail -1 '$TMP/tensors' | grep -qx 'fc.bias 1000'"
run "$CHORUS_TRAIN_STEP" --print-tensors --uniform 3:4K > "$TMP/tensors"
check "--print-tensors --uniform 3:4K: three of 1024 elements" \
    [ "$(awk '{ print $2 }' "$TMP/tensors" | tr '\n' ' ')" = "1024 1024 1024 " ]

if ! command -v python3 > /dev/null; then
    echo "test_simulate: no python3: perf/simulate.py not checked"
    checks_end
    exit $?
fi
run python3 "$HERE/simulate_check.py" "$PERF" > "$TMP/out" 2>&1
rc=$?
check "simulate_check.py: the engine model on its own prices ($(tail -1 "$TMP/out"))" \
    [ "$rc" -eq 0 ]
grep '^FAIL' "$TMP/out"

SIM="python3 $PERF/simulate.py --build $BUILD"
cat > "$TMP/c.json" <<'JSON'
{"ranks_per_node": [1, 1, 1], "cores_per_node": 2,
 "net": {"alpha_us": 25, "gbytes_per_s": 0.12}}
JSON
run $SIM coll --cluster "$TMP/c.json" --coll allreduce --sizes 8,64M > "$TMP/out" 2>&1
check "simulate.py coll exits 0 (got $?)" [ $? -eq 0 ]
us=$(awk '$1 == 67108864 { print $3 }' "$TMP/out")
# A ring over 3 ranks moves 2 (p - 1) / p of the vector through each link.
check "simulate.py coll: 64 MiB over 3 x 0.12 GB/s is the ring's 4/3 x 64 MiB ($us us)" \
    awk -v t="$us" 'BEGIN { w = 4 / 3 * 67108864 / 0.12e9 * 1e6; exit !(t > w && t < 1.1 * w) }'
run $SIM train-step --cluster "$TMP/c.json" --compute-ms 300 --model 40:1M > "$TMP/out" 2>&1
check "simulate.py train-step exits 0 (got $?)" [ $? -eq 0 ]
for m in engine per-tensor fused-after compute-only fused-only; do
    check "simulate.py train-step: a row for $m" grep -qE "^ *$m +[0-9.]+ ms$" "$TMP/out"
done
eng=$(awk '$1 == "engine" { print $2 }' "$TMP/out")
after=$(awk '$1 == "fused-after" { print $2 }' "$TMP/out")
check "simulate.py train-step: the engine overlaps ($eng ms, fused-after $after ms)" \
    awk -v e="$eng" -v f="$after" 'BEGIN { exit !(e < f) }'
run $SIM project --ranks 8,64 --ranks-per-node 8 --gbit 10 --json "$TMP/p.json" \
    > "$TMP/out" 2>&1
check "simulate.py project exits 0 (got $?)" [ $? -eq 0 ]
# 8 ranks on one node exchange through shared memory, 64 on 8 nodes over 10 Gbit/s links:
# the exchange no longer hides behind the 120 ms of backward compute.
check "simulate.py project: 8 ranks scale better than 64 over 10 Gbit/s" \
    awk '$1 == 8 { e8 = $5 + 0 } $1 == 64 { e64 = $5 + 0 }
         END { exit !(e8 > 95 && e64 < e8 - 5 && e64 > 0) }' "$TMP/out"
for bad in "--ranks 0" "--ranks-per-node 0" "--cycle-ms 0" "--ranks 8,x"; do
    # shellcheck disable=SC2086
    run $SIM project $bad > "$TMP/out" 2>&1
    rc=$?
    check "simulate.py project $bad exits 1 with a reason (got $rc)" \
        sh -c "[ $rc -eq 1 ] && grep -q '^simulate: ' '$TMP/out'"
done
printf '{"ranks_per_node": [1, 1]}' > "$TMP/bad.json"
run $SIM coll --cluster "$TMP/bad.json" > "$TMP/out" 2>&1
rc=$?
check "simulate.py: a cluster without a network link exits 1 (got $rc)" [ "$rc" -eq 1 ]
check "simulate.py: the message names the field" grep -q "'net' must be" "$TMP/out"
run $SIM coll --cluster "$TMP/nothing.json" > "$TMP/out" 2>&1
check "simulate.py: a missing cluster file exits 1 (got $?)" [ $? -eq 1 ]
run $SIM coll --cluster "$TMP/c.json" --sizes 8x > "$TMP/out" 2>&1
check "simulate.py: a bad size is refused by name" grep -q "'8x' is not a size" "$TMP/out"
checks_end
