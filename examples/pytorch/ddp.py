"""PyTorch DistributedDataParallel, one process per GPU, no cluster code.

Started by srun with --torch-cluster (ddp.sbatch) or by torchrun (torchrun.sbatch): either way
every process finds MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK in its
environment, so init_process_group() needs no argument. Replace the model and the data with
yours.

TF_CLUSTER_EXAMPLE_CPU=1 runs it on CPU: gloo instead of NCCL, a tiny synthetic data set and
3 steps.
"""

import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

CPU = os.environ.get("TF_CLUSTER_EXAMPLE_CPU") == "1"
EPOCHS = 1 if CPU else 10
MAX_STEPS = 3 if CPU else None
BATCH = 8 if CPU else 256


def synthetic_data(samples):
    """A regression problem: y = x . w + noise (the same on every rank)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 32, generator=gen)
    y = x @ torch.linspace(-1, 1, 32).unsqueeze(1) + 0.01 * torch.randn(samples, 1, generator=gen)
    return TensorDataset(x, y)


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if CPU:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        # With --torch-cluster every process of a node sees the node's GPUs: local rank k
        # takes the k-th.
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    ).to(device)
    model = DistributedDataParallel(model, device_ids=None if CPU else [local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    data = synthetic_data(BATCH * world * 3 if CPU else 100_000)
    sampler = DistributedSampler(data)  # each rank its own share
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)

    loss = torch.zeros(())
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            if MAX_STEPS is not None and step == MAX_STEPS:
                break
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()  # DDP averages the gradients over all ranks
            optimizer.step()
        if rank == 0 and not CPU:
            print(f"epoch {epoch}: loss {loss.item():.4f}", flush=True)

    host = socket.gethostname()
    print(f"rank {rank}/{world} on {host}: done, loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
