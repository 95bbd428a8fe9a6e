#!/bin/sh
# A user's program against the installed-style library: under chorus-run -n 5,
# under torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
# and, when an MPI was found, an MPI program under mpirun -np 4.
#
# Environment: HELLO (the example binary), CHORUS_RUN, and optionally
# MPI_EXAMPLE and MPIRUN.
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
[ "$FAILED" -eq 0 ] || cat "$TMP/run"
checks_end
