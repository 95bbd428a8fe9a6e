#!/bin/sh
# The MPI interposers on an unmodified MPI program (tests/pmpi/mpi_colls.c: collectives on
# world, dup'd, split, created and shared-memory communicators; every predefined datatype
# chorus reduces; MPI_IN_PLACE; non-blocking calls completed by every MPI_Wait and MPI_Test
# form; datatypes, ops and communicators chorus must pass through). For each MPI whose
# interposer was built: the program checks its own results, and its per-test digests under
# the interposer equal those of the native run at 1 to 5 ranks; the report says chorus
# served every collective the program calls, and passed the calls it cannot serve. A bad
# CHORUS_PMPI is named and then everything goes to the MPI library. A program that needs MPI
# to progress while chorus serves a blocking allreduce (tests/pmpi/mpi_progress.c) finishes
# well before the chorus timeout. A Fortran program
# (tests/pmpi/mpi_fortran.f90) gets right results under both; MPICH's Fortran calls reach
# the interposer and are served, Open MPI's go around it (chorus_pmpi(7)).
#
# Environment: PMPI_OPENMPI, PMPI_MPICH (the interposers, empty when not built),
# MPICC_OPENMPI, MPIRUN_OPENMPI, MPIF90_OPENMPI, MPICC_MPICH, MPIRUN_MPICH, MPIF90_MPICH,
# MPI_COLLS_SRC, MPI_FORTRAN_SRC, MPI_PROGRESS_SRC.
set -u
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_pmpi

if [ "$(id -u)" -eq 0 ]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
fi
case "${TEST_CFLAGS:-}" in
*-fsanitize=*)
    # Its runtime would have to come before the MPI launcher's and program's own libraries.
    echo "SKIP: a sanitizer build's interposer cannot be preloaded into uninstrumented MPI programs"
    exit 77
    ;;
esac

# No chorus launcher variables: the interposer needs none.
unset CHORUS_RANK CHORUS_SIZE CHORUS_ADDR RANK WORLD_SIZE MASTER_ADDR MASTER_PORT

# Every function the program calls, which chorus must have served at least once.
SERVED="MPI_Allreduce MPI_Iallreduce MPI_Allgather MPI_Iallgather MPI_Bcast MPI_Ibcast
MPI_Reduce MPI_Ireduce MPI_Reduce_scatter_block MPI_Ireduce_scatter_block MPI_Alltoall
MPI_Ialltoall MPI_Barrier MPI_Ibarrier"

# run MPI NP OUT [VAR=VALUE...]: mpi_colls (or $PROGRAM) under MPI's launcher with those
# variables (the launchers pass their environment on to the ranks); stdout in OUT, stderr in
# OUT.err.
run() {
    mpi=$1 np=$2 out=$3
    shift 3
    if [ "$mpi" = openmpi ]; then
        launch="$MPIRUN_OPENMPI --oversubscribe"
    else
        launch=$MPIRUN_MPICH
    fi
    # shellcheck disable=SC2086 # the launcher and its option, one word each
    env "$@" timeout -k 5 180 $launch -np "$np" "${PROGRAM:-$TMP/mpi_colls_$mpi}" \
        > "$out" 2> "$out.err"
}

# served FILE FUNCTION: the served count of FUNCTION in a report.
served() { awk -v f="$2" '$1 == f { print $2 }' "$1.err"; }
passed() { awk -v f="$2" '$1 == f { print $3 }' "$1.err"; }

# test_fortran MPI LIB MPIF90: mpi_fortran interposed at 3 ranks.
test_fortran() {
    mpi=$1 lib=$2 mpif90=$3
    if [ -z "$mpif90" ]; then
        echo "SKIP: no $mpi Fortran compiler wrapper: Fortran not tested"
        return
    fi
    # MPICH's "use mpi" declares no interfaces: gfortran warns about every buffer type.
    check "mpi_fortran builds with $mpif90" "$mpif90" -O2 -fallow-argument-mismatch -w \
        -o "$TMP/mpi_fortran_$mpi" "$MPI_FORTRAN_SRC"
    [ -x "$TMP/mpi_fortran_$mpi" ] || return
    PROGRAM=$TMP/mpi_fortran_$mpi
    run "$mpi" 3 "$TMP/$mpi.fortran" LD_PRELOAD="$lib" CHORUS_PMPI=all CHORUS_PMPI_REPORT=1
    rc=$?
    PROGRAM=
    check "$mpi Fortran interposed: right results (exit $rc)" \
        grep -q "mpi_fortran: ok" "$TMP/$mpi.fortran"
    n=$(served "$TMP/$mpi.fortran" MPI_Allreduce)
    if [ "$mpi" = mpich ]; then
        check "mpich Fortran: chorus served MPI_Allreduce (${n:-no line})" [ "${n:-0}" -gt 0 ]
    else
        check "openmpi Fortran: its bindings go around the interposer (no report)" \
            [ -z "$n" ]
    fi
}

test_mpi() {
    mpi=$1 lib=$2 mpicc=$3 mpirun=$4
    if [ -z "$lib" ] || [ ! -f "$lib" ]; then
        echo "SKIP: the $mpi interposer is not built"
        return 1
    fi
    if [ -z "$mpicc" ] || [ -z "$mpirun" ]; then
        echo "SKIP: no $mpi compiler wrapper or launcher"
        return 1
    fi
    check "mpi_colls builds with $mpicc" \
        "$mpicc" -std=c11 -O2 -o "$TMP/mpi_colls_$mpi" "$MPI_COLLS_SRC"
    [ -x "$TMP/mpi_colls_$mpi" ] || return
    for np in 1 2 3 4 5; do
        base=$TMP/$mpi.$np
        run "$mpi" "$np" "$base.native"
        rc=$?
        check "$mpi -np $np native: mpi_colls passes (exit $rc)" [ "$rc" -eq 0 ]
        run "$mpi" "$np" "$base.chorus" LD_PRELOAD="$lib" CHORUS_PMPI=all CHORUS_PMPI_REPORT=1
        rc=$?
        check "$mpi -np $np interposed: mpi_colls passes (exit $rc)" [ "$rc" -eq 0 ]
        [ "$rc" -eq 0 ] || tail -n 20 "$base.chorus" "$base.chorus.err"
        check "$mpi -np $np: the same digests as the native run" \
            cmp -s "$base.native" "$base.chorus"
        [ "$np" -ge 2 ] || continue
        for fn in $SERVED; do
            n=$(served "$base.chorus" "$fn")
            check "$mpi -np $np: chorus served $fn (${n:-no line})" [ "${n:-0}" -gt 0 ]
        done
        n=$(passed "$base.chorus" MPI_Allreduce)
        check "$mpi -np $np: allreduces chorus cannot serve went to MPI (${n:-no line})" \
            [ "${n:-0}" -gt 0 ]
    done
    # The default (auto) serves, and gives the same results.
    run "$mpi" 4 "$TMP/$mpi.auto" LD_PRELOAD="$lib" CHORUS_PMPI_REPORT=1
    rc=$?
    check "$mpi -np 4 CHORUS_PMPI=auto: passes (exit $rc)" [ "$rc" -eq 0 ]
    check "$mpi -np 4 CHORUS_PMPI=auto: the same digests" \
        cmp -s "$TMP/$mpi.4.native" "$TMP/$mpi.auto"
    check "$mpi -np 4 CHORUS_PMPI=auto: the report says auto" \
        grep -q "CHORUS_PMPI=auto" "$TMP/$mpi.auto.err"
    # Auto leaves small broadcasts to MPI, and serves large ones.
    n=$(served "$TMP/$mpi.auto" MPI_Bcast)
    check "$mpi auto: large broadcasts served (${n:-no line})" [ "${n:-0}" -gt 0 ]
    n=$(passed "$TMP/$mpi.auto" MPI_Bcast)
    m=$(passed "$TMP/$mpi.4.chorus" MPI_Bcast)
    check "$mpi auto: small broadcasts went to MPI ($n passed, $m with CHORUS_PMPI=all)" \
        [ "${n:-0}" -gt "${m:-0}" ]
    # MPI progresses while chorus serves a blocking call: no wait for the timeout.
    check "mpi_progress builds with $mpicc" \
        "$mpicc" -std=c11 -O2 -o "$TMP/mpi_progress_$mpi" "$MPI_PROGRESS_SRC"
    PROGRAM=$TMP/mpi_progress_$mpi
    run "$mpi" 3 "$TMP/$mpi.progress" LD_PRELOAD="$lib" CHORUS_PMPI=all CHORUS_TIMEOUT=60
    rc=$?
    PROGRAM=
    check "$mpi: a peer waiting for this rank's MPI_Isend reaches the allreduce (exit $rc)" \
        grep -q "mpi_progress: ok" "$TMP/$mpi.progress"
    [ "$rc" -eq 0 ] || tail -n 5 "$TMP/$mpi.progress.err"
    # A bad value is named, and nothing is served.
    run "$mpi" 2 "$TMP/$mpi.bad" LD_PRELOAD="$lib" CHORUS_PMPI=sometimes CHORUS_PMPI_REPORT=1
    rc=$?
    check "$mpi CHORUS_PMPI=sometimes: passes through MPI (exit $rc)" [ "$rc" -eq 0 ]
    check "$mpi CHORUS_PMPI=sometimes: the error names the variable" \
        grep -q "CHORUS_PMPI=sometimes: must be auto, all or none" "$TMP/$mpi.bad.err"
    n=$(served "$TMP/$mpi.bad" MPI_Allreduce)
    check "$mpi CHORUS_PMPI=sometimes: nothing served (${n:-no line})" [ "${n:-x}" = 0 ]
    return 0
}

test_mpi openmpi "${PMPI_OPENMPI:-}" "${MPICC_OPENMPI:-}" "${MPIRUN_OPENMPI:-}" &&
    test_fortran openmpi "$PMPI_OPENMPI" "${MPIF90_OPENMPI:-}"
test_mpi mpich "${PMPI_MPICH:-}" "${MPICC_MPICH:-}" "${MPIRUN_MPICH:-}" &&
    test_fortran mpich "$PMPI_MPICH" "${MPIF90_MPICH:-}"
checks_end
