"""The rocm accelerator, by its folder alone: its GPUs listed from `amd-smi` as it prints them (a fake
amd-smi on PATH), their names as each of AMD's tools and torch print them, a preflight of every recipe
on eight MI300X that refuses no cell for the device (no recipe has an MI300X figure: each cell runs
with no reference, the ladders are judged by their ratios), and energy and memory through a fake of
AMD SMI's Python library with the library's own names."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

from reprokit.plan import accelerators, listing
from tests.conftest import run_inv
from tests.test_preflight import findings, table

ASIC = """GPU: {i}
    ASIC:
        MARKET_NAME: {name}
        VENDOR_ID: 0x1002
        VENDOR_NAME: Advanced Micro Devices Inc. [AMD/ATI]
        SUBVENDOR_ID: 0x1002
        DEVICE_ID: 0x74a1
        SUBSYSTEM_ID: 0x74a1
        REV_ID: 0x00
        ASIC_SERIAL: 0x{i:016X}
        OAM_ID: {i}
        NUM_COMPUTE_UNITS: 304
        TARGET_GRAPHICS_VERSION: gfx942
"""


def amd_smi(folder: Path, names: list[str]) -> dict[str, str]:
    """A fake amd-smi answering `list` (detection, a GPU's BDF) and `static --asic` (the listing) for
    GPUs named `names`; the PATH that finds it."""
    folder.mkdir(parents=True, exist_ok=True)
    static = "\n".join(ASIC.format(i=i, name=name) for i, name in enumerate(names))
    listed = "\n".join(
        f"GPU: {i}\n    BDF: 0000:{0x0C + i:02x}:00.0\n    UUID: {i:08x}\n" for i in range(len(names))
    )
    tool = folder / "amd-smi"
    tool.write_text(
        '#!/bin/sh\ncase "$1" in\n'
        f"  static) cat <<'EOF'\n{static}\nEOF\n;;\n"
        f"  list) cat <<'EOF'\n{listed}\nEOF\n;;\n"
        '  *) echo "amd-smi: unknown command $1" >&2; exit 2;;\nesac\n'
    )
    tool.chmod(0o755)
    return {"PATH": f"{folder}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"}


def test_eight_mi300x_are_listed_from_amd_smi_and_detected(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", amd_smi(tmp_path / "bin", ["AMD Instinct MI300X"] * 8)["PATH"])
    here = listing.devices_here("rocm")
    assert (here.count, here.model) == (8, "AMD Instinct MI300X")
    assert listing.detect() == "rocm"


@pytest.mark.parametrize(
    "printed",
    [
        "AMD Instinct MI300X",  # amd-smi's MARKET_NAME, torch.cuda.get_device_name()
        "MI300X-O",  # amd-smi's MARKET_NAME on some drivers
        "AMD Instinct MI300X OAM",  # rocm-smi --showproductname's card series
    ],
)
def test_each_name_amds_tools_print_for_an_mi300x_is_its_key(printed):
    assert accelerators.get("rocm").device_key(printed) == "mi300x"


def test_another_instinct_is_not_taken_for_an_mi300x():
    rocm = accelerators.get("rocm")
    assert rocm.device_key("AMD Instinct MI325X") == "mi325x"
    assert rocm.device_key("AMD Instinct MI300A") is None


def test_every_cell_on_eight_mi300x_would_run_and_none_is_refused_for_the_device(tmp_path, monkeypatch):
    from reprokit import preflight
    from reprokit.preflight.checks.devices import Devices

    # The devices check alone: what each cell would be judged by on this machine (the others check
    # this Python, the data and the disk, not the device).
    monkeypatch.setattr(preflight, "CHECKS", (Devices,))
    result = run_inv("preflight", "all", "--accelerator", "rocm", "--scale", "published", "--no-steps",
                     "--container", "none", "--out", str(tmp_path / "out"),
                     env=amd_smi(tmp_path / "bin", ["AMD Instinct MI300X"] * 8))  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("-", "devices", "8 x AMD Instinct MI300X (rocm)") in findings(result)
    assert not [f for f in findings(result) if f[0] == "x"]
    answers = table(result)
    assert {"bridgetower--workers0", "volo--pretrain-d5", "vit-speedups--fsdp"} <= set(answers)
    for cell, (verdict, because) in answers.items():
        assert verdict in ("would run, no reference", "would be judged"), (cell, verdict, because)
        assert verdict == "would run, no reference" or because.startswith(
            ("by its speedup", "as the baseline")
        ), (
            cell,
            because,
        )
    assert answers["vit-speedups--fsdp"] == (
        "would be judged",
        "by its speedup over its baseline (published 1.51x)",
    )


class AmdSmiLibraryException(Exception):
    pass


def fake_amdsmi(gpus: list[dict]) -> types.ModuleType:
    """AMD SMI's Python names answering for `gpus`: each has an energy accumulator in ticks of 15.3 uJ,
    a socket power ("N/A" where the GPU does not report it), a graphics activity and VRAM per process."""
    smi = types.ModuleType("amdsmi")
    smi.AmdSmiException = smi.AmdSmiLibraryException = AmdSmiLibraryException
    smi.AmdSmiMemoryType = types.SimpleNamespace(VRAM=0)
    smi.calls = []
    smi.amdsmi_init = lambda *flags: smi.calls.append("init")
    smi.amdsmi_shut_down = lambda: smi.calls.append("shut_down")
    smi.amdsmi_get_processor_handles = lambda: list(gpus)
    smi.amdsmi_get_processor_handle_from_bdf = lambda bdf: next(g for g in gpus if g["bdf"] == bdf)
    smi.amdsmi_get_gpu_asic_info = lambda g: {"market_name": g["name"]}
    smi.amdsmi_get_energy_count = lambda g: {
        "energy_accumulator": g["ticks"],
        "counter_resolution": 15.3,
        "timestamp": 0,
    }
    smi.amdsmi_get_power_info = lambda g: {"current_socket_power": g["watts"], "average_socket_power": "N/A"}
    smi.amdsmi_get_gpu_activity = lambda g: {
        "gfx_activity": g["busy"],
        "umc_activity": 0,
        "mm_activity": "N/A",
    }
    smi.amdsmi_get_gpu_process_list = lambda g: g["processes"]
    smi.amdsmi_get_gpu_memory_usage = lambda g, kind: g["vram_used"]
    return smi


def mi300x(bdf: str, **more) -> dict:
    return {"name": "AMD Instinct MI300X", "bdf": bdf, "ticks": 0, "watts": 750, "busy": 90,
            "processes": [], "vram_used": 5 * 2**30, **more}  # fmt: skip


@pytest.fixture
def rocm():
    from reprokit_trainers.common import vendor

    return vendor.load("rocm")


def test_amd_smi_energy_is_its_accumulators_difference_and_power_its_socket_power(rocm):
    gpus = [mi300x("0000:0c:00.0"), mi300x("0000:22:00.0", watts="N/A")]
    smi = fake_amdsmi(gpus)
    # The ranks' GPUs by their PCI addresses, in torch's order (not AMD SMI's).
    source = rocm.amdsmi_source(["0000:22:00.0", "0000:0c:00.0"], ranks=2, smi=smi)
    assert (source.name, source.of, source.ranks, source.has_counter) == (
        "AMD SMI",
        "2 x AMD Instinct MI300X",
        2,
        True,
    )
    for gpu in gpus:
        gpu["ticks"] += 1_000_000  # 15.3 J each
    assert source.counter() == pytest.approx(30.6)
    # One GPU's power is "N/A": no sum of a part is said to be the whole.
    assert source.sample() == (None, 0.9)
    gpus[1]["watts"] = 700
    assert source.sample() == (1450.0, 0.9)
    source.close()
    assert smi.calls == ["init", "shut_down"]


def test_without_amd_smis_library_energy_is_unavailable_and_says_why(rocm, monkeypatch, tmp_path):
    from reprokit_trainers.common.measure.energy import Unavailable

    monkeypatch.setitem(sys.modules, "amdsmi", None)
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    with pytest.raises(Unavailable, match=r"amdsmi\) is not installed, nor in .*no-rocm/share/amd_smi"):
        rocm.amdsmi_source(None, ranks=1)


def test_a_node_whose_amd_smi_lists_no_gpu_has_no_energy_source_and_leaves_the_library_shut_down(rocm):
    from reprokit_trainers.common.measure.energy import Unavailable

    smi = fake_amdsmi([])
    with pytest.raises(Unavailable, match=r"^AMD SMI lists no GPU$"):
        rocm.amdsmi_source(None, ranks=8, smi=smi)
    assert smi.calls == ["init", "shut_down"]


def test_the_amd_smi_peak_is_this_process_vram_or_the_whole_gpus_saying_so(rocm):
    gpu = mi300x(
        "0000:0c:00.0", processes=[{"pid": 4242, "memory_usage": {"vram_mem": 9 * 2**30, "gtt_mem": 0}}]
    )
    smi = fake_amdsmi([gpu])
    watch = rocm.amdsmi_memory(smi, gpu, pid=4242)
    watch.sample()
    assert watch.fields() == {"peak_memory_device_bytes": 9 * 2**30, "peak_memory_device_of": rocm.PROCESS}
    hidden = rocm.amdsmi_memory(smi, gpu, pid=7)
    hidden.sample()
    assert hidden.fields() == {"peak_memory_device_bytes": 5 * 2**30, "peak_memory_device_of": rocm.DEVICE}
