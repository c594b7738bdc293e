"""The container side of the run-directory contract (see README, "The run directory").

Every trainer in this package writes its results through this module so that the host side
(`reprokit`) can read any run the same way:

- ``throughput.csv``: one row per logging step;
- ``tensorboard/``: event files (the trainers' own scalars plus ``throughput/*``);
- ``sysinfo.json``: device, driver, framework versions, image id;
- ``summary.json``: written last and atomically; its presence means the run completed.

Only the process of global rank 0 writes. Throughput is global (all ranks) and counts only
the steps after ``warmup_steps``, the definition the Gaudi numbers were published with.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from .distributed import is_main_process, world_size

THROUGHPUT_FIELDS = [
    "step",
    "epoch",
    "elapsed_s",
    "samples",
    "samples_per_second",
    "loss",
    "learning_rate",
]


def now_iso() -> str:
    """Local time with its offset, to the millisecond: wall times of sub-second runs stay non-zero."""
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON so that a reader sees either nothing or the whole file, never half of it."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as fh:
        json.dump(payload, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def device_info() -> dict[str, Any]:
    """What the trainer runs on, as the report needs it to match published references."""
    info: dict[str, Any] = {"device_type": "cpu", "device_name": platform.processor() or "cpu"}
    hpu = getattr(torch, "hpu", None)
    if hpu is not None and hpu.is_available():
        info.update(device_type="hpu", device_name=hpu.get_device_name(), device_count=hpu.device_count())
    elif torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            device_type="cuda",
            device_name=props.name,
            device_count=torch.cuda.device_count(),
            device_memory_bytes=props.total_memory,
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            capability=f"{props.major}.{props.minor}",
        )
        try:
            import subprocess

            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            info["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
        except (OSError, IndexError, subprocess.TimeoutExpired):
            info["driver"] = None
    else:
        info["device_count"] = 1
        info["cpu_count"] = os.cpu_count()
    return info


def peak_memory_bytes() -> int | None:
    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    try:
        import resource

        # ru_maxrss is KiB on Linux: the CPU-side peak is the best a CPU run can say.
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except (ImportError, OSError):
        return None


@dataclass
class ThroughputMeter:
    """Counts global samples and time after the warm-up steps.

    ``step_end`` is called once per optimizer step with the number of samples that step
    consumed on all ranks; accelerators are synchronized first so the clock measures work done,
    not work queued.
    """

    warmup_steps: int
    start: float = field(default_factory=time.perf_counter)
    steps: int = 0
    samples: int = 0
    measured_samples: int = 0
    measured_start: float | None = None
    last_time: float | None = None
    _interval_samples: int = 0
    _interval_start: float | None = None

    def step_end(self, global_samples: int) -> None:
        _synchronize()
        now = time.perf_counter()
        self.steps += 1
        self.samples += global_samples
        if self.warmup_steps <= 0:
            self.measured_start = self.start
            self.measured_samples += global_samples
        elif self.steps == self.warmup_steps:
            # The clock starts at the end of the last warm-up step.
            self.measured_start = now
        elif self.steps > self.warmup_steps:
            self.measured_samples += global_samples
        if self._interval_start is None:
            self._interval_start = self.start
        self._interval_samples += global_samples
        self.last_time = now

    def interval(self) -> tuple[int, float]:
        """Samples and seconds since the previous call (for one throughput.csv row)."""
        now = self.last_time or time.perf_counter()
        start = self._interval_start or self.start
        samples, seconds = self._interval_samples, max(now - start, 1e-9)
        self._interval_samples, self._interval_start = 0, now
        return samples, seconds

    @property
    def elapsed(self) -> float:
        return (self.last_time or time.perf_counter()) - self.start

    @property
    def samples_per_second(self) -> float | None:
        """Global samples/s after warm-up; None when the run never got past the warm-up."""
        if self.measured_start is None or self.last_time is None or self.measured_samples == 0:
            return None
        return self.measured_samples / max(self.last_time - self.measured_start, 1e-9)


def _synchronize() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    hpu = getattr(torch, "hpu", None)
    if hpu is not None and hpu.is_available():
        hpu.synchronize()


class RunDir:
    """Writes one run's results; every method is a no-op on ranks other than 0."""

    def __init__(self, path: str | os.PathLike, unit: str = "samples/s") -> None:
        self.path = Path(path)
        self.unit = unit
        self.main = is_main_process()
        # When the trainer started (sysinfo.json's started_at): the report's start time and wall time.
        self.started_at = now_iso()
        self._csv = None
        self._writer = None
        self._tb = None
        if self.main:
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / "tensorboard").mkdir(exist_ok=True)

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / "tensorboard"

    def cell(self) -> dict[str, Any]:
        """The host's cell.json, when the run was started by the kit (empty when run by hand)."""
        cell_file = self.path / "cell.json"
        return json.loads(cell_file.read_text()) if cell_file.exists() else {}

    def write_sysinfo(self, **extra: Any) -> None:
        if not self.main:
            return
        info: dict[str, Any] = {
            "started_at": self.started_at,
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "world_size": world_size(),
            "num_nodes": int(os.environ.get("REPROKIT_NUM_NODES", os.environ.get("SLURM_NNODES", "1"))),
            "image_id": os.environ.get("REPROKIT_IMAGE_ID"),
            "image_tag": os.environ.get("REPROKIT_IMAGE_TAG"),
            "image_labels": json.loads(os.environ.get("REPROKIT_IMAGE_LABELS", "{}") or "{}"),
            "versions": {
                name: _version(name)
                for name in (
                    "torch",
                    "torchvision",
                    "transformers",
                    "datasets",
                    "accelerate",
                    "timm",
                    "optimum-habana",
                    "nvidia-dali-cuda120",
                    "transformer-engine",
                )
            },
        }
        info.update(device_info())
        info.update(extra)
        write_json_atomic(self.path / "sysinfo.json", info)

    def log_step(
        self,
        meter: ThroughputMeter,
        epoch: float | None = None,
        loss: float | None = None,
        learning_rate: float | None = None,
    ) -> dict[str, Any] | None:
        """Append one throughput.csv row and the matching TensorBoard scalars."""
        samples, seconds = meter.interval()
        if not self.main:
            return None
        row = {
            "step": meter.steps,
            "epoch": None if epoch is None else round(float(epoch), 4),
            "elapsed_s": round(meter.elapsed, 4),
            "samples": samples,
            "samples_per_second": round(samples / seconds, 3),
            "loss": None if loss is None else float(loss),
            "learning_rate": learning_rate,
        }
        if self._writer is None:
            self._csv = open(self.path / "throughput.csv", "w", newline="")  # noqa: SIM115 -- kept open across steps, closed in write_summary
            self._writer = csv.DictWriter(self._csv, fieldnames=THROUGHPUT_FIELDS)
            self._writer.writeheader()
        self._writer.writerow(row)
        self._csv.flush()
        tb = self._tensorboard()
        if tb is not None:
            tb.add_scalar("throughput/samples_per_second", row["samples_per_second"], meter.steps)
            if loss is not None:
                tb.add_scalar("throughput/loss", float(loss), meter.steps)
            tb.flush()
        return row

    def _tensorboard(self):
        if self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard not installed: the CSV still holds every number
                return None
            self._tb = SummaryWriter(log_dir=str(self.tensorboard_dir / "throughput"))
        return self._tb

    def write_summary(
        self, meter: ThroughputMeter, status: str = "ok", **extra: Any
    ) -> dict[str, Any] | None:
        """The last file of a run: its presence with status ok means the run is complete."""
        if not self.main:
            return None
        if self._csv is not None:
            self._csv.close()
        if self._tb is not None:
            self._tb.close()
        summary: dict[str, Any] = {
            "status": status,
            "unit": self.unit,
            "samples_per_second": meter.samples_per_second,
            "warmup_steps": meter.warmup_steps,
            "steps": meter.steps,
            "samples": meter.samples,
            "measured_samples": meter.measured_samples,
            "train_runtime_s": round(meter.elapsed, 4),
            "world_size": world_size(),
            "num_nodes": int(os.environ.get("REPROKIT_NUM_NODES", os.environ.get("SLURM_NNODES", "1"))),
            "peak_memory_bytes": peak_memory_bytes(),
            "finished_at": now_iso(),
        }
        summary.update(extra)
        write_json_atomic(self.path / "summary.json", summary)
        return summary
