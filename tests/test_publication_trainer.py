"""A publication is a folder, its trainer included: a made-up publication (`recipes/madepub/`: its
recipe.yaml, the SOURCES.md it cites and its own trainer package `madetrainer/`, with its argument
schema and its rehearsal) copied into a kit is listed, planned, rendered (its trainer copied into the
image's context, flat), rehearsed for a bare node and preflighted, with no other file of the kit
changed. The kit is a temporary one: a copy of the recipes folder, beside a link to the trainers
package, which finds the recipes beside itself."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from reprokit.barenode import rehearsal
from reprokit.contract import layout, trainers
from reprokit.plan import recipes
from tests.conftest import ROOT, run_inv
from tests.fakes import fake_recipe

NAME, TRAINER = "madepub", "madetrainer"
CPU = ("--accelerator", "cpu", "--scale", "smoke")
LOCAL = ("--runtime", "local", "--container", "none")

# The trainer: the BridgeTower arguments it takes (its schema is BridgeTower's, open), and nothing run.
MAIN = '''"""A made-up trainer: its imports are all the kit's checks need of it."""

import sys

if __name__ == "__main__":
    sys.exit("madetrainer trains nothing")
'''
# Its rehearsal: the cell's batch read from its arguments, a device step that counts one MiB.
REHEARSE = '''"""The made-up trainer's rehearsal, found by its package's layout."""

from reprokit_trainers.rehearsal.plan import Prepared

HOST_ONLY = ()


def prepare(argv, scratch, workers_cap):
    batch = int(argv[argv.index("--per_device_train_batch_size") + 1])
    return Prepared(trainer="madetrainer", parsed=(), data={}, ran=["arguments: read"], batch=batch,
                    image_size=0, precision="fp32")


def device_step(prepared, device):
    memory = {"estimate_bytes": 2**20, "device_bytes": 80 * 2**30, "share": 2**20 / (80 * 2**30), "fits": True,
              "tight": False}
    return {"ran": ["device step: counted"], "skipped": [], "parameters": 1000, "memory": memory}
'''


def _publication(folder):
    """The publication's folder: its recipe (run by its own trainer), its sources, its trainer."""
    folder.mkdir(parents=True)
    path = fake_recipe(folder / "recipe.yaml", [{"name": "v", "baseline": True, "args": {"fake_rate": 50}}])
    data = yaml.safe_load(path.read_text())
    data.update(name=NAME, trainer=TRAINER)
    data["publication"]["source"] = f"recipes/{NAME}/SOURCES.md §1"
    data["variants"][0]["args"] = {}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    (folder / "SOURCES.md").write_text(
        f"# What the {NAME} recipe rests on\n\n## 1. A made-up post\n\nNone.\n"
    )
    package = folder / TRAINER
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(MAIN)
    (package / "rehearse.py").write_text(REHEARSE)
    shutil.copy(trainers.package_folder("bridgetower") / "arguments.json", package / "arguments.json")


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """A kit of the checkout's recipes and the made-up publication's folder, its trainers package a
    link to the checkout's; the trainers' processes take the package from there (REPROKIT_TRAINERS_PATH)."""
    top = tmp_path_factory.mktemp("kit")
    folder = shutil.copytree(
        recipes.RECIPES_DIR, top / "recipes", ignore=shutil.ignore_patterns("__pycache__")
    )
    _publication(folder / NAME)
    (top / "scripts").mkdir()
    (top / "scripts" / "reprokit_trainers").symlink_to(ROOT / "scripts" / "reprokit_trainers")
    patch = pytest.MonkeyPatch()
    patch.setattr(recipes, "RECIPES_DIR", folder)
    patch.setattr(layout, "RECIPES", folder)
    patch.setenv("REPROKIT_TRAINERS_PATH", str(top / "scripts"))
    yield top
    patch.undo()


def test_a_publication_folders_trainer_is_a_kit_trainer_found_in_its_folder(kit):
    assert TRAINER in trainers.kit_trainers()
    assert trainers.locate(f"reprokit_trainers.{TRAINER}") == kit / "recipes" / NAME / TRAINER / "__main__.py"


def test_a_publication_with_its_trainer_is_listed_and_planned(kit):
    listed = run_inv("recipes", "--json")
    assert listed.returncode == 0, listed.stderr
    assert NAME in [found["name"] for found in json.loads(listed.stdout)["recipes"]]
    shown = run_inv("show", NAME, *CPU, "--json")
    assert shown.returncode == 0, shown.stderr
    assert [(c["cell_id"], c["trainer"]) for c in json.loads(shown.stdout)["cells"]] == [
        (f"{NAME}--v", TRAINER)
    ]


def test_a_publication_with_its_trainer_is_rendered_its_trainer_in_the_images_context(kit, tmp_path):
    result = run_inv("render", NAME, "--accelerator", "cuda", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (run_sh,) = tmp_path.rglob(f"{NAME}--v/run.sh")
    assert f"-m reprokit_trainers.{TRAINER}" in run_sh.read_text()
    # Flat, beside the shared package's code: the image needs no path of the recipes.
    copied = tmp_path / "docker" / "cuda" / "reprokit_trainers" / TRAINER
    assert (copied / "__main__.py").read_text() == MAIN and (copied / "arguments.json").is_file()


def test_a_publication_with_its_trainer_is_rehearsed_through_its_own_rehearsal(kit, tmp_path):
    slices_file = tmp_path / "slices.yaml"
    slices_file.write_text(
        yaml.safe_dump(
            {
                "measured_steps": 2,
                "slices": {"x": {"title": "the made-up one", "scale": "smoke",
                                 "cells": [{"recipe": NAME, "variant": "v", "seconds": 10}]}},
            }
        )
    )  # fmt: skip
    (found,) = rehearsal.rehearse(["x"], tmp_path / "scratch", slices_file, jobs=1)
    assert found.cell_id == f"{NAME}--v"
    assert found.result["status"] == "ok" and found.result["ran"] == [
        "arguments: read",
        "device step: counted",
    ]


def test_a_publication_with_its_trainer_is_preflighted_its_trainer_imported(kit, tmp_path):
    result = run_inv("preflight", NAME, *CPU, *LOCAL, "--no-steps", "--results", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{NAME}--v" in result.stdout
    assert "1 trainer module(s) import in this Python" in result.stdout
