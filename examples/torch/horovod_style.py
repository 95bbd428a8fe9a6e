"""A Horovod-style training loop on chorus: a small regression model on generated data.

    chorus-run -n 2 python examples/torch/horovod_style.py --steps 20
    torchrun --nproc-per-node 2 examples/torch/horovod_style.py

Each rank trains on its own shard of the data; hvd.DistributedOptimizer averages the
gradients over the ranks (through chorus's engine, as each one is ready), so every rank
holds the same model. The learning rate is scaled by the number of ranks and warmed up to
it over the first steps. Rank 0 prints the loss over all ranks' batches at every step.
"""

import argparse
import time

import torch

import chorus.torch as hvd


def make_data(samples, features, seed):
    """Inputs and targets of a fixed nonlinear function, with noise; alike on every rank."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(samples, 1, generator=g)
    return x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps (default 20)")
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank and step")
    parser.add_argument("--lr", type=float, default=0.02, help="learning rate of one rank")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up steps (default 5)")
    parser.add_argument("--compression", choices=["none", "fp16", "bf16"], default="none",
                        help="wire compression of the gradients")
    parser.add_argument("--backward-passes", type=int, default=1,
                        help="backward passes per step (gradient accumulation)")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(1234 + hvd.rank())     # different initial weights on purpose
    features = 16
    model = torch.nn.Sequential(torch.nn.Linear(features, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=getattr(hvd.Compression,
                                                             args.compression),
                                         backward_passes_per_step=args.backward_passes)
    # Start every rank from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    scheduler = hvd.LearningRateWarmup(optimizer, warmup_steps=args.warmup)

    x, y = make_data(args.steps * args.batch_size * hvd.size(), features, seed=7)
    loss_fn = torch.nn.MSELoss()
    if hvd.rank() == 0:
        print("%d ranks, %d steps of %d samples per rank, compression %s"
              % (hvd.size(), args.steps, args.batch_size, args.compression), flush=True)
    start = time.time()
    for step in range(args.steps):
        first = (step * hvd.size() + hvd.rank()) * args.batch_size
        xb, yb = x[first:first + args.batch_size], y[first:first + args.batch_size]
        lr = optimizer.param_groups[0]["lr"]      # the rate of this step
        optimizer.zero_grad()
        for xs, ys in zip(xb.chunk(args.backward_passes), yb.chunk(args.backward_passes)):
            loss = loss_fn(model(xs), ys) / args.backward_passes
            loss.backward()
        optimizer.step()
        scheduler.step()
        with torch.no_grad():
            mine = loss_fn(model(xb), yb)
        mean = hvd.allreduce(mine, name="loss", op=hvd.Average)
        if hvd.rank() == 0:
            print("step %3d  lr %.4f  loss %.6f" % (step, lr, mean.item()), flush=True)

    # Every rank ends with the same weights.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0), name="final_weights")
    same = all(torch.equal(every[r], every[0]) for r in range(hvd.size()))
    if hvd.rank() == 0:
        print("done in %.2fs; weights identical on every rank: %s"
              % (time.time() - start, same), flush=True)
    hvd.shutdown()
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
