#!/bin/sh
# MXNet on chorus (python/chorus/mxnet): every call against numpy references, gluon training
# with chorus.mxnet.DistributedTrainer and with gluon.Trainer(kvstore="chorus") against one
# process on the whole batch, at 2 and 3 ranks under chorus-run; a rank killed in
# training; the example in both modes.
#
# Runs the Python in CHORUS_MXNET_PYTHON (./quickstart check makes one with mxnet 1.9.1 and
# numpy < 1.24); skips (77) without it, or on sanitizer builds.
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_mxnet
. "$(dirname "$0")/framework.sh"
framework_python CHORUS_MXNET_PYTHON mxnet
# One engine thread and one OpenMP thread per rank: several ranks share this machine.
OMP_NUM_THREADS=1 MXNET_CPU_WORKER_NTHREADS=1
export OMP_NUM_THREADS MXNET_CPU_WORKER_NTHREADS

for n in 2 3; do
    check "every call against numpy at $n ranks" run_ranks $n "$here/mx_ops.py"
    check "gluon training (DistributedTrainer, kvstore=\"chorus\") equals one process at $n ranks" \
        run_ranks $n "$here/mx_train.py"
done

timeout -k 5 150 "$PY" "$here/mx_kill.py" 3 >"$TMP/kill" 2>&1
rc=$?
cat "$TMP/kill"
check "a killed rank makes the others' next step raise (3 ranks; exit $rc)" test $rc -eq 0

for mode in "" --kvstore; do
    timeout -k 5 120 "$CHORUS_RUN" -n 2 "$PY" "$top/examples/mxnet/gluon_mnist_like.py" $mode \
        >"$TMP/example$mode" 2>&1
    rc=$?
    check "the gluon example${mode:+ with $mode} trains under chorus-run -n 2 (exit $rc)" \
        test $rc -eq 0
    check "the gluon example${mode:+ with $mode} ends with the same weights on every rank" \
        grep -q 'weights identical on every rank: True' "$TMP/example$mode"
    grep '^epoch' "$TMP/example$mode" >"$TMP/losses$mode"
    [ $rc -eq 0 ] || tail -n 20 "$TMP/example$mode"
done
check "the gluon example prints the same losses with DistributedTrainer and the kvstore" \
    cmp "$TMP/losses" "$TMP/losses--kvstore"
checks_end
