"""PyTorch Lightning on CPU (gloo) across nodes, with no cluster code.

    srun -N3 --ntasks-per-node=2 --torch-cluster python lightning_train.py --nodes 3 --devices 2

Lightning's SLURMEnvironment takes the rank from SLURM_PROCID and the main
address and port from MASTER_ADDR and MASTER_PORT, which the plugin sets to
rank 0's host and a port Slurm reserved for the step (left to itself it would
take the node list's first host and 15000 + the job id's last four digits).
Every rank trains the same small model on its shard of one seeded synthetic
regression data set and prints one line

    RESULT {"rank": .., "world_size": .., "first_loss": .., "last_loss": .., "weights_sha256": ..}

DDP averages the gradients, so every rank ends with identical weights.
"""

import argparse
import hashlib
import json
import os
import socket

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

STEPS = 30
BATCH = 32


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.losses = []

    def training_step(self, batch, _index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--devices", type=int, required=True)
    args = parser.parse_args()
    world = args.nodes * args.devices

    # One data set for all ranks; Lightning's DistributedSampler shards it.
    gen = torch.Generator().manual_seed(1000)
    x = torch.randn(STEPS * BATCH * world, 8, generator=gen)
    w_true = torch.arange(1.0, 9.0).unsqueeze(1) / 8
    y = x @ w_true + 0.01 * torch.randn(x.shape[0], 1, generator=gen)
    data = DataLoader(TensorDataset(x, y), batch_size=BATCH)

    model = Regression()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        num_nodes=args.nodes,
        strategy="ddp",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, data)

    cluster = trainer.strategy.cluster_environment
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().contiguous().numpy().tobytes())
    print("RESULT " + json.dumps({
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "host": socket.gethostname(),
        "environment": type(cluster).__name__,
        "main_address": cluster.main_address,
        "main_port": cluster.main_port,
        "master_addr": os.environ.get("MASTER_ADDR"),
        "master_port": os.environ.get("MASTER_PORT"),
        "steps": len(model.losses),
        "first_loss": model.losses[0],
        "last_loss": model.losses[-1],
        "weights_sha256": digest.hexdigest(),
    }), flush=True)


if __name__ == "__main__":
    main()
