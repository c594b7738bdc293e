"""samples/s of a run of transformers' Trainer or optimum-habana's GaudiTrainer (BridgeTower's and
image classification's), under each definition their publications used (reprokit/throughput.py).

- ``after_warmup``, the kit's meter: the samples the steps after the warm-up really held, on all
  ranks, over the time from the end of the last warm-up step to the end of the last step. The samples
  are counted from the batches the trainer fed the model (``StepSamples``), not assumed to be a full
  global batch per step: a partial last batch of an epoch counts as what it held, and the samples a
  sampler repeats to even the ranks out (they are computed like any other) count too.
- ``whole_run``, the stock transformers Trainer's ``train_samples_per_second`` (the GPU figures):
  the dataset's rows x epochs (``max_steps`` x global batch when ``max_steps`` is set) over the whole
  ``train()`` call, taken from train()'s own metrics.
- ``gaudi_trainer``, GaudiTrainer's ``train_samples_per_second`` (the Gaudi2 figures): the same
  count less warm-up steps x global batch, over the time from the start of the first step after the
  warm-up to the end of training. GaudiTrainer's own figure when it ran; otherwise the kit applies
  the formula to its meter's after-warm-up time.

The meter's breakdown (common/measure/breakdown.py) times the Trainer's own fetch of each step's batches
(``timed_trainer``): ``get_batch_samples`` in transformers' Trainer, ``get_batch_samples_transformers``
in GaudiTrainer, the calls that take the step's micro-batches from the epoch's iterator. That covers
the loader (its workers, or the main process with none), collation and accelerate's copy of the batch
to the device; the Trainer's bookkeeping around a step is ``other``. The same subclass hands the DDP
model to the breakdown before the first step, whose reducer's own timers then time the gradient
all-reduce.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reprokit_trainers.common.measure.meter import ThroughputMeter
from reprokit_trainers.common.measure.steps import instruments
from reprokit_trainers.common.process.args import given
from reprokit_trainers.common.record.rundir import THROUGHPUT, RunDir


class StepSamples:
    """The rows of each optimizer step, as the trainer hands them to the model.

    The trainer adds each micro-batch's rows on this rank; the callback takes the sum at the end of
    the step, times the world size: every rank holds as many rows per step (DistributedSampler and
    accelerate's sharding pad the ranks to equal lengths).
    """

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._rows = 0

    def add(self, rows: int) -> None:
        self._rows += rows

    def take(self) -> int:
        """The global samples since the last call."""
        rows, self._rows = self._rows, 0
        return rows * self.world_size


def throughput_callback(run_dir: RunDir, warmup_steps: int, samples: StepSamples, profile: str | None = None):
    """A TrainerCallback that feeds a ThroughputMeter the samples each step really held; the Trainer's
    logging steps and its last step are the meter's boundaries (where it reads the clock). ``profile``:
    the --profile value, traced over the training steps."""
    from transformers import TrainerCallback

    class ThroughputCallback(TrainerCallback):
        def __init__(self) -> None:
            self.meter = ThroughputMeter(warmup_steps=warmup_steps)
            self.last_logs: dict[str, Any] = {}

        def on_train_begin(self, args, state, control, **kwargs):
            self.meter = ThroughputMeter(warmup_steps=warmup_steps, total_steps=state.max_steps or None)
            self.meter.attach(*instruments(run_dir, warmup_steps, profile))
            samples.take()

        def on_train_end(self, args, state, control, **kwargs):
            self.meter.finish()  # evaluation and prediction are outside the window

        def on_step_end(self, args, state, control, **kwargs):
            # The Trainer logs at these steps (and reads the loss there anyway): the meter's boundaries.
            every = int(getattr(state, "logging_steps", 0) or args.logging_steps or 0)
            boundary = state.global_step >= state.max_steps or (every > 0 and state.global_step % every == 0)
            self.meter.step_end(samples.take(), boundary=bool(boundary))

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            if "loss" in logs:
                self.last_logs = dict(logs)
                run_dir.log_step(
                    self.meter,
                    epoch=state.epoch,
                    loss=logs.get("loss"),
                    learning_rate=logs.get("learning_rate"),
                )

    return ThroughputCallback()


def timed_trainer(base: type, callback: Any) -> type:
    """``base`` (a Trainer class) with the fetch of each step's batches timed by ``callback``'s meter,
    and its DDP model watched for the gradient all-reduce (see the module docstring)."""

    class TimedTrainer(base):
        _watched = False

        def get_batch_samples(self, *args, **kwargs):  # transformers' Trainer
            with callback.meter.breakdown.waiting_for_data():
                return super().get_batch_samples(*args, **kwargs)

        def get_batch_samples_transformers(self, *args, **kwargs):  # GaudiTrainer
            with callback.meter.breakdown.waiting_for_data():
                return super().get_batch_samples_transformers(*args, **kwargs)

        def training_step(self, model, inputs, *args, **kwargs):
            if not self._watched:  # the first step: the model is wrapped, no backward has run
                self._watched = True
                # The loop reads each step's loss for its NaN check: a wait every step (then DDP may
                # time every iteration for free; breakdown.py).
                callback.meter.breakdown.watch(model, every_step=bool(self.args.logging_nan_inf_filter))
            return super().training_step(model, inputs, *args, **kwargs)

    return TimedTrainer


def trainer_samples(num_examples: int, num_train_epochs: float, max_steps: int, global_batch: int) -> float:
    """What transformers' Trainer (and GaudiTrainer) count as the run's samples: the dataset's rows x
    epochs, or max_steps x global batch when max_steps is set (transformers 4.49
    ``set_initial_training_values``). Partial and padded batches are not looked at."""
    if max_steps > 0:
        return max_steps * global_batch
    return num_examples * num_train_epochs


def gaudi_trainer_samples(
    num_examples: int, num_train_epochs: float, max_steps: int, warmup_steps: int, global_batch: int
) -> float:
    """GaudiTrainer's count for its samples/s: the Trainer's, less the warm-up steps' full batches."""
    return (
        trainer_samples(num_examples, num_train_epochs, max_steps, global_batch) - warmup_steps * global_batch
    )


def _how_many(num_examples: int, num_train_epochs: float, max_steps: int, global_batch: int) -> str:
    if max_steps > 0:
        return f"max_steps {max_steps} x global batch {global_batch}"
    return f"{num_examples} rows x {num_train_epochs:g} epochs"


def definitions(
    meter: ThroughputMeter,
    trainer: str,
    train_metrics: dict[str, Any],
    num_examples: int,
    num_train_epochs: float,
    max_steps: int,
    global_batch: int,
) -> dict[str, dict[str, Any] | None]:
    """summary.json's ``throughput``: each definition's figure, and how it was counted."""
    warmup = meter.warmup_steps
    steady = meter.after_warmup()
    if steady is not None:
        steady = {
            **steady,
            "counted": f"the samples steps {warmup + 1}-{meter.marked_steps} held on all ranks, counted from "
            f"the batches fed to the model, from the end of step {warmup} to the end of step "
            f"{meter.marked_steps} (device synchronized at both)",
        }
    whole = meter.whole_run()
    if whole is not None:
        whole = {
            **whole,
            "counted": f"the kit's meter: the samples of steps 1-{meter.marked_steps} over the time "
            "from the start of training to the end of the last step",
        }
    reported = train_metrics.get("train_samples_per_second")
    total = trainer_samples(num_examples, num_train_epochs, max_steps, global_batch)
    gaudi_samples = gaudi_trainer_samples(num_examples, num_train_epochs, max_steps, warmup, global_batch)
    formula = (
        f"({_how_many(num_examples, num_train_epochs, max_steps, global_batch)} - {warmup} warm-up steps x "
        f"global batch {global_batch}) = {gaudi_samples:g} samples"
    )
    gaudi = None
    if trainer == "Trainer" and reported is not None:
        whole = {
            "value": reported,
            "samples": total,
            "seconds": train_metrics.get("train_runtime"),
            "counted": f"transformers Trainer's own train_samples_per_second: "
            f"{_how_many(num_examples, num_train_epochs, max_steps, global_batch)} = {total:g} samples over "
            "the whole train() call (train_runtime)",
        }
    if trainer == "GaudiTrainer" and reported:
        gaudi = {
            "value": reported,
            "samples": gaudi_samples,
            "seconds": round(gaudi_samples / reported, 6),
            "counted": f"GaudiTrainer's own train_samples_per_second: {formula} over the time from the start "
            f"of step {warmup + 1} to the end of train()",
        }
    elif steady is not None and gaudi_samples > 0:
        gaudi = {
            "value": gaudi_samples / steady["seconds"],
            "samples": gaudi_samples,
            "seconds": steady["seconds"],
            "counted": f"computed by the kit with GaudiTrainer's formula: {formula}, over the kit meter's "
            f"after-warm-up time (end of step {warmup} to end of step {meter.marked_steps})",
        }
    return {"after_warmup": steady, "whole_run": whole, "gaudi_trainer": gaudi}


def point_at_run_dir(training_args: Any, argv: Sequence[str], run_dir: RunDir) -> None:
    """The Trainer's settings the run directory needs, where the command line leaves them open:
    TensorBoard where the kit collects it, and the image column kept (both published commands pass
    --remove_unused_columns False: the on-the-fly transform reads that column)."""
    if not given(argv, "logging_dir"):
        training_args.logging_dir = str(run_dir.tensorboard_dir)
    if not given(argv, "report_to"):
        training_args.report_to = ["tensorboard"]
    if training_args.remove_unused_columns:
        run_dir.depart(
            "remove_unused_columns forced off (the image transform reads the image column)", THROUGHPUT
        )
        training_args.remove_unused_columns = False
