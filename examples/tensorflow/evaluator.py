"""Side-car evaluation: the chief and the workers train with
MultiWorkerMirroredStrategy and write checkpoints; the evaluator reads them.

    python evaluator.py CHECKPOINT_DIR     (a directory every node sees)

No cluster code: every task learns its role from TF_CONFIG, which tf-cluster
set for it (`--tf-cluster=chief:1,worker:2,evaluator:1`). The evaluator is not
part of the cluster: it never joins the training, it only reads what the chief
saved (Keras 3, TensorFlow 2.21's Keras, has no SidecarEvaluator: the loop
over tf.train.latest_checkpoint below is what it did).
"""
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

from show_resolver import show_resolver

STEPS, EVERY = 20, 10
checkpoint_dir = sys.argv[1]

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
show_resolver(resolver)

# The same synthetic regression data everywhere (as mwms.py).
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1)) + 0.5).astype("float32")


def make_model():
    return tf.keras.Sequential([
        tf.keras.Input(shape=(8,)),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(1),
    ])


def evaluate():
    """The side-car: evaluates every new checkpoint until the last one."""
    model = make_model()
    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=model, step=step)
    mse = lambda: float(tf.reduce_mean(tf.square(model(x) - y)))
    untrained, evaluations, seen = mse(), [], None
    deadline = time.monotonic() + 600
    while int(step) < STEPS:
        latest = tf.train.latest_checkpoint(checkpoint_dir)
        if latest is None or latest == seen:
            if time.monotonic() > deadline:
                raise SystemExit(f"no checkpoint of step {STEPS} in {checkpoint_dir}")
            time.sleep(0.5)
            continue
        checkpoint.restore(latest).expect_partial()
        seen = latest
        evaluations.append({"checkpoint": os.path.basename(latest), "step": int(step), "loss": mse()})
    print("RESULT", json.dumps({
        "task": f"{resolver.task_type}:{resolver.task_id}",
        "untrained_loss": untrained,
        "evaluations": evaluations,
    }), flush=True)


def train():
    """Chief and workers: synchronous training; every task saves (the save may
    run collectives), the chief into checkpoint_dir, the others into a
    directory of their own that is removed."""
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)
    global_batch = 16 * strategy.num_replicas_in_sync
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch).with_options(options)
    batches = iter(strategy.experimental_distribute_dataset(data))
    with strategy.scope():
        model = make_model()
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
    step = tf.Variable(0, dtype=tf.int64)  # a plain variable: the step count
    checkpoint = tf.train.Checkpoint(model=model, step=step)
    chief = resolver.task_type == "chief"
    directory = checkpoint_dir if chief else tempfile.mkdtemp()
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=None)

    @tf.function
    def train_step(batch):
        def replica_step(inputs):
            features, labels = inputs
            with tf.GradientTape() as tape:
                error = tf.square(model(features, training=True) - labels)
                loss = tf.nn.compute_average_loss(tf.reduce_mean(error, axis=1), global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        losses = strategy.run(replica_step, args=(batch,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    losses = []
    while int(step) < STEPS:
        losses.append(float(train_step(next(batches))))
        step.assign_add(1)
        if int(step) % EVERY == 0:
            manager.save(checkpoint_number=int(step))
    if not chief:
        shutil.rmtree(directory, ignore_errors=True)
    print("RESULT", json.dumps({
        "task": f"{resolver.task_type}:{resolver.task_id}",
        "workers": strategy.num_replicas_in_sync,
        "steps": int(step),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "checkpoints": [os.path.basename(p) for p in manager.checkpoints] if chief else [],
    }), flush=True)


if resolver.task_type == "evaluator":
    evaluate()
else:
    train()
