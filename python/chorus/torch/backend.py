"""The torch.distributed backend "chorus": a ProcessGroup whose collectives are chorus's.

Every collective posts a non-blocking chorus call and returns a Work whose future a
completion thread fulfils when chorus reports the call done, so DDP's buckets overlap
with the backward pass. The ranks meet through torch's own store: rank 0 of each group
creates a chorus unique id and puts it there; no other address or port is configured.
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend, _create_work_from_future

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
        return _create_work_from_future(fut)

    def _reduce_args(self, t, opts_op, call):
        op = reduce_op(opts_op, call)
        dtype, count = reduce_dtype(t, op, call)
        return dtype, count, op

    # ---- collectives -----------------------------------------------------
    def allreduce(self, tensors, opts=None):
        return self.allreduce_coalesced(tensors, opts)

    def _reductions(self, tensors, opts, call, post, writes=True):
        """One chorus reduction per tensor, in place: post(buffer, count, dtype, op) posts
        it. The tensors are the result; writes=False where this rank's are left as they
        were (a reduce's ranks other than the root)."""
        op_in = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        staged, reqs = [], []
        for t in tensors:
            dtype, count, op = self._reduce_args(t, op_in, call)
            s = Staged(t, call)
            staged.append(s)
            reqs.append(post(s, count, dtype, op))
        return self._work(reqs, list(tensors),
                          lambda: [s.back() for s in staged] if writes else None)

    def allreduce_coalesced(self, tensors, opts=None):
        return self._reductions(tensors, opts, "all_reduce", lambda s, count, dtype, op:
                                self.comm.iallreduce(s.ptr, s.ptr, count, dtype, op,
                                                     keep=(s,)))

    def broadcast(self, tensors, opts=None):
        call = "broadcast"
        root = opts.rootRank if opts is not None else 0
        staged = [Staged(t, call) for t in tensors]
        reqs = [self.comm.ibroadcast(s.ptr, s.ptr, s.nbytes, C.UINT8, root, keep=(s,))
                for s in staged]
        return self._work(reqs, list(tensors), lambda: [s.back() for s in staged])

    def reduce(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        return self._reductions(tensors, opts, "reduce", lambda s, count, dtype, op:
                                self.comm.ireduce(s.ptr, s.ptr, count, dtype, op, root,
                                                  keep=(s,)), writes=self._rank == root)

    def _gather_into(self, out, inp, call):
        """An allgather of inp into the contiguous out (size * inp's bytes)."""
        if out.numel() != inp.numel() * self._size or out.dtype != inp.dtype:
            raise ValueError("%s: the output has %d elements of %s; %d ranks x %d elements of "
                             "%s expected" % (call, out.numel(), out.dtype, self._size,
                                              inp.numel(), inp.dtype))
        src, dst = Staged(inp, call), Staged(out, call, copy_in=False)
        req = self.comm.iallgather(src.ptr, dst.ptr, src.nbytes, C.UINT8, keep=(src, dst))
        return req, dst

    def all_gather_single(self, output, input, opts=None):
        req, dst = self._gather_into(output, input, "all_gather_into_tensor")
        return self._work([req], [output], dst.back)

    _allgather_base = all_gather_single

    def allgather(self, output_lists, inputs, opts=None):
        call = "all_gather"
        reqs, finishers = [], []
        for outs, inp in zip(output_lists, inputs):
            if len(outs) != self._size:
                raise ValueError("%s: %d output tensors for %d ranks"
                                 % (call, len(outs), self._size))
            for o in outs:
                host(o, call)
                if o.numel() != inp.numel() or o.dtype != inp.dtype:
                    raise ValueError("%s: every output tensor must match the input's %d "
                                     "elements of %s" % (call, inp.numel(), inp.dtype))
            flat = torch.empty((self._size,) + tuple(inp.shape), dtype=inp.dtype)
            req, dst = self._gather_into(flat, inp, call)
            reqs.append(req)
            finishers.append((outs, flat))

        def finish():
            for outs, flat in finishers:
                for o, part in zip(outs, flat):
                    o.copy_(part)
        return self._work(reqs, output_lists, finish)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        return self.allgather(output_lists, inputs, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        reqs, dsts = [], []
        for o, i in zip(outputs, inputs):
            req, dst = self._gather_into(o, i, "all_gather_into_tensor")
            reqs.append(req)
            dsts.append(dst)
        return self._work(reqs, list(outputs), lambda: [d.back() for d in dsts])

    def _scatter_reduce(self, out, inp, op_in, call):
        """A reduce-scatter of the contiguous inp (size * out's elements) into out."""
        if inp.numel() != out.numel() * self._size or out.dtype != inp.dtype:
            raise ValueError("%s: the input has %d elements of %s; %d ranks x %d elements of "
                             "%s expected" % (call, inp.numel(), inp.dtype, self._size,
                                              out.numel(), out.dtype))
        op = reduce_op(op_in, call)
        dtype, count = reduce_dtype(out, op, call)
        src, dst = Staged(inp, call), Staged(out, call, copy_in=False)
        req = self.comm.ireduce_scatter(src.ptr, dst.ptr, count, dtype, op, keep=(src, dst))
        return req, dst

    def reduce_scatter_single(self, output, input, opts=None):
        op_in = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        req, dst = self._scatter_reduce(output, input, op_in, "reduce_scatter_tensor")
        return self._work([req], [output], dst.back)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter(self, outputs, input_lists, opts=None):
        call = "reduce_scatter"
        op_in = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        reqs, dsts = [], []
        for out, ins in zip(outputs, input_lists):
            if len(ins) != self._size:
                raise ValueError("%s: %d input tensors for %d ranks" % (call, len(ins),
                                                                        self._size))
            for i in ins:
                host(i, call)
            flat = torch.cat([i.reshape(-1) for i in ins])
            req, dst = self._scatter_reduce(out, flat, op_in, call)
            reqs.append(req)
            dsts.append(dst)
        return self._work(reqs, list(outputs), lambda: [d.back() for d in dsts])

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        op_in = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        reqs, dsts = [], []
        for o, i in zip(outputs, inputs):
            req, dst = self._scatter_reduce(o, i, op_in, "reduce_scatter_tensor")
            reqs.append(req)
            dsts.append(dst)
        return self._work(reqs, list(outputs), lambda: [d.back() for d in dsts])

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
