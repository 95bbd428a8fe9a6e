#!/bin/sh
# chorus_comm_create_from_env under launchers other than chorus-run: Open MPI's mpirun
# through PMIx (when the library is built with it), MPICH's mpiexec through its PMI rank
# variables and CHORUS_ADDR, and the errors that name what a launcher left out. A launcher
# that is not installed is skipped with a message.
#
# Environment: HELLO (the example), CHORUS_PERF, CHORUS_PC_DIR (the build's config.h).
set -u
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_launchers

# Open MPI refuses to start as root unless told.
if [ "$(id -u)" -eq 0 ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
fi
# Run without any launcher's variables but those given.
bare() {
    env -u CHORUS_RANK -u CHORUS_SIZE -u CHORUS_ADDR -u RANK -u WORLD_SIZE -u MASTER_ADDR \
        -u MASTER_PORT -u PMIX_NAMESPACE -u PMIX_RANK -u OMPI_COMM_WORLD_RANK \
        -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMI_SIZE -u SLURM_PROCID -u SLURM_NTASKS "$@"
}
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

if ! grep -q '^#define HAVE_PMIX 1' "$CHORUS_PC_DIR/config.h" 2>/dev/null; then
    echo "SKIP: the library is built without PMIx: mpirun through PMIx not tested"
elif ! command -v mpirun.openmpi >/dev/null; then
    echo "SKIP: no mpirun.openmpi: mpirun through PMIx not tested"
else
    bare timeout -k 5 120 mpirun.openmpi --oversubscribe -np 3 "$HELLO" > "$TMP/pmix" 2>&1
    rc=$?
    check "hello under mpirun -np 3 (PMIx) exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "hello under mpirun: three ranks say ok" [ "$(grep -c ': ok' "$TMP/pmix")" -eq 3 ]
    check "hello under mpirun: the secret came through PMIx (no warning about it)" \
        sh -c "! grep -q 'no CHORUS_SECRET' '$TMP/pmix'"
    [ "$rc" -eq 0 ] || cat "$TMP/pmix"
    bare timeout -k 5 120 mpirun.openmpi --oversubscribe -np 2 "$CHORUS_PERF" allreduce \
        -b 8 -e 64K -f 8 > "$TMP/perf" 2>&1
    rc=$?
    check "chorus-perf under mpirun -np 2 (PMIx) exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "chorus-perf under mpirun: every element right" \
        grep -q "wrong elements total: 0$" "$TMP/perf"
    [ "$rc" -eq 0 ] || cat "$TMP/perf"
fi

if ! command -v mpirun.mpich >/dev/null; then
    echo "SKIP: no mpirun.mpich: PMI rank variables not tested"
else
    port=$(free_port)
    bare timeout -k 5 120 mpirun.mpich -np 3 -genv CHORUS_ADDR "127.0.0.1:$port" \
        -genv CHORUS_SECRET "test-launchers-$$-secret" "$HELLO" > "$TMP/pmi" 2>&1
    rc=$?
    check "hello under MPICH's mpiexec -np 3 with CHORUS_ADDR exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "hello under mpiexec: three ranks say ok" [ "$(grep -c ': ok' "$TMP/pmi")" -eq 3 ]
    [ "$rc" -eq 0 ] || cat "$TMP/pmi"
fi

# What a launcher leaves out is named, at once.
bare timeout 10 "$HELLO" > "$TMP/none" 2>&1
check "no launcher: the error says to set CHORUS_RANK or start under a launcher" \
    grep -q "no rank in the environment: set CHORUS_RANK and CHORUS_SIZE" "$TMP/none"
bare OMPI_COMM_WORLD_RANK=0 timeout 10 "$HELLO" > "$TMP/nosize" 2>&1
check "a rank without its size is named" \
    grep -q "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not" "$TMP/nosize"
bare SLURM_PROCID=0 SLURM_NTASKS=1 timeout 10 "$HELLO" > "$TMP/noaddr" 2>&1
check "srun's variables without CHORUS_ADDR: the error names srun and CHORUS_ADDR" \
    grep -q "ranks from srun, which does not give one: set CHORUS_ADDR" "$TMP/noaddr"
bare PMI_RANK=x PMI_SIZE=1 timeout 10 "$HELLO" > "$TMP/bad" 2>&1
check "a rank that is no number is named" \
    grep -q "invalid value 'x' for PMI_RANK" "$TMP/bad"
# One rank from Slurm's variables, and a rendezvous it hosts itself.
bare SLURM_PROCID=0 SLURM_NTASKS=1 CHORUS_ADDR="127.0.0.1:$(free_port)" \
    CHORUS_SECRET=test-launchers-one-rank timeout 30 "$HELLO" > "$TMP/one" 2>&1
check "srun's variables with CHORUS_ADDR: one rank runs" grep -q "rank 0 of 1: ok" "$TMP/one"

checks_end
