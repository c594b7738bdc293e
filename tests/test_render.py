"""Rendering: Dockerfiles that pass hadolint, run scripts a user could run by hand."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from reprokit import accelerators, cells, recipes, render
from tests.conftest import ROOT


@pytest.mark.parametrize("accelerator", ["cpu", "cuda", "gaudi2"])
def test_rendered_dockerfiles_pass_hadolint_without_errors(tmp_path, accelerator):
    hadolint = shutil.which("hadolint") or str(ROOT / ".venv" / "bin" / "hadolint")
    context = render.write_build_context(accelerators.get(accelerator), tmp_path / accelerator)
    result = subprocess.run(
        [hadolint, "--failure-threshold", "error", "--no-color", str(context / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = (context / "Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={accelerators.get(accelerator).base_image}" in text
    assert (context / "scripts" / "rundir.py").exists()
    pins = (context / "requirements.txt").read_text()
    assert "transformers==4.49.0" in pins and "datasets==3.6.0" in pins


def test_requirements_everywhere_match_the_trainer_pins_of_pyproject():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    for profile in accelerators.profiles().values():
        for pin in profile.requirements:
            name = pin.split("==")[0]
            same = [p for p in extras if p.split("==")[0] == name]
            assert not same or same[0] == pin, f"{profile.name}: {pin} differs from pyproject's {same[0]}"


def test_gaudi2_run_script_launches_like_gaudi_spawn_with_mpi(inv, tmp_path):
    result = inv("render", "bridgetower", "--accelerator", "gaudi2", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    script = (tmp_path / "bridgetower" / "gaudi2-published" / "workers1" / "run.sh").read_text()
    assert "mpirun -n 8 --bind-to core --map-by" in script
    for flag in (
        "--use_habana",
        "--use_lazy_mode",
        "--gaudi_config_name Habana/clip",
        "--use_hpu_graphs_for_inference",
    ):
        assert flag in script
    assert "--dataloader_num_workers 1" in script and "--per_device_train_batch_size 48" in script
    assert (tmp_path / "bridgetower" / "gaudi2-published" / "workers2-mediapipe" / "run.sh").exists()
    assert (tmp_path / "docker" / "gaudi2" / "Dockerfile").exists()
    syntax = subprocess.run(
        ["bash", "-n", str(tmp_path / "bridgetower" / "gaudi2-published" / "workers1" / "run.sh")]
    )
    assert syntax.returncode == 0


def test_cuda_run_script_uses_torchrun_on_all_devices(inv, tmp_path):
    result = inv("render", "bridgetower", "--accelerator", "cuda", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    script = (tmp_path / "bridgetower" / "cuda-published" / "workers2" / "run.sh").read_text()
    assert "torch.distributed.run --standalone --nproc_per_node 8" in script
    assert "--use_habana" not in script and "mpirun" not in script
    assert not (tmp_path / "bridgetower" / "cuda-published" / "workers2-mediapipe").exists()


def test_a_rendered_run_script_runs_by_hand(tmp_path):
    """run.sh is what the kit runs: a user can run it by hand with RUN_DIR set (here with a fake trainer)."""
    recipe = recipes.load("bridgetower")
    cell = cells.expand(recipe, "bridgetower", "cpu", "smoke")[0]
    cell.trainer = "echo_args.py"
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "echo_args.py").write_text("import sys, json; print(json.dumps(sys.argv[1:]))\n")
    script = render.write_run_dir_inputs(cell, accelerators.get("cpu"), tmp_path / "run")
    out = subprocess.run(
        ["bash", str(script)],
        capture_output=True,
        text=True,
        env={"REPROKIT_SCRIPTS": str(scripts), "PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    import json

    argv = json.loads(out.stdout)
    assert argv[:2] == ["--output_dir", str(tmp_path / "run")]
    assert argv[2:] == cell.argv()
    assert json.loads((tmp_path / "run" / "cell.json").read_text())["cell_id"] == "bridgetower--workers0"
