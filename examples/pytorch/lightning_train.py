"""PyTorch Lightning, one process per GPU started by srun, no cluster code.

Lightning's SLURMEnvironment takes each process's rank from Slurm and the main address and port
from MASTER_ADDR and MASTER_PORT, which --torch-cluster sets to rank 0's host and a port Slurm
reserved for the step (left to itself: the node list's first host and a port derived from the
job id, the same for every step of the job). Replace the model and the data with yours.

TF_CLUSTER_EXAMPLE_CPU=1 runs it on CPU: gloo instead of NCCL, a tiny synthetic data set and
3 steps.
"""

import os
import socket

import torch
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as pl
except ImportError:  # the standalone package, pytorch-lightning
    import pytorch_lightning as pl

CPU = os.environ.get("TF_CLUSTER_EXAMPLE_CPU") == "1"
BATCH = 8 if CPU else 256


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
        )
        self.last_loss = float("nan")

    def training_step(self, batch, _index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.last_loss = loss.item()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def synthetic_data(samples):
    """A regression problem: y = x . w + noise (the same on every rank)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 32, generator=gen)
    y = x @ torch.linspace(-1, 1, 32).unsqueeze(1) + 0.01 * torch.randn(samples, 1, generator=gen)
    return TensorDataset(x, y)


def main():
    torch.manual_seed(0)
    # Lightning wants devices = the tasks per node and num_nodes = the nodes, as Slurm has them.
    trainer = pl.Trainer(
        accelerator="cpu" if CPU else "gpu",
        devices=int(os.environ["SLURM_NTASKS_PER_NODE"]),
        num_nodes=int(os.environ["SLURM_NNODES"]),
        strategy="ddp",
        max_epochs=10,
        max_steps=3 if CPU else -1,
        logger=not CPU,
        enable_checkpointing=not CPU,
        enable_progress_bar=False,
    )
    # Lightning gives each rank its share of the data (a DistributedSampler).
    data = DataLoader(synthetic_data(BATCH * 64 if CPU else 100_000), batch_size=BATCH)
    model = Regression()
    trainer.fit(model, data)
    print(
        f"rank {trainer.global_rank}/{trainer.world_size} on {socket.gethostname()}: "
        f"done, loss {model.last_loss:.4f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
