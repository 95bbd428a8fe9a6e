"""The torch.distributed backend "chorus": a ProcessGroup whose collectives are chorus's.

Every collective posts a non-blocking chorus call and returns a Work whose future a
completion thread fulfils when chorus reports the call done, so DDP's buckets overlap
with the backward pass. The ranks meet through torch's own store: rank 0 of each group
creates a chorus unique id and puts it there; no other address or port is configured.
"""

import functools
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend, Work

from .. import comm as C
from ..comm import Comm, Completer, Engine
from ._tensors import BACKEND, Staged, Unsupported, host, reduce_dtype, reduce_op

_ID_KEY = "chorus/unique_id"


def comm_through_store(store, key, rank, size, timeout_s):
    """A communicator of size ranks that meet through a torch store: rank 0 creates a
    chorus unique id and sets key to it, the others wait for it there."""
    if rank == 0:
        uid = Comm.unique_id()
        store.set(key, uid)
    else:
        uid = store.get(key)
    return Comm.from_id(rank, size, uid, timeout_s)


def _unsupported(call):
    raise Unsupported("%s is not supported by the '%s' backend; use a gloo group for it "
                      "(dist.new_group(backend='gloo'))" % (call, BACKEND))


class ChorusWork(Work):
    """The Work of one collective: wait() raises the call's error (a dead peer, a timeout,
    a call refused elsewhere) and get_future() gives the future DDP's hooks chain on.
    (torch's work-from-future wrapper returns from wait() even when its future failed.)"""

    def __init__(self, fut):
        super().__init__()
        self._fut = fut

    def wait(self, timeout=None):
        self._fut.wait()  # raises what the future failed with
        return True

    def get_future(self):
        return self._fut

    def is_completed(self):
        return self._fut.done()

    def synchronize(self):
        self.wait()


def refused(kind, calls=lambda *args: 1):
    """A collective method whose own refusal (Unsupported or ValueError, raised before it
    posts anything) is also this rank's refusal of the calls(*args) chorus calls of kind
    the other ranks make: they fail at once (chorus logs this rank's refusal) and the
    communicator stays in step. Then the error is raised here."""
    def wrap(method):
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except (Unsupported, ValueError):
                self.comm.refuse(kind, calls(*args))
                raise
        return run
    return wrap


class ChorusBackend(Backend):
    """One chorus communicator per torch process group (its CPU backend)."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
        self.comm = comm_through_store(store, _ID_KEY, rank, size, seconds)
        # The engine (for chorus.torch.hooks) runs its own calls: on a communicator of its own.
        self._engine_comm = self.comm.dup()
        self._engine = None
        self.completer = Completer("chorus-pg-%d" % rank)

    # ---- identity ------------------------------------------------------
    def size(self):
        return self._size

    def rank(self):
        return self._rank

    def getBackendName(self):
        return BACKEND

    def __repr__(self):
        return "ChorusBackend(rank=%d, size=%d)" % (self._rank, self._size)

    # ---- completion ----------------------------------------------------
    def _work(self, requests, result, finish=None):
        """A Work that completes when every request has; then finish() runs and the future
        gets result (DDP's hooks read the first tensor of it)."""
        fut = torch.futures.Future()
        left = [len(requests)]
        errors = []

        def one_done(error):
            if error is not None:
                errors.append(error)
            left[0] -= 1
            if left[0]:
                return
            if errors:
                fut.set_exception(errors[0])
                return
            try:
                if finish is not None:
                    finish()
            except Exception as e:
                fut.set_exception(e)
                return
            fut.set_result(result)

        if not requests:
            left[0] = 1
            one_done(None)
        for req in requests:
            self.completer.add(req, one_done)
        return ChorusWork(fut)

    def _reduce_args(self, t, opts_op, call):
        op = reduce_op(opts_op, call)
        dtype, count = reduce_dtype(t, op, call)
        return dtype, count, op

    # ---- collectives -----------------------------------------------------
    # Every method checks all its arguments before it posts anything: a call this rank
    # refuses (Unsupported, ValueError) is then refused through chorus too (refused()),
    # so the other ranks' calls fail at once instead of waiting for it.

    def _reduction_plan(self, tensors, opts, call):
        """[(Staged, count, dtype, op)] of in-place reductions of tensors, checked."""
        op_in = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        plan = []
        for t in tensors:
            dtype, count, op = self._reduce_args(t, op_in, call)
            plan.append((t, count, dtype, op))
        return [(Staged(t, call), count, dtype, op) for t, count, dtype, op in plan]

    def _reductions(self, plan, tensors, post, writes=True):
        """Posts post(staged, count, dtype, op) for each of plan; the tensors are the
        result. writes=False where this rank's are left as they were (a reduce's ranks
        other than the root)."""
        reqs = [post(s, count, dtype, op) for s, count, dtype, op in plan]
        return self._work(reqs, list(tensors),
                          lambda: [s.back() for s, _, _, _ in plan] if writes else None)

    @refused("allreduce", lambda tensors, *a: len(tensors))
    def allreduce(self, tensors, opts=None):
        plan = self._reduction_plan(tensors, opts, "all_reduce")
        return self._reductions(plan, tensors, lambda s, count, dtype, op: self.comm.iallreduce(
            s.ptr, s.ptr, count, dtype, op, keep=(s,)))

    allreduce_coalesced = allreduce

    @refused("broadcast", lambda tensors, *a: len(tensors))
    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        staged = [Staged(t, "broadcast") for t in tensors]
        reqs = [self.comm.ibroadcast(s.ptr, s.ptr, s.nbytes, C.UINT8, root, keep=(s,))
                for s in staged]
        return self._work(reqs, list(tensors), lambda: [s.back() for s in staged])

    @refused("reduce", lambda tensors, *a: len(tensors))
    def reduce(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        plan = self._reduction_plan(tensors, opts, "reduce")
        return self._reductions(plan, tensors, lambda s, count, dtype, op: self.comm.ireduce(
            s.ptr, s.ptr, count, dtype, op, root, keep=(s,)), writes=self._rank == root)

    def _gather_plan(self, out, inp, call):
        """(src, dst) Staged of an allgather of inp into the contiguous out, checked."""
        if out.numel() != inp.numel() * self._size or out.dtype != inp.dtype:
            raise ValueError("%s: the output has %d elements of %s; %d ranks x %d elements of "
                             "%s expected" % (call, out.numel(), out.dtype, self._size,
                                              inp.numel(), inp.dtype))
        return Staged(inp, call), Staged(out, call, copy_in=False)

    def _gathers(self, plan, result, finish):
        reqs = [self.comm.iallgather(src.ptr, dst.ptr, src.nbytes, C.UINT8, keep=(src, dst))
                for src, dst in plan]
        return self._work(reqs, result, finish)

    @refused("allgather", lambda outputs, *a: len(outputs))
    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        plan = [self._gather_plan(o, i, "all_gather_into_tensor")
                for o, i in zip(outputs, inputs)]
        return self._gathers(plan, list(outputs), lambda: [d.back() for _, d in plan])

    def all_gather_single(self, output, input, opts=None):
        return self.all_gather_single_coalesced([output], [input], opts)

    _allgather_base = all_gather_single

    @refused("allgather", lambda output_lists, *a: len(output_lists))
    def allgather(self, output_lists, inputs, opts=None):
        call = "all_gather"
        flats = []
        for outs, inp in zip(output_lists, inputs):
            if len(outs) != self._size:
                raise ValueError("%s: %d output tensors for %d ranks"
                                 % (call, len(outs), self._size))
            for o in outs:
                host(o, call)
                if o.numel() != inp.numel() or o.dtype != inp.dtype:
                    raise ValueError("%s: every output tensor must match the input's %d "
                                     "elements of %s" % (call, inp.numel(), inp.dtype))
            flats.append(torch.empty((self._size,) + tuple(inp.shape), dtype=inp.dtype))
        plan = [self._gather_plan(f, i, call) for f, i in zip(flats, inputs)]

        def finish():
            for outs, flat in zip(output_lists, flats):
                for o, part in zip(outs, flat):
                    o.copy_(part)
        return self._gathers(plan, output_lists, finish)

    allgather_coalesced = allgather

    def _scatter_plan(self, out, inp, op_in, call):
        """(src, dst, count, dtype, op) of a reduce-scatter of the contiguous inp (size *
        out's elements) into out, checked."""
        if inp.numel() != out.numel() * self._size or out.dtype != inp.dtype:
            raise ValueError("%s: the input has %d elements of %s; %d ranks x %d elements of "
                             "%s expected" % (call, inp.numel(), inp.dtype, self._size,
                                              out.numel(), out.dtype))
        op = reduce_op(op_in, call)
        dtype, count = reduce_dtype(out, op, call)
        return Staged(inp, call), Staged(out, call, copy_in=False), count, dtype, op

    def _scatters(self, plan, outputs):
        reqs = [self.comm.ireduce_scatter(src.ptr, dst.ptr, count, dtype, op, keep=(src, dst))
                for src, dst, count, dtype, op in plan]
        return self._work(reqs, list(outputs), lambda: [p[1].back() for p in plan])

    @refused("reduce_scatter", lambda outputs, *a: len(outputs))
    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        op_in = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        plan = [self._scatter_plan(o, i, op_in, "reduce_scatter_tensor")
                for o, i in zip(outputs, inputs)]
        return self._scatters(plan, outputs)

    def reduce_scatter_single(self, output, input, opts=None):
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    _reduce_scatter_base = reduce_scatter_single

    @refused("reduce_scatter", lambda outputs, *a: len(outputs))
    def reduce_scatter(self, outputs, input_lists, opts=None):
        call = "reduce_scatter"
        op_in = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        for ins in input_lists:
            if len(ins) != self._size:
                raise ValueError("%s: %d input tensors for %d ranks" % (call, len(ins),
                                                                        self._size))
            for i in ins:
                host(i, call)
        plan = [self._scatter_plan(out, torch.cat([i.reshape(-1) for i in ins]), op_in, call)
                for out, ins in zip(outputs, input_lists)]
        return self._scatters(plan, outputs)

    @refused("alltoall")
    def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
        call = "all_to_all_single"
        n = self._size
        for splits, t, what in ((output_splits, output, "output"),
                                (input_splits, input, "input")):
            if splits and len(set(splits)) > 1:
                raise Unsupported("%s: uneven %s splits %s are not supported by the '%s' "
                                  "backend (equal splits only)" % (call, what, list(splits),
                                                                   BACKEND))
            if t.numel() % n or (splits and splits[0] * n != t.shape[0]):
                raise ValueError("%s: the %s (%d elements) does not split equally over %d "
                                 "ranks" % (call, what, t.numel(), n))
        if output.numel() != input.numel() or output.dtype != input.dtype:
            raise ValueError("%s: input and output must have the same size and dtype" % call)
        src, dst = Staged(input, call), Staged(output, call, copy_in=False)
        req = self.comm.ialltoall(src.ptr, dst.ptr, src.nbytes // n, C.UINT8, keep=(src, dst))
        return self._work([req], [output], dst.back)

    alltoall_base = all_to_all_single

    @refused("alltoall")
    def alltoall(self, outputs, inputs, opts=None):
        call = "all_to_all"
        n = self._size
        if len(outputs) != n or len(inputs) != n:
            raise ValueError("%s: %d ranks need %d input and output tensors" % (call, n, n))
        shapes = {tuple(t.shape) for t in list(outputs) + list(inputs)}
        dtypes = {t.dtype for t in list(outputs) + list(inputs)}
        if len(shapes) > 1 or len(dtypes) > 1:
            raise Unsupported("%s: tensors of different shapes or dtypes are not supported by "
                              "the '%s' backend (equal splits only)" % (call, BACKEND))
        for t in list(outputs) + list(inputs):
            host(t, call)
        flat_in = torch.cat([t.reshape(-1) for t in inputs])
        flat_out = torch.empty_like(flat_in)
        per = flat_in.numel() * flat_in.element_size() // n
        req = self.comm.ialltoall(flat_in.data_ptr(), flat_out.data_ptr(), per, C.UINT8,
                                  keep=(flat_in, flat_out))

        def finish():
            for o, part in zip(outputs, flat_out.chunk(n)):
                o.copy_(part.view(o.shape))
        return self._work([req], list(outputs), finish)

    def barrier(self, opts=None):
        return self._work([self.comm.ibarrier()], [])

    # ---- what chorus does not offer ----------------------------------------
    def send(self, tensors, dst, tag):
        _unsupported("send")

    def recv(self, tensors, src, tag):
        _unsupported("recv")

    def recv_anysource(self, tensors, tag):
        _unsupported("recv (any source)")

    def gather(self, outputs, inputs, opts=None):
        _unsupported("gather")

    def gather_single(self, output, input, opts=None):
        _unsupported("gather")

    def scatter(self, outputs, inputs, opts=None):
        _unsupported("scatter")

    def monitored_barrier(self, *args, **kwargs):
        _unsupported("monitored_barrier")

    def engine(self):
        """The training engine of this group, created on first use (collective: every rank
        of the group makes the same first call that needs it)."""
        if self._engine is None:
            self._engine = Engine(self._engine_comm)
        return self._engine

    # ---- lifetime --------------------------------------------------------
    def shutdown(self):
        self.completer.close()
        if self._engine is not None:
            engine, self._engine = self._engine, None
            engine.destroy()
        for name in ("_engine_comm", "comm"):
            comm = getattr(self, name)
            if comm is not None:
                setattr(self, name, None)
                comm.destroy()

    def abort(self):
        if self.comm is not None:
            self.comm.abort()  # the duplicate shares its context: both fail


def create(store, rank, size, timeout):
    return ChorusBackend(store, rank, size, timeout)


def register():
    """Registers "chorus" with torch.distributed (once per process)."""
    if not hasattr(dist.Backend, BACKEND.upper()):
        dist.Backend.register_backend(BACKEND, create, devices=["cpu"])
