"""An accelerator is a folder: a made-up one (tests/fixtures/accelerator/: FAKE-1 boards, listed by a
fake `fake-smi`) copied into the kit's accelerators/ is listed, planned, rendered and preflighted,
with no other file of the kit changed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reprokit.plan import accelerators
from tests.conftest import ROOT, run_inv

FIXTURE = ROOT / "tests" / "fixtures" / "accelerator"
SMOKE = ("--accelerator", "fake", "--scale", "smoke", "--runtime", "local", "--container", "none")


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """The kit's accelerators/ as shipped, and the made-up folder copied in beside them; a PATH with
    the made-up board's listing tool (two boards)."""
    top = tmp_path_factory.mktemp("kit")
    folder = shutil.copytree(accelerators.ACCELERATORS, top / "accelerators")
    shutil.copytree(FIXTURE, folder / "fake")
    tools = top / "bin"
    tools.mkdir()
    (tools / "fake-smi").write_text("#!/bin/sh\nprintf 'Board 0: FAKE-1\\nBoard 1: FAKE-1\\n'\n")
    (tools / "fake-smi").chmod(0o755)
    patch = pytest.MonkeyPatch()
    patch.setattr(accelerators, "ACCELERATORS", folder)
    accelerators.profiles.cache_clear()
    accelerators.bases.cache_clear()
    yield {"PATH": f"{tools}:{Path(shutil.which('python3') or '/usr/bin/python3').parent}:/usr/bin:/bin"}
    patch.undo()
    accelerators.profiles.cache_clear()
    accelerators.bases.cache_clear()


def test_a_copied_accelerator_folder_is_listed_among_the_kits(kit):
    assert "fake" in accelerators.flag_help()  # what --accelerator's help is made from
    result = run_inv("show", "volo", "--accelerator", "nope", env=kit)
    assert result.returncode != 0
    known = result.stderr.split("known accelerators: ")[1].removesuffix(" (or auto)\n").split(", ")
    assert "fake" in known and {"cpu", "cuda", "gaudi2"} <= set(known)


def test_a_copied_accelerator_folder_is_planned_for_the_variants_it_runs(kit):
    result = run_inv("show", "volo", *SMOKE[:4], env=kit)
    assert result.returncode == 0, result.stderr
    assert "volo--pretrain-d1" in result.stdout
    profile = accelerators.get("fake")
    assert profile.lock_file == accelerators.ACCELERATORS / "fake" / "lock.txt"
    assert profile.base_manifest.name == "fake-base-1.0"


def test_a_copied_accelerator_folder_is_rendered_with_its_trainer_code_in_the_image(kit, tmp_path):
    result = run_inv("render", "volo", *SMOKE, "--out", str(tmp_path), env=kit)
    assert result.returncode == 0, result.stderr
    run_sh = (tmp_path / "fake-smoke" / "runs" / "volo--pretrain-d1" / "run.sh").read_text()
    assert "export REPROKIT_ACCELERATOR=fake" in run_sh
    context = tmp_path / "docker" / "fake"
    assert (context / "accelerators" / "fake" / "trainer.py").read_bytes() == (
        FIXTURE / "trainer.py"
    ).read_bytes()
    assert "COPY accelerators/ /opt/reprokit/accelerators/" in (context / "Dockerfile").read_text()


def test_a_copied_accelerator_folder_is_preflighted_on_its_listed_boards(kit, tmp_path):
    result = run_inv("preflight", "volo", *SMOKE, "--no-steps", "--out", str(tmp_path), env=kit)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 x FAKE-1" in result.stdout
    assert "volo--pretrain-d1" in result.stdout
