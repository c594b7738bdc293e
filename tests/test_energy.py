"""Energy and utilization over the meter's window: NVML's energy counter and utilization (a fake
pynvml with the library's own names where no GPU exists, the real one where one does), RAPL read
with its wrap-around (a fake powercap folder, and this machine's where readable), hl-smi's power
integrated (a fake hl-smi on PATH), and `unavailable (why)` where nothing answers."""

from __future__ import annotations

import os
import shutil
import sys
import time
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from reprokit_trainers.common import vendor  # noqa: E402
from reprokit_trainers.common.measure import energy  # noqa: E402
from reprokit_trainers.common.measure.energy import EnergyMeter, Unavailable  # noqa: E402
from reprokit_trainers.common.measure.meter import ThroughputMeter  # noqa: E402
from reprokit_trainers.common.record.rundir import RunDir  # noqa: E402
from tests.test_hardware import NVMLError, NVMLError_NotSupported  # noqa: E402

# The accelerators' own sources, from their folders (accelerators/<name>/trainer.py).
CUDA, CPU = vendor.load("cuda"), vendor.load("cpu")

HAS_GPU = Path("/dev/nvidia0").exists() or torch.cuda.is_available()
no_gpu_here = pytest.mark.skipif(HAS_GPU, reason="a GPU is here: NVML is read for real instead")


def fake_pynvml(gpus: list[dict], counter: bool = True):
    """pynvml's names answering for ``gpus``: each draws ``watts`` steadily from when this is made, so
    its total-energy counter (millijoules) grows with the clock; without ``counter`` the GPU predates
    Volta and NVML answers NotSupported."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError, nvml.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    began = time.perf_counter()
    nvml.calls = []

    def energy_mj(gpu: dict) -> int:
        nvml.calls.append("nvmlDeviceGetTotalEnergyConsumption")
        if not counter:
            raise NVMLError_NotSupported()
        return int(gpu["base_mj"] + gpu["watts"] * (time.perf_counter() - began) * 1e3)

    nvml.nvmlInit = lambda: None
    nvml.nvmlShutdown = lambda: None
    nvml.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: next(g for g in gpus if g["uuid"] == uuid)
    nvml.nvmlDeviceGetName = lambda g: g["name"].encode()
    nvml.nvmlDeviceGetTotalEnergyConsumption = energy_mj
    nvml.nvmlDeviceGetPowerUsage = lambda g: int(g["watts"] * 1e3)
    nvml.nvmlDeviceGetUtilizationRates = lambda g: types.SimpleNamespace(gpu=g["busy"], memory=10)
    return nvml


H100 = {"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "watts": 300.0, "busy": 85, "base_mj": 5e9}


def window(meter: EnergyMeter, seconds: float) -> tuple[float, float]:
    """Sample for ``seconds`` between two boundaries; the window's (start, end)."""
    meter.start()
    start = time.perf_counter()
    meter.mark(start, window_start=True)
    time.sleep(seconds)
    end = time.perf_counter()
    meter.mark(end)
    meter.stop()
    return start, end


@no_gpu_here
def test_nvml_energy_is_its_counters_difference_over_the_window_and_samples_per_joule_the_jobs():
    nvml = fake_pynvml([H100, {**H100, "uuid": "GPU-2", "watts": 100.0, "busy": 45}])
    meter = EnergyMeter(CUDA.nvml_source(["GPU-1", "GPU-2"], nvml), world_size=4)
    start, end = window(meter, 0.6)
    found = meter.summary(measured_samples=1000)
    seconds = end - start
    assert found["energy_joules"] == pytest.approx(400 * seconds, rel=0.01)
    assert found["power_mean_w"] == pytest.approx(400, rel=0.01)
    assert found["power_peak_w"] == pytest.approx(400)
    assert found["utilization_mean"] == pytest.approx(0.65)
    # Two GPUs of a 4-rank job: half its samples were trained on the energy measured.
    assert found["samples_per_joule"] == pytest.approx(500 / found["energy_joules"], rel=1e-3)
    assert found["energy"]["source"] == "NVML" and found["energy"]["method"] == "total energy counter"
    assert found["energy"]["of"] == "2 x NVIDIA H100 80GB HBM3" and found["energy"]["readings"] >= 2


@no_gpu_here
def test_a_gpu_without_the_energy_counter_integrates_its_sampled_power_and_says_so():
    meter = EnergyMeter(CUDA.nvml_source([0], fake_pynvml([H100], counter=False)), world_size=1)
    start, end = window(meter, 0.8)
    found = meter.summary(measured_samples=100)
    assert found["energy"]["method"] == "sampled power, integrated"
    assert found["energy_joules"] == pytest.approx(300 * (end - start), rel=0.02)


@no_gpu_here
def test_without_nvidia_ml_py_energy_is_unavailable_with_the_reason(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)
    meter = EnergyMeter.for_this_machine("cuda", 1, 1)
    assert meter.summary(10)["energy"] == "unavailable (nvidia-ml-py is not installed)"
    assert meter.summary(10)["samples_per_joule"] is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_on_an_nvidia_gpu_the_real_counter_and_utilization_are_read():
    meter = EnergyMeter.for_this_machine("cuda", 1, 1)
    assert meter.source is not None, meter.unavailable
    x = torch.randn(4096, 4096, device="cuda")
    meter.start()
    start = time.perf_counter()
    meter.mark(start, window_start=True)
    while time.perf_counter() - start < 1.5:
        x = (x @ x).tanh()
    torch.cuda.synchronize()
    meter.mark(time.perf_counter())
    meter.stop()
    found = meter.summary(measured_samples=1)
    assert found["energy_joules"] > 0 and found["power_mean_w"] > 0 and found["utilization_mean"] > 0


# --- RAPL -----------------------------------------------------------------------------------------


def powercap(tmp_path: Path, zones: dict[str, tuple[str, int, int]]) -> Path:
    """A powercap folder: zone -> (name, energy_uj, max_energy_range_uj)."""
    root = tmp_path / "powercap"
    for zone, (name, value, top) in zones.items():
        (root / zone).mkdir(parents=True)
        (root / zone / "name").write_text(f"{name}\n")
        (root / zone / "energy_uj").write_text(f"{value}\n")
        (root / zone / "max_energy_range_uj").write_text(f"{top}\n")
    return root


def test_rapl_reads_the_packages_not_their_subzones_and_undoes_the_wrap(tmp_path):
    top = 262_143_328_850
    root = powercap(
        tmp_path,
        {
            "intel-rapl:0": ("package-0", top - 1_000_000, top),  # a second from wrapping
            "intel-rapl:0:0": ("core", 5_000_000, top),  # inside package-0: never added again
            "intel-rapl:1": ("package-1", 7_000_000, top),
        },
    )
    source = CPU.rapl_source(ranks=1, powercap=root)
    assert source.of.startswith("CPU package-0, package-1 (RAPL")
    assert source.counter() == 0.0
    (root / "intel-rapl:0" / "energy_uj").write_text("2000000\n")  # wrapped: 1 J to the top, +1 and 2 J
    (root / "intel-rapl:1" / "energy_uj").write_text("10000000\n")  # +3 J
    (root / "intel-rapl:0:0" / "energy_uj").write_text("99000000\n")
    assert source.counter() == pytest.approx(3.000001 + 3.0)


def test_rapl_that_cannot_be_read_is_unavailable_with_the_reason(tmp_path):
    assert CPU.rapl_zones(tmp_path / "none") == []
    with pytest.raises(Unavailable, match=r"^no .*none on this machine$"):
        CPU.rapl_source(1, tmp_path / "none")
    root = powercap(tmp_path, {"intel-rapl:0": ("package-0", 1, 10)})
    (root / "intel-rapl:0" / "energy_uj").unlink()
    (root / "intel-rapl:0" / "energy_uj").mkdir()  # unreadable as a file (root reads any mode)
    with pytest.raises(Unavailable, match=r"intel-rapl:0/energy_uj is not readable \(Is a directory\)"):
        CPU.rapl_source(1, root)


def test_this_machines_rapl_is_read_where_readable_and_unavailable_otherwise():
    try:
        source = CPU.rapl_source(ranks=1)
    except Unavailable as why:
        meter = EnergyMeter.for_this_machine("cpu", 1, 1)
        assert meter.source is None and meter.summary(10)["energy"] == f"unavailable ({why})"
        assert "powercap" in str(why) or "RAPL" in str(why) or "readable" in str(why)
        return
    before = source.counter()
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end:
        sum(range(10_000))
    assert source.counter() > before


def test_a_meters_summary_carries_the_energy_of_its_measured_window(tmp_path):
    root = powercap(tmp_path, {"intel-rapl:0": ("package-0", 0, 10**12)})
    source = CPU.rapl_source(ranks=1, powercap=root)
    meter = ThroughputMeter(warmup_steps=1)
    meter.attach(energy=EnergyMeter(source, world_size=1))
    counter = root / "intel-rapl:0" / "energy_uj"
    for step, joules in enumerate((5, 7, 9), start=1):  # the counter after each step
        time.sleep(0.05)
        # Replaced whole, as the kernel's file reads: the sampler thread never sees half a number.
        (root / "next").write_text(f"{joules * 10**6}\n")
        os.replace(root / "next", counter)
        meter.step_end(10, boundary=step == 3)
    summary = RunDir(tmp_path / "run").write_summary(meter)
    # From the end of the warm-up step (5 J) to the last boundary (9 J): 20 samples over 4 J.
    assert summary["energy_joules"] == pytest.approx(4.0)
    assert summary["samples_per_joule"] == pytest.approx(5.0)
    assert summary["energy"]["source"] == "RAPL"


class SetCounter(energy.Source):
    """An energy counter that reads what the test sets, so a window's energy is known to the microjoule."""

    name, has_counter, of, ranks = "set counter", True, "1 x test device", 1
    joules = 0.0

    def counter(self) -> float:
        return self.joules

    def sample(self) -> tuple[float | None, float | None]:
        return None, None


def test_the_summarys_samples_per_joule_and_mean_power_are_of_its_own_energy_joules():
    source = SetCounter()
    meter = EnergyMeter(source, world_size=1)
    meter.mark(10.0, window_start=True)
    source.joules = 480.0796  # finer than the summary's millijoules
    meter.mark(10.8)
    found = meter.summary(measured_samples=100)
    # Dividing the figures the summary states gives back the ones derived from them (it divided the
    # unrounded energy: 0.2082988 samples per joule beside 480.080 J, where 100 samples make 0.2082986).
    assert found["energy_joules"] == 480.08
    assert found["samples_per_joule"] == 100 / found["energy_joules"]
    assert found["power_mean_w"] == round(found["energy_joules"] / 0.8, 2)


# --- Gaudi (hl-smi) -------------------------------------------------------------------------------


@pytest.fixture
def hl_smi(tmp_path, monkeypatch):
    """A fake hl-smi on PATH answering `-Q power.draw,utilization.aip -f csv,noheader,nounits`."""
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "hl-smi").write_text(
        '#!/bin/sh\n[ "$2" = "power.draw,utilization.aip" ] || exit 2\necho "350, 90"\necho "250, 70"\n'
    )
    (folder / "hl-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    monkeypatch.setitem(sys.modules, "pyhlml", None)  # not installed: hl-smi is the fallback
    return folder


def test_gaudi_power_from_hl_smi_is_integrated_over_the_window(hl_smi):
    assert shutil.which("hl-smi") == str(hl_smi / "hl-smi")
    meter = EnergyMeter.for_this_machine("hpu", 2, 2)
    assert meter.source is not None and meter.source.sample() == (600.0, 0.8)
    meter.source.interval_s = 0.05  # a reading a second on a Gaudi; faster here, for a short test
    start, end = window(meter, 0.8)
    found = meter.summary(measured_samples=100)
    assert found["energy"]["method"] == "sampled power, integrated, by hl-smi (pyhlml is not installed)"
    assert found["energy"]["source"] == "hl-smi"
    assert found["energy_joules"] == pytest.approx(600 * (end - start), rel=0.02)
    assert found["utilization_mean"] == pytest.approx(0.8)
    assert found["samples_per_joule"] == pytest.approx(100 / found["energy_joules"])


def test_gaudi_readings_of_more_aips_than_the_job_used_give_no_samples_per_joule(hl_smi):
    meter = EnergyMeter.for_this_machine("hpu", 1, 1)
    meter.source.interval_s = 0.05
    window(meter, 0.3)
    found = meter.summary(measured_samples=100)
    assert found["energy_joules"] > 0 and found["samples_per_joule"] is None
    assert found["energy"]["samples_counted"].startswith("not computed")


def test_no_hl_smi_on_a_gaudi_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "pyhlml", None)
    assert (
        EnergyMeter.for_this_machine("hpu", 1, 1).summary(1)["energy"]
        == "unavailable (pyhlml is not installed, and no hl-smi on PATH)"
    )


def test_gaudi_energy_is_hlmls_counter_through_pyhlml_where_installed(hl_smi, monkeypatch):
    from tests.test_hardware import HL225, fake_pyhlml

    hlml = fake_pyhlml([dict(HL225), dict(HL225)])
    began = time.perf_counter()
    # Each AIP draws 400 W steadily: its millijoule counter grows with the clock, as HLML's does.
    hlml.hlmlDeviceGetTotalEnergyConsumption = lambda a: int(7e9 + 400 * (time.perf_counter() - began) * 1e3)
    hlml.hlmlDeviceGetPowerUsage = lambda a: 400_000
    hlml.hlmlDeviceGetUtilizationRates = lambda a: 75
    monkeypatch.setitem(sys.modules, "pyhlml", hlml)
    meter = EnergyMeter.for_this_machine("hpu", 2, 2)
    assert meter.source.name == "HLML" and meter.source.sample() == (800.0, 0.75)
    meter.source.interval_s = 0.05
    start, end = window(meter, 0.5)
    found = meter.summary(measured_samples=100)
    assert found["energy"]["method"] == "total energy counter" and found["energy"]["source"] == "HLML"
    assert found["energy_joules"] == pytest.approx(800 * (end - start), rel=0.05)
    assert found["samples_per_joule"] == pytest.approx(100 / found["energy_joules"])
    assert "shutdown" in hlml.calls
