#!/usr/bin/python3
"""One rank of the torch.distributed gloo side of perf/compare.py (and compare_gloo.py).

Started N times by compare.py with /usr/bin/python3 (Debian's python3-torch lives
there).  Every rank checks each size once on known values, then times warmup + iters
calls rotating over several buffers, and the slowest rank's average time per call is
what rank 0 reports, as chorus-perf does.  Rank 0 writes one JSON object to --out.

Exit codes: 0 ok, 3 wrong results (still written to --out), 4 torch missing,
5 this torch's gloo has no such collective, 1 any other failure.
"""

import argparse
import datetime
import json
import os
import sys
import time

EXIT_WRONG = 3
EXIT_NO_TORCH = 4
EXIT_UNSUPPORTED = 5
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
BLOCKED = ("allgather", "reduce_scatter", "alltoall")  # sizes: whole buffers of world blocks
TWO_BUFFERS = ("allgather", "reduce_scatter", "alltoall")  # out of place: input and output
CHECK_PERIOD = 13  # pattern length of the check values; small integers sum exactly


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--coll", choices=COLLECTIVES, default="allreduce")
    p.add_argument("--sizes", required=True,
                   help="comma-separated whole-message sizes in bytes")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--buffers", type=int, default=4)
    p.add_argument("--max-buffer-mem", type=int, default=1536 << 20,
                   help="bytes of rotating buffers per rank and size at most")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds any gloo call may last")
    p.add_argument("--out", help="where rank 0 writes its JSON results")
    return p.parse_args(argv)


def pattern(torch, count, offset):
    """(i % CHECK_PERIOD) + offset as float32, exact for the values used here."""
    return (torch.arange(count, dtype=torch.int64) % CHECK_PERIOD).to(torch.float32) + offset


A2A_MAX_WORLD = 1024  # 16 (src world + dst) + 12 stays below 2^24, exact in float32


def a2a_block(torch, count, src, dst, world):
    """Alltoall's check values: what rank src sends to rank dst names both of them."""
    return pattern(torch, count, 16 * (src * world + dst))


class Case:
    """Buffers and one call of a collective for one size (float32, sum)."""

    def __init__(self, torch, dist, coll, size, world, rank, nbuf):
        self.torch, self.dist, self.coll = torch, dist, coll
        self.world, self.rank = world, rank
        if coll in BLOCKED:
            self.count = size // 4 // world  # per rank, as chorus-perf counts it
            self.bytes = self.count * 4 * world
        else:
            self.count = size // 4
            self.bytes = self.count * 4
        if self.count < 1:
            raise ValueError("size %d is too small for %s on %d ranks" % (size, coll, world))
        self.nbuf = nbuf
        self.bufs = [torch.empty(self.count, dtype=torch.float32) for _ in range(nbuf)]
        if coll == "allgather":
            self.outs = [torch.empty(self.count * world, dtype=torch.float32)
                         for _ in range(nbuf)]
            self.views = [list(o.chunk(world)) for o in self.outs]
            self.into_tensor = hasattr(dist, "all_gather_into_tensor")
        if coll == "reduce_scatter":
            # out of place: each rank's whole input, and its block of the sum
            self.ins = [torch.empty(self.count * world, dtype=torch.float32)
                        for _ in range(nbuf)]
            self.in_views = [list(t.chunk(world)) for t in self.ins]
        if coll == "alltoall":
            if world > A2A_MAX_WORLD:
                raise ValueError("alltoall checks up to %d ranks exactly" % A2A_MAX_WORLD)
            if not hasattr(dist, "all_to_all_single"):
                raise Unsupported("torch.distributed has no all_to_all_single")
            # out of place, as all_to_all_single takes it: count elements to every peer
            self.ins = [torch.empty(self.count * world, dtype=torch.float32)
                        for _ in range(nbuf)]
            self.outs = [torch.empty(self.count * world, dtype=torch.float32)
                         for _ in range(nbuf)]

    def fill(self, k):
        """Known inputs in buffer k (and a poison value where results land)."""
        b = self.bufs[k]
        if self.coll == "allreduce":
            b.copy_(pattern(self.torch, self.count, self.rank))
        elif self.coll == "broadcast":
            if self.rank == 0:
                b.copy_(pattern(self.torch, self.count, 1))
            else:
                b.fill_(-1.0)
        elif self.coll == "reduce_scatter":
            self.ins[k].copy_(pattern(self.torch, self.count * self.world, self.rank))
            b.fill_(-1.0)
        elif self.coll == "alltoall":
            for j, block in enumerate(self.ins[k].chunk(self.world)):
                block.copy_(a2a_block(self.torch, self.count, self.rank, j, self.world))
            self.outs[k].fill_(-1.0)
        else:
            b.copy_(pattern(self.torch, self.count, 100 * self.rank))
            self.outs[k].fill_(-1.0)

    def wrong(self, k):
        """Elements of buffer k's result that differ from the exact answer."""
        torch, n = self.torch, self.world
        if self.coll == "allreduce":
            want = pattern(torch, self.count, 0) * n + n * (n - 1) // 2
            return int((self.bufs[k] != want).sum())
        if self.coll == "broadcast":
            return int((self.bufs[k] != pattern(torch, self.count, 1)).sum())
        if self.coll == "reduce_scatter":
            whole = pattern(torch, self.count * n, 0) * n + n * (n - 1) // 2
            mine = whole[self.rank * self.count:(self.rank + 1) * self.count]
            return int((self.bufs[k] != mine).sum())
        if self.coll == "alltoall":
            # block j of the output holds what rank j sent to this rank
            return sum(int((block != a2a_block(torch, self.count, j, self.rank, n)).sum())
                       for j, block in enumerate(self.outs[k].chunk(n)))
        bad = 0
        for j, view in enumerate(self.views[k]):
            bad += int((view != pattern(torch, self.count, 100 * j)).sum())
        return bad

    def call(self, k):
        dist = self.dist
        if self.coll == "allreduce":
            dist.all_reduce(self.bufs[k], op=dist.ReduceOp.SUM)
        elif self.coll == "broadcast":
            dist.broadcast(self.bufs[k], src=0)
        elif self.coll == "reduce_scatter":
            dist.reduce_scatter(self.bufs[k], self.in_views[k], op=dist.ReduceOp.SUM)
        elif self.coll == "alltoall":
            dist.all_to_all_single(self.outs[k], self.ins[k])
        elif self.into_tensor:
            try:
                dist.all_gather_into_tensor(self.outs[k], self.bufs[k])
            except RuntimeError:
                # gloo in some torch versions has no flat allgather: use the list form
                self.into_tensor = False
                dist.all_gather(self.views[k], self.bufs[k])
        else:
            dist.all_gather(self.views[k], self.bufs[k])

    def method(self):
        if self.coll == "allgather":
            return "all_gather_into_tensor" if self.into_tensor else \
                "all_gather(list of views of one output tensor)"
        if self.coll == "reduce_scatter":
            return "reduce_scatter(SUM, list of views of one input tensor)"
        if self.coll == "alltoall":
            return "all_to_all_single(output, input), equal splits, out of place"
        return "all_reduce(SUM, in place)" if self.coll == "allreduce" else \
            "broadcast(src=0, in place)"


def nbuf_for(args, size):
    per = size * (2 if args.coll in TWO_BUFFERS else 1)
    return max(1, min(args.buffers, args.max_buffer_mem // max(per, 1)))


class Unsupported(Exception):
    """This torch's gloo backend has no such collective."""


def run_size(torch, dist, args, size):
    case = Case(torch, dist, args.coll, size, args.world, args.rank, nbuf_for(args, size))
    # correctness first, in its own call, summed over ranks
    case.fill(0)
    try:
        case.call(0)
    except RuntimeError as e:
        # torch refuses before any traffic, on every rank alike
        if "not support" in str(e):
            raise Unsupported(str(e).splitlines()[0]) from e
        raise
    bad = torch.tensor([case.wrong(0)], dtype=torch.int64)
    dist.all_reduce(bad, op=dist.ReduceOp.SUM)
    # timed calls run on check values too, so no NaN or denormal skews them
    for k in range(case.nbuf):
        case.fill(k)
    for i in range(args.warmup):
        case.call(i % case.nbuf)
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(args.iters):
        case.call(i % case.nbuf)
    local_us = (time.perf_counter() - t0) * 1e6 / args.iters
    t = torch.tensor([local_us], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return {"size": case.bytes, "count": case.count, "buffers": case.nbuf,
            "time_us": float(t[0]), "rank0_time_us": local_us,
            "wrong": int(bad[0]), "method": case.method()}


def write_out(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def main(argv):
    args = parse_args(argv)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print("gloo_worker: torch is not importable by %s: %s" % (sys.executable, e),
              file=sys.stderr)
        return EXIT_NO_TORCH
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set by someone; recorded below as what it is
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port,
                            rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    rows = []
    for s in (int(x) for x in args.sizes.split(",") if x):
        try:
            rows.append(run_size(torch, dist, args, s))
        except Unsupported as e:
            print("gloo_worker: unsupported: torch %s gloo: %s" % (torch.__version__, e),
                  file=sys.stderr, flush=True)
            return EXIT_UNSUPPORTED
        if args.rank == 0:
            print("gloo %s %d B: %.2f us, wrong %d" % (args.coll, rows[-1]["size"],
                  rows[-1]["time_us"], rows[-1]["wrong"]), file=sys.stderr, flush=True)
    dist.barrier()
    dist.destroy_process_group()
    wrong_total = sum(r["wrong"] for r in rows)
    if args.rank == 0 and args.out:
        write_out(args.out, {
            "nranks": args.world, "collective": args.coll, "results": rows,
            "wrong_total": wrong_total,
            "torch_version": torch.__version__,
            "torch_num_threads": torch.get_num_threads(),
            "torch_num_interop_threads": torch.get_num_interop_threads(),
            "gloo_socket_ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
            "python": sys.executable,
        })
    return EXIT_WRONG if wrong_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
