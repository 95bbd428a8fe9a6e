#!/bin/sh
# TensorFlow and Keras on chorus (python/chorus/tensorflow, python/chorus/keras): the op
# library built against this TensorFlow; every op, dtype and op kind against numpy, eagerly
# and inside tf.function, with gradients; the Horovod-style API; Keras training for 20
# steps against one process on the whole batch; at 2 and 3 ranks under chorus-run; a rank
# killed; the example.
#
# Runs the Python in CHORUS_TENSORFLOW_PYTHON (./quickstart check makes one with
# tensorflow-cpu); skips (77) without it, or on sanitizer builds.
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_tensorflow
. "$(dirname "$0")/framework.sh"
framework_python CHORUS_TENSORFLOW_PYTHON tensorflow
TF_CPP_MIN_LOG_LEVEL=2
# The op library is built once per build tree (again when kernels.cc or TensorFlow changes).
CHORUS_TF_CACHE=$CHORUS_PC_DIR/tests/python/tensorflow-ops
export TF_CPP_MIN_LOG_LEVEL CHORUS_TF_CACHE

start=$(date +%s)
timeout -k 5 600 "$PY" -m chorus.tensorflow >"$TMP/build" 2>&1
rc=$?
echo "op library: $(tail -n 1 "$TMP/build") ($(($(date +%s) - start)) s)"
check "the op library builds against this TensorFlow (exit $rc)" test $rc -eq 0
[ $rc -eq 0 ] || { tail -n 30 "$TMP/build"; checks_end; exit 1; }

for n in 2 3; do
    check "every op, dtype and kind against numpy, with gradients, at $n ranks" \
        run_ranks $n "$here/tf_ops.py"
    check "the Horovod-style API at $n ranks" run_ranks $n "$here/tf_horovod.py"
    check "Keras training equals one process on the whole batch at $n ranks" \
        run_ranks $n "$here/tf_keras.py"
done

timeout -k 5 240 "$PY" "$here/tf_kill.py" 3 >"$TMP/kill" 2>&1
rc=$?
cat "$TMP/kill"
check "a killed rank makes the others' next op raise (3 ranks; exit $rc)" test $rc -eq 0

check "the Keras example trains under chorus-run -n 2" \
    run_ranks 2 "$top/examples/tensorflow/keras_mnist_like.py"
checks_end
