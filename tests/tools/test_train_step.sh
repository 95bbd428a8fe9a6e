#!/bin/sh
# chorus-train-step end to end at 2 ranks under chorus-run, on a small uniform
# model: the five modes interleaved (a row each, exact), and --engine-only
# (the engine's row alone, and its JSON: one mode, a time for every step,
# no figures that need the other modes); perf/autotune_bench.py, which runs it
# on the test bed, answers --help and refuses bad options before it starts.
#
# usage: test_train_step.sh   (CHORUS_TRAIN_STEP and CHORUS_RUN: the built tools)
set -u

for var in CHORUS_TRAIN_STEP CHORUS_RUN; do
    eval "path=\${$var:-}"
    if [ ! -x "$path" ]; then
        echo "test_train_step: $var='$path' is not an executable" >&2
        exit 2
    fi
done
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_train_step
step() { timeout -k 5 120 "$CHORUS_RUN" -n 2 "$CHORUS_TRAIN_STEP" "$@"; }
rows() { grep -v '^#' "$1" | grep -c .; }
SMALL="--uniform 24:16K --compute-ms 2 --steps 4 --warmup 1"

# shellcheck disable=SC2086 # SMALL is a list of options
step $SMALL > "$TMP/out" 2> "$TMP/err"
rc=$?
check "five modes: exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "five modes: a row each" [ "$(rows "$TMP/out")" -eq 5 ]
for m in engine per-tensor fused-after compute-only fused-only; do
    check "five modes: a row for $m" grep -qE "^  $m +[0-9.]+ " "$TMP/out"
done
check "five modes: the speedup line" grep -q '^# engine speedup' "$TMP/out"
check "five modes: exact" grep -q '^# results exact on every rank: 4 modes x 5 steps' "$TMP/out"
[ "$rc" -eq 0 ] || cat "$TMP/err"

# shellcheck disable=SC2086
step $SMALL --engine-only --json "$TMP/engine.json" > "$TMP/out" 2> "$TMP/err"
rc=$?
check "--engine-only: exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "--engine-only: the engine's row alone" [ "$(rows "$TMP/out")" -eq 1 ]
check "--engine-only: no overlap figures" grep -qE '^  engine +[0-9. ]+ +- +-$' "$TMP/out"
check "--engine-only: no speedup line" sh -c "! grep -q '^# engine speedup' '$TMP/out'"
check "--engine-only: the heading says so" grep -q 'the engine alone in each' "$TMP/out"
check "--engine-only: exact" \
    grep -q '^# results exact on every rank: the engine x 5 steps' "$TMP/out"
check "--engine-only: JSON says so" grep -q '"engine_only": true' "$TMP/engine.json"
check "--engine-only: JSON has one mode" [ "$(grep -c '"mode": ' "$TMP/engine.json")" -eq 1 ]
check "--engine-only: JSON has the engine's 4 step times" \
    grep -qE '"mode": "engine".*"step_ms": \[[0-9.]+(, [0-9.]+){3}\]' "$TMP/engine.json"
check "--engine-only: JSON has no speedups" grep -q '"engine_speedup": null' "$TMP/engine.json"
[ "$rc" -eq 0 ] || cat "$TMP/err"

# The bench's own options (the bench itself needs root and a quarter of an hour).
BENCH="$(cd "$(dirname "$0")/../.." && pwd)/perf/autotune_bench.py"
if command -v python3 > /dev/null; then
    python3 "$BENCH" --help --train-step "$CHORUS_TRAIN_STEP" > "$TMP/out" 2>&1
    rc=$?
    check "autotune_bench.py --help exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "autotune_bench.py --help names --change-at" grep -q -- '--change-at' "$TMP/out"
    for bad in "--streams 9" "--change-at 2" "--train-step /nonexistent" "--bogus"; do
        # shellcheck disable=SC2086 # one option and its value
        python3 "$BENCH" --train-step "$CHORUS_TRAIN_STEP" $bad > "$TMP/out" 2>&1
        rc=$?
        check "autotune_bench.py $bad exits 2 (got $rc)" [ "$rc" -eq 2 ]
    done
else
    echo "test_train_step: no python3: autotune_bench.py's options not checked"
fi

checks_end
