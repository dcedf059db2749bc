"""A stock DistributedDataParallel training script: a small MLP learns a fixed random teacher
network from synthetic data, on the CPU, one process per rank.

Written against PyTorch's public API only, as one would run it under torchrun::

    torchrun --nproc-per-node 2 ddp_train.py --steps 200

The testbed runs it unchanged on every host of a fabric with torchrun's environment
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...). Two lines are testbed-aware, and both do
nothing elsewhere: the backend comes from TESTBED_DIST_BACKEND ("gloo" or "mrc"; default
"gloo"), and each step is reported with testbed_job.step() when that module is importable.

Every rank draws its own batches (seed + rank) and DDP averages the gradients, so the ranks'
models stay equal; with the same seed, two backends that all-reduce the same gradients train
the same model (to float32 rounding: the backends sum in different orders). Prints one line
per step: ``step <i> loss <rank 0's training loss>``.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

try:
    import testbed_job   # mrc-testbed's step reports (stdlib only); absent outside the testbed
except ImportError:
    testbed_job = None


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def main():
    args = parse_args()
    dist.init_process_group(backend=os.environ.get("TESTBED_DIST_BACKEND", "gloo"))
    rank = dist.get_rank()
    torch.manual_seed(args.seed)
    teacher = nn.Linear(args.features, args.classes)
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.classes))
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.Generator().manual_seed(args.seed * 1000 + rank)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.features, generator=data)
        with torch.no_grad():
            y = teacher(x).argmax(dim=1)
        loss = loss_fn(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        if testbed_job is not None:
            testbed_job.step(loss=loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
