"""PyTorch FullyShardedDataParallel (FSDP), one process per GPU, no cluster code.

srun starts every process with --torch-cluster (fsdp.sbatch): MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE and LOCAL_RANK come from the environment. Each block of the model is sharded over all
ranks: parameters, gradients and optimizer state. Replace the model and the data with yours
(wrap your transformer layer class instead of Block).

TF_CLUSTER_EXAMPLE_CPU=1 runs it on CPU: gloo instead of NCCL, a tiny synthetic data set and
3 steps.
"""

import os
import socket

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

CPU = os.environ.get("TF_CLUSTER_EXAMPLE_CPU") == "1"
STEPS = 3 if CPU else 1000
BATCH = 8 if CPU else 64
WIDTH = 64 if CPU else 4096
DEPTH = 2 if CPU else 16


class Block(torch.nn.Module):
    """A residual MLP block: the unit FSDP shards (one all-gather per block)."""

    def __init__(self, width):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
        )

    def forward(self, x):
        return x + self.mlp(self.norm(x))


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
    model = torch.nn.Sequential(*[Block(WIDTH) for _ in range(DEPTH)], torch.nn.Linear(WIDTH, 1))
    # On GPUs, bf16 compute with fp32 weights and gradient reduction.
    precision = None if CPU else MixedPrecision(torch.bfloat16, torch.float32, torch.float32)
    model = FSDP(
        model,
        auto_wrap_policy=ModuleWrapPolicy({Block}),  # one FSDP unit per Block
        device_id=device,  # each shard goes there
        mixed_precision=precision,
    )
    # After wrapping: the optimizer sees the shards.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own synthetic batches
    target = torch.linspace(-1, 1, WIDTH).unsqueeze(1) / WIDTH
    loss = torch.zeros(())
    for step in range(STEPS):
        x = torch.randn(BATCH, WIDTH, generator=gen)
        y = x @ target
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        loss.backward()
        optimizer.step()
        if rank == 0 and not CPU and step % 100 == 0:
            print(f"step {step}: loss {loss.item():.4f}", flush=True)

    host = socket.gethostname()
    print(f"rank {rank}/{world} on {host}: done, loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
