"""DDP step time with the "chorus" backend beside gloo (or beside the same model trained
through chorus's Horovod-style API, --against horovod), interleaved in one job.

A model of about 25 M float32 parameters in large linear layers (so that on a small
machine the gradient allreduce, not the arithmetic, sets the step time) is trained with
DDP twice in the same processes: once on a chorus group and once on a gloo group of the
same ranks, from the same weights and data. Each repetition times STEPS steps of one,
then STEPS of the other (the order alternating between repetitions); the figure is the
median over repetitions of gloo's step time over chorus's, with the minimum and maximum.
Results are checked first: both models' parameters must agree after the warm-up.

    torchrun --standalone --nproc-per-node 2 perf/torch_ddp.py --reps 5

Across emulated nodes (tests/netns/testbed.sh, as root), where every rank gets chorus's
variables and importing chorus.torch makes torch's from them:

    tests/netns/testbed.sh --nodes 2 --ranks-per-node 2 --rate 1gbit --quiet -- \
        env GLOO_SOCKET_IFNAME=eth0 .venvs/torch/bin/python perf/torch_ddp.py --reps 5

Rank 0 prints one line per repetition and the summary; --json FILE writes them.
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus.torch as hvd
import chorus.torch.hooks as hooks


def model(width):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1024, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 1024))


def steps(ddp, opt, n, batch, rank):
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(batch, 1024, generator=g)
    start = time.perf_counter()
    for _ in range(n):
        opt.zero_grad()
        ddp(x).square().mean().backward()
        opt.step()
    return (time.perf_counter() - start) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=4096, help="hidden width (4096: 25.2 M "
                    "parameters)")
    ap.add_argument("--batch", type=int, default=8, help="samples per rank and step")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per repetition")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--hook", choices=["none", "fp16", "bf16"], default="none",
                    help="chorus side: DDP's own allreduce, or the engine with compression")
    ap.add_argument("--against", choices=["gloo", "horovod"], default="gloo",
                    help="the other side: DDP on a gloo group, or the same model trained "
                         "through chorus's Horovod-style API (hvd.DistributedOptimizer)")
    ap.add_argument("--json", help="write the figures here (rank 0)")
    args = ap.parse_args()

    # Under the test bed's CHORUS_* variables, importing chorus.torch set torch's.
    dist.init_process_group("chorus")
    rank, size = dist.get_rank(), dist.get_world_size()
    other = args.against
    sides = {"chorus": DDP(model(args.width))}
    if args.hook != "none":
        sides["chorus"].register_comm_hook(None, getattr(hooks, args.hook + "_compress_hook"))
    if other == "gloo":
        sides[other] = DDP(model(args.width), process_group=dist.new_group(backend="gloo"))
    else:
        hvd.init()
        sides[other] = model(args.width)
    opts = {name: torch.optim.SGD(m.parameters(), lr=1e-6) for name, m in sides.items()}
    if other == "horovod":
        opts[other] = hvd.DistributedOptimizer(
            opts[other], named_parameters=sides[other].named_parameters(),
            compression=getattr(hvd.Compression, args.hook if args.hook != "none" else "none"))
    sides = {name: (m, opts[name]) for name, m in sides.items()}
    nparams = sum(p.numel() for p in sides["chorus"][0].parameters())
    for name, (ddp, opt) in sides.items():
        steps(ddp, opt, args.warmup, args.batch, rank)
    if args.hook == "none":
        a, b = ([p.detach() for p in sides[s][0].parameters()] for s in ("chorus", other))
        diff = max(float((x - y).abs().max()) for x, y in zip(a, b))
        if diff > 1e-6:
            print("rank %d: the chorus and %s models disagree by %g after the warm-up"
                  % (rank, other, diff), file=sys.stderr)
            sys.exit(3)
    rows = []
    for rep in range(args.reps):
        order = ("chorus", other) if rep % 2 == 0 else (other, "chorus")
        t = {}
        for name in order:
            dist.barrier()
            t[name] = steps(*sides[name], args.steps, args.batch, rank)
        # the slowest rank's time is the step's time
        both = torch.tensor([t["chorus"], t[other]], dtype=torch.float64)
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
        rows.append({"chorus_s": float(both[0]), other + "_s": float(both[1]),
                     "speedup": float(both[1] / both[0])})
        if rank == 0:
            print("rep %d: chorus DDP %.1f ms/step, %s %.1f ms/step, %s/chorus %.2f"
                  % (rep, 1e3 * both[0], other, 1e3 * both[1], other, both[1] / both[0]),
                  flush=True)
    ratios = [r["speedup"] for r in rows]
    summary = {"ranks": size, "parameters": nparams, "batch": args.batch, "hook": args.hook,
               "against": other,
               "median_speedup": statistics.median(ratios), "min": min(ratios),
               "max": max(ratios), "rows": rows}
    if rank == 0:
        print("%d ranks, %.1f M parameters, hook %s: %s/chorus-DDP step time median %.2f "
              "(min %.2f, max %.2f) over %d repetitions"
              % (size, nparams / 1e6, args.hook, other, summary["median_speedup"],
                 min(ratios), max(ratios), args.reps))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
