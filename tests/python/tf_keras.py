"""chorus.keras (Keras 3 on TensorFlow) against single-process training.

Run under chorus-run with any number of ranks (2 and 3 are the usual):

    chorus-run -n 3 python tests/python/tf_keras.py

A small dense model trains for 20 SGD steps under hvd.DistributedOptimizer, each rank on
its shard of every global batch, starting from different weights on every rank that
BroadcastGlobalVariablesCallback replaces by rank 0's. Every rank also trains the same
model by itself on the whole global batches, from rank 0's initial weights: the loss is
the mean over the batch and the shards are equal, so the average of the ranks' gradients
is the gradient of the whole batch, and both trainings must end with the same weights up
to float32 rounding (TOLERANCE below). Every rank must end with exactly the same weights,
and MetricAverageCallback must give every rank the same logs, the averages of the ranks'
own. One "ok"/"FAIL" line per check; exits 1 on every rank when a check failed on any.
A watchdog ends a run that hangs (TF_KERAS_TEST_TIMEOUT seconds, default 240).
"""

import faulthandler
import os
import sys

os.environ.setdefault("CHORUS_TIMEOUT", "60")   # a rank that dies fails the others soon
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
faulthandler.dump_traceback_later(float(os.environ.get("TF_KERAS_TEST_TIMEOUT", "240")),
                                  exit=True)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import chorus.keras as hvd  # noqa: E402
from checks import Checks  # noqa: E402

# The weights of distributed and single-process training agree within this absolute
# tolerance (the weights are of order 1). Both compute the same float32 steps, but the
# distributed gradient is the average of the ranks' mean gradients over their shards
# while the single process takes the mean over the whole batch: the additions come in
# another order, so each step's gradient differs by a few float32 roundings (~1e-7
# relative), and 20 steps of SGD with momentum carry that forward without amplifying it
# much. Measured differences are of order 1e-7; 1e-5 leaves room and still catches any
# real error (a missing average, a rank's wrong shard or initial weights: >= 1e-2).
TOLERANCE = 1e-5

FEATURES, HIDDEN = 8, 16
PER_RANK = 8                # rows of each rank's shard of a global batch
STEPS_PER_EPOCH, EPOCHS = 10, 2
LR, MOMENTUM = 0.1, 0.5

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
GLOBAL = PER_RANK * SIZE
STEPS = STEPS_PER_EPOCH * EPOCHS

check = Checks(RANK, verbose=True)


def gathered(vector, name):
    """Every rank's float64 vector, as the rows of a (size, n) array."""
    v = tf.constant(np.asarray(vector, dtype=np.float64)[None, :])
    return hvd.allgather(v, name=name).numpy()


# ---- data and models ---------------------------------------------------------------------

def make_data(rows, seed):
    """Inputs and targets of a fixed nonlinear function; alike on every rank."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    w = rng.standard_normal((FEATURES, 1)).astype(np.float32)
    y = (np.tanh(x @ w) + 0.05 * rng.standard_normal((rows, 1))).astype(np.float32)
    return x, y


def shard(a, steps):
    """This rank's rows of each of steps global batches, in step order: the rows a
    single process takes in batches of GLOBAL are the concatenation of the shards."""
    return a.reshape((steps, SIZE, PER_RANK) + a.shape[1:])[:, RANK].reshape(
        (steps * PER_RANK,) + a.shape[1:])


def make_model():
    return keras.Sequential([keras.Input((FEATURES,)),
                             keras.layers.Dense(HIDDEN, activation="tanh"),
                             keras.layers.Dense(1)])


def flat(weights):
    return np.concatenate([np.asarray(w, dtype=np.float64).ravel() for w in weights])


class LogRecorder(keras.callbacks.Callback):
    """Keeps a copy of each epoch's logs as this callback sees them."""

    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(dict(logs or {}))


def log_vector(epochs, keys):
    return [float(e[k]) for e in epochs for k in keys]


# ---- training under DistributedOptimizer against one process -------------------------------

def test_fit():
    # STEPS_PER_EPOCH global batches, trained EPOCHS times.
    x, y = make_data(STEPS_PER_EPOCH * GLOBAL, seed=1234)
    xv, yv = make_data(4 * GLOBAL, seed=99)     # validation: each rank its own rows

    keras.utils.set_random_seed(0)
    reference = make_model()
    initial = reference.get_weights()            # rank 0's initial weights, on every rank

    model = make_model()
    if RANK == 0:
        model.set_weights(initial)
    else:
        # Other initial weights: only the broadcast makes the ranks agree.
        model.set_weights([w + 0.3 * RANK for w in initial])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=MOMENTUM))
    check(isinstance(optimizer, keras.optimizers.SGD),
          "DistributedOptimizer is a keras.optimizers.SGD")
    model.compile(optimizer=optimizer, loss="mse", metrics=["mae"], jit_compile=False)
    raw = LogRecorder()
    history = model.fit(shard(x, STEPS_PER_EPOCH), shard(y, STEPS_PER_EPOCH),
                        batch_size=PER_RANK, epochs=EPOCHS, shuffle=False, verbose=0,
                        validation_data=(shard(xv, 4), shard(yv, 4)),
                        validation_batch_size=PER_RANK,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), raw,
                                   hvd.callbacks.MetricAverageCallback()])
    check(int(optimizer.iterations.numpy()) == STEPS,
          "fit under DistributedOptimizer made %d steps" % STEPS)

    mine = flat(model.get_weights())
    every = gathered(mine, "test.final_weights")
    check(all(np.array_equal(every[r], every[0]) for r in range(SIZE)),
          "every rank ends with exactly the same weights")

    reference.compile(optimizer=keras.optimizers.SGD(LR, momentum=MOMENTUM), loss="mse",
                      jit_compile=False)
    reference.fit(x, y, batch_size=GLOBAL, epochs=EPOCHS, shuffle=False, verbose=0)
    expected = flat(reference.get_weights())
    diff = float(np.max(np.abs(mine - expected)))
    moved = float(np.max(np.abs(expected - flat(initial))))
    if RANK == 0:
        print("keras: max |distributed - single process| = %.3g over %d weights "
              "(tolerance %g; training moved them by up to %.3g)"
              % (diff, mine.size, TOLERANCE, moved), flush=True)
    check(diff <= TOLERANCE, "the weights equal single-process training on the whole "
          "batches within %g (max difference %.3g)" % (TOLERANCE, diff))

    # MetricAverageCallback: every rank logs the same values, the ranks' averages.
    keys = sorted(history.history)
    check(keys == ["loss", "mae", "val_loss", "val_mae"],
          "the logs hold loss, mae, val_loss, val_mae (%s)" % ", ".join(keys))
    logged = [history.history[k][e] for e in range(EPOCHS) for k in keys]
    every = gathered(logged, "test.logged_metrics")
    check(all(np.array_equal(every[r], every[0]) for r in range(SIZE)),
          "MetricAverageCallback: every rank logs the same metrics")
    own = gathered(log_vector(raw.epochs, keys), "test.own_metrics")
    check(np.allclose(np.mean(own, axis=0), every[0], rtol=1e-6, atol=0),
          "MetricAverageCallback: the logged metrics are the averages of the ranks' own")
    check(SIZE == 1 or not np.allclose(own[0], own[1]),
          "the ranks' own validation metrics differ (the averaging is not vacuous)")


# ---- the other paths ---------------------------------------------------------------------

def test_apply_gradients():
    """An eager apply_gradients() applies the average of the ranks' gradients."""
    v = keras.Variable(np.zeros(3, np.float32), name="eager_v")
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0))
    optimizer.apply_gradients([(tf.constant([1.0, 2.0, 3.0]) * (RANK + 1), v)])
    mean = (SIZE + 1) / 2.0
    check(np.allclose(v.numpy(), [-mean, -2 * mean, -3 * mean]),
          "eager apply_gradients applies the average gradient")
    summed = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), op=hvd.Sum)
    w = keras.Variable(np.zeros(2, np.float32), name="eager_w")
    summed.apply([tf.constant([1.0, -1.0])], [w])
    check(np.allclose(w.numpy(), [-SIZE, SIZE]), "apply with op=Sum applies the sum")
    try:
        hvd.DistributedOptimizer(optimizer)
        refused = False
    except ValueError:
        refused = True
    check(refused, "a distributed (and built) optimizer is refused")


class LrRecorder(keras.callbacks.Callback):
    """The learning rate each batch runs with."""

    def __init__(self):
        super().__init__()
        self.rates = []

    def on_train_batch_begin(self, batch, logs=None):
        self.rates.append(float(self.model.optimizer.learning_rate))


def test_warmup():
    steps, epochs, warmup, initial_lr = 4, 3, 2, 0.4
    x, y = make_data(steps * epochs * PER_RANK, seed=5)
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse",
                  jit_compile=False)
    lr = LrRecorder()
    model.fit(x[:steps * PER_RANK], y[:steps * PER_RANK], batch_size=PER_RANK, epochs=epochs,
              shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.LearningRateWarmupCallback(initial_lr, warmup), lr])
    expected = []
    for e in range(epochs):
        for b in range(steps):
            if e < warmup:
                t = e + b / steps
                expected.append(initial_lr / SIZE * (t * (SIZE - 1) / warmup + 1))
            else:
                expected.append(initial_lr)
    check(np.allclose(lr.rates, expected, rtol=1e-6),
          "LearningRateWarmupCallback: the rate rises from initial_lr / size to initial_lr "
          "over the warm-up epochs (%s)" % ", ".join("%.4g" % r for r in lr.rates))


def main():
    for test in (test_fit, test_apply_gradients, test_warmup):
        try:
            test()
        except Exception as e:  # a test that raises is a failure; the others still run
            check(False, "%s raised %s: %s" % (test.__name__, type(e).__name__, e))
    anyone = hvd.allreduce(tf.constant(len(check.failures), tf.int32), name="test.failures",
                           op=hvd.Max)
    anyone = int(anyone.numpy())
    if RANK == 0:
        print("tf_keras: %s at %d ranks" % ("all checks passed" if anyone == 0 else
                                            "FAILED", SIZE), flush=True)
    hvd.shutdown()
    sys.exit(1 if anyone else 0)


if __name__ == "__main__":
    main()
