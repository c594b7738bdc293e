"""Pins that resolve on each base: every profile's requirements, resolved by pip for the base's Python
and glibc against what the base ships, install exactly the profile's lock, replace nothing the base
provides, and bring no second framework. Where a profile differs from the trainers' `train` extra,
the difference is declared."""

from __future__ import annotations

import re

import pytest
import tomllib

from reprokit.plan import accelerators
from reprokit.run.images import pins
from tests.conftest import ROOT

PROFILES = ("cpu", "cuda", "gaudi2")


def _name(pin: str) -> str:
    return pins.normalize(re.split(r"[=<>!~]", pin, maxsplit=1)[0])


@pytest.mark.slow
@pytest.mark.parametrize("name", PROFILES)
def test_each_profile_resolves_on_its_base_to_exactly_its_lock(name):
    profile = accelerators.get(name)
    base = profile.base_manifest
    found = pins.resolve(profile, lock=profile.lock_file)
    assert found.ok, found.error
    assert found.problems(base) == []
    assert found.install == pins.read_lock(profile.lock_file), (
        f"rewrite with `inv pins --accelerator {name} --write`"
    )
    assert set(found.replaced) <= {pins.normalize(n) for n in base.may_replace}
    if "torch" in base.ships:
        assert not {"torch", "torchvision", "numpy", "pillow"} & set(found.install)


@pytest.mark.slow
def test_a_pin_that_conflicts_with_the_base_fails_the_resolution():
    """opencv-python-headless 5 requires numpy 2: on the NGC base, whose numpy is 1.26.4, impossible."""
    profile = accelerators.get("cuda")
    found = pins.resolve(profile, [*profile.requirements, "opencv-python-headless==5.0.0.93"])
    assert not found.ok and "numpy" in found.error
    assert found.problems(profile.base_manifest) == [found.error]


def test_a_resolution_that_would_replace_the_base_is_refused():
    base = accelerators.get("cuda").base_manifest
    replaced = pins.Resolution(
        "cuda", base.name, True, install={"numpy": "2.5.5"}, replaced={"numpy": ("1.26.4", "2.5.5")}
    )
    assert replaced.problems(base) == ["replaces the base's numpy 1.26.4 with 2.5.5"]
    allowed = pins.Resolution(
        "cuda", base.name, True, install={"dill": "0.3.8"}, replaced={"dill": ("0.3.9", "0.3.8")}
    )
    assert allowed.problems(base) == []


def test_profiles_differ_from_the_train_extra_only_where_they_say_why():
    train = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    extra = {_name(pin): pin for pin in train}
    for profile in accelerators.profiles().values():
        mine = {_name(pin): pin for pin in profile.requirements}
        declared = {pins.normalize(n) for n in profile.differences}
        undeclared = [p for n, p in extra.items() if mine.get(n) != p and n not in declared]
        assert not undeclared, f"{profile.name}: {undeclared} differ from the train extra without a reason"
        # A declared difference is real: the profile pins it otherwise, or leaves it to the base.
        assert all(mine.get(n) != extra.get(n) for n in declared), profile.name
        assert all(reason.strip() for reason in profile.differences.values())


def test_every_base_names_its_sources_and_every_profile_a_known_base():
    for base in accelerators.bases().values():
        assert base.sources and all(s.url and s.what for s in base.sources)
        assert set(base.protect) <= set(base.ships)
        assert base.digest or base.digest_note, f"{base.name}: a digest, or why there is none"
        assert ":latest" not in base.reference
    for profile in accelerators.profiles().values():
        assert profile.lock_file.exists(), f"`inv pins --accelerator {profile.name} --write` makes it"
