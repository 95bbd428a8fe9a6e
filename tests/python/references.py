"""What the PyTorch tests share: counted checks (checks.py), and exact references of the reductions
(every rank computes the result from all ranks' inputs: small integers, so any order of
additions gives the same value)."""

import torch

from checks import Checks  # noqa: F401  (the tests import it from here)


def reduce_exact(op, inputs, dtype):
    """op ("sum", "product", "min", "max" or "avg") of inputs elementwise, as dtype; avg
    divides integers toward zero, as chorus's CHORUS_AVG does, and floats exactly."""
    wide = torch.stack([t.to(torch.float64) for t in inputs])
    if op == "sum":
        r = wide.sum(0)
    elif op == "product":
        r = wide.prod(0)
    elif op == "min":
        r = wide.min(0).values
    elif op == "max":
        r = wide.max(0).values
    elif op == "avg":
        s = wide.sum(0)
        r = s / len(inputs) if dtype.is_floating_point else torch.trunc(s / len(inputs))
    else:
        raise ValueError("no reference for op %r" % op)
    return r.to(dtype)
