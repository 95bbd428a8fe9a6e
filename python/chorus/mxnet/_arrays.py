"""MXNet NDArrays as chorus buffers: dtypes, contexts, and host memory without copies.

An NDArray on a CPU context is always one compact row-major block (a basic slice of the
first axis is a view at an offset into its parent's block), so chorus can read and write it
where it lies. MXNet runs its operators asynchronously: before chorus touches an array's
memory, the array's pending writes (to read it) or its pending reads and writes (to write
it) must be done, which wait_to_read() and the C API's MXNDArrayWaitToWrite ensure. The
address comes from the MXNet C API (MXNDArrayGetData on the array's handle), which also
allocates an array whose allocation MXNet had delayed.

Where no address can be had (an array with no elements, or ZERO_COPY turned off), the
array is staged through a numpy copy, which back() writes into the array afterwards.
"""

import ctypes

import mxnet as mx
import numpy as np
from mxnet.base import _LIB, check_call

from .. import comm as C

MODULE = "chorus.mxnet"

# numpy dtypes (MXNet's) that chorus reduces, and the chorus dtype of each.
DTYPES = {
    np.dtype(np.int8): C.INT8, np.dtype(np.uint8): C.UINT8, np.dtype(np.int32): C.INT32,
    np.dtype(np.int64): C.INT64, np.dtype(np.float16): C.FLOAT16,
    np.dtype(np.float32): C.FLOAT32, np.dtype(np.float64): C.FLOAT64,
}

# Contexts whose memory is host memory chorus can address. cpu_pinned and cpu_shared are
# page-locked and shared host memory: still host memory.
_HOST_CONTEXTS = ("cpu", "cpu_pinned", "cpu_shared")

# Tests turn this off to check the staged path on every call.
ZERO_COPY = True


class Unsupported(RuntimeError):
    """An array chorus.mxnet does not take: a GPU context, sparse storage, or a dtype the
    call cannot reduce."""


def check_array(arr, call):
    """arr, checked to be a dense NDArray in host memory."""
    if not isinstance(arr, mx.nd.NDArray):
        raise TypeError("%s.%s: an mxnet NDArray expected, not %s"
                        % (MODULE, call, type(arr).__name__))
    kind = arr.context.device_type
    if kind not in _HOST_CONTEXTS:
        raise Unsupported("%s.%s: arrays on %s are not supported (chorus.mxnet takes CPU "
                          "arrays; copy it with as_in_context(mx.cpu()))"
                          % (MODULE, call, arr.context))
    if arr.stype != "default":
        raise Unsupported("%s.%s: %s arrays are not supported (chorus.mxnet takes dense "
                          "arrays; convert with tostype('default'))" % (MODULE, call, arr.stype))
    return arr


def reduce_dtype(arr, call):
    """The chorus dtype that reduces arr's elements."""
    dtype = np.dtype(arr.dtype)
    if dtype not in DTYPES:
        raise Unsupported("%s.%s: dtype %s cannot be reduced (chorus reduces %s)"
                          % (MODULE, call, dtype.name,
                             ", ".join(sorted(d.name for d in DTYPES))))
    return DTYPES[dtype]


def nbytes(arr):
    return int(arr.size) * np.dtype(arr.dtype).itemsize


def empty_like(arr, shape=None):
    """A new array of arr's dtype and context (and arr's kind: mxnet.numpy or legacy)."""
    shape = arr.shape if shape is None else tuple(shape)
    out = mx.nd.empty(shape, ctx=arr.context, dtype=arr.dtype)
    if isinstance(arr, mx.np.ndarray):
        out = out.as_np_ndarray()
    return out


def _address(arr):
    """The address of arr's first element, or None when it has none."""
    ptr = ctypes.c_void_p()
    check_call(_LIB.MXNDArrayGetData(arr.handle, ctypes.byref(ptr)))
    return ptr.value


class Buffer:
    """The memory chorus reads (write=False) or writes (write=True) for array arr: arr's
    own when it can be addressed, else a numpy copy (copy_in: holding arr's values) that
    back() writes into arr once chorus is done."""

    def __init__(self, arr, call, write, copy_in=True):
        check_array(arr, call)
        self.array = arr
        self.write = write
        self.staged = None
        ptr = None
        if ZERO_COPY and arr.size > 0:
            if write:
                # NDArray has no wait_to_write in Python: the C API has it.
                check_call(_LIB.MXNDArrayWaitToWrite(arr.handle))
            else:
                arr.wait_to_read()
            ptr = _address(arr)
        if ptr is None:
            if copy_in:
                self.staged = np.ascontiguousarray(arr.asnumpy())
            else:
                self.staged = np.empty(arr.shape, dtype=arr.dtype)
            # An empty numpy array still has an address: chorus gets a valid pointer.
            ptr = self.staged.ctypes.data
        self.ptr = ptr

    def back(self):
        """Writes the staged copy into the array (nothing to do without one)."""
        if self.staged is not None and self.write and self.array.size > 0:
            self.array[:] = self.staged
