"""What the Python tests of every framework share, with numpy only: counted checks, an
exception caught, and the exact reference of a reduction (every rank computes it from all
ranks' inputs: small integers, so any order of additions gives the same value)."""

import sys

import numpy as np


class Checks:
    """check(ok, what) -> ok: counted; a failure is kept and printed with the rank at once
    (on stderr); with verbose, rank 0 also prints an "ok" line for each check passed."""

    def __init__(self, rank=-1, verbose=False):
        self.count = 0
        self.failures = []
        self.rank = rank        # set once the rank is known
        self.verbose = verbose

    def __call__(self, ok, what):
        self.count += 1
        if not ok:
            self.failures.append(what)
            print("rank %d: FAIL %s" % (self.rank, what), file=sys.stderr, flush=True)
        elif self.verbose and self.rank <= 0:
            print("ok %s" % what, flush=True)
        return ok


def raises(fn, kinds):
    """The exception fn raised (one of kinds), or None."""
    try:
        fn()
    except kinds as e:
        return e
    return None


def reduce_exact(op, inputs, dtype):
    """op ("sum", "avg", "min", "max" or "product") of the numpy arrays inputs elementwise,
    as dtype; avg divides integers toward zero, as chorus's CHORUS_AVG does."""
    wide = np.stack([np.asarray(x).astype(np.float64) for x in inputs])
    if op == "sum":
        r = wide.sum(0)
    elif op == "product":
        r = wide.prod(0)
    elif op == "min":
        r = wide.min(0)
    elif op == "max":
        r = wide.max(0)
    elif op == "avg":
        r = wide.sum(0) / len(inputs)
        if not np.issubdtype(np.dtype(dtype), np.floating):
            r = np.trunc(r)
    else:
        raise ValueError("no reduction %r" % op)
    return r.astype(dtype)
