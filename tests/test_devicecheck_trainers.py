"""The bare node's device check imports each trainer it is asked for as the trainers package lays it
out (`reprokit_trainers/<name>/run_<name>.py`): a trainer folder added to the package is checked
with no list to extend."""

from __future__ import annotations

import importlib
import sys

import pytest

import reprokit_trainers

devicecheck = importlib.import_module("reprokit_trainers.devicecheck.__main__")


@pytest.fixture
def new_trainer(tmp_path, monkeypatch):
    """A trainer folder no list names, `newone`, found on the package's path; its module records that
    it was imported."""
    folder = tmp_path / "newone"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "run_newone.py").write_text("IMPORTED = True\n")
    monkeypatch.setattr(reprokit_trainers, "__path__", [*reprokit_trainers.__path__, str(tmp_path)])
    yield "newone"
    for name in ("reprokit_trainers.newone.run_newone", "reprokit_trainers.newone"):
        sys.modules.pop(name, None)


def test_a_trainer_folder_no_list_names_is_imported_by_the_device_check(new_trainer):
    found = devicecheck.software([new_trainer])
    assert found["trainers_imported"] == [new_trainer] and found["trainers_failed"] == {}
    assert sys.modules["reprokit_trainers.newone.run_newone"].IMPORTED


def test_a_trainer_the_package_lacks_is_one_line_of_the_check_not_a_crash():
    found = devicecheck.software(["nosuch"])
    assert found["trainers_imported"] == []
    assert found["trainers_failed"] == {
        "nosuch": "ModuleNotFoundError: No module named 'reprokit_trainers.nosuch'"
    }
