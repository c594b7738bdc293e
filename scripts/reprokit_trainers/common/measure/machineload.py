"""Was the machine shared while this run measured? A thread samples, every few seconds from the run's
first logged step to its summary, how much CPU the machine spent on processes outside this run (the
run is its process session: the ranks and their loader workers), the load average, and NVML's
processes on the GPUs; a run that shared its machine records a departure of kind throughput, since
its number is not the machine's.

Only what the kernel and NVML say is used: /proc/stat and /proc/<pid>/stat (the folder is a parameter,
for tests), and pynvml when it is installed and a driver answers. No torch here.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INTERVAL_S = 2.0


def cpu_threshold(cpus: int) -> float:
    """Cores that processes outside the run may use on average before the run counts as shared: half
    a core, or 2% of a large machine's (its daemons)."""
    return max(0.5, 0.02 * cpus)


@dataclass
class _Counters:
    when: float
    busy: int  # the machine's busy clock ticks (all CPUs)
    ours: int  # the run's own ticks (its session's processes, their reaped children included)


@dataclass
class LoadWatch:
    proc: Path = Path("/proc")
    nvml: Any = None  # the pynvml module (None: imported if installed)
    interval: float = INTERVAL_S
    session: int | None = None  # the run's process session (None: this process's)
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    clock: Any = time.monotonic
    others: list[float] = field(default_factory=list)  # cores used outside the run, per interval
    load_max: float = 0.0
    gpu_others: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    _last: _Counters | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _owns_nvml: bool = False

    def __post_init__(self) -> None:
        if self.session is None:
            self.session = os.getsid(0)
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    # --- reading the kernel ---------------------------------------------------------------------

    def _stat(self, pid: str) -> list[str] | None:
        try:
            text = (self.proc / pid / "stat").read_text()
        except OSError:
            return None
        return text[text.rindex(")") + 2 :].split()  # proc(5) fields 3.. (state first)

    def _ours(self, fields: list[str] | None) -> bool:
        return fields is not None and fields[3] == str(self.session)

    def _counters(self) -> _Counters | None:
        try:
            first = (self.proc / "stat").read_text().split("\n", 1)[0].split()
        except OSError:
            return None
        # user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
        ticks = [int(x) for x in first[1:9]]
        busy = sum(ticks) - ticks[3] - ticks[4]
        ours = 0
        for entry in os.scandir(self.proc):
            if entry.name.isdigit():
                fields = self._stat(entry.name)
                if self._ours(fields):
                    ours += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        return _Counters(self.clock(), busy, ours)

    def _load_average(self) -> float | None:
        try:
            return float((self.proc / "loadavg").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _gpus(self) -> None:
        nvml = self.nvml
        if nvml is None:
            return
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception:  # NVML's errors (no driver, a lost GPU): nothing to record
            return
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                running = [*nvml.nvmlDeviceGetComputeRunningProcesses(handle),
                           *nvml.nvmlDeviceGetGraphicsRunningProcesses(handle)]  # fmt: skip
            except Exception:  # a GPU NVML lost meanwhile
                continue
            unseen = []
            for item in running:
                fields = self._stat(str(item.pid))
                if fields is None:
                    unseen.append(item)  # another PID namespace (a container): this run's, or not
                elif not self._ours(fields):
                    self._note(index, item, "another process")
            # Seen from a container, NVML's pids are the host's: one per device is this run's rank.
            for item in unseen[1:]:
                self._note(index, item, "a process outside this container")

    def _note(self, device: int, item: Any, what: str) -> None:
        memory = getattr(item, "usedGpuMemory", None)
        self.gpu_others[(device, int(item.pid))] = {
            "device": device,
            "pid": int(item.pid),
            "what": what,
            "memory_bytes": memory if isinstance(memory, int) else None,
        }

    # --- sampling -----------------------------------------------------------------------------

    def sample(self) -> None:
        """One sample: the CPU used outside the run since the last one, the load average, the GPUs."""
        now = self._counters()
        if now is not None and self._last is not None and now.when > self._last.when:
            ticks = (now.busy - self._last.busy) - (now.ours - self._last.ours)
            self.others.append(max(0.0, ticks / self.hz / (now.when - self._last.when)))
        if now is not None:
            self._last = now
        load = self._load_average()
        if load is not None:
            self.load_max = max(self.load_max, load)
        self._gpus()

    def start(self) -> LoadWatch:
        if self.nvml is None:
            try:
                import pynvml

                pynvml.nvmlInit()
                self.nvml = pynvml
            except Exception:  # not installed, or no driver: a machine without NVIDIA GPUs
                self.nvml = None
            else:
                self._owns_nvml = True
        self.sample()
        self._thread = threading.Thread(target=self._run, name="reprokit-machine-load", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self) -> dict[str, Any]:
        """Stop sampling (a last sample first); what summary.json records as `machine_load`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)
        self.sample()
        if self._owns_nvml:
            with contextlib.suppress(Exception):  # shutting down what answered a moment ago
                self.nvml.nvmlShutdown()
        return self.summary()

    # --- what it says -------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        return {
            "cpus": self.cpus,
            "samples": len(self.others),
            "interval_s": self.interval,
            "others_cpu_cores_mean": round(sum(self.others) / len(self.others), 3) if self.others else None,
            "others_cpu_cores_max": round(max(self.others), 3) if self.others else None,
            "load_average_max": self.load_max,
            "gpu_others": sorted(self.gpu_others.values(), key=lambda g: (g["device"], g["pid"])),
        }

    def departure(self) -> str | None:
        """Why the run's number is not the machine's, when others used it meanwhile; None otherwise."""
        found = self.summary()
        parts = []
        mean = found["others_cpu_cores_mean"]
        if mean is not None and mean > cpu_threshold(self.cpus):
            parts.append(
                f"processes outside the run used {mean:.1f} of {self.cpus} CPU cores on average "
                f"(load average up to {self.load_max:.1f})"
            )
        for item in found["gpu_others"]:
            size = f", {item['memory_bytes'] / 2**30:.1f} GiB" if item["memory_bytes"] else ""
            parts.append(f"GPU {item['device']} also ran {item['what']} (pid {item['pid']}{size})")
        return f"the machine was shared while the run measured: {'; '.join(parts)}" if parts else None
