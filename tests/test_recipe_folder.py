"""A publication is a folder: a made-up one (`recipes/fakepub/`: its recipe.yaml, run by the fake
trainer, and the SOURCES.md it cites) copied into the kit's recipes/ is listed, planned, rendered,
preflighted and benched on a GPU when it has a variant for cuda, with no other file of the kit changed; a user's folder may hold such folders beside flat
`NAME.yaml` files, and a folder given by path is its recipe."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from reprokit.plan import recipes
from tests.conftest import run_inv
from tests.fakes import fake_env, fake_recipe

CPU = ("--accelerator", "cpu", "--scale", "smoke")
LOCAL = ("--runtime", "local", "--container", "none")


def _publication(folder, name: str = "fakepub"):
    """A publication's folder: its recipe (the fake trainer's, named by the folder) and its sources."""
    folder.mkdir(parents=True)
    path = fake_recipe(folder / "recipe.yaml", [{"name": "v", "baseline": True, "args": {"fake_rate": 50}}])
    data = yaml.safe_load(path.read_text())
    data["name"] = name
    data["publication"]["source"] = f"recipes/{name}/SOURCES.md §1"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    (folder / "SOURCES.md").write_text(
        f"# What the {name} recipe rests on\n\n## 1. A made-up post\n\nNone.\n"
    )
    return folder


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """The kit's recipes/ as shipped, and the made-up publication's folder copied in beside them."""
    top = tmp_path_factory.mktemp("kit")
    folder = shutil.copytree(recipes.RECIPES_DIR, top / "recipes")
    _publication(top / "made" / "fakepub")
    shutil.copytree(top / "made" / "fakepub", folder / "fakepub")
    patch = pytest.MonkeyPatch()
    patch.setattr(recipes, "RECIPES_DIR", folder)
    yield folder
    patch.undo()


def test_a_copied_publication_folder_is_listed_among_the_kits_recipes(kit):
    listed = run_inv("recipes", "--json")
    assert listed.returncode == 0, listed.stderr
    names = [found["name"] for found in json.loads(listed.stdout)["recipes"]]
    # Every folder of the kit's recipes/ and the copied one, in order; no list of the kit's own names
    # here, or the next publication's folder would need this file changed too.
    folders = sorted(path.parent.name for path in kit.glob("*/recipe.yaml"))
    assert "fakepub" in folders and len(folders) > 1
    assert names == folders
    unknown = run_inv("show", "nope", *CPU)
    assert unknown.returncode != 0
    assert unknown.stderr.strip().endswith(f"known recipes: {', '.join(folders)}")


def test_a_copied_publication_folder_is_planned_by_its_name_and_among_all(kit):
    shown = run_inv("show", "fakepub", *CPU)
    assert shown.returncode == 0, shown.stderr
    assert "fakepub--v" in shown.stdout
    planned = run_inv("reproduce", "all", *CPU, *LOCAL, "--dry-run", env=fake_env())
    assert planned.returncode == 0, planned.stdout[-2000:] + planned.stderr
    assert "fakepub--v" in planned.stdout and "volo--" in planned.stdout


def test_a_copied_publication_folder_is_rendered_with_its_trainer(kit, tmp_path):
    result = run_inv("render", "fakepub", *CPU, *LOCAL, "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (run_sh,) = tmp_path.rglob("fakepub--v/run.sh")
    assert "fakes.fake_trainer" in run_sh.read_text()


def test_a_copied_publication_folder_is_preflighted(kit, tmp_path):
    result = run_inv(
        "preflight", "fakepub", *CPU, *LOCAL, "--no-steps", "--results", str(tmp_path), env=fake_env()
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fakepub--v" in result.stdout


def test_a_copied_publication_folder_with_a_cuda_variant_is_in_the_gpu_bench(kit):
    from benchmarks import gpu

    found = gpu.suite()
    # Found from the folders, each with its own `node: bench:` (none: every cuda variant); a publication
    # with no variant for cuda (Gaudi's alone) is not benched on a CUDA device.
    assert found["fakepub"] is None
    for name in recipes.available():
        recipe = recipes.load(name)
        runs_on_cuda = any(v.accelerators is None or "cuda" in v.accelerators for v in recipe.variants)
        assert (name in found) == runs_on_cuda, name
        if runs_on_cuda:
            assert found[name] == recipe.node.bench


def test_a_session_of_a_kit_publication_folder_names_its_recipe_by_name(kit, tmp_path):
    ran = run_inv("run", "fakepub", *CPU, *LOCAL, "--results", str(tmp_path), env=fake_env())
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr
    (session,) = tmp_path.iterdir()
    # By name, as the kit's flat files were: a resume finds the recipe where the kit has it now.
    assert json.loads((session / "session.json").read_text())["request"]["recipes"] == ["fakepub"]


def test_a_users_folder_holds_publication_folders_beside_flat_recipe_files(tmp_path):
    mine = tmp_path / "mine"
    _publication(mine / "my-pub", "my-pub")
    flat = fake_recipe(mine / "my-flat.yaml", [{"name": "w", "baseline": True}])
    flat.write_text(yaml.safe_dump({**yaml.safe_load(flat.read_text()), "name": "my-flat"}, sort_keys=False))
    listed = run_inv("recipes", "--json", "--recipes", str(mine))
    assert listed.returncode == 0, listed.stderr
    assert [found["name"] for found in json.loads(listed.stdout)["recipes"]][-2:] == ["my-flat", "my-pub"]
    for given in ("my-pub", str(mine / "my-pub"), str(mine / "my-pub" / "recipe.yaml")):
        shown = run_inv("show", given, *CPU, "--recipes", str(mine))
        assert shown.returncode == 0, shown.stderr
        assert "my-pub--v" in shown.stdout


def test_a_folder_and_a_flat_file_of_one_name_are_refused_naming_both(tmp_path):
    mine = tmp_path / "mine"
    _publication(mine / "twice", "twice")
    flat = fake_recipe(mine / "twice.yaml", [{"name": "w", "baseline": True}])
    result = run_inv("show", "twice", *CPU, "--recipes", str(mine))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"reprokit: two recipes named 'twice': {mine / 'twice' / 'recipe.yaml'} and {flat}; a session's cells "
        "and results are named by the recipe, so rename the second (its `name:`, and its file if it is twice.yaml)"
    )


def test_a_users_publication_folder_named_like_a_kit_recipe_is_refused_naming_both(tmp_path):
    _publication(tmp_path / "mine" / "volo", "volo")
    result = run_inv("show", "volo", *CPU, "--recipes", str(tmp_path / "mine"))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"reprokit: two recipes named 'volo': {recipes.resolve_path('volo')} and "
        f"{tmp_path / 'mine' / 'volo' / 'recipe.yaml'}; a session's cells and results are named by the recipe, "
        "so rename the second (its `name:`, and its folder if it is volo/)"
    )


def test_a_folder_given_by_path_without_a_recipe_is_one_line_naming_it(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run_inv("show", str(tmp_path / "empty"), *CPU)
    assert result.returncode != 0
    assert result.stderr.strip() == f"reprokit: recipe folder {tmp_path / 'empty'} has no recipe.yaml"
