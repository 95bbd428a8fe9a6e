"""Horovod's Keras API on chorus, for Keras 3 on the TensorFlow backend, so that
`import chorus.keras as hvd` runs Horovod Keras programs.

    import chorus.keras as hvd

    hvd.init()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()],
              verbose=1 if hvd.rank() == 0 else 0)

The job, the collectives and their names are chorus.tensorflow's (this module re-exports
them): init() and shutdown() there and here are one and the same. The ops have no XLA
kernels: compile the model with jit_compile=False (Keras's default, "auto", turns XLA on
where the machine has a GPU).
"""

import keras

from .. import tensorflow as _tf_api
from ..tensorflow import (  # noqa: F401  (Horovod's names, re-exported)
    Average, ChorusError, Compression, Compressor, Max, Min, Product, Sum, allgather,
    allreduce, barrier, broadcast, broadcast_variables, cross_rank, cross_size,
    grouped_allreduce, init, is_initialized, local_rank, local_size, rank, reducescatter,
    shutdown, size)
from . import callbacks  # noqa: F401

__all__ = [
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "Average", "Sum", "Min", "Max", "Product", "Compression",
    "Compressor", "allreduce", "grouped_allreduce", "allgather", "broadcast",
    "reducescatter", "barrier", "broadcast_variables", "DistributedOptimizer", "callbacks",
    "ChorusError",
]

_MODULE = "chorus.keras"


class _DistributedOptimizerMixin:
    """The method a DistributedOptimizer adds to the class of the optimizer it wraps.

    Keras 3 optimizers take every gradient through apply() (apply_gradients() and
    model.fit's train step call it), so reducing there covers all of them, eagerly and
    in the traced training function alike."""

    def apply(self, grads, trainable_variables=None):
        """The gradients reduced over the ranks, then applied by the wrapped optimizer."""
        grads = list(grads)
        if trainable_variables is not None:
            trainable_variables = list(trainable_variables)
            variables = trainable_variables
        else:
            # Without variables, apply() uses those the optimizer was built with (or
            # raises, unbuilt, as the wrapped optimizer does).
            variables = self._trainable_variables if self.built else []
        if len(variables) == len(grads):
            names = _tf_api._gradient_names(self._chorus_name, variables)
        else:
            names = ["%s.%d" % (self._chorus_name, i) for i in range(len(grads))]
        grads = _tf_api._reduce_gradients(grads, names, self._chorus_compression,
                                          self._chorus_sparse_as_dense, self._chorus_op,
                                          self._chorus_predivide, "DistributedOptimizer")
        return super().apply(grads, trainable_variables)


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=None):
    """A Keras 3 optimizer that reduces its gradients over the ranks before applying them.

    Returns a new optimizer of a subclass of optimizer's class, made from its config (so
    it takes the same learning rate, schedule and hyperparameters); wrap an optimizer
    before it is used (built). Its apply() (and so apply_gradients() and model.fit)
    reduces each gradient with op (Average, the default, or Sum) under
    "allreduce.<name>.<i>.<variable path>", i its place among the variables, then applies
    the result. name defaults to "Distributed<class name>". The subclass keeps the name
    and module of optimizer's class, so a saved model stores, and loads back, the plain
    optimizer.

    compression: Compression.fp16 / .bf16 reduce float32 gradients with the engine's wire
    compression (sums in float32). gradient_predivide_factor f (op Average only):
    gradients are divided by f before the sum and by size() / f after. A sparse gradient
    (tf.IndexedSlices, from an embedding) is gathered, or reduced densely with
    sparse_as_dense=True. For gradient accumulation use Keras's own
    gradient_accumulation_steps on the optimizer (each step's gradients are then reduced
    before they are accumulated): backward_passes_per_step must be 1.
    average_aggregated_gradients, num_groups and groups are accepted and not used."""
    _tf_api._check_process_set(process_set, "DistributedOptimizer")
    _tf_api._require()
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("%s.DistributedOptimizer: a keras.optimizers.Optimizer expected, not %s"
                        % (_MODULE, type(optimizer).__name__))
    if isinstance(optimizer, _DistributedOptimizerMixin):
        raise ValueError("%s.DistributedOptimizer: the optimizer is already distributed"
                         % _MODULE)
    if optimizer.built:
        raise ValueError("%s.DistributedOptimizer: the optimizer is already built (it has "
                         "applied gradients); wrap it before it is used, as its state is "
                         "not carried over" % _MODULE)
    if backward_passes_per_step != 1:
        raise ValueError("%s.DistributedOptimizer: backward_passes_per_step must be 1, not %r;"
                         " give the optimizer gradient_accumulation_steps instead"
                         % (_MODULE, backward_passes_per_step))
    op = _tf_api._check_reduction(op, gradient_predivide_factor, "DistributedOptimizer")
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizerMixin, base),
               {"__doc__": "%s, reducing its gradients with chorus" % base.__name__,
                "__module__": base.__module__})
    dist = cls.from_config(optimizer.get_config())
    dist._chorus_name = name or "Distributed%s" % base.__name__
    dist._chorus_compression = compression
    dist._chorus_sparse_as_dense = sparse_as_dense
    dist._chorus_op = op
    dist._chorus_predivide = gradient_predivide_factor
    return dist
