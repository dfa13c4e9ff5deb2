"""TensorFlow MultiWorkerMirroredStrategy that survives a preemption, one worker per node.

tf.distribute.experimental.PreemptionCheckpointHandler saves a checkpoint when a worker gets
SIGTERM (Slurm's `--signal=TERM@…` before the time limit, `scancel --signal=TERM`, a
preemption) and makes every worker exit with code 42; the plugin (`--tf-requeue-on=42` in
preemptible.sbatch) then requeues the job. When the job starts again, the handler restores the newest checkpoint of the
same directory and the training goes on from the step it was saved at, with the TF_CONFIG that
--tf-cluster wrote for the new allocation (other nodes, other ports).

    python3 preemptible.py CHECKPOINT_DIR

CHECKPOINT_DIR must be the same in every incarnation and reachable from every node (a shared
file system): the batch script names it after the job id. Replace the model and the data with
yours; the handler's `run()` wraps one training step.

TF_CLUSTER_EXAMPLE_CPU=1 runs it on CPU: no GPU, TensorFlow's own collectives, a tiny synthetic
data set and 60 slow steps (0.2 s each), so that a test can preempt it in the middle.
"""

import json
import os
import socket
import sys
import time

import numpy as np
import tensorflow as tf

CPU = os.environ.get("TF_CLUSTER_EXAMPLE_CPU") == "1"
STEPS = 60 if CPU else 100_000
BATCH = 8 if CPU else 256  # per replica (per GPU)
checkpoint_dir = sys.argv[1]

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
host = socket.gethostname()

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


def preempted():
    """After the handler saved its checkpoint: say where, then exit 42 (--tf-requeue-on=42)."""
    print(f"rank {rank}/{workers} on {host}: preempted, saved at step {handler.total_run_calls}",
          flush=True)
    sys.exit(42)


checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
# Restores the newest checkpoint of checkpoint_dir, if any; grace_period 0: save at the next
# step after the signal (Slurm kills the tasks KillWait seconds after its SIGTERM).
handler = tf.distribute.experimental.PreemptionCheckpointHandler(
    resolver,
    checkpoint,
    checkpoint_dir,
    tf.distribute.experimental.TerminationConfig(exit_fn=preempted),
)
start = handler.total_run_calls
run_id = os.environ.get("TF_CLUSTER_RUN_ID", "")
print(f"rank {rank}/{workers} on {host}: starting at step {start} of {STEPS}, run {run_id}",
      flush=True)
if CPU:
    # What the tests read: this incarnation's cluster, as TF_CONFIG gave it.
    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    print(f"rank {rank}/{workers} on {host}: cluster {json.dumps(cluster)}", flush=True)

loss = float("nan")
while handler.total_run_calls < STEPS:
    loss = float(handler.run(train_step, next(batches)))
    step = handler.total_run_calls
    if rank == 0 and step % (10 if CPU else 100) == 0:
        print(f"step {step}: loss {loss:.4f}", flush=True)
    if CPU:
        time.sleep(0.2)

print(f"rank {rank}/{workers} on {host}: done, loss {loss:.4f}", flush=True)
