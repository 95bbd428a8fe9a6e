"""DistributedTrainer: a gluon Trainer whose gradients are averaged over the ranks by chorus."""

import mxnet as mx

from . import _ops
from ._arrays import MODULE


class DistributedTrainer(mx.gluon.Trainer):
    """A gluon.Trainer for one context per rank whose step() first averages every
    gradient over the ranks through chorus's engine, then updates as gluon does.

        trainer = chorus.mxnet.DistributedTrainer(net.collect_params(), "sgd",
                                                  {"learning_rate": 0.1})
        ...
        loss.backward()
        trainer.step(batch_size)    # this rank's batch size

    Each gradient is summed over the ranks in place, all of them submitted before any is
    waited for so that the engine fuses them; the average comes from the optimizer's
    rescale_grad, which this trainer divides by size() (the loss scale gluon and AMP apply
    through it is kept). So step(batch_size) with this rank's batch size gives the update
    of one process on the ranks' batches put together, and the learning rate needs no
    change.

    gradient_predivide_factor f: gradients are divided by f before the sum and the rescale
    by size() / f after, to keep large sums of float16 gradients in range. prefix names
    the gradients for the engine ("<prefix><index>"); trainers used at the same time need
    different prefixes. Parameters are not broadcast here: call broadcast_parameters()
    after initializing them (the kvstore is None: gluon's own reduction is off).
    """

    def __init__(self, params, optimizer, optimizer_params=None, gradient_predivide_factor=1.0,
                 prefix=None):
        _ops.require()
        if gradient_predivide_factor <= 0:
            raise ValueError("%s.DistributedTrainer: gradient_predivide_factor must be > 0, "
                             "not %r" % (MODULE, gradient_predivide_factor))
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        if self._contexts is not None and len(self._contexts) > 1:
            raise ValueError("%s.DistributedTrainer: the parameters are on %d contexts (%s); "
                             "chorus.mxnet takes one context per rank" % (
                                 MODULE, len(self._contexts), self._contexts))
        # The sum over ranks becomes an average through the rescale: cheaper than dividing
        # each gradient, and it composes with the loss scale already in _scale.
        self._scale *= gradient_predivide_factor / _ops.size()
        self._chorus_predivide = float(gradient_predivide_factor)
        self._chorus_prefix = "DistributedTrainer." if prefix is None else prefix

    def _allreduce_grads(self):
        """Sums every gradient over the ranks, in place (called by step() and
        allreduce_grads()). Raises the first failure once every submission is done."""
        _ops.require()
        ops = []
        for i, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            grad = param.list_grad()[0]
            ops.append(_ops._allreduce_op(grad, None, self._chorus_prefix + str(i), _ops.Sum,
                                          1.0 / self._chorus_predivide, 1.0, True,
                                          "DistributedTrainer"))
        _ops.wait_all(ops)
