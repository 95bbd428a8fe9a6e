"""The "chorus" KVStore: gluon's and MXNet's kvstore interface, reducing over the ranks.

    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            kvstore="chorus")
    ...
    trainer.step(batch_size * chorus.mxnet.size())   # the batch of all ranks together

Importing chorus.mxnet registers the class (KVStoreBase.register names it "chorus"), so
mx.kv.create("chorus") and a Trainer's kvstore="chorus" make one. Creating it initializes
chorus.mxnet if the program has not (collective: every rank creates it at the same point,
which a Trainer does at its first step).

Its meaning is that of MXNet's distributed kvstores: pushpull sums the values over the
ranks (and over the arrays a rank passes for one key, one per context), so a Trainer's
step() takes the batch size of all the ranks together; broadcast gives every rank rank 0's
value, which a Trainer uses to start every rank from rank 0's parameters. Updates stay with
the Trainer (is_capable("optimizer") is False): the kvstore holds no values of its own.
Dense CPU arrays only.
"""

from mxnet.kvstore import KVStoreBase

from . import _ops
from ._arrays import MODULE


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _pairs(key, value, out, call):
    """[(key, [values], [outs] or None)] of a call given one key or a list of keys."""
    if isinstance(key, (list, tuple)):
        values = _as_list(value)
        outs = [None] * len(key) if out is None else _as_list(out)
        if len(values) != len(key) or len(outs) != len(key):
            raise ValueError("%s.%s: %d keys need as many values (%d given) and outs (%d)"
                             % (MODULE, call, len(key), len(values), len(outs)))
        return [(k, _as_list(v), None if o is None else _as_list(o))
                for k, v, o in zip(key, values, outs)]
    return [(key, _as_list(value), None if out is None else _as_list(out))]


@KVStoreBase.register
class Chorus(KVStoreBase):
    """A kvstore whose pushpull sums over the ranks through chorus's engine (see the
    module's description). Keys name the values across ranks ("kvstore.<key>"), so
    ranks may pass keys in different orders within one call."""

    def __init__(self):
        _ops.init()

    # ---- the job ----------------------------------------------------------------------

    @property
    def type(self):
        return "chorus"

    @property
    def rank(self):
        return _ops.rank()

    @property
    def num_workers(self):
        return _ops.size()

    @property
    def local_rank(self):
        return _ops.local_rank()

    @staticmethod
    def is_capable(capability):
        """Only "optimizer" is known, and not offered: updates stay with the Trainer."""
        if capability.lower() == KVStoreBase.OPTIMIZER:
            return False
        raise ValueError("%s: unknown kvstore capability %r" % (MODULE, capability))

    # ---- values -----------------------------------------------------------------------

    def broadcast(self, key, value, out, priority=0):
        """Writes rank 0's value of key into out (an NDArray or a list of them) on every
        rank; key may be a list, with lists of values and outs. value is left as it is
        unless it is one of the outs."""
        pending = []
        for k, values, outs in _pairs(key, value, out, "broadcast"):
            if outs is None:
                raise ValueError("%s.broadcast: out is required" % MODULE)
            src = values[0]
            # Broadcast in place where value is itself an output, else into a copy.
            work = next((o for o in outs if o is src), None)
            if work is None:
                work = src.copy()
            pending.append((_ops._broadcast_op(work, 0, "kvstore.%s" % k, True,
                                               "kvstore.broadcast"), work, outs))
        _ops.wait_all([op for op, _, _ in pending])
        for _, work, outs in pending:
            for o in outs:
                if o is not work:
                    work.copyto(o)

    def pushpull(self, key, value, out=None, priority=0):
        """Sums the values of key over the ranks (and over the arrays given for it, one
        per context) into out, or into the values themselves when out is None; key may
        be a list, with lists of values (and outs). Every key is submitted before any is
        waited for."""
        pending = []
        for k, values, outs in _pairs(key, value, out, "pushpull"):
            if len(values) == 1 and outs is None:
                work = values[0]          # a lone value reduced where it lies
            else:
                first = values[0]
                work = first.copy()
                for v in values[1:]:
                    work += v.as_in_context(first.context)
            targets = values if outs is None else outs
            pending.append((_ops._allreduce_op(work, None, "kvstore.%s" % k, _ops.Sum, 1.0,
                                               1.0, True, "kvstore.pushpull"), work, targets))
        _ops.wait_all([op for op, _, _ in pending])
        for _, work, targets in pending:
            for t in targets:
                if t is not work:
                    work.copyto(t)

    # ---- what this kvstore does not offer -------------------------------------------------

    def _refuse(self, what):
        raise NotImplementedError("%s: the chorus kvstore does not offer %s: it reduces "
                                  "dense gradients (pushpull) and broadcasts values; the "
                                  "Trainer keeps the optimizer (update_on_kvstore=False)"
                                  % (MODULE, what))

    def set_optimizer(self, optimizer):
        self._refuse("set_optimizer")

    def save_optimizer_states(self, fname, dump_optimizer=False):
        self._refuse("save_optimizer_states (the Trainer's save_states saves them)")

    def load_optimizer_states(self, fname):
        self._refuse("load_optimizer_states (the Trainer's load_states loads them)")

    def set_gradient_compression(self, compression_params):
        self._refuse("gradient compression")

    def init(self, key, value):
        self._refuse("init (sparse weights)")

    def push(self, key, value, priority=0):
        self._refuse("push (sparse gradients; dense ones go through pushpull)")

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        self._refuse("pull (sparse gradients; dense ones go through pushpull)")

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        self._refuse("row_sparse_pull")


def _install_trainer_hook():
    """Makes gluon.Trainer(..., kvstore="chorus") create this kvstore.

    gluon creates no kvstore from a name when the trainer has one context and the name
    does not contain "dist" (it sees nothing to reduce between devices), which is the case
    of every chorus rank. The Trainer's kvstore factory is wrapped to turn the name
    "chorus" into an instance, which gluon then takes as it is; other names go through
    unchanged."""
    import mxnet.gluon.trainer as gluon_trainer
    original = gluon_trainer._create_kvstore
    if getattr(original, "_chorus_hook", False):
        return

    def create_kvstore(kvstore, num_device, arg_params):
        if isinstance(kvstore, str) and kvstore.lower() == "chorus":
            kvstore = Chorus()
        return original(kvstore, num_device, arg_params)
    create_kvstore._chorus_hook = True
    create_kvstore.__doc__ = original.__doc__
    gluon_trainer._create_kvstore = create_kvstore


_install_trainer_hook()
