"""ParameterServerStrategy: one chief coordinates, ps tasks hold the variables,
workers run the steps the chief schedules.

No cluster code: every task learns its role from TF_CONFIG, which tf-cluster
set for it. The ps and worker tasks serve until the chief is gone, so the
step ends when the chief's training does.
"""
import json
import socket
import time

import numpy as np
import tensorflow as tf

from show_resolver import show_resolver

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
show_resolver(resolver)


def serve_until_chief_exits():
    """Runs this task's server; returns once the chief has come and gone."""
    tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                         task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc")
    host, port = resolver.cluster_spec().task_address("chief", 0).rsplit(":", 1)
    seen, deadline = False, time.monotonic() + 600
    while seen or time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            seen = True
        except OSError:
            if seen:
                return
        time.sleep(0.5)
    raise SystemExit(f"the chief at {host}:{port} never came up")


if resolver.task_type in ("ps", "worker"):
    serve_until_chief_exits()
    raise SystemExit(0)

# The chief: variables are created on the ps, steps run on the workers.
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(8,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(1),
    ])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)


def dataset_fn():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1024, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1)) + 0.5).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).repeat().batch(32)


batches = iter(coordinator.create_per_worker_dataset(dataset_fn))


@tf.function
def train_step(batch_iterator):
    def step(features, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features, training=True) - labels))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    features, labels = next(batch_iterator)
    return strategy.run(step, args=(features, labels))


losses = []
for _ in range(4):
    results = [coordinator.schedule(train_step, args=(batches,)) for _ in range(10)]
    coordinator.join()
    losses.append(float(np.mean([r.fetch() for r in results])))
print("RESULT", json.dumps({
    "task": f"{resolver.task_type}:{resolver.task_id}",
    "losses": losses,
    "variable_devices": sorted({v.value.device for v in model.trainable_variables}),
}), flush=True)
