"""Hugging Face Accelerate on CPU (gloo) across nodes, with no cluster code.

    srun --torch-cluster bash -c 'accelerate launch --multi_gpu --num_machines $SLURM_NNODES \
        --num_processes $((SLURM_NNODES * 2)) --rdzv_backend c10d \
        --main_process_ip $MASTER_ADDR --main_process_port $MASTER_PORT accelerate_train.py'

`accelerate launch` starts torchrun's agent; Accelerator() then reads the
torchrun variables of its worker. Every process trains the same small model on
its own shard of a seeded synthetic regression problem and prints one line

    RESULT {"rank": .., "world_size": .., "first_loss": .., "last_loss": .., "weights_sha256": ..}

Accelerate averages the gradients, so every process ends with identical weights.
"""

import hashlib
import json
import os
import socket

import torch
from accelerate import Accelerator, PartialState

STEPS = 30
BATCH = 32


def main():
    # On GPU nodes Accelerate's defaults (NCCL). Without GPUs (the testbed),
    # gloo: Accelerate would otherwise take MPI where torch has it (Debian's
    # does), which only works under mpirun.
    cpu = not torch.cuda.is_available()
    PartialState(cpu=cpu, backend="gloo" if cpu else None)
    accelerator = Accelerator(cpu=cpu)
    rank, world = accelerator.process_index, accelerator.num_processes

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = accelerator.prepare(model, opt)

    gen = torch.Generator().manual_seed(1000 + rank)
    w_true = torch.arange(1.0, 9.0).unsqueeze(1) / 8
    losses = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, 8, generator=gen)
        y = x @ w_true + 0.01 * torch.randn(BATCH, 1, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        opt.step()
        losses.append(loss.item())

    digest = hashlib.sha256()
    for p in accelerator.unwrap_model(model).parameters():
        digest.update(p.detach().contiguous().numpy().tobytes())
    env = os.environ.get
    # One write per line: the node's processes share the launcher's stdout.
    line = "RESULT " + json.dumps({
        "rank": rank,
        "world_size": world,
        "host": socket.gethostname(),
        "distributed_type": str(accelerator.distributed_type),
        "local_rank": env("LOCAL_RANK"),
        "group_rank": env("GROUP_RANK"),
        "master_addr": env("MASTER_ADDR"),
        "master_port": env("MASTER_PORT"),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "weights_sha256": digest.hexdigest(),
    }) + "\n"
    os.write(1, line.encode())
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
