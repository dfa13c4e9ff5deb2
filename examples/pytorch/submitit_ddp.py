"""submitit with tf-cluster: a function trained with DistributedDataParallel
(gloo, CPU) on every task of a Slurm job that submitit writes and submits.

    python3 submitit_ddp.py --nodes 3            # --torch-cluster as #SBATCH line
    eval "$(tf-cluster launcher-env --torch-cluster)"
    python3 submitit_ddp.py --nodes 3 --no-option  # the same, from the environment

The function calls init_process_group("gloo") with no arguments: MASTER_ADDR
(rank 0's host), MASTER_PORT (a port Slurm reserved for the step), RANK and
WORLD_SIZE come from the plugin. It does not call submitit's
TorchDistributedEnvironment().export(), which refuses to run when MASTER_ADDR
is already set and, with overwrite=True, would put back the node list's
first host and a port drawn from the job id.

Prints one JSON object: each task's result (rank, host, the variables it saw,
the checksum of its trained weights) and the checksum of the same training run
here in one process (`reference`): DDP averages the gradients of equal-sized
shards, which is the gradient of the mean of the shards' losses.
"""

import argparse
import json
import os
import socket
import time

import submitit

STEPS = 20
BATCH = 16


def shard(rank, torch):
    """Rank `rank`'s data: y = x . w + rank, seeded by rank."""
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(BATCH, 8, generator=gen)
    y = x @ (torch.arange(1.0, 9.0).unsqueeze(1) / 8) + rank
    return x, y


def model(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()


def checksum(m):
    return sum(float(p.sum()) for p in m.parameters())


def train():
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    seen = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
    seen["SLURM_STEP_RESV_PORTS"] = os.environ.get("SLURM_STEP_RESV_PORTS")
    if seen["MASTER_ADDR"] is None:
        # The plugin was not turned on: nothing to meet at.
        return {"host": socket.gethostname(), "seen": seen}
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ddp = DistributedDataParallel(model(torch))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    x, y = shard(rank, torch)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x.double()), y.double()).backward()
        opt.step()
    result = {
        "rank": rank,
        "world_size": dist.get_world_size(),
        "host": socket.gethostname(),
        "seen": seen,
        "checksum": checksum(ddp.module),
    }
    dist.destroy_process_group()
    return result


def reference(world):
    """The same training in one process, over the mean of the shards' losses."""
    import torch

    m = model(torch)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    shards = [shard(r, torch) for r in range(world)]
    for _ in range(STEPS):
        opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(m(x.double()), y.double()) for x, y in shards) / world
        loss.backward()
        opt.step()
    return checksum(m)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--folder", default="submitit-%j")
    parser.add_argument(
        "--no-option",
        action="store_true",
        help="no slurm_additional_parameters: the option comes from the environment, or not at all",
    )
    parser.add_argument("--timeout", type=int, default=300, help="seconds to wait for the results")
    args = parser.parse_args()

    executor = submitit.SlurmExecutor(folder=args.folder)
    executor.update_parameters(
        job_name="submitit-ddp",
        nodes=args.nodes,
        ntasks_per_node=1,
        time=10,
        # `#SBATCH --torch-cluster` in the script submitit writes.
        additional_parameters={} if args.no_option else {"torch_cluster": True},
    )
    job = executor.submit(train)
    deadline = time.time() + args.timeout
    while not job.done() and time.time() < deadline:
        time.sleep(1)
    if not job.done():
        job.cancel()
        raise SystemExit(f"job {job.job_id}: no result after {args.timeout} s")
    print(json.dumps({"job": job.job_id, "tasks": job.results(), "reference": reference(args.nodes)}))


if __name__ == "__main__":
    main()
