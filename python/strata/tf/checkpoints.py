"""A Keras callback that checkpoints the PS rows and the dense weights
together, and the restore of both."""

import os

import keras

from .. import training
from .layers import wait_for_pushes


def _weights_path(directory, checkpoint_id):
    return os.path.join(str(directory), f"{checkpoint_id}.weights.h5")


class CheckpointCallback(keras.callbacks.Callback):
    """At the end of every epoch (or every `every_n_steps` training steps),
    checkpoints the PS under "<prefix>step-<N>" (N: training steps so far,
    the checkpoint's global_step) and saves the model's dense weights to
    <directory>/<prefix>step-<N>.weights.h5 at the same step, so that the
    two always match. Restore both with restore_checkpoint(). A checkpoint
    id is the cluster's: one taken before under the same id makes fit fail
    with AlreadyExistsError, so give each job its own `prefix`.

    shards: the training cluster ("host:port" or a list, in shard order).
    incremental: PS checkpoints after the first hold only changed rows.
    """

    def __init__(self, shards, directory, every_n_steps=None,
                 incremental=False, prefix="", timeout=300.0):
        super().__init__()
        if every_n_steps is not None and int(every_n_steps) < 1:
            raise ValueError("strata.tf.CheckpointCallback: every_n_steps "
                             f"must be >= 1, got {every_n_steps}")
        self.shards = shards
        self.directory = str(directory)
        self.every_n_steps = every_n_steps
        self.incremental = bool(incremental)
        self.prefix = str(prefix)
        self.timeout = float(timeout)
        self.step = 0
        self.saved = []  # checkpoint ids, oldest first
        self._client = None

    def on_train_begin(self, logs=None):
        os.makedirs(self.directory, exist_ok=True)
        if self._client is None:
            self._client = training.ParameterServerClient(self.shards)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.every_n_steps and self.step % int(self.every_n_steps) == 0:
            self._save()

    def on_epoch_end(self, epoch, logs=None):
        if not self.every_n_steps:
            self._save()

    def on_train_end(self, logs=None):
        if self._client is not None:
            self._client.close()
            self._client = None

    def _save(self):
        checkpoint_id = f"{self.prefix}step-{self.step}"
        # fit's pushes of this step have been acknowledged (the step's
        # function returned, and background pushes are waited for), so the
        # PS checkpoint holds them.
        wait_for_pushes(self.model)
        self._client.checkpoint(checkpoint_id, global_step=self.step,
                                incremental=self.incremental and
                                bool(self.saved), timeout=self.timeout)
        self.model.save_weights(_weights_path(self.directory, checkpoint_id))
        self.saved.append(checkpoint_id)


def restore_checkpoint(model, shards, directory, checkpoint_id,
                       timeout=300.0):
    """Restores the PS to `checkpoint_id` (every shard) and loads the dense
    weights saved with it into `model`. Returns the checkpoint's global
    step."""
    path = _weights_path(directory, checkpoint_id)
    if not os.path.exists(path):
        raise FileNotFoundError(f"strata.tf.restore_checkpoint: no dense "
                                f"weights {path} for {checkpoint_id}")
    with training.ParameterServerClient(shards) as client:
        restored = client.restore(checkpoint_id, timeout=timeout)
    model.load_weights(path)
    return restored["global_step"]
