"""The TensorFlow ops of chorus: allreduce, allgather, broadcast and reducescatter as
asynchronous CPU kernels (kernels.cc) on chorus's training engine, with gradients, eagerly
and inside tf.function.

    from chorus import comm as C
    from chorus.tensorflow import _ops

    comm = C.Comm.from_env()
    engine = C.Engine(comm)
    _ops.bind(engine, comm)              # once, before the first op
    y = _ops.allreduce(x, op="avg")
    ...
    _ops.unbind()                        # after the last op, before destroying them
    engine.destroy(); comm.destroy()

Names. Each op is paired across ranks by its engine name, "<kind>.<name>" (kind:
allreduce, allgather, broadcast, reducescatter), so the ranks may run the ops in
different orders (a tf.function runs independent ops in any order, and the ops are not
chained in program order inside one) without deadlock. name=None takes, in a graph (a
tf.function), the op's node name with its name scopes ("allreduce.gradient_tape/
ChorusAllreduce_1"), alike on every rank that builds the same graph; eagerly, a count of
this rank's unnamed calls of that kind since bind() ("allreduce.noname.<n>"): unnamed
eager calls of one kind must come in the same order on every rank (from one thread; give
names to ops issued from several threads). A name may be used again once its earlier
round is done; a round submitted while the earlier one of its name is still in flight on
this rank waits for it, but ops of one name that run at once on several ranks (two
threads, overlapping loop iterations) may pair in a different order on each: give them
different names. Names longer than the engine's 255 bytes keep a prefix and a digest.

Failures. A name submitted with a different shape, dtype or op on two ranks raises
tf.errors.InvalidArgumentError on every rank (as does an allgather whose ranks' tensors
differ in dtype or in a dimension after the first), and the engine goes on. A rank that
dies, or passes CHORUS_TIMEOUT, makes the ops raise tf.errors.UnavailableError within the
timeout. An op run while no engine is bound raises tf.errors.FailedPreconditionError.

Dtypes: allreduce and reducescatter take int8, uint8, int32, uint32, int64, uint64,
float16, bfloat16, float32 and float64; allgather and broadcast move any of those and
bool, int16, uint16, complex64 and complex128. avg of integers divides toward zero.
"""

import ctypes
import re
import threading

import tensorflow as tf

from .. import _lib
from .._job import NAME_MAX, fit_name
from . import _build

_MODULE = "chorus.tensorflow"
_GATHER_NAME_MAX = 250   # an allgather's engine names add ".meta" and ".data"

_REDUCE_OPS = {"sum": "sum", "avg": "avg", "average": "avg", "min": "min", "max": "max",
               "prod": "prod", "product": "prod"}
_REDUCE_DTYPES = frozenset([tf.int8, tf.uint8, tf.int32, tf.uint32, tf.int64, tf.uint64,
                            tf.float16, tf.bfloat16, tf.float32, tf.float64])
_MOVE_DTYPES = _REDUCE_DTYPES | frozenset([tf.bool, tf.int16, tf.uint16, tf.complex64,
                                           tf.complex128])
_COMPRESSIONS = {None: "none", "none": "none", "fp16": "fp16", "bf16": "bf16"}


def _load():
    """The op module and the library's C entry points. libchorus is loaded first, so that
    the op library's libchorus.so.0 is that same, already loaded library; this is checked,
    since two copies would take each other's handles for their own."""
    chorus = _lib.library()
    path = _build.build()
    module = tf.load_op_library(path)
    c = ctypes.CDLL(path)
    c.chorus_tf_bind.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    c.chorus_tf_bind.restype = ctypes.c_int
    c.chorus_tf_unbind.argtypes = []
    c.chorus_tf_unbind.restype = ctypes.c_int
    c.chorus_tf_libchorus_symbol.argtypes = []
    c.chorus_tf_libchorus_symbol.restype = ctypes.c_void_p
    theirs = c.chorus_tf_libchorus_symbol()
    ours = ctypes.cast(chorus.chorus_version_string, ctypes.c_void_p).value
    if theirs != ours:
        raise ImportError("%s: the op library %s uses another libchorus than the one loaded "
                          "from %s; rebuild it (remove it from the cache)"
                          % (_MODULE, path, _lib.library_path()))
    return module, c, path


_module, _c, LIBRARY_PATH = _load()


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.bound = False
        self.rank = -1
        self.size = 0
        self.counters = {}     # kind -> unnamed eager calls so far


_state = _State()


def bind(engine, comm):
    """Serve the ops with engine (chorus.comm.Engine) on comm (chorus.comm.Comm, the
    engine's communicator). Call once after creating them, before the first op."""
    status = _c.chorus_tf_bind(engine.handle.value, comm.handle.value)
    _lib.check(status, "%s.bind" % _MODULE)
    with _state.lock:
        _state.bound = True
        _state.rank, _state.size = comm.rank, comm.size
        _state.counters = {}


def unbind():
    """Ops started from now on fail; returns once those in flight are done (each within the
    communicator's timeout). Call before destroying the engine and the communicator."""
    with _state.lock:
        _state.bound = False
    _c.chorus_tf_unbind()   # ctypes releases the GIL while it waits


def _bound_rank_size(call):
    with _state.lock:
        if not _state.bound:
            raise RuntimeError("%s: %s needs this rank and the rank count: call "
                               "chorus.tensorflow._ops.bind(engine, comm) first"
                               % (_MODULE, call))
        return _state.rank, _state.size


# ---- names -----------------------------------------------------------------------------

_NODE_BAD = re.compile(r"[^A-Za-z0-9_.\-/]")


def _node_name(name):
    """A valid TensorFlow node name that resembles name."""
    node = _NODE_BAD.sub("_", name).strip("/") or "chorus"
    return node if re.match(r"[A-Za-z0-9.]", node) else "chorus_" + node


def _names(kind, op_type, name, limit=NAME_MAX):
    """(engine name, node name) of an op of kind; see the module docstring."""
    if name is not None:
        name = str(name)
        return fit_name("%s.%s" % (kind, name), limit), _node_name(name)
    if tf.executing_eagerly():
        with _state.lock:
            n = _state.counters.get(kind, 0)
            _state.counters[kind] = n + 1
        return "%s.noname.%d" % (kind, n), None
    # The name the op will get: the graph makes it unique within its scope the same way.
    node = tf.compat.v1.get_default_graph().unique_name(op_type, mark_as_used=False)
    return fit_name("%s.%s" % (kind, node), limit), op_type


def _unordered(tensor):
    """The op of tensor is stateful, which tf.function would chain in program order with
    the function's other stateful ops: a step's collectives would run one at a time. Ops
    paired by name need no order; the function's dependency tracker runs them as
    independent side effects (they still always run)."""
    if tf.executing_eagerly():
        return
    manager = getattr(tensor.graph, "experimental_acd_manager", None)
    if manager is not None and hasattr(manager, "run_independently"):
        manager.run_independently(tensor.op)


def _reduce_op(op, call):
    key = op.lower() if isinstance(op, str) else op
    if key not in _REDUCE_OPS:
        raise ValueError("%s.%s: op %r is not one of sum, avg (average), min, max, prod"
                         % (_MODULE, call, op))
    return _REDUCE_OPS[key]


def _tensor(tensor, dtypes, call):
    t = tf.convert_to_tensor(tensor)
    if t.dtype not in dtypes:
        raise TypeError("%s.%s: dtype %s is not offered (%s)"
                        % (_MODULE, call, t.dtype.name,
                           ", ".join(sorted(d.name for d in dtypes))))
    return t


# ---- the ops ---------------------------------------------------------------------------

def allreduce(tensor, op="sum", name=None, compression=None):
    """Every rank's tensor reduced elementwise by op ("sum", "avg"/"average", "min", "max",
    "prod"), on every rank, with the same bits everywhere.

    compression: None, "fp16" or "bf16": the engine's wire compression
    (CHORUS_COMPRESS_FP16/BF16: values cross the network as float16 or bfloat16 with a
    scale the ranks agree on, added in float32), for float32 by sum or avg; for other
    dtypes and ops it is ignored and the values cross exactly."""
    t = _tensor(tensor, _REDUCE_DTYPES, "allreduce")
    reduce_op = _reduce_op(op, "allreduce")
    if compression not in _COMPRESSIONS:
        raise ValueError("%s.allreduce: compression %r is not one of None, 'fp16', 'bf16'"
                         % (_MODULE, compression))
    engine_name, node = _names("allreduce", "ChorusAllreduce", name)
    out = _module.chorus_allreduce(t, reduce_op=reduce_op,
                                   compression=_COMPRESSIONS[compression],
                                   tensor_name=engine_name, name=node)
    _unordered(out)
    return out


def _allgather(t, name):
    engine_name, node = _names("allgather", "ChorusAllgather", name, _GATHER_NAME_MAX)
    out, sizes = _module.chorus_allgather(t, tensor_name=engine_name, name=node)
    _unordered(out)
    return out, sizes


def allgather(tensor, name=None):
    """Every rank's tensor concatenated along dimension 0, in rank order. The first
    dimension may differ across ranks; the dtype and the other dimensions must not (every
    rank raises InvalidArgumentError when they do). Two engine allgathers: every rank's
    shape, then the rows (padded to the most rows of any rank when they differ)."""
    t = _tensor(tensor, _MOVE_DTYPES, "allgather")
    if t.shape.rank == 0:
        raise ValueError("%s.allgather: the tensor needs a dimension (dimension 0 is "
                         "concatenated)" % _MODULE)
    return _allgather(t, name)[0]


def broadcast(tensor, root_rank, name=None):
    """root_rank's tensor, on every rank (each rank gives a tensor of its shape and dtype)."""
    t = _tensor(tensor, _MOVE_DTYPES, "broadcast")
    root_rank = int(root_rank)
    with _state.lock:
        size = _state.size if _state.bound else None
    if root_rank < 0 or (size is not None and root_rank >= size):
        raise ValueError("%s.broadcast: root_rank %d is not a rank of %s"
                         % (_MODULE, root_rank, size))
    engine_name, node = _names("broadcast", "ChorusBroadcast", name)
    out = _module.chorus_broadcast(t, root_rank=root_rank, tensor_name=engine_name, name=node)
    _unordered(out)
    return out


def reducescatter(tensor, op="sum", name=None):
    """This rank's rows of every rank's tensor reduced by op: dimension 0 is split over the
    ranks as evenly as possible, the first ranks getting one more row.

    An engine allreduce of the whole tensor, then this rank's rows: order-free as the other
    ops, but it moves the whole tensor (a reduce-scatter would move 1/size of it)."""
    t = _tensor(tensor, _REDUCE_DTYPES, "reducescatter")
    reduce_op = _reduce_op(op, "reducescatter")
    if t.shape.rank == 0:
        raise ValueError("%s.reducescatter: the tensor needs a dimension (dimension 0 is "
                         "split)" % _MODULE)
    engine_name, node = _names("reducescatter", "ChorusReducescatter", name)
    out = _module.chorus_reducescatter(t, reduce_op=reduce_op, tensor_name=engine_name,
                                       name=node)
    _unordered(out)
    rows = t.shape[0] if t.shape.rank is not None else None
    with _state.lock:
        rank, size = (_state.rank, _state.size) if _state.bound else (None, None)
    if rows is not None and rank is not None and not tf.executing_eagerly():
        out.set_shape([rows // size + (1 if rank < rows % size else 0)] + t.shape[1:].as_list())
    return out


# ---- gradients ---------------------------------------------------------------------------

def _attr(op, name):
    v = op.get_attr(name)
    return v.decode() if isinstance(v, bytes) else v


@tf.RegisterGradient("ChorusAllreduce")
def _allreduce_grad(op, grad):
    """sum: the sum of every rank's gradient; avg: their average. min, max and prod have no
    gradient here (it would depend on which rank gave each value)."""
    reduce_op = _attr(op, "reduce_op")
    if reduce_op not in ("sum", "avg"):
        raise NotImplementedError("%s: allreduce by %s has no gradient (sum and avg have)"
                                  % (_MODULE, reduce_op))
    compression = _attr(op, "compression")
    return allreduce(grad, op=reduce_op, compression=None if compression == "none"
                     else compression)


@tf.RegisterGradient("ChorusAllgather")
def _allgather_grad(op, grad, _sizes_grad):
    """This rank's rows of the sum of every rank's gradient."""
    rank, _ = _bound_rank_size("the gradient of allgather")
    summed = allreduce(grad, op="sum")
    sizes = op.outputs[1]
    first = tf.reduce_sum(sizes[:rank])
    return summed[first:first + sizes[rank]]


@tf.RegisterGradient("ChorusBroadcast")
def _broadcast_grad(op, grad):
    """On the root, the sum of every rank's gradient; zeros elsewhere."""
    rank, _ = _bound_rank_size("the gradient of broadcast")
    summed = allreduce(grad, op="sum")   # every rank takes part
    return summed if rank == op.get_attr("root_rank") else tf.zeros_like(summed)


@tf.RegisterGradient("ChorusReducescatter")
def _reducescatter_grad(op, grad):
    """Every rank's gradient gathered (divided by the rank count for avg)."""
    reduce_op = _attr(op, "reduce_op")
    if reduce_op not in ("sum", "avg"):
        raise NotImplementedError("%s: reducescatter by %s has no gradient (sum and avg "
                                  "have)" % (_MODULE, reduce_op))
    _, size = _bound_rank_size("the gradient of reducescatter")
    gathered = _allgather(grad, None)[0]
    if reduce_op == "avg":
        gathered = gathered / tf.cast(size, gathered.dtype)
    return gathered


__all__ = ["bind", "unbind", "allreduce", "allgather", "broadcast", "reducescatter"]
