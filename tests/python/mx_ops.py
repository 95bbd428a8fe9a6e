"""chorus.mxnet's calls on NDArrays against exact numpy references.

Run under chorus-run with any number of ranks (2 and 3 are the usual):

    chorus-run -n 3 python tests/python/mx_ops.py

Every rank computes the references from every rank's inputs, which it can generate
itself; values are small integers, so sums, minima, maxima and products are exact in
every dtype and any order of additions; float averages are checked to within a rounding
of their dtype (chorus divides the sum; numpy's reference divides in float64). Prints one
"ok" line per check (rank 0) and one "FAIL" line per failed check (any rank); exits 0
when every check passed on every rank, else 1. A watchdog ends a run that hangs
(MX_OPS_TEST_TIMEOUT seconds, default 240).
"""

import faulthandler
import os
import sys
import time
import traceback
from unittest import mock

os.environ.setdefault("CHORUS_TIMEOUT", "60")   # a rank that dies fails the others soon
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
faulthandler.dump_traceback_later(float(os.environ.get("MX_OPS_TEST_TIMEOUT", "240")),
                                  exit=True)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

import chorus.mxnet as hvd  # noqa: E402
from chorus import ChorusError  # noqa: E402
from chorus.mxnet import _arrays, _ops  # noqa: E402
from checks import Checks, raises, reduce_exact  # noqa: E402


check = Checks(verbose=True)

DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int32", "int64"]
SHAPES = [(1,), (7,), (1001,), (3, 5), (2, 3, 4)]
FLOAT_RTOL = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-12}


def data(rank, shape, dtype, op="sum", salt=0):
    """Rank rank's input, as numpy: small integers, so every reduction is exact."""
    rng = np.random.RandomState(7919 * rank + 31 * salt + sum(shape))
    if op == "product":
        v = rng.randint(1, 3, shape)
    elif dtype == "uint8":
        v = rng.randint(0, 41, shape)
    else:
        v = rng.randint(-20, 21, shape)
    return v.astype(dtype)


def same(arr, want):
    """arr (an NDArray) has want's dtype, shape and values exactly."""
    if not isinstance(arr, mx.nd.NDArray):
        return False
    got = arr.asnumpy()
    return got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def near(arr, want, dtype):
    """Exact for integers; within a rounding of dtype for floats."""
    if not np.issubdtype(np.dtype(dtype), np.floating):
        return same(arr, want)
    got = arr.asnumpy()
    return (got.dtype == want.dtype and got.shape == want.shape and
            np.allclose(got.astype(np.float64), want.astype(np.float64),
                        rtol=FLOAT_RTOL[dtype], atol=0))


# ---- before init ------------------------------------------------------------------------

def test_before_init():
    for label, fn in (("size", hvd.size), ("rank", hvd.rank),
                      ("allreduce", lambda: hvd.allreduce(mx.nd.ones(2))),
                      ("broadcast_", lambda: hvd.broadcast_(mx.nd.ones(2), 0)),
                      ("allgather", lambda: hvd.allgather(mx.nd.ones(2))),
                      ("DistributedTrainer",
                       lambda: hvd.DistributedTrainer(mx.gluon.nn.Dense(2).collect_params(),
                                                      "sgd"))):
        e = raises(fn, ValueError)
        check(e is not None and "init()" in str(e),
              "%s before init raises a clear ValueError (%s)" % (label, e))
    check(not hvd.is_initialized(), "is_initialized is False before init")


# ---- the job ----------------------------------------------------------------------------

def test_job():
    check(hvd.is_initialized(), "is_initialized")
    env_rank = os.environ.get("CHORUS_RANK")
    if env_rank is not None:
        check(RANK == int(env_rank), "rank %d is the launcher's %s" % (RANK, env_rank))
        check(SIZE == int(os.environ["CHORUS_SIZE"]), "size %d is the launcher's" % SIZE)
    check(0 <= hvd.local_rank() < hvd.local_size() <= SIZE, "local_rank/local_size")
    hvd.init()  # idempotent
    check(hvd.size() == SIZE, "init again changes nothing")


# ---- allreduce --------------------------------------------------------------------------

def test_allreduce():
    for dtype in DTYPES:
        for op, average in (("sum", False), ("avg", True)):
            for i, shape in enumerate(SHAPES):
                inputs = [data(r, shape, dtype, op) for r in range(SIZE)]
                want = reduce_exact(op, inputs, dtype)
                mine = mx.nd.array(inputs[RANK], dtype=dtype)
                name = None if i % 2 else "ar.%s.%s.%d" % (dtype, op, i)
                out = hvd.allreduce(mine, average=average, name=name)
                ok = near(out, want, dtype) and same(mine, inputs[RANK])
                check(ok and out.context == mine.context,
                      "allreduce %s %s %s (name=%s), input left as it was"
                      % (dtype, op, shape, name))
                back = hvd.allreduce_(mine, average=average,
                                      name=None if name is None else name + ".inplace")
                check(back is mine and near(mine, want, dtype), "allreduce_ %s %s %s"
                      % (dtype, op, shape))
    # The other ops, and the default (average).
    for opname, op in (("min", hvd.Min), ("max", hvd.Max), ("product", hvd.Product)):
        for dtype in ("float32", "int32", "int8"):
            inputs = [data(r, (4, 6), dtype, opname, 1) for r in range(SIZE)]
            out = hvd.allreduce(mx.nd.array(inputs[RANK], dtype=dtype), op=op,
                                name="op.%s.%s" % (opname, dtype))
            check(same(out, reduce_exact(opname, inputs, dtype)), "allreduce op=%s %s"
                  % (opname, dtype))
    inputs = [data(r, (6, 4), "float64") for r in range(SIZE)]
    total = reduce_exact("sum", inputs, "float64")
    mine = mx.nd.array(inputs[RANK], dtype="float64")
    check(near(hvd.allreduce(mine), total / SIZE, "float64"), "allreduce's default: average")
    out = hvd.allreduce(mine, average=False, prescale_factor=2.0, postscale_factor=0.25)
    check(same(out, total / 2), "allreduce prescale 2, postscale 0.25")
    # In place on a view: rows 2..4 of a larger array, which must change in its parent.
    parent = mx.nd.array(np.arange(24).reshape(6, 4) + 100 * RANK, dtype="float32")
    before = parent.asnumpy()
    view = parent[2:5]
    hvd.allreduce_(view, average=False, name="view")
    want = before.copy()
    want[2:5] = sum(np.arange(24).reshape(6, 4)[2:5] + 100 * r for r in range(SIZE))
    check(same(parent, want.astype("float32")), "allreduce_ of a view writes its parent's "
          "rows only")
    # mxnet.numpy arrays reduce too, and stay mxnet.numpy arrays.
    npa = mx.np.array(inputs[RANK], dtype="float64")
    out = hvd.allreduce(npa, average=False, name="mx.np")
    check(isinstance(out, mx.np.ndarray) and np.array_equal(out.asnumpy(), total),
          "allreduce of an mxnet.numpy array")
    # A name reused with other sizes, alike on every rank; a name longer than 255 bytes.
    for n in (4, 6, 4, 9):
        out = hvd.allreduce(mx.nd.full((n,), RANK + 1), average=False, name="reused")
        check(same(out, np.full((n,), SIZE * (SIZE + 1) // 2, dtype="float32")),
              "a name reused with %d elements" % n)
    out = hvd.allreduce(mx.nd.ones(5), average=False, name="long." + "x" * 600)
    check(same(out, np.full((5,), SIZE, dtype="float32")), "a 605-character name")


def test_zero_copy():
    """The array's own memory goes to chorus: no numpy copy on the way, in or out."""
    arr = mx.nd.array(data(RANK, (33,), "float32"))
    buf = _arrays.Buffer(arr, "test", write=True)
    check(buf.staged is None and buf.ptr == _arrays._address(arr),
          "Buffer hands chorus the NDArray's own address")
    calls = []
    real = mx.nd.NDArray.asnumpy

    def counting(self):
        calls.append(self.shape)
        return real(self)
    want = reduce_exact("sum", [data(r, (33,), "float32") for r in range(SIZE)], "float32")
    with mock.patch.object(mx.nd.NDArray, "asnumpy", counting):
        hvd.allreduce_(arr, average=False, name="zero_copy")
        out = hvd.allreduce(mx.nd.ones(8, dtype="int64"), average=False, name="zero_copy.2")
        hvd.broadcast_(arr, 0, name="zero_copy.bc")
    check(not calls, "allreduce_, allreduce and broadcast_ copy nothing through numpy "
          "(%d copies)" % len(calls))
    check(same(out, np.full((8,), SIZE, dtype="int64")) and same(arr, want),
          "zero-copy allreduce's and allreduce_'s results")


def test_staged():
    """With zero copy turned off every array is staged through numpy: same results."""
    _arrays.ZERO_COPY = False
    try:
        for dtype in ("float16", "int64"):
            inputs = [data(r, (3, 7), dtype) for r in range(SIZE)]
            mine = mx.nd.array(inputs[RANK], dtype=dtype)
            out = hvd.allreduce(mine, average=False, name="staged." + dtype)
            check(same(out, reduce_exact("sum", inputs, dtype)), "staged allreduce %s" % dtype)
            hvd.allreduce_(mine, average=False, name="staged_." + dtype)
            check(same(mine, reduce_exact("sum", inputs, dtype)), "staged allreduce_ %s" % dtype)
            hvd.broadcast_(mine, SIZE - 1, name="staged.bc." + dtype)
            check(same(mine, reduce_exact("sum", inputs, dtype)), "staged broadcast_ %s" % dtype)
        parts = [np.full((r + 1, 2), r, dtype="int32") for r in range(SIZE)]
        out = hvd.allgather(mx.nd.array(parts[RANK], dtype="int32"), name="staged.ag")
        check(same(out, np.concatenate(parts)), "staged allgather")
    finally:
        _arrays.ZERO_COPY = True


# ---- broadcast --------------------------------------------------------------------------

def test_broadcast():
    for root in range(SIZE):
        for dtype in DTYPES + ["bool"]:
            shape = (4, 5) if root % 2 else (3, 2, 7)
            inputs = [data(r, shape, "int64", salt=root) > 0 if dtype == "bool"
                      else data(r, shape, dtype, salt=root) for r in range(SIZE)]
            mine = mx.nd.array(inputs[RANK], dtype=dtype)
            out = hvd.broadcast(mine, root, name="bc.%d.%s" % (root, dtype))
            check(same(out, inputs[root]) and same(mine, inputs[RANK]),
                  "broadcast from %d (%s %s), input left as it was" % (root, dtype, shape))
            back = hvd.broadcast_(mine, root)
            check(back is mine and same(mine, inputs[root]), "broadcast_ from %d (%s)"
                  % (root, dtype))
    e = raises(lambda: hvd.broadcast(mx.nd.zeros(2), SIZE), ValueError)
    check(e is not None, "broadcast from a root out of range raises ValueError")


# ---- allgather --------------------------------------------------------------------------

def test_allgather():
    for label, rows_of in (("r+1 rows", lambda r: r + 1), ("equal rows", lambda r: 3),
                           ("2r+1 rows", lambda r: 2 * r + 1)):
        for dtype in ("float16", "float32", "int8", "int64"):
            parts = [(np.arange(rows_of(r) * 6).reshape(-1, 2, 3) % 50 + r).astype(dtype)
                     for r in range(SIZE)]
            out = hvd.allgather(mx.nd.array(parts[RANK], dtype=dtype),
                                name="ag.%s.%s" % (label, dtype))
            check(same(out, np.concatenate(parts)), "allgather (%s, %s, trailing (2, 3))"
                  % (label, dtype))
    one_d = [np.arange(r + 2, dtype="int32") for r in range(SIZE)]
    out = hvd.allgather(mx.nd.array(one_d[RANK], dtype="int32"))
    check(same(out, np.concatenate(one_d)), "allgather of 1-d arrays, unnamed")
    bad = mx.nd.zeros((2, 3 + RANK % 2))
    e = raises(lambda: hvd.allgather(bad, name="ag.bad"), (ValueError, ChorusError))
    check(e is not None, "allgather of different trailing dims raises on every rank (%s)"
          % str(e).splitlines()[0] if e else None)
    hs = [hvd.allgather_async(mx.nd.full((RANK + k + 1, 2), k), name="ag.again")
          for k in range(3)]
    for k, h in enumerate(hs):
        want = np.concatenate([np.full((r + k + 1, 2), k, dtype="float32")
                               for r in range(SIZE)])
        check(same(hvd.synchronize(h), want), "allgather of a name in flight, round %d" % k)
    check("allgather.ag.again" not in _ops._state.gathers,
          "a finished named allgather leaves nothing behind in the tables")
    # Two allgathers in flight, waited for in different orders: even ranks wait for the
    # second first; odd ranks submit the second, wait for it, and only then the first. The
    # second's second stage must not wait for the first's first stage.
    first = [np.full((r + 1, 2), r, dtype="int32") for r in range(SIZE)]
    second = [np.full((r + 2, 3), 10 + r, dtype="int32") for r in range(SIZE)]
    if RANK % 2 == 0:
        ha = hvd.allgather_async(mx.nd.array(first[RANK], dtype="int32"), name="ag.first")
        hb = hvd.allgather_async(mx.nd.array(second[RANK], dtype="int32"), name="ag.second")
        got_second, got_first = hvd.synchronize(hb), hvd.synchronize(ha)
    else:
        got_second = hvd.allgather(mx.nd.array(second[RANK], dtype="int32"), name="ag.second")
        got_first = hvd.allgather(mx.nd.array(first[RANK], dtype="int32"), name="ag.first")
    check(same(got_first, np.concatenate(first)) and same(got_second, np.concatenate(second)),
          "two allgathers waited for in different orders on different ranks")


# ---- different orders on different ranks --------------------------------------------------

def test_orders():
    """Odd ranks submit in the opposite order, and everyone waits in yet another order."""
    shapes = [(3,), (17,), (2, 9), (1000,)]
    inputs = [[data(r, s, "float64", salt=k) for k, s in enumerate(shapes)]
              for r in range(SIZE)]
    wants = [reduce_exact("sum", [inputs[r][k] for r in range(SIZE)], "float64")
             for k in range(len(shapes))]
    order = list(range(len(shapes)))
    if RANK % 2:
        order.reverse()
    arrays = [mx.nd.array(inputs[RANK][k], dtype="float64") for k in range(len(shapes))]
    roots = [k % SIZE for k in range(len(shapes))]
    jobs = []
    for k in order:
        jobs.append(("ar", k, hvd.allreduce_async(arrays[k], average=False,
                                                  name="order.ar.%d" % k)))
        jobs.append(("ar_", k, hvd.allreduce_async_(arrays[k].copy(), average=False,
                                                    name="order.ar_.%d" % k)))
        jobs.append(("bc", k, hvd.broadcast_async(arrays[k], roots[k],
                                                  name="order.bc.%d" % k)))
        jobs.append(("ag", k, hvd.allgather_async(mx.nd.full((RANK + 1, 2), RANK + k),
                                                  name="order.ag.%d" % k)))
    deadline = time.time() + 30
    while not all(hvd.poll(h) for _, _, h in jobs) and time.time() < deadline:
        time.sleep(0.001)
    check(all(hvd.poll(h) for _, _, h in jobs), "poll turns true for every submission")
    for kind, k, h in reversed(jobs):
        out = hvd.synchronize(h)
        if kind in ("ar", "ar_"):
            check(same(out, wants[k]), "%s in a different order on each rank, %d" % (kind, k))
        elif kind == "bc":
            check(same(out, inputs[roots[k]][k]), "broadcast_async in a different order, %d"
                  % k)
        else:
            want = np.concatenate([np.full((r + 1, 2), r + k, dtype="float32")
                                   for r in range(SIZE)])
            check(same(out, want), "allgather_async in a different order, %d" % k)
    check(raises(lambda: hvd.synchronize(jobs[0][2]), ValueError) is not None,
          "synchronize of a handle already synchronized raises ValueError")


# ---- parameters -------------------------------------------------------------------------

def identical_everywhere(flat, name):
    every = hvd.allgather(mx.nd.array(flat.reshape(1, -1), dtype=flat.dtype), name=name)
    rows = every.asnumpy()
    return all(np.array_equal(rows[r], rows[0]) for r in range(SIZE))


def flat_params(net):
    return np.concatenate([p.data().asnumpy().ravel()
                           for _, p in sorted(net.collect_params().items())])


def make_net(prefix):
    net = mx.gluon.nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(mx.gluon.nn.Dense(5, in_units=4, activation="tanh"))
        net.add(mx.gluon.nn.Dense(3, in_units=5))
    return net


def test_broadcast_parameters():
    mx.random.seed(100 + RANK)   # a different model on every rank
    net = make_net("bp_")
    net.initialize(mx.init.Uniform(1.0), ctx=mx.cpu())
    check(not identical_everywhere(flat_params(net), "bp.before"),
          "the models differ before broadcast_parameters")
    root = SIZE - 1
    hvd.broadcast_parameters(net.collect_params(), root_rank=root)
    flat = flat_params(net)
    check(identical_everywhere(flat, "bp.after"), "broadcast_parameters(ParameterDict)")
    mx.random.seed(100 + root)
    ref = make_net("bp_")
    ref.initialize(mx.init.Uniform(1.0), ctx=mx.cpu())
    check(np.array_equal(flat, flat_params(ref)), "the parameters are root %d's" % root)
    # A dict of NDArrays.
    arrays = {"a": mx.nd.full((3, 2), RANK), "b": mx.nd.array(np.arange(5) * (RANK + 1),
                                                              dtype="int64")}
    hvd.broadcast_parameters(arrays, root_rank=0)
    check(same(arrays["a"], np.zeros((3, 2), "float32")) and
          same(arrays["b"], np.arange(5, dtype="int64")), "broadcast_parameters(dict)")
    # Parameters whose initialization gluon defers to the first forward pass.
    mx.random.seed(300 + RANK)
    lazy = mx.gluon.nn.Dense(4, prefix="lazy_")     # in_units unknown until it sees data
    lazy.initialize(mx.init.Uniform(1.0), ctx=mx.cpu())
    hvd.broadcast_parameters(lazy.collect_params(), root_rank=0)
    lazy(mx.nd.ones((2, 6)))
    check(identical_everywhere(flat_params(lazy), "bp.lazy"),
          "broadcast_parameters of deferred parameters, at their initialization")
    e = raises(lambda: hvd.broadcast_parameters([mx.nd.ones(2)], 0), TypeError)
    check(e is not None, "broadcast_parameters of a list raises TypeError")


# ---- the kvstore ------------------------------------------------------------------------

def test_kvstore():
    kv = mx.kv.create("chorus")
    check(kv.type == "chorus" and kv.rank == RANK and kv.num_workers == SIZE,
          "mx.kv.create('chorus'): type, rank, num_workers")
    check(kv.is_capable("optimizer") is False, "is_capable('optimizer') is False")
    check(raises(lambda: kv.is_capable("teleport"), ValueError) is not None,
          "is_capable of an unknown capability raises ValueError")
    inputs = [data(r, (4, 3), "float32", salt=9) for r in range(SIZE)]
    total = reduce_exact("sum", inputs, "float32")
    v = mx.nd.array(inputs[RANK])
    kv.pushpull(3, v)
    check(same(v, total), "pushpull in place sums over the ranks")
    v = mx.nd.array(inputs[RANK])
    out = mx.nd.zeros((4, 3))
    kv.pushpull("named", v, out=out)
    check(same(out, total) and same(v, inputs[RANK]), "pushpull into out")
    # One value per context: summed over the contexts and the ranks, into each of them.
    vs = [mx.nd.array(inputs[RANK], ctx=mx.cpu(0)), mx.nd.array(inputs[RANK], ctx=mx.cpu(1))]
    kv.pushpull(4, vs)
    check(all(same(x, 2 * total) for x in vs), "pushpull of a list of values (two contexts)")
    # A list of keys, in a different order on odd ranks.
    keys = [10, 11, 12]
    vals = {k: mx.nd.full((k,), RANK + k) for k in keys}
    order = keys[::-1] if RANK % 2 else keys
    kv.pushpull(order, [vals[k] for k in order])
    check(all(same(vals[k], np.full((k,), sum(r + k for r in range(SIZE)), "float32"))
              for k in keys), "pushpull of a list of keys in different orders")
    # broadcast: rank 0's value into the outs, value left alone unless it is one of them.
    value = mx.nd.full((2, 2), RANK + 1)
    outs = [mx.nd.zeros((2, 2)), mx.nd.zeros((2, 2))]
    kv.broadcast("w", value, outs)
    check(all(same(o, np.ones((2, 2), "float32")) for o in outs) and
          same(value, np.full((2, 2), RANK + 1, "float32")), "kvstore broadcast into outs")
    kv.broadcast(5, value, [value])
    check(same(value, np.ones((2, 2), "float32")), "kvstore broadcast in place")
    e = raises(lambda: kv.set_optimizer(mx.optimizer.SGD()), NotImplementedError)
    check(e is not None, "kvstore set_optimizer raises NotImplementedError")


# ---- errors -----------------------------------------------------------------------------

def test_errors():
    if RANK == 0:
        print("test_errors: the engine logs the arrays that differ between ranks below, as "
              "it should", flush=True)
    # A name with a different size on odd ranks: fails on every rank, at once.
    start = time.monotonic()
    e = raises(lambda: hvd.allreduce(mx.nd.ones(3 + RANK % 2), name="mismatch.count"),
               ChorusError)
    took = time.monotonic() - start
    check(e is not None and e.name == "INVALID_ARG" and took < 10,
          "a size that differs under one name raises INVALID_ARG on every rank (%r, %.1f s)"
          % (e, took))
    e = raises(lambda: hvd.broadcast_(mx.nd.ones((2, 2 + RANK % 2)), 0, name="mismatch.bc"),
               ChorusError)
    check(e is not None, "broadcast_ of a size that differs raises on every rank")
    h = hvd.allreduce_async(mx.nd.ones(4, dtype="float32" if RANK % 2 else "float64"),
                            name="mismatch.dtype")
    check(raises(lambda: hvd.synchronize(h), ChorusError) is not None,
          "a dtype that differs raises at synchronize on every rank")
    # The engine goes on, for new names and for the failed one submitted alike.
    out = hvd.allreduce(mx.nd.ones(5), average=False, name="after.mismatch")
    check(same(out, np.full((5,), SIZE, "float32")), "a new name after a mismatch")
    out = hvd.allreduce(mx.nd.ones(6), average=False, name="mismatch.count")
    check(same(out, np.full((6,), SIZE, "float32")), "the failed name, submitted alike")

    # Arrays chorus.mxnet does not take, refused clearly on this rank alone.
    e = raises(lambda: hvd.allreduce(mx.nd.ones(3, dtype="bool"), name="bool"),
               hvd.Unsupported)
    check(e is not None and "bool" in str(e), "allreduce of bool raises Unsupported (%s)" % e)
    sparse = mx.nd.sparse.zeros("row_sparse", (4, 2))
    e = raises(lambda: hvd.allreduce(sparse, name="sparse"), hvd.Unsupported)
    check(e is not None and "row_sparse" in str(e), "a sparse array raises Unsupported")
    gpu_array = mx.nd.ones(3)
    with mock.patch.object(mx.nd.NDArray, "context", new_callable=mock.PropertyMock,
                           return_value=mx.gpu(0)):
        errors = [raises(fn, hvd.Unsupported) for fn in (
            lambda: hvd.allreduce(gpu_array, name="gpu"),
            lambda: hvd.broadcast_(gpu_array, 0, name="gpu"),
            lambda: hvd.allgather(gpu_array, name="gpu"))]
    check(all(e is not None and "not supported" in str(e) and "gpu" in str(e)
              for e in errors), "arrays on a GPU raise Unsupported: %s" % errors[0])
    e = raises(lambda: hvd.allreduce(np.ones(3)), TypeError)
    check(e is not None, "a numpy array (not an NDArray) raises TypeError")
    e = raises(lambda: hvd.allreduce(mx.nd.ones(3, dtype="int32"), prescale_factor=2.0),
               ValueError)
    check(e is not None, "scale factors on integers raise ValueError")


TESTS = [test_job, test_allreduce, test_zero_copy, test_staged, test_broadcast,
         test_allgather, test_orders, test_broadcast_parameters, test_kvstore, test_errors]


def main():
    global RANK, SIZE
    start = time.time()
    check.rank = int(os.environ.get("CHORUS_RANK", "0"))
    test_before_init()
    hvd.init()
    RANK, SIZE = hvd.rank(), hvd.size()
    check.rank = RANK
    for test in TESTS:
        t0 = time.time()
        test()
        if RANK == 0:
            print("%s: %.2fs" % (test.__name__, time.time() - t0), flush=True)
    counts = hvd.allgather(mx.nd.array([len(check.failures)], dtype="int64"),
                           name="failures").asnumpy().tolist()
    hvd.shutdown()
    faulthandler.cancel_dump_traceback_later()
    if any(counts):
        if check.failures:
            print("rank %d: %d of %d checks failed:\n  %s"
                  % (RANK, len(check.failures), check.count, "\n  ".join(check.failures)),
                  file=sys.stderr)
        else:
            print("rank %d: checks failed on ranks %s"
                  % (RANK, [r for r, c in enumerate(counts) if c]), file=sys.stderr)
        return 1
    if RANK == 0:
        print("mx_ops: %d checks passed on each of %d ranks in %.1fs"
              % (check.count, SIZE, time.time() - start))
    return 0


RANK, SIZE = -1, 0

if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        print("rank %d: mx_ops FAILED with an exception" % RANK, file=sys.stderr)
        os._exit(1)
