"""Hugging Face Accelerate, started by one `accelerate launch` per node, no cluster code.

`accelerate launch` starts one process per GPU through torchrun; Accelerator() then reads the
variables torchrun gives each of them. Replace the model and the data with yours.

TF_CLUSTER_EXAMPLE_CPU=1 runs it on CPU: gloo instead of NCCL, a tiny synthetic data set and
3 steps.
"""

import os
import socket

import torch
from accelerate import Accelerator, PartialState
from torch.utils.data import DataLoader, TensorDataset

CPU = os.environ.get("TF_CLUSTER_EXAMPLE_CPU") == "1"
EPOCHS = 1 if CPU else 10
MAX_STEPS = 3 if CPU else None
BATCH = 8 if CPU else 256


def synthetic_data(samples):
    """A regression problem: y = x . w + noise (the same on every process)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 32, generator=gen)
    y = x @ torch.linspace(-1, 1, 32).unsqueeze(1) + 0.01 * torch.randn(samples, 1, generator=gen)
    return TensorDataset(x, y)


def main():
    if CPU:
        # gloo: on CPU Accelerate would otherwise take MPI where torch has it, which only works
        # under mpirun.
        PartialState(cpu=True, backend="gloo")
    accelerator = Accelerator(cpu=CPU)
    rank, world = accelerator.process_index, accelerator.num_processes

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(synthetic_data(BATCH * 64 if CPU else 100_000), batch_size=BATCH)
    # prepare() moves the model to this process's GPU, wraps it in DDP and gives each process
    # its share of the data.
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    loss = torch.zeros(())
    for epoch in range(EPOCHS):
        for step, (x, y) in enumerate(loader):
            if MAX_STEPS is not None and step == MAX_STEPS:
                break
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.print(f"epoch {epoch}: loss {loss.item():.4f}")

    host = socket.gethostname()
    print(f"rank {rank}/{world} on {host}: done, loss {loss.item():.4f}", flush=True)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
