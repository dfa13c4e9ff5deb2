"""JAX multi-host data parallelism, one process per GPU started by srun, no cluster code.

jax.distributed.initialize() takes no argument: the coordinator comes from
JAX_COORDINATOR_ADDRESS (--jax-cluster: rank 0's host and a port Slurm reserved for the step),
the process count and id from JAX's own Slurm detection, each process's GPU from
JAX_LOCAL_DEVICE_IDS. The batch is sharded over every device of every process, the parameters
are replicated, and XLA reduces the gradients across processes. Replace the model and the data
with yours.

JAX reads JAX_LOCAL_DEVICE_IDS from 0.4.32 on (jax/_src/distributed.py: 0.4.31 does not, 0.4.32
to 0.10.2 do). An older JAX ignores it and takes device SLURM_LOCALID, wrong with several GPUs
per process: pass the plugin's list yourself,
    jax.distributed.initialize(local_device_ids=[int(i) for i in
                                                 os.environ["JAX_LOCAL_DEVICE_IDS"].split(",")])

TF_CLUSTER_EXAMPLE_CPU=1 runs it on CPU: CPU devices (JAX's CPU collectives), a tiny synthetic
data set and 3 steps.
"""

import os
import socket

import jax

CPU = os.environ.get("TF_CLUSTER_EXAMPLE_CPU") == "1"
if CPU:
    jax.config.update("jax_platforms", "cpu")
jax.distributed.initialize()

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

STEPS = 3 if CPU else 1000
BATCH = 8 if CPU else 256  # per device
FEATURES = 32


def init_params():
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "w1": jax.random.normal(k1, (FEATURES, 64)) / jnp.sqrt(FEATURES),
        "b1": jnp.zeros(64),
        "w2": jax.random.normal(k2, (64, 1)) / 8.0,
        "b2": jnp.zeros(1),
    }


def loss_fn(params, x, y):
    hidden = jax.nn.relu(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def main():
    me, processes = jax.process_index(), jax.process_count()
    mesh = Mesh(np.array(jax.devices()), ("data",))  # every device of every process
    replicated = NamedSharding(mesh, PartitionSpec())
    by_batch = NamedSharding(mesh, PartitionSpec("data"))

    params = jax.jit(init_params, out_shardings=replicated)()

    def step_fn(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params = jax.tree.map(lambda p, g: p - 0.05 * g, params, grads)
        return params, loss

    train_step = jax.jit(step_fn, out_shardings=(replicated, replicated))

    rng = np.random.default_rng(1000 + me)  # each process its own synthetic batches
    w = np.linspace(-1, 1, FEATURES, dtype=np.float32)[:, None]
    local = BATCH * jax.local_device_count()
    loss = jnp.zeros(())
    for step in range(STEPS):
        x = rng.normal(size=(local, FEATURES)).astype(np.float32)
        y = x @ w
        # This process's rows of the global batch, on its own devices.
        gx = jax.make_array_from_process_local_data(by_batch, x)
        gy = jax.make_array_from_process_local_data(by_batch, y)
        params, loss = train_step(params, gx, gy)
        if me == 0 and not CPU and step % 100 == 0:
            print(f"step {step}: loss {float(loss.addressable_data(0)):.4f}", flush=True)

    # The loss is replicated: every process holds a copy on its own devices.
    value, host = float(loss.addressable_data(0)), socket.gethostname()
    print(f"rank {me}/{processes} on {host}: done, loss {value:.4f}", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
