"""The driver `tf-cluster ray` runs on the head's node: ray.init() reads RAY_ADDRESS, set by
--ray-cluster. One task per node, on its GPUs if the node has some."""

import os
import socket

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()
nodes = [n for n in ray.nodes() if n["Alive"]]
gpus = int(ray.cluster_resources().get("GPU", 0))
print(f"{len(nodes)} Ray nodes, {gpus} GPUs; head at {os.environ['RAY_ADDRESS']}", flush=True)


@ray.remote(num_gpus=1 if gpus and not os.environ.get("TF_CLUSTER_EXAMPLE_CPU") else 0)
def where():
    return socket.gethostname(), ray.util.get_node_ip_address(), os.environ.get(
        "CUDA_VISIBLE_DEVICES", "")


strategy = NodeAffinitySchedulingStrategy
for host, address, visible in ray.get(
    [where.options(scheduling_strategy=strategy(n["NodeID"], soft=False)).remote() for n in nodes]
):
    print(f"{host}: Ray node {address}, GPUs {visible or 'none'}", flush=True)
