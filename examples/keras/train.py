"""Keras 3 on JAX, data parallel over several hosts, one process per GPU, no cluster code.

keras.distribution.initialize() starts JAX's multi-process runtime with no argument: the
coordinator comes from JAX_COORDINATOR_ADDRESS (--jax-cluster: rank 0's host and a port Slurm
reserved for the step), the process count and id from JAX's own Slurm detection, each
process's GPU from JAX_LOCAL_DEVICE_IDS. DataParallel then replicates the model on every device
of every process; each process feeds its own share of the data. Replace the model and the data
with yours.

TF_CLUSTER_EXAMPLE_CPU=1 runs it on CPU: CPU devices, a tiny synthetic data set and 3 steps.
"""

import os
import socket

os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is imported
CPU = os.environ.get("TF_CLUSTER_EXAMPLE_CPU") == "1"
if CPU:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import keras  # noqa: E402
import numpy as np  # noqa: E402

keras.distribution.initialize()

STEPS = 3 if CPU else 1000
BATCH = 8 if CPU else 256  # per process


def main():
    import jax

    me, processes = jax.process_index(), jax.process_count()
    devices = keras.distribution.list_devices()  # every device of every process
    # Each process feeds its own share of the data (below), already split per process.
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
    )

    keras.utils.set_random_seed(0)  # the same initial weights everywhere
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")

    # This process's share of the data (a synthetic regression problem).
    rng = np.random.default_rng(1000 + me)
    x = rng.normal(size=(STEPS * BATCH, 32)).astype("float32")
    y = x @ np.linspace(-1, 1, 32, dtype="float32")[:, None]
    history = model.fit(x, y, batch_size=BATCH, epochs=1, verbose=2 if me == 0 else 0)

    loss = history.history["loss"][-1]
    host = socket.gethostname()
    print(f"rank {me}/{processes} on {host}: done, loss {loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
