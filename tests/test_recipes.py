"""Recipes: the published figures are pinned exactly, and a bad recipe gets one clear line."""

from __future__ import annotations

import json

import pytest

from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators, cells, recipes

PUBLISHED = {  # recipes/bridgetower/SOURCES.md §1, samples/s on 8 devices
    "workers0": {"gaudi2": 601.5, "h100": 336.5, "a100-80gb": 227.5},
    "workers1": {"gaudi2": 747.4, "h100": 580.1, "a100-80gb": 339.7},
    "workers2": {"gaudi2": 768.7, "h100": 602.1, "a100-80gb": 345.4},
    "workers2-mediapipe": {"gaudi2": 847.7},
    "fastddp-workers1-v1": {"gaudi2": 705.9},
}


def test_every_recipe_in_the_repo_loads():
    assert "bridgetower" in recipes.available()
    for recipe in recipes.load_all():
        assert recipe.variants and set(recipe.scales) >= {"published", "smoke"}


def test_show_json_prints_the_published_hyperparameters_and_references(inv):
    result = inv("show", "bridgetower", "--scale", "published", "--accelerator", "gaudi2", "--json")
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    hp = shown["hyperparameters"]
    assert hp["per_device_train_batch_size"] == 48
    assert hp["per_device_eval_batch_size"] == 16
    assert hp["num_train_epochs"] == 5
    assert hp["learning_rate"] == 1e-5
    assert hp["throughput_warmup_steps"] == 3 and hp["logging_steps"] == 10
    assert hp["bf16"] is True and hp["remove_unused_columns"] is False
    assert shown["dataset"]["revision"] == "3c6c4f6c0ff7e902833d3afa5f8f3875c2b036e6"
    assert shown["dataset"]["columns"] == {"image": "image", "caption": "image_description"}
    by_variant = {c["variant"]: c for c in shown["cells"]}
    for variant, per_device in PUBLISHED.items():
        refs = {r["device"]: r["value"] for r in by_variant[variant]["references"]}
        assert refs == {"gaudi2": per_device["gaudi2"]}
        assert all(r["devices"] == 8 for r in by_variant[variant]["references"])
    assert by_variant["fastddp-workers1-v1"]["args"]["distribution_strategy"] == "fast_ddp"
    assert all(c["devices"] == 8 for c in shown["cells"])
    # Each figure with what it counts: GaudiTrainer's formula on Gaudi2.
    assert {r["definition"] for c in shown["cells"] for r in c["references"]} == {"gaudi_trainer"}


def test_the_first_version_of_the_post_is_compared_within_itself():
    """The fast_ddp figures (Optimum Habana 1.6, batch 40) have their own baseline, 532.4 at workers 0."""
    recipe = recipes.load("bridgetower")
    v1 = {c.variant: c for c in cells.expand(recipe, "bridgetower", "gaudi2", "published") if c.group == "v1"}
    assert set(v1) == {"workers0-v1", "workers1-v1", "fastddp-workers1-v1", "fastddp-workers1-mediapipe-v1"}
    assert v1["workers0-v1"].baseline and all(
        c.args["per_device_train_batch_size"] == 40 for c in v1.values()
    )
    assert [r["value"] for r in v1["workers0-v1"].references] == [532.4]
    assert [r["value"] for r in v1["workers1-v1"].references] == [639.7]
    assert [r["ratio"] for r in v1["fastddp-workers1-mediapipe-v1"].references] == [1.51]


def test_published_commands_are_verbatim_with_their_source_and_version():
    recipe = recipes.load("bridgetower")
    blog = recipe.published_command("workers0")
    assert (
        blog.source.startswith("Hugging Face blog") and '--per_device_train_batch_size="40"' in blog.command
    )
    assert "--hub_model_id bridgetower\\\n" in blog.command  # the post's own typo, kept
    v17 = recipe.published_command("fastddp-workers1-mediapipe-v1")
    assert v17.version == "optimum-habana 1.7.0" and v17.command.endswith("--mediapipe_dataloader")
    assert all(c.source and c.version for r in recipes.load_all() for c in r.published_commands)
    d3 = recipes.load("volo").published_command("finetune-d3-448")
    assert "--token-label-size 28" in d3.command


def test_cuda_cells_carry_the_h100_and_a100_references_and_no_gaudi_only_variant():
    recipe = recipes.load("bridgetower")
    found = {c.variant: c for c in cells.expand(recipe, "bridgetower", "cuda", "published")}
    published = {"workers0", "workers1", "workers2"}
    # The published matrix, plus the NVIDIA-only rungs beyond the publication (no reference).
    assert published <= set(found) and not {"workers2-mediapipe", "fastddp-workers1-v1"} & set(found)
    for variant, cell in found.items():
        refs = {r["device"]: r["value"] for r in cell.references}
        assert refs == {k: v for k, v in PUBLISHED.get(variant, {}).items() if k != "gaudi2"}
        assert "use_habana" not in cell.args
    assert found["workers2-gpu-decode"].args["image_pipeline"] == "gpu_decode"


def test_smoke_scale_is_the_same_architecture_tiny_and_offline():
    recipe = recipes.load("bridgetower")
    cell = cells.expand(recipe, "bridgetower", "cpu", "smoke")[0]
    config = cell.args["model_config_json"]
    assert config["vision_config"]["patch_size"] == 14 and config["vision_config"]["image_size"] == 294
    assert config["text_config"]["hidden_size"] < 1024
    assert cell.args["random_init"] is True and cell.args["synthetic_data"] is True
    assert cell.devices == 1


def test_argv_renders_flags_like_the_published_command():
    argv = cells.to_argv(
        {"do_train": True, "remove_unused_columns": False, "w": [1, 2], "c": {"a": 1}, "n": None}
    )
    assert argv == ["--do_train", "--remove_unused_columns", "false", "--w", "1", "2", "--c", '{"a":1}']


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"tolerance": "wide"}, "tolerance: Input should be a valid number"),
        ({"colour": "blue"}, "colour: unknown key"),
        ({"variants": [{"name": "Bad Name"}]}, "variants.0.name: String should match pattern"),
        (
            {
                "variants": [
                    {"name": "a", "references": [{"device": "h100", "value": 1, "definition": "whole_run"}]}
                ]
            },
            "needs 'device' and 'devices'",
        ),
        (
            {"variants": [{"name": "a", "references": [{"device": "h100", "devices": 8, "value": 1}]}]},
            "references.0.definition: Field required",
        ),
        (
            {"variants": [{"name": "a", "references": [{"ratio": 2, "definition": "per_hour"}]}]},
            "definition: Input should be 'after_warmup', 'whole_run' or 'gaudi_trainer'",
        ),
        (
            {"variants": [{"name": "a", "needs": {"finetune": "nope"}}]},
            "needs.finetune names unknown variant 'nope'",
        ),
        ({"scales": {"smoke": {}}}, "scales must define published"),
        ({"node": {"bench": ["nope"]}}, "node.bench names unknown variant 'nope'"),
        ({"model": {"id": "org/model"}}, "needs a pinned revision"),
    ],
)
def test_a_malformed_recipe_names_the_file_and_the_key(recipe_file, changes, expected):
    path = recipe_file(changes)
    with pytest.raises(ReprokitError) as error:
        recipes.load(str(path))
    message = str(error.value)
    assert message.startswith(str(path)) and expected in message and "\n" not in message


def test_a_missing_key_is_named(recipe_file):
    path = recipe_file(drop=("trainer",))
    with pytest.raises(ReprokitError, match=r"my-recipe.yaml: trainer: Field required"):
        recipes.load(str(path))


def test_broken_yaml_names_the_line(recipe_file):
    path = recipe_file(raw="name: x\nvariants: [\n  - : :\n")
    with pytest.raises(ReprokitError, match=r"my-recipe.yaml:\d+: not valid YAML"):
        recipes.load(str(path))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("show", "no-such-recipe"), "unknown recipe 'no-such-recipe'; known recipes: "),
        (
            ("show", "bridgetower", "--accelerator", "tpu"),
            # Every accelerator's folder found, in the order --accelerator auto tries them.
            f"unknown accelerator 'tpu'; known accelerators: {', '.join(accelerators.profiles())} (or auto)",
        ),
        (("show", "bridgetower", "--scale", "huge"), "unknown scale 'huge'"),
        (("show", "bridgetower", "--variant", "workers9"), "has no variant 'workers9'"),
        (("reproduce", "all", "--runtime", "kubernetes", "--dry-run"), "unknown runtime 'kubernetes'"),
    ],
)
def test_bad_names_give_one_line_and_exit_code_2(inv, args, expected):
    result = inv(*args)
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_malformed_recipe_file_on_the_command_line_exits_2(inv, recipe_file):
    path = recipe_file({"devices": 0})
    result = inv("show", str(path))
    assert result.returncode == 2
    assert f"reprokit: {path}: devices: Input should be greater than or equal to 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_show_volo_gives_d5s_published_pretrain_and_finetune_commands_exactly(inv):
    """recipes/volo/SOURCES.md §1: the D5 command lines, flag by flag; the inconsistent token-label size is
    recorded as published and run as the token grid requires, and `inv show` says so."""
    result = inv("show", "volo", "--scale", "published", "--accelerator", "cuda", "--json")
    assert result.returncode == 0, result.stderr
    shown = {c["variant"]: c for c in json.loads(result.stdout)["cells"]}
    pretrain, finetune = shown["pretrain-d5"], shown["finetune-d5-512"]
    expected_pretrain = {
        "model_name_or_path": "volo_d5_224",
        "img_size": 224,
        "per_device_train_batch_size": 44,
        "lr": 1.0e-4,
        "drop_path": 0.75,
        "apex_amp": True,
        "token_label": True,
        "token_label_size": 14,
    }
    assert {k: pretrain["args"][k] for k in expected_pretrain} == expected_pretrain
    expected_finetune = {
        "model_name_or_path": "volo_d5_512",
        "img_size": 512,
        "per_device_train_batch_size": 4,
        "lr": 2.3e-5,
        "drop_path": 0.5,
        "apex_amp": True,
        "epochs": 30,
        "weight_decay": 1.0e-8,
        "warmup_epochs": 5,
        "ground_truth": True,
        "token_label": True,
        "token_label_size": 32,
    }
    assert {k: finetune["args"][k] for k in expected_finetune} == expected_finetune
    assert finetune["published"] == {"token_label_size": 24}
    assert finetune["needs"] == {"finetune": "pretrain-d5"}
    assert pretrain["devices"] == 8 and finetune["devices"] == 8
    assert [(r["device"], r["devices"], r["value"]) for r in pretrain["references"]] == [
        ("a100-80gb", 8, 500),
        ("a100-80gb", 40, 2100),
    ]
    assert any("213 h" in note and "170 h" in note for note in pretrain["notes"])
    text = inv(
        "show", "volo", "--scale", "published", "--accelerator", "cuda", "--variant", "finetune-d5-512"
    )
    assert "published token_label_size=24, run with token_label_size=32" in text.stdout


def test_the_vit_ladder_stacks_each_optimization_on_the_previous_rung():
    recipe = recipes.load("vit-speedups")
    ladder = ["baseline", "amp", "multi-tensor", "pooled", "batch-second", "fsdp"]
    switches = ("amp", "optimizer_impl", "classifier", "layout", "sharding")
    found = {c.variant: c for c in cells.expand(recipe, "vit-speedups", "cuda", "published")}
    changed = []
    for lower, upper in zip(ladder, ladder[1:], strict=False):
        diff = [k for k in switches if found[lower].args[k] != found[upper].args[k]]
        changed.append(diff)
    assert changed == [["amp"], ["optimizer_impl"], ["classifier"], ["layout"], ["sharding"]]
    # The one rung that changes two switches says so, and the report states it as an assumption.
    variants = {v.name: v for v in recipe.variants}
    below = found["fsdp-b384-img256"].args
    pure = found["pure-fp16"].args
    assert (
        [k for k in switches if below[k] != pure[k]]
        == variants["pure-fp16"].changes
        == ["amp", "optimizer_impl"]
    )
    assert any("two switches" in a for a in recipe.assumptions)
    assert found["baseline"].args["amp"] == "no" and found["baseline"].args["sharding"] == "ddp"
    # Batch 560 over one node of 8 GPUs at 224, as published; the published speedups as references.
    assert all(found[r].args["per_device_train_batch_size"] * found[r].devices == 560 for r in ladder)
    assert all(found[r].args["img_size"] == 224 for r in ladder)
    ratios = {v: [ref["ratio"] for ref in c.references] for v, c in found.items() if c.references}
    assert ratios == {"fsdp": [1.51], "fsdp-b384-img256": [1.86], "pure-fp16": [2.18]}
    assert (
        found["fsdp-b384-img256"].args["per_device_train_batch_size"],
        found["fsdp-b384-img256"].args["img_size"],
    ) == (384, 256)


def test_show_refuses_a_variant_whose_steps_end_within_the_warm_up(inv, recipe_file):
    import yaml

    from tests.conftest import ROOT

    data = yaml.safe_load((ROOT / "recipes" / "bridgetower" / "recipe.yaml").read_text())
    data["scales"]["smoke"]["args"].update(max_steps=2, throughput_warmup_steps=2)
    path = recipe_file({"scales": data["scales"]})
    for task in ("show", "reproduce"):
        extra = ("--dry-run",) if task == "reproduce" else ()
        result = inv(task, str(path), "--accelerator", "cpu", "--scale", "smoke", *extra)
        assert result.returncode == 2
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(f"reprokit: {path}: variant workers0 (smoke, cpu): max_steps 2 is not above ")
        assert "throughput_warmup_steps 2 (only the steps after the warm-up are measured" in last


def test_show_of_an_accelerator_no_variant_runs_on_says_why(inv):
    result = inv("show", "volo", "--accelerator", "gaudi2")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "reprokit: recipe volo has no variant for gaudi2 at the published scale (its variants run on cpu, cuda)"
    )


# ---- one name, one recipe; a recipe file read within bounds -----------------------------------------------


def _user_volo(folder, name: str = "volo"):
    """A user's copy of the kit's VOLO recipe, as a user makes one to change a variant."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(recipes.resolve_path("volo").read_text())
    return path


def test_a_users_recipe_named_like_a_kit_one_is_refused_naming_both_files(inv, tmp_path):
    mine = _user_volo(tmp_path / "mine")
    result = inv("recipes", "--recipes", str(tmp_path / "mine"))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"reprokit: two recipes named 'volo': {recipes.resolve_path('volo')} and {mine}; a session's cells and "
        "results are named by the recipe, so rename the second (its `name:`, and its file if it is volo.yaml)"
    )


def test_a_recipe_given_by_path_beside_the_kit_one_of_its_name_is_refused_not_mixed(inv, tmp_path):
    mine = _user_volo(tmp_path / "mine", "my-volo")  # another file name, the same `name: volo`
    result = inv("reproduce", f"volo,{mine}", "--accelerator", "cpu", "--dry-run")
    assert result.returncode != 0
    assert (
        f"two recipes named 'volo': {recipes.resolve_path('volo').resolve()} and {mine.resolve()}"
        in result.stderr
    )
    assert "# volo--" not in result.stdout
    # The same file named twice is one recipe, its cells once.
    twice = inv(
        "reproduce",
        f"volo,{recipes.resolve_path('volo')}",
        "--accelerator",
        "cpu",
        "--container",
        "none",
        "--dry-run",
    )
    assert twice.returncode == 0, twice.stderr
    assert [line for line in twice.stdout.splitlines() if line.startswith("# volo--pretrain-d1 ")] == [
        "# volo--pretrain-d1 (local, smoke, cpu)"
    ]


def _edited_copy(folder, file_name: str, recipe: str = "vit-speedups"):
    """A user's edited copy of a kit recipe, its `name:` kept: what a user makes to change a rung."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name
    path.write_text(recipes.resolve_path(recipe).read_text().replace("\ntitle: ", "\ntitle: My edit of ", 1))
    return path


def _clash_line(kit: str, mine) -> str:
    return (
        f"reprokit: two recipes named {kit!r}: {recipes.resolve_path(kit)} and {mine}; a session's cells and "
        f"results are named by the recipe, so rename the second (its `name:`, and its file if it is {kit}.yaml)"
    )


CPU = ("--accelerator", "cpu")


@pytest.mark.parametrize(
    "task",
    [
        ("recipes",),
        ("show", "vit-speedups", "--json", *CPU),
        ("show", "volo", *CPU),
        ("render", "vit-speedups", *CPU, "--out", "{out}"),
        ("run", "vit-speedups", *CPU, "--dry-run"),
        ("reproduce", "vit-speedups", *CPU, "--dry-run"),
        ("reproduce", "all", *CPU, "--dry-run"),
        ("preflight", "vit-speedups", *CPU, "--no-steps", "--out", "{out}"),
    ],
    ids=lambda task: "-".join(word for word in task[:3] if not word.startswith("{")),
)
def test_a_users_folder_holding_an_edited_kit_recipe_is_refused_by_every_command_never_shadowed(
    inv, tmp_path, task
):
    mine = _edited_copy(tmp_path / "mine", "vit-speedups.yaml")
    args = [word.format(out=tmp_path / "out") for word in task]
    result = inv(*args, "--recipes", str(tmp_path / "mine"))
    assert result.returncode != 0, result.stdout[-2000:]
    assert result.stderr.strip().splitlines()[-1] == _clash_line("vit-speedups", mine)
    assert "vit-speedups--" not in result.stdout and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "task",
    [("show", "--json", *CPU), ("reproduce", *CPU, "--dry-run"), ("preflight", *CPU, "--no-steps")],
    ids=["show", "reproduce", "preflight"],
)
def test_a_users_file_given_by_path_that_takes_a_kit_recipes_name_is_refused_not_run_under_its_cell_ids(
    inv, tmp_path, task
):
    mine = _edited_copy(tmp_path / "mine", "mine.yaml")
    out = () if task[0] == "show" else ("--out", str(tmp_path / "out"))
    result = inv(task[0], str(mine), *task[1:], *out)
    assert result.returncode != 0, result.stdout[-2000:]
    assert result.stderr.strip().splitlines()[-1] == _clash_line("vit-speedups", mine)
    assert "vit-speedups--" not in result.stdout and not (tmp_path / "out").exists()


def test_a_session_whose_recipe_file_now_takes_a_kit_recipes_name_is_not_resumed_under_it(inv, tmp_path):
    from tests.fakes import fake_env, fake_recipe

    mine = fake_recipe(tmp_path / "mine.yaml", [{"name": "v", "baseline": True}])
    ran = inv("run", str(mine), *CPU, "--scale", "smoke", "--container", "none", "--out", str(tmp_path / "out"),
              env=fake_env())  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    (session,) = (tmp_path / "out").iterdir()
    mine.write_text(mine.read_text().replace("name: fake\n", "name: bridgetower\n", 1))
    resumed = inv("resume", str(session), env=fake_env())
    assert resumed.returncode != 0, resumed.stdout[-2000:]
    assert resumed.stderr.strip().splitlines()[-1] == _clash_line("bridgetower", mine)


def test_the_kit_recipe_given_by_its_own_path_or_linked_from_a_users_folder_is_that_recipe(inv, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "vit-speedups.yaml").symlink_to(recipes.resolve_path("vit-speedups"))
    for given in ("recipes/vit-speedups/recipe.yaml", str(recipes.resolve_path("vit-speedups"))):
        shown = inv("show", given, "--json", *CPU, "--recipes", str(tmp_path / "mine"))
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["recipe"] == "vit-speedups"


def test_two_users_folders_or_a_file_and_the_name_another_declares_are_one_name_each(inv, tmp_path):
    first = _edited_copy(tmp_path / "a", "mine.yaml", "volo")
    second = _edited_copy(tmp_path / "b", "mine.yaml", "volo")
    for path in (first, second):
        path.write_text(path.read_text().replace("\nname: volo\n", "\nname: mine\n"))
    result = inv("show", "mine", *CPU, "--recipes", str(tmp_path / "a"), "--recipes", str(tmp_path / "b"))
    assert result.returncode != 0
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"reprokit: two recipes named 'mine': {first} and {second}; ")
    )
    # mine.yaml now declares `name: my-volo`, theirs.yaml `name: mine`: `inv show mine` would run the
    # first under a name the second's results go by.
    first.write_text(first.read_text().replace("\nname: mine\n", "\nname: my-volo\n"))
    theirs = _edited_copy(tmp_path / "a", "theirs.yaml", "volo")
    theirs.write_text(theirs.read_text().replace("\nname: volo\n", "\nname: mine\n"))
    result = inv("show", "mine", *CPU, "--recipes", str(tmp_path / "a"))
    assert result.returncode != 0
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"reprokit: two recipes named 'mine': {first} and {theirs}; ")
    )


def _alias_bomb(path, levels: int = 9):
    """The kit's BridgeTower recipe with a 'billion laughs' under model.architecture: ten aliases of
    the level below on each of `levels` levels, 10**levels values once expanded, in a few lines."""
    lines = ["    l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    text = (
        recipes.resolve_path("bridgetower").read_text().replace("\nname: bridgetower\n", "\nname: laughs\n")
    )
    start = text.index("  architecture:\n") + len("  architecture:\n")
    end = text.index("\n  ", text.index("\n", text.index("max_position_embeddings", start)))
    path.write_text(text[:start] + "\n".join(lines) + "\n" + text[end + 1 :])
    return path


@pytest.mark.parametrize("task", [("recipes", "--recipes"), ("show", "--json"), ("reproduce", "--dry-run")])
def test_a_yaml_alias_bomb_is_refused_in_one_line_before_it_is_read_into_memory(inv, tmp_path, task):
    folder = tmp_path / "mine"
    folder.mkdir()
    bomb = _alias_bomb(folder / "laughs.yaml")
    args = ("recipes", "--recipes", str(folder)) if task[0] == "recipes" else (task[0], str(bomb), task[1])
    result = inv(*args, "--accelerator", "cpu") if task[0] != "recipes" else inv(*args)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"reprokit: {bomb}: its aliases expand to more than 300,000 values (a recipe has a few thousand); "
        "refused before reading it into memory"
    )
    assert "Traceback" not in result.stderr and len(result.stdout) < 10_000


def test_a_recipe_that_contains_itself_or_is_too_large_is_refused(tmp_path):
    looped = tmp_path / "looped.yaml"
    looped.write_text("name: x\nmodel: &m {architecture: *m}\n")
    with pytest.raises(
        ReprokitError, match=r"looped.yaml: not a recipe: an alias refers to a node that contains it"
    ):
        recipes.load(str(looped))
    large = tmp_path / "large.yaml"
    large.write_text("name: x\nnotes:\n" + "  - padding padding padding padding padding\n" * 40_000)
    with pytest.raises(ReprokitError, match=r"large.yaml: 1,760,0\d\d bytes, more than a recipe can be"):
        recipes.load(str(large))
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ReprokitError, match=r"deep.yaml: not a recipe: nested too deep to read"):
        recipes.load(str(deep))
