"""Gluon training on chorus.mxnet equals one process training on the whole batch.

Run under chorus-run with any number of ranks (2 and 3 are the usual):

    chorus-run -n 3 python tests/python/mx_train.py

A small MLP trains for 20 steps of SGD with momentum and weight decay, each rank on its 8
rows of a batch of 8 x size() rows, three ways: with chorus.mxnet.DistributedTrainer
(also with gradient_predivide_factor=2), and with gluon.Trainer(kvstore="chorus"). Every
rank also trains the same model alone on the whole batch (deterministic on a CPU with one
thread), as the reference. Checked: the weights are identical on every rank (the
reductions give every rank the same bits), and equal to the reference within

  float64: 1e-9 of the largest weight. The ranks' sums of gradients are added in another
           order than the reference's one sum over the batch: each step differs by a few
           units in the last place (2^-52 relative), which 20 steps of momentum grow by at
           most a few hundred times.
  float32: 2e-5 of the largest weight, by the same argument with 2^-23: about 1e-7 per
           step, grown through 20 steps.

The kvstore run also starts every rank from different weights without broadcasting them
first: the kvstore's broadcast at the first step must make them identical.
Prints one "ok"/"FAIL" line per check; exits 1 on any failure.
"""

import faulthandler
import os
import sys
import time
import traceback

os.environ.setdefault("CHORUS_TIMEOUT", "60")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
faulthandler.dump_traceback_later(float(os.environ.get("MX_TRAIN_TEST_TIMEOUT", "240")),
                                  exit=True)

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

import chorus.mxnet as hvd  # noqa: E402
from mx_ops import Checks  # noqa: E402

STEPS = 20
ROWS = 8                      # rows per rank per step
TOLERANCE = {"float64": 1e-9, "float32": 2e-5}
OPTIMIZER = {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-3}

check = Checks()


def make_data(size, dtype):
    """The whole batch: 20 steps of ROWS x size rows, the same on every rank."""
    rng = np.random.RandomState(42)
    x = rng.randn(STEPS, ROWS * size, 6)
    w = rng.randn(6, 3)
    y = np.tanh(x @ w) + 0.1 * rng.randn(STEPS, ROWS * size, 3)
    return x.astype(dtype), y.astype(dtype)


def make_net(seed, dtype, tag):
    """A small MLP, its weights drawn from seed."""
    mx.random.seed(seed)
    net = gluon.nn.HybridSequential(prefix=tag + "_")
    with net.name_scope():
        net.add(gluon.nn.Dense(8, in_units=6, activation="tanh"))
        net.add(gluon.nn.Dense(3, in_units=8))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net.cast(dtype)
    return net


def flat(net):
    return np.concatenate([p.data().asnumpy().ravel()
                           for _, p in sorted(net.collect_params().items())])


def train(net, trainer, x, y, rows, batch_size):
    """STEPS steps on rows of each step's batch; step(batch_size)."""
    loss_fn = gluon.loss.L2Loss()
    for s in range(STEPS):
        xs = mx.nd.array(x[s, rows], dtype=x.dtype)
        ys = mx.nd.array(y[s, rows], dtype=y.dtype)
        with autograd.record():
            loss = loss_fn(net(xs), ys)
        loss.backward()
        trainer.step(batch_size)
    return flat(net)


def identical_everywhere(params, name):
    every = hvd.allgather(mx.nd.array(params.reshape(1, -1), dtype=params.dtype), name=name)
    rows = every.asnumpy()
    return all(np.array_equal(rows[r], rows[0]) for r in range(rows.shape[0]))


def compare(label, params, ref, dtype):
    check(identical_everywhere(params, "check." + label),
          "%s: weights identical on every rank" % label)
    scale = float(np.abs(ref).max())
    diff = float(np.abs(params - ref).max())
    check(diff <= TOLERANCE[dtype] * scale, "%s: equal to one process on the whole batch "
          "within %g of the largest weight (max diff %.3g, largest %.3g)"
          % (label, TOLERANCE[dtype], diff, scale))
    return diff


def run(dtype, rank, size):
    x, y = make_data(size, dtype)
    mine = slice(ROWS * rank, ROWS * (rank + 1))
    everything = slice(0, ROWS * size)

    # The reference: one process, rank 0's initial weights, the whole batch.
    net = make_net(0, dtype, "ref")
    trainer = gluon.Trainer(net.collect_params(), "sgd", OPTIMIZER, kvstore=None)
    ref = train(net, trainer, x, y, everything, ROWS * size)

    # DistributedTrainer: rank 0's weights broadcast, each rank's rows, this rank's batch.
    for label, predivide in (("DistributedTrainer", 1.0), ("predivide=2", 2.0)):
        net = make_net(rank, dtype, "dist")
        hvd.broadcast_parameters(net.collect_params(), root_rank=0)
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", OPTIMIZER,
                                         gradient_predivide_factor=predivide)
        params = train(net, trainer, x, y, mine, ROWS)
        compare("%s %s" % (dtype, label), params, ref, dtype)

    # gluon.Trainer(kvstore="chorus"): gradients summed, step() takes the whole batch.
    net = make_net(rank, dtype, "kv")
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = gluon.Trainer(net.collect_params(), "sgd", OPTIMIZER, kvstore="chorus")
    params = train(net, trainer, x, y, mine, ROWS * size)
    check(trainer._kvstore is not None and trainer._kvstore.type == "chorus",
          "gluon.Trainer(kvstore='chorus') made a chorus kvstore")
    compare("%s Trainer(kvstore='chorus')" % dtype, params, ref, dtype)

    # Without broadcast_parameters: the kvstore's own broadcast of rank 0's weights, at the
    # first step (after the first gradients, which each rank computed on its own weights).
    net = make_net(1000 + rank, dtype, "kv_bc")
    trainer = gluon.Trainer(net.collect_params(), "sgd", OPTIMIZER, kvstore="chorus")
    params = train(net, trainer, x, y, mine, ROWS * size)
    check(identical_everywhere(params, "check.kv_bc." + dtype),
          "%s Trainer(kvstore='chorus') from different weights: identical on every rank"
          % dtype)


def main():
    start = time.time()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check.rank = rank
    for dtype in ("float64", "float32"):
        t0 = time.time()
        run(dtype, rank, size)
        if rank == 0:
            print("%s: %.2fs" % (dtype, time.time() - t0), flush=True)
    counts = hvd.allgather(mx.nd.array([len(check.failures)], dtype="int64"),
                           name="failures").asnumpy().tolist()
    hvd.shutdown()
    faulthandler.cancel_dump_traceback_later()
    if any(counts):
        print("rank %d: checks failed on ranks %s: %s"
              % (rank, [r for r, c in enumerate(counts) if c], check.failures), file=sys.stderr)
        return 1
    if rank == 0:
        print("mx_train: %d checks passed on each of %d ranks in %.1fs"
              % (check.count, size, time.time() - start))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        print("mx_train FAILED with an exception", file=sys.stderr)
        os._exit(1)
