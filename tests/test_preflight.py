"""`inv preflight`: per cell of the session a `reproduce` would run, would it be judged or why not; every
refusal induced as a user would meet it (a read-only cache without a writable scratch, no nvidia-smi, a
MIG listing, a bad JPEG, a full disk), each exiting non-zero with one line naming the fault, and on this
CPU machine a clean run of the cpu profile's smoke cells with a few real steps each."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reprokit.contract.trainers import kit_trainers
from reprokit.plan import accelerators, recipes
from reprokit.plan.request import Request
from reprokit.preflight import baseimage
from reprokit.preflight.checks import collective, steps, storage
from tests.conftest import INV, ROOT, departures_of_the_run, run_inv
from tests.fakes import fake_env, fake_recipe, tiny_imagenet
from tests.fakes.drivers import hl_smi, nvidia_smi

CPU = ("--accelerator", "cpu", "--scale", "smoke", "--runtime", "local", "--container", "none")


def last_line(result: subprocess.CompletedProcess) -> str:
    return result.stderr.strip().splitlines()[-1]


def fake_nvidia_smi(tmp_path: Path, listing: str | None) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if listing is not None:
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\ncat <<'EOF'\n{listing}\nEOF\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def can_unshare() -> bool:
    return (
        bool(shutil.which("unshare"))
        and subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0
    )


# ---- on this machine: the cpu profile, a few real steps, exit 0 --------------------------------------


def test_on_a_cpu_machine_the_smoke_cells_would_run_and_the_table_says_so(tmp_path):
    # In this process: the stepped cell is a process of its own, stopped at the steps check's own limit.
    result = run_inv("preflight", "volo", *CPU, "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "Preflight of 3 cell(s): cpu, smoke scale, volo"
    found = findings(result)
    assert ("-", "devices", "1 x cpu (cpu)") in found
    assert any(f[:2] == ("-", "storage") and "writable" in f[2] for f in found)
    stepped = [
        f[2] for f in found
        if f[:2] == ("-", "steps") and f[2].startswith("volo--pretrain-d1 (for volo--finetune-d1-384, volo--pretrain-d1-modern-kernels): 3 steps in")
    ]  # fmt: skip
    assert stepped and "img/s" in stepped[0]
    table = lines[lines.index(next(line for line in lines if line.lstrip().startswith("cell "))) + 1 :]
    assert [line.split()[0] for line in table] == [
        "volo--pretrain-d1", "volo--finetune-d1-384", "volo--pretrain-d1-modern-kernels"
    ]  # fmt: skip
    assert all("would run, not judged  smoke scale" in line for line in table)
    # The stepped run is a real run directory, kept beside the results.
    (run_dir,) = (tmp_path / "preflight").glob("*/runs/volo--pretrain-d1")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["steps"] == 3 and summary["warmup_steps"] == 1


# ---- each refusal, induced ------------------------------------------------------------------------------


def test_no_nvidia_smi_is_a_refusal_not_one_device(tmp_path):
    env = fake_nvidia_smi(tmp_path, None)
    result = run_inv(
        "preflight", "bridgetower", "--accelerator", "cuda", "--no-steps", "--out", str(tmp_path), env=env
    )
    assert result.returncode == 1, result.stderr
    assert last_line(result).startswith("reprokit: ")
    assert "devices: cannot count this machine's cuda devices: nvidia-smi is not on PATH" in last_line(result)
    assert any(
        f[:2] == ("x", "devices") and f[2].startswith("cannot count this machine's cuda devices")
        for f in findings(result)
    )


def test_a_mig_listing_is_refused_for_cells_needing_whole_devices(tmp_path):
    listing = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n  MIG 3g.40gb     Device  0: (UUID: MIG-a)\n  MIG 3g.40gb     Device  1: (UUID: MIG-b)"
    result = run_inv("preflight", "bridgetower", "--accelerator", "cuda", "--no-steps",
                     "--out", str(tmp_path), env=fake_nvidia_smi(tmp_path, listing))  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "GPUs are in MIG mode (1 x NVIDIA A100-SXM4-80GB, in MIG mode: 2 MIG device(s))" in last_line(
        result
    )


def test_a_bad_jpeg_in_the_given_imagenet_is_named(tmp_path):
    root = tiny_imagenet(tmp_path / "imagenet")
    bad = root / "train" / "n01443537" / "n01443537_7.JPEG"
    bad.write_bytes(b"\xff\xd8\xff\xe0 torn off here")
    result = run_inv("preflight", "volo", *CPU, "--no-steps", "--data", f"imagenet={root}",
                     "--out", str(tmp_path / "out"))  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert f"data: --data imagenet: bad image {bad}: Truncated File Read; remove or replace it" in last_line(
        result
    )


def test_a_full_disk_is_refused_before_anything_runs(tmp_path, monkeypatch):
    from reprokit import preflight

    monkeypatch.setattr(storage, "free_bytes", lambda path: 5 * storage.MIB)
    request = Request(recipes=["volo"], accelerator="cpu", scale="smoke", runtime="local", container="none")
    report = preflight.run(request, str(tmp_path), steps=False)
    (refusal,) = [f for f in report.findings if f.blocks]
    assert refusal.check == "storage" and refusal.message.startswith(
        f"{tmp_path.resolve()}: 5.0 MiB free, the session needs about 11 MiB"
    )
    assert [a.verdict for a in report.answers()] == ["would not", "would not", "would not"]


@pytest.mark.parametrize("hub", ["reachable", "unreachable"])
def test_room_in_the_datasets_cache_is_asked_only_where_the_cells_would_download_their_dataset(
    tmp_path, monkeypatch, hub
):
    # A CI machine with 962 MiB free was refused BridgeTower's smoke cells for want of 1 GiB of
    # datasets cache, though with the hub unreachable they train on synthetic data and write none.
    from reprokit import preflight
    from reprokit.preflight.checks import data

    monkeypatch.setattr(storage, "free_bytes", lambda path: 900 * storage.MIB)
    monkeypatch.setattr(data, "hub_reachable", lambda kind, repo: None if hub == "reachable" else "offline")
    request = Request(
        recipes=["bridgetower"], accelerator="cpu", scale="smoke", runtime="local", container="none"
    )
    report = preflight.run(request, str(tmp_path), steps=False)
    cache = [f for f in report.findings if f.check == "storage" and "datasets cache" in f.message]
    if hub == "reachable":
        (refusal,) = cache
        assert refusal.blocks and refusal.message.endswith("900 MiB free, about 1.0 GiB needed")
    else:
        assert cache == [] and not [f for f in report.findings if f.blocks and f.check == "storage"]


@pytest.mark.skipif(not can_unshare(), reason="no unprivileged mount namespaces here")
def test_a_full_disk_for_real_a_tiny_tmpfs(tmp_path):
    out = tmp_path / "small"
    out.mkdir()
    command = [*INV, "preflight", "volo", *CPU, "--no-steps", "--out", str(out)]
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size=64k tmpfs "{out}" && exec "$@"', "sh", *command],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert f"storage: {out}: 64 KiB free, the session needs about 11 MiB" in last_line(result)


@pytest.mark.skipif(not can_unshare(), reason="no unprivileged mount namespaces here")
def test_a_disk_with_room_for_the_run_directory_but_not_the_report_is_refused(tmp_path):
    # One smoke cell writes a 26 KB run directory and 300 KB beside it (report.html alone 130 KB: its
    # plots, inline): 260 KiB held the run directories twice over and was taken, and the session ended
    # on ENOSPC writing its report.
    out = tmp_path / "small"
    out.mkdir()
    command = [
        *INV,
        "preflight",
        "vit-speedups",
        "--variant",
        "baseline",
        *CPU,
        "--no-steps",
        "--out",
        str(out),
    ]
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size=260k tmpfs "{out}" && exec "$@"', "sh", *command],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert last_line(result).startswith(
        f"reprokit: 1 of 1 cell(s) would not run or be judged; storage: {out}: 260 KiB free, the session "
        "needs about "
    )
    assert "(run directories and checkpoints, tables, report and plots)" in last_line(result)


@pytest.mark.skipif(not can_unshare(), reason="no unprivileged mount namespaces here")
def test_a_read_only_cache_without_a_writable_scratch_is_refused(tmp_path):
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    command = [*INV, "preflight", "bridgetower", *CPU, "--no-steps", "--data", f"dataset_cache={cache}",
               "--out", str(tmp_path / "out")]  # fmt: skip
    mounts = f'mount --bind -o ro "{cache}" "{cache}" && mount --bind -o ro "{scratch}" "{scratch}"'
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f'{mounts} && exec "$@"', "sh", *command], cwd=ROOT, capture_output=True,
        text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1", "REPROKIT_SCRATCH": str(scratch)},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert any(f[:2] == ("x", "data") and f[2].startswith("--data dataset_cache=") for f in findings(result))
    assert f"is read-only and REPROKIT_SCRATCH={scratch} is not writable" in result.stdout
    assert f"bridgetower--workers0: data: --data dataset_cache={cache}" in last_line(result)


@pytest.mark.slow
@pytest.mark.skipif(not can_unshare(), reason="no unprivileged mount namespaces here")
def test_a_read_only_cache_with_a_writable_scratch_would_be_trained_on_as_given(tmp_path):
    pytest.importorskip("transformers")
    from tests.fakes.newyorker import newyorker_cache
    from tests.test_trainer_bridgetower import TINY

    cache = newyorker_cache(tmp_path / "hf-cache", TINY)
    command = [*INV, "preflight", "bridgetower", "--variant", "workers0", *CPU,
               "--data", f"dataset_cache={cache}", "--out", str(tmp_path / "out")]  # fmt: skip
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f'mount --bind -o ro "{cache}" "{cache}" && exec "$@"', "sh", *command],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert (
        "-",
        "data",
        "--data dataset_cache: read-only; the trainer reads it through a writable view (its locks go there)",
    ) in findings(result)
    # The smoke scale's 12-row stand-in is not the pinned revision: said, not held against a smoke cell.
    assert "holds train 12, validation 4, test 4 rows, the pinned revision train 9792" in result.stdout
    (run_dir,) = (tmp_path / "out" / "preflight").glob("*/runs/bridgetower--workers0")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["data_source"], summary["model_source"]) == ("hub", "hub")
    assert departures_of_the_run(summary) == []


def test_a_published_cell_whose_steps_depart_would_not_be_judged(tmp_path):
    recipe = fake_recipe(
        tmp_path / "fake.yaml",
        [{"name": "v", "baseline": True, "args": {"fake_departure": "a loader fell back"},
          "references": [{"device": "cpu", "devices": 1, "value": 100, "definition": "after_warmup"}]}],
    )  # fmt: skip
    result = run_inv("preflight", str(recipe), "--accelerator", "cpu", "--scale", "published",
                     "--runtime", "local", "--container", "none", "--out", str(tmp_path / "out"), env=fake_env())  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert any(f[:2] == ("x", "steps") and f[2].startswith("fake--v: 6 steps in") for f in findings(result))
    assert "but it departed: a loader fell back" in result.stdout


# ---- a real machine's devices: no cell refused for want of a figure -------------------------------------


def on_a_machine(tmp_path: Path, accelerator: str, names: list[str]) -> dict[str, str]:
    """PATH with a fake driver tool listing `names` (what nvidia-smi or hl-smi prints)."""
    bin_dir = tmp_path / "bin"
    (nvidia_smi if accelerator == "cuda" else hl_smi)(bin_dir, names)
    return {"PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"}


def table(result: subprocess.CompletedProcess) -> dict[str, tuple[str, str]]:
    """The preflight's table: cell -> (verdict, because)."""
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("cell "))
    found = {}
    for line in lines[start + 1 :]:
        cell, rest = line.split(maxsplit=1)
        verdict = next(v for v in VERDICTS if rest.startswith(v))
        found[cell] = (verdict, rest[len(verdict) :].strip())
    return found


VERDICTS = ("would be judged", "would run, not judged", "would run, no reference", "would not")


def findings(result: subprocess.CompletedProcess) -> list[tuple[str, str, str]]:
    """The findings above the table: (x or -, check, message)."""
    found = []
    for line in result.stdout.splitlines():
        if line.startswith(("  x ", "  - ")):
            mark, check, message = line.split(maxsplit=2)
            found.append((mark, check, message))
    return found


@pytest.mark.parametrize(("accelerator", "name"), [("cuda", "NVIDIA H100 80GB HBM3"), ("gaudi2", "HL-225")])
def test_on_eight_real_devices_without_the_data_it_names_the_data_never_a_missing_figure(
    accelerator, name, tmp_path
):
    result = run_inv("preflight", "all", "--accelerator", accelerator, "--no-steps", "--container", "none",
                     "--out", str(tmp_path / "out"), env=on_a_machine(tmp_path, accelerator, [name] * 8))  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "no published figure" not in result.stdout
    assert ("-", "devices", f"8 x {name} ({accelerator})") in findings(result)
    assert not [f for f in findings(result) if f[:2] == ("x", "devices")]
    answers = table(result)
    # Every recipe's published cells, beyond variants too, wait for the data, and say which.
    for cell, (verdict, because) in answers.items():
        assert verdict == "would not" and because.startswith("data: "), (cell, verdict, because)
    named = {f[2].split(":")[0] for f in findings(result) if f[:2] == ("x", "data")}
    # Each recipe with cells for this accelerator names its data (found from the cells, not listed here).
    assert named == {cell.split("--")[0] for cell in answers} and "bridgetower" in named
    assert "--data dataset_cache=PATH" in answers["bridgetower--workers0"][1]
    # The last line names first what stops every cell here (a torch that sees no H100, no Habana stack).
    assert last_line(result).startswith(
        f"reprokit: {len(answers)} of {len(answers)} cell(s) would not run or be judged; "
    )


def test_a_device_no_recipe_names_has_no_figure_even_where_a_ladder_publishes_ratios(tmp_path, monkeypatch):
    from reprokit import preflight
    from reprokit.preflight.checks.devices import Devices

    # The devices check alone: what each cell would be judged by on this machine, no data check above it.
    monkeypatch.setattr(preflight, "CHECKS", (Devices,))
    result = run_inv("preflight", "all", "--accelerator", "cuda", "--scale", "published", "--no-steps",
                     "--container", "none", "--out", str(tmp_path / "out"),
                     env=on_a_machine(tmp_path, "cuda", ["NVIDIA B200"] * 8))  # fmt: skip
    # The ladder's speedups are ratios: their references name no device, and no device's key is "none".
    assert [f for f in findings(result) if f[1] == "devices"] == [
        ("-", "devices", "8 x NVIDIA B200 (cuda)"),
        ("-", "devices", "NVIDIA B200 is a device no recipe names in the recipes' references: 0 cell(s) have a "
         "published figure for it; 3 a published speedup (a ratio, on any device)"),
    ]  # fmt: skip
    answers = table(result)
    assert not [cell for cell, (_, because) in answers.items() if because.startswith("against")]
    # The publication's figures for the devices it has, each labelled as another device's: never a verdict.
    assert answers["bridgetower--workers0"] == (
        "would run, no reference",
        "no published figure for NVIDIA B200 (a device no recipe names); "
        "published h100: 42.06 samples/s per device (another device, not judged); "
        "published a100-80gb: 28.44 samples/s per device (another device, not judged); "
        "published gaudi2: 75.19 samples/s per device (another device, not judged; "
        "optimum-habana 1.7.0 (its README: validated for SynapseAI 1.11))",
    )
    assert answers["vit-speedups--fsdp"] == (
        "would be judged",
        "by its speedup over its baseline (published 1.51x)",
    )


def test_on_h200s_a_cell_published_on_h100s_runs_with_no_reference_beside_the_h100_figure_labelled(
    tmp_path, monkeypatch
):
    from reprokit import preflight
    from reprokit.preflight.checks.devices import Devices

    monkeypatch.setattr(preflight, "CHECKS", (Devices,))
    result = run_inv("preflight", "bridgetower", "--accelerator", "cuda", "--scale", "published", "--no-steps",
                     "--container", "none", "--variant", "workers0", "--out", str(tmp_path / "out"),
                     env=on_a_machine(tmp_path, "cuda", ["NVIDIA H200"] * 8))  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert table(result)["bridgetower--workers0"] == (
        "would run, no reference",
        "no published figure for NVIDIA H200 (h200); "
        "published h100: 42.06 samples/s per device (another device, not judged); "
        "published a100-80gb: 28.44 samples/s per device (another device, not judged); "
        "published gaudi2: 75.19 samples/s per device (another device, not judged; "
        "optimum-habana 1.7.0 (its README: validated for SynapseAI 1.11))",
    )


@pytest.fixture(scope="module")
def every_recipes_data(tmp_path_factory) -> list[str]:
    """The --data flags of every recipe's data: a New Yorker cache of the pinned split sizes (its 10,851
    JPEGs: seconds to make), an ImageNet folder and its token labels. A preflight without steps only
    reads them, so one copy serves every machine it is asked on."""
    pytest.importorskip("transformers")
    from tests.fakes.newyorker import newyorker_cache
    from tests.test_trainer_bridgetower import TINY

    root = tmp_path_factory.mktemp("every-recipes-data")
    cache = newyorker_cache(root / "hf-cache", TINY, {"train": 9792, "validation": 531, "test": 528})
    imagenet = tiny_imagenet(root / "imagenet")
    labels = token_labels(root / "labels", imagenet)
    return [
        "--data",
        f"dataset_cache={cache}",
        "--data",
        f"imagenet={imagenet}",
        "--data",
        f"token_labels={labels}",
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("accelerator", "name"), [("cuda", "NVIDIA H100 80GB HBM3"), ("gaudi2", "HL-225")])
def test_on_eight_real_devices_given_the_data_each_cell_is_judged_by_its_own_figures(
    accelerator, name, tmp_path, every_recipes_data
):
    result = run_inv("preflight", "all", "--accelerator", accelerator, "--no-steps", "--container", "none",
                     *every_recipes_data, "--out", str(tmp_path / "out"),
                     env=on_a_machine(tmp_path, accelerator, [name] * 8))  # fmt: skip
    answers = table(result)
    assert (
        "-", "data", "--data dataset_cache: jmhessel/newyorker_caption_contest (matching) prepared, its splits of "
        "the pinned size"
    ) in findings(result)  # fmt: skip
    refusals = [f for f in findings(result) if f[0] == "x"]
    # What this machine truly lacks, and nothing else: a torch that sees the H100s, Habana's stack,
    # and (on a small disk) the room for a published session's checkpoints.
    refusal, *others = refusals
    assert [f[1] for f in others] in ([], ["storage"]), others
    if accelerator == "cuda":
        assert refusal[1] == "trainers" and refusal[2].startswith("the torch of this Python")
        assert "sees 0 CUDA device(s), the cells would use 8 of the NVIDIA H100 80GB HBM3" in refusal[2]
        machine = "trainers (above); then "
    else:
        assert refusal[1] == "image" and refusal[2].startswith("the gaudi2 cells need habana_frameworks")
        machine = "image (above); then "
    assert result.returncode == 1
    for cell, (verdict, because) in answers.items():
        assert verdict == "would not" and because.startswith(machine), (cell, because)
    then = {cell: because.removeprefix(machine) for cell, (_, because) in answers.items()}
    if accelerator == "cuda":
        assert then["bridgetower--workers0"] == "would be judged: against 336.5 samples/s on 8 h100"
        assert then["bridgetower--workers2"] == "would be judged: against 602.1 samples/s on 8 h100"
        # The ladder by its ratios, which need no figure of this device; its baseline is their denominator.
        assert (
            then["vit-speedups--fsdp"]
            == "would be judged: by its speedup over its baseline (published 1.51x)"
        )
        assert then["vit-speedups--baseline"].startswith("would be judged: as the baseline")
        assert (
            then["vit-speedups--amp"]
            == "would run, no reference: nothing was published for this variant alone"
        )
        # VOLO's figure is an A100's: it runs here with no reference, and says which figure it has (of
        # its setups, the one most like this cell's: one node of 8).
        assert then["volo--pretrain-d5"] == (
            "would run, no reference: no published figure for NVIDIA H100 80GB HBM3 (h100); "
            "published a100-80gb: 62.50 img/s per device (another device, not judged)"
        )
        assert then["volo--pretrain-d5-sdpa"] == (
            "would be judged: by its speedup over pretrain-d5, measured in the same session"
        )
    else:
        assert then["bridgetower--workers0"] == "would be judged: against 601.5 samples/s on 8 gaudi2"
        assert then["bridgetower--fastddp-workers1-mediapipe-v1"] == (
            "would be judged: by its speedup over its baseline (published 1.51x)"
        )
    assert not [
        c for c, b in then.items() if not b.startswith(("would be judged", "would run, no reference"))
    ]


def token_labels(root: Path, imagenet: Path) -> Path:
    """A token-label map (torch.save) for each image of `imagenet`, in the toolbox's layout."""
    import torch

    for image in (imagenet / "train").glob("*/*.JPEG"):
        (root / image.parent.name).mkdir(parents=True, exist_ok=True)
        torch.save(
            torch.zeros(2, 5, 14, 14, dtype=torch.float16), root / image.parent.name / f"{image.stem}.pt"
        )
    return root


# ---- the pieces ----------------------------------------------------------------------------------


NGC_READBACK = """\
== os
Ubuntu 24.04.1 LTS
== glibc
ldd (Ubuntu GLIBC 2.39-0ubuntu8.3) 2.39
== python
3.12.3
== numactl
== compiler
/usr/bin/g++
== pip
torch==2.6.0a0+ecf3bae40a.nv25.1
torchvision==0.21.0a0
Pillow==11.0.0
numpy==1.26.4
triton==3.1.0
== env
PATH=/usr/local/bin
TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1
"""


def test_the_bases_unverified_facts_are_confirmed_or_corrected_and_a_verified_one_that_differs_is_named():
    base = accelerators.bases()["ngc-pytorch-25.01"]
    compared = baseimage.compare(base, baseimage.parse(NGC_READBACK))
    assert "torchvision 0.21.0a0 (unverified in base.yaml: now confirmed)" in compared.confirmed
    assert "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE 1 (unverified in base.yaml: now confirmed)" in compared.confirmed
    assert "pillow is 11.0.0 here, base.yaml says 11.1.0 (unverified)" in compared.corrected
    assert "numactl is absent here, base.yaml does not say (unverified)" in compared.corrected
    assert {"os Ubuntu 24.04", "glibc 2.39", "python 3.12", "numpy 1.26.4"} <= set(compared.confirmed)
    # A verified fact the image contradicts: what the pins were resolved against is not what runs.
    assert "dill is absent here, base.yaml says 0.3.9" in compared.wrong
    layered = baseimage.compare(
        base,
        baseimage.parse(NGC_READBACK),
        frozenset(
            {
                "dill",
                "sympy",
                "networkx",
                "jinja2",
                "markupsafe",
                "fsspec",
                "filelock",
                "typing-extensions",
                "packaging",
                "setuptools",
                "opencv",
                "nvidia-dali-cuda120",
            }
        ),
    )
    assert layered.wrong == []


def test_the_nic_each_rank_used_is_read_from_the_job_log():
    log = "\n".join(
        [
            "0: reprokit: n1 local rank 0 -> NUMA node 3, NIC mlx5_0",
            "1: reprokit: n2 local rank 1 unbound: no numactl here, NIC left to NCCL",
            "1: n2:811:811 [1] NCCL INFO NET/IB : Using [0]mlx5_1:1/IB [1]mlx5_2:1/IB ; OOB ib0:10.0.0.2<0>",
        ]
    )
    assert collective.nics(log) == [
        "n1 rank 0: mlx5_0",
        "n2 rank 1: left to NCCL",
        "n2 NCCL NET/IB: [0]mlx5_1:1/IB [1]mlx5_2:1/IB",
    ]


def test_each_trainer_and_loader_variant_is_stepped_once_producers_first():
    from reprokit.plan import cells, recipes

    volo = cells.expand(recipes.load("volo"), "volo", "cuda", "published")
    chosen = [(c.cell_id, len(group)) for c, group in steps.representatives(volo)]
    # One per loader (torch, gpu_decode, dali); the finetunes are the torch loader's.
    assert [cell for cell, _ in chosen] == [
        "volo--pretrain-d1",
        "volo--pretrain-d5-gpu-decode",
        "volo--pretrain-d5-dali",
    ]
    short = steps.shortened(volo[0])
    assert (short.args["max_steps"], short.args["throughput_warmup_steps"], short.args["logging_steps"]) == (
        3,
        1,
        1,
    )
    assert volo[0].args["max_steps"] == 500  # the cell itself is left as planned


def test_what_an_image_answered_is_kept_by_its_id_and_a_rebuilt_image_is_asked_again(tmp_path, monkeypatch):
    from reprokit.preflight import imagereads

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    engine = FakeEngine("sha256:aaa")
    read = ["sh", "-c", "echo facts"]
    assert imagereads.run(engine, "reprokit/cpu:1", read) == (b"answer 1", False)
    assert imagereads.run(engine, "reprokit/cpu:1", read) == (b"answer 1", True)
    assert imagereads.run(engine, "reprokit/cpu:1", ["python", "-c", "probe"], stderr=True) == (
        b"answer 2",
        False,
    )
    engine.image_id = "sha256:bbb"  # rebuilt under the same tag: another image, asked again
    assert imagereads.run(engine, "reprokit/cpu:1", read) == (b"answer 3", False)
    engine.fails = True  # a container that fails keeps nothing: the next read runs it again
    with pytest.raises(RuntimeError):
        imagereads.run(engine, "reprokit/other:1", read)
    engine.fails = False
    assert imagereads.run(engine, "reprokit/other:1", read) == (b"answer 5", False)
    # A cache that cannot be written costs a container each time, and answers all the same.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("")
    assert imagereads.run(engine, "reprokit/cpu:1", read) == (b"answer 6", False)
    assert imagereads.run(engine, "reprokit/cpu:1", read) == (b"answer 7", False)


def test_what_this_python_answered_is_kept_until_a_trainer_file_or_a_package_folder_changes(tmp_path):
    """A dry run ends with the trainers' import in this Python (torch and transformers: seconds each
    time); an unchanged Python answers from what it said before, a changed one is asked again."""
    from reprokit.preflight.pythonreads import KEPT

    recipe = fake_recipe(tmp_path / "fake.yaml", [{"name": "one"}])
    mine = tmp_path / "mine"
    (mine / "helpers").mkdir(parents=True)
    (mine / "helpers" / "__init__.py").write_text("")
    env = {
        **fake_env(),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "PYTHONPATH": str(tmp_path / "site"),
    }
    env["REPROKIT_TRAINERS_PATH"] += os.pathsep + str(mine)
    (tmp_path / "site").mkdir()

    def trainers_said() -> str:
        done = run_inv(
            "preflight", str(recipe), *CPU, "--no-steps", "--json", "--out", str(tmp_path), env=env
        )
        assert done.returncode == 0, done.stderr
        (said,) = [f["message"] for f in json.loads(done.stdout)["findings"] if f["check"] == "trainers"]
        assert said.startswith("1 trainer module(s) import in this Python"), said
        return said

    assert KEPT not in trainers_said()
    assert KEPT in trainers_said()
    (mine / "helpers" / "__init__.py").write_text("EDITED = True\n")  # a trainer's source edited
    assert KEPT not in trainers_said()
    assert KEPT in trainers_said()
    (tmp_path / "site" / "newpackage").mkdir()  # a package installed on the path
    assert KEPT not in trainers_said()
    assert KEPT in trainers_said()


def test_each_modules_answer_is_kept_alone_so_a_preflight_of_fewer_trainers_imports_nothing_new(
    tmp_path, monkeypatch
):
    """After a preflight of every recipe, one of a single recipe starts no Python; one that adds a
    trainer imports that one alone (torch and transformers again: seconds a module set)."""
    from types import SimpleNamespace

    from reprokit.preflight.checks import trainers as check

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("REPROKIT_TRAINERS_PATH", fake_env()["REPROKIT_TRAINERS_PATH"])
    started: list[list[str]] = []
    real_run = subprocess.run

    def run(argv, **options):
        started.append(argv[3:])  # python -c PROBE MODULES...
        return real_run(argv, **options)

    monkeypatch.setattr(check.subprocess, "run", run)
    context = SimpleNamespace(container="none", profile=accelerators.get("cpu"))

    def said(modules: list[str]) -> tuple[dict, str]:
        probe = check.Trainers()
        output, _ = probe._probe(context, modules)
        return check.parse(output), probe.kept

    found, kept = said(["fakes.fake_trainer", "json"])
    assert set(found["modules"]) == {"fakes.fake_trainer", "json"} and not kept
    found, kept = said(["json"])
    assert list(found["modules"]) == ["json"] and kept and found["python"] == sys.version.split()[0]
    found, kept = said(["fakes.fake_trainer", "csv"])
    assert set(found["modules"]) == {"fakes.fake_trainer", "csv"} and not kept
    assert started == [["fakes.fake_trainer", "json"], ["csv"]]


class FakeEngine:
    """The Docker SDK's client as imagereads uses it: an image's id by its tag, and a container's output
    (numbered, to tell a run from a kept answer)."""

    def __init__(self, image_id: str):
        self.image_id, self.fails, self.ran = image_id, False, 0
        self.images = self
        self.containers = self

    def get(self, reference: str):
        return type("Image", (), {"id": f"{self.image_id}-{reference}"})()

    def run(self, reference: str, argv: list[str], remove: bool, **options) -> bytes:
        assert remove
        self.ran += 1
        if self.fails:
            raise RuntimeError("the container exited 1")
        return f"answer {self.ran}".encode()


# ---- a trainer that is not there is said before anything runs ---------------------------------------------


def _with_trainer(tmp_path: Path, trainer: str) -> Path:
    path = tmp_path / "mine.yaml"
    text = (ROOT / "recipes" / "volo" / "recipe.yaml").read_text()
    path.write_text(
        text.replace("\ntrainer: volo\n", f"\ntrainer: {trainer}\n").replace(
            "\nname: volo\n", "\nname: mine\n"
        )
    )
    return path


@pytest.mark.parametrize(
    "task",
    [("show",), ("reproduce", "--dry-run"), ("preflight", "--no-steps")],
    ids=["show", "dry-run", "preflight"],
)
def test_a_recipe_whose_kit_trainer_does_not_exist_is_refused_by_show_dry_run_and_preflight(tmp_path, task):
    recipe = _with_trainer(tmp_path, "vollo")
    out = () if task[0] == "show" else ("--out", str(tmp_path / "out"))
    result = run_inv(task[0], str(recipe), *task[1:], "--accelerator", "cpu", *out)
    assert result.returncode != 0, result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        f"reprokit: {recipe}: trainer: 'vollo' is not one of the kit's trainers ({', '.join(kit_trainers())}); "
        "name one, or your own module by its dotted path"
    )


@pytest.mark.parametrize(
    "task", [("reproduce", "--dry-run"), ("preflight", "--no-steps")], ids=["dry-run", "preflight"]
)
def test_a_users_trainer_module_this_python_lacks_is_refused_where_the_cells_run_in_it(tmp_path, task):
    recipe = _with_trainer(tmp_path, "mytrainers.volo")
    result = run_inv(
        task[0], str(recipe), *task[1:], *CPU[:-2], "--container", "none", "--out", str(tmp_path / "out")
    )
    assert result.returncode != 0, result.stdout
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "reprokit: trainer module mytrainers.volo is not on this machine (REPROKIT_TRAINERS_PATH,"
        )
    )
    shown = run_inv("show", str(recipe), "--accelerator", "cpu")
    assert shown.returncode == 0, shown.stderr
    assert (
        "warning: trainer module mytrainers.volo is not on this machine: an image must have it"
        in shown.stdout
    )


@pytest.mark.docker
def test_the_preflight_imports_the_trainers_in_the_image_and_names_one_that_does_not_import(tmp_path):
    from reprokit import images

    if images.engine_status() is not None:
        pytest.skip(f"no Docker engine: {images.engine_status()}")
    # The base image has a Python and no trainers: each import is tried there, and refused by name.
    result = run_inv("preflight", "volo", *CPU[:-2], "--container", "docker", "--image", "reprokit/base:bookworm",
                     "--no-steps", "--out", str(tmp_path))  # fmt: skip
    assert result.returncode == 1, result.stderr
    refusal = next(f for f in findings(result) if f[:2] == ("x", "trainers"))
    assert refusal[2].startswith(
        "reprokit_trainers.volo does not import in the image reprokit/base:bookworm: ModuleNotFoundError: "
        "No module named 'reprokit_trainers'"
    )


# ---- given data is used whole or refused ------------------------------------------------------------------


def _imagenet_with_a_dangling_class(tmp_path: Path) -> tuple[Path, Path]:
    root = tiny_imagenet(tmp_path / "imagenet")
    link = root / "train" / "n09999999"
    link.symlink_to(tmp_path / "the-disk-that-was-unmounted" / "n09999999")
    return root, link


@pytest.mark.parametrize(
    "task", [("preflight", "--no-steps"), ("reproduce", "--dry-run")], ids=["preflight", "dry-run"]
)
def test_a_class_folder_that_is_a_link_to_nothing_is_refused_not_dropped(tmp_path, task):
    root, link = _imagenet_with_a_dangling_class(tmp_path)
    result = run_inv(
        task[0], "volo", *task[1:], *CPU, "--data", f"imagenet={root}", "--out", str(tmp_path / "out")
    )
    assert result.returncode != 0, result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        f"reprokit: --data imagenet={root}: class folder {link} is a link to {os.readlink(link)}, which is not a "
        "folder: every class of the given data must be readable (a class left out is not the data given); fix "
        "or remove the link"
    )


# One refusal as a user's shell sees it (a new process: its last line, no traceback); the other from main in
# this process, where the same SystemExit carries the line (a new process is mostly importing torch).
@pytest.mark.filterwarnings("ignore::FutureWarning")  # timm's import, where this test is the first to make it
@pytest.mark.parametrize(("trainer", "where"), [("vit", "process"), ("volo", "main")])
def test_the_trainer_itself_refuses_a_class_folder_it_cannot_read_in_one_line(
    tmp_path, capsys, trainer, where
):
    root, link = _imagenet_with_a_dangling_class(tmp_path)
    flags = {
        "vit": ["--model_name_or_path", "pycls-vit-tiny", "--img_size", "32"],
        "volo": ["--model_name_or_path", "volo_d1", "--model_kwargs_json", json.dumps({"layers": [1, 1, 1, 1], "embed_dims": [32, 64, 64, 64], "num_heads": [1, 2, 2, 2], "stem_hidden_dim": 16}),
                 "--img_size", "32", "--token_label_size", "2", "--amp", "no"],
    }[trainer]  # fmt: skip
    argv = ["--output_dir", str(tmp_path / "run"), *flags, "--data_dir", str(root), "--per_device_train_batch_size",
            "2", "--max_steps", "2", "--logging_steps", "1", "--throughput_warmup_steps", "1",
            "--dataloader_num_workers", "0"]  # fmt: skip
    if where == "process":
        result = subprocess.run(
            [sys.executable, "-m", f"reprokit_trainers.{trainer}", *argv],
            capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        assert result.returncode != 0, result.stdout[-2000:]
        assert "Traceback" not in result.stderr
        line = result.stderr.strip().splitlines()[-1]
    else:
        import torch.distributed

        main = importlib.import_module(f"reprokit_trainers.{trainer}.run_{trainer}").main
        try:
            with pytest.raises(SystemExit) as raised:
                main(argv)
        finally:  # the 1-rank group main joined before it read the data, left as a run's end leaves it
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
        line = raised.value.code  # the interpreter prints a str code as the last line and exits 1
        assert isinstance(line, str) and "\n" not in line and "Traceback" not in capsys.readouterr().err
    assert line == (
        f"run_{trainer}.py: error: class folder {link} is a link to {os.readlink(link)}, which is not a folder: "
        "every class of the given data must be readable; fix or remove the link"
    )
    assert not (tmp_path / "run" / "summary.json").exists()


def imagenet_with_an_empty_class(tmp_path: Path) -> tuple[Path, Path]:
    """Three class folders, one of them empty (its images not copied yet): two classes hold images."""
    root = tiny_imagenet(tmp_path / "imagenet")
    empty = root / "train" / "n09999999"
    empty.mkdir()
    (empty / "README.txt").write_text("copy the class here\n")  # a file, but no image
    return root, empty


@pytest.mark.parametrize(
    "task", [("preflight", "--no-steps"), ("reproduce", "--dry-run")], ids=["preflight", "dry-run"]
)
def test_a_class_folder_without_an_image_is_refused_not_counted_and_never_seen(tmp_path, task):
    root, empty = imagenet_with_an_empty_class(tmp_path)
    result = run_inv(
        task[0], "volo", *task[1:], *CPU, "--data", f"imagenet={root}", "--out", str(tmp_path / "out")
    )
    assert result.returncode != 0, result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        f"reprokit: --data imagenet={root}: 1 of its 3 class folders holds no image (.jpeg, .jpg, .png): {empty}; "
        "every class given is trained on (an empty one would be counted, never seen): add its images or remove "
        "the folder"
    )
    assert not (tmp_path / "out").exists()


def test_the_preflight_names_a_class_folder_whose_every_image_is_bad(tmp_path):
    root = tiny_imagenet(tmp_path / "imagenet")
    (bad,) = (root / "train" / "n01443537").iterdir()
    bad.write_bytes(b"")  # a copy cut short: the class's one image reads as nothing
    result = run_inv(
        "preflight", "volo", *CPU, "--no-steps", "--data", f"imagenet={root}", "--out", str(tmp_path / "o")
    )
    assert result.returncode != 0, result.stdout
    (refusal,) = [f for f in findings(result) if f[:2] == ("x", "data")]
    assert refusal[2].startswith(
        f"--data imagenet: not one image of class folder(s) {bad.parent} reads (bad image {bad}: "
    )
    assert "); every class given is trained on: replace its images or remove the folder [volo--" in refusal[2]


def test_the_preflight_says_how_many_classes_a_given_folder_holds_beside_the_datasets(tmp_path):
    root = tiny_imagenet(tmp_path / "imagenet")
    result = run_inv(
        "preflight", "volo", *CPU, "--no-steps", "--data", f"imagenet={root}", "--out", str(tmp_path / "o")
    )
    assert (
        "-", "data", "--data imagenet: 2 class folder(s) (imagenet-1k has 1000: the run records the count it trained "
        "on); 2 image(s) sampled over its classes, all decode",
    ) in findings(result)  # fmt: skip


# Every recipe found, each with its smoke cells; the ViT ladder's ten, two of them (the largest writers);
# BridgeTower's three differ only in their loader workers, which write nothing of their own to the run
# directory: one, with workers (about 12 CPU-s a cell).
SOME_SMOKE_CELLS = {"vit-speedups": ("batch-second", "fsdp"), "bridgetower": ("workers2",)}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", recipes.available())
def test_the_storage_a_smoke_session_is_asked_for_is_what_it_writes_with_a_margin(tmp_path, recipe):
    from reprokit import preflight

    variants = SOME_SMOKE_CELLS.get(recipe, ())

    request = Request(recipes=[recipe], accelerator="cpu", scale="smoke", runtime="local", container="none",
                      variants=list(variants))  # fmt: skip
    report = preflight.run(request, str(tmp_path / "pf"), steps=False)
    (said,) = [f.message for f in report.findings
               if f.check == "storage" and f.message.startswith(str((tmp_path / "pf").resolve()))]  # fmt: skip
    number, unit = said.split("the session needs about ")[1].split()[:2]
    asked = float(number) * {"KiB": storage.KIB, "MiB": storage.MIB, "GiB": storage.GIB}[unit.rstrip(")")]
    out = tmp_path / "results"
    chosen = [word for variant in variants for word in ("--variant", variant)]
    ran = run_inv("reproduce", recipe, *chosen, *CPU, "--out", str(out), env={"OMP_NUM_THREADS": "1"})
    assert ran.returncode == 0, ran.stderr[-3000:]
    (session,) = [p for p in out.iterdir() if p.is_dir()]
    runs = {p.name: size(p) for p in (session / "runs").iterdir()}
    # Each run directory within what its recipe says one writes (measured: no margin taken here) ...
    written = recipes.load(recipe).scales["smoke"].run_dir_bytes
    assert max(runs.values()) <= written, (runs, written)
    # ... and the session's own files (tables, report, plots, TensorBoard) within what is asked for them.
    beside = size(session) - sum(runs.values())
    assert beside <= storage.session_files(report.cells), (beside, storage.session_files(report.cells))
    wrote = size(out)
    # Enough, and not two orders of magnitude more (it asked 192 MiB of a session that wrote 612 KiB).
    assert wrote <= asked <= 4 * wrote, (wrote, asked)


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
