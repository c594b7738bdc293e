"""The bare node's slices, its synthetic JPEG files and the rehearsal's fake device: what a node run
and its CPU rehearsal rest on, checked without a GPU, a bundle or a network."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from reprokit.barenode import archive, node_checks, runner, slices
from reprokit.contract.errors import ReprokitError
from reprokit_trainers.common.data import imagenet
from reprokit_trainers.rehearsal import fakedevice, plan
from reprokit_trainers.rehearsal.__main__ import device_key, line

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(slices.load().slices))
def test_every_slice_plans_published_cells_on_one_cuda_device(name):
    planned = slices.plan(name)
    assert planned, name
    for item in planned:
        cell = item.cell
        assert cell.accelerator == "cuda" and cell.devices == 1 and cell.scale == "published"
        if item.left_out is None:
            assert item.seconds > 0
            assert cell.args.get("synthetic_data") is True  # offline: no hub on the node


def test_the_check_slice_runs_three_steps_of_each_trainer():
    planned = slices.plan("a")
    # Each trainer any slice runs (the slices' own plan, never a list of the kit's trainers here).
    every = {p.cell.trainer for name in slices.load().slices for p in slices.plan(name) if not p.left_out}
    assert {p.cell.trainer for p in planned} == every
    assert all(p.cell.args["max_steps"] == 3 for p in planned)
    assert slices.get("a").checks == ["device", "matmul", "energy"]


def test_the_ladder_starts_from_a_true_fp32_baseline_of_its_own():
    planned = {p.cell.cell_id: p.cell for p in slices.plan("d")}
    fp32 = planned["vit-speedups--baseline-fp32"]
    assert fp32.args["tf32"] is False and fp32.args["amp"] == "no"
    assert not fp32.baseline and not fp32.references  # not the publication's baseline nor its figures
    assert (
        planned["vit-speedups--baseline"].baseline and planned["vit-speedups--baseline"].args["tf32"] is True
    )


def test_dali_is_left_out_of_the_volo_slice_and_says_why():
    left = [p for p in slices.plan("c") if p.left_out]
    assert [p.cell.variant for p in left] == ["pretrain-d5-dali"]
    assert "64 MiB" in left[0].left_out


def test_shortened_cells_run_the_warm_up_and_the_measured_steps():
    planned = {p.cell.cell_id: p.cell for p in slices.plan("b")}
    cell = planned["bridgetower--workers0"]
    assert cell.args["max_steps"] == cell.args["throughput_warmup_steps"] + slices.load().measured_steps
    # BridgeTower makes its synthetic rows up front: only as many as the steps consume.
    assert cell.args["synthetic_num_train"] == 48 * (cell.args["max_steps"] + 1)


def test_a_trainer_that_names_its_synthetic_rows_gets_only_what_the_shortened_steps_consume():
    # A role of the trainer's arguments.json, not its name: ViT's cell given the role is shortened alike.
    (planned,) = [p.cell for p in slices.plan("d") if p.cell.variant == "baseline"]
    cell = replace(
        planned, args=dict(planned.args), roles={**planned.roles, "synthetic_rows": "synthetic_num_train"}
    )
    slices.shorten(cell, 3, slices.load().measured_steps)
    assert cell.args["synthetic_num_train"] == cell.args["per_device_train_batch_size"] * (3 + 1)
    slices.shorten(planned, 3, slices.load().measured_steps)  # its own roles: rows as the recipe has them
    assert planned.args["synthetic_num_train"] != cell.args["synthetic_num_train"]


def test_a_slice_argument_outside_the_trainers_schema_is_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "slices.yaml"
    bad.write_text(
        "measured_steps: 2\nslices:\n  x:\n    title: t\n    cells:\n"
        "      - {recipe: vit-speedups, variant: baseline, seconds: 10, args: {per_device_train_batch_size: 0}}\n"
    )
    with pytest.raises(
        ReprokitError,
        match=r"slices.yaml \(slice x, cell 1: vit-speedups baseline\).*per_device_train_batch_size",
    ):
        slices.plan("x", path=bad)


def test_an_unknown_key_in_the_slices_file_is_named(tmp_path):
    bad = tmp_path / "slices.yaml"
    bad.write_text("measured_steps: 2\nslices:\n  x:\n    title: t\n    cels: []\n")
    with pytest.raises(ReprokitError, match="x.cels: unknown key"):
        slices.load(bad)


def test_an_unknown_slice_lists_the_known_ones():
    known = ", ".join(slices.load().slices)
    assert known.startswith("a, b, c, d")
    with pytest.raises(ReprokitError, match=f"its slices: {known}"):
        slices.get("no-such-slice")


# ----------------------------------------------------------------------------------------------
# Synthetic JPEG files, written once on the node


def test_the_synthetic_pool_is_written_once_as_files_and_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv(imagenet.SYNTHETIC_FILES, str(tmp_path / "jpegs"))
    first = imagenet.SyntheticImageSource(100, pool_size=4, seed=3)
    files = sorted((tmp_path / "jpegs").rglob("*.JPEG"))
    assert len(files) == 4
    written = {p: p.stat().st_mtime_ns for p in files}
    second = imagenet.SyntheticImageSource(100, pool_size=4, seed=3)
    assert {p: p.stat().st_mtime_ns for p in files} == written  # read, not written again
    monkeypatch.delenv(imagenet.SYNTHETIC_FILES)
    in_memory = imagenet.SyntheticImageSource(100, pool_size=4, seed=3)
    assert (
        [second.read(i) for i in range(4)]
        == [in_memory.read(i) for i in range(4)]
        == [first.read(i) for i in range(4)]
    )
    assert second.describe(5).endswith(".JPEG")
    monkeypatch.setenv(imagenet.SYNTHETIC_FILES, str(tmp_path / "jpegs"))
    source, described = imagenet.ImageNetArguments(
        synthetic_num_train=100, synthetic_pool_size=4, synthetic_seed=3
    ).image_source()
    assert described["data"] == "synthetic" and described["synthetic_files"] == str(files[0].parent)


# ----------------------------------------------------------------------------------------------
# The fake device's count


def test_the_fake_device_counts_what_lives_and_its_peak():
    device = fakedevice.FakeDevice()
    with device.on():
        model = torch.nn.Linear(1024, 1024)  # 4 MiB of weight, 4 KiB of bias
        params = device.live.current
        assert params == (1024 * 1024 + 1024) * 4
        x = device.put(torch.ones(256, 1024))  # 1 MiB, real data put on the device
        y = model(x)
        y.sum().backward()
        del x, y
    assert device.live.peak >= params + 2 * 256 * 1024 * 4
    # The activations died with their tensors; the gradients live on.
    assert device.live.current == 2 * params


def test_attentions_softmax_is_counted_in_float32_under_autocast_as_cuda_runs_it():
    # The first H100 held VOLO-D5 and the ViT's amp cells at 20-36% more than the rehearsal counted:
    # CUDA's autocast runs softmax (and layer norm, its kind) in float32, the CPU's in half.
    device = fakedevice.FakeDevice()
    with device.on():
        scores = device.put(torch.ones(8, 64, 64))
        weight = torch.nn.Linear(64, 64)
        with torch.autocast("cpu", dtype=torch.float16):
            half = weight(scores)
            probs = half.softmax(-1)
            normed = torch.nn.functional.layer_norm(half, (64,))
            mixed = probs @ half
        before = device.live.current
        kept = probs.float()  # no new storage: already float32
    assert half.dtype == torch.float16
    assert (probs.dtype, normed.dtype) == (torch.float32, torch.float32)
    assert mixed.dtype == torch.float16  # matmuls stay in half, as on CUDA
    assert device.live.current == before and kept.untyped_storage().nbytes() == 8 * 64 * 64 * 4


def test_a_compiled_model_runs_eager_on_the_fake_device_and_is_counted_as_the_eager_one():
    # accelerate compiles BridgeTower's model for --torch_compile: on fake tensors dynamo would trace
    # it for minutes, and what the count speaks for is the eager step (said as not run).
    counts = []
    for compiled in (False, True):
        device = fakedevice.FakeDevice()
        with device.on():
            model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
            run = torch.compile(model) if compiled else model
            run(device.put(torch.ones(64, 256))).sum().backward()
        counts.append((device.live.peak, device.live.current))
    assert counts[0] == counts[1]
    assert torch._dynamo.utils.counters["stats"]["calls_captured"] == 0  # nothing traced


def test_a_cell_over_the_device_does_not_fit_and_says_so():
    memory = fakedevice.estimate(79 * 2**30, {"DDP gradient buckets": 2**30})
    assert not memory["fits"]
    result = {"status": "ok", "cell_id": "x", "parameters": 1e6, "batch": 8, "image_size": 224,
              "precision": "bf16", "memory": memory, "seconds": 1.0}  # fmt: skip
    assert "DOES NOT FIT" in line(result)


def test_cells_that_differ_only_on_the_host_share_one_device_step():
    argv = ["--output_dir", "/a", "--per_device_train_batch_size", "48", "--dataloader_num_workers", "0"]
    other = ["--output_dir", "/b", "--per_device_train_batch_size", "48", "--dataloader_num_workers", "2"]
    assert device_key("bridgetower", argv) == device_key("bridgetower", other)
    assert device_key("bridgetower", argv) != device_key(
        "bridgetower", [*argv, "--image_pipeline", "gpu_decode"]
    )


def test_cells_whose_loaders_hand_the_device_the_same_batch_share_a_step_and_no_others():
    # ViT's input pipeline is host-only: what it hands over decides whether two cells share a step.
    argv = ["--per_device_train_batch_size", "70", "--input_pipeline", "pycls"]
    assert device_key("vit", argv) == device_key("vit", [*argv[:3], "uint8"])
    batch = {"images": torch.zeros(70, 3, 224, 224, dtype=torch.float16), "labels": torch.zeros(70).long()}
    same = {"images": torch.ones(70, 3, 224, 224, dtype=torch.float16), "labels": torch.ones(70).long()}
    assert plan.handed_over(batch) == plan.handed_over(same)
    for images in (
        torch.zeros(70, 3, 224, 224, dtype=torch.float32),  # another dtype
        torch.zeros(70, 3, 256, 256, dtype=torch.float16),  # another size
        torch.zeros(70, 224, 224, 3, dtype=torch.float16).permute(0, 3, 1, 2),  # channels last
    ):
        assert plan.handed_over({**batch, "images": images}) != plan.handed_over(batch)


# ----------------------------------------------------------------------------------------------
# The archive


def test_the_archive_never_carries_a_checkpoint_and_stays_under_its_limit(tmp_path):
    run = tmp_path / "session" / "runs" / "volo--pretrain-d5"
    (run / "checkpoint").mkdir(parents=True)
    (run / "checkpoint" / "model.pt").write_bytes(b"w" * 1024)
    (run / "summary.json").write_text('{"status": "ok"}')
    (run / "stdout.log").write_bytes(b"x" * (archive.LOG_TAIL_BYTES * 3))
    packed = archive.pack(tmp_path / "out.tar.gz", {"session": tmp_path / "session"})
    names = subprocess.run(
        ["tar", "tzf", str(tmp_path / "out.tar.gz")], capture_output=True, text=True
    ).stdout
    assert "summary.json" in names and "checkpoint" not in names and "archive.json" in names
    assert packed["bytes"] <= archive.LIMIT_BYTES


# ----------------------------------------------------------------------------------------------
# The budget


@pytest.fixture
def too_long(tmp_path, monkeypatch):
    """A slice `x` of one cell that needs 5000 s, in a machine lock of the test's own; its slices file."""
    monkeypatch.setenv("REPROKIT_LOCK_DIR", str(tmp_path / "lock"))
    (tmp_path / "lock").mkdir()
    spec = tmp_path / "slices.yaml"
    spec.write_text(
        "measured_steps: 2\nslices:\n  x:\n    title: too long\n    cells:\n"
        "      - {recipe: vit-speedups, variant: baseline, seconds: 5000}\n"
    )
    return spec


def test_a_cell_that_would_not_fit_in_the_budget_is_not_started_and_says_why(tmp_path, too_long):
    code = runner.run(
        "x", tmp_path / "out", tmp_path / "scratch", budget_s=60, slices_file=too_long, accelerator="cpu"
    )
    row = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[0])
    assert code == 1 and row["status"] == "skipped"
    assert "needs about 5000 s" in row["error"] and "--budget-s 60" in row["error"]
    log = (tmp_path / "out" / "runner.log").read_text()
    assert "would not fit in --budget-s 60: vit-speedups--baseline" in log


def test_rows_go_out_only_after_the_archive_that_holds_them(tmp_path, monkeypatch, too_long):
    # A node killed while packing must not leave a row whose run directory no archive holds.
    rows_out = tmp_path / "out" / "results.jsonl"
    seen_while_packing = []
    pack = archive.pack

    def watched(out_file, parts):
        seen_while_packing.append(rows_out.read_text() if rows_out.exists() else "")
        return pack(out_file, parts)

    monkeypatch.setattr(archive, "pack", watched)
    runner.run(
        "x", tmp_path / "out", tmp_path / "scratch", budget_s=60, slices_file=too_long, accelerator="cpu"
    )
    assert seen_while_packing[0] == ""  # the first archive was packed before any row went out
    assert '"status": "skipped"' in rows_out.read_text()


def test_the_node_command_refuses_a_bundle_made_for_another_python_in_one_line(tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "wheels").mkdir(parents=True)
    (bundle / "manifest.json").write_text(json.dumps({"node": {"python": "3.99"}, "wheels": []}))
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "barenode" / "run.py"), "a", "--bundle", str(bundle),
         "--out", str(tmp_path / "out"), "--scratch", str(tmp_path / "scratch")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert (
        done.stdout.strip()
        .splitlines()[-1]
        .endswith(
            f"was made for Python 3.99, this is {sys.version_info.major}.{sys.version_info.minor} ({sys.executable}): "
            f"rebuild it with --python-version {sys.version_info.major}.{sys.version_info.minor}"
        )
    )


def test_the_node_imports_the_kits_trainers_its_cells_run_as_the_package_has_them(tmp_path, monkeypatch):
    # A trainer added to the package is found there, never in a list the node keeps.
    cell = slices.plan("a")[2].cell
    for name in ("vit", "newpub"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__main__.py").write_text("")
        (tmp_path / name / "arguments.json").write_text("{}")
    monkeypatch.setattr(node_checks.trainers, "package_dir", lambda: tmp_path)
    planned = [
        slices.Planned(replace(cell, trainer=trainer), 10.0)
        for trainer in ("vit", "newpub", "my_lab.trainer")
    ]
    assert node_checks.kit_trainers_of(planned) == ["newpub", "vit"]


def test_every_kit_trainer_has_a_rehearsal_found_by_its_name():
    from reprokit.contract import trainers
    from reprokit_trainers.rehearsal.__main__ import rehearsed

    assert list(rehearsed()) == trainers.kit_trainers()


def test_a_device_check_that_does_not_start_is_said_even_where_an_earlier_one_left_its_answer(
    tmp_path, monkeypatch
):
    # A node keeps its scratch between commands (d b c in turn share one): the last check's answer is
    # there, and says the trainers imported.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    earlier = {"software": {"trainers_imported": ["vit"], "trainers_failed": {}}}
    (scratch / "devicecheck.json").write_text(json.dumps(earlier))
    fake = tmp_path / "trainers" / "reprokit_trainers" / "devicecheck"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("import a_package_this_node_lacks\n")
    monkeypatch.setenv("REPROKIT_TRAINERS_PATH", str(fake.parent.parent))
    said: list[str] = []
    found, usable = node_checks.trainers_here(slices.plan("d"), [], scratch, said.append)
    assert not usable
    assert found == {
        "software": {"error": "ModuleNotFoundError: No module named 'a_package_this_node_lacks'"}
    }
    assert said[-1].startswith(
        "checks: the trainers' side does not start in this Python: ModuleNotFoundError"
    )
