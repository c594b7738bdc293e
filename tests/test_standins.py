"""Each accelerator's image whose base has a stand-in (cuda, gaudi2, and any folder that adds one), built
offline on CI's stand-in for its vendor base (tests/standins.py), running a smoke cell of every trainer
on the CPU as a uid with no passwd entry in the image, one of them under torch.compile; an image on
another base's stand-in (`standin.of`) runs one smoke cell: its own layers are what differ. What only
a real accelerator can prove is listed in the README."""

from __future__ import annotations

import json
import time

import pytest

from reprokit.contract import trainers
from reprokit.plan import accelerators, cells, recipes
from reprokit.run import supervise
from reprokit.run.containers.docker import Docker, DockerOptions
from reprokit.run.handles import NoOptions
from reprokit.run.runtimes.local import LocalRuntime
from tests import standins
from tests.conftest import run_inv
from tests.test_docker import engine  # noqa: F401 - the fixture

USER = "4321:4321"  # a uid no image has in its /etc/passwd


def _recipe_of_each_trainer() -> list[str]:
    """One recipe per kit trainer (the first by name that runs it), found in the recipe folders: each
    trainer's smoke cell on the CPU, in the image, is that recipe's first."""
    chosen: dict[str, str] = {}
    for name in recipes.available():
        chosen.setdefault(recipes.load(name).trainer, name)
    return [chosen[trainer] for trainer in trainers.kit_trainers()]


CELLS = _recipe_of_each_trainer()


def _stood_in() -> list:
    """Every accelerator whose base names a stand-in, found in its folder; under pytest-xdist, those on
    one stand-in run in turn on one worker, and each stand-in's on its own (tests/conftest.py)."""
    found = []
    for name, profile in accelerators.profiles().items():
        spec = profile.base_manifest.standin
        if spec:
            group = f"docker-test_standins-{spec.of or profile.base_manifest.name}"
            found.append(pytest.param(name, marks=pytest.mark.xdist_group(group)))
    return found


STOOD_IN = _stood_in()


@pytest.fixture(scope="module", params=STOOD_IN)
def vendor_image(request, engine, tmp_path_factory):  # noqa: F811 - the fixture
    profile = accelerators.get(request.param)
    timings: dict[str, float] = {}
    started = time.monotonic()
    base = standins.build(profile.base_manifest, engine)
    timings["stand-in"] = time.monotonic() - started
    wheels = tmp_path_factory.mktemp(f"wheelhouse-{profile.name}")
    started = time.monotonic()
    # The mediapipe modules are on GitHub, out of CI's reach: the gaudi2 image is built without them.
    filled = run_inv(
        "wheelhouse", "--accelerator", profile.name, "--dest", str(wheels), "--without-vendor", timeout=1200
    )
    assert filled.returncode == 0, filled.stderr
    timings["wheelhouse"] = time.monotonic() - started
    started = time.monotonic()
    built = run_inv(
        "build", "--accelerator", profile.name, "--base-image", base, "--wheelhouse", str(wheels),
        *(["--without-vendor"] if profile.vendor else []), timeout=1800,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    timings["build"] = time.monotonic() - started
    print(f"\n{profile.name} on {base}: " + ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()))
    return profile, base, built.stdout.strip().splitlines()[-1], wheels


def _cell(recipe: str, **args) -> cells.Cell:
    cell = cells.expand(recipes.load(recipe), recipe, "cpu", "smoke", None)[0]
    cell.args.update(args)
    return cell


def _run(image: str, cell: cells.Cell, session_dir) -> tuple[dict, dict]:
    runtime = LocalRuntime(NoOptions(), Docker(DockerOptions(image=image, user=USER)))
    run_dir = session_dir / "runs" / cell.cell_id
    runtime.check(accelerators.get("cpu"))
    outcome = supervise.run_cell(runtime, cell, run_dir, accelerators.get("cpu"), timeout=900)
    assert outcome["status"] == "ok", (outcome.get("error"), (outcome.get("log_tail") or [])[-15:])
    return outcome, json.loads((run_dir / "sysinfo.json").read_text())


@pytest.mark.docker
def test_the_pip_layer_ran_offline_and_kept_the_bases_framework(engine, vendor_image):  # noqa: F811
    profile, base, tag, _ = vendor_image
    history = engine.images.get(tag).history()
    (pip_layer,) = [h for h in history if "pip install" in h["CreatedBy"] and "lock.txt" in h["CreatedBy"]]
    assert "WHEELHOUSE_URL=http://127.0.0.1:" in pip_layer["CreatedBy"]
    frozen = engine.containers.run(
        tag, ["bash", "-c", "cat /opt/reprokit/base-constraints.txt"], remove=True
    ).decode()
    assert "torch==2.6.0" in frozen and "numpy==1.26.4" in frozen
    shown = engine.containers.run(
        tag,
        ["python3", "-c", "import torch, numpy; print(torch.__version__, numpy.__version__)"],
        remove=True,
    )
    assert shown.decode().split()[0].startswith("2.6.0") and shown.decode().split()[1] == "1.26.4"
    labels = engine.images.get(tag).labels
    assert labels["io.reprokit.vendor"] == ("absent" if profile.vendor else "none")


@pytest.mark.docker
@pytest.mark.parametrize("recipe", CELLS)
def test_a_smoke_cell_of_each_trainer_runs_in_the_image_as_a_uid_without_a_passwd_entry(
    vendor_image, recipe, tmp_path
):
    profile, base, tag, _ = vendor_image
    if profile.base_manifest.standin.of and recipe != CELLS[0]:
        pytest.skip(
            f"on {profile.base_manifest.standin.of}'s stand-in, whose image runs every trainer: one cell"
        )
    cell = _cell(recipe)
    outcome, sysinfo = _run(tag, cell, tmp_path)
    assert outcome["samples_per_second"] > 0
    assert sysinfo["versions"]["torch"].startswith("2.6.0")
    # Written by the container's uid into the run directory it was given.
    assert (tmp_path / "runs" / cell.cell_id / "summary.json").stat().st_uid == 4321


@pytest.mark.docker
def test_a_torch_compile_cell_runs_as_that_uid_on_the_cpu(vendor_image, tmp_path):
    """inductor's cache directory asks getpass.getuser() for the user's name: a uid without one
    raised KeyError there on torch < 2.13 (the bases ship 2.6), unless the container says who it is."""
    profile, base, tag, _ = vendor_image
    if profile.name != "cuda":
        pytest.skip("one torch.compile cell is enough: the cuda image's")
    # The smoke ViT at one layer of width 16: inductor generates and compiles (g++) a kernel per distinct
    # fused op of the forward and backward graphs, and this one has fewer distinct ones to compile.
    small = json.dumps({"n_layers": 1, "n_heads": 1, "hidden_d": 16, "mlp_d": 16})
    cell = _cell("vit-speedups", compile=True, max_steps=3, model_config_json=small)
    outcome, _ = _run(tag, cell, tmp_path)
    assert outcome["compile"] is True and outcome["samples_per_second"] > 0
