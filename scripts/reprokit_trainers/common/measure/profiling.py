"""Traces on request (``--profile``): torch.profiler over a few steps after the warm-up.

The schedule is ``{"wait": W, "warmup": N, "active": A}`` in training steps: W steps untraced (the
throughput warm-up by default), N traced and thrown away (the profiler's own start-up), then A traced.
Each rank writes ``profile/rank<R>.pt.trace.json.gz``, Kineto's Chrome-trace JSON gzipped, where each
traced step is a ``ProfilerStep#<step>`` range numbered as the meter numbers steps. It opens in
Perfetto (ui.perfetto.dev) and chrome://tracing, in TensorBoard's PyTorch profiler plugin
(torch-tb-profiler), and in HolisticTraceAnalysis.

summary.json's ``profile`` says what was traced and summarizes it: the kit's own table of self time
by operator category with the top operators (every device); on NVIDIA GPUs also
HolisticTraceAnalysis's temporal breakdown (GPU idle, compute, non-compute) and kernel-type breakdown,
where the package is installed (imported only then), or why not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

KEYS = ("wait", "warmup", "active")
DEFAULT_WARMUP, DEFAULT_ACTIVE = 1, 3
FOLDER = "profile"
TOP_OPS = 10
OPEN_WITH = (
    "Perfetto: open the file at https://ui.perfetto.dev (or chrome://tracing); TensorBoard: "
    "pip install torch-tb-profiler, then tensorboard --logdir <run>/profile"
)

# Operator categories for the kit's own summary, first match wins (torch's operator names).
CATEGORIES = (
    ("data loading", r"DataLoader"),
    ("communication", r"c10d|nccl|gloo|all_?reduce|all_?gather|reduce_scatter|broadcast|hccl"),
    ("optimizer", r"^Optimizer\.|_foreach_|adam|sgd|_fused_"),
    ("attention", r"attention|softmax|sdpa|flash"),
    ("matmul", r"::(mm|addmm|bmm|baddbmm|matmul|linear|addmv|dot|einsum)$|gemm"),
    ("convolution", r"conv"),
    ("normalization", r"norm"),
    (
        "data movement",
        r"::(copy_|_to_copy|to|contiguous|cat|stack|clone|index\w*|gather|scatter\w*|pad)$|memcpy|memset",
    ),
    ("autograd", r"^autograd::|Backward"),
    ("elementwise", r"^aten::"),
)


def schedule(text: str | None) -> dict[str, int] | None:
    """The keys ``text`` (the --profile value: JSON, '{}' for the defaults) gives; ValueError when it is
    not a schedule. Missing keys are filled by ``complete``, which knows the warm-up."""
    if text is None:
        return None
    try:
        given = json.loads(text) if text.strip() else {}
    except ValueError:
        raise ValueError(
            f'--profile {text}: give a JSON schedule such as \'{{"warmup": 1, "active": 3}}\''
        ) from None
    if not isinstance(given, dict):
        raise ValueError(f"--profile {text}: give a JSON object with keys {', '.join(KEYS)}")
    unknown = sorted(set(given) - set(KEYS))
    if unknown:
        raise ValueError(f"--profile {text}: unknown key {unknown[0]!r} (keys: {', '.join(KEYS)})")
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if key == "active" else 0):
            floor = "at least 1" if key == "active" else "0 or more"
            raise ValueError(f"--profile {text}: {key} must be a whole number of steps, {floor}")
    return given


def complete(given: dict[str, int], warmup_steps: int) -> dict[str, int]:
    """The whole schedule: untraced through the throughput warm-up, then 1 step of the profiler's own
    warm-up and 3 traced, unless the schedule says otherwise."""
    return {
        "wait": given.get("wait", warmup_steps),
        "warmup": given.get("warmup", DEFAULT_WARMUP),
        "active": given.get("active", DEFAULT_ACTIVE),
    }


class StepProfiler:
    """torch.profiler driven by the meter: ``start`` before the first step, ``step`` after each."""

    def __init__(self, plan: dict[str, int], run_dir: Path, rank: int) -> None:
        self.plan = plan
        self.folder = Path(run_dir) / FOLDER
        self.trace = self.folder / f"rank{rank}.pt.trace.json.gz"
        self.rank = rank
        self.first, self.last = (
            plan["wait"] + plan["warmup"] + 1,
            plan["wait"] + plan["warmup"] + plan["active"],
        )
        self.written = False
        self.table: dict[str, Any] = {}
        activities = [torch.profiler.ProfilerActivity.CPU]
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        # One step before the first training step (numbered 0, untraced), so that ProfilerStep#k in the
        # trace is the meter's step k.
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(
                wait=plan["wait"] + 1, warmup=plan["warmup"], active=plan["active"], repeat=1
            ),
            on_trace_ready=self._ready,
        )
        self._running = False
        self._done = 0  # training steps ended so far

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._profiler.start()
        self._profiler.step()
        self._running = True

    def step(self) -> None:
        if self._running:
            self._done += 1
            self._profiler.step()

    def stop(self) -> None:
        if self._running:
            self._running = False
            self._profiler.stop()  # a run shorter than the schedule writes what it traced

    def _ready(self, profiler: Any) -> None:
        self.last = min(self.last, self._done)  # a run shorter than the schedule stops it early
        profiler.export_chrome_trace(str(self.trace))
        self.written = True
        self.table = operator_table(profiler.key_averages(), self.device)

    def departure(self, measured_first: int, measured_last: int) -> str | None:
        """Why a profiled run's figure is not the plain one, when traced steps fall in its window."""
        if not self.written or self.last < measured_first or self.first > measured_last:
            return None
        return f"profiled: torch.profiler traced steps {self.first}-{self.last} inside the measured window"

    def summary(self, run_dir: Path) -> dict[str, Any]:
        """summary.json's ``profile`` (rank 0's trace; every rank wrote its own beside it)."""
        if not self.written:
            return {
                "schedule": self.plan,
                "trace": None,
                "why": f"the run ended before step {self.last}, the schedule's last traced step",
            }
        summary: dict[str, Any] = {
            "schedule": self.plan,
            "steps": [self.first, self.last],
            "trace": str(self.trace.relative_to(run_dir)),
            "format": "Kineto Chrome-trace JSON, gzipped; ProfilerStep#<n> is step n",
            "open_with": OPEN_WITH,
            **self.table,
        }
        if self.device == "cuda":
            summary["hta"] = hta_summary(self.folder)
        return summary


def category(name: str) -> str:
    for label, pattern in CATEGORIES:
        if re.search(pattern, name, re.IGNORECASE):
            return label
    return "other"


def operator_table(averages: Any, device: str) -> dict[str, Any]:
    """Self time by operator category and the top operators, on the host and (GPU) the device."""
    rows = [e for e in averages if not e.key.startswith("ProfilerStep")]
    table: dict[str, Any] = {}
    clocks = [("cpu", "self_cpu_time_total")]
    if device == "cuda":
        clocks.append(("device", "self_device_time_total"))
    for clock, attribute in clocks:
        times = [(e.key, getattr(e, attribute, 0.0) / 1e6, e.count) for e in rows]
        total = sum(seconds for _, seconds, _ in times)
        if total <= 0:
            continue
        by_category: dict[str, float] = {}
        for name, seconds, _ in times:
            by_category[category(name)] = by_category.get(category(name), 0.0) + seconds
        table[f"{clock}_self_time_by_category"] = {
            label: {"seconds": round(seconds, 6), "share": round(seconds / total, 4)}
            for label, seconds in sorted(by_category.items(), key=lambda item: -item[1])
        }
        table[f"{clock}_top_ops"] = [
            {"op": name, "category": category(name), "self_s": round(seconds, 6), "calls": count,
             "share": round(seconds / total, 4)}
            for name, seconds, count in sorted(times, key=lambda item: -item[1])[:TOP_OPS]
        ]  # fmt: skip
    return table


def hta_summary(folder: Path) -> dict[str, Any] | str:
    """HolisticTraceAnalysis's temporal and kernel-type breakdowns of the traces in ``folder``."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return "unavailable (HolisticTraceAnalysis is not installed in this image: pip install HolisticTraceAnalysis)"
    try:
        analysis = TraceAnalysis(trace_dir=str(folder))
        temporal = analysis.get_temporal_breakdown(visualize=False)
        kernel_types, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
    except Exception as error:  # noqa: BLE001 -- an analysis that fails must not lose the trace or the run
        return f"unavailable (HolisticTraceAnalysis failed: {type(error).__name__}: {str(error)[:200]})"
    return {
        "temporal_breakdown": [
            {
                "rank": int(row["rank"]),
                "idle_pct": float(row["idle_time_pctg"]),
                "compute_pct": float(row["compute_time_pctg"]),
                "non_compute_pct": float(row["non_compute_time_pctg"]),
            }
            for row in temporal.to_dict("records")
        ],
        "kernel_types": [
            {"kernel_type": str(row["kernel_type"]), "us": float(row["sum"]), "pct": float(row["percentage"])}
            for row in kernel_types.to_dict("records")
        ],
    }
