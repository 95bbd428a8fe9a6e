"""The Horovod API of chorus.torch (chorus.torch.horovod) against exact references.

Run under chorus-run or torchrun with any number of ranks (2 and 3 are the usual):

    chorus-run -n 3 python tests/python/torch_horovod.py

Every rank computes the references from every rank's inputs, which it can generate
itself; values are small integers where the result must be exact. Exits 0 when every
check passed on every rank, else 1 with the failures listed on stderr; a watchdog ends a
run that hangs (TORCH_HOROVOD_TEST_TIMEOUT seconds, default 240).
"""

import faulthandler
import os
import sys
import time
import traceback

os.environ.setdefault("CHORUS_TIMEOUT", "60")   # a rank that dies fails the others soon
faulthandler.dump_traceback_later(float(os.environ.get("TORCH_HOROVOD_TEST_TIMEOUT", "240")),
                                  exit=True)

import torch  # noqa: E402

import chorus.torch as hvd  # noqa: E402
from chorus import ChorusError  # noqa: E402
from chorus.torch import Unsupported  # noqa: E402
from references import Checks, reduce_exact  # noqa: E402

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()

check = Checks()
check.rank = RANK
failures = check.failures


def same(a, b):
    return (isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a, b))


def raises(fn, kinds):
    """The exception fn raised (one of kinds), or None."""
    try:
        fn()
    except kinds as e:
        return e
    return None


OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max,
       "Product": hvd.Product}
DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64]
SHAPES = [(1,), (7,), (1001,), (3, 5)]


def data(rank, shape, dtype, opname, salt=0):
    """Rank rank's input: values small enough that every reduction is exact."""
    g = torch.Generator().manual_seed(7919 * rank + 31 * salt + sum(shape))
    if opname == "Product":
        v = torch.randint(1, 3, shape, generator=g)
    else:
        v = torch.randint(-20, 21, shape, generator=g)
    return v.to(dtype)


def reference(opname, inputs, dtype):
    """opname is Horovod's ("Sum", "Average", ...)."""
    return reduce_exact({"Average": "avg"}.get(opname, opname.lower()), inputs, dtype)


# ---- the job -----------------------------------------------------------------------------

def test_job():
    check(hvd.is_initialized(), "is_initialized")
    env_rank = os.environ.get("CHORUS_RANK", os.environ.get("RANK"))
    if env_rank is not None:
        check(RANK == int(env_rank), "rank %d is the launcher's %s" % (RANK, env_rank))
    check(0 <= hvd.local_rank() < hvd.local_size() <= SIZE, "local_rank/local_size")
    check(hvd.cross_size() * hvd.local_size() == SIZE or hvd.cross_size() > 1,
          "cross_size x local_size")
    check(0 <= hvd.cross_rank() < hvd.cross_size(), "cross_rank")
    hvd.barrier()
    last = hvd.join()
    lasts = hvd.allgather_object(last, name="join_result")
    check(0 <= last < SIZE and len(set(lasts)) == 1, "join returns one rank on all: %s" % lasts)


# ---- allreduce -----------------------------------------------------------------------------

def test_allreduce():
    for dtype in DTYPES:
        for opname, op in OPS.items():
            for i, shape in enumerate(SHAPES):
                inputs = [data(r, shape, dtype, opname) for r in range(SIZE)]
                want = reference(opname, inputs, dtype)
                t = inputs[RANK].clone()
                name = None if i % 2 else "ar.%s.%s.%d" % (dtype, opname, i)
                out = hvd.allreduce(t, name=name, op=op)
                check(same(out, want), "allreduce %s %s %s name=%s" % (dtype, opname, shape,
                                                                      name))
                check(same(t, inputs[RANK]), "allreduce leaves its input (%s %s)"
                      % (dtype, opname))
                t2 = inputs[RANK].clone()
                back = hvd.allreduce_(t2, name=None if name is None else name + ".inplace",
                                      op=op)
                check(back is t2 and same(t2, want), "allreduce_ %s %s %s" % (dtype, opname,
                                                                             shape))
    # The deprecated average flag, the default op, scale factors, a non-contiguous tensor.
    inputs = [data(r, (6, 4), torch.float64, "Sum") for r in range(SIZE)]
    total = reference("Sum", inputs, torch.float64)
    check(same(hvd.allreduce(inputs[RANK], average=False), total), "allreduce average=False")
    check(same(hvd.allreduce(inputs[RANK]), total / SIZE), "allreduce's default op (Average)")
    out = hvd.allreduce(inputs[RANK], op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    check(same(out, total), "allreduce prescale 2, postscale 0.5")
    nc = inputs[RANK].clone().t()
    hvd.allreduce_(nc, op=hvd.Sum, name="noncontiguous")
    check(same(nc, total.t()), "allreduce_ of a non-contiguous tensor")
    # A name reused for tensors of other sizes, consistently on every rank.
    for n in (4, 6, 4, 9):
        t = torch.full((n,), float(RANK + 1))
        out = hvd.allreduce(t, name="reused", op=hvd.Sum)
        check(same(out, torch.full((n,), float(SIZE * (SIZE + 1) // 2))),
              "a name reused with %d elements" % n)
    # A name longer than the engine's 255 bytes.
    long_name = "long." + "x" * 600
    out = hvd.allreduce(torch.ones(5), name=long_name, op=hvd.Sum)
    check(same(out, torch.full((5,), float(SIZE))), "a 605-character name")


def test_async():
    shapes = [(3,), (17,), (2, 9), (1000,)]
    inputs = [[data(r, s, torch.float64, "Sum", salt=k) for k, s in enumerate(shapes)]
              for r in range(SIZE)]
    wants = [reference("Sum", [inputs[r][k] for r in range(SIZE)], torch.float64)
             for k in range(len(shapes))]
    order = list(range(len(shapes)))
    if RANK % 2:
        order.reverse()     # odd ranks submit the names in the opposite order
    handles = {}
    for k in order:
        handles[k] = hvd.allreduce_async(inputs[RANK][k], name="async.%d" % k, op=hvd.Sum)
    check(all(isinstance(h, int) for h in handles.values()), "handles are ints")
    deadline = time.time() + 30
    while not all(hvd.poll(h) for h in handles.values()) and time.time() < deadline:
        time.sleep(0.001)
    check(all(hvd.poll(h) for h in handles.values()), "poll turns true")
    for k in sorted(handles):
        check(same(hvd.synchronize(handles[k]), wants[k]), "allreduce_async %d" % k)
    check(raises(lambda: hvd.synchronize(handles[0]), ValueError) is not None,
          "synchronize of a handle already synchronized raises ValueError")
    # In place, and mixed kinds in different orders on different ranks.
    tensors = [inputs[RANK][k].clone() for k in range(len(shapes))]
    roots = [k % SIZE for k in range(len(shapes))]
    gathered = [torch.full((RANK + 1, 2), float(RANK + k)) for k in range(len(shapes))]
    jobs = []
    for k in order:
        jobs.append(("ar", k, hvd.allreduce_async_(tensors[k], name="async_.%d" % k,
                                                   op=hvd.Sum)))
        jobs.append(("bc", k, hvd.broadcast_async(inputs[RANK][k], roots[k],
                                                  name="async_bc.%d" % k)))
        jobs.append(("ag", k, hvd.allgather_async(gathered[k], name="async_ag.%d" % k)))
    for kind, k, h in reversed(jobs):
        out = hvd.synchronize(h)
        if kind == "ar":
            check(out is tensors[k] and same(out, wants[k]), "allreduce_async_ %d" % k)
        elif kind == "bc":
            check(same(out, inputs[roots[k]][k]), "broadcast_async %d" % k)
        else:
            want = torch.cat([torch.full((r + 1, 2), float(r + k)) for r in range(SIZE)])
            check(same(out, want), "allgather_async %d" % k)


def test_grouped():
    tensors = [data(RANK, (5,), torch.float32, "Sum", 1), data(RANK, (3, 3), torch.int64,
                                                              "Sum", 2),
               data(RANK, (11,), torch.float64, "Sum", 3)]
    wants = [reference("Sum", [data(r, t.shape, t.dtype, "Sum", k + 1) for r in range(SIZE)],
                       t.dtype) for k, t in enumerate(tensors)]
    outs = hvd.grouped_allreduce(tensors, name="group", op=hvd.Sum)
    check(len(outs) == 3 and all(same(o, w) for o, w in zip(outs, wants)), "grouped_allreduce")
    outs = hvd.grouped_allreduce(tensors, op=hvd.Sum)
    check(all(same(o, w) for o, w in zip(outs, wants)), "grouped_allreduce without a name")
    copies = [t.clone() for t in tensors]
    h = hvd.grouped_allreduce_async_(copies, name="group_", op=hvd.Sum)
    outs = hvd.synchronize(h)
    check(all(o is c and same(c, w) for o, c, w in zip(outs, copies, wants)),
          "grouped_allreduce_async_")


# ---- allgather, broadcast, alltoall, reducescatter ---------------------------------------------

def test_allgather():
    for label, rows_of in (("r+1 rows", lambda r: r + 1), ("no rows on even ranks",
                                                          lambda r: 2 * (r % 2)),
                           ("equal rows", lambda r: 3)):
        for dtype in (torch.float32, torch.int64):
            parts = [(torch.arange(rows_of(r) * 4, dtype=torch.int64).view(-1, 2, 2) +
                      100 * r).to(dtype) for r in range(SIZE)]
            out = hvd.allgather(parts[RANK], name="ag.%s.%s" % (label, dtype))
            check(same(out, torch.cat(parts)), "allgather (%s, %s)" % (label, dtype))
    one_d = [torch.arange(r + 2, dtype=torch.int32) for r in range(SIZE)]
    check(same(hvd.allgather(one_d[RANK]), torch.cat(one_d)), "allgather of 1-d, unnamed")
    # Trailing dimensions that differ between ranks fail on every rank.
    bad = torch.zeros(2, 3 + (RANK % 2))
    e = raises(lambda: hvd.allgather(bad, name="ag.bad"), (ValueError, ChorusError))
    check(e is not None or SIZE == 1, "allgather of different trailing dims raises")


def test_broadcast():
    for root in range(SIZE):
        for dtype in (torch.float32, torch.int64, torch.bool):
            inputs = [(data(r, (4, 5), torch.int64, "Sum", root) > 0).to(dtype)
                      if dtype == torch.bool else data(r, (4, 5), dtype, "Sum", root)
                      for r in range(SIZE)]
            mine = inputs[RANK].clone()
            out = hvd.broadcast(mine, root, name="bc.%d.%s" % (root, dtype))
            check(same(out, inputs[root]) and same(mine, inputs[RANK]),
                  "broadcast from %d (%s)" % (root, dtype))
            back = hvd.broadcast_(mine, root)
            check(back is mine and same(mine, inputs[root]), "broadcast_ from %d (%s)"
                  % (root, dtype))
    e = raises(lambda: hvd.broadcast(torch.zeros(2), SIZE), ValueError)
    check(e is not None, "broadcast from a root out of range raises ValueError")


def test_alltoall():
    # Equal splits: 2 rows to each rank; row j of rank r holds r * 1000 + j.
    t = (torch.arange(2 * SIZE, dtype=torch.int64) + 1000 * RANK).view(-1, 1).repeat(1, 3)
    out = hvd.alltoall(t)
    want = torch.cat([(torch.arange(2) + 2 * RANK + 1000 * r) for r in range(SIZE)])
    check(same(out, want.view(-1, 1).repeat(1, 3)), "alltoall, equal splits")

    # Uneven: rank r sends (r + j) % 3 rows to rank j.
    def splits_of(r):
        return [(r + j) % 3 for j in range(SIZE)]
    mine = splits_of(RANK)
    t = (torch.arange(sum(mine), dtype=torch.float64) + 1000 * RANK).view(-1, 1)
    out, received = hvd.alltoall(t, splits=mine)
    parts = []
    for r in range(SIZE):
        s = splits_of(r)
        start = sum(s[:RANK])
        parts.append(torch.arange(start, start + s[RANK], dtype=torch.float64) + 1000 * r)
    check(same(out, torch.cat(parts).view(-1, 1)), "alltoall, uneven splits")
    check(same(received, torch.tensor([splits_of(r)[RANK] for r in range(SIZE)],
                                      dtype=torch.int32)), "alltoall's received splits")
    e = raises(lambda: hvd.alltoall(torch.zeros(SIZE + 1)) if SIZE > 1 else None, ValueError)
    check(e is not None or SIZE == 1, "alltoall of an indivisible dim 0 raises ValueError")


def test_reducescatter():
    for rows in (2 * SIZE, 2 * SIZE + 1):
        counts = [rows // SIZE + (1 if r < rows % SIZE else 0) for r in range(SIZE)]
        start = sum(counts[:RANK])
        for opname, dtype in (("Sum", torch.float32), ("Average", torch.float64),
                              ("Max", torch.int32), ("Min", torch.int64)):
            inputs = [data(r, (rows, 3), dtype, opname, 5) for r in range(SIZE)]
            want = reference(opname, inputs, dtype)[start:start + counts[RANK]]
            out = hvd.reducescatter(inputs[RANK], op=OPS[opname])
            check(same(out, want), "reducescatter %d rows %s %s" % (rows, opname, dtype))
    inputs = [data(r, (SIZE, 2), torch.float64, "Sum", 6) for r in range(SIZE)]
    check(same(hvd.reducescatter(inputs[RANK]),
               reference("Average", inputs, torch.float64)[RANK:RANK + 1]),
          "reducescatter's default op (Average)")


# ---- objects, models, optimizers -----------------------------------------------------------

def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def identical_everywhere(t, name):
    every = hvd.allgather(t.reshape(1, -1), name=name)
    return all(torch.equal(every[r], every[0]) for r in range(SIZE))


def test_objects():
    root = SIZE - 1
    obj = {"from": RANK, "items": list(range(RANK + 3)), "t": torch.arange(RANK + 1)}
    got = hvd.broadcast_object(obj, root_rank=root)
    check(got["from"] == root and got["items"] == list(range(root + 3))
          and torch.equal(got["t"], torch.arange(root + 1)), "broadcast_object")
    got = hvd.broadcast_object("x" * (1000 * RANK + 5), root_rank=0, name="strings")
    check(got == "x" * 5, "broadcast_object, named")
    every = hvd.allgather_object({"rank": RANK, "pad": "y" * (50 * RANK)})
    check(every == [{"rank": r, "pad": "y" * (50 * r)} for r in range(SIZE)],
          "allgather_object")

    torch.manual_seed(100 + RANK)   # a different model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    check(not identical_everywhere(flat_params(model), "check.before") or SIZE == 1,
          "the models differ before broadcast_parameters")
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    check(identical_everywhere(flat_params(model), "check.state_dict"),
          "broadcast_parameters(state_dict)")
    torch.manual_seed(200 + RANK)
    model2 = torch.nn.Linear(3, 3)
    hvd.broadcast_parameters(model2.named_parameters(), root_rank=root)
    check(identical_everywhere(flat_params(model2), "check.named"),
          "broadcast_parameters(named_parameters())")

    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (RANK + 1), momentum=0.9)
    for p in model.parameters():
        p.grad = torch.full_like(p, float(RANK + 1))
    opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=root)
    bufs = torch.cat([opt.state[p]["momentum_buffer"].reshape(-1) for p in model.parameters()])
    check(opt.param_groups[0]["lr"] == 0.1 * (root + 1), "broadcast_optimizer_state: lr")
    check(identical_everywhere(bufs, "check.momentum") and
          torch.equal(bufs, torch.full_like(bufs, float(root + 1))),
          "broadcast_optimizer_state: momentum buffers")


def test_mismatch():
    if SIZE == 1:
        return
    if RANK == 0:
        print("test_mismatch: the engine logs the tensors that differ between ranks below, "
              "as it should", flush=True)
    # A name with a different count on odd ranks: fails on every rank.
    t = torch.ones(3 + RANK % 2)
    e = raises(lambda: hvd.allreduce(t, name="mismatch.count", op=hvd.Sum), ChorusError)
    check(e is not None and e.name == "INVALID_ARG", "a count that differs raises on every "
          "rank (%r)" % (e,))
    t = torch.ones(4, dtype=torch.float32 if RANK % 2 else torch.float64)
    h = hvd.allreduce_async(t, name="mismatch.dtype", op=hvd.Sum)
    e = raises(lambda: hvd.synchronize(h), ChorusError)
    check(e is not None, "a dtype that differs raises at synchronize on every rank")
    everyone = hvd.allgather_object(True, name="mismatch.raised")
    check(everyone == [True] * SIZE, "every rank got past the mismatch")
    # The engine goes on, for new names and for the failed one submitted alike.
    out = hvd.allreduce(torch.ones(5), name="after.mismatch", op=hvd.Sum)
    check(same(out, torch.full((5,), float(SIZE))), "a new name after a mismatch")
    out = hvd.allreduce(torch.ones(6), name="mismatch.count", op=hvd.Sum)
    check(same(out, torch.full((6,), float(SIZE))), "the failed name, submitted alike")
    # A name reused with other sizes, then a round that differs, then earlier sizes again;
    # then a round where rank 0 keeps a size it used before and the odd ranks change it.
    for k, n in enumerate((4, 6, 7 + RANK % 2, 6, 4, 4 + RANK % 2, 5)):
        differs = k in (2, 5)
        start = time.monotonic()
        h = hvd.allreduce_async(torch.ones(n), name="mismatch.reused", op=hvd.Sum)
        e = raises(lambda: hvd.synchronize(h), ChorusError)
        took = time.monotonic() - start
        if differs:
            check(e is not None and took < 10, "round %d of a reused name that differs "
                  "raises at once (%r after %.1f s)" % (k, e, took))
        else:
            check(e is None, "a reused name with %d elements (round %d, %r)" % (n, k, e))
    # Same-named allgathers back to back, of different sizes.
    hs = [hvd.allgather_async(torch.full((RANK + k, 2), float(k)), name="ag.again")
          for k in range(3)]
    for k, h in enumerate(hs):
        want = torch.cat([torch.full((r + k, 2), float(k)) for r in range(SIZE)])
        check(same(hvd.synchronize(h), want), "allgather of a name in flight, round %d" % k)

    # In a DistributedOptimizer: a parameter of another shape on odd ranks.
    model = torch.nn.Linear(3, 2 + RANK % 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=[("mismatch.model." + n, p)
                                                     for n, p in model.named_parameters()])
    model(torch.ones(4, 3)).sum().backward()
    e = raises(opt.step, ChorusError)
    check(e is not None, "DistributedOptimizer.step raises on every rank for a shape that "
          "differs")

    # A CUDA (here: meta) tensor is refused clearly, naming the backend.
    e = raises(lambda: hvd.allreduce(torch.empty(3, device="meta"), name="meta"), Unsupported)
    check(e is not None and "chorus" in str(e) and "CPU" in str(e),
          "a tensor that is not on the CPU: %s" % e)


def make_data(dtype):
    g = torch.Generator().manual_seed(42)
    rows = 8 * SIZE
    x = torch.randn(rows, 6, generator=g, dtype=torch.float64)
    w = torch.randn(6, 2, generator=g, dtype=torch.float64)
    y = x @ w + 0.1 * torch.randn(rows, 2, generator=g, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def train(tag, dtype, distributed, compression=hvd.Compression.none, passes=1, steps=10,
          predivide=1.0):
    """(final parameters, final loss on the whole batch) of SGD with momentum."""
    x, y = make_data(dtype)
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(),
                                torch.nn.Linear(5, 2)).to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if distributed:
        opt = hvd.DistributedOptimizer(opt, named_parameters=[("%s.%s" % (tag, n), p) for n, p
                                                              in model.named_parameters()],
                                       compression=compression,
                                       backward_passes_per_step=passes,
                                       gradient_predivide_factor=predivide)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        x_mine, y_mine = x[8 * RANK:8 * RANK + 8], y[8 * RANK:8 * RANK + 8]
    else:
        x_mine, y_mine = x, y
    loss_fn = torch.nn.MSELoss()
    for _ in range(steps):
        opt.zero_grad()
        for xs, ys in zip(x_mine.chunk(passes), y_mine.chunk(passes)):
            (loss_fn(model(xs), ys) / passes).backward()
        opt.step()
    with torch.no_grad():
        loss = loss_fn(model(x), y).item()
    return flat_params(model), loss


def close(a, b, rel):
    return bool(((a - b).abs() <= rel * b.abs().clamp_min(1e-12)).all())


def test_optimizer():
    # Names: duplicates and missing ones are refused.
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dup = [("w", model.weight), ("w", model.bias)]
    check(raises(lambda: hvd.DistributedOptimizer(opt, named_parameters=dup), ValueError)
          is not None, "duplicate names in named_parameters raise ValueError")
    check(raises(lambda: hvd.DistributedOptimizer(opt, named_parameters=[("w", model.weight)]),
                 ValueError) is not None, "a parameter missing from named_parameters raises")

    ref64, _ = train("ref64", torch.float64, distributed=False)
    for label, kwargs in (("float64", {}), ("backward_passes_per_step=2", {"passes": 2}),
                          ("gradient_predivide_factor=2", {"predivide": 2.0})):
        params, _ = train("run64." + label, torch.float64, True, **kwargs)
        check(identical_everywhere(params, "check.train." + label),
              "DistributedOptimizer (%s): identical parameters on every rank" % label)
        check(close(params, ref64, 1e-6), "DistributedOptimizer (%s) matches one process on "
              "the whole batch within 1e-6 (max diff %.3g)"
              % (label, (params - ref64).abs().max()))

    ref32, _ = train("ref32", torch.float32, distributed=False)
    p32, loss32 = train("run32", torch.float32, True)
    scale = float(ref32.abs().max())
    check(float((p32 - ref32).abs().max()) <= 1e-5 * scale, "float32 DistributedOptimizer "
          "matches one process within 1e-5 of the largest parameter (max diff %.3g)"
          % (p32 - ref32).abs().max())
    # Wire compression: float32 gradients cross as float16 / bfloat16, summed in float32.
    for label, comp, tol in (("fp16", hvd.Compression.fp16, 1e-3),
                             ("bf16", hvd.Compression.bf16, 2e-2)):
        params, loss = train("run32." + label, torch.float32, True, compression=comp)
        check(identical_everywhere(params, "check.train." + label),
              "Compression.%s: identical parameters on every rank" % label)
        check(abs(loss - loss32) <= tol * loss32, "Compression.%s: final loss %.6g within %g "
              "relative of float32's %.6g" % (label, loss, tol, loss32))
    # The compression happens on the wire: 1 + 2^-20 is not a float16 value.
    v = torch.full((9,), 1.0 + 2.0 ** -20)
    exact = hvd.allreduce(v, name="wire.none", op=hvd.Sum)
    packed = hvd.allreduce(v, name="wire.fp16", op=hvd.Sum, compression=hvd.Compression.fp16)
    check(same(exact, v * SIZE), "uncompressed float32 sum is exact")
    check((not torch.equal(packed, exact) or SIZE == 1) and close(packed, exact, 1e-3),
          "Compression.fp16 rounds on the wire (within 1e-3)")

    # A parameter that no backward pass reaches on odd ranks is reduced as zeros there.
    torch.manual_seed(11)
    a, b = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    params = [("unused.a." + n, p) for n, p in a.named_parameters()] + \
             [("unused.b." + n, p) for n, p in b.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=1.0),
                                   named_parameters=params, op=hvd.Sum)
    before = b.weight.detach().clone()
    out = a(torch.ones(1, 3)) if RANK % 2 else a(torch.ones(1, 3)) + b(torch.ones(1, 3))
    out.sum().backward()
    opt.step()
    users = len([r for r in range(SIZE) if r % 2 == 0])
    check(same(b.weight.detach(), before - users), "a parameter unused on some ranks")
    check(identical_everywhere(flat_params(b), "check.unused"), "unused: identical everywhere")

    # skip_synchronize, and the learning-rate warm-up on a DistributedOptimizer.
    model = torch.nn.Linear(3, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.4),
                                   named_parameters=[("skip." + n, p)
                                                     for n, p in model.named_parameters()])
    sched = hvd.LearningRateWarmup(opt, warmup_steps=4)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.zero_grad()
        model(torch.ones(2, 3) * (RANK + 1)).sum().backward()
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        with opt.skip_synchronize():
            opt.step()
        sched.step()
    want = [0.4 * (1 / SIZE + (1 - 1 / SIZE) * s / 4) for s in range(4)] + [0.4, 0.4]
    check(all(abs(a - b) < 1e-12 for a, b in zip(lrs, want)), "LearningRateWarmup linear: %s"
          % lrs)
    check(identical_everywhere(flat_params(model), "check.skip"), "skip_synchronize steps")
    sched = hvd.LearningRateWarmup(opt, warmup_steps=4, mode="exponential", last_epoch=-1)
    factors = [sched.lr_lambdas[0](s) for s in range(6)]
    want = [(1 / SIZE) ** (1 - s / 4) for s in range(4)] + [1.0, 1.0]
    check(all(abs(a - b) < 1e-12 for a, b in zip(factors, want)),
          "LearningRateWarmup exponential: %s" % factors)


TESTS = [test_job, test_allreduce, test_async, test_grouped, test_allgather, test_broadcast,
         test_alltoall, test_reducescatter, test_objects, test_mismatch, test_optimizer]


def main():
    start = time.time()
    for test in TESTS:
        t0 = time.time()
        test()
        if RANK == 0:
            print("%s: %.2fs" % (test.__name__, time.time() - t0), flush=True)
    counts = hvd.allgather_object(len(failures), name="failures")
    hvd.shutdown()
    faulthandler.cancel_dump_traceback_later()
    if any(counts):
        if failures:
            print("rank %d: %d of %d checks failed:\n  %s" % (RANK, len(failures), check.count,
                                                             "\n  ".join(failures)),
                  file=sys.stderr)
        else:
            print("rank %d: checks failed on ranks %s" % (RANK, [r for r, c in enumerate(counts)
                                                                if c]), file=sys.stderr)
        return 1
    if RANK == 0:
        print("torch_horovod: %d checks passed on each of %d ranks in %.1fs"
              % (check.count, SIZE, time.time() - start))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        print("rank %d: torch_horovod FAILED with an exception" % RANK, file=sys.stderr)
        os._exit(1)
