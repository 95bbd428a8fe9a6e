"""Every collective of the torch.distributed backend "chorus", every dtype and op it has,
against a reference every rank computes from all ranks' inputs and, where gloo offers the
same call, against gloo's result in a gloo group of the same ranks. Run under torchrun.

Values are small integers, so sums and products are exact in every dtype and any order.
Also: new_group with two groups at once, in-place and non-contiguous tensors, odd counts,
the clear errors for what the backend does not offer, and calls refused on one rank only
(every rank raises at once and the group goes on).
"""

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import chorus.torch  # noqa: F401  (registers the backend)
from chorus.torch import Unsupported
from references import Checks, reduce_exact

DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}
COUNTS = [1, 7, 1000, 65537]

check = Checks()
failures = check.failures


def data(rank, count, dtype, op):
    """Rank rank's input: values small enough that any reduction is exact."""
    g = torch.Generator().manual_seed(1000 * rank + count)
    if op == "product":
        v = torch.randint(1, 3, (count,), generator=g)  # 1 or 2: at most 2^size
    elif dtype == torch.uint8 or op in ("min", "max"):
        v = torch.randint(0, 30, (count,), generator=g)
    else:
        v = torch.randint(-10, 11, (count,), generator=g)
    return v.to(dtype)


def reference(op, inputs, dtype):
    return reduce_exact(op, inputs, dtype)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def gloo_has(dtype, op):
    return op != "avg"


def gloo_ran(call):
    """False when gloo refuses the dtype or op (on every rank alike): the reference stands."""
    try:
        call()
        return True
    except RuntimeError:
        return False


def test_all_reduce(gloo):
    for dtype in DTYPES:
        for opname, op in OPS.items():
            for count in COUNTS:
                inputs = [data(r, count, dtype, opname) for r in range(SIZE)]
                want = reference(opname, inputs, dtype)
                t = inputs[RANK].clone()
                dist.all_reduce(t, op=op)
                check(same(t, want), "all_reduce %s %s count %d" % (dtype, opname, count))
                if gloo_has(dtype, opname) and count <= 1000:
                    g = inputs[RANK].clone()
                    if gloo_ran(lambda: dist.all_reduce(g, op=op, group=gloo)):
                        check(same(t, g), "all_reduce %s %s count %d equals gloo's"
                          % (dtype, opname, count))
    # async, and a non-contiguous tensor (every other column)
    m = torch.arange(40, dtype=torch.float32).reshape(4, 10) + RANK
    view = m[:, ::2]
    w = dist.all_reduce(view, async_op=True)
    w.wait()
    base = torch.arange(40, dtype=torch.float32).reshape(4, 10)
    want = (base * SIZE + sum(range(SIZE)))[:, ::2]
    check(same(view, want), "async all_reduce of a non-contiguous view")
    check(same(m[:, 1::2], (base + RANK)[:, 1::2]), "the view's neighbours are untouched")
    # the future DDP's hooks read
    t = torch.ones(3)
    fut = dist.all_reduce(t, async_op=True).get_future()
    check(same(fut.wait()[0], torch.full((3,), float(SIZE))), "the work's future holds the tensor")
    # complex sums and bool max (logical or)
    c = torch.tensor([1 + 2j, RANK - 1j], dtype=torch.complex64)
    dist.all_reduce(c)
    check(same(c, torch.tensor([SIZE + 2j * SIZE, sum(range(SIZE)) - 1j * SIZE],
                               dtype=torch.complex64)), "complex64 sum")
    b = torch.tensor([RANK == 0, False, True])
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    check(same(b, torch.tensor([True, False, True])), "bool max")


def test_movement(gloo):
    for dtype in DTYPES + [torch.int16, torch.bool]:
        for count in (1, 7, 4099):
            inputs = [data(r, count, dtype if dtype != torch.bool else torch.uint8, "max")
                      .to(dtype) for r in range(SIZE)]
            for root in sorted({0, SIZE - 1}):
                t = inputs[RANK].clone()
                dist.broadcast(t, root)
                check(same(t, inputs[root]), "broadcast %s count %d root %d"
                      % (dtype, count, root))
            outs = [torch.empty_like(inputs[0]) for _ in range(SIZE)]
            dist.all_gather(outs, inputs[RANK])
            check(all(same(o, i) for o, i in zip(outs, inputs)),
                  "all_gather %s count %d" % (dtype, count))
            flat = torch.empty(SIZE * count, dtype=dtype)
            dist.all_gather_into_tensor(flat, inputs[RANK])
            check(same(flat, torch.cat(inputs)), "all_gather_into_tensor %s count %d"
                  % (dtype, count))
            g = torch.empty_like(flat)
            if gloo_ran(lambda: dist.all_gather_into_tensor(g, inputs[RANK], group=gloo)):
                check(same(flat, g), "all_gather_into_tensor %s equals gloo's" % dtype)
            # all_to_all_single: rank r's block j goes to rank j's block r
            blocks = [data(100 + r, SIZE * count, torch.int64, "max").to(dtype)
                      for r in range(SIZE)]
            out = torch.empty_like(blocks[RANK])
            dist.all_to_all_single(out, blocks[RANK])
            want = torch.cat([b.chunk(SIZE)[RANK] for b in blocks])
            check(same(out, want), "all_to_all_single %s count %d" % (dtype, count))
            outs = [torch.empty(count, dtype=dtype) for _ in range(SIZE)]
            dist.all_to_all(outs, list(blocks[RANK].chunk(SIZE)))
            check(same(torch.cat(outs), want), "all_to_all %s count %d" % (dtype, count))


def test_reductions_to_parts(gloo):
    for dtype in DTYPES:
        for opname, op in OPS.items():
            for count in (1, 7, 1001):
                inputs = [data(r, SIZE * count, dtype, opname) for r in range(SIZE)]
                want = reference(opname, inputs, dtype)
                out = torch.empty(count, dtype=dtype)
                dist.reduce_scatter_tensor(out, inputs[RANK], op=op)
                mine = want.chunk(SIZE)[RANK]
                check(same(out, mine), "reduce_scatter_tensor %s %s count %d"
                      % (dtype, opname, count))
                out2 = torch.empty(count, dtype=dtype)
                dist.reduce_scatter(out2, list(inputs[RANK].chunk(SIZE)), op=op)
                check(same(out2, mine), "reduce_scatter %s %s count %d" % (dtype, opname, count))
                root = SIZE - 1
                t = inputs[RANK].clone()
                dist.reduce(t, root, op=op)
                if RANK == root:
                    check(same(t, want), "reduce %s %s count %d" % (dtype, opname, count))
                if gloo_has(dtype, opname) and dtype not in (torch.float16, torch.bfloat16):
                    g = inputs[RANK].clone()
                    if gloo_ran(lambda: dist.reduce(g, root, op=op, group=gloo)) and \
                            RANK == root:
                        check(same(t, g), "reduce %s %s equals gloo's" % (dtype, opname))


def test_groups():
    # Two groups at once: the even ranks and the odd ranks, then one in the reverse order.
    evens = list(range(0, SIZE, 2))
    odds = list(range(1, SIZE, 2))
    g_even = dist.new_group(evens, backend="chorus")
    g_odd = dist.new_group(odds, backend="chorus") if odds else None
    mine, members = (g_even, evens) if RANK % 2 == 0 else (g_odd, odds)
    t = torch.tensor([float(RANK + 1)])
    dist.all_reduce(t, group=mine)
    check(same(t, torch.tensor([float(sum(r + 1 for r in members))])),
          "all_reduce in the group %s" % members)
    rev = list(reversed(range(SIZE)))
    g_rev = dist.new_group(rev, backend="chorus")
    outs = [torch.empty(1, dtype=torch.int64) for _ in range(SIZE)]
    dist.all_gather(outs, torch.tensor([RANK]), group=g_rev)
    check([int(o) for o in outs] == list(range(SIZE)), "all_gather in a group of every rank "
          "(gathered in group rank order, which new_group sorts by global rank)")
    dist.barrier(group=g_rev)
    for g in (g_even, g_odd, g_rev):
        if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(g)


def expect_raise(what, fn, *words):
    try:
        fn()
    except (Unsupported, RuntimeError, ValueError) as e:
        msg = str(e)
        check(all(w in msg for w in words), "%s raises naming %s (got: %s)" % (what, words, msg))
        return
    check(False, "%s raises" % what)


def test_errors():
    t = torch.ones(4)
    expect_raise("BAND", lambda: dist.all_reduce(t, op=dist.ReduceOp.BAND), "BAND", "chorus")
    expect_raise("int16 sum", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)),
                 "int16", "chorus")
    if SIZE > 1:
        expect_raise("send", lambda: dist.send(t, (RANK + 1) % SIZE), "send", "chorus")
        expect_raise("recv", lambda: dist.recv(t, (RANK + 1) % SIZE), "recv", "chorus")
    expect_raise("gather", lambda: dist.gather(t, [torch.empty(4) for _ in range(SIZE)]
                                               if RANK == 0 else None, dst=0), "gather",
                 "chorus")
    expect_raise("scatter", lambda: dist.scatter(t, [torch.empty(4) for _ in range(SIZE)]
                                                 if RANK == 0 else None, src=0), "scatter",
                 "chorus")
    if SIZE > 1:
        splits = [2] + [1] * (SIZE - 1)
        inp = torch.zeros(sum(splits))
        expect_raise("uneven all_to_all_single", lambda: dist.all_to_all_single(
            torch.zeros(sum(splits)), inp, splits, splits), "uneven", "chorus")
    # A call refused on one rank only: that rank raises its reason, the others raise at
    # once (not after the group's timeout), and the group goes on.
    if SIZE > 1:
        odd = SIZE - 1
        cases = [
            ("all_reduce with BAND on one rank",
             lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND if RANK == odd
                                     else dist.ReduceOp.SUM)),
            ("all_reduce of int16 on one rank",
             lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16 if RANK == odd
                                                else torch.float32))),
            ("all_gather_into_tensor with a short output on one rank",
             lambda: dist.all_gather_into_tensor(
                 torch.empty(SIZE * 3 - (RANK == odd)), torch.ones(3))),
            ("reduce_scatter_tensor with a wrong input on one rank",
             lambda: dist.reduce_scatter_tensor(torch.empty(2),
                                                torch.ones(2 * SIZE + (RANK == odd)))),
            ("uneven all_to_all_single on one rank",
             lambda: dist.all_to_all_single(
                 torch.zeros(SIZE + 1 if RANK == odd else SIZE), torch.zeros(
                     SIZE + 1 if RANK == odd else SIZE),
                 [2] + [1] * (SIZE - 1) if RANK == odd else None,
                 [2] + [1] * (SIZE - 1) if RANK == odd else None)),
        ]
        for what, call in cases:
            start = time.monotonic()
            try:
                call()
                raised = None
            except (Unsupported, RuntimeError, ValueError) as e:
                raised = e
            took = time.monotonic() - start
            check(raised is not None and took < 10, "%s: rank %d raises at once (%.1f s: %s)"
                  % (what, RANK, took, str(raised).splitlines()[0] if raised else "none"))
            t = torch.ones(2)
            dist.all_reduce(t)
            check(same(t, torch.full((2,), float(SIZE))), "all_reduce after %s" % what)
    # After the refusals the group still works.
    t = torch.ones(2)
    dist.all_reduce(t)
    check(same(t, torch.full((2,), float(SIZE))), "all_reduce after the refused calls")


if __name__ == "__main__":
    dist.init_process_group("chorus", timeout=timedelta(seconds=60))
    RANK, SIZE = dist.get_rank(), dist.get_world_size()
    check.rank = RANK
    gloo_group = dist.new_group(backend="gloo")
    which = sys.argv[1:] or ["all_reduce", "movement", "parts", "groups", "errors"]
    tests = {"all_reduce": lambda: test_all_reduce(gloo_group),
             "movement": lambda: test_movement(gloo_group),
             "parts": lambda: test_reductions_to_parts(gloo_group),
             "groups": test_groups, "errors": test_errors}
    for name in which:
        tests[name]()
        dist.barrier()
    dist.destroy_process_group()
    print("rank %d: %d checks, %d failed" % (RANK, check.count, len(failures)), flush=True)
    sys.exit(1 if failures else 0)
