"""The job that each of chorus's Horovod-style APIs (chorus.torch, chorus.tensorflow,
chorus.mxnet) keeps: one communicator and one training engine on it, the shape of the job,
shutdown at exit, and names as the engine takes them.

An API's state is a Job (or a subclass holding its own tables); its init() is start(),
its shutdown() is stop(), and its size(), rank(), ... are the Job's methods.
"""

import atexit
import hashlib
import sys
import threading

from . import comm as C
from ._lib import ChorusError

NAME_MAX = 255      # the engine's longest name, in bytes


def fit_name(name, limit=NAME_MAX):
    """name in at most limit bytes, without NUL: a longer one keeps a prefix and a digest
    of the whole, alike on every rank."""
    raw = name.encode("utf-8")
    if len(raw) <= limit and b"\0" not in raw:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:32]
    head = raw.replace(b"\0", b"_")[:limit - len(digest) - 1]
    return head.decode("utf-8", errors="ignore") + "#" + digest


class Job:
    """A communicator, the training engine on it, and whether this process is ending by
    an uncaught exception (then shutdown at exit does not wait for the other ranks)."""

    def __init__(self, module):
        self.module = module        # the API's name, for messages
        self.lock = threading.RLock()
        self.comm = None
        self.engine = None
        self.owns_comm = False
        self.failed = False
        self.counters = {}          # call kind -> this rank's unnamed calls so far
        self.in_flight = {}         # engine base name -> its latest Request
        self.handles = {}           # handle -> pending operation (poll(), result())
        self.gathers = {}           # allgather base name -> its latest operation
        self.next_handle = 1
        self._exit_hooks = False

    def require(self):
        """This job, once started; ValueError naming init() before."""
        if self.engine is None:
            raise ValueError("%s: not initialized; call init() first" % self.module)
        return self

    def start(self, comm, shutdown, make_comm=C.Comm.from_env, then=None):
        """Starts the job, collectively, unless it is running; returns whether it did.

        comm: None for make_comm()'s communicator (the job's own, destroyed by stop()),
        or a chorus.comm.Comm that stays the caller's. then(): run once the engine exists;
        its failure undoes the start. shutdown: the API's shutdown(), run at exit."""
        with self.lock:
            if self.engine is not None:
                return False
            if comm is not None and not isinstance(comm, C.Comm):
                raise TypeError("%s.init: comm must be None or a chorus.comm.Comm, not %s "
                                "(process sets are not offered)"
                                % (self.module, type(comm).__name__))
            self.owns_comm = comm is None
            self.comm = make_comm() if comm is None else comm
            try:
                self.engine = C.Engine(self.comm)
                if then is not None:
                    then()
            except BaseException:
                if self.engine is not None:
                    self.engine.destroy()
                    self.engine = None
                if self.owns_comm:
                    self.comm.destroy()
                self.comm = None
                raise
            self._install_exit_hooks(shutdown)
            return True

    def stop(self, before=None, after=None):
        """Ends the job, collectively: before() (while the engine lives), the engine's
        destruction (submissions still waiting for a rank fail, ABORTED), after() (also
        when that fails), then the job's own communicator."""
        with self.lock:
            engine, comm, owns = self.engine, self.comm, self.owns_comm
            self.engine = self.comm = None
        try:
            if engine is not None:
                if before is not None:
                    before()
                engine.destroy()
        finally:
            if after is not None:
                after()
            if owns and comm is not None:
                comm.destroy()

    def forget(self):
        """Drops the tables of this rank's submissions (after stop())."""
        with self.lock:
            self.counters.clear()
            self.in_flight.clear()
            self.handles.clear()
            self.gathers.clear()

    # ---- names and submissions ------------------------------------------------------

    def base_name(self, kind, name):
        """(engine base name, fresh) of a call of kind named name: "<kind>.<name>", or for
        an unnamed call (None) "<kind>.noname.<n>", n counting this rank's unnamed calls
        of that kind (so they must come in the same order on every rank), used once
        (fresh)."""
        if name is None:
            with self.lock:
                n = self.counters.get(kind, 0)
                self.counters[kind] = n + 1
            return "%s.noname.%d" % (kind, n), True
        return "%s.%s" % (kind, name), False

    def submit(self, base, fresh, post):
        """post(engine name) -> Request for base, once this rank's earlier submission of
        base is done (a name stands for one buffer at a time); returns the Request.

        fresh: base is an unnamed call's name, used once: no table, no waiting. The
        engine takes a name again with another size, dtype or op when every rank changes
        it alike, and fails the round on every rank when they differ."""
        if fresh:
            return post(fit_name(base))
        with self.lock:
            earlier = self.in_flight.get(base)
        if earlier is not None:
            try:
                earlier.wait()
            except ChorusError:
                pass  # the operation it belongs to reports it
        req = post(fit_name(base))
        with self.lock:
            self.in_flight[base] = req
        return req

    # ---- handles of asynchronous calls: the API's own poll() and synchronize() ----------

    def handle_of(self, op):
        """A new handle of op, an operation with poll() and result()."""
        with self.lock:
            h = self.next_handle
            self.next_handle += 1
            self.handles[h] = op
        return h

    def op_of(self, handle, call):
        with self.lock:
            op = self.handles.get(handle)
        if op is None:
            raise ValueError("%s.%s: %r is not a pending handle" % (self.module, call, handle))
        return op

    def poll(self, handle):
        """True when the operation of handle is done (synchronize() will not block)."""
        return self.op_of(handle, "poll").poll()

    def synchronize(self, handle):
        """Waits for the operation of handle and returns its result; raises
        chorus.ChorusError, or ValueError, if it failed. The handle is spent."""
        op = self.op_of(handle, "synchronize")
        try:
            return op.result()
        finally:
            with self.lock:
                self.handles.pop(handle, None)

    def _install_exit_hooks(self, shutdown):
        """shutdown() at exit, except after an uncaught exception."""
        if self._exit_hooks:
            return
        self._exit_hooks = True
        previous = sys.excepthook

        def note_failure(kind, value, tb):
            self.failed = True
            previous(kind, value, tb)

        def at_exit():
            if self.failed or self.engine is None:
                return
            try:
                shutdown()
            except ChorusError as e:
                print("%s: shutdown at exit failed: %s" % (self.module, e), file=sys.stderr)

        sys.excepthook = note_failure
        atexit.register(at_exit)

    # ---- the shape of the job: the API's own size(), rank(), ... ------------------------

    def is_initialized(self):
        """True between init() and shutdown()."""
        return self.engine is not None

    def size(self):
        """The number of ranks."""
        return self.require().comm.size

    def rank(self):
        """This process's rank, 0 to size() - 1."""
        return self.require().comm.rank

    def local_size(self):
        """The number of ranks on this node."""
        return self.require().comm.local_size()

    def local_rank(self):
        """This process's rank among those on its node."""
        return self.require().comm.local_rank()

    def cross_size(self):
        """The number of nodes."""
        return self.require().comm.node_count()

    def cross_rank(self):
        """The index of this rank's node (Horovod's rank among the ranks with this local
        rank, which is the same where nodes hold equal numbers of ranks)."""
        c = self.require().comm
        return c.node(c.rank)
