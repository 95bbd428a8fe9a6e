"""The TensorFlow ops of chorus.tensorflow._ops (allreduce, allgather, broadcast,
reducescatter) against references every rank computes from all ranks' inputs, eagerly and
inside tf.function. Run under chorus-run at 2 and 3 ranks:

    chorus-run -n 3 python tests/python/tf_ops.py

Inputs are small integers (products of 1s and 2s), so every sum, product, minimum and
maximum is exact in every dtype and any order, and checked exactly; avg of floats, one
division of an exact sum, is checked within two units in the last place of the dtype, and
float32 allreduces with fp16/bf16 wire compression within 2^-10 / 2^-7 of the largest
value (they are exact for these inputs, but the bound is what chorus promises). Also:
odd counts, 0-d and multi-d shapes, allgathers whose first dimensions differ (0 rows on a
rank included), ops issued in different orders on different ranks inside one tf.function
and from threads, gradients through GradientTape against analytic values, descriptions
that differ between ranks raising on every rank (not hanging), and ops run unbound.

Prints one "ok" line per check (rank 0) and a "FAIL" line for every failed check (every
rank); exits 1 on any failure.
"""

import os
import sys
import threading
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

from chorus import comm as C  # noqa: E402
from chorus.tensorflow import _ops  # noqa: E402
from checks import Checks  # noqa: E402

REDUCE_DTYPES = [tf.int8, tf.uint8, tf.int32, tf.uint32, tf.int64, tf.uint64, tf.float16,
                 tf.bfloat16, tf.float32, tf.float64]
MOVE_DTYPES = REDUCE_DTYPES + [tf.bool, tf.int16, tf.uint16, tf.complex64, tf.complex128]
OPS = ["sum", "avg", "min", "max", "prod"]
COUNTS = [1, 7, 1000]
BIG = 1000003
# A unit in the last place, relative, of the floating dtypes.
ULP = {tf.float16: 2.0 ** -10, tf.bfloat16: 2.0 ** -7, tf.float32: 2.0 ** -23,
       tf.float64: 2.0 ** -52}


def values(rank, shape, dtype, op, salt=0):
    """Rank rank's input as float64: small integers whose reductions are exact."""
    n = int(np.prod(shape))
    g = np.random.RandomState((1000 * rank + 7 * n + salt) % (2 ** 31))
    if op == "prod":
        v = g.randint(1, 3, n)          # 1 or 2: at most 2^size
    elif dtype in (tf.uint8, tf.uint16, tf.uint32, tf.uint64, tf.bool) or op in ("min", "max"):
        v = g.randint(0, 30, n)
    else:
        v = g.randint(-10, 11, n)
    if dtype == tf.bool:
        v = v % 2
    return v.astype(np.float64).reshape(shape)


def as_tf(v, dtype):
    return tf.cast(tf.constant(v, dtype=tf.float64), dtype)


def reference(op, inputs, dtype):
    """op over the ranks' float64 inputs, as chorus defines it (avg of integers divides
    toward zero), in float64."""
    w = np.stack(inputs)
    if op == "sum":
        return w.sum(0)
    if op == "prod":
        return w.prod(0)
    if op == "min":
        return w.min(0)
    if op == "max":
        return w.max(0)
    s = w.sum(0)
    return s / len(inputs) if dtype.is_floating else np.trunc(s / len(inputs))


def equal(got, want):
    """Same dtype, shape and elements (tf.Tensors)."""
    return (got.dtype == want.dtype and got.shape == want.shape and
            bool(tf.reduce_all(tf.equal(got, want))))


def close(got, want64, dtype, rel):
    """got within rel of the largest |want| (or of each element's, elementwise)."""
    if got.dtype != dtype or tuple(got.shape) != tuple(np.shape(want64)):
        return False
    g = tf.cast(got, tf.float64).numpy()
    return bool(np.all(np.abs(g - want64) <= rel * np.abs(want64) + 1e-300))


def rows_of(rows, rank, size):
    """(first row, row count) of rank's part of rows: the first ranks get the extra ones."""
    base, extra = divmod(rows, size)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


# ---- eager collectives ---------------------------------------------------------------------

def test_allreduce(check):
    for dtype in REDUCE_DTYPES:
        for op in OPS:
            for shape in [(c,) for c in COUNTS] + [(), (3, 4, 5)]:
                inputs = [values(r, shape, dtype, op) for r in range(SIZE)]
                got = _ops.allreduce(as_tf(inputs[RANK], dtype), op=op)
                want = reference(op, inputs, dtype)
                what = "allreduce %s %s shape %s" % (dtype.name, op, shape)
                if op == "avg" and dtype.is_floating:
                    check(close(got, want, dtype, 2 * ULP[dtype]), what + " (2 ulp)")
                else:
                    check(equal(got, as_tf(want, dtype)), what)
    for dtype, op in ((tf.float32, "sum"), (tf.int32, "max")):
        inputs = [values(r, (BIG,), dtype, op) for r in range(SIZE)]
        got = _ops.allreduce(as_tf(inputs[RANK], dtype), op=op, name="big.%s" % dtype.name)
        check(equal(got, as_tf(reference(op, inputs, dtype), dtype)),
              "allreduce %s %s count %d" % (dtype.name, op, BIG))
    check(_ops.allreduce(tf.constant(1.0), op="average").numpy() == 1.0, "op 'average'")


def test_compression(check):
    for wire, rel in (("fp16", 2.0 ** -10), ("bf16", 2.0 ** -7)):
        for op in ("sum", "avg"):
            inputs = [values(r, (1000,), tf.float32, op, salt=5) for r in range(SIZE)]
            want = reference(op, inputs, tf.float32)
            got = _ops.allreduce(as_tf(inputs[RANK], tf.float32), op=op, compression=wire)
            bound = rel * SIZE * np.abs(np.stack(inputs)).max()
            g = got.numpy().astype(np.float64)
            check(got.dtype == tf.float32 and bool(np.all(np.abs(g - want) <= bound)),
                  "allreduce float32 %s with %s compression (within %g)" % (op, wire, bound))
        # Another dtype or op: compression is ignored and the result exact.
        for dtype, op in ((tf.int32, "sum"), (tf.float64, "sum"), (tf.float32, "max")):
            inputs = [values(r, (7,), dtype, op, salt=6) for r in range(SIZE)]
            got = _ops.allreduce(as_tf(inputs[RANK], dtype), op=op, compression=wire)
            check(equal(got, as_tf(reference(op, inputs, dtype), dtype)),
                  "%s compression ignored for %s %s" % (wire, dtype.name, op))


def test_allgather(check):
    uneven = [2, 0, 5, 1][:SIZE]
    for dtype in MOVE_DTYPES:
        for rows, rest in ((uneven, (3,)), ([4] * SIZE, (3,)), ([7] * SIZE, ()),
                           ([r + 1 for r in range(SIZE)], (2, 2))):
            inputs = [values(r, (rows[r],) + rest, dtype, "max") for r in range(SIZE)]
            got = _ops.allgather(as_tf(inputs[RANK], dtype))
            want = as_tf(np.concatenate(inputs), dtype)
            check(equal(got, want), "allgather %s rows %s x %s" % (dtype.name, rows, rest))
    inputs = [values(r, (BIG + r,), tf.float32, "sum") for r in range(SIZE)]
    got = _ops.allgather(as_tf(inputs[RANK], tf.float32), name="big")
    check(equal(got, as_tf(np.concatenate(inputs), tf.float32)),
          "allgather float32 of %d + rank rows" % BIG)
    try:
        _ops.allgather(tf.constant(1.0))
        check(False, "allgather of a 0-d tensor raises")
    except ValueError:
        check(True, "allgather of a 0-d tensor raises")


def test_broadcast(check):
    for dtype in MOVE_DTYPES:
        for shape in ((7,), (), (3, 4, 5)):
            for root in sorted({0, SIZE - 1}):
                inputs = [values(r, shape, dtype, "max") for r in range(SIZE)]
                got = _ops.broadcast(as_tf(inputs[RANK], dtype), root)
                check(equal(got, as_tf(inputs[root], dtype)),
                      "broadcast %s shape %s root %d" % (dtype.name, shape, root))
    inputs = [values(r, (BIG,), tf.float32, "sum") for r in range(SIZE)]
    got = _ops.broadcast(as_tf(inputs[RANK], tf.float32), SIZE - 1, name="big")
    check(equal(got, as_tf(inputs[SIZE - 1], tf.float32)), "broadcast float32 count %d" % BIG)


def test_reducescatter(check):
    for dtype in REDUCE_DTYPES:
        for op in OPS:
            for shape in ((7,), (7, 3), (2, 2)):
                inputs = [values(r, shape, dtype, op, salt=3) for r in range(SIZE)]
                got = _ops.reducescatter(as_tf(inputs[RANK], dtype), op=op)
                first, n = rows_of(shape[0], RANK, SIZE)
                want = reference(op, inputs, dtype)[first:first + n]
                what = "reducescatter %s %s shape %s" % (dtype.name, op, shape)
                if op == "avg" and dtype.is_floating:
                    check(close(got, want, dtype, 2 * ULP[dtype]), what + " (2 ulp)")
                else:
                    check(equal(got, as_tf(want, dtype)), what)
    inputs = [values(r, (BIG,), tf.float32, "sum") for r in range(SIZE)]
    got = _ops.reducescatter(as_tf(inputs[RANK], tf.float32), name="big")
    first, n = rows_of(BIG, RANK, SIZE)
    check(equal(got, as_tf(reference("sum", inputs, tf.float32)[first:first + n], tf.float32)),
          "reducescatter float32 sum count %d" % BIG)


# ---- tf.function, orders, threads -------------------------------------------------------------

def test_function(check):
    @tf.function
    def step(x, rows):
        return (_ops.allreduce(x, op="avg"), _ops.allgather(rows), _ops.broadcast(x, 0),
                _ops.reducescatter(x, op="max"), _ops.allreduce(x, op="min", name="fn.min"))

    for call in range(3):
        xs = [values(r, (7, 2), tf.float32, "min", salt=call) for r in range(SIZE)]
        rows = [values(r, (r + call % 2, 2), tf.int64, "sum", salt=call) for r in range(SIZE)]
        avg, gathered, bcast, rs, mn = step(as_tf(xs[RANK], tf.float32),
                                            as_tf(rows[RANK], tf.int64))
        first, n = rows_of(7, RANK, SIZE)
        ok = (close(avg, reference("avg", xs, tf.float32), tf.float32, 2 * ULP[tf.float32]) and
              equal(gathered, as_tf(np.concatenate(rows), tf.int64)) and
              equal(bcast, as_tf(xs[0], tf.float32)) and
              equal(rs, as_tf(reference("max", xs, tf.float32)[first:first + n], tf.float32))
              and equal(mn, as_tf(reference("min", xs, tf.float32), tf.float32)))
        check(ok, "tf.function with every op, call %d" % call)
    check(step.experimental_get_tracing_count() <= 2, "tf.function traced at most twice")


def test_orders(check):
    """Ranks submit one tf.function's collectives in different orders: each op's input
    first passes a delay that depends on the rank (a chain of control dependencies would
    not do: an op would wait for the one before to complete, which a rank that runs them
    in another order never lets happen). The engine pairs them by name."""
    names = ["order.%d" % i for i in range(5)]
    order = names[RANK:] + names[:RANK]
    if RANK % 2:
        order.reverse()
    delay = {name: 0.03 * k for k, name in enumerate(order)}

    def late(x, seconds):
        def wait(v):
            time.sleep(seconds)
            return v
        y = tf.py_function(wait, [x], x.dtype)
        y.set_shape(x.shape)
        return y

    @tf.function
    def run(xs):
        out = [_ops.allreduce(late(xs[i], delay[name]), name=name)
               for i, name in enumerate(names)]
        g = _ops.allgather(tf.reshape(xs[0], [-1])[:RANK + 1])   # unnamed, in a graph
        return out, g

    inputs = [[values(r, (5 + i,), tf.float32, "sum", salt=i) for i in range(5)]
              for r in range(SIZE)]
    for call in range(2):
        got, g = run([as_tf(v, tf.float32) for v in inputs[RANK]])
        ok = all(equal(got[i], as_tf(reference("sum", [inputs[r][i] for r in range(SIZE)],
                                                        tf.float32), tf.float32))
                 for i in range(5))
        want_g = np.concatenate([inputs[r][0][:r + 1] for r in range(SIZE)])
        check(ok and equal(g, as_tf(want_g, tf.float32)),
              "a tf.function's allreduces submitted in a different order on each rank, "
              "call %d" % call)


def test_threads(check):
    """Eager ops from threads started in a different order on each rank, each thread
    reusing its name for several rounds."""
    n = 6
    inputs = [[values(r, (3 + i,), tf.int32, "sum", salt=i) for i in range(n)]
              for r in range(SIZE)]
    results = {}

    def work(i):
        try:
            for round_ in range(3):
                got = _ops.allreduce(as_tf(inputs[RANK][i], tf.int32) * (round_ + 1),
                                     name="thread.%d" % i)
                want = reference("sum", [inputs[r][i] for r in range(SIZE)], tf.int32)
                results[(i, round_)] = equal(got, as_tf(want * (round_ + 1), tf.int32))
        except Exception as e:  # reported below as a failed check
            results[(i, "error")] = e

    order = list(range(n))
    np.random.RandomState(RANK + 11).shuffle(order)
    threads = []
    for i in order:
        t = threading.Thread(target=work, args=(i,))
        t.start()
        threads.append(t)
        time.sleep(0.01)
    for t in threads:
        t.join()
    check(len(results) == 3 * n and all(v is True for v in results.values()),
          "allreduces from %d threads in a different order on each rank, 3 rounds each (%s)"
          % (n, [v for v in results.values() if v is not True][:1]))


def test_name_reuse(check):
    for round_ in range(4):
        shape = (3 + round_,)   # a name may change its size when every rank does
        inputs = [values(r, shape, tf.float64, "sum", salt=round_) for r in range(SIZE)]
        got = _ops.allreduce(as_tf(inputs[RANK], tf.float64), name="reused")
        check(equal(got, as_tf(reference("sum", inputs, tf.float64), tf.float64)),
              "a name reused with a new size, round %d" % round_)


def test_same_name_at_once(check):
    """Several threads submit one name at once: the later rounds wait on their rank for
    the earlier one (the engine takes one round of a name at a time). The threads give
    the same values, so any pairing of rounds across ranks gives the same results."""
    inputs = [values(r, (9,), tf.int64, "sum", salt=21) for r in range(SIZE)]
    want = as_tf(reference("sum", inputs, tf.int64), tf.int64)
    results = []

    def work():
        try:
            results.append(equal(_ops.allreduce(as_tf(inputs[RANK], tf.int64),
                                                name="same.at_once"), want))
        except Exception as e:  # reported below as a failed check
            results.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(results == [True] * 4, "4 threads submitting one name at once (%s)"
          % [v for v in results if v is not True][:1])


def test_loop(check):
    """An op in a tf.while_loop: one node, a round per iteration."""
    @tf.function
    def loop(x):
        for _ in tf.range(3):
            x = _ops.allreduce(x)
        return x

    got = loop(tf.fill([3], float(RANK + 1)))
    want = SIZE * (SIZE + 1) / 2 * SIZE ** 2
    check(equal(got, tf.fill([3], want)), "an allreduce in a tf.while_loop, 3 iterations")


# ---- gradients ---------------------------------------------------------------------------------

def gradients(check, where, run):
    """run(f) applies f to (x, rank weights) in GradientTape eagerly or in a tf.function."""
    w = [np.arange(1.0, 5.0) * (r + 1) for r in range(SIZE)]

    def reduce_grad(op):
        def f(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(_ops.allreduce(x, op=op) * tf.constant(w[RANK]))
            return tape.gradient(loss, x)
        return f

    x = tf.constant(np.arange(4.0) + RANK)
    for op, want in (("sum", sum(w)), ("avg", sum(w) / SIZE)):
        got = run(reduce_grad(op), x)
        check(np.allclose(got.numpy(), want, rtol=1e-12), "%s: gradient of allreduce %s"
              % (where, op))

    rows = [r + 1 for r in range(SIZE)]
    total = sum(rows)
    W = [np.arange(total * 2.0).reshape(total, 2) * (r + 1) for r in range(SIZE)]

    def gather_grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(_ops.allgather(x) * tf.constant(W[RANK]))
        return tape.gradient(loss, x)

    first = sum(rows[:RANK])
    got = run(gather_grad, tf.ones([rows[RANK], 2], tf.float64))
    check(np.allclose(got.numpy(), sum(W)[first:first + rows[RANK]], rtol=1e-12),
          "%s: gradient of allgather (uneven rows)" % where)

    root = SIZE - 1

    def bcast_grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(_ops.broadcast(x, root) * tf.constant(w[RANK]))
        return tape.gradient(loss, x)

    got = run(bcast_grad, x)
    want = sum(w) if RANK == root else np.zeros(4)
    check(np.allclose(got.numpy(), want, rtol=1e-12), "%s: gradient of broadcast" % where)

    _, mine = rows_of(7, RANK, SIZE)
    parts = [np.full((rows_of(7, r, SIZE)[1], 2), r + 1.0) for r in range(SIZE)]
    for op, scale in (("sum", 1.0), ("avg", 1.0 / SIZE)):
        def rs_grad(x, op=op):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(_ops.reducescatter(x, op=op) * tf.constant(parts[RANK]))
            return tape.gradient(loss, x)
        got = run(rs_grad, tf.ones([7, 2], tf.float64))
        check(np.allclose(got.numpy(), np.concatenate(parts) * scale, rtol=1e-12),
              "%s: gradient of reducescatter %s" % (where, op))

    def min_grad(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(_ops.allreduce(x, op="min"))
        return tape.gradient(loss, x)
    try:
        run(min_grad, x)
        check(False, "%s: allreduce min has no gradient (raises)" % where)
    except NotImplementedError:
        check(True, "%s: allreduce min has no gradient (raises)" % where)


# ---- errors ------------------------------------------------------------------------------------

def expect_error(check, what, call, error):
    start = time.monotonic()
    try:
        call()
        check(False, "%s raises on every rank (it returned)" % what)
    except error as e:
        took = time.monotonic() - start
        check(took < 30, "%s raises %s on every rank in %.1f s: %s"
              % (what, error.__name__, took, str(e).splitlines()[0][-120:]))


def test_mismatch(check):
    expect_error(check, "allreduce of different sizes under one name",
                 lambda: _ops.allreduce(tf.ones([5 + RANK]), name="mismatch.size"),
                 tf.errors.InvalidArgumentError)
    expect_error(check, "allreduce of different dtypes under one name",
                 lambda: _ops.allreduce(tf.ones([5], [tf.float32, tf.float64][RANK % 2]),
                                        name="mismatch.dtype"),
                 tf.errors.InvalidArgumentError)
    expect_error(check, "allgather with different later dimensions",
                 lambda: _ops.allgather(tf.ones([2, 3 + RANK]), name="mismatch.gather"),
                 tf.errors.InvalidArgumentError)
    expect_error(check, "allgather with different ranks of dimensions",
                 lambda: _ops.allgather(tf.ones([2, 3] + [1] * (RANK % 2)),
                                        name="mismatch.gather_dims"),
                 tf.errors.InvalidArgumentError)

    @tf.function
    def bad(x):
        return _ops.reducescatter(x, name="mismatch.function")
    expect_error(check, "reducescatter of different sizes in a tf.function",
                 lambda: bad(tf.ones([4 + RANK, 2])), tf.errors.InvalidArgumentError)
    got = _ops.allreduce(tf.ones([5]), name="mismatch.size")
    check(equal(got, tf.fill([5], float(SIZE))), "the engine goes on after the mismatches")


def main():
    global RANK, SIZE
    comm = C.Comm.from_env()
    engine = C.Engine(comm)
    _ops.bind(engine, comm)
    RANK, SIZE = comm.rank, comm.size
    check = Checks(RANK, verbose=True)
    start = time.monotonic()
    test_allreduce(check)
    test_compression(check)
    test_allgather(check)
    test_broadcast(check)
    test_reducescatter(check)
    test_function(check)
    test_orders(check)
    test_threads(check)
    test_name_reuse(check)
    test_same_name_at_once(check)
    test_loop(check)
    gradients(check, "eager", lambda f, x: f(x))
    gradients(check, "tf.function", lambda f, x: tf.function(f)(x))
    test_mismatch(check)

    _ops.unbind()
    try:
        _ops.allreduce(tf.ones([3]))
        check(False, "an op run while unbound raises FailedPreconditionError")
    except tf.errors.FailedPreconditionError:
        check(True, "an op run while unbound raises FailedPreconditionError")
    engine.destroy()
    comm.destroy()
    print("tf_ops: rank %d of %d: %d checks, %d failed, %.1f s"
          % (RANK, SIZE, check.count, len(check.failures), time.monotonic() - start),
          flush=True)
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
