"""Horovod's MXNet API on chorus, so that `import chorus.mxnet as hvd` runs Horovod programs.

    import mxnet as mx
    import chorus.mxnet as hvd

    hvd.init()
    net = make_net()
    net.initialize(ctx=mx.cpu())
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    ...
    trainer.step(batch_size)         # this rank's batch size: the gradients are averaged

or, through MXNet's kvstore interface (see chorus.mxnet.kvstore):

    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                               kvstore="chorus")
    trainer.step(batch_size * hvd.size())   # gradients are summed, as MXNet's dist kvstores do

For MXNet 1.9 on CPU contexts (cpu, cpu_pinned, cpu_shared); arrays on a GPU raise
Unsupported. `init()` makes one communicator from the environment (chorus-run's variables,
torchrun's or an MPI launcher's) and one training engine on it; any other call before it
raises ValueError.

Every collective goes through the engine, under the name "<kind>.<name>": ranks pair
their arrays by name, so the *_async calls (and the trainers, which submit every gradient
before waiting for any) may submit names in different orders on different ranks. A call
without a name gets "<kind>.noname.<n>", n counting that kind's unnamed calls on the rank,
so unnamed calls of one kind must come in the same order on every rank. A name stands for
one array at a time: submitting it again while it is in flight waits for the earlier one.

chorus reads and writes the arrays where they lie (after MXNet's pending operations on
them are done): an array's memory is passed to the engine without a copy, except for an
array with no elements and for the rows an allgather receives (its size is known only
after a first stage). Arrays given to a *_async call must be left alone until
synchronize().

Dtypes: allreduce takes float16, float32, float64, int8, uint8, int32, int64 (the average
of integers truncates toward zero); broadcast and allgather move any dtype as bytes.

A name that two ranks submit with a different size or dtype fails on every rank at once:
the call (or synchronize) raises chorus.ChorusError (INVALID_ARG) everywhere, and the
engine goes on serving later submissions. A rank that dies makes the others' pending and
later calls raise within the communicator's timeout (CHORUS_TIMEOUT).

Not offered: process sets, gradient compression, grouped calls, alltoall and
reducescatter, sparse arrays, and the Module API's kvstore calls (init/push/pull).
"""

from .._lib import ChorusError
from ._arrays import Unsupported
from ._ops import (Average, Max, Min, Product, Sum, allgather, allgather_async, allreduce,
                   allreduce_, allreduce_async, allreduce_async_, broadcast, broadcast_,
                   broadcast_async, broadcast_async_, broadcast_parameters, init,
                   is_initialized, local_rank, local_size, poll, rank, shutdown, size,
                   synchronize)
from .kvstore import Chorus as ChorusKVStore
from .trainer import DistributedTrainer

__all__ = [
    # lifetime and the job
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    # reduction ops
    "Average", "Sum", "Min", "Max", "Product",
    # collectives on NDArrays
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "allgather", "allgather_async", "poll", "synchronize",
    # models and training
    "broadcast_parameters", "DistributedTrainer", "ChorusKVStore",
    # errors
    "ChorusError", "Unsupported",
]
