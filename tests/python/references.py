"""What the Python tests share: counted checks, and exact references of the reductions
(every rank computes the result from all ranks' inputs: small integers, so any order of
additions gives the same value)."""

import sys

import torch


class Checks:
    """check(ok, what): counted; a failure is kept and printed with the rank at once."""

    def __init__(self):
        self.count = 0
        self.failures = []
        self.rank = -1      # set once the rank is known

    def __call__(self, ok, what):
        self.count += 1
        if not ok:
            self.failures.append(what)
            print("rank %d: FAIL %s" % (self.rank, what), file=sys.stderr, flush=True)


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
