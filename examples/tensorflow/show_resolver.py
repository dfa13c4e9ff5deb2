"""Prints what TFConfigClusterResolver read from TF_CONFIG, as one line:
RESOLVER {"cluster": …, "task_type": …, "task_id": …, "rpc_layer": …, "master": …}

Shared by mwms.py, ps.py and evaluator.py; keep it beside them (Python finds it in the
script's directory).
"""
import json


def show_resolver(resolver):
    """Prints the cluster, role, index, rpc layer and master the resolver sees.

    A side-car evaluator is not in the cluster, and master() raises for it:
    its master is then null."""
    try:
        master = resolver.master()
    except ValueError:
        master = None
    print("RESOLVER", json.dumps({
        "cluster": resolver.cluster_spec().as_dict(),
        "task_type": resolver.task_type,
        "task_id": resolver.task_id,
        "rpc_layer": resolver.rpc_layer,
        "master": master,
    }), flush=True)
