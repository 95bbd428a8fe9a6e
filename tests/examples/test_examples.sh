#!/bin/sh
# A user's program against the installed-style library: under chorus-run -n 5,
# under torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
# and, when an MPI was found, an MPI program under mpirun -np 4. Then a
# program that splits its communicator in two halves, under chorus-run -n 5, and
# one that computes a 1024 x 1024 layer's weight gradient on 4 ranks, by the
# strategy chorus chooses and by each forced one, against a single-process
# reference. Then 300 named gradients submitted to the training engine in a
# different order on each of 5 ranks. Last, calls refused on one rank for a
# NULL buffer, each followed by a correct call, at 3 ranks with and without
# shared memory. And 256 MiB allreduced in chorus_mem_alloc memory on 4 ranks.
#
# Environment: HELLO, SPLIT_HALVES, FC_LAYER, ENGINE_SHUFFLE, REFUSED_ONCE and MEM_ALLREDUCE (the example
# binaries), CHORUS_RUN, and
# optionally MPI_EXAMPLE and MPIRUN.
set -u
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_examples

timeout -k 5 60 "$CHORUS_RUN" -n 5 "$HELLO" > "$TMP/run" 2>&1
check "hello under chorus-run -n 5 exits 0 (got $?)" [ $? -eq 0 ]
check "five ranks say ok" [ "$(grep -c ': ok' "$TMP/run")" -eq 5 ]

# torchrun-style: no CHORUS_* variables, a free port from the kernel.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 29517)
pids=""
for r in 0 1 2; do
    env -u CHORUS_RANK -u CHORUS_SIZE -u CHORUS_ADDR -u CHORUS_SECRET \
        RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        timeout -k 5 60 "$HELLO" > "$TMP/torch.$r" 2>&1 &
    pids="$pids $!"
done
rc=0
for p in $pids; do wait "$p" || rc=$?; done
check "hello under torchrun-style variables exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "three ranks say ok" [ "$(cat "$TMP"/torch.* | grep -c ': ok')" -eq 3 ]
check "missing secret is warned about" grep -q "no CHORUS_SECRET" "$TMP/torch.0"

if [ -n "${MPI_EXAMPLE:-}" ]; then
    # Open MPI keeps thousands of allocations until exit: leak checking there would
    # report the MPI library, not chorus (whose leaks the other suites check).
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
        timeout -k 5 120 "$MPIRUN" --allow-run-as-root --oversubscribe -np 4 "$MPI_EXAMPLE" \
        > "$TMP/mpi" 2>&1
    rc=$?
    check "mpi example under mpirun -np 4 exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "chorus matches MPI" grep -q "matches MPI" "$TMP/mpi"
    [ "$rc" -eq 0 ] || tail -n 20 "$TMP/mpi"
fi

# Halves by rank % 2: ranks 0, 2, 4 sum 1 + 3 + 5, ranks 1, 3 sum 2 + 4.
timeout -k 5 60 "$CHORUS_RUN" -n 5 "$SPLIT_HALVES" > "$TMP/split" 2>&1
rc=$?
check "split_halves under chorus-run -n 5 exits 0 (got $rc)" [ "$rc" -eq 0 ]
for line in "rank 0 of 5: half 0, rank 0 of 3, sum 9: ok" \
            "rank 1 of 5: half 1, rank 0 of 2, sum 6: ok" \
            "rank 2 of 5: half 0, rank 1 of 3, sum 9: ok" \
            "rank 3 of 5: half 1, rank 1 of 2, sum 6: ok" \
            "rank 4 of 5: half 0, rank 2 of 3, sum 9: ok"; do
    check "split_halves prints '$line'" grep -qF "$line" "$TMP/split"
done
check "split_halves prints five results" [ "$(grep -c ': ok$' "$TMP/split")" -eq 5 ]

for tune in "" fc_weight_grad=late fc_weight_grad=allreduce; do
    CHORUS_TUNE=$tune timeout -k 5 120 "$CHORUS_RUN" -n 4 "$FC_LAYER" > "$TMP/fc" 2>&1
    rc=$?
    check "fc_layer under chorus-run -n 4${tune:+ with CHORUS_TUNE=$tune} exits 0 (got $rc)" \
        [ "$rc" -eq 0 ]
    check "fc_layer: four ranks within the tolerance${tune:+ ($tune)}" \
        [ "$(grep -c ': ok$' "$TMP/fc")" -eq 4 ]
    case "$tune" in
    *=*) check "fc_layer: the forced strategy served (${tune#*=})" \
             [ "$(grep -c ", ${tune#*=}, " "$TMP/fc")" -eq 4 ] ;;
    esac
    [ "$rc" -eq 0 ] || cat "$TMP/fc"
done
timeout -k 5 120 "$CHORUS_RUN" -n 5 "$ENGINE_SHUFFLE" > "$TMP/engine" 2>&1
rc=$?
check "engine_shuffle under chorus-run -n 5 exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "engine_shuffle: five ranks exact" [ "$(grep -c ': ok$' "$TMP/engine")" -eq 5 ]
[ "$rc" -eq 0 ] || cat "$TMP/engine"
# NAME under chorus-run -n N with CHORUS_SHM=SHM, output in $TMP/NAME: exits 0, N ranks ok.
ranks_ok() {
    local name=$1 n=$2 shm=$3 rc
    shift 3
    CHORUS_SHM=$shm timeout -k 5 180 "$CHORUS_RUN" -n "$n" "$@" > "$TMP/$name" 2>&1
    rc=$?
    check "$name under chorus-run -n $n (CHORUS_SHM=$shm) exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "$name: $n ranks exact (CHORUS_SHM=$shm)" [ "$(grep -c ': ok$' "$TMP/$name")" -eq "$n" ]
    [ "$rc" -eq 0 ] || cat "$TMP/$name"
}
for shm in 1 0; do
    # A call refused on one rank for its buffer: an error everywhere, then exact calls.
    ranks_ok refused_once 3 $shm "$REFUSED_ONCE"
    check "refused_once: the other ranks name rank 2 and its reason (CHORUS_SHM=$shm)" \
        [ "$(grep -c 'rank 2 refused broadcast #0 (invalid argument sendbuf=NULL' \
             "$TMP/refused_once")" -eq 2 ]
    # Blocking calls in one thread of each rank, non-blocking ones in another, on a duplicate.
    ranks_ok two_threads 3 $shm "$TWO_THREADS"
done

timeout -k 5 180 "$CHORUS_RUN" -n 4 "$MEM_ALLREDUCE" > "$TMP/mem" 2>&1
rc=$?
check "mem_allreduce under chorus-run -n 4 exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "mem_allreduce: four ranks exact over 256 MiB" \
    [ "$(grep -c '67108864 floats in chorus memory: ok' "$TMP/mem")" -eq 4 ]
[ "$rc" -eq 0 ] || cat "$TMP/mem"

[ "$FAILED" -eq 0 ] || cat "$TMP/run" "$TMP/split"
checks_end
