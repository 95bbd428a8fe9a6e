"""Horovod's TensorFlow API on chorus, so that `import chorus.tensorflow as hvd` runs Horovod
programs written for TensorFlow 2.

    import chorus.tensorflow as hvd

    hvd.init()
    with tf.GradientTape() as tape:
        loss = loss_fn(model(x), y)
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    if first_step:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(optimizer.variables, root_rank=0)

`init()` makes one communicator from the environment (`Comm.from_env()`: the variables of
chorus-run, torchrun or an MPI launcher), one training engine on it, and binds the engine to
the TensorFlow ops of chorus.tensorflow._ops (asynchronous kernels with gradients), which
every call here goes through. The calls work eagerly and inside tf.function; they have no
XLA kernels, so a Keras model that uses them is compiled with jit_compile=False.

Every tensor is paired across ranks by its name in the engine, so ranks may run the ops in
different orders (a tf.function runs independent ops in any order) without deadlock. The
engine name is the kind and the name ("allreduce.<name>", "broadcast.<name>", ...; one
longer than the engine's 255 bytes keeps a prefix and a digest of the whole). A call
without a name is named by the op: inside a tf.function, by its node name with its name
scopes ("allreduce.ChorusAllreduce_1"), alike on every rank that traces the same function;
eagerly, "<kind>.noname.<n>", n counting that kind's unnamed eager calls on the rank, so
unnamed eager calls of one kind come in the same order on every rank. A name given twice
in one traced function gets ".<k>" on its k-th repetition, so that the two ops stay apart.

A tensor that two ranks submit under one name with a different size, dtype or op raises
tf.errors.InvalidArgumentError on every rank at once, and the engine goes on serving
later submissions; a rank that dies or passes CHORUS_TIMEOUT makes the others' ops raise
tf.errors.UnavailableError. chorus.ChorusError comes from init() and shutdown().

Not offered: process sets other than the global one (process_set=None), Adasum, alltoall,
join, and device placement (device_dense and device_sparse are accepted and not used).
"""

import weakref

import tensorflow as tf

from .. import _job
from .. import comm as C
from .._compression import Compression, Compressor, wire_compression
from .._lib import ChorusError
from . import _ops

__all__ = [
    # lifetime and the job
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank",
    # reduction ops and compression
    "Average", "Sum", "Min", "Max", "Product", "Compression", "Compressor",
    # collectives on tensors
    "allreduce", "grouped_allreduce", "allgather", "broadcast", "reducescatter", "barrier",
    # variables and gradients
    "broadcast_variables", "DistributedGradientTape", "ChorusError",
]

# Reduction ops: chorus's op codes, and the names chorus.tensorflow._ops takes.
Average = C.AVG
Sum = C.SUM
Min = C.MIN
Max = C.MAX
Product = C.PROD
_OP_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}
_OPS_OP = {Average: "avg", Sum: "sum", Min: "min", Max: "max", Product: "prod"}

_MODULE = "chorus.tensorflow"


# ---- state -----------------------------------------------------------------------------

class _State(_job.Job):
    """What init() sets up, and the names used in the graphs being traced."""

    def __init__(self):
        super().__init__(_MODULE)
        # Names used in each graph being traced: a repeated name gets a suffix.
        self.graph_names = weakref.WeakKeyDictionary()


_state = _State()
_require = _state.require


def init(comm=None):
    """Sets up chorus for this process; collective over the job. Idempotent.

    comm: None to create the communicator from the environment (chorus-run's CHORUS_*
    variables, torchrun's or an MPI launcher's), or a chorus.comm.Comm to use (it stays the
    caller's: shutdown() leaves it). Process sets (a list of ranks) are not offered.
    """
    _state.start(comm, shutdown, then=lambda: _ops.bind(_state.engine, _state.comm))


def shutdown():
    """Unbinds the ops and destroys the engine and the communicator init() created;
    collective over the job.

    Unbinding waits for the ops in flight: each completes, or fails once its
    CHORUS_TIMEOUT passes (an op that no other rank submits ends so, and shutdown() then
    raises). Call it with no op running on another thread. Called at exit too, unless the
    process ends by an uncaught exception: then it leaves without waiting for the other
    ranks (they see it gone and fail their pending ops).
    """
    _state.stop(before=_ops.unbind)


is_initialized = _state.is_initialized
size = _state.size
rank = _state.rank
local_size = _state.local_size
local_rank = _state.local_rank
cross_size = _state.cross_size
cross_rank = _state.cross_rank


# ---- names -----------------------------------------------------------------------------

def _op_name(name):
    """The name to give an op of chorus.tensorflow._ops, which pairs it across ranks as
    "<kind>.<name>" (None: it names the op itself, see the module docstring).

    A name used again in one graph being traced gets ".<k>" on its k-th repetition: two
    ops of one graph under one name could run at once and be paired with the wrong ops of
    another rank."""
    if name is None or tf.executing_eagerly():
        return name
    name = str(name)
    with _state.lock:
        used = _state.graph_names.setdefault(tf.compat.v1.get_default_graph(), {})
        k = used.get(name, 0)
        used[name] = k + 1
    return "%s.%d" % (name, k) if k else name


# ---- arguments -------------------------------------------------------------------------

def _check_process_set(process_set, call):
    if process_set is not None:
        raise ValueError("%s.%s: process sets are not offered (only the global one, "
                         "process_set=None)" % (_MODULE, call))


def _resolve_op(average, op, call):
    if average is not None:
        if op is not None:
            raise ValueError("%s.%s: give op or average (deprecated), not both"
                             % (_MODULE, call))
        return Average if average else Sum
    if op is None:
        return Average
    if op not in _OP_NAMES:
        raise ValueError("%s.%s: op %r is not offered (Average, Sum, Min, Max, Product)"
                         % (_MODULE, call, op))
    return op


def _check_root(root_rank, call):
    n = size()
    if not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError("%s.%s: root_rank %r is not a rank of %d" % (_MODULE, call,
                                                                     root_rank, n))


def _scale(t, factor, call, which):
    if factor == 1.0:
        return t
    if not (t.dtype.is_floating or t.dtype.is_complex):
        raise ValueError("%s.%s: %s needs a floating point tensor, not %s"
                         % (_MODULE, call, which, t.dtype.name))
    return t * tf.cast(factor, t.dtype)


# ---- collectives -----------------------------------------------------------------------

def _allreduce_dense(t, name, op, prescale, postscale, compression, call):
    wire, py_compressor = wire_compression(compression)
    ctx = None
    src = t
    if py_compressor is not None:
        src, ctx = py_compressor.compress(t)
    src = _scale(src, prescale, call, "prescale_factor")
    if src.dtype != tf.float32 or op not in (Sum, Average):
        wire = None     # the wire formats carry float32 sums only
    out = _ops.allreduce(src, op=_OPS_OP[op], name=name, compression=wire)
    out = _scale(out, postscale, call, "postscale_factor")
    if py_compressor is not None:
        out = py_compressor.decompress(out, ctx)
    return out


def _allreduce_sparse(slices, name, op, prescale, postscale, call):
    """An IndexedSlices reduced as Horovod does: every rank's values and indices gathered
    (the rows of one index add up when the result is applied); Average divides the values
    by size()."""
    if op not in (Sum, Average):
        raise ValueError("%s.%s: a tf.IndexedSlices is reduced by Sum or Average only, not %s"
                         % (_MODULE, call, _OP_NAMES[op]))
    values = _scale(slices.values, prescale, call, "prescale_factor")
    values = _ops.allgather(values, name=None if name is None else name + ".values")
    indices = _ops.allgather(slices.indices, name=None if name is None else name + ".indices")
    if op == Average:
        values = _scale(values, 1.0 / size(), call, "op=Average")
    values = _scale(values, postscale, call, "postscale_factor")
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def _allreduce(tensor, name, op, prescale, postscale, compression, call):
    _require()
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_sparse(tensor, name, op, prescale, postscale, call)
    return _allreduce_dense(tf.convert_to_tensor(tensor), name, op, prescale,
                            postscale, compression, call)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None, device_dense="",
              device_sparse=""):
    """The allreduce of tensor over the ranks, as a new tensor (with its gradient).

    op: Average (the default), Sum, Min, Max or Product (average=True/False: the
    deprecated form of Average/Sum). The result is op over the ranks of
    tensor * prescale_factor, times postscale_factor. Average of integers truncates
    toward zero. compression: Compression.fp16 / .bf16 send float32 Sum and Average on
    the wire in 16 bits, accumulated in float32. A tf.IndexedSlices (a sparse gradient)
    is gathered instead: every rank's values and indices, the values divided by size()
    for Average."""
    _check_process_set(process_set, "allreduce")
    op = _resolve_op(average, op, "allreduce")
    _require()
    return _allreduce(tensor, _op_name(name), op, prescale_factor,
                      postscale_factor, compression, "allreduce")


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None,
                      device_dense="", device_sparse=""):
    """The allreduces of a list of tensors, as a list: the i-th named "<name>.<i>" (each
    unnamed with name=None). The engine fuses them into buckets with whatever else is
    ready."""
    _check_process_set(process_set, "grouped_allreduce")
    op = _resolve_op(average, op, "grouped_allreduce")
    _require()
    return [_allreduce(t, None if name is None else _op_name("%s.%d" % (name, i)), op,
                       prescale_factor, postscale_factor, compression, "grouped_allreduce")
            for i, t in enumerate(tensors)]


def allgather(tensor, name=None, process_set=None):
    """Every rank's tensor concatenated along dim 0, in rank order. The ranks' tensors
    must agree in dtype and in every dimension but the first, which may differ."""
    _check_process_set(process_set, "allgather")
    _require()
    t = tf.convert_to_tensor(tensor)
    if t.shape.rank == 0:
        raise ValueError("%s.allgather: the tensor needs at least one dimension (dim 0 is "
                         "concatenated)" % _MODULE)
    return _ops.allgather(t, name=_op_name(name))


def broadcast(tensor, root_rank, name=None, process_set=None):
    """root_rank's tensor, as a new tensor on every rank."""
    _check_process_set(process_set, "broadcast")
    _check_root(root_rank, "broadcast")
    return _ops.broadcast(tf.convert_to_tensor(tensor), root_rank,
                          name=_op_name(name))


def reducescatter(tensor, op=Average, name=None, compression=Compression.none,
                  prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduces tensor over the ranks (op Average, the default, or Sum) and gives each rank
    its part of dim 0: rank r gets rows of the result in rank order, dim 0 // size() of
    them, the first dim 0 % size() ranks one more. compression: a Python compressor (a
    Compressor subclass) runs around it; the wire formats of Compression.fp16 / .bf16 are
    allreduce's only, and a reducescatter travels uncompressed."""
    call = "reducescatter"
    _check_process_set(process_set, call)
    op = _resolve_op(None, op, call)
    if op not in (Sum, Average):
        raise ValueError("%s.%s: op must be Average or Sum, not %s"
                         % (_MODULE, call, _OP_NAMES[op]))
    _require()
    t = tf.convert_to_tensor(tensor)
    if t.shape.rank == 0:
        raise ValueError("%s.%s: the tensor needs at least one dimension" % (_MODULE, call))
    _, py_compressor = wire_compression(compression)
    ctx = None
    if py_compressor is not None:
        t, ctx = py_compressor.compress(t)
    t = _scale(t, prescale_factor, call, "prescale_factor")
    out = _ops.reducescatter(t, op=_OPS_OP[op], name=_op_name(name))
    out = _scale(out, postscale_factor, call, "postscale_factor")
    if py_compressor is not None:
        out = py_compressor.decompress(out, ctx)
    return out


def barrier(process_set=None):
    """Returns once every rank has called barrier() (eagerly, not inside a tf.function)."""
    _check_process_set(process_set, "barrier")
    _require().comm.ibarrier().wait()


# ---- variables and gradients -----------------------------------------------------------

def _variable_name(v):
    """A variable's name for the engine: its Keras path, else its TensorFlow name without
    the ":0"; None for a tensor (eager tensors have no name)."""
    path = getattr(v, "path", None)
    if isinstance(path, str) and path:
        return path
    try:
        name = v.name
    except AttributeError:
        return None
    if not isinstance(name, str):
        return None
    return name[:-2] if name.endswith(":0") else name


def broadcast_variables(variables, root_rank, process_set=None):
    """Sets every rank's variables (tf.Variable or Keras variables) to root_rank's values.

    Every rank gives the same variables in the same order: the i-th is broadcast under
    "broadcast.variables.<i>.<its name>". Returns the group of the assignments (None
    eagerly, where they are done on return)."""
    _check_process_set(process_set, "broadcast_variables")
    _check_root(root_rank, "broadcast_variables")
    assigns = []
    for i, v in enumerate(variables):
        label = "variables.%d" % i
        vname = _variable_name(v)
        if vname:
            label += "." + vname
        value = broadcast(tf.convert_to_tensor(v), root_rank, name=label)
        assigns.append(v.assign(value))
    return tf.group(*assigns)


def _reduce_gradients(grads, names, compression, sparse_as_dense, op,
                      gradient_predivide_factor, call):
    """The gradients grads (a flat list; None stays None) reduced over the ranks, each
    under its name in names."""
    pre, post = 1.0, 1.0
    if op == Average and gradient_predivide_factor != 1.0:
        # Split the average: divide by f before the sum and by size / f after.
        op = Sum
        pre = 1.0 / gradient_predivide_factor
        post = gradient_predivide_factor / size()
    out = []
    for g, gname in zip(grads, names):
        if g is None:
            out.append(None)
            continue
        if sparse_as_dense and isinstance(g, tf.IndexedSlices):
            g = tf.convert_to_tensor(g)
        out.append(_allreduce(g, _op_name(gname), op, pre, post,
                              compression, call))
    return out


def _gradient_names(prefix, sources):
    """"<prefix>.<i>[.<variable name>]" for each of the flat sources."""
    names = []
    for i, s in enumerate(sources):
        vname = _variable_name(s)
        names.append("%s.%d.%s" % (prefix, i, vname) if vname else "%s.%d" % (prefix, i))
    return names


def _check_reduction(op, gradient_predivide_factor, call):
    op = _resolve_op(None, op, call)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("%s.%s: gradient_predivide_factor needs op=Average" % (_MODULE, call))
    return op


class _DistributedGradientTapeMixin:
    """The method a DistributedGradientTape adds to the class of the tape it wraps."""

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        """The wrapped tape's gradients, each reduced over the ranks (see
        DistributedGradientTape). sources may be nested (a list, a dict); the result has
        its structure."""
        grads = super().gradient(target, sources, output_gradients=output_gradients,
                                 unconnected_gradients=unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        names = _gradient_names(self._chorus_name, flat_sources)
        reduced = _reduce_gradients(flat_grads, names, self._chorus_compression,
                                    self._chorus_sparse_as_dense, self._chorus_op,
                                    self._chorus_predivide, "DistributedGradientTape")
        return tf.nest.pack_sequence_as(grads, reduced, expand_composites=False)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=None, name="DistributedGradientTape"):
    """gradtape (a tf.GradientTape), made to reduce its gradients over the ranks.

    Returns an instance of a subclass of gradtape's class sharing its recording, whose
    gradient(target, sources) reduces each gradient with op (Average, the default, or
    Sum; others are allowed) under "allreduce.<name>.<i>.<variable name>", i its place in
    the flattened sources (tensors have no variable name: "allreduce.<name>.<i>"). Every
    rank asks for the gradients of the same sources in the same order. A None gradient
    (a source the target does not depend on) stays None, on every rank alike.

    compression: Compression.fp16 / .bf16 reduce float32 gradients with the engine's wire
    compression (sums in float32). gradient_predivide_factor f (op Average only):
    gradients are divided by f before the sum and by size() / f after. A sparse gradient
    (tf.IndexedSlices) is gathered, or reduced densely with sparse_as_dense=True.
    num_groups and groups are accepted and not used (the engine fuses whatever is ready).

    Wrap the tape after recording (`tape = hvd.DistributedGradientTape(tape)` after the
    `with` block) or before entering it (`with hvd.DistributedGradientTape(
    tf.GradientTape()) as tape:`)."""
    _check_process_set(process_set, "DistributedGradientTape")
    _require()
    if not isinstance(gradtape, tf.GradientTape):
        raise TypeError("%s.DistributedGradientTape: a tf.GradientTape expected, not %s"
                        % (_MODULE, type(gradtape).__name__))
    if isinstance(gradtape, _DistributedGradientTapeMixin):
        raise ValueError("%s.DistributedGradientTape: the tape is already distributed"
                         % _MODULE)
    op = _check_reduction(op, gradient_predivide_factor, "DistributedGradientTape")
    base = gradtape.__class__
    cls = type(base.__name__, (_DistributedGradientTapeMixin, base),
               {"__doc__": "%s, reducing its gradients with chorus" % base.__name__})
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)
    tape._chorus_compression = compression
    tape._chorus_sparse_as_dense = sparse_as_dense
    tape._chorus_op = op
    tape._chorus_predivide = gradient_predivide_factor
    tape._chorus_name = name
    return tape
