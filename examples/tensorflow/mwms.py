"""MultiWorkerMirroredStrategy with a custom training loop.

No cluster code: the strategy reads TF_CONFIG, which tf-cluster set for this
task. Every worker trains the same replicated model on its share of each
global batch; gradients are all-reduced, so all end with the same weights.
"""
import hashlib
import json

import numpy as np
import tensorflow as tf

from show_resolver import show_resolver

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
show_resolver(resolver)

strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
workers = strategy.num_replicas_in_sync
global_batch = 16 * workers

# The same synthetic regression data on every worker; each takes its share.
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1)) + 0.5).astype("float32")
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch).with_options(options)
batches = iter(strategy.experimental_distribute_dataset(data))

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(8,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(1),
    ])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)


@tf.function
def train_step(batch):
    def step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            error = tf.square(model(features, training=True) - labels)
            loss = tf.nn.compute_average_loss(tf.reduce_mean(error, axis=1), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = strategy.run(step, args=(batch,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


losses = [float(train_step(next(batches))) for _ in range(20)]
weights = b"".join(v.numpy().tobytes() for v in model.trainable_variables)
print("RESULT", json.dumps({
    "task": f"{resolver.task_type}:{resolver.task_id}",
    "workers": workers,
    "first_loss": losses[0],
    "last_loss": losses[-1],
    "weights_sha256": hashlib.sha256(weights).hexdigest(),
}), flush=True)
