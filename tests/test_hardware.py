"""Hardware provenance (sysinfo.json's "hardware"): what a run ran on, as flat MLPerf-named fields that the
host diffs between two runs. The CPU side is read for real on this machine; the GPU side talks to a fake
`pynvml` module with the library's own names, and the Gaudi side to a fake `hl-smi` on PATH."""

from __future__ import annotations

import os
import shutil
import sys
import types
from pathlib import Path

import pytest

from reprokit_trainers.common.record import hardware

H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "memory_mib": 81559,
    "sm_max": 1980,
    "mem_max": 2619,
    "sm_app": 1755,
    "mem_app": 2619,
    "power_mw": 700000,
    "ecc": 1,
    "pcie": (5, 16),
    "nvlinks": 18,
    "mig": 0,
    "persistence": 1,
    "uuid": "GPU-5a7c1e4a-9d63-5f0e-8b2a-000000000000",
    "serial": "1654922000000",
    "bus": "00000000:18:00.0",
    "vbios": "96.00.74.00.01",
}


class NVMLError(Exception):
    """pynvml's error: one subclass per NVML return code, all caught as NVMLError."""

    def __init__(self, value: int = 999) -> None:
        super().__init__(value)
        self.value = value


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's names
    def __init__(self) -> None:
        super().__init__(3)


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(12)


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(9)


class NVMLError_LibRmVersionMismatch(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(18)

    def __str__(self) -> str:
        return "RM has detected an NVML/RM version mismatch."


def fake_pynvml(*gpus: dict, unsupported: tuple[str, ...] = (), init_error: type | None = None):
    """A module with pynvml's function names answering for `gpus`; a call named in `unsupported` raises
    NVMLError_NotSupported, as NVML does for what a GPU or driver lacks."""
    nvml = types.ModuleType("pynvml")
    nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM = 1, 2
    nvml.NVML_NVLINK_MAX_LINKS, nvml.NVML_FEATURE_ENABLED = 18, 1
    for error in (NVMLError, NVMLError_NotSupported, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded):
        setattr(nvml, error.__name__, error)
    calls: list[str] = []
    nvml.calls = calls

    def answer(name, reply):
        def call(*args):
            calls.append(name)
            if name in unsupported:
                raise NVMLError_NotSupported()
            return reply(*args)

        setattr(nvml, name, call)

    def init():
        if init_error is not None:
            raise init_error()

    clocks = {1: ("sm_max", "sm_app"), 2: ("mem_max", "mem_app")}
    answer("nvmlInit", init)
    answer("nvmlShutdown", lambda: None)
    answer("nvmlDeviceGetCount", lambda: len(gpus))
    answer("nvmlDeviceGetHandleByIndex", lambda i: gpus[i])
    answer("nvmlSystemGetDriverVersion", lambda: "550.54.15")
    answer("nvmlSystemGetCudaDriverVersion", lambda: 12040)
    answer("nvmlDeviceGetName", lambda g: g["name"])
    answer("nvmlDeviceGetMemoryInfo", lambda g: types.SimpleNamespace(total=g["memory_mib"] * 2**20))
    answer("nvmlDeviceGetMaxClockInfo", lambda g, kind: g[clocks[kind][0]])
    answer("nvmlDeviceGetApplicationsClock", lambda g, kind: g[clocks[kind][1]])
    answer("nvmlDeviceGetPowerManagementLimit", lambda g: g["power_mw"])
    answer("nvmlDeviceGetEccMode", lambda g: [g["ecc"], g["ecc"]])
    answer("nvmlDeviceGetMaxPcieLinkGeneration", lambda g: g["pcie"][0])
    answer("nvmlDeviceGetMaxPcieLinkWidth", lambda g: g["pcie"][1])
    answer("nvmlDeviceGetCurrPcieLinkGeneration", lambda g: g["pcie"][0])
    answer("nvmlDeviceGetCurrPcieLinkWidth", lambda g: g["pcie"][1])
    answer("nvmlDeviceGetMigMode", lambda g: [g["mig"], g["mig"]])
    answer("nvmlDeviceGetPersistenceMode", lambda g: g["persistence"])
    answer("nvmlDeviceGetUUID", lambda g: g["uuid"])
    answer("nvmlDeviceGetSerial", lambda g: g["serial"])
    answer("nvmlDeviceGetPciInfo", lambda g: types.SimpleNamespace(busId=g["bus"].encode()))
    answer("nvmlDeviceGetVbiosVersion", lambda g: g["vbios"])

    def nvlink_state(g, link):
        if not g["nvlinks"]:
            raise NVMLError_NotSupported()
        return 1 if link < g["nvlinks"] else 0

    answer("nvmlDeviceGetNvLinkState", nvlink_state)
    return nvml


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """This machine's CPU and memory with py-cpuinfo's one-second probe stubbed (on a system without
    /proc/cpuinfo, where it is asked), and no hl-smi on PATH;
    returns a function that puts a fake pynvml (or None: not installed) in place and describes."""
    cpuinfo = types.ModuleType("cpuinfo")
    cpuinfo.get_cpu_info = lambda: {"brand_raw": "Stub CPU @ 2.00GHz", "hz_advertised": [2_000_000_000, 0]}
    monkeypatch.setitem(sys.modules, "cpuinfo", cpuinfo)
    monkeypatch.setattr(hardware, "PROC_CPUINFO", tmp_path / "no-cpuinfo")  # a system without it
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))

    def describe(nvml=None, hlml=None):
        monkeypatch.setitem(sys.modules, "pynvml", nvml or fake_pynvml(init_error=NVMLError_LibraryNotFound))
        # None in sys.modules: `import pyhlml` fails, as where Habana's binding is not installed.
        monkeypatch.setitem(sys.modules, "pyhlml", hlml)
        return hardware.describe()

    describe.bin = empty
    return describe


def accelerator_fields(info: dict) -> dict:
    return {k: v for k, v in info.items() if k.startswith("accelerator")}


# --- the CPU side, for real ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def here() -> dict:
    return hardware.describe()  # the real py-cpuinfo, once for the module


def test_names_this_machines_cpu_cores_and_memory(here):
    assert isinstance(here["host_processor_model_name"], str) and here["host_processor_model_name"].strip()
    assert here["host_processor_vcpu_count"] == os.cpu_count()
    assert 1 <= here["host_physical_cores_per_node"] <= os.cpu_count()
    assert here["host_processors_per_node"] >= 1
    assert (
        here["host_processor_core_count"] * here["host_processors_per_node"]
        == here["host_physical_cores_per_node"]
    )
    assert 1 <= here["host_cpus_usable"] <= os.cpu_count()
    kib = next(
        line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:")
    )
    assert here["host_memory_capacity_bytes"] == int(kib.split()[1]) * 1024
    assert here["host_memory_capacity"].endswith(" GiB")
    assert "provenance_missing" not in here, (
        "psutil, py-cpuinfo and nvidia-ml-py are pinned in the kit's venv"
    )


def test_the_cpus_name_read_from_the_kernel_is_the_one_py_cpuinfo_finds(here):
    import cpuinfo

    assert here["host_processor_model_name"] == cpuinfo.get_cpu_info()["brand_raw"]


def test_usable_memory_is_at_most_the_machines(here):
    assert 0 < here["host_memory_usable_bytes"] <= here["host_memory_capacity_bytes"]


def _cgroup(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    (tmp_path / "self").write_text(membership)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    return tmp_path / "self", tmp_path / "fs"


@pytest.mark.parametrize(
    ("membership", "files", "usable"),
    [
        # cgroup v2, a Slurm job's cgroup seen at its path
        ("0::/system.slice/slurmstepd.scope/job_7\n", {"system.slice/slurmstepd.scope/job_7/memory.max": "8589934592\n"}, 8 * 2**30),
        # cgroup v2 inside a container (its own cgroup at the mount's root), no limit
        ("0::/\n", {"memory.max": "max\n"}, 64 * 2**30),
        # cgroup v1, `docker run --memory 4g` without a cgroup namespace: the host path is not mounted
        ("4:memory:/docker/abc\n3:cpuset:/\n", {"memory/memory.limit_in_bytes": "4294967296\n"}, 4 * 2**30),
        # cgroup v1 without a limit: a number above any machine's memory
        ("4:memory:/user.slice\n", {"memory/user.slice/memory.limit_in_bytes": "9223372036854771712\n"}, 64 * 2**30),
        # no memory controller to read
        ("1:cpu:/\n", {}, 64 * 2**30),
    ],
)  # fmt: skip
def test_a_container_or_job_memory_limit_is_the_usable_memory(tmp_path, membership, files, usable):
    cgroups, root = _cgroup(tmp_path, membership, files)
    assert hardware._usable_memory(64 * 2**30, cgroups, root) == usable


def test_every_field_is_a_scalar_the_host_can_flatten(here):
    assert here and all(v is None or isinstance(v, str | int | float | bool) for v in here.values())


@pytest.mark.skipif(
    Path("/dev/nvidia0").exists() or shutil.which("hl-smi") is not None,
    reason="this machine has accelerators",
)
def test_a_machine_without_accelerators_has_no_accelerator_fields(here):
    assert accelerator_fields(here) == {}


# --- NVIDIA, through a fake pynvml --------------------------------------------------------------


def test_an_h100_is_described_under_mlperf_names(machine):
    info = machine(fake_pynvml(H100))
    assert accelerator_fields(info) == {
        "accelerators_per_node": 1,
        "accelerator_model_name": "NVIDIA H100 80GB HBM3",
        "accelerator_memory_capacity": "79.6 GiB",
        "accelerator_memory_capacity_bytes": 81559 * 2**20,
        "accelerator_driver_version": "550.54.15",
        "accelerator_cuda_driver_version": "12.4",
        "accelerator_frequency": "1980 MHz",
        "accelerator_clock_sm_max_mhz": 1980,
        "accelerator_clock_mem_max_mhz": 2619,
        "accelerator_clock_sm_mhz": 1755,
        "accelerator_clock_mem_mhz": 2619,
        "accelerator_power_limit_w": 700.0,
        "accelerator_ecc_mode": "enabled",
        "accelerator_host_interconnect": "PCIe Gen5 x16",
        "accelerator_pcie_link": "gen5 x16",
        "accelerator_nvlink_links": 18,
        "accelerator_interconnect": "NVLink x18",
        "accelerator_mig_mode": "disabled",
        "accelerator_persistence_mode": "enabled",
        "accelerators_uniform": True,
        "accelerators_differ_in": None,
        "accelerator_uuids": "GPU-5a7c1e4a-9d63-5f0e-8b2a-000000000000",
        "accelerator_serials": "1654922000000",
        "accelerator_pci_bus_ids": "00000000:18:00.0",
        "accelerator_vbios_versions": "96.00.74.00.01",
    }
    assert info["host_processor_model_name"] == "Stub CPU @ 2.00GHz"
    assert "provenance_missing" not in info


def test_what_a_gpu_cannot_answer_is_none_and_nothing_else_changes(machine):
    full = machine(fake_pynvml(H100))
    nvml = fake_pynvml(H100, unsupported=("nvmlDeviceGetPowerManagementLimit",))
    partial = machine(nvml)
    assert "nvmlDeviceGetPowerManagementLimit" in nvml.calls
    assert partial["accelerator_power_limit_w"] is None
    assert {**partial, "accelerator_power_limit_w": 700.0} == full
    assert "accelerator_query_error" not in partial


def test_a_gpu_without_nvlink_has_zero_links(machine):
    info = machine(fake_pynvml({**H100, "name": "NVIDIA H100 PCIe", "nvlinks": 0}))
    assert (info["accelerator_nvlink_links"], info["accelerator_interconnect"]) == (0, "N/A")


def test_every_gpu_of_the_node_is_named_by_its_uuid_serial_pci_bus_and_vbios(machine):
    second = {**H100, "uuid": "GPU-0b1d", "serial": "1654922000001", "bus": "00000000:2A:00.0"}
    info = machine(fake_pynvml(H100, second))
    assert info["accelerator_uuids"] == f"{H100['uuid']},GPU-0b1d"
    assert info["accelerator_serials"] == "1654922000000,1654922000001"
    assert info["accelerator_pci_bus_ids"] == "00000000:18:00.0,00000000:2A:00.0"
    assert info["accelerator_vbios_versions"] == "96.00.74.00.01,96.00.74.00.01"
    # A GPU that will not say its serial (a consumer board): the node's serials are unknown, not shorter.
    assert machine(fake_pynvml(H100, unsupported=("nvmlDeviceGetSerial",)))["accelerator_serials"] is None


def test_gpus_that_differ_say_so_and_gpu_0_is_the_one_described(machine):
    info = machine(fake_pynvml(H100, {**H100, "power_mw": 500000}))
    assert info["accelerators_per_node"] == 2
    assert info["accelerators_uniform"] is False
    assert info["accelerators_differ_in"] == "power_limit_w"
    assert info["accelerator_power_limit_w"] == 700.0
    assert machine(fake_pynvml(H100, H100))["accelerators_uniform"] is True


@pytest.mark.parametrize("no_driver", [NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded])
def test_no_nvidia_driver_is_a_cpu_machine_not_an_error(machine, no_driver):
    info = machine(fake_pynvml(H100, init_error=no_driver))
    assert accelerator_fields(info) == {}
    assert "provenance_missing" not in info


def test_a_broken_nvidia_driver_is_reported_in_one_line(machine):
    info = machine(fake_pynvml(H100, init_error=NVMLError_LibRmVersionMismatch))
    assert info["accelerator_query_error"] == "NVML: RM has detected an NVML/RM version mismatch."
    assert "accelerators_per_node" not in info


# --- Gaudi, through a fake hl-smi ---------------------------------------------------------------

# `hl-smi -Q name,bus_id,driver_version,memory.total,ecc.mode.current -f csv,noheader` as the parser expects
# it; the units and ECC wording are undocumented, so a bare number and 1/0 are read as well.
HL_SMI_Q = "\n".join(f"HL-225, 0000:{bus}:00.0, 1.20.0-bd87f71, 98304 MiB, Enabled" for bus in ("43", "44"))
# One AIP of `hl-smi -q`, trimmed, in the layout a public Gaudi2 log (hl-smi 1.12) shows.
HL_SMI_AIP = """[{i}] AIP (accel{i}) 0000:{bus}:00.0
        Product Name                    : HL-225
        PCI
                Bus Id                  : 0000:{bus}:00.0
                AIP Link Info
                        Link Speed
                                Max     : 16GT/s
                                Current : 16GT/s
                        Link Width
                                Max     : x16
                                Current : x16
        Power Readings (54V PSU)
                Power Draw              : 98 W
                Power Max               : 600 W
                Power Limit             : 600 W
        Power Readings (12V PSU)
                Power Limit             : 50 W
        Clocks
                [1] soc                 : 1650 MHz
        Clocks Max
                [1] soc                 : 1650 MHz
"""
HL_SMI_LOG = "================ HL-SMI LOG ================\nAttached AIPs : 2\n\n" + "".join(
    HL_SMI_AIP.format(i=i, bus=bus) for i, bus in enumerate(("43", "44"))
)


def hl_smi(folder: Path, script: str) -> None:
    path = folder / "hl-smi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_gaudi2_is_described_from_hl_smi(machine, tmp_path):
    (tmp_path / "q.csv").write_text(HL_SMI_Q + "\n")
    (tmp_path / "q.txt").write_text(HL_SMI_LOG)
    hl_smi(
        machine.bin,
        f'case "$1" in\n  -Q) exec /bin/cat {tmp_path}/q.csv ;;\n'
        f"  -q) exec /bin/cat {tmp_path}/q.txt ;;\nesac\nexit 2\n",
    )
    info = machine()
    assert accelerator_fields(info) == {
        "accelerators_per_node": 2,
        "accelerator_model_name": "HL-225",
        "accelerator_memory_capacity": "96.0 GiB",
        "accelerator_memory_capacity_bytes": 98304 * 2**20,
        "accelerator_ecc_mode": "enabled",
        "accelerator_driver_version": "1.20.0-bd87f71",
        "accelerator_power_limit_w": 600.0,
        "accelerator_clock_soc_mhz": 1650,
        "accelerator_clock_soc_max_mhz": 1650,
        "accelerator_frequency": "1650 MHz",
        "accelerator_host_interconnect": "PCIe Gen4 x16",
        "accelerator_pcie_link": "gen4 x16",
        "accelerators_uniform": True,
        "accelerators_differ_in": None,
        # The fallback, recorded as such.
        "accelerator_query_via": "hl-smi (pyhlml is not installed)",
    }


class HLMLError(Exception):
    """pyhlml's error (its subclasses per return code are all caught as HLMLError)."""


def fake_pyhlml(aips: list[dict], init_error: Exception | None = None):
    """pyhlml's names answering for ``aips``; ``init_error``: what hlmlInit raises (no driver)."""
    hlml = types.ModuleType("pyhlml")
    hlml.HLMLError = HLMLError
    hlml.calls = []

    def init():
        if init_error is not None:
            raise init_error

    hlml.hlmlInit = init
    hlml.hlmlShutdown = lambda: hlml.calls.append("shutdown")
    hlml.hlmlDeviceGetCount = lambda: len(aips)
    hlml.hlmlDeviceGetHandleByIndex = lambda i: aips[i]
    hlml.hlmlDeviceGetName = lambda a: a["name"].encode()
    hlml.hlmlDeviceGetMemoryInfo = lambda a: types.SimpleNamespace(
        total=a["memory"], used=0, free=a["memory"]
    )
    hlml.hlmlDeviceGetPowerManagementDefaultLimit = lambda a: a["limit_mw"]
    hlml.hlmlDeviceGetClockInfo = lambda a, clock=0: a["soc"]
    hlml.hlmlDeviceGetMaxClockInfo = lambda a, clock=0: a["soc_max"]
    hlml.hlmlGetDriverVersion = lambda: b"1.20.0-bd87f71"
    return hlml


HL225 = {"name": "HL-225", "memory": 96 * 2**30, "limit_mw": 600_000, "soc": 1650, "soc_max": 1650}


def test_gaudi2_is_described_by_pyhlml_in_process_where_installed(machine, tmp_path):
    # hl-smi is there too, and says something else: HLML is asked first, hl-smi not at all.
    hl_smi(machine.bin, f"touch {tmp_path}/hl-smi-ran\nexit 1\n")
    hlml = fake_pyhlml([HL225, dict(HL225)])
    info = machine(hlml=hlml)
    assert accelerator_fields(info) == {
        "accelerators_per_node": 2,
        "accelerator_model_name": "HL-225",
        "accelerator_memory_capacity": "96.0 GiB",
        "accelerator_memory_capacity_bytes": 96 * 2**30,
        "accelerator_power_limit_w": 600.0,
        "accelerator_clock_soc_mhz": 1650,
        "accelerator_clock_soc_max_mhz": 1650,
        "accelerator_frequency": "1650 MHz",
        "accelerator_driver_version": "1.20.0-bd87f71",
        "accelerator_query_via": "pyhlml",
        "accelerators_uniform": True,
        "accelerators_differ_in": None,
    }
    assert not (tmp_path / "hl-smi-ran").exists() and hlml.calls == ["shutdown"]


def test_a_pyhlml_without_its_driver_falls_back_to_hl_smi_and_says_why(machine, tmp_path):
    (tmp_path / "q.csv").write_text(HL_SMI_Q + "\n")
    hl_smi(machine.bin, f'case "$1" in\n  -Q) exec /bin/cat {tmp_path}/q.csv ;;\nesac\nexit 2\n')
    info = machine(hlml=fake_pyhlml([], init_error=OSError("libhlml.so: cannot open shared object file")))
    assert info["accelerators_per_node"] == 2 and info["accelerator_model_name"] == "HL-225"
    assert info["accelerator_query_via"] == "hl-smi (pyhlml: libhlml.so: cannot open shared object file)"


def test_a_failing_hl_smi_is_one_error_field(machine):
    hl_smi(machine.bin, 'echo "no AIP found" >&2\nexit 1\n')
    info = machine()
    assert info["accelerator_query_error"] == "hl-smi -Q exited 1: no AIP found"
    assert set(accelerator_fields(info)) == {"accelerator_query_error", "accelerator_query_via"}


def test_when_only_the_detailed_hl_smi_query_fails_the_identity_stays(machine, tmp_path):
    (tmp_path / "q.csv").write_text(HL_SMI_Q + "\n")
    hl_smi(
        machine.bin,
        f'case "$1" in\n  -Q) exec /bin/cat {tmp_path}/q.csv ;;\nesac\necho "device busy" >&2\nexit 3\n',
    )
    info = machine()
    assert (info["accelerators_per_node"], info["accelerator_model_name"]) == (2, "HL-225")
    assert info["accelerator_query_error"] == "hl-smi -q exited 3: device busy"
    assert "accelerator_power_limit_w" not in info


# --- no silent gaps -----------------------------------------------------------------------------


def test_a_missing_library_is_named_and_its_fields_are_none(machine, monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)
    info = machine()
    assert info["provenance_missing"] == "psutil"
    assert info["host_memory_capacity_bytes"] is None and info["host_processor_vcpu_count"] is None
    assert info["host_processor_model_name"] == "Stub CPU @ 2.00GHz"


def test_without_nvidia_ml_py_the_gpus_are_not_silently_absent(machine, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "psutil", None)
    info = hardware.describe()
    assert info["provenance_missing"] == "psutil, nvidia-ml-py"


# --- the device's view of the run's peak memory (NVML), beside the allocator's -------------------


def test_the_nvml_peak_counts_what_the_allocator_does_not_and_says_whose_it_is(monkeypatch, tmp_path):
    """DALI's and nvJPEG's pools are outside torch's allocator: NVML's reading of the process is kept at
    each boundary of the meter and its largest goes to summary.json; a process NVML does not list (a
    container's PID namespace) falls back to the device's used memory, and says so."""
    from reprokit_trainers.common import vendor
    from reprokit_trainers.common.measure import devicememory
    from reprokit_trainers.common.measure.meter import ThroughputMeter
    from reprokit_trainers.common.record.rundir import RunDir

    cuda = vendor.load("cuda")  # accelerators/cuda/trainer.py: NVML's reading of the process
    readings = iter([3, 9, 5])  # GiB the driver gave this process at three boundaries
    nvml = fake_pynvml(H100)
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda handle: [
        types.SimpleNamespace(pid=4242, usedGpuMemory=next(readings) * 2**30),
        types.SimpleNamespace(pid=1, usedGpuMemory=70 * 2**30),  # another process on the device
    ]
    watch = cuda.nvml_memory(nvml, H100, pid=4242)
    monkeypatch.setattr(devicememory._Process, "watch", watch)
    monkeypatch.setattr(devicememory._Process, "made", True)
    meter = ThroughputMeter(warmup_steps=1, total_steps=3)
    for step in range(3):
        meter.step_end(4, boundary=step == 2)  # boundaries: the warm-up's end (step 1) and the last step
    summary = RunDir(tmp_path).write_summary(meter)
    assert summary["peak_memory_device_bytes"] == 9 * 2**30
    assert summary["peak_memory_device_of"] == cuda.PROCESS

    hidden = cuda.nvml_memory(nvml, H100, pid=7)
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda handle: [
        types.SimpleNamespace(pid=4242, usedGpuMemory=1)
    ]
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=80 * 2**30, used=12 * 2**30)
    hidden.sample()
    assert hidden.fields() == {
        "peak_memory_device_bytes": 12 * 2**30,
        "peak_memory_device_of": cuda.DEVICE,
    }


def test_without_cuda_the_nvml_peak_is_left_unknown(tmp_path):
    pytest.importorskip("torch")
    from reprokit_trainers.common.measure.meter import ThroughputMeter
    from reprokit_trainers.common.record.rundir import RunDir

    meter = ThroughputMeter(warmup_steps=0, total_steps=1)
    meter.step_end(1, boundary=True)
    summary = RunDir(tmp_path).write_summary(meter)
    assert (summary["peak_memory_device_bytes"], summary["peak_memory_device_of"]) == (None, None)
