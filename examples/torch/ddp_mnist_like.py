"""A small convolutional network trained with DistributedDataParallel on generated
28x28 images of 10 classes: the torch.distributed backend "chorus" in a real training
loop. The same seeds and data give the same losses with --backend gloo.

    torchrun --nproc-per-node 2 examples/torch/ddp_mnist_like.py --backend chorus

Rank 0 prints one line per step: the step and the loss averaged over the ranks.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = nn.Linear(16 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def images(step, rank, batch, prototypes):
    """batch noisy copies of the 10 class prototypes: a task the network can learn."""
    g = torch.Generator().manual_seed(100003 * step + rank)
    labels = torch.randint(0, 10, (batch,), generator=g)
    x = prototypes[labels] + 0.5 * torch.randn(batch, 1, 28, 28, generator=g)
    return x, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="chorus", help="chorus (default) or gloo")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    if args.backend == "chorus":
        import chorus.torch  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()

    torch.manual_seed(0)  # the same initial weights on every rank and with every backend
    model = DDP(Net())
    prototypes = torch.randn(10, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for step in range(args.steps):
        x, y = images(step, rank, args.batch, prototypes)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            print("step %3d loss %.6f" % (step, float(mean) / dist.get_world_size()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
