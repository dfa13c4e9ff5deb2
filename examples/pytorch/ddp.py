"""DistributedDataParallel on CPU (gloo), with no cluster code.

    srun -N3 --ntasks-per-node=2 --torch-cluster python3 ddp.py

init_process_group("gloo") takes everything from the environment (the torchrun
contract: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), as tf-cluster sets it.
Every rank trains the same small model on its own shard of a seeded synthetic
regression problem and prints one line

    RESULT {"rank": .., "world_size": .., "first_loss": .., "last_loss": .., "weights_sha256": ..}

with the torchrun variables it saw. DDP averages the gradients, so every rank
ends with identical weights.
"""

import argparse
import hashlib
import json
import os
import socket
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

STEPS = 30
BATCH = 32


def main():
    # --wait-for PATH (tests only): after training, keep the process group, and
    # so rank 0's store on MASTER_PORT, alive until PATH exists (at most 480 s:
    # the other step starts torch on a loaded machine meanwhile).
    parser = argparse.ArgumentParser()
    parser.add_argument("--wait-for", metavar="PATH")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initial model everywhere (DDP broadcasts it anyway)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)

    # Each rank's own data: y = x . w_true + noise, seeded by rank.
    gen = torch.Generator().manual_seed(1000 + rank)
    w_true = torch.arange(1.0, 9.0).unsqueeze(1) / 8
    losses = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, 8, generator=gen)
        y = x @ w_true + 0.01 * torch.randn(BATCH, 1, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().contiguous().numpy().tobytes())
    env = os.environ.get
    print("RESULT " + json.dumps({
        "rank": rank,
        "world_size": world,
        "host": socket.gethostname(),
        "local_rank": env("LOCAL_RANK"),
        "local_world_size": env("LOCAL_WORLD_SIZE"),
        "group_rank": env("GROUP_RANK"),
        "group_world_size": env("GROUP_WORLD_SIZE"),
        "master_addr": env("MASTER_ADDR"),
        "master_port": env("MASTER_PORT"),
        # What the plugin gave the launcher (torchrun's agent passes it on), and
        # the ports Slurm reserved for this step: which of them the rendezvous used.
        "pet_master_addr": env("PET_MASTER_ADDR"),
        "pet_master_port": env("PET_MASTER_PORT"),
        "pet_rdzv_id": env("PET_RDZV_ID"),
        "resv_ports": env("SLURM_STEP_RESV_PORTS"),
        "job_id": env("SLURM_JOB_ID"),
        "torch": torch.__version__,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "weights_sha256": digest.hexdigest(),
    }), flush=True)
    dist.barrier()
    if args.wait_for:
        deadline = time.monotonic() + 480
        while not os.path.exists(args.wait_for) and time.monotonic() < deadline:
            time.sleep(0.2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
