"""DeepSpeed (ZeRO), one process per GPU started by srun, no cluster code.

DeepSpeed's own launcher (`deepspeed --launcher slurm`) runs srun itself with a host file. With
--torch-cluster srun starts every process directly (deepspeed.sbatch), and
deepspeed.init_distributed() reads the variables the plugin sets: RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT. Replace the model, the data and the configuration with yours.

TF_CLUSTER_EXAMPLE_CPU=1 runs it on CPU: DeepSpeed's CPU accelerator, gloo instead of NCCL,
no ZeRO partitioning, a tiny synthetic data set and 3 steps.
"""

import os
import socket

CPU = os.environ.get("TF_CLUSTER_EXAMPLE_CPU") == "1"
if CPU:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read when deepspeed is imported

import deepspeed  # noqa: E402
import torch  # noqa: E402

STEPS = 3 if CPU else 1000
BATCH = 8 if CPU else 64  # per GPU

CONFIG = {
    "train_micro_batch_size_per_gpu": BATCH,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
    # ZeRO stage 2: optimizer state and gradients sharded over all ranks.
    "zero_optimization": {"stage": 0 if CPU else 2},
    "bf16": {"enabled": not CPU},
    "steps_per_print": 100,
}


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if not CPU:
        # With --torch-cluster every process of a node sees the node's GPUs: local rank k
        # takes the k-th.
        torch.cuda.set_device(local_rank)
    deepspeed.init_distributed(dist_backend="gloo" if CPU else "nccl")
    rank = torch.distributed.get_rank()
    world = torch.distributed.get_world_size()

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)
    )
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=CONFIG
    )

    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own synthetic batches
    w = torch.linspace(-1, 1, 32).unsqueeze(1)
    dtype = torch.float32 if CPU else torch.bfloat16
    loss = torch.zeros(())
    for _ in range(STEPS):
        x = torch.randn(BATCH, 32, generator=gen)
        y = x @ w
        x, y = x.to(engine.device, dtype), y.to(engine.device, dtype)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)  # DeepSpeed reduces the gradients over all ranks
        engine.step()

    host = socket.gethostname()
    print(f"rank {rank}/{world} on {host}: done, loss {loss.item():.4f}", flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
