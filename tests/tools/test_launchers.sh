#!/bin/sh
# chorus_comm_create_from_env under launchers other than chorus-run: Open MPI's mpirun
# through PMIx (when the library is built with it), MPICH's mpiexec through its PMI rank
# variables and CHORUS_ADDR, srun on a one-node Slurm that this script starts and stops
# itself (as root), through PMIx and through its rank variables, and the errors that name
# what a launcher left out. A launcher that is not installed or cannot start is skipped with
# a message.
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
# A port of 127.0.0.1 that binds now, below the ephemeral range as the C tests' harness picks
# them: a port the kernel may give any connect() of a test beside this one could be taken
# before the daemon or rank that listens on it binds it.
free_port() {
    python3 - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for port in random.sample(range(max(1024, low - 20000), low), 64):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break
PY
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
    bare timeout -k 5 120 mpirun.openmpi --oversubscribe -np 4 "$CHORUS_PERF" allreduce \
        -b 8 -e 64K -f 8 > "$TMP/perf" 2>&1
    rc=$?
    check "chorus-perf under mpirun -np 4 (PMIx) exits 0 (got $rc)" [ "$rc" -eq 0 ]
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

# A one-node Slurm of our own: its configuration, state, logs and ports in $TMP.
SLURM_PIDS=""
slurm_stop() {
    [ -n "$SLURM_PIDS" ] || return 0
    # Our jobs first (SLURM_CONF names our cluster), so that their step daemons end too.
    scancel --quiet --full --partition=test 2>/dev/null
    for _ in $(seq 1 20); do
        [ -z "$(squeue -h 2>/dev/null)" ] && break
        sleep 0.5
    done
    kill $SLURM_PIDS 2>/dev/null
    for p in $SLURM_PIDS; do
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$p" 2>/dev/null
    done
    SLURM_PIDS=""
    # The step daemons of our jobs leave a moment after them.
    for _ in $(seq 1 20); do
        [ -z "$(slurm_new_stepds)" ] && return 0
        sleep 0.5
    done
    kill -9 $(slurm_new_stepds) 2>/dev/null
}
# Step daemons that were not there before our Slurm started.
slurm_new_stepds() {
    for p in $(pgrep -x slurmstepd); do
        case " $SLURM_STEPDS_BEFORE " in *" $p "*) ;; *) echo "$p" ;; esac
    done
}
trap 'slurm_stop; rm -rf "$TMP"' EXIT
# 0 when the daemons run and the node takes jobs; else says why.
slurm_start() {
    node=$(hostname -s)
    SLURM_STEPDS_BEFORE=$(pgrep -x slurmstepd | tr '\n' ' ')
    mkdir -p "$TMP/slurm/state" "$TMP/slurm/spool" || return 1
    SLURM_CONF=$TMP/slurm/slurm.conf
    export SLURM_CONF
    cat > "$SLURM_CONF" <<CONF
ClusterName=chorustest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$TMP/slurm/state
SlurmdSpoolDir=$TMP/slurm/spool
SlurmctldPidFile=$TMP/slurm/slurmctld.pid
SlurmdPidFile=$TMP/slurm/slurmd.pid
SlurmctldLogFile=$TMP/slurm/slurmctld.log
SlurmdLogFile=$TMP/slurm/slurmd.log
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=5 State=UP OverSubscribe=FORCE
CONF
    slurmctld -D -i -f "$SLURM_CONF" > "$TMP/slurm/ctld.out" 2>&1 &
    SLURM_PIDS="$!"
    slurmd -D -N "$node" -f "$SLURM_CONF" > "$TMP/slurm/d.out" 2>&1 &
    SLURM_PIDS="$SLURM_PIDS $!"
    for _ in $(seq 1 40); do
        [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && return 0
        sleep 0.5
    done
    echo "SKIP: the one-node Slurm did not come up in 20 s:"
    tail -n 3 "$TMP/slurm/slurmctld.log" "$TMP/slurm/slurmd.log" 2>/dev/null
    return 1
}

if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: not root: no Slurm of our own to test srun on"
elif ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null ||
     ! command -v srun >/dev/null; then
    echo "SKIP: slurmctld, slurmd or srun is not installed: srun not tested"
elif slurm_start; then
    if grep -q '^#define HAVE_PMIX 1' "$CHORUS_PC_DIR/config.h" 2>/dev/null; then
        bare timeout -k 5 120 srun -n 3 --overcommit --mpi=pmix "$HELLO" > "$TMP/srun_pmix" 2>&1
        rc=$?
        check "hello under srun -n 3 --mpi=pmix exits 0 (got $rc)" [ "$rc" -eq 0 ]
        check "hello under srun --mpi=pmix: three ranks say ok" \
            [ "$(grep -c ': ok' "$TMP/srun_pmix")" -eq 3 ]
        [ "$rc" -eq 0 ] || cat "$TMP/srun_pmix"
    fi
    bare timeout -k 5 120 srun -n 3 --overcommit --mpi=none env CHORUS_ADDR="127.0.0.1:$(free_port)" \
        CHORUS_SECRET="test-launchers-$$-srun" "$HELLO" > "$TMP/srun" 2>&1
    rc=$?
    check "hello under srun -n 3 with CHORUS_ADDR exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "hello under srun: three ranks say ok" [ "$(grep -c ': ok' "$TMP/srun")" -eq 3 ]
    [ "$rc" -eq 0 ] || cat "$TMP/srun"
    slurm_stop
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
