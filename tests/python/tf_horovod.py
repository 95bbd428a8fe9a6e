"""The Horovod API of chorus.tensorflow against numpy references.

Run under chorus-run with any number of ranks (2 and 3 are the usual):

    chorus-run -n 3 python tests/python/tf_horovod.py

Every rank computes the references from every rank's inputs, which it can generate
itself; values are small integers where the result must be exact. One "ok"/"FAIL" line
per check (rank 0 prints the passes, every rank its check.failures); exits 1 on every rank when
a check failed on any. A watchdog ends a run that hangs (TF_HOROVOD_TEST_TIMEOUT
seconds, default 240).
"""

import faulthandler
import os
import sys

os.environ.setdefault("CHORUS_TIMEOUT", "60")   # a rank that dies fails the others soon
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
faulthandler.dump_traceback_later(float(os.environ.get("TF_HOROVOD_TEST_TIMEOUT", "240")),
                                  exit=True)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import chorus.tensorflow as hvd  # noqa: E402
from chorus import ChorusError  # noqa: E402
from checks import Checks, raises, reduce_exact  # noqa: E402

RANK = int(os.environ.get("CHORUS_RANK", "-1"))   # until init() says
check = Checks(RANK, verbose=True)


def same(a, b):
    """a (a tensor) has b's (a numpy array's) dtype, shape and values exactly."""
    a = np.asarray(a)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


# ---- before init -----------------------------------------------------------------------------

def test_before_init():
    check(not hvd.is_initialized(), "is_initialized() is False before init()")
    for call, fn in [("size", hvd.size), ("rank", hvd.rank),
                     ("allreduce", lambda: hvd.allreduce(tf.ones(2))),
                     ("broadcast", lambda: hvd.broadcast(tf.ones(2), 0)),
                     ("DistributedGradientTape",
                      lambda: hvd.DistributedGradientTape(tf.GradientTape()))]:
        e = raises(fn, ValueError)
        check(e is not None and "init()" in str(e), "%s() before init() raises ValueError "
              "naming init() (%s)" % (call, e))


test_before_init()
hvd.init()
hvd.init()      # idempotent
RANK, SIZE = hvd.rank(), hvd.size()
check.rank = RANK


# ---- the job ---------------------------------------------------------------------------------

def test_job():
    check(hvd.is_initialized(), "is_initialized() after init()")
    env_rank = os.environ.get("CHORUS_RANK")
    if env_rank is not None:
        check(RANK == int(env_rank), "rank() %d is the launcher's %s" % (RANK, env_rank))
        check(SIZE == int(os.environ["CHORUS_SIZE"]), "size() is the launcher's")
    check(0 <= hvd.local_rank() < hvd.local_size() <= SIZE, "local_rank() and local_size()")
    check(0 <= hvd.cross_rank() < hvd.cross_size() <= SIZE, "cross_rank() and cross_size()")
    check(hvd.local_size() * hvd.cross_size() >= SIZE, "local_size() x cross_size() >= size()")


# ---- allreduce -------------------------------------------------------------------------------

OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max,
       "Product": hvd.Product}
DTYPES = [np.float32, np.float64, np.int32, np.int64]
SHAPES = [(1,), (7,), (1001,), (3, 5)]


def data(rank, shape, dtype, opname, salt=0):
    """Rank rank's input: values small enough that every reduction is exact."""
    rng = np.random.default_rng(7919 * rank + 31 * salt + sum(shape))
    if opname == "Product":
        v = rng.integers(1, 3, shape)
    else:
        v = rng.integers(-20, 21, shape)
    return v.astype(dtype)


_REDUCTIONS = {"Sum": "sum", "Average": "avg", "Min": "min", "Max": "max",
               "Product": "product"}


def reference(opname, inputs, dtype):
    """op of every rank's input; Average divides integers toward zero, as chorus does."""
    return reduce_exact(_REDUCTIONS[opname], inputs, dtype)


def test_allreduce_matrix():
    for opname, op in OPS.items():
        for dtype in DTYPES:
            bad = []
            for shape in SHAPES:
                inputs = [data(r, shape, dtype, opname) for r in range(SIZE)]
                name = "matrix.%s.%s.%s" % (opname, np.dtype(dtype).name, shape)
                out = hvd.allreduce(tf.constant(inputs[RANK]), name=name, op=op)
                if not same(out, reference(opname, inputs, dtype)):
                    bad.append(shape)
            check(not bad, "allreduce %s of %s, shapes %s%s" % (
                opname, np.dtype(dtype).name, SHAPES, " (wrong: %s)" % bad if bad else ""))


def test_allreduce_forms():
    inputs = [data(r, (5,), np.float32, "Sum") for r in range(SIZE)]
    mine = tf.constant(inputs[RANK])
    total = reference("Sum", inputs, np.float32)
    mean = reference("Average", inputs, np.float32)
    check(same(hvd.allreduce(mine, name="default_op"), mean), "allreduce averages by default")
    check(same(hvd.allreduce(mine, average=False, name="avg_false"), total),
          "allreduce(average=False) sums")
    check(same(hvd.allreduce(mine, average=True, name="avg_true"), mean),
          "allreduce(average=True) averages")
    check(raises(lambda: hvd.allreduce(mine, average=True, op=hvd.Sum), ValueError)
          is not None, "allreduce with both average and op raises ValueError")
    check(raises(lambda: hvd.allreduce(mine, op=99), ValueError) is not None,
          "allreduce with an unknown op raises ValueError")
    scaled = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25,
                           name="scaled")
    check(same(scaled, total * np.float32(0.5)), "allreduce prescale_factor and "
          "postscale_factor")
    check(raises(lambda: hvd.allreduce(tf.constant([1, 2]), prescale_factor=2.0), ValueError)
          is not None, "prescale_factor of an integer tensor raises ValueError")
    unnamed = [hvd.allreduce(mine * k, op=hvd.Sum) for k in (1.0, 2.0)]
    check(same(unnamed[0], total) and same(unnamed[1], total * 2),
          "unnamed allreduces pair by their order")
    grouped = hvd.grouped_allreduce([mine, mine * 3.0], op=hvd.Sum, name="grouped")
    check(same(grouped[0], total) and same(grouped[1], total * 3),
          "grouped_allreduce of two tensors")
    scalar = hvd.allreduce(tf.constant(float(RANK)), op=hvd.Sum, name="scalar")
    check(same(scalar, np.float32(SIZE * (SIZE - 1) / 2)), "allreduce of a scalar")
    empty = hvd.allreduce(tf.zeros((0, 3)), op=hvd.Sum, name="empty")
    check(same(empty, np.zeros((0, 3), np.float32)), "allreduce of an empty tensor")


def test_allreduce_graph():
    inputs = [data(r, (4,), np.float32, "Sum") for r in range(SIZE)]
    total = reference("Sum", inputs, np.float32)

    @tf.function
    def step(x):
        # Two unnamed and two ops under one name: four distinct engine names.
        return (hvd.allreduce(x, op=hvd.Sum), hvd.allreduce(x * 2.0, op=hvd.Sum),
                hvd.allreduce(x, op=hvd.Sum, name="twice"),
                hvd.allreduce(x * 3.0, op=hvd.Sum, name="twice"))
    good = True
    for _ in range(3):      # the traced function runs again under the same names
        a, b, c, d = step(tf.constant(inputs[RANK]))
        good = good and same(a, total) and same(b, total * 2) and same(c, total) \
            and same(d, total * 3)
    check(good, "allreduce inside tf.function, 3 runs (unnamed, and one name used twice)")


def test_sparse():
    # Rank r's rows r and r + 1 of a (SIZE + 1, 2) gradient.
    values = tf.constant([[1.0 + RANK, 2.0], [3.0, 4.0 * RANK]])
    slices = tf.IndexedSlices(values, tf.constant([RANK, RANK + 1]),
                              dense_shape=tf.constant([SIZE + 1, 2]))
    out = hvd.allreduce(slices, name="sparse")
    dense = tf.convert_to_tensor(out).numpy()
    expected = np.zeros((SIZE + 1, 2))
    for r in range(SIZE):
        expected[r] += [1.0 + r, 2.0]
        expected[r + 1] += [3.0, 4.0 * r]
    check(isinstance(out, tf.IndexedSlices) and np.allclose(dense, expected / SIZE),
          "allreduce of a tf.IndexedSlices gathers the rows (Average)")


def test_compression():
    n = 4096
    inputs = [np.random.default_rng(100 + r).standard_normal(n).astype(np.float32)
              for r in range(SIZE)]
    exact = np.sum(np.stack(inputs).astype(np.float64), axis=0)
    biggest = max(float(np.max(np.abs(a))) for a in inputs)
    # chorus_allreduce(3), "Wire compression": |result - exact| <= (u + 2^-24) p (p + 1) / 2 M
    # (+ p d / s, which the scale makes negligible here), u = 2^-11 for float16 and 2^-8 for
    # bfloat16, p the ranks and M the largest |value| of any rank; for Average, / p.
    for label, comp, u in [("fp16", hvd.Compression.fp16, 2.0 ** -11),
                           ("bf16", hvd.Compression.bf16, 2.0 ** -8)]:
        bound = (u + 2.0 ** -24) * SIZE * (SIZE + 1) / 2 * biggest
        for opname, op, ref, b in [("Sum", hvd.Sum, exact, bound),
                                   ("Average", hvd.Average, exact / SIZE, bound / SIZE)]:
            out = hvd.allreduce(tf.constant(inputs[RANK]), op=op, compression=comp,
                                name="compressed.%s.%s" % (label, opname)).numpy()
            err = float(np.max(np.abs(out.astype(np.float64) - ref)))
            check(out.dtype == np.float32 and err <= b,
                  "Compression.%s %s: float32 result within %.3g of the exact one (max "
                  "error %.3g)" % (label, opname, b, err))
            check(err > 0, "Compression.%s %s: the values did travel in 16 bits (the result "
                  "is not exact)" % (label, opname))
            every = hvd.allgather(tf.constant(out)[None], name="compressed.check.%s.%s"
                                  % (label, opname)).numpy()
            check(all(np.array_equal(every[r], every[0]) for r in range(SIZE)),
                  "Compression.%s %s: every rank gets the same bits" % (label, opname))
    ints = [data(r, (9,), np.int32, "Sum") for r in range(SIZE)]
    out = hvd.allreduce(tf.constant(ints[RANK]), op=hvd.Sum, compression=hvd.Compression.fp16,
                        name="compressed.int32")
    check(same(out, reference("Sum", ints, np.int32)),
          "Compression.fp16 leaves an int32 allreduce exact")


# ---- allgather, broadcast, reducescatter -----------------------------------------------------

def test_allgather():
    for dtype in (np.float32, np.int64):
        rows = [data(r, (r + 1, 3), dtype, "Sum", salt=5) for r in range(SIZE)]
        out = hvd.allgather(tf.constant(rows[RANK]), name="gather.%s" % np.dtype(dtype).name)
        check(same(out, np.concatenate(rows)), "allgather of %s with %s rows"
              % (np.dtype(dtype).name, [r + 1 for r in range(SIZE)]))
    even = [data(r, (2,), np.float64, "Sum", salt=6) for r in range(SIZE)]
    check(same(hvd.allgather(tf.constant(even[RANK])), np.concatenate(even)),
          "unnamed allgather of equal vectors")
    check(raises(lambda: hvd.allgather(tf.constant(1.0)), ValueError) is not None,
          "allgather of a scalar raises ValueError")


def test_broadcast():
    for root in range(SIZE):
        for dtype in (np.float32, np.int32, np.float64):
            inputs = [data(r, (3, 4), dtype, "Sum", salt=root) for r in range(SIZE)]
            out = hvd.broadcast(tf.constant(inputs[RANK]), root,
                                name="bcast.%d.%s" % (root, np.dtype(dtype).name))
            if not same(out, inputs[root]):
                check(False, "broadcast of %s from root %d" % (np.dtype(dtype).name, root))
                break
        else:
            check(True, "broadcast of float32, int32, float64 from root %d" % root)
    check(raises(lambda: hvd.broadcast(tf.ones(2), SIZE), ValueError) is not None,
          "broadcast from root_rank size() raises ValueError")


def test_broadcast_variables():
    v = tf.Variable(np.full((2, 3), RANK, np.float32), name="bv_a")
    w = tf.Variable(np.arange(4) + 10 * RANK, name="bv_b")
    root = SIZE - 1
    hvd.broadcast_variables([v, w], root_rank=root)
    check(same(v.numpy(), np.full((2, 3), root, np.float32)) and
          same(w.numpy(), np.arange(4) + 10 * root),
          "broadcast_variables sets every rank's variables to root %d's" % root)


def test_reducescatter():
    for rows in (2 * SIZE, 2 * SIZE + 1):
        inputs = [data(r, (rows, 2), np.float32, "Sum", salt=rows) for r in range(SIZE)]
        counts = [rows // SIZE + (1 if r < rows % SIZE else 0) for r in range(SIZE)]
        start = sum(counts[:RANK])
        for opname, op in (("Sum", hvd.Sum), ("Average", hvd.Average)):
            out = hvd.reducescatter(tf.constant(inputs[RANK]), op=op,
                                    name="rs.%d.%s" % (rows, opname))
            full = reference(opname, inputs, np.float32)
            check(same(out, full[start:start + counts[RANK]]),
                  "reducescatter %s of %d rows (this rank's %d)"
                  % (opname, rows, counts[RANK]))


# ---- gradients -------------------------------------------------------------------------------

def regression_data():
    """A linear regression: every rank's shard of a global batch."""
    rng = np.random.default_rng(42)
    x = rng.standard_normal((4 * SIZE, 3)).astype(np.float32)
    y = rng.standard_normal((4 * SIZE, 1)).astype(np.float32)
    return x, y, x[4 * RANK:4 * RANK + 4], y[4 * RANK:4 * RANK + 4]


def full_gradient(x, y, w, b):
    """The gradient of mean((x w + b - y)^2), in float64."""
    err = x.astype(np.float64) @ w + b - y
    return 2 * x.T @ err / len(x), 2 * err.sum(0) / len(x)


def test_gradient_tape():
    x, y, xs, ys = regression_data()
    w0 = np.array([[0.5], [-1.0], [0.25]], np.float32)
    b0 = np.array([0.1], np.float32)
    w = tf.Variable(w0, name="w")
    b = tf.Variable(b0, name="b")
    gw, gb = full_gradient(x, y, w0, b0)

    def loss_fn():
        return tf.reduce_mean(tf.square(xs @ w + b - ys))

    with tf.GradientTape() as tape:
        loss = loss_fn()
    tape = hvd.DistributedGradientTape(tape)
    check(isinstance(tape, tf.GradientTape), "DistributedGradientTape is a tf.GradientTape")
    dw, db = tape.gradient(loss, [w, b])
    check(np.allclose(dw, gw, atol=1e-6) and np.allclose(db, gb, atol=1e-6),
          "DistributedGradientTape averages gradients into the whole batch's")

    with hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum) as tape:
        loss = loss_fn()
    grads = tape.gradient(loss, {"w": w, "b": b})
    check(np.allclose(grads["w"], gw * SIZE, atol=1e-5) and
          np.allclose(grads["b"], gb * SIZE, atol=1e-5),
          "DistributedGradientTape(op=Sum), entered as a context, with dict sources")

    with tf.GradientTape() as tape:
        loss = loss_fn()
    tape = hvd.DistributedGradientTape(tape, compression=hvd.Compression.fp16)
    dw, db = tape.gradient(loss, [w, b])
    check(np.allclose(dw, gw, atol=1e-2) and np.allclose(db, gb, atol=1e-2),
          "DistributedGradientTape with Compression.fp16 (within 1e-2 of the exact gradient)")

    with tf.GradientTape() as tape:
        loss = loss_fn()
    tape = hvd.DistributedGradientTape(tape, gradient_predivide_factor=float(SIZE))
    dw, db = tape.gradient(loss, [w, b])
    check(np.allclose(dw, gw, atol=1e-6) and np.allclose(db, gb, atol=1e-6),
          "DistributedGradientTape with gradient_predivide_factor")

    unused = tf.Variable([1.0], name="unused")
    with tf.GradientTape() as tape:
        loss = loss_fn()
    dw, du = hvd.DistributedGradientTape(tape).gradient(loss, [w, unused])
    check(du is None and np.allclose(dw, gw, atol=1e-6),
          "DistributedGradientTape keeps None for a variable the loss does not use")

    @tf.function
    def traced():
        with tf.GradientTape() as tape:
            loss = loss_fn()
        return hvd.DistributedGradientTape(tape).gradient(loss, [w, b])
    good = True
    for _ in range(2):
        dw, db = traced()
        good = good and np.allclose(dw, gw, atol=1e-6) and np.allclose(db, gb, atol=1e-6)
    check(good, "DistributedGradientTape inside tf.function, 2 runs")
    check(raises(lambda: hvd.DistributedGradientTape(tf.GradientTape(), op=hvd.Sum,
                                                     gradient_predivide_factor=2.0),
                 ValueError) is not None,
          "gradient_predivide_factor with op=Sum raises ValueError")


def test_op_gradients():
    x = tf.constant([1.0, 2.0, 3.0]) * (RANK + 1)
    up = np.array([1.0, -1.0, 0.5], np.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = hvd.allreduce(x, op=hvd.Sum, name="grad_of_sum")
        loss = tf.reduce_sum(y * up * (RANK + 1))
    g = tape.gradient(loss, x).numpy()
    # d loss / d x on every rank: the sum over ranks of the upstream gradients.
    check(np.allclose(g, up * SIZE * (SIZE + 1) / 2), "the gradient of allreduce(Sum) is the "
          "allreduce of the upstream gradients")


# ---- errors and the end ------------------------------------------------------------------------

def test_errors():
    # One name, a different size on every rank: every rank's op fails, and the engine goes on.
    e = raises(lambda: hvd.allreduce(tf.zeros(RANK + 1), op=hvd.Sum,
                                     name="mismatch").numpy(),
               (ChorusError, tf.errors.OpError))
    check(e is not None, "an allreduce whose size differs across ranks raises (%s)"
          % type(e).__name__)
    out = hvd.allreduce(tf.ones(2), op=hvd.Sum, name="after_mismatch")
    check(same(out, np.full(2, SIZE, np.float32)), "the engine goes on after a failed op")
    check(raises(lambda: hvd.allreduce(tf.ones(2), process_set=object()), ValueError)
          is not None, "a process set raises ValueError")


def main():
    for test in (test_job, test_allreduce_matrix, test_allreduce_forms, test_allreduce_graph,
                 test_sparse, test_compression, test_allgather, test_broadcast,
                 test_broadcast_variables, test_reducescatter, test_gradient_tape,
                 test_op_gradients, test_errors):
        try:
            test()
        except Exception as e:  # a test that raises is a failure; the others may go on
            check(False, "%s raised %s: %s" % (test.__name__, type(e).__name__, e))
    anyone = int(hvd.allreduce(tf.constant(len(check.failures)), name="test.failures",
                               op=hvd.Max).numpy())
    if RANK == 0:
        print("tf_horovod: %s at %d ranks" % ("all checks passed" if anyone == 0 else
                                              "FAILED", SIZE), flush=True)
    hvd.shutdown()
    check(not hvd.is_initialized() and raises(hvd.size, ValueError) is not None,
          "after shutdown(), is_initialized() is False and size() raises")
    sys.exit(1 if anyone or check.failures else 0)


if __name__ == "__main__":
    main()
