"""Rendering: Dockerfiles that pass hadolint, and run directories a user can run by hand, laid out as
a session lays them out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from reprokit import images
from reprokit.plan import accelerators, cells, recipes
from reprokit.run.runtimes.base import write_run_dir_inputs
from tests.conftest import ROOT


@pytest.mark.parametrize("accelerator", list(accelerators.profiles()))
def test_rendered_dockerfiles_pass_hadolint_without_errors(tmp_path, accelerator):
    hadolint = shutil.which("hadolint") or str(ROOT / ".venv" / "bin" / "hadolint")
    context = images.write_context(accelerators.get(accelerator), tmp_path / accelerator)
    result = subprocess.run(
        [hadolint, "--failure-threshold", "error", "--no-color", str(context / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = (context / "Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={accelerators.get(accelerator).base_image}" in text
    assert (context / "reprokit_trainers" / "__init__.py").exists()
    assert not list(context.rglob("__pycache__"))
    pins = (context / "lock.txt").read_text()
    assert re.search(r"^transformers==4\.49\.0 --hash=sha256:[0-9a-f]{64}", pins, re.M)
    # What BuildKit is sent: the same Dockerfile with pip's cache mounts; hadolint reads it too.
    buildkit = tmp_path / f"{accelerator}-buildkit.Dockerfile"
    buildkit.write_text(images.context.dockerfile(accelerators.get(accelerator), buildkit=True))
    result = subprocess.run(
        [hadolint, "--failure-threshold", "error", "--no-color", str(buildkit)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _pip_installs(dockerfile: str) -> list[str]:
    """Each RUN step that runs pip install, joined into one line."""
    steps = re.split(r"\n(?=[A-Z]+ )", dockerfile.replace("\\\n", " "))
    return [step for step in steps if step.startswith("RUN ") and "pip install" in step]


@pytest.mark.parametrize("accelerator", list(accelerators.profiles()))
def test_every_pip_install_of_an_image_checks_the_locks_hashes_and_only_buildkits_keeps_a_cache(accelerator):
    profile = accelerators.get(accelerator)
    portable = images.context.dockerfile(profile)
    buildkit = images.context.dockerfile(profile, buildkit=True)
    for text in (portable, buildkit):
        installs = _pip_installs(text)
        assert len(installs) == (2 if accelerator == "cpu" else 1)  # the framework's own layer: cpu only
        assert all("--require-hashes" in step and "--only-binary=:all:" in step for step in installs)
        assert "# syntax=" not in text  # BuildKit would pull its frontend from Docker Hub: no offline build
    assert "--mount" not in portable  # the legacy builder refuses RUN --mount
    assert all(
        step.startswith("RUN --mount=type=cache,id=reprokit-pip,target=/root/.cache/pip ")
        for step in _pip_installs(buildkit)
    )
    assert all("unset PIP_NO_CACHE_DIR;" in step for step in _pip_installs(buildkit))
    # Only the cache differs: the two make the same image, under one tag.
    stripped = re.sub(r"--mount=\S+ \\\n    |    unset PIP_NO_CACHE_DIR; \\\n", "", buildkit)
    assert stripped == portable


def test_the_framework_layer_comes_first_keyed_by_its_own_slice_of_the_lock():
    profile = accelerators.get("cpu")
    files = images.context_files(profile)
    text = files["Dockerfile"].decode()
    assert text.index("COPY lock-framework.txt") < text.index("--no-deps -r /opt/reprokit/lock-framework.txt")
    assert text.index("-r /opt/reprokit/lock-framework.txt") < text.index("COPY lock.txt")
    framework = files["lock-framework.txt"].decode()
    assert "\ntorch==2.14.1 --hash=sha256:" in framework and "idna==" not in framework
    # The slice is the lock's lines as they are, hashes and all.
    lock = files["lock.txt"].decode().splitlines()
    assert all(line in lock for line in framework.splitlines()[1:])


def test_the_image_tag_is_a_hash_of_the_context_computed_without_writing_it(tmp_path):
    profile = accelerators.get("cpu")
    files = images.context_files(profile)
    tag = images.image_tag(profile)
    assert tag == f"reprokit/cpu:0.1.0-{images.context_hash(files)}"
    # What is written is what was hashed.
    written = images.write_context(profile, tmp_path / "context")
    on_disk = {p.relative_to(written).as_posix(): p.read_bytes() for p in written.rglob("*") if p.is_file()}
    assert images.context_hash(on_disk) == images.context_hash(files)
    changed = {**files, "Dockerfile": files["Dockerfile"] + b"# edited\n"}
    assert images.context_hash(changed) != images.context_hash(files)


def test_gaudi2_run_script_launches_like_gaudi_spawn_with_mpi(inv, tmp_path):
    result = inv("render", "bridgetower", "--accelerator", "gaudi2", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    runs = tmp_path / "gaudi2-published" / "runs"
    script = (runs / "bridgetower--workers1" / "run.sh").read_text()
    assert 'mpirun -n 8 ${IN_SLURM[@]+"${IN_SLURM[@]}"} --bind-to core --map-by' in script
    for flag in (
        "--use_habana",
        "--use_lazy_mode",
        # Habana/clip's switches, shipped with the trainer: no hub needed.
        "--gaudi_config_name gaudi_configs/clip.json",
        "--use_hpu_graphs_for_inference",
    ):
        assert flag in script
    assert "--dataloader_num_workers 1" in script and "--per_device_train_batch_size 48" in script
    assert (runs / "bridgetower--workers2-mediapipe" / "run.sh").exists()
    assert (tmp_path / "docker" / "gaudi2" / "Dockerfile").exists()
    assert subprocess.run(["bash", "-n", str(runs / "bridgetower--workers1" / "run.sh")]).returncode == 0


def test_cuda_run_script_uses_torchrun_on_all_devices(inv, tmp_path):
    result = inv("render", "bridgetower", "--accelerator", "cuda", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    runs = tmp_path / "cuda-published" / "runs"
    script = (runs / "bridgetower--workers2" / "run.sh").read_text()
    assert "torch.distributed.run --standalone --nproc_per_node 8" in script
    assert "-m reprokit_trainers.bridgetower" in script
    assert "--use_habana" not in script and "mpirun" not in script
    assert not (runs / "bridgetower--workers2-mediapipe").exists()


def test_a_rendered_dependent_cell_finds_its_producer_beside_it(inv, tmp_path):
    """The finetuning cell reads the pretraining cell's checkpoint through ../<producer>: rendered, as in
    a session, the producer's run directory is that sibling."""
    result = inv("render", "volo", "--accelerator", "cuda", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    runs = tmp_path / "cuda-published" / "runs"
    script = (runs / "volo--finetune-d1-384" / "run.sh").read_text()
    assert '--finetune "$RUN_DIR/../volo--pretrain-d1/checkpoint"' in script
    assert (runs / "volo--pretrain-d1" / "run.sh").exists()
    listed = [line for line in result.stdout.splitlines() if line.endswith("run.sh")]
    assert str(runs / "volo--finetune-d1-384" / "run.sh") in listed


def test_a_rendered_run_script_runs_by_hand(tmp_path):
    """run.sh is what the kit runs: a user can run it by hand with RUN_DIR set (here a stand-in trainer)."""
    recipe = recipes.load("bridgetower")
    cell = cells.expand(recipe, "bridgetower", "cpu", "smoke")[0]
    cell.trainer = "probe.echo_args"
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "__init__.py").write_text("")
    (tmp_path / "probe" / "echo_args.py").write_text("import sys, json; print(json.dumps(sys.argv[1:]))\n")
    script = write_run_dir_inputs(cell, accelerators.get("cpu"), tmp_path / "run")
    out = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        env={"REPROKIT_TRAINERS_PATH": str(tmp_path), "PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    argv = json.loads(out.stdout)
    assert argv[:2] == ["--output_dir", str(tmp_path / "run")]
    assert argv[2:] == cell.argv()
    assert json.loads((tmp_path / "run" / "cell.json").read_text())["cell_id"] == "bridgetower--workers0"


def test_a_multi_node_gaudi2_run_script_needs_a_hostfile(inv, tmp_path):
    result = inv("render", "bridgetower", "--accelerator", "gaudi2", "--nodes", "2", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    script = tmp_path / "gaudi2-published" / "runs" / "bridgetower--workers1" / "run.sh"
    text = script.read_text()
    assert 'mpirun -n 16 --hostfile "$HOSTFILE" --npernode 8' in text
    ran = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert ran.returncode != 0
    assert "REPROKIT_HOSTFILE: set REPROKIT_HOSTFILE to an MPI hostfile of the 2 nodes" in ran.stderr
