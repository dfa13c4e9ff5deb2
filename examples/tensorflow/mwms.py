"""TensorFlow MultiWorkerMirroredStrategy, one worker per node, no cluster code.

The strategy reads TF_CONFIG, which --tf-cluster sets for every task: the cluster (every
worker's host and a port Slurm reserved) and this task's role and index. Each worker uses the
GPUs Slurm gave its task; gradients are all-reduced over all of them. The training loop is a
custom one: Keras 3's Model.fit does not run under MultiWorkerMirroredStrategy. Replace the
model and the data with yours.

TF_CLUSTER_EXAMPLE_CPU=1 runs it on CPU: no GPU, TensorFlow's own collectives over gRPC instead
of NCCL, a tiny synthetic data set and 3 steps.
"""

import os
import socket

import numpy as np
import tensorflow as tf

CPU = os.environ.get("TF_CLUSTER_EXAMPLE_CPU") == "1"
STEPS = 3 if CPU else 1000
BATCH = 8 if CPU else 256  # per replica (per GPU)

if CPU:
    tf.config.set_visible_devices([], "GPU")
    options = tf.distribute.experimental.CommunicationOptions()
else:
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.NCCL
    )
strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
resolver = strategy.cluster_resolver  # what TF_CONFIG says
rank, workers = resolver.task_id, resolver.cluster_spec().num_tasks("worker")
global_batch = BATCH * strategy.num_replicas_in_sync

# Synthetic regression data, the same on every worker: each worker takes its share of every
# global batch (auto-sharding by data).
rng = np.random.default_rng(0)
x = rng.normal(size=(64 * BATCH, 32)).astype("float32")
y = x @ np.linspace(-1, 1, 32, dtype="float32")[:, None]
data_options = tf.data.Options()
data_options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch)
batches = iter(strategy.experimental_distribute_dataset(data.with_options(data_options)))

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(32,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)


@tf.function
def train_step(batch):
    def replica_step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            error = tf.reduce_mean(tf.square(model(features, training=True) - labels), axis=1)
            loss = tf.nn.compute_average_loss(error, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduced
        return loss

    losses = strategy.run(replica_step, args=(batch,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


for step in range(STEPS):
    loss = float(train_step(next(batches)))
    if rank == 0 and not CPU and step % 100 == 0:
        print(f"step {step}: loss {loss:.4f}", flush=True)

print(f"rank {rank}/{workers} on {socket.gethostname()}: done, loss {loss:.4f}", flush=True)
