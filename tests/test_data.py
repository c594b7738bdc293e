"""Real data in: `--data KEY=PATH` is checked for its layout before anything starts, reaches the trainer
through every runtime (mounted read-only in containers), and is recorded with the results."""

from __future__ import annotations

import json

import pytest

from reprokit.collect import collect
from reprokit.plan import cells, recipes
from tests.conftest import run_inv
from tests.fakes import IMAGENET_KEY, fake_env, fake_recipe, tiny_imagenet

CPU_SMOKE = ("--accelerator", "cpu", "--scale", "smoke")


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("missing", "--data imagenet={root}: no such folder"),
        (
            "no-train",
            "--data imagenet={root}: expected ImageNet's layout <root>/train/<class>/<image>.JPEG; {root}/train is not there",
        ),
        ("no-images", "--data imagenet={root}: no images under {root}/train/<class>/"),
    ],
)
def test_a_path_without_the_expected_layout_is_one_line_before_anything_runs(tmp_path, layout, expected):
    root = tmp_path / "imagenet"
    if layout != "missing":
        root.mkdir()
    if layout == "no-images":
        (root / "train" / "n01").mkdir(parents=True)
    result = run_inv("run", "volo", *CPU_SMOKE, "--data", f"imagenet={root}", "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("reprokit: " + expected.format(root=root))
    assert not (tmp_path / "out").exists()


def test_every_class_folder_of_given_images_and_label_maps_holds_one_the_trainer_reads(tmp_path):
    root = tiny_imagenet(tmp_path / "imagenet")
    webp = root / "train" / "n02000000"  # images the trainers do not read, and a link to a gone one
    webp.mkdir()
    (webp / "a.webp").write_bytes(b"RIFF")
    (webp / "b.JPEG").symlink_to(tmp_path / "gone.JPEG")
    result = run_inv("run", "volo", *CPU_SMOKE, "--data", f"imagenet={root}", "--dry-run")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"reprokit: --data imagenet={root}: 1 of its 3 class folders holds no image (.jpeg, .jpg, .png): {webp}; "
        "every class given is trained on (an empty one would be counted, never seen): add its images or remove "
        "the folder"
    )
    labels = tmp_path / "labels"
    for name in ("n01440764", "n01443537"):
        (labels / name).mkdir(parents=True)
    (labels / "n01440764" / "n01440764_1.pt").write_bytes(b"PK\x03\x04")
    webp.joinpath("b.JPEG").unlink()
    webp.joinpath("a.webp").unlink()
    webp.rmdir()
    result = run_inv(
        "run",
        "volo",
        *CPU_SMOKE,
        "--data",
        f"imagenet={root}",
        "--data",
        f"token_labels={labels}",
        "--dry-run",
    )
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"reprokit: --data token_labels={labels}: 1 of its 2 class folders holds no label map (.pt): "
            f"{labels / 'n01443537'}; "
        )
    )


def test_an_unknown_key_names_the_keys_the_recipes_take(tmp_path):
    result = run_inv("run", "volo", *CPU_SMOKE, "--data", "imagenett=/x", "--dry-run")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "--data imagenett: no recipe of this session takes it; known keys: imagenet (" in last
    assert "token_labels (" in last


def test_real_images_replace_the_synthetic_stand_in_in_the_trainer_arguments(tmp_path):
    root = tiny_imagenet(tmp_path / "imagenet")
    found = cells.expand(recipes.load("volo"), "volo", "cpu", "smoke", data={"imagenet": str(root)})
    assert all(c.args["data_dir"] == str(root) and "synthetic_data" not in c.args for c in found)
    assert all(c.data == {"imagenet": str(root)} for c in found)


def _run_with_data(tmp_path, *runtime: str, env: dict | None = None):
    root = tiny_imagenet(tmp_path / "imagenet")
    recipe = fake_recipe(tmp_path / "fake.yaml", [{"name": "v", "baseline": True}], data_keys=IMAGENET_KEY)
    out = tmp_path / "out"
    result = run_inv(
        "run", str(recipe), *CPU_SMOKE, *runtime, "--data", f"imagenet={root}", "--out", str(out), env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (session,) = out.iterdir()
    return root, session, session / "runs" / "fake--v"


def test_data_reaches_the_trainer_under_the_local_runtime_and_is_recorded(tmp_path):
    root, session, run_dir = _run_with_data(tmp_path, "--runtime", "local", env=fake_env())
    seen = json.loads((run_dir / "seen_data.json").read_text())
    assert seen["data_dir"] == str(root) and "train/n01440764/n01440764_1.JPEG" in seen["files"]
    assert json.loads((run_dir / "cell.json").read_text())["data"] == {"imagenet": str(root)}
    assert json.loads((session / "session.json").read_text())["request"]["data"] == {"imagenet": str(root)}
    (row,) = collect.rows(session)
    assert row.data == f"imagenet={root}"


def test_a_given_dataset_cache_replaces_the_smoke_scales_synthetic_data_and_random_weights(tmp_path):
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    (cell,) = cells.expand(
        recipes.load("bridgetower"),
        "bridgetower",
        "cpu",
        "smoke",
        ["workers0"],
        data={"dataset_cache": str(cache)},
    )
    assert cell.args["cache_dir"] == str(cache)
    assert "synthetic_data" not in cell.args and "random_init" not in cell.args
