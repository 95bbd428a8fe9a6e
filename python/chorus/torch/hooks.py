"""DDP communication hooks that hand DDP's buckets to chorus's training engine.

    model = DistributedDataParallel(model)          # on a "chorus" process group
    model.register_comm_hook(None, chorus.torch.hooks.fp16_compress_hook)

Each hook averages the bucket over the group through the engine of the group's chorus
communicator. fp16_compress_hook and bf16_compress_hook send float32 buckets as float16 or
bfloat16 and add them in float32 at every hop, so the sum loses precision once, on the
wire, not at every addition as a hook that casts the bucket before an allreduce does. The
result is float32, the same bits on every rank. Buckets of other dtypes are averaged
uncompressed. The state argument is the process group (None: the default group), as with
torch's own hooks.
"""

import torch
import torch.distributed as dist

from .. import comm as C
from ._tensors import BACKEND, Unsupported, reduce_dtype


def _backend(process_group):
    pg = process_group if process_group is not None else dist.group.WORLD
    backend = pg._get_backend(torch.device("cpu"))
    if getattr(backend, "getBackendName", lambda: None)() != BACKEND:
        raise Unsupported("chorus.torch.hooks need a process group of the '%s' backend; this "
                          "one is %s" % (BACKEND, type(backend).__name__))
    return backend


def _engine_hook(flags, kind):
    def hook(process_group, bucket):
        backend = _backend(process_group)
        t = bucket.buffer()
        dtype, count = reduce_dtype(t, C.AVG, "DDP comm hook")
        use = flags if t.dtype == torch.float32 else 0
        # When DDP rebuilds its buckets after the first step, every rank's bucket i changes
        # alike, which the engine takes as a new description of the name.
        name = "ddp.%s.%d" % (kind, bucket.index())
        req = backend.engine().allreduce(name, t.data_ptr(),
                                         t.data_ptr(), count, dtype, C.AVG, use, keep=(t,))
        fut = torch.futures.Future()

        def done(error):
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(t)
        backend.completer.add(req, done)
        return fut
    return hook


allreduce_hook = _engine_hook(0, "avg")
allreduce_hook.__doc__ = "Averages each bucket through the engine, uncompressed."
fp16_compress_hook = _engine_hook(C.COMPRESS_FP16, "fp16")
fp16_compress_hook.__doc__ = ("Averages each float32 bucket through the engine, as float16 "
                              "on the wire, added in float32.")
bf16_compress_hook = _engine_hook(C.COMPRESS_BF16, "bf16")
bf16_compress_hook.__doc__ = ("Averages each float32 bucket through the engine, as bfloat16 "
                              "on the wire, added in float32.")

__all__ = ["allreduce_hook", "fp16_compress_hook", "bf16_compress_hook"]
