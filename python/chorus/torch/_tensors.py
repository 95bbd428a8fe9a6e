"""Torch tensors as chorus buffers: dtypes, ops, and contiguous host memory."""

import torch
import torch.distributed as dist

from .. import comm as C

BACKEND = "chorus"

# torch dtypes chorus reduces, and the chorus dtype of each.
_DTYPES = {
    torch.int8: C.INT8, torch.uint8: C.UINT8, torch.int32: C.INT32, torch.int64: C.INT64,
    torch.float16: C.FLOAT16, torch.bfloat16: C.BFLOAT16, torch.float32: C.FLOAT32,
    torch.float64: C.FLOAT64,
}
for _name, _code in (("uint32", C.UINT32), ("uint64", C.UINT64)):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _code

# Complex tensors reduce as pairs of their real type, for the ops that act per component.
_COMPLEX = {torch.complex64: C.FLOAT32, torch.complex128: C.FLOAT64}

_OPS = [(dist.ReduceOp.SUM, C.SUM), (dist.ReduceOp.PRODUCT, C.PROD), (dist.ReduceOp.MIN, C.MIN),
        (dist.ReduceOp.MAX, C.MAX), (dist.ReduceOp.AVG, C.AVG)]


class Unsupported(RuntimeError):
    pass


def reduce_op(op, call):
    for torch_op, code in _OPS:
        if op == torch_op:
            return code
    raise Unsupported("%s: ReduceOp %s is not supported by the '%s' backend (it has SUM, "
                      "PRODUCT, MIN, MAX and AVG)" % (call, _op_name(op), BACKEND))


def _op_name(op):
    for name in ("BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if op == getattr(dist.ReduceOp, name):
            return name
    return str(op)


def reduce_dtype(t, op, call):
    """(chorus dtype, element count) of t reduced with chorus op `op`."""
    if t.dtype in _DTYPES:
        return _DTYPES[t.dtype], t.numel()
    if t.dtype == torch.bool and op in (C.MIN, C.MAX):
        return C.UINT8, t.numel()  # MIN is logical and, MAX logical or, on 0 and 1
    if t.dtype in _COMPLEX and op in (C.SUM, C.AVG):
        return _COMPLEX[t.dtype], 2 * t.numel()
    raise Unsupported("%s: dtype %s is not supported by the '%s' backend for this op"
                      % (call, t.dtype, BACKEND))


def host(t, call):
    """t itself when it is contiguous host memory, for chorus to read and write."""
    if t.device.type != "cpu":
        raise Unsupported("%s: the '%s' backend takes CPU tensors; this one is on %s"
                          % (call, BACKEND, t.device))
    if t.is_sparse:
        raise Unsupported("%s: sparse tensors are not supported by the '%s' backend"
                          % (call, BACKEND))
    return t


class Staged:
    """A contiguous buffer for tensor t: t itself when it is contiguous, else a copy that
    back() writes into t once the operation is done."""

    def __init__(self, t, call, copy_in=True):
        host(t, call)
        self.tensor = t
        if t.is_contiguous():
            self.buf = t
        else:
            self.buf = t.contiguous() if copy_in else torch.empty_like(t, memory_format=
                                                                        torch.contiguous_format)

    @property
    def ptr(self):
        return self.buf.data_ptr()

    @property
    def nbytes(self):
        return self.buf.numel() * self.buf.element_size()

    def back(self):
        if self.buf is not self.tensor:
            self.tensor.copy_(self.buf)
