"""A cross-process reduction in JAX on CPU, with no cluster code.

    srun -N3 --jax-cluster /opt/jax/bin/python allreduce.py

jax.distributed.initialize() with no arguments: the coordinator comes from
JAX_COORDINATOR_ADDRESS (tf-cluster sets it to rank 0's host and a port Slurm
reserved for the step), the process count and id from JAX's own Slurm detection
(SLURM_NTASKS, SLURM_PROCID). Process i contributes i + 1; every process prints

    RESULT {"process": .., "processes": .., "allgather": [..], "sum": .., ...}

where `sum` is reduced by XLA over a global array sharded across all processes
(a cross-process psum through JAX's CPU collectives, gloo) and `allgather`
comes from multihost_utils.process_allgather.
"""

import json
import os
import socket

import jax

jax.distributed.initialize()

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402


def main():
    me, n = jax.process_index(), jax.process_count()
    mine = np.full((jax.local_device_count(),), float(me + 1), dtype=np.float32)

    gathered = multihost_utils.process_allgather(mine)

    mesh = Mesh(np.array(jax.devices()), ("d",))
    sharding = NamedSharding(mesh, PartitionSpec("d"))
    global_array = jax.make_array_from_process_local_data(sharding, mine)
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, PartitionSpec()))(global_array)

    print("RESULT " + json.dumps({
        "process": me,
        "processes": n,
        "host": socket.gethostname(),
        "devices": jax.device_count(),
        "local_devices": jax.local_device_count(),
        "coordinator": os.environ.get("JAX_COORDINATOR_ADDRESS"),
        "allgather": np.asarray(gathered).reshape(-1).tolist(),
        "sum": float(np.asarray(total.addressable_data(0))),
        "jax": jax.__version__,
    }), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
