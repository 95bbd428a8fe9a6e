"""FSDP (torch's fully_shard) on the "chorus" backend: 5 steps of a small network whose
layers are sharded over the ranks, so each step all-gathers the parameters and
reduce-scatters the gradients (all_gather_into_tensor, reduce_scatter_tensor and their
coalesced forms). The reference is the same network trained in one process on every
rank's batch at once (FSDP averages the ranks' gradients, which is the gradient of the
whole batch's mean loss): the full parameters must agree with it within 1e-5 and be the
same bits on every rank. Run under torchrun.
"""

import copy
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

import chorus.torch  # noqa: F401

STEPS = 5


def batch(step, rank):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 16, generator=g)


def main():
    dist.init_process_group("chorus")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 33), nn.ReLU(), nn.Linear(33, 7))  # odd sizes
    alone = copy.deepcopy(model)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_alone = torch.optim.SGD(alone.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        loss = model(batch(step, rank)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        whole = torch.cat([batch(step, r) for r in range(size)])
        opt_alone.zero_grad()
        alone(whole).square().mean().backward()
        opt_alone.step()
    full = torch.cat([p.full_tensor().reshape(-1) for p in model.parameters()])
    want = torch.cat([p.detach().reshape(-1) for p in alone.parameters()])
    rel = float(((full - want).abs() / want.abs().clamp_min(1e-3)).max())
    bits = full.view(torch.int32)
    low, high = bits.clone(), bits.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    failed = []
    if not torch.equal(low, high):
        failed.append("the full parameters differ between ranks")
    if not rel <= 1e-5:
        failed.append("the parameters differ from one process's on the whole batch by %.3g "
                      "(relative)" % rel)
    if rank == 0:
        print("FSDP at %d ranks, %d steps: parameters within %.3g of one process's" %
              (size, STEPS, rel), flush=True)
    for f in failed:
        print("rank %d: FAIL %s" % (rank, f), file=sys.stderr, flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
