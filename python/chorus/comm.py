"""Communicators, requests and the training engine of libchorus, on raw buffers.

Buffers are addresses (ints) of memory the caller keeps alive until the
request completes; a Request keeps the Python objects given as `keep`
referenced until then. The C calls release the GIL while they run.
"""

import ctypes
import queue
import threading

from . import _lib
from ._lib import ChorusError, check

# chorus_dtype_t and chorus_op_t
INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64 = range(10)
SUM, PROD, MIN, MAX, AVG = range(5)

# chorus_opts_t flags
COMPRESS_FP16 = 0x4
COMPRESS_BF16 = 0x8


class Request:
    """One pending operation. wait() raises ChorusError when it failed."""

    def __init__(self, handle, what, keep=()):
        self._handle = ctypes.c_void_p(handle)
        self._what = what
        self._keep = keep
        self._status = None
        self.algorithm = None

    def _finish(self, status):
        lib = _lib.library()
        name = lib.chorus_request_algorithm(self._handle)
        self.algorithm = name.decode() if name else None
        lib.chorus_request_free(self._handle)
        self._handle = None
        self._keep = ()
        self._status = status

    def wait(self):
        if self._handle is not None:
            self._finish(_lib.library().chorus_request_wait(self._handle))
        check(self._status, self._what)

    def test(self):
        """True once complete (raises if it failed), False while pending."""
        if self._handle is not None:
            done = ctypes.c_int(0)
            status = _lib.library().chorus_request_test(self._handle, ctypes.byref(done))
            if not done.value:
                return False
            self._finish(status)
        check(self._status, self._what)
        return True

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            # The buffers must outlive the operation: wait for it rather than leak it.
            self._finish(_lib.library().chorus_request_wait(self._handle))


def _post(what, fn, *args, keep=()):
    req = ctypes.c_void_p()
    check(fn(*args, ctypes.byref(req)), what)
    return Request(req.value, what, keep)


class Comm:
    """A chorus communicator (chorus_comm_t)."""

    def __init__(self, handle):
        self._handle = ctypes.c_void_p(handle)
        lib = _lib.library()
        self.rank = lib.chorus_comm_rank(self._handle)
        self.size = lib.chorus_comm_size(self._handle)

    @classmethod
    def from_env(cls):
        """Collective over the job: CHORUS_*, torchrun's or the MPI launcher's variables."""
        h = ctypes.c_void_p()
        check(_lib.library().chorus_comm_create_from_env(ctypes.byref(h)),
              "chorus_comm_create_from_env")
        return cls(h.value)

    @staticmethod
    def unique_id():
        """bytes naming a new rendezvous hosted by this process; keep them private to the job."""
        uid = _lib.UniqueId()
        check(_lib.library().chorus_unique_id_create(ctypes.byref(uid)),
              "chorus_unique_id_create")
        return ctypes.string_at(ctypes.addressof(uid), _lib.UNIQUE_ID_BYTES)

    @classmethod
    def from_id(cls, rank, size, uid, timeout_s=0.0):
        """Collective over the size ranks that got the same unique_id() bytes."""
        if len(uid) != _lib.UNIQUE_ID_BYTES:
            raise ValueError("chorus: a unique id has %d bytes, not %d"
                             % (_lib.UNIQUE_ID_BYTES, len(uid)))
        u = _lib.UniqueId()
        ctypes.memmove(ctypes.addressof(u), uid, len(uid))
        h = ctypes.c_void_p()
        check(_lib.library().chorus_comm_create_from_id(rank, size, ctypes.byref(u),
                                                        float(timeout_s), ctypes.byref(h)),
              "chorus_comm_create_from_id")
        return cls(h.value)

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError("chorus: the communicator is destroyed")
        return self._handle

    def local_rank(self):
        return _lib.library().chorus_comm_local_rank(self.handle)

    def local_size(self):
        return _lib.library().chorus_comm_local_size(self.handle)

    def node_count(self):
        return _lib.library().chorus_comm_node_count(self.handle)

    def node(self, rank):
        return _lib.library().chorus_comm_node(self.handle, rank)

    def split(self, color, key):
        """Collective over this communicator; None where color is None."""
        h = ctypes.c_void_p()
        check(_lib.library().chorus_comm_split(self.handle, -1 if color is None else color,
                                               key, ctypes.byref(h)), "chorus_comm_split")
        return Comm(h.value) if h.value else None

    def dup(self):
        h = ctypes.c_void_p()
        check(_lib.library().chorus_comm_dup(self.handle, ctypes.byref(h)), "chorus_comm_dup")
        return Comm(h.value)

    def error(self):
        """The first background fault of the communicator's context, or 0."""
        return _lib.library().chorus_comm_get_error(self.handle)

    def abort(self):
        if self._handle is not None:
            _lib.library().chorus_comm_abort(self._handle)

    def destroy(self):
        if self._handle is not None:
            h, self._handle = self._handle, None
            check(_lib.library().chorus_comm_destroy(h), "chorus_comm_destroy")

    # Non-blocking collectives on addresses; each returns a Request.
    def iallreduce(self, send, recv, count, dtype, op, flags=0, keep=()):
        return _post("allreduce", _lib.library().chorus_iallreduce, send, recv, count, dtype,
                     op, self.handle, _lib.make_opts(flags), keep=keep)

    def iallgather(self, send, recv, sendcount, dtype, keep=()):
        return _post("allgather", _lib.library().chorus_iallgather, send, recv, sendcount,
                     dtype, self.handle, _lib.make_opts(), keep=keep)

    def ibroadcast(self, send, recv, count, dtype, root, keep=()):
        return _post("broadcast", _lib.library().chorus_ibroadcast, send, recv, count, dtype,
                     root, self.handle, _lib.make_opts(), keep=keep)

    def ireduce_scatter(self, send, recv, recvcount, dtype, op, flags=0, keep=()):
        return _post("reduce_scatter", _lib.library().chorus_ireduce_scatter, send, recv,
                     recvcount, dtype, op, self.handle, _lib.make_opts(flags), keep=keep)

    def ireduce(self, send, recv, count, dtype, op, root, keep=()):
        return _post("reduce", _lib.library().chorus_ireduce, send, recv, count, dtype, op,
                     root, self.handle, _lib.make_opts(), keep=keep)

    def ialltoall(self, send, recv, count, dtype, keep=()):
        return _post("alltoall", _lib.library().chorus_ialltoall, send, recv, count, dtype,
                     self.handle, _lib.make_opts(), keep=keep)

    def ibarrier(self):
        return _post("barrier", _lib.library().chorus_ibarrier, self.handle, _lib.make_opts())

    # A dtype no call takes: chorus refuses it.
    _REFUSED_DTYPE = 255

    def refuse(self, kind, times=1):
        """This rank's part of times calls of kind ("allreduce", "allgather", "broadcast",
        "reduce_scatter", "reduce" or "alltoall") that the caller refuses for its own
        reasons: each is posted with an argument chorus refuses, so it keeps its place in
        the communicator's sequence and fails on every rank at once (the others log this
        rank's refusal), and the communicator goes on. Returns once the others have made
        their calls."""
        lib, d = _lib.library(), self._REFUSED_DTYPE
        post = {
            "allreduce": lambda r: lib.chorus_iallreduce(None, None, 0, d, SUM, self.handle,
                                                         None, r),
            "allgather": lambda r: lib.chorus_iallgather(None, None, 0, d, self.handle, None, r),
            "broadcast": lambda r: lib.chorus_ibroadcast(None, None, 0, d, 0, self.handle, None,
                                                         r),
            "reduce_scatter": lambda r: lib.chorus_ireduce_scatter(None, None, 0, d, SUM,
                                                                   self.handle, None, r),
            "reduce": lambda r: lib.chorus_ireduce(None, None, 0, d, SUM, 0, self.handle, None,
                                                   r),
            "alltoall": lambda r: lib.chorus_ialltoall(None, None, 0, d, self.handle, None, r),
        }[kind]
        for _ in range(times):
            req = ctypes.c_void_p()
            status = post(ctypes.byref(req))
            if status == 0:  # not refused after all: let it finish
                Request(req.value, kind).wait()


class Engine:
    """The training engine (chorus_engine_t) of a communicator: named tensors, in any order."""

    def __init__(self, comm, bucket_bytes=0, cycle_ms=0.0):
        opts = _lib.EngineOpts(ctypes.sizeof(_lib.EngineOpts), bucket_bytes, cycle_ms)
        h = ctypes.c_void_p()
        check(_lib.library().chorus_engine_create(comm.handle, ctypes.byref(opts),
                                                  ctypes.byref(h)), "chorus_engine_create")
        self._handle = ctypes.c_void_p(h.value)
        self.comm = comm

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError("chorus: the engine is destroyed")
        return self._handle

    def allreduce(self, name, send, recv, count, dtype, op, flags=0, keep=()):
        return _post("engine allreduce of '%s'" % name, _lib.library().chorus_engine_allreduce,
                     self.handle, name.encode(), send, recv, count, dtype, op,
                     _lib.make_opts(flags), keep=keep)

    def broadcast(self, name, send, recv, count, dtype, root, keep=()):
        return _post("engine broadcast of '%s'" % name, _lib.library().chorus_engine_broadcast,
                     self.handle, name.encode(), send, recv, count, dtype, root,
                     _lib.make_opts(), keep=keep)

    def allgather(self, name, send, recv, sendcount, dtype, keep=()):
        return _post("engine allgather of '%s'" % name, _lib.library().chorus_engine_allgather,
                     self.handle, name.encode(), send, recv, sendcount, dtype,
                     _lib.make_opts(), keep=keep)

    def destroy(self):
        if self._handle is not None:
            h, self._handle = self._handle, None
            check(_lib.library().chorus_engine_destroy(h), "chorus_engine_destroy")


class Completer:
    """A thread that waits for requests in the order they were given and then runs each
    one's callback with None or the ChorusError it failed with. Callbacks run on this
    thread and must not block on later requests."""

    _STOP = object()

    def __init__(self, name="chorus-completer"):
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def add(self, request, callback):
        self._queue.put((request, callback))

    def _run(self):
        while True:
            item = self._queue.get()
            if item is self._STOP:
                return
            request, callback = item
            try:
                request.wait()
                error = None
            except ChorusError as e:
                error = e
            try:
                callback(error)
            except BaseException as e:  # a callback's fault must not stop later completions
                import sys
                print("chorus: a completion callback raised %r" % (e,), file=sys.stderr)

    def close(self):
        """Completes what was added, then stops the thread."""
        if self._thread.is_alive():
            self._queue.put(self._STOP)
            self._thread.join()
