"""Horovod's PyTorch API on chorus, so that `import chorus.torch as hvd` runs Horovod programs.

    import chorus.torch as hvd

    hvd.init()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

CPU tensors only. `init()` makes one communicator from the environment (`Comm.from_env()`:
the variables of chorus-run, torchrun or an MPI launcher) and one training engine on it.

Two kinds of calls, as in Horovod:

* allreduce, broadcast and allgather (and their async, in-place and grouped forms, the
  object calls, and the DistributedOptimizer) go through the engine: each tensor is paired
  across ranks by its name, so ranks may submit them in different orders without deadlock.
  The engine name is the kind and the name ("allreduce.<name>", "broadcast.<name>", ...;
  one longer than the engine's 255 bytes keeps a prefix and a digest of the whole). A call
  without a name gets "<kind>.noname.<n>", n counting that kind's unnamed calls on the
  rank: unnamed calls of one kind must come in the same order on every rank. A name
  stands for one tensor at a time: submitting it again while its earlier submission is in
  flight waits for that one first. The engine keeps every name it has seen, unnamed
  calls' included, up to 2^20. An allgather's second stage is submitted by a thread of
  this module as soon as its first is done, so it needs no synchronize() to progress.
* alltoall, reducescatter, barrier and join are collectives of the communicator: every rank
  calls them in the same order (with respect to each other; they may interleave freely
  with the engine's calls).

A tensor that two ranks submit under one name with a different size, dtype or op fails on
every rank at once: `synchronize()` (or the synchronous call, or
`DistributedOptimizer.step()`) raises chorus.ChorusError (INVALID_ARG) everywhere, and the
engine goes on serving later submissions. A program may reuse a name for a tensor of
another size when every rank does (the engine takes the new description for that round).
Two shapes with the same element count are not told apart.

Not offered: process sets other than the global one, Adasum, autograd through the
collectives (they act on the tensors' data), sparse allreduce (DistributedOptimizer's
sparse_as_dense=True densifies), and CUDA tensors.
"""

import contextlib
import math
import pickle
import threading
import time
import zlib

import torch

from .. import _job
from .. import comm as C
from .._compression import Compression, Compressor, wire_compression
from .._lib import ChorusError
from . import launch
from ._tensors import BACKEND, Staged, Unsupported, host, reduce_dtype

__all__ = [
    # lifetime and the job
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank",
    # reduction ops and compression
    "Average", "Sum", "Min", "Max", "Product", "Compression", "Compressor",
    # collectives on tensors
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_",
    "allgather", "allgather_async", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "alltoall", "reducescatter", "poll", "synchronize", "join",
    "barrier",
    # objects, models and optimizers
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "allgather_object", "DistributedOptimizer", "LearningRateWarmup",
]

# Reduction ops: chorus's op codes.
Average = C.AVG
Sum = C.SUM
Min = C.MIN
Max = C.MAX
Product = C.PROD
_OP_NAMES = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}

_INVALID_ARG = -1               # chorus_status_t CHORUS_ERR_INVALID_ARG
_MODULE = "chorus.torch.horovod"


# ---- compression (chorus._compression) -----------------------------------------------

_WIRE_FLAGS = {None: 0, "fp16": C.COMPRESS_FP16, "bf16": C.COMPRESS_BF16}


def _wire_compression(compression):
    """(engine flag, None) for a wire compressor; (0, compressor) for one run in Python."""
    wire, py_compressor = wire_compression(compression)
    return _WIRE_FLAGS[wire], py_compressor


# ---- state -----------------------------------------------------------------------------

# What init() sets up, and the tables of this rank's submissions.
_state = _job.Job(_MODULE)
_require = _state.require


def init(comm=None):
    """Sets up chorus for this process; collective over the job. Idempotent.

    comm: None to create the communicator from the environment (chorus-run's CHORUS_*
    variables, torchrun's or an MPI launcher's), or a chorus.comm.Comm to use (it stays the
    caller's: shutdown() leaves it). Process sets (a list of ranks) are not offered.
    """
    _state.start(comm, shutdown, make_comm=_comm_from_env)


def _comm_from_env():
    """Comm.from_env() on the launcher's own variables, not those chorus.torch.launch
    derived for torch (under torchrun, chorus's rendezvous takes MASTER_PORT + 1)."""
    with launch.without_torch_env():
        return C.Comm.from_env()


def shutdown():
    """Destroys the engine and the communicator init() created; collective over the job.

    Submissions still waiting for another rank fail (ABORTED). Called at exit too, unless
    the process ends by an uncaught exception: then it leaves without waiting for the
    other ranks (they see it gone and fail their pending calls).
    """
    _state.stop(after=_state.forget)


is_initialized = _state.is_initialized
size = _state.size
rank = _state.rank
local_size = _state.local_size
local_rank = _state.local_rank
cross_size = _state.cross_size
cross_rank = _state.cross_rank


# ---- names -----------------------------------------------------------------------------

_base_name = _state.base_name


def _submit(base, fresh, post):
    """(Request, base or None) of _state.submit(): an _Op drops a named base's table
    entry once its request is done."""
    return _state.submit(base, fresh, post), (None if fresh else base)


# ---- pending operations and handles ------------------------------------------------------

class _Stage:
    """A further stage of an operation: submissions to wait for, then finish()."""

    def __init__(self, submissions, finish):
        self.requests = list(submissions)
        self.finish = finish


class _Op:
    """One pending operation: requests in flight, then finish(), which gives the result or
    a _Stage to go on with. Failures are kept and raised by result().

    An operation of several stages (allgather) is advanced by the progress thread, so that
    its later stages are submitted as soon as the earlier ones are done, whether or not
    this rank is waiting for it: another rank may be waiting for them."""

    def __init__(self, what, submissions, finish, background=False):
        self.what = what
        self._requests = list(submissions)     # (Request, base name or None)
        self._finish = finish
        self._error = None
        self._done = False
        self._result = None
        self._event = None
        if background:
            self._event = threading.Event()
            _progress.add(self)

    def _advance(self, block):
        while not self._done:
            for req, base in self._requests:
                try:
                    if block:
                        req.wait()
                    elif not req.test():
                        return False
                except ChorusError as e:
                    if self._error is None:
                        self._error = e
            self._requests = []
            if self._error is not None:
                self._done = True
                break
            try:
                out = self._finish()
            except Exception as e:  # a check of the gathered data, reported at synchronize
                self._error = e
                self._done = True
                break
            if isinstance(out, _Stage):
                self._requests, self._finish = out.requests, out.finish
                continue
            self._result = out
            self._done = True
        return True

    def poll(self):
        """True once done (failed or not); never blocks on the network."""
        if self._event is not None:
            return self._event.is_set()
        return self._advance(block=False)

    def wait_done(self):
        """Blocks until done; raises nothing."""
        if self._event is not None:
            while not self._event.wait(0.1):
                pass
        else:
            self._advance(block=True)

    def result(self):
        self.wait_done()
        if self._error is not None:
            err = self._error
            if isinstance(err, ChorusError) and err.status == _INVALID_ARG \
                    and hasattr(err, "add_note") and not getattr(err, "_noted", False):
                err.add_note("%s: %s: every rank must submit a name with the same size, "
                             "dtype and op (the log names the ranks and what each "
                             "submitted)" % (_MODULE, self.what))
                err._noted = True
            raise err
        return self._result


class _Progress:
    """A thread that advances the operations of several stages without blocking on any."""

    def __init__(self):
        self._cond = threading.Condition()
        self._ops = []
        self._thread = None

    def add(self, op):
        with self._cond:
            self._ops.append(op)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="chorus-horovod-progress")
                self._thread.start()
            self._cond.notify()

    def _run(self):
        while True:
            with self._cond:
                while not self._ops:
                    self._cond.wait()
                ops = list(self._ops)
            finished = []
            for op in ops:
                try:
                    done = op._advance(block=False)
                except BaseException as e:  # keep the thread alive; the op reports it
                    op._error, op._done, done = e, True, True
                if done:
                    finished.append(op)
            with self._cond:
                for op in finished:
                    self._ops.remove(op)
            for op in finished:
                op._event.set()
            if not finished:
                time.sleep(0.0005)


_progress = _Progress()


_handle_of = _state.handle_of
poll = _state.poll
synchronize = _state.synchronize


# ---- tensors -----------------------------------------------------------------------------

def _check_process_set(process_set, call):
    if process_set is not None:
        raise Unsupported("%s.%s: process sets are not offered by the '%s' backend (only the "
                          "global one, process_set=None)" % (_MODULE, call, BACKEND))


def _data(tensor, call):
    """tensor's data (no autograd), checked to be a host tensor chorus can read."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s.%s: a torch.Tensor expected, not %s"
                        % (_MODULE, call, type(tensor).__name__))
    return host(tensor.detach(), "%s.%s" % (_MODULE, call))


def _resolve_op(average, op, call):
    if average is not None:
        if op is not None:
            raise ValueError("%s.%s: give op or average (deprecated), not both" % (_MODULE, call))
        return Average if average else Sum
    if op is None:
        return Average
    if op not in _OP_NAMES:
        raise Unsupported("%s.%s: op %r is not offered by the '%s' backend (Average, Sum, Min, "
                          "Max, Product)" % (_MODULE, call, op, BACKEND))
    return op


def _plain_dtype(t):
    """(chorus dtype, count) to describe t to the engine: its own type where chorus has
    it, else its bytes."""
    try:
        return reduce_dtype(t, C.SUM, "")
    except Unsupported:
        return C.UINT8, t.numel() * t.element_size()


def _dtype_tag(dtype):
    return zlib.crc32(str(dtype).encode()) & 0x7FFFFFFF


def _source(t, compression, prescale, postscale, call):
    """(src, flag, compressor, ctx) of a reduction of t: src is t through a Python-side
    compressor (a user's Compressor; ctx what its decompress needs), times prescale; flag
    the engine's wire compression (Compression.fp16 and .bf16)."""
    flag, py_compressor = _wire_compression(compression)
    ctx = None
    src = t
    if py_compressor is not None:
        src, ctx = py_compressor.compress(t)
        src = _data(src, call)
    if (prescale != 1.0 or postscale != 1.0) and not (src.is_floating_point() or
                                                      src.is_complex()):
        raise ValueError("%s.%s: prescale_factor and postscale_factor need a floating point "
                         "tensor, not %s" % (_MODULE, call, src.dtype))
    if prescale != 1.0:
        src = src * prescale
    return src, flag, py_compressor, ctx


def _allreduce_parts(tensor, base, fresh, op, prescale, postscale, compression, inplace,
                     call):
    """Submits one allreduce under base (fresh: an unnamed call's name, used once); returns
    (submission, finish)."""
    st = _require()
    t = _data(tensor, call)
    src, flag, py_compressor, ctx = _source(t, compression, prescale, postscale, call)
    dtype, count = reduce_dtype(src, op, "%s.%s" % (_MODULE, call))
    if src.dtype != torch.float32 or op not in (Sum, Average):
        flag = 0
    if inplace and src is t:
        staged = Staged(t, call)
        send = recv = staged.buf
    else:
        staged = None
        send = src.contiguous()
        recv = torch.empty(src.shape, dtype=src.dtype)

    def post(en):
        return st.engine.allreduce(en, send.data_ptr(), recv.data_ptr(), count, dtype, op,
                                   flags=flag, keep=(send, recv, staged))
    sub = _submit(base, fresh, post)

    def finish():
        out = recv
        if postscale != 1.0:
            out.mul_(postscale)
        if py_compressor is not None:
            out = py_compressor.decompress(out, ctx)
        if not inplace:
            return out
        if staged is not None:
            staged.back()
        else:
            t.copy_(out)
        return tensor
    return sub, finish


def _allreduce_op(tensors, name, op, prescale, postscale, compression, inplace, call,
                  grouped):
    """An _Op of the allreduces of tensors: one tensor named "allreduce.<name>", or a group
    named "grouped_allreduce.<name>.<i>"; unnamed ones get fresh names."""
    if grouped:
        group, fresh = _base_name("grouped_allreduce", name)
        bases = ["%s.%d" % (group, i) for i in range(len(tensors))]
    else:
        base, fresh = _base_name("allreduce", name)
        bases = [base]
    subs, finishes = [], []
    for t, base in zip(tensors, bases):
        sub, fin = _allreduce_parts(t, base, fresh, op, prescale, postscale, compression,
                                    inplace, call)
        subs.append(sub)
        finishes.append(fin)
    if grouped:
        return _Op(call, subs, lambda: [f() for f in finishes])
    return _Op(call, subs, finishes[0])


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None, compression=Compression.none):
    """Starts an allreduce of tensor into a new tensor; returns a handle for synchronize().

    op: Average (the default), Sum, Min, Max or Product (average=True/False: the
    deprecated form of Average/Sum). The result is op over the ranks of
    tensor * prescale_factor, times postscale_factor. Average of integers truncates
    toward zero."""
    _check_process_set(process_set, "allreduce_async")
    op = _resolve_op(average, op, "allreduce_async")
    return _handle_of(_allreduce_op([tensor], name, op, prescale_factor, postscale_factor,
                                    compression, False, "allreduce", False))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None, compression=Compression.none):
    """allreduce_async in place: synchronize() writes the result into tensor and returns it."""
    _check_process_set(process_set, "allreduce_async_")
    op = _resolve_op(average, op, "allreduce_async_")
    return _handle_of(_allreduce_op([tensor], name, op, prescale_factor, postscale_factor,
                                    compression, True, "allreduce_", False))


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """The allreduce of tensor over the ranks, as a new tensor (see allreduce_async).

    compression: Compression.fp16 / .bf16 send float32 Sum and Average on the wire in 16
    bits, accumulated in float32."""
    _check_process_set(process_set, "allreduce")
    op = _resolve_op(average, op, "allreduce")
    return _allreduce_op([tensor], name, op, prescale_factor, postscale_factor, compression,
                         False, "allreduce", False).result()


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None, compression=Compression.none):
    """allreduce in place: tensor gets the result, and is returned."""
    _check_process_set(process_set, "allreduce_")
    op = _resolve_op(average, op, "allreduce_")
    return _allreduce_op([tensor], name, op, prescale_factor, postscale_factor, compression,
                         True, "allreduce_", False).result()


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None,
                            compression=Compression.none):
    """Starts allreduces of a list of tensors (as "<name>.<i>"); synchronize() returns the
    list of results. The engine fuses them into buckets with whatever else is ready."""
    _check_process_set(process_set, "grouped_allreduce_async")
    op = _resolve_op(average, op, "grouped_allreduce_async")
    return _handle_of(_allreduce_op(list(tensors), name, op, prescale_factor,
                                    postscale_factor, compression, False,
                                    "grouped_allreduce", True))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None,
                             compression=Compression.none):
    """grouped_allreduce_async in place."""
    _check_process_set(process_set, "grouped_allreduce_async_")
    op = _resolve_op(average, op, "grouped_allreduce_async_")
    return _handle_of(_allreduce_op(list(tensors), name, op, prescale_factor,
                                    postscale_factor, compression, True,
                                    "grouped_allreduce_", True))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """The allreduces of a list of tensors, as a list of new tensors."""
    _check_process_set(process_set, "grouped_allreduce")
    op = _resolve_op(average, op, "grouped_allreduce")
    return _allreduce_op(list(tensors), name, op, prescale_factor, postscale_factor,
                         compression, False, "grouped_allreduce", True).result()


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None, compression=Compression.none):
    """grouped_allreduce in place: each tensor gets its result; returns the list."""
    _check_process_set(process_set, "grouped_allreduce_")
    op = _resolve_op(average, op, "grouped_allreduce_")
    return _allreduce_op(list(tensors), name, op, prescale_factor, postscale_factor,
                         compression, True, "grouped_allreduce_", True).result()


# ---- broadcast ---------------------------------------------------------------------------

def _check_root(root_rank, call):
    n = size()
    if not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError("%s.%s: root_rank %r is not a rank of %d" % (_MODULE, call,
                                                                     root_rank, n))


def _broadcast_op(tensor, root_rank, base, fresh, inplace, call):
    st = _require()
    _check_root(root_rank, call)
    t = _data(tensor, call)
    dtype, count = _plain_dtype(t)
    if inplace:
        staged = Staged(t, call)
        buf = staged.buf
    else:
        staged = None
        buf = t.clone(memory_format=torch.contiguous_format)

    def post(en):
        return st.engine.broadcast(en, buf.data_ptr(), buf.data_ptr(), count, dtype,
                                   root_rank, keep=(buf, staged))
    sub = _submit(base, fresh, post)

    def finish():
        if not inplace:
            return buf
        staged.back()
        return tensor
    return _Op(call, [sub], finish)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    """Starts a broadcast of root_rank's tensor into a new tensor on every rank; a handle."""
    _check_process_set(process_set, "broadcast_async")
    base, fresh = _base_name("broadcast", name)
    return _handle_of(_broadcast_op(tensor, root_rank, base, fresh, False, "broadcast"))


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """broadcast_async in place: synchronize() writes root_rank's values into tensor."""
    _check_process_set(process_set, "broadcast_async_")
    base, fresh = _base_name("broadcast", name)
    return _handle_of(_broadcast_op(tensor, root_rank, base, fresh, True, "broadcast_"))


def broadcast(tensor, root_rank, name=None, process_set=None):
    """root_rank's tensor, as a new tensor on every rank."""
    _check_process_set(process_set, "broadcast")
    base, fresh = _base_name("broadcast", name)
    return _broadcast_op(tensor, root_rank, base, fresh, False, "broadcast").result()


def broadcast_(tensor, root_rank, name=None, process_set=None):
    """Writes root_rank's tensor into tensor on every rank; returns tensor."""
    _check_process_set(process_set, "broadcast_")
    base, fresh = _base_name("broadcast", name)
    return _broadcast_op(tensor, root_rank, base, fresh, True, "broadcast_").result()


# ---- allgather ---------------------------------------------------------------------------

def _allgather_op(tensor, base, fresh, call, with_counts=False):
    """Two stages on the engine: every rank's dtype and shape ("<base>.meta"), then the
    data ("<base>.data"), each rank's rows padded to the largest count of rows and the
    padding dropped after (no padding when every rank has as many rows)."""
    st = _require()
    t = _data(tensor, call)
    if t.dim() == 0:
        raise ValueError("%s.%s: the tensor needs at least one dimension (dim 0 is "
                         "concatenated)" % (_MODULE, call))
    nranks = st.comm.size
    if not fresh:
        # The progress thread alone touches a pending allgather's requests: an allgather of
        # a name still in flight waits for it here rather than in the thread.
        with _state.lock:
            earlier = _state.gathers.get(base)
        if earlier is not None:
            earlier.wait_done()
    meta = torch.tensor([_dtype_tag(t.dtype), t.dim()] + list(t.shape), dtype=torch.int64)
    metas = torch.empty(nranks * meta.numel(), dtype=torch.int64)

    def post_meta(en):
        return st.engine.allgather(en, meta.data_ptr(), metas.data_ptr(), meta.numel(),
                                   C.INT64, keep=(meta, metas))
    meta_sub = _submit(base + ".meta", fresh, post_meta)

    def after_meta():
        rows = metas.view(nranks, -1)
        mine = meta.tolist()
        for r in range(nranks):
            theirs = rows[r].tolist()
            if theirs[0] != mine[0] or theirs[3:] != mine[3:]:
                raise ValueError("%s.%s: ranks gave tensors of different dtypes or trailing "
                                 "dimensions (this rank %d: %s %s; rank %d: shape %s)"
                                 % (_MODULE, call, st.comm.rank, t.dtype, tuple(t.shape), r,
                                    tuple(theirs[2:])))
        counts = rows[:, 2].tolist()
        trailing = tuple(t.shape[1:])
        most = max(counts)
        if most * math.prod(trailing) == 0:
            out = torch.empty((sum(counts),) + trailing, dtype=t.dtype)
            return (out, counts) if with_counts else out
        if all(c == most for c in counts):
            send = t.contiguous()
        else:
            send = torch.zeros((most,) + trailing, dtype=t.dtype)
            send[:t.shape[0]] = t
        nbytes = send.numel() * send.element_size()
        recv = torch.empty((nranks * most,) + trailing, dtype=t.dtype)

        def post_data(en):
            return st.engine.allgather(en, send.data_ptr(), recv.data_ptr(), nbytes, C.UINT8,
                                       keep=(send, recv))
        data_sub = _submit(base + ".data", fresh, post_data)

        def after_data():
            if all(c == most for c in counts):
                out = recv
            else:
                out = torch.cat([recv[r * most:r * most + counts[r]] for r in range(nranks)])
            return (out, counts) if with_counts else out
        return _Stage([data_sub], after_data)
    op = _Op(call, [meta_sub], after_meta, background=True)
    if not fresh:
        with _state.lock:
            _state.gathers[base] = op
    return op


def allgather_async(tensor, name=None, process_set=None):
    """Starts an allgather (see allgather); returns a handle."""
    _check_process_set(process_set, "allgather_async")
    return _handle_of(_allgather_op(tensor, *_base_name("allgather", name), "allgather"))


def allgather(tensor, name=None, process_set=None):
    """Every rank's tensor concatenated along dim 0, in rank order. The ranks' tensors
    must agree in dtype and in every dimension but the first, which may differ.

    Two engine allgathers: first every rank's dtype and shape, then the rows, each rank's
    padded to the most rows of any rank (the engine gathers equal counts) and the padding
    dropped from the result; no padding when every rank has as many rows. Ranks whose
    dtypes or trailing dimensions differ all raise ValueError."""
    _check_process_set(process_set, "allgather")
    return _allgather_op(tensor, *_base_name("allgather", name), "allgather").result()


# ---- collectives of the communicator -----------------------------------------------------

def _blocks_of_rows(t, splits, block):
    """t's rows as len(splits) blocks of block rows each, block r holding the next splits[r]
    rows of t and zeros after them: t itself when every split is block."""
    if all(n == block for n in splits):
        return t.contiguous()
    out = torch.zeros((len(splits) * block,) + tuple(t.shape[1:]), dtype=t.dtype)
    start = 0
    for r, n in enumerate(splits):
        out[r * block:r * block + n] = t[start:start + n]
        start += n
    return out


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Scatters tensor's dim 0 to the ranks and gathers what they send to this one.

    splits: how many rows go to each rank (a list or tensor of size() integers summing to
    tensor.shape[0]); None: equal parts (dim 0 must divide by size()). Returns the rows
    received, concatenated in rank order; with splits given, (those rows, a torch.int32
    tensor of how many came from each rank), as Horovod does. Uneven splits work: the
    blocks are padded to the largest block of any rank. A collective of the communicator:
    every rank calls alltoall in the same order (name is accepted and not used)."""
    call = "alltoall"
    _check_process_set(process_set, call)
    comm = _require().comm
    nranks = comm.size
    t = _data(tensor, call)
    if t.dim() == 0:
        raise ValueError("%s.%s: the tensor needs at least one dimension" % (_MODULE, call))
    rows = t.shape[0]
    if splits is None:
        if rows % nranks:
            raise ValueError("%s.%s: dim 0 (%d) does not divide by %d ranks; give splits"
                             % (_MODULE, call, rows, nranks))
        send_splits = [rows // nranks] * nranks
    else:
        send_splits = [int(s) for s in (splits.tolist() if isinstance(splits, torch.Tensor)
                                        else splits)]
        if len(send_splits) != nranks or any(s < 0 for s in send_splits) \
                or sum(send_splits) != rows:
            raise ValueError("%s.%s: splits %s must be %d non-negative counts summing to dim "
                             "0 (%d)" % (_MODULE, call, send_splits, nranks, rows))
    trailing = tuple(t.shape[1:])
    row_bytes = math.prod(trailing) * t.element_size()
    # Stage 1: each destination learns its block's rows, and the layout, from each source.
    info = torch.tensor([[s, row_bytes, _dtype_tag(t.dtype), max(send_splits)]
                         for s in send_splits], dtype=torch.int64)
    got = torch.empty_like(info)
    comm.ialltoall(info.data_ptr(), got.data_ptr(), 4, C.INT64, keep=(info, got)).wait()
    for r, (count, rb, tag, _) in enumerate(got.tolist()):
        if rb != row_bytes or tag != _dtype_tag(t.dtype):
            raise ValueError("%s.%s: rank %d sends rows of %d bytes (dtype tag %d), this rank "
                             "%d of %s, shape %s" % (_MODULE, call, r, rb, tag, comm.rank,
                                                     t.dtype, tuple(t.shape)))
    recv_splits = got[:, 0].tolist()
    # The largest block any rank sends: every rank got every source's, so all agree.
    block = max(got[:, 3].tolist())
    if block == 0 or row_bytes == 0:
        out = torch.empty((sum(recv_splits),) + trailing, dtype=t.dtype)
    else:
        send = _blocks_of_rows(t, send_splits, block)
        recv = torch.empty((nranks * block,) + trailing, dtype=t.dtype)
        comm.ialltoall(send.data_ptr(), recv.data_ptr(), block * row_bytes, C.UINT8,
                       keep=(send, recv)).wait()
        if all(s == block for s in recv_splits):
            out = recv
        else:
            out = torch.cat([recv[r * block:r * block + s]
                             for r, s in enumerate(recv_splits)])
    if splits is None:
        return out
    return out, torch.tensor(recv_splits, dtype=torch.int32)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduces tensor over the ranks (op, default Average) and gives each rank its part of
    dim 0: rank r gets rows of the result in rank order, dim 0 // size() of them, the
    first dim 0 % size() ranks one more. A collective of the communicator: every rank
    calls it in the same order (name is accepted and not used). compression: wire
    compression of float32 Sum/Average, as for allreduce."""
    call = "reducescatter"
    _check_process_set(process_set, call)
    comm = _require().comm
    op = _resolve_op(None, op, call)
    nranks = comm.size
    t = _data(tensor, call)
    if t.dim() == 0:
        raise ValueError("%s.%s: the tensor needs at least one dimension" % (_MODULE, call))
    src, flag, py_compressor, ctx = _source(t, compression, prescale_factor,
                                            postscale_factor, call)
    if src.dtype != torch.float32 or op not in (Sum, Average):
        flag = 0
    # Every rank checks that all have the same shape, dtype and op before reducing.
    desc = repr((tuple(src.shape), str(src.dtype), op, flag)).encode()
    mine = torch.tensor([zlib.crc32(desc), len(desc)], dtype=torch.int64)
    every = torch.empty(2 * nranks, dtype=torch.int64)
    comm.iallgather(mine.data_ptr(), every.data_ptr(), 2, C.INT64, keep=(mine, every)).wait()
    if any(every.view(nranks, 2)[r].tolist() != mine.tolist() for r in range(nranks)):
        raise ValueError("%s.%s: ranks gave tensors of different shapes, dtypes, ops or "
                         "compression (this rank %d: %s %s)" % (_MODULE, call, comm.rank,
                                                                src.dtype, tuple(src.shape)))
    rows = src.shape[0]
    trailing = tuple(src.shape[1:])
    counts = [rows // nranks + (1 if r < rows % nranks else 0) for r in range(nranks)]
    block = counts[0]
    if block * math.prod(trailing) == 0:
        out = torch.empty((counts[comm.rank],) + trailing, dtype=src.dtype)
    else:
        send = _blocks_of_rows(src, counts, block)
        recv = torch.empty((block,) + trailing, dtype=src.dtype)
        dtype, count = reduce_dtype(recv, op, "%s.%s" % (_MODULE, call))
        comm.ireduce_scatter(send.data_ptr(), recv.data_ptr(), count, dtype, op, flags=flag,
                             keep=(send, recv)).wait()
        out = recv[:counts[comm.rank]]
    if postscale_factor != 1.0:
        out = out * postscale_factor
    if py_compressor is not None:
        out = py_compressor.decompress(out, ctx)
    return out


def barrier(process_set=None):
    """Returns once every rank has called barrier()."""
    _check_process_set(process_set, "barrier")
    _require().comm.ibarrier().wait()


def join(device=-1):
    """Waits for every rank to call join() and returns the rank that called it last.

    Unlike Horovod's join, ranks that have joined do not stand in for the collectives of
    ranks still training: this is a barrier. "Last" is by each rank's wall clock
    (time.time()) at its call, ties to the higher rank, so it is exact on one node and as
    good as the clocks' agreement across nodes. device is accepted and not used."""
    comm = _require().comm
    mine = torch.tensor([time.time()], dtype=torch.float64)
    every = torch.empty(comm.size, dtype=torch.float64)
    comm.iallgather(mine.data_ptr(), every.data_ptr(), 1, C.FLOAT64, keep=(mine, every)).wait()
    times = every.tolist()
    last = max(range(comm.size), key=lambda r: (times[r], r))
    return last


# ---- objects, models, optimizers -----------------------------------------------------------

def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """root_rank's obj on every rank, through pickle (its length, then its bytes)."""
    call = "broadcast_object"
    _check_process_set(process_set, call)
    _check_root(root_rank, call)
    base, fresh = _base_name("broadcast_object", name)
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)),
                                   dtype=torch.uint8)
    else:
        payload = None
    length = torch.tensor([0 if payload is None else payload.numel()], dtype=torch.int64)
    _broadcast_op(length, root_rank, base + ".length", fresh, True, call).result()
    if payload is None:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    if payload.numel():
        _broadcast_op(payload, root_rank, base + ".bytes", fresh, True, call).result()
    if rank() == root_rank:
        return obj
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=None):
    """The list of every rank's obj, in rank order, through pickle."""
    call = "allgather_object"
    _check_process_set(process_set, call)
    base, fresh = _base_name("allgather_object", name)
    payload = torch.frombuffer(bytearray(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)),
                               dtype=torch.uint8)
    data, counts = _allgather_op(payload, base, fresh, call, with_counts=True).result()
    out, start = [], 0
    raw = data.numpy().tobytes()
    for c in counts:
        out.append(pickle.loads(raw[start:start + c]))
        start += c
    return out


def broadcast_parameters(params, root_rank):
    """Sets every rank's tensors to root_rank's, in place.

    params: a dict of name -> tensor (model.state_dict()), or an iterable of (name, tensor)
    pairs (model.named_parameters()), or of tensors (then named by position). Every rank
    gives the same names."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    handles = []
    for i, (pname, p) in enumerate(items):
        if not isinstance(p, torch.Tensor):
            raise ValueError("%s.broadcast_parameters: '%s' is a %s, not a tensor"
                             % (_MODULE, pname, type(p).__name__))
        label = "parameters.%s" % (pname if pname is not None else "noname.%d" % i)
        handles.append(broadcast_async_(p, root_rank, name=label))
    errors = []
    for h in handles:
        try:
            synchronize(h)
        except (ChorusError, ValueError) as e:
            errors.append(e)
    if errors:
        raise errors[0]


def broadcast_optimizer_state(optimizer, root_rank):
    """Sets every rank's optimizer state and hyperparameters (its state_dict()) to
    root_rank's: the state_dict is broadcast with broadcast_object and loaded with
    load_state_dict on the other ranks. Its parameter groups must match on every rank."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("%s.broadcast_optimizer_state: LBFGS is not supported" % _MODULE)
    state = optimizer.state_dict() if rank() == root_rank else None
    state = broadcast_object(state, root_rank, name="optimizer_state")
    if rank() != root_rank:
        optimizer.load_state_dict(state)


class _DistributedOptimizerMixin:
    """The methods a DistributedOptimizer adds to the class of the optimizer it wraps."""

    def _chorus_setup(self, named_parameters, compression, backward_passes_per_step, op,
                      gradient_predivide_factor, sparse_as_dense):
        self._chorus_compression = compression
        self._chorus_passes_per_step = backward_passes_per_step
        self._chorus_op = op
        self._chorus_predivide = gradient_predivide_factor
        self._chorus_sparse_as_dense = sparse_as_dense
        self._chorus_should_sync = True
        self._chorus_synchronized = False
        params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            pairs = list(named_parameters)
            for pair in pairs:
                if not (isinstance(pair, tuple) and len(pair) == 2):
                    raise ValueError("%s.DistributedOptimizer: named_parameters must be "
                                     "(name, parameter) pairs, as model.named_parameters() "
                                     "gives" % _MODULE)
            names = [n for n, _ in pairs]
            dups = sorted({n for n in names if names.count(n) > 1})
            if dups:
                raise ValueError("%s.DistributedOptimizer: named_parameters has duplicate "
                                 "names: %s" % (_MODULE, ", ".join(dups)))
            by_param = {id(p): n for n, p in pairs}
            unnamed = [i for i, p in enumerate(params) if id(p) not in by_param]
            if unnamed:
                raise ValueError("%s.DistributedOptimizer: named_parameters was given but "
                                 "%d of the optimizer's parameters are not in it" %
                                 (_MODULE, len(unnamed)))
        else:
            by_param = {id(p): "allreduce.noname.%d" % i for i, p in enumerate(params)}
        self._chorus_names = by_param
        self._chorus_params, seen = [], set()
        for p in params:
            if p.requires_grad and id(p) not in seen:
                host(p.detach(), "%s.DistributedOptimizer" % _MODULE)
                seen.add(id(p))
                self._chorus_params.append(p)
        self._chorus_passes_left = {id(p): backward_passes_per_step
                                    for p in self._chorus_params}
        self._chorus_ops = {}       # id(param) -> _Op in flight, or None while accumulating
        self._chorus_hooks = [p.register_post_accumulate_grad_hook(self._chorus_grad_ready)
                              for p in self._chorus_params]

    def _chorus_submit(self, p):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        elif p.grad.is_sparse:
            if not self._chorus_sparse_as_dense:
                raise Unsupported("%s.DistributedOptimizer: '%s' has a sparse gradient; the "
                                  "'%s' backend reduces dense ones (sparse_as_dense=True)"
                                  % (_MODULE, self._chorus_names[id(p)], BACKEND))
            p.grad = p.grad.to_dense()
        op, pre, post = self._chorus_op, 1.0, 1.0
        if op == Average and self._chorus_predivide != 1.0:
            # Split the average: divide by f before the sum and by size / f after.
            op = Sum
            pre = 1.0 / self._chorus_predivide
            post = self._chorus_predivide / size()
        return _allreduce_op([p.grad], self._chorus_names[id(p)], op, pre, post,
                             self._chorus_compression, True, "DistributedOptimizer", False)

    def _chorus_grad_ready(self, p):
        """The post-accumulate-grad hook: submits p's gradient on its last backward pass."""
        key = id(p)
        if self._chorus_ops.get(key) is not None:
            raise RuntimeError("%s.DistributedOptimizer: the gradient of '%s' was computed "
                               "more than backward_passes_per_step (%d) times before step() "
                               "or synchronize()" % (_MODULE, self._chorus_names[key],
                                                     self._chorus_passes_per_step))
        self._chorus_passes_left[key] -= 1
        if self._chorus_passes_left[key] == 0:
            self._chorus_ops[key] = self._chorus_submit(p)
        else:
            self._chorus_ops[key] = None

    def synchronize(self):
        """Submits the gradients not yet submitted (those no backward pass reached are
        reduced as zeros, so every rank submits every parameter) and waits for all.
        Raises the first failure, after every submission is done."""
        for p in self._chorus_params:
            if self._chorus_ops.get(id(p)) is None:
                self._chorus_ops[id(p)] = self._chorus_submit(p)
        errors = []
        for p in self._chorus_params:
            try:
                self._chorus_ops[id(p)].result()
            except (ChorusError, ValueError) as e:
                errors.append(e)
        self._chorus_ops.clear()
        for p in self._chorus_params:
            self._chorus_passes_left[id(p)] = self._chorus_passes_per_step
        self._chorus_synchronized = True
        if errors:
            raise errors[0]

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside it does not synchronize: for a synchronize() called before it (to
        clip the reduced gradients, say)."""
        self._chorus_should_sync = False
        try:
            yield
        finally:
            self._chorus_should_sync = True

    def step(self, closure=None):
        """Waits for the gradients' allreduces (unless synchronize() already did, or inside
        skip_synchronize()), then runs the wrapped optimizer's step."""
        if self._chorus_should_sync and not self._chorus_synchronized:
            self.synchronize()
        self._chorus_synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        """The wrapped optimizer's zero_grad; refused while gradients are in flight."""
        if any(v is not None for v in self._chorus_ops.values()):
            raise RuntimeError("%s.DistributedOptimizer: zero_grad() called while gradients "
                               "are being reduced (after backward(), before step() or "
                               "synchronize())" % _MODULE)
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """optimizer, made to reduce its gradients over the ranks before each step.

    Returns an instance of a subclass of optimizer's class (so LR schedulers and
    isinstance checks accept it) sharing optimizer's parameter groups and state. Each
    parameter that requires grad gets a post-accumulate-grad hook: on the
    backward_passes_per_step-th backward pass since the last step its gradient is
    submitted at once to the engine under the parameter's name ("allreduce." + the name
    from named_parameters; "allreduce.noname.<i>" by position without them), reduced in
    place with op (Average or Sum; others are allowed). step() waits for every submission
    and then runs optimizer's step; synchronize() and skip_synchronize() split the two.

    gradient_predivide_factor f (op Average only): gradients are divided by f before the
    sum and by size() / f after. compression: Compression.fp16 / .bf16 reduce float32
    gradients with the engine's wire compression (sums in float32). Gradients accumulate
    over the backward_passes_per_step passes (sums, as in Horovod). num_groups and groups
    are accepted and not used (the engine fuses whatever is ready).

    A step() whose closure runs backward again is not supported (as in Horovod)."""
    _check_process_set(process_set, "DistributedOptimizer")
    _require()
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("%s.DistributedOptimizer: a torch.optim.Optimizer expected, not %s"
                        % (_MODULE, type(optimizer).__name__))
    if isinstance(optimizer, _DistributedOptimizerMixin):
        raise ValueError("%s.DistributedOptimizer: the optimizer is already distributed"
                         % _MODULE)
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError("%s.DistributedOptimizer: backward_passes_per_step must be a positive "
                         "integer, not %r" % (_MODULE, backward_passes_per_step))
    op = _resolve_op(None, op, "DistributedOptimizer")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("%s.DistributedOptimizer: gradient_predivide_factor needs op=Average"
                         % _MODULE)
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedOptimizerMixin, base),
               {"__doc__": "%s, reducing its gradients with chorus" % base.__name__})
    dist_opt = cls.__new__(cls)
    state = dict(optimizer.__dict__)
    # Methods an LR scheduler patched on the instance are bound to optimizer: leave them.
    for attr in ("step", "zero_grad", "_opt_called"):
        state.pop(attr, None)
    dist_opt.__dict__.update(state)
    dist_opt._chorus_setup(named_parameters, compression, backward_passes_per_step, op,
                           gradient_predivide_factor, sparse_as_dense)
    return dist_opt


def LearningRateWarmup(optimizer, warmup_steps, initial_scale=None, mode="linear",
                       last_epoch=-1):
    """A torch.optim.lr_scheduler.LambdaLR that warms each parameter group's learning rate
    up to the rate it is configured with (the scaled rate, e.g. lr * size()).

    The multiplier starts at initial_scale (default 1 / size(): the single-process rate)
    at scheduler step 0 and reaches 1 at step warmup_steps, staying there after:
      mode="linear":      initial_scale + (1 - initial_scale) * s / warmup_steps
      mode="exponential": initial_scale ** (1 - s / warmup_steps)  (the same ratio every
                          step: smooth on a log scale, slow at first)
    Call scheduler.step() once per optimizer step (or per epoch, counting warmup_steps in
    epochs). To chain with a schedule after the warm-up, use
    torch.optim.lr_scheduler.SequentialLR."""
    if initial_scale is None:
        initial_scale = 1.0 / size()
    if not 0.0 < initial_scale <= 1.0:
        raise ValueError("%s.LearningRateWarmup: initial_scale must be in (0, 1], not %r"
                         % (_MODULE, initial_scale))
    if warmup_steps < 0:
        raise ValueError("%s.LearningRateWarmup: warmup_steps must be >= 0" % _MODULE)
    if mode not in ("linear", "exponential"):
        raise ValueError("%s.LearningRateWarmup: mode must be 'linear' or 'exponential', not "
                         "%r" % (_MODULE, mode))

    def factor(step):
        if warmup_steps == 0 or step >= warmup_steps:
            return 1.0
        progress = step / warmup_steps
        if mode == "linear":
            return initial_scale + (1.0 - initial_scale) * progress
        return initial_scale ** (1.0 - progress)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor, last_epoch=last_epoch)
