"""The job, and the collectives of chorus.mxnet on NDArrays, through chorus's training engine.

Every collective is an engine submission under a name ("<kind>.<name>"); the engine pairs
the submissions of a name across ranks, so ranks may submit different names in different
orders. The synchronous calls (allreduce, broadcast, allgather and their in-place forms)
submit and wait; the *_async calls submit and return a handle for synchronize(), so that
several names can be in flight at once and ranks may wait for them in any order.
"""

import ctypes
import hashlib
import threading

import mxnet as mx
import numpy as np

from .. import _job
from .. import comm as C
from .._lib import ChorusError
from . import _arrays
from ._arrays import MODULE, Buffer, empty_like, nbytes, reduce_dtype

# Reduction ops: chorus's op codes, by Horovod's names.
Average = C.AVG
Sum = C.SUM
Min = C.MIN
Max = C.MAX
Product = C.PROD
_OPS = {Average: "Average", Sum: "Sum", Min: "Min", Max: "Max", Product: "Product"}

_INVALID_ARG = -1               # chorus_status_t CHORUS_ERR_INVALID_ARG


# ---- the job ----------------------------------------------------------------------------

# What init() sets up, and this rank's tables of submissions.
_state = _job.Job(MODULE)
require = _state.require


def init(comm=None):
    """Sets up chorus for this process; collective over the job. Idempotent.

    comm: None to create the communicator from the environment (chorus-run's CHORUS_*
    variables, torchrun's or an MPI launcher's), or a chorus.comm.Comm to use (it stays the
    caller's: shutdown() leaves it)."""
    _state.start(comm, shutdown)


def shutdown():
    """Destroys the engine and the communicator init() created; collective over the job.
    Submissions still waiting for another rank fail (ABORTED). Called at exit too, unless
    the process ends by an uncaught exception: then it leaves without waiting for the
    other ranks (they see it gone and fail their pending calls)."""
    _state.stop(after=_state.forget)


is_initialized = _state.is_initialized
size = _state.size
rank = _state.rank
local_size = _state.local_size
local_rank = _state.local_rank
base_name = _state.base_name
submit = _state.submit


# ---- pending operations -----------------------------------------------------------------

def _explain(err, what):
    """err, with a note on what a mismatch between ranks means (once)."""
    if isinstance(err, ChorusError) and err.status == _INVALID_ARG \
            and hasattr(err, "add_note") and not getattr(err, "_noted", False):
        err.add_note("%s: %s: every rank must submit a name with the same size, dtype and op "
                     "(the log names the ranks and what each submitted)" % (MODULE, what))
        err._noted = True
    return err


class _Op:
    """Submitted requests, and finish() to run once all are done: result() waits for every
    request, raises the first failure, else returns finish()."""

    def __init__(self, what, requests, finish):
        self.what = what
        self._requests = list(requests)
        self._finish = finish
        self._done = False
        self._error = None
        self._result = None

    def poll(self):
        if self._done:
            return True
        try:
            return all(req.test() for req in self._requests)
        except ChorusError:
            return True

    def result(self):
        if not self._done:
            for req in self._requests:
                try:
                    req.wait()
                except ChorusError as e:
                    if self._error is None:
                        self._error = e
            self._requests = []
            if self._error is None:
                try:
                    self._result = self._finish()
                except Exception as e:
                    self._error = e
            self._done = True
        if self._error is not None:
            raise _explain(self._error, self.what)
        return self._result


_handle_of = _state.handle_of
poll = _state.poll
synchronize = _state.synchronize


def wait_all(ops):
    """Waits for every operation; raises the first failure once all are done."""
    errors = []
    for op in ops:
        try:
            op.result()
        except (ChorusError, ValueError) as e:
            errors.append(e)
    if errors:
        raise errors[0]


# ---- allreduce --------------------------------------------------------------------------

def _resolve_op(average, op, call):
    """The chorus op of a call given average (True: Average, False: Sum) and/or op."""
    if op is None:
        return Average if (average is None or average) else Sum
    if average is not None and average != (op == Average):
        raise ValueError("%s.%s: average=%r contradicts op=%s"
                         % (MODULE, call, average, _OPS.get(op, op)))
    if op not in _OPS:
        raise ValueError("%s.%s: op %r is not one of Average, Sum, Min, Max, Product"
                         % (MODULE, call, op))
    return op


def _allreduce_op(tensor, average, name, op, prescale, postscale, inplace, call):
    st = require()
    op = _resolve_op(average, op, call)
    _arrays.check_array(tensor, call)
    dtype = reduce_dtype(tensor, call)
    floating = np.issubdtype(np.dtype(tensor.dtype), np.floating)
    if (prescale != 1.0 or postscale != 1.0) and not floating:
        raise ValueError("%s.%s: prescale_factor and postscale_factor need a floating point "
                         "array, not %s" % (MODULE, call, np.dtype(tensor.dtype).name))
    src = tensor * prescale if prescale != 1.0 else tensor
    if inplace and src is tensor:
        send = recv = Buffer(tensor, call, write=True)
    else:
        send = Buffer(src, call, write=False)
        out = tensor if inplace else empty_like(tensor)
        recv = Buffer(out, call, write=True, copy_in=False)
    base, fresh = base_name("allreduce", name)

    def post(engine_name):
        return st.engine.allreduce(engine_name, send.ptr, recv.ptr, int(tensor.size), dtype,
                                   op, keep=(send, recv))
    req = submit(base, fresh, post)

    def finish():
        recv.back()
        out = recv.array
        if postscale != 1.0:
            out *= postscale
        return out
    return _Op(call, [req], finish)


def allreduce_async(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
                    postscale_factor=1.0, op=None):
    """Starts an allreduce of tensor into a new array; returns a handle for synchronize().
    tensor must not be written until then."""
    return _handle_of(_allreduce_op(tensor, average, name, op, prescale_factor,
                                    postscale_factor, False, "allreduce_async"))


def allreduce_async_(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
                     postscale_factor=1.0, op=None):
    """allreduce_async in place: synchronize() leaves the result in tensor and returns it.
    tensor must not be read or written until then."""
    return _handle_of(_allreduce_op(tensor, average, name, op, prescale_factor,
                                    postscale_factor, True, "allreduce_async_"))


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
              postscale_factor=1.0, op=None):
    """The reduction of tensor over the ranks, as a new array of its dtype and context.

    average (default True): the mean over the ranks, else the sum; op (Average, Sum, Min,
    Max, Product) says it instead. The result is op over the ranks of
    tensor * prescale_factor, times postscale_factor (scale factors need a floating point
    array). The average of integers truncates toward zero. name pairs the call across
    ranks (unnamed calls pair by their order). priority is accepted and not used."""
    return _allreduce_op(tensor, average, name, op, prescale_factor, postscale_factor, False,
                         "allreduce").result()


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
               postscale_factor=1.0, op=None):
    """allreduce in place: tensor gets the result, and is returned."""
    return _allreduce_op(tensor, average, name, op, prescale_factor, postscale_factor, True,
                         "allreduce_").result()


# ---- broadcast --------------------------------------------------------------------------

def _check_root(root_rank, call):
    n = size()
    if not isinstance(root_rank, (int, np.integer)) or not 0 <= root_rank < n:
        raise ValueError("%s.%s: root_rank %r is not a rank of %d" % (MODULE, call,
                                                                     root_rank, n))
    return int(root_rank)


def _broadcast_op(tensor, root_rank, name, inplace, call):
    st = require()
    root = _check_root(root_rank, call)
    _arrays.check_array(tensor, call)
    if inplace:
        buf = Buffer(tensor, call, write=True)
    else:
        buf = Buffer(tensor.copy(), call, write=True)
    count = nbytes(tensor)   # any dtype: a broadcast moves bytes
    base, fresh = base_name("broadcast", name)

    def post(engine_name):
        return st.engine.broadcast(engine_name, buf.ptr, buf.ptr, count, C.UINT8, root,
                                   keep=(buf,))
    req = submit(base, fresh, post)

    def finish():
        buf.back()
        return buf.array
    return _Op(call, [req], finish)


def broadcast_async(tensor, root_rank, name=None, priority=0):
    """Starts a broadcast of root_rank's tensor into a new array on every rank; a handle."""
    return _handle_of(_broadcast_op(tensor, root_rank, name, False, "broadcast_async"))


def broadcast_async_(tensor, root_rank, name=None, priority=0):
    """broadcast_async in place: synchronize() leaves root_rank's values in tensor."""
    return _handle_of(_broadcast_op(tensor, root_rank, name, True, "broadcast_async_"))


def broadcast(tensor, root_rank, name=None, priority=0):
    """root_rank's tensor, as a new array on every rank (every rank passes an array of the
    same size and dtype)."""
    return _broadcast_op(tensor, root_rank, name, False, "broadcast").result()


def broadcast_(tensor, root_rank, name=None, priority=0):
    """Writes root_rank's tensor into tensor on every rank; returns tensor."""
    return _broadcast_op(tensor, root_rank, name, True, "broadcast_").result()


# ---- allgather --------------------------------------------------------------------------

def _dtype_tag(dtype):
    return int.from_bytes(hashlib.sha256(np.dtype(dtype).str.encode()).digest()[:4], "little")


class _GatherOp:
    """An allgather in two engine stages: every rank's dtype and shape ("<base>.meta"), then
    the rows ("<base>.data"), each rank's padded to the most rows of any rank and the
    padding dropped after (no padding when all have as many rows).

    A thread of its own waits for the first stage and posts the second as soon as it is
    done, whether or not this rank is waiting for it yet: another rank may be waiting for
    it, and the engine completes the first stages of several allgathers in any order."""

    def __init__(self, tensor, name, call):
        st = require()
        _arrays.check_array(tensor, call)
        if tensor.ndim == 0:
            raise ValueError("%s.%s: the array needs at least one dimension (dim 0 is "
                             "concatenated)" % (MODULE, call))
        self.what = call
        self._tensor = tensor
        self._nranks = st.comm.size
        self._rank = st.comm.rank
        self._done = threading.Event()
        self._error = None
        self._data_req = None
        self._finish = None
        self._result = None
        base, fresh = base_name("allgather", name)
        self._base, self._fresh = base, fresh
        if not fresh:
            # An allgather's own thread alone touches its requests: one of a name still in
            # flight is waited for here rather than there.
            with _state.lock:
                earlier = _state.gathers.get(base)
            if earlier is not None:
                earlier.wait_done()
            with _state.lock:
                _state.gathers[base] = self
        try:
            # The source is read once the first stage is done: keep its values from now.
            self._send = Buffer(tensor, call, write=False)
            self._meta = np.array([_dtype_tag(tensor.dtype), tensor.ndim] + list(tensor.shape),
                                  dtype=np.int64)
            self._metas = np.empty(self._nranks * self._meta.size, dtype=np.int64)
            meta, metas = self._meta, self._metas

            def post(engine_name):
                return st.engine.allgather(engine_name, meta.ctypes.data, metas.ctypes.data,
                                           meta.size, C.INT64, keep=(meta, metas))
            req = submit(base + ".meta", fresh, post)
        except BaseException as e:
            # Done, failed: a later allgather of the name must not wait for it.
            self._error = e
            self._release()
            self._done.set()
            raise
        threading.Thread(target=self._after_meta, args=(req,), daemon=True,
                         name="chorus-mxnet-allgather").start()

    def _after_meta(self, req):
        """On its own thread: waits for the first stage, then posts the second (or fails
        the operation)."""
        try:
            req.wait()
            self._post_data()
        except BaseException as e:
            self._error = e
        finally:
            self._done.set()

    def _release(self):
        """Drops what a finished allgather holds (its source, buffers, and its name's entry)."""
        self._finish = self._send = self._tensor = None
        with _state.lock:
            if _state.gathers.get(self._base) is self:
                del _state.gathers[self._base]

    def _post_data(self):
        # Only numpy here: this runs on the allgather's own thread, and MXNet's Python calls are
        # left to the thread that called allgather.
        st, t, n = require(), self._tensor, self._nranks
        rows = self._metas.reshape(n, -1)
        mine = self._meta.tolist()
        for r in range(n):
            theirs = rows[r].tolist()
            if theirs[0] != mine[0] or theirs[3:] != mine[3:]:
                raise ValueError("%s.%s: ranks gave arrays of different dtypes or trailing "
                                 "dimensions (this rank %d: %s %s; rank %d: shape %s)"
                                 % (MODULE, self.what, self._rank, np.dtype(t.dtype).name,
                                    t.shape, r, tuple(theirs[2:])))
        counts = rows[:, 2].tolist()
        trailing = tuple(t.shape[1:])
        dtype = np.dtype(t.dtype)
        row_bytes = int(np.prod(trailing, dtype=np.int64)) * dtype.itemsize
        most, total = max(counts), sum(counts)
        if most * row_bytes == 0:
            self._finish = lambda: empty_like(t, (total,) + trailing)
            return
        if all(c == most for c in counts):
            send = self._send
            send_ptr = send.ptr
        else:
            # Pad this rank's rows with zeros to the most rows of any rank.
            send = np.zeros(most * row_bytes, dtype=np.uint8)
            mine_bytes = t.shape[0] * row_bytes
            if mine_bytes:
                ctypes.memmove(send.ctypes.data, self._send.ptr, mine_bytes)
            send_ptr = send.ctypes.data
        gathered = np.empty((n * most,) + trailing, dtype=dtype)

        def post(engine_name):
            return st.engine.allgather(engine_name, send_ptr, gathered.ctypes.data,
                                       most * row_bytes, C.UINT8, keep=(send, gathered))
        self._data_req = submit(self._base + ".data", self._fresh, post)

        def finish():
            if most * n != total:
                parts = np.concatenate([gathered[r * most:r * most + counts[r]]
                                        for r in range(n)])
            else:
                parts = gathered
            out = empty_like(t, (total,) + trailing)
            out[:] = parts
            return out
        self._finish = finish

    def wait_done(self):
        """Blocks until both stages are done; raises nothing."""
        self._done.wait()
        if self._data_req is not None:
            try:
                self._data_req.wait()
            except ChorusError:
                pass  # result() reports it

    def poll(self):
        if not self._done.is_set():
            return False
        if self._error is not None or self._data_req is None:
            return True
        try:
            return self._data_req.test()
        except ChorusError:
            return True

    def result(self):
        self._done.wait()
        if self._error is None and self._result is None:
            try:
                if self._data_req is not None:
                    self._data_req.wait()
                self._result = self._finish()
            except Exception as e:
                self._error = e
            finally:
                self._release()
        if self._error is not None:
            raise _explain(self._error, self.what)
        return self._result


def allgather_async(tensor, name=None, priority=0):
    """Starts an allgather (see allgather); returns a handle."""
    return _handle_of(_GatherOp(tensor, name, "allgather_async"))


def allgather(tensor, name=None, priority=0):
    """Every rank's tensor concatenated along dim 0, in rank order, as a new array. The
    ranks' arrays must agree in dtype and in every dimension but the first, which may
    differ; ranks whose arrays disagree all raise ValueError (or chorus.ChorusError)."""
    return _GatherOp(tensor, name, "allgather").result()


# ---- parameters -------------------------------------------------------------------------

def _when_initialized(param, root_rank, label):
    """Broadcasts a Parameter whose initialization gluon has deferred (its shape is known
    at the first forward pass) right after that initialization, on every rank."""
    original = param._init_impl

    def init_then_broadcast(data, ctx_list):
        original(data, ctx_list)
        del param._init_impl          # back to the class's method
        _broadcast_all([(label, param.list_data())], root_rank)
    param._init_impl = init_then_broadcast


def _broadcast_all(items, root_rank):
    """Broadcasts (label, [arrays]) in place: the first array of each from root_rank, then
    copied to the others (the same parameter on other contexts). Raises the first failure
    once every submission is done."""
    ops = []
    for label, arrays in items:
        ops.append((_broadcast_op(arrays[0], root_rank, label, True, "broadcast_parameters"),
                    arrays))
    errors = []
    for op, arrays in ops:
        try:
            op.result()
            for other in arrays[1:]:
                arrays[0].copyto(other)
        except (ChorusError, ValueError) as e:
            errors.append(e)
    if errors:
        raise errors[0]


def broadcast_parameters(params, root_rank=0, prefix="parameters."):
    """Sets every rank's parameters to root_rank's, in place.

    params: a gluon ParameterDict (net.collect_params()) or a dict of name -> Parameter or
    NDArray (e.g. what mx.nd.load or net.collect_params() gives). Every rank gives the same
    names; each is broadcast as "<prefix><name>". A Parameter whose initialization gluon
    has deferred is broadcast once it is initialized (at the first forward pass)."""
    require()
    _check_root(root_rank, "broadcast_parameters")
    if not hasattr(params, "items"):
        raise TypeError("%s.broadcast_parameters: a ParameterDict or a dict expected, not %s"
                        % (MODULE, type(params).__name__))
    items = []
    for key, p in sorted(params.items()):
        label = prefix + str(key)
        if isinstance(p, mx.gluon.Parameter):
            if p._deferred_init:
                _when_initialized(p, root_rank, label)
                continue
            items.append((label, p.list_data()))
        elif isinstance(p, mx.nd.NDArray):
            items.append((label, [p]))
        else:
            raise TypeError("%s.broadcast_parameters: '%s' is a %s, not a Parameter or "
                            "NDArray" % (MODULE, key, type(p).__name__))
    _broadcast_all(items, root_rank)

