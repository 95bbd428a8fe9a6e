"""Data-parallel gluon training on chorus: a small classifier on MNIST-like generated data.

    chorus-run -n 2 python examples/mxnet/gluon_mnist_like.py
    chorus-run -n 2 python examples/mxnet/gluon_mnist_like.py --kvstore   # the other way

Nothing is downloaded: the "images" are 28 x 28 noisy copies of ten random templates, one
per class, which a small network learns to tell apart in a few seconds.

Each rank trains on its own shard of every epoch's samples. Before each update the
gradients of all ranks are combined through chorus, so every rank applies the same update
and holds the same model. There are two ways to ask for that:

* chorus.mxnet.DistributedTrainer (the default here): a gluon.Trainer that averages the
  gradients over the ranks; step() takes this rank's batch size.
* gluon.Trainer(..., kvstore="chorus") (--kvstore): MXNet's own kvstore interface, which
  sums the gradients over the ranks as MXNet's distributed kvstores do; step() then takes
  the batch size of all ranks together.

Both give the update that one process would make on the ranks' batches put together.
Rank 0 prints the loss and accuracy of every epoch, averaged over all ranks.
"""

import argparse
import os
import time

# MXNet starts many threads per process by default; with several ranks on one machine,
# one each is faster. (Set before mxnet is imported.)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402
from mxnet import autograd, gluon  # noqa: E402

import chorus.mxnet as hvd  # noqa: E402


def make_data(samples, seed):
    """samples images (flattened, float32) and their labels, the same on every rank."""
    rng = np.random.RandomState(seed)
    templates = rng.rand(10, 28 * 28) > 0.7             # ten random "digit" shapes
    labels = rng.randint(0, 10, samples)
    images = templates[labels] * 1.0 + 4.0 * rng.randn(samples, 28 * 28)
    return images.astype(np.float32), labels.astype(np.float32)


def make_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"))      # input size found at first use
    net.add(gluon.nn.Dense(10))
    return net


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4, help="passes over the data (4)")
    parser.add_argument("--samples", type=int, default=4096,
                        help="samples per epoch, all ranks together (4096)")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank and step")
    parser.add_argument("--lr", type=float, default=0.02, help="learning rate (0.02)")
    parser.add_argument("--kvstore", action="store_true",
                        help="use gluon.Trainer(kvstore='chorus') instead of "
                             "DistributedTrainer")
    args = parser.parse_args()

    # One communicator over the ranks that chorus-run started (collective: every rank
    # calls it), and chorus's training engine on it.
    hvd.init()
    rank, size = hvd.rank(), hvd.size()

    # Every rank builds the model with its own random weights...
    mx.random.seed(1234 + rank)
    net = make_net()
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net.hybridize()
    # ...and then takes rank 0's, so that all start alike. The weights' shapes are known
    # only at the first forward pass: broadcast_parameters sends them then.
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)

    if args.kvstore:
        trainer = gluon.Trainer(net.collect_params(), "sgd",
                                {"learning_rate": args.lr, "momentum": 0.9},
                                kvstore="chorus")
        step_batch = args.batch_size * size     # the kvstore sums: normalize by all samples
    else:
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                         {"learning_rate": args.lr, "momentum": 0.9})
        step_batch = args.batch_size            # the trainer averages over the ranks

    images, labels = make_data(args.samples, seed=7)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    steps = args.samples // (args.batch_size * size)
    if rank == 0:
        print("%d ranks, %d epochs of %d steps, %d samples per rank and step, %s"
              % (size, args.epochs, steps, args.batch_size,
                 "gluon.Trainer(kvstore='chorus')" if args.kvstore else "DistributedTrainer"),
              flush=True)
    start = time.time()
    for epoch in range(args.epochs):
        # The totals of this rank's epoch: [summed loss, correct answers, samples].
        totals = mx.nd.zeros(3, dtype="float64")
        for step in range(steps):
            # This rank's shard of the step: rows rank, rank + size, ... of its samples.
            first = step * args.batch_size * size
            rows = slice(first + rank, first + args.batch_size * size, size)
            x = mx.nd.array(images[rows])
            y = mx.nd.array(labels[rows])
            with autograd.record():
                out = net(x)
                loss = loss_fn(out, y)
            loss.backward()
            trainer.step(step_batch)            # gradients combined through chorus, then SGD
            correct = (out.argmax(axis=1) == y).sum()
            totals += mx.nd.concat(loss.sum(), correct, mx.nd.array([len(y)]),
                                   dim=0).astype("float64")
        # Sum every rank's totals (a named allreduce; average=False sums).
        totals = hvd.allreduce(totals, average=False, name="epoch_totals").asnumpy()
        if rank == 0:
            print("epoch %d  loss %.4f  accuracy %.3f" % (epoch, totals[0] / totals[2],
                                                         totals[1] / totals[2]), flush=True)

    # Every rank ends with the same weights: gather them all and compare.
    flat = np.concatenate([p.data().asnumpy().ravel()
                           for _, p in sorted(net.collect_params().items())])
    every = hvd.allgather(mx.nd.array(flat[None, :]), name="final_weights").asnumpy()
    same = all(np.array_equal(every[r], every[0]) for r in range(size))
    if rank == 0:
        print("done in %.2fs; weights identical on every rank: %s"
              % (time.time() - start, same), flush=True)
    hvd.shutdown()
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
