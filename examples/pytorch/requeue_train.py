"""DDP under elastic torchrun that resumes from its checkpoint: after torchrun restarted its
workers, and in a requeued job's next incarnation.

    torchrun --nproc_per_node=N requeue_train.py CHECKPOINT_DIR

Asked to stop (the batch script creates CHECKPOINT_DIR/stop.K in incarnation K, K being
SLURM_RESTART_COUNT, 0 in the first), the ranks agree on one step, rank 0 saves it, and every
rank ends with 0: requeue.sbatch's task then exits with its requeue code. Every rank looks for
the file at every step and the ranks take the largest answer, so the rank on the batch script's
node sees it at once, whatever a shared file system's cache shows the others.

Rank 0 saves the model, the optimizer and the step to CHECKPOINT_DIR/checkpoint.pt every few
steps (written to a temporary file, then renamed: a kill never leaves half a checkpoint). At
start rank 0 alone reads it and sends what it read to every rank, so all resume from the same
step: a rank that read the file itself could see an older copy (a shared file system's cache, a
save in between) and wait for the others at another step for ever. CHECKPOINT_DIR must be the same in every incarnation and reachable
from every node: the batch script names it after the job id, which a requeue keeps.
TF_CLUSTER_RUN_ID (JOB.STEP, JOB.STEP.r1 after the first requeue, …) names what belongs to one
incarnation only, here its log line. Replace the model and the data with yours.

TF_CLUSTER_EXAMPLE_CPU=1 runs it on CPU (gloo): a tiny synthetic data set and 60 slow steps
(0.2 s each), a checkpoint every 5, so that a test can requeue it in the middle.
"""

import os
import socket
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

CPU = os.environ.get("TF_CLUSTER_EXAMPLE_CPU") == "1"
STEPS = 60 if CPU else 100_000
EVERY = 5 if CPU else 500  # steps between checkpoints
BATCH = 32


def main():
    checkpoint = os.path.join(sys.argv[1], "checkpoint.pt")
    local_rank = int(os.environ["LOCAL_RANK"])
    if CPU:
        dist.init_process_group("gloo")
        device = torch.device("cpu")
    else:
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        device = torch.device("cuda", local_rank)
    rank, world = dist.get_rank(), dist.get_world_size()
    host = socket.gethostname()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    # Rank 0 decides where to resume, every rank takes its word (None: from the start). A large
    # model would rather send the step alone and have each rank load that step's own file.
    state = [None]
    if rank == 0 and os.path.exists(checkpoint):
        state = [torch.load(checkpoint, map_location="cpu")]
    dist.broadcast_object_list(state, src=0)
    if state[0] is not None:
        model.load_state_dict(state[0]["model"])
        opt.load_state_dict(state[0]["optimizer"])
        step = state[0]["step"]
    del state
    ddp = DistributedDataParallel(model)
    # TF_CLUSTER_RUN_ID and torchrun's rendezvous id (PET_RDZV_ID): one per incarnation.
    run_id = os.environ.get("TF_CLUSTER_RUN_ID", "")
    rdzv_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    print(f"rank {rank}/{world} on {host}: starting at step {step} of {STEPS}, run {run_id}, "
          f"rendezvous {rdzv_id}", flush=True)

    stop_file = os.path.join(sys.argv[1], "stop." + os.environ.get("SLURM_RESTART_COUNT", "0"))
    stop = torch.zeros(1, device=device)

    gen = torch.Generator().manual_seed(1000 + rank)
    w_true = torch.arange(1.0, 9.0).unsqueeze(1) / 8
    loss = torch.tensor(float("nan"))
    while step < STEPS:
        x = torch.randn(BATCH, 8, generator=gen)
        y = x @ w_true + 0.01 * torch.randn(BATCH, 1, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        step += 1
        # Asked to stop: every rank at this same step (the largest answer of all ranks).
        stop.fill_(1.0 if os.path.exists(stop_file) else 0.0)
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        stopping = stop.item() > 0
        if rank == 0 and (step % EVERY == 0 or stopping):
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
            torch.save(state, checkpoint + ".tmp")
            os.replace(checkpoint + ".tmp", checkpoint)
            print(f"step {step}: loss {loss.item():.4f}, saved", flush=True)
        if stopping:
            print(f"rank {rank}/{world} on {host}: stopped at step {step}", flush=True)
            break
        if CPU:
            time.sleep(0.2)
    else:
        print(f"rank {rank}/{world} on {host}: done, loss {loss.item():.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
