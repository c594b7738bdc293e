"""Step logging into the run directory, for the explicit training loops (VOLO, ViT).

The logger feeds a ``ThroughputMeter`` every optimizer step and, on logging steps and the last step
(the meter's boundaries, where it synchronizes the device and reads the clock), appends a
throughput.csv row with its TensorBoard scalars (rundir.py). BridgeTower runs transformers' Trainer
and feeds the same meter from a callback (hf_trainer.py) that counts the samples each
step really held: a full global batch per step would overcount a partial last batch.

The loop hands the logger its loader (``batches``) and its wrapped model (``watch``), so the meter's
breakdown can time the wait for each batch and the gradient all-reduce (breakdown.py); rank 0 samples
its node's energy over the measured window (energy.py); ``--profile`` traces a few steps (profiling.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from reprokit_trainers.common.measure import profiling
from reprokit_trainers.common.measure.energy import EnergyMeter, local_ranks
from reprokit_trainers.common.measure.meter import ThroughputMeter
from reprokit_trainers.common.process.distributed import (
    accelerator_device,
    global_rank,
    is_main_process,
    log,
    reduce_mean,
    world_size,
)
from reprokit_trainers.common.record.rundir import RunDir


class StepLogger:
    """The step logger of the explicit loops (VOLO, ViT).

    Every step feeds the meter. On logging steps (every ``logging_steps``, and the last one) the loss
    is averaged over ranks, a throughput.csv row is appended, ``train/loss`` and
    ``train/learning_rate`` go to ``tensorboard/train`` and one line is printed (rank 0).
    ``profile``: the --profile value (a JSON schedule, checked when it was parsed), or None.
    """

    def __init__(
        self,
        run_dir: RunDir,
        warmup_steps: int,
        global_batch: int,
        logging_steps: int,
        total_steps: int | None = None,
        profile: str | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.meter = ThroughputMeter(warmup_steps=warmup_steps, total_steps=total_steps)
        self.meter.attach(*instruments(run_dir, warmup_steps, profile))
        self.global_batch = global_batch
        self.logging_steps = logging_steps
        self.last_loss: float | None = None
        self.writer = None
        if is_main_process():
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(run_dir.tensorboard_dir / "train"))

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        """The loader's batches, the wait for each timed (iterate this instead of the loader)."""
        return self.meter.breakdown.batches(loader)

    def watch(self, model: Any, every_step: bool = False) -> None:
        """Time the gradient all-reduce of the wrapped model (DDP), before its first step;
        ``every_step``: the loop waits for the device each step (breakdown.Breakdown.watch)."""
        self.meter.breakdown.watch(model, every_step=every_step)

    def logs(self, step: int, last: bool = False) -> bool:
        """Whether ``step`` is a logging step (every ``logging_steps``, and the last)."""
        return step % self.logging_steps == 0 or last

    def step(
        self, step: int, epoch: float, lr: float, loss: torch.Tensor | float, last: bool = False
    ) -> None:
        """Call once per optimizer step, on every rank: ``last`` marks the final step of the run.
        ``loss``: the step's loss tensor, averaged over ranks here on a logging step; or a number the
        loop has already read as its publication did (then nothing more is read)."""
        logged = self.logs(step, last)
        # Every rank reaches the same logging steps, so the loss can be averaged over ranks there
        # (and only there: the all-reduce waits for the step). It is inside the step's time.
        if not logged:
            value = None
        elif isinstance(loss, torch.Tensor):
            value = reduce_mean(loss)
        else:
            value = float(loss)
        self.meter.step_end(self.global_batch, boundary=logged)
        if value is None:
            return
        self.last_loss = value
        row = self.run_dir.log_step(self.meter, epoch=epoch, loss=value, learning_rate=lr)
        if self.writer is not None and row is not None:
            self.writer.add_scalar("train/loss", value, step)
            self.writer.add_scalar("train/learning_rate", lr, step)
            log(
                f"step {step} epoch {epoch:.3f} loss {value:.4f} lr {lr:.3e} {row['samples_per_second']:.1f} img/s"
            )

    def summary_fields(self) -> dict[str, Any]:
        """What summary.json says of the loop, beside the meter's own figures."""
        return {"final_loss": self.last_loss}

    def close(self) -> None:
        self.meter.finish()
        if self.writer is not None:
            self.writer.close()


def instruments(
    run_dir: RunDir, warmup_steps: int, profile: str | None
) -> tuple[EnergyMeter | None, profiling.StepProfiler | None]:
    """What a meter carries beside its clock: rank 0's energy meter, and every rank's profiler when
    ``profile`` asks for one."""
    energy = None
    if is_main_process():
        energy = EnergyMeter.for_this_machine(accelerator_device().type, local_ranks(), world_size())
    profiler = None
    given = profiling.schedule(profile)
    if given is not None:
        plan = profiling.complete(given, warmup_steps)
        profiler = profiling.StepProfiler(plan, run_dir.path, global_rank())
    return energy, profiler
