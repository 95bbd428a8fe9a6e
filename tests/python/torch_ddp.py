"""DDP on the "chorus" backend beside DDP on gloo, from the same seeds and data: 20 steps of
SGD on a small network. Run under torchrun.

- fp32: the parameters equal gloo's bit for bit (at 2 ranks a sum of two is the same in
  any order; at more ranks chorus adds in another order than gloo's ring, and 20 steps
  of momentum carry the last bits' differences, so there they agree within 1e-4 relative), and they are the same bits on every rank.
- torch's own fp16_compress_hook on the chorus group: the same bits on every rank.
- chorus.torch.hooks.fp16_compress_hook and bf16_compress_hook: the same bits on every rank,
  every step's loss within 0.1% (fp16) and 1% (bf16) of the fp32 run's, and parameters
  that differ from the uncompressed run's (the compression is in use).
"""

import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus.torch  # noqa: F401
import chorus.torch.hooks as hooks

STEPS = 20


def network():
    torch.manual_seed(42)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 4))


TEACHER = torch.randn(32, 4, generator=torch.Generator().manual_seed(7))


def batch(step, rank):
    """16 samples whose labels a linear map of the inputs decides: learnable."""
    g = torch.Generator().manual_seed(10000 * step + rank)
    x = torch.randn(16, 32, generator=g)
    return x, (x @ TEACHER).argmax(1)


def train(group, hook=None):
    model = DDP(network(), process_group=group, bucket_cap_mb=0.005)  # several buckets
    if hook is not None:
        model.register_comm_hook(group, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(STEPS):
        x, y = batch(step, dist.get_rank())
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, group=group)
        losses.append(float(avg) / dist.get_world_size())
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), losses


def same_on_every_rank(flat):
    bits = flat.view(torch.int32)
    low, high = bits.clone(), bits.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return torch.equal(low, high)


def main():
    dist.init_process_group("chorus", timeout=timedelta(seconds=60))
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            print("rank %d: FAIL %s" % (rank, what), file=sys.stderr, flush=True)

    p_chorus, l_chorus = train(None)
    p_gloo, l_gloo = train(gloo)
    check(same_on_every_rank(p_chorus), "fp32 parameters are the same bits on every rank")
    if size == 2:
        check(torch.equal(p_chorus, p_gloo), "fp32 parameters equal gloo's bit for bit")
    else:
        rel = float(((p_chorus - p_gloo).abs() / p_gloo.abs().clamp_min(1e-3)).max())
        check(rel <= 1e-4, "fp32 parameters within 1e-4 of gloo's (max relative %.3g)" % rel)
    check(l_chorus[-1] < l_chorus[0], "the loss falls (%.4f -> %.4f)"
          % (l_chorus[0], l_chorus[-1]))
    if size == 2:
        check(l_chorus == l_gloo, "the losses equal gloo's")
    if rank == 0:
        rel = max(abs(a - b) / abs(b) for a, b in zip(l_chorus, l_gloo))
        print("fp32: worst relative loss difference from gloo's %.3g; loss %.4f -> %.4f"
              % (rel, l_chorus[0], l_chorus[-1]), flush=True)
    # torch's own hook (it casts buckets to float16 and allreduces them on the group)
    p, losses = train(None, default_hooks.fp16_compress_hook)
    check(same_on_every_rank(p), "torch's fp16_compress_hook: the same bits on every rank")
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, l_chorus))
    check(worst <= 1e-2, "torch's fp16_compress_hook: every loss within 1e-2 of fp32's "
          "(worst %.3g)" % worst)
    for name, hook, tol in (("fp16", hooks.fp16_compress_hook, 1e-3),
                            ("bf16", hooks.bf16_compress_hook, 1e-2),
                            ("uncompressed engine", hooks.allreduce_hook, 1e-5)):
        p, losses = train(None, hook)
        check(same_on_every_rank(p), "%s hook: the same bits on every rank" % name)
        if hook is not hooks.allreduce_hook:
            check(not torch.equal(p, p_chorus), "%s hook: the wire compression changed the "
                  "result's bits (it is in use)" % name)
        worst = max(abs(a - b) / abs(b) for a, b in zip(losses, l_chorus))
        check(worst <= tol, "%s hook: every loss within %g of fp32's (worst %.3g)"
              % (name, tol, worst))
        if rank == 0:
            print("%s hook: worst relative loss difference %.3g over %d steps"
                  % (name, worst, STEPS), flush=True)
    dist.destroy_process_group()
    print("rank %d: %d failed" % (rank, len(failures)), flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
