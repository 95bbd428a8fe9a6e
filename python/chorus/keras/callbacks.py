"""Keras callbacks for training on several ranks with chorus (Horovod's, for Keras 3).

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.01 * hvd.size(),
                                                 warmup_epochs=3),
    ]

Put MetricAverageCallback before the callbacks that read the epoch's metrics
(ModelCheckpoint, EarlyStopping, ReduceLROnPlateau, CSVLogger) so that they see the
averages; Keras's own progress bar and History come after every callback given to fit().
Each callback runs collectives: give the same callbacks on every rank.
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from .. import tensorflow as _tf_api

_MODULE = "chorus.keras.callbacks"


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Sets every rank's model and optimizer variables to root_rank's when training
    begins, so that all ranks start from the same state.

    At the start of the first fit(): the model's weights (trainable and not, such as
    batch normalization's statistics) and the optimizer's variables (it is built on the
    model's trainable variables first, if it is not yet), from root_rank. A model whose
    weights do not exist yet then (a Sequential model given no input shape, built by its
    first batch) is broadcast after its first batch instead: that batch is then trained
    from each rank's own initial weights, so give the model an input shape (keras.Input)
    where the ranks must follow one trajectory from the first step. Later fit() calls
    broadcast nothing. device is accepted and not used."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False

    def _broadcast(self):
        model = self.model
        variables = list(model.weights)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None:
            if not optimizer.built and model.trainable_variables:
                optimizer.build(model.trainable_variables)
            variables += list(optimizer.variables)
        _tf_api.broadcast_variables(variables, self.root_rank)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if not self.broadcast_done and self.model.built and self.model.weights:
            self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces each metric of an epoch's logs (loss, metrics, val_ ones) by its average
    over the ranks, at the end of every epoch, so that every rank logs, and acts on, the
    same values. The logs of every rank hold the same metrics; values that are not
    numbers are left as they are. device is accepted and not used."""

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if _is_number(v))
        if not keys:
            return
        values = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        # One allreduce for all the metrics, named for them: every rank's logs must agree.
        name = "MetricAverageCallback.%s" % ",".join(keys)
        averaged = _tf_api.allreduce(tf.constant(values), name=name, op=_tf_api.Average)
        for key, value in zip(keys, averaged.numpy().tolist()):
            logs[key] = value


def _is_number(v):
    """v is a real number: a Python or numpy scalar, or a scalar array or tensor."""
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float, np.number)):
        return True
    if isinstance(v, tf.Tensor):
        return v.shape.rank == 0 and (v.dtype.is_floating or v.dtype.is_integer)
    return isinstance(v, np.ndarray) and v.shape == () and v.dtype.kind in "fiu"


class LearningRateWarmupCallback(keras.callbacks.Callback):
    """Raises the learning rate gradually from initial_lr / size() to initial_lr over the
    first warmup_epochs epochs (Goyal et al., "Accurate, Large Minibatch SGD"): a large
    learning rate scaled by the number of ranks is reached without the instability it
    causes at the start of training.

    initial_lr is the rate at the end of the warm-up (usually the single-rank rate times
    size()). Before every batch of the warm-up, at epoch e (fractional: epoch + batch /
    steps_per_epoch), the optimizer's learning rate is set to

        initial_lr / size() * (e * (size() - 1) / warmup_epochs + 1)

    and at the end of the last warm-up epoch to initial_lr; later epochs leave it alone.
    steps_per_epoch: batches per epoch; None takes the number fit() reports (give it where
    fit() cannot tell, such as a dataset of unknown length). verbose: rank 0 prints when
    the warm-up ends. momentum_correction is accepted and not applied: Keras 3 optimizers
    trace their momentum into the training function as a constant. The optimizer's
    learning rate must be a number (a variable), not a schedule."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        super().__init__()
        if warmup_epochs < 0:
            raise ValueError("%s.LearningRateWarmupCallback: warmup_epochs must be >= 0, "
                             "not %r" % (_MODULE, warmup_epochs))
        self.initial_lr = float(initial_lr)
        self.warmup_epochs = warmup_epochs
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = 0

    def _set_lr(self, lr):
        optimizer = self.model.optimizer
        # The optimizer holds its rate as a variable, a schedule or a callable; the
        # learning_rate property gives its current value in every case.
        current = getattr(optimizer, "_learning_rate", None)
        if isinstance(current, keras.optimizers.schedules.LearningRateSchedule) \
                or callable(current):
            raise ValueError("%s.LearningRateWarmupCallback: the optimizer's learning rate is "
                             "a schedule; give it a number" % _MODULE)
        optimizer.learning_rate = lr

    def multiplier(self, epoch):
        """The factor of initial_lr at the fractional epoch epoch of the warm-up."""
        n = _tf_api.size()
        return (epoch * (n - 1) / self.warmup_epochs + 1.0) / n

    def on_train_begin(self, logs=None):
        if self.steps_per_epoch is None:
            self.steps_per_epoch = (self.params or {}).get("steps")
        if self.warmup_epochs and not self.steps_per_epoch:
            raise ValueError("%s.LearningRateWarmupCallback: fit() does not say how many "
                             "batches an epoch has; give steps_per_epoch" % _MODULE)

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.current_epoch >= self.warmup_epochs:
            return
        epoch = self.current_epoch + float(batch) / self.steps_per_epoch
        self._set_lr(self.initial_lr * self.multiplier(epoch))

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.warmup_epochs - 1:
            self._set_lr(self.initial_lr)
            if self.verbose and _tf_api.rank() == 0:
                print("\nEpoch %d: finished gradual learning rate warmup to %g."
                      % (epoch + 1, self.initial_lr), file=sys.stdout, flush=True)
