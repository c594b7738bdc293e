"""Trainer arguments are checked before anything is launched: each kit trainer's schema
(reprokit_trainers/<trainer>/arguments.json) is what the trainer checks its own command line with
and what the host checks every recipe cell with, so a bad value costs one line, not an image build
or a queue wait. The schemas agree with the trainers' argument dataclasses."""

from __future__ import annotations

import dataclasses
import importlib
import json
import types
import typing
from pathlib import Path

import pytest

from reprokit.contract import trainers
from reprokit.contract.errors import ReprokitError
from reprokit.plan import accelerators, arguments, cells, recipes
from reprokit_trainers.common.process import argschema

ROOT = Path(__file__).resolve().parent.parent
TRAINERS = trainers.kit_trainers()


def _fields(trainer: str) -> dict[str, dataclasses.Field]:
    module = importlib.import_module(f"reprokit_trainers.{trainer}.run_{trainer}")
    found: dict[str, dataclasses.Field] = {}
    for kind in module.ARGUMENTS:
        hints = typing.get_type_hints(kind)
        for f in dataclasses.fields(kind):
            f.type = hints[f.name]
            found[f.name] = f
    return found


def _schema_type(annotation: typing.Any) -> tuple[str | None, bool]:
    """(the schema's name for a field's type, whether None is allowed)."""
    args = typing.get_args(annotation)
    nullable = type(None) in args
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        annotation = rest[0] if len(rest) == 1 else None
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return f"list[{item.__name__}]", nullable
    return {int: "int", float: "float", str: "str", bool: "bool"}.get(annotation), nullable


@pytest.mark.parametrize("trainer", TRAINERS)
def test_each_schema_names_only_real_arguments_with_their_types(trainer):
    found = argschema.load(trainers.package_folder(trainer))
    fields = _fields(trainer)
    for name, rule in found["arguments"].items():
        assert name in fields, f"{trainer}/arguments.json: {name} is not an argument of the trainer"
        kind, nullable = _schema_type(fields[name].type)
        if kind is not None:  # TrainingArguments' Union[...] fields are checked by value only
            # A mapping travels as JSON text: a `json` rule is a str field.
            expected = "str" if rule["type"] == "json" else rule["type"]
            assert expected == kind, f"{trainer}: {name} is {kind}, schema says {rule['type']}"
            assert bool(rule.get("nullable")) == nullable, f"{trainer}: {name} nullable is {nullable}"
    if found.get("closed"):
        assert set(fields) <= set(found["arguments"]), (
            f"{trainer}: schema misses {set(fields) - set(found['arguments'])}"
        )


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_default_satisfies_its_rule(trainer):
    found = argschema.load(trainers.package_folder(trainer))
    defaults = {}
    for name, f in _fields(trainer).items():
        if name in found["arguments"] and f.default is not dataclasses.MISSING:
            defaults[name] = f.default
        elif name in found["arguments"] and f.default_factory is not dataclasses.MISSING:
            defaults[name] = f.default_factory()
    assert argschema.check(found, defaults) == []


def test_every_recipe_cell_passes_its_trainers_schema():
    checked = 0
    for name in recipes.available():
        recipe = recipes.load(name)
        for accelerator in accelerators.profiles():
            for scale in ("smoke", "published"):
                # expand() raises on the first problem; what it returns is checked again here
                for cell in cells.expand(recipe, name, accelerator, scale):
                    assert arguments.problems(recipe.trainer, cell.args) == [], cell.cell_id
                    checked += 1
    assert checked > 50


def test_a_bad_value_in_a_recipe_is_one_line_naming_file_variant_and_key(inv, recipe_file):
    import yaml

    path = recipe_file()
    data = yaml.safe_load(path.read_text())
    (workers1,) = [v for v in data["variants"] if v["name"] == "workers1"]
    workers1["args"]["per_device_train_batch_size"] = 0
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    for task in ("show", "render", "reproduce"):
        extra = ["--dry-run"] if task == "reproduce" else []
        # at the published scale: the smoke scale sets its own batch size over the variant's
        result = inv(task, str(path), "--accelerator", "cuda", "--scale", "published", *extra)
        assert result.returncode != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert str(path) in lines[0] and "workers1" in lines[0]
        assert "per_device_train_batch_size: must be at least 1, got 0" in lines[0]


def test_a_misspelt_key_is_caught_where_the_schema_is_closed():
    recipe = recipes.load("volo")
    with pytest.raises(ReprokitError, match="drop_pth: not an argument of this trainer"):
        cells.expand(
            recipe.model_copy(update={"hyperparameters": {**recipe.hyperparameters, "drop_pth": 0.1}}),
            "volo",
            "cpu",
            "smoke",
        )


def test_a_user_trainer_without_a_schema_is_not_checked():
    assert arguments.problems("mypackage.train", {"per_device_train_batch_size": 0}) == []


def test_the_host_reads_the_schema_without_importing_torch():
    import subprocess
    import sys

    code = (
        "import sys; from reprokit.plan import arguments; "
        "print(arguments.problems('vit', {'per_device_train_batch_size': 0})); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    problems, torch_loaded = out.stdout.strip().splitlines()
    assert json.loads(problems.replace("'", '"')) == [
        "per_device_train_batch_size: must be at least 1, got 0"
    ]
    assert torch_loaded == "False"


def test_a_mapping_argument_is_checked_as_json_on_both_sides():
    rule = {"type": "json", "nullable": True}
    assert argschema.problem(rule, {"layers": [1, 1]}) is None  # a recipe's mapping
    assert argschema.problem(rule, '{"layers": [1, 1]}') is None  # the command line's JSON text
    assert argschema.problem(rule, "{layers: 1}") == "must be a JSON object, got '{layers: 1}'"
    assert argschema.problem(rule, [1, 2]) == "must be a JSON object, got [1, 2]"


def test_volos_token_label_size_is_checked_against_its_image_size_by_the_trainers_schema():
    # The token grid is the image size / 16: the rule is the trainer's (arguments.json), not the host's.
    (wrong,) = arguments.problems("volo", {"img_size": 512, "token_label_size": 24})
    assert wrong.startswith(
        "token_label_size 24 does not match img_size 512 (= 32: the token grid is img_size / 16"
    )
    assert arguments.problems("volo", {"img_size": 512, "token_label_size": 32}) == []
