"""The container side of the run-directory contract (reprokit_trainers/contract.json, common/record/contract.py).

Every trainer in this package writes its results through this module so that the host side
(`reprokit`) can read any run the same way:

- ``throughput.csv``: one row per logging step;
- ``tensorboard/``: event files (the trainers' own scalars plus ``throughput/*``, ``breakdown/*`` and
  ``energy/*``, and the run's hyperparameters and software for TensorBoard's HParams dashboard);
- ``mlperf.log``: MLPerf's ``:::MLLOG`` lines (mllog.py);
- ``sysinfo.json``: device, driver, framework versions, image id;
- ``summary.json``: written last and atomically; its presence means the run completed. Its fields
  are checked against summary.schema.json first (summaryschema.py), the schema the host reads it
  with: a field the schema does not declare, or of another type, ends the run in one line naming it,
  and what the run measured is kept in ``summary.rejected.json``.

Only the process of global rank 0 writes. Throughput is global (all ranks). summary.json holds
each definition the trainer can measure under ``throughput`` (the contract's ``definitions``:
``after_warmup``, ``whole_run``, ``gaudi_trainer``), what the run did other than its publication
under ``departures`` (each with its kind), the switches that were in effect and the software that
ran, so the host judges like with like and never gives a verdict on a run that did something else.
It also explains the figure: where the
measured window's time went (``breakdown``, breakdown.py), the energy the devices drew in it
(``energy_joules``, ``samples_per_joule``, energy.py) and, on request, a trace (``profile``,
profiling.py).
"""

from __future__ import annotations

import csv
import json
import os
import platform
import socket
import sys
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from reprokit_trainers.common.measure import devicememory
from reprokit_trainers.common.measure.machineload import LoadWatch
from reprokit_trainers.common.measure.meter import ThroughputMeter, peak_memory
from reprokit_trainers.common.process.distributed import is_main_process, world_size
from reprokit_trainers.common.record import hardware, summaryschema, tbextra
from reprokit_trainers.common.record.contract import (
    FILES,
    QUALITY,
    SCHEMA_VERSION,
    THROUGHPUT,
    THROUGHPUT_FIELDS,
)
from reprokit_trainers.common.record.mllog import END, START, MlLog, wall_ms
from reprokit_trainers.common.record.ownfiles import open_own, own_dir, write_json_atomic

# summary.json's fields, typed (reprokit_trainers/summary.schema.json): what write_summary checks.
SUMMARY_SCHEMA: dict[str, Any] = summaryschema.load()


class SummaryRejected(SystemExit):
    """A summary the schema refuses: the kit's own mistake (a field not declared, or of another type),
    never the user's. The run ends in this one line, naming the file and the field."""


def check_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` as summary.json will hold it (write_json_atomic's JSON), checked against the schema
    the host reads it with; SummaryRejected naming the first field it refuses."""
    written = json.loads(json.dumps(summary, default=str))
    wrong = summaryschema.problem(written, SUMMARY_SCHEMA)
    if wrong:
        raise SummaryRejected(f"{FILES['summary']}: {wrong}")
    return written


def now_iso() -> str:
    """Local time with its offset, to the millisecond: wall times of sub-second runs stay non-zero."""
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


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
        # What the run did other than its publication, in the words the verdict shows, with its kind.
        self.departures: list[dict[str, str]] = []
        # Whether others used the machine while the run measured (from its first logged step);
        # REPROKIT_WATCH_LOAD=0 turns it off (the kit's own test suite), recorded as machine_load null.
        self._load: LoadWatch | None = None
        self._watch_load = os.environ.get("REPROKIT_WATCH_LOAD", "1") != "0"
        self._mllog: MlLog | None = None
        if self.main:
            self.path.mkdir(parents=True, exist_ok=True)
            own_dir(self.path / FILES["tensorboard"])
            self._mllog = MlLog(self.path / FILES["mllog"])
            self._mllog.event("init_start", event_type=START)
            cell = self.cell()
            if cell.get("recipe"):
                self._mllog.event("submission_benchmark", cell["recipe"], {"cell": cell.get("cell_id")})

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / FILES["tensorboard"]

    def cell(self) -> dict[str, Any]:
        """The host's cell.json, when the run was started by the kit (empty when run by hand)."""
        cell_file = self.path / FILES["cell"]
        return json.loads(cell_file.read_text()) if cell_file.exists() else {}

    def depart(self, reason: str, kind: str) -> None:
        """Record that the run does something other than what its recipe asked. A THROUGHPUT
        departure (synthetic data, a loader that fell back) makes the host's verdict `not
        comparable`; a QUALITY one (random weights) is shown beside the verdict."""
        if kind not in (THROUGHPUT, QUALITY):
            raise ValueError(f"departure kind {kind!r}: {THROUGHPUT} or {QUALITY}")
        if reason not in (d["reason"] for d in self.departures):
            self.departures.append({"reason": reason, "kind": kind})
            if self.main:
                print(f"[reprokit] departure from the publication ({kind}): {reason}", flush=True)

    def write_sysinfo(self, **extra: Any) -> None:
        if not self.main:
            return
        info: dict[str, Any] = {
            "started_at": self.started_at,
            "hostname": socket.gethostname(),
            # The machine, where a container's hostname would name only the container (Docker's is its id,
            # new each run): the platform that hides it passes it; elsewhere the hostname is the machine's.
            "machine": os.environ.get("REPROKIT_MACHINE") or socket.gethostname(),
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
        if self._mllog is not None:
            self._mllog.event("submission_platform", info.get("device_name"))
        # The machine as MLPerf's system descriptions name it (CPU, memory, clocks, power cap, links):
        # what a diff of two runs of one cell reads when their numbers differ.
        info["hardware"] = hardware.describe()
        info.update(extra)
        write_json_atomic(self.path / FILES["sysinfo"], info)

    def log_step(
        self,
        meter: ThroughputMeter,
        epoch: float | None = None,
        loss: float | None = None,
        learning_rate: float | None = None,
    ) -> dict[str, Any] | None:
        """Append one throughput.csv row and the matching TensorBoard scalars."""
        samples, seconds = meter.interval()
        shares = meter.breakdown.take_interval(seconds)
        if not self.main:
            return None
        if self._load is None and self._watch_load:
            self._load = LoadWatch().start()
        row = {
            "step": meter.marked_steps,
            "steps_total": meter.total_steps,
            "epoch": None if epoch is None else round(float(epoch), 4),
            "elapsed_s": round(meter.elapsed, 4),
            "samples": samples,
            "samples_per_second": round(samples / seconds, 3),
            "loss": None if loss is None else float(loss),
            "learning_rate": learning_rate,
            "interval_s": round(seconds, 6),
            **shares,
        }
        if self._writer is None:
            # Kept open across steps, closed in write_summary.
            self._csv = open_own(self.path / FILES["throughput"])
            self._writer = csv.DictWriter(self._csv, fieldnames=THROUGHPUT_FIELDS)
            self._writer.writeheader()
        self._writer.writerow(row)
        self._csv.flush()
        self._mllog_interval(meter, row)
        tb = self._tensorboard()
        if tb is not None:
            tb.add_scalar("throughput/samples_per_second", row["samples_per_second"], meter.marked_steps)
            if loss is not None:
                tb.add_scalar("throughput/loss", float(loss), meter.marked_steps)
            tbextra.interval_scalars(tb, meter.marked_steps, shares, meter.energy)
            tb.flush()
        return row

    def _mllog_interval(self, meter: ThroughputMeter, row: dict[str, Any]) -> None:
        """One logging interval as an MLPerf block (counted in samples) and its throughput; the run's
        start (the meter's) before the first."""
        log = self._mllog
        if log is None:
            return
        began = wall_ms(meter.start)
        if not log.run_started:
            log.run_started = True
            log.event("init_stop", event_type=END, time_ms=began)
            log.event("run_start", event_type=START, time_ms=began)
            if meter.first_step_samples is not None:
                log.event("global_batch_size", meter.first_step_samples)
            seed = (self.cell().get("args") or {}).get("seed")
            if seed is not None:
                log.event("seed", seed)
            log.block_open_at = (0, began)
        samples, opened_ms = log.block_open_at or (0, began)
        now_ms = wall_ms(meter.last_time) if meter.last_time is not None else wall_ms()
        log.event("block_start", metadata={"samples_count": samples}, event_type=START, time_ms=opened_ms)
        log.event(
            "block_stop", metadata={"samples_count": meter.marked_samples}, event_type=END, time_ms=now_ms
        )
        log.event("tracked_stats", {"throughput": row["samples_per_second"]}, {"step": meter.marked_steps,
                  "samples_count": meter.marked_samples, "unit": self.unit}, time_ms=now_ms)  # fmt: skip
        log.block_open_at = (meter.marked_samples, now_ms)

    def _mllog_stop(self, meter: ThroughputMeter, status: str) -> None:
        log = self._mllog
        if log is None:
            return
        steady = meter.after_warmup()
        if steady is not None:
            log.event("tracked_stats", {"throughput": steady["value"]},
                      {"step": meter.marked_steps, "definition": "after_warmup", "counted": steady["counted"],
                       "unit": self.unit})  # fmt: skip
        if log.run_started:
            log.event("run_stop", metadata={"status": "success" if status == "ok" else "aborted"},
                      event_type=END)  # fmt: skip
        log.close()

    def _tensorboard(self):
        if self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard not installed: the CSV still holds every number
                return None
            self._tb = SummaryWriter(log_dir=str(self.tensorboard_dir / "throughput"))
        return self._tb

    def write_summary(
        self,
        meter: ThroughputMeter,
        status: str = "ok",
        throughput: dict[str, dict[str, Any] | None] | None = None,
        **extra: Any,
    ) -> dict[str, Any] | None:
        """The last file of a run: its presence with status ok means the run is complete.

        ``throughput``: figures under other definitions than the meter's (a Trainer's own whole-run
        figure, GaudiTrainer's); they replace the meter's of the same name. ``extra``: the switches
        in effect (``loader``, ``mediapipe``, ``torch_compile``, ...) and anything else worth keeping.
        """
        meter.finish()
        if not self.main:
            return None
        load = self._load.stop() if self._load is not None else None
        shared = self._load.departure() if self._load is not None else None
        if shared:
            self.depart(shared, THROUGHPUT)
        if self._csv is not None:
            self._csv.close()
        self._mllog_stop(meter, status)
        if meter.profiler is not None:
            profiled = meter.profiler.departure(meter.warmup_steps + 1, meter.marked_steps)
            if profiled:
                self.depart(profiled, THROUGHPUT)
        steady = meter.after_warmup()
        stalled = meter.stalls.departure(steady["seconds"] if steady else None)
        if stalled:
            self.depart(stalled, THROUGHPUT)
        peak_bytes, peak_of = peak_memory()
        figures = {"after_warmup": meter.after_warmup(), "whole_run": meter.whole_run(), **(throughput or {})}
        summary: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "status": status,
            "unit": self.unit,
            "samples_per_second": meter.samples_per_second,
            "throughput": {name: value for name, value in figures.items() if value is not None},
            "departures": list(self.departures),
            "warmup_steps": meter.warmup_steps,
            "steps": meter.steps,
            "samples": meter.samples,
            "measured_samples": meter.marked_measured_samples,
            "train_runtime_s": round(meter.elapsed, 4),
            "world_size": world_size(),
            "num_nodes": int(os.environ.get("REPROKIT_NUM_NODES", os.environ.get("SLURM_NNODES", "1"))),
            "peak_memory_bytes": peak_bytes,
            "peak_memory_of": peak_of,
            "machine_load": load,
            "stalls": meter.stalls.summary(),
            # What the device saw the process hold, the allocator's peak and all it does not count.
            **devicememory.fields(),
            "finished_at": now_iso(),
            **meter.explained(self.path),
        }
        summary.update(extra)
        try:
            check_summary(summary)
        except SummaryRejected as rejected:
            # Nothing measured is lost: what the run measured is kept beside, under another name, and the
            # host records the run as failed with this line (a summary.json is a complete run).
            write_json_atomic(self.path / FILES["summary_rejected"], summary)
            raise SummaryRejected(
                f"{rejected}; not written: what the run measured is in {FILES['summary_rejected']}"
            ) from None
        tb = self._tensorboard()
        if tb is not None:
            # The run's hyperparameters (the cell's arguments, the software that ran) beside its figures,
            # for TensorBoard's HParams dashboard; written before the summary, whose presence ends the run.
            tbextra.hparams(tb, self.cell(), summary, meter.marked_steps)
            tb.close()
        write_json_atomic(self.path / FILES["summary"], summary)
        return summary
