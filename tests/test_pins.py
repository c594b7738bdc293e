"""Pins that resolve on each base: every profile's requirements, resolved by pip for the base's Python
and glibc against what the base ships, install exactly the profile's lock, replace nothing the base
provides, and bring no second framework. Where a profile differs from the trainers' `train` extra,
the difference is declared."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import socket
import threading

import pytest
import tomllib

from reprokit import images
from reprokit.cli import image_tasks
from reprokit.contract.errors import ReprokitError
from reprokit.images import index_hashes, locks, pins
from reprokit.plan import accelerators
from tests.conftest import ROOT

# Every accelerator found (accelerators/<name>/): each lock is held to its own base.
PROFILES = tuple(accelerators.profiles())


def _name(pin: str) -> str:
    return locks.normalize(re.split(r"[=<>!~]", pin, maxsplit=1)[0])


@pytest.mark.slow
@pytest.mark.parametrize("name", PROFILES)
def test_each_profile_resolves_on_its_base_to_exactly_its_lock_with_every_files_hash(name):
    profile = accelerators.get(name)
    base = profile.base_manifest
    found = pins.resolve(profile, lock=profile.lock_file)
    assert found.ok, found.error
    assert found.problems(base) == []
    assert found.install == locks.read_lock(profile.lock_file), (
        f"rewrite with `inv pins --accelerator {name} --write`"
    )
    assert set(found.replaced) <= {locks.normalize(n) for n in base.may_replace}
    if "torch" in base.ships:
        assert not {"torch", "torchvision", "numpy", "pillow"} & set(found.install)
    # The hashes are those the index lists for the base's Python and platform, and the file pip chose
    # for the base is among them (pip's choice inside the image is one of them).
    listed = index_hashes.locked_hashes(found.install, base)
    assert locks.read_hashes(profile.lock_file) == listed
    assert found.chosen.keys() == found.install.keys()
    assert all(digest in listed[n] for n, digest in found.chosen.items())
    assert locks.lock_problems(profile) == []


def test_the_platforms_are_pips_order_of_preference_and_none_newer_than_the_bases_glibc():
    found = pins.platforms("2.36")
    assert found[0] == "manylinux_2_36_x86_64" and found[-1] == "linux_x86_64"
    assert found.index("manylinux2014_x86_64") == found.index("manylinux_2_17_x86_64") + 1
    assert found.index("manylinux1_x86_64") == found.index("manylinux_2_5_x86_64") + 1
    assert "manylinux_2_37_x86_64" not in found and "manylinux_2_4_x86_64" not in found
    flags = pins.platform_flags("2.36")
    assert flags[:2] == ["--platform", "manylinux_2_36_x86_64"]


def test_every_wheel_of_the_version_the_base_can_install_is_hashed_and_no_other():
    supported = pins.supported_tags("3.11", "2.36")
    files = [
        ("numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", "a" * 64),
        ("numpy-2.4.6-cp311-cp311-manylinux2014_x86_64.whl", "b" * 64),  # pip may take either
        ("numpy-2.4.6-cp311-cp311-musllinux_1_2_x86_64.whl", "c" * 64),
        ("numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl", "d" * 64),
        ("numpy-2.4.6-cp311-cp311-manylinux_2_39_x86_64.whl", "e" * 64),  # newer than bookworm's glibc
        ("numpy-2.4.6-cp311-cp311-manylinux_2_28_aarch64.whl", "f" * 64),
        ("numpy-2.4.6-cp311-cp311-macosx_14_0_arm64.whl", "0" * 64),
        ("numpy-2.4.6.tar.gz", "1" * 64),  # the image installs wheels only
        ("numpy-2.4.5-cp311-cp311-manylinux_2_28_x86_64.whl", "2" * 64),
        ("numpy-2.4.6-cp39-abi3-manylinux_2_17_x86_64.whl", "3" * 64),
        ("numpy-2.4.6-py3-none-any.whl", "4" * 64),
        ("numpy-2.4.6-1-cp311-cp311-manylinux_2_28_x86_64.whl", "5" * 64),  # a build tag
        ("numpy-2.4.6.0-cp311-cp311-manylinux_2_28_x86_64.whl", "6" * 64),  # the same version to PEP 440
        ("numpy-2.4.6rc1-cp311-cp311-manylinux_2_28_x86_64.whl", "7" * 64),
        ("numpy-not.a.version-cp311-cp311-manylinux_2_28_x86_64.whl", "8" * 64),
        ("numpyx-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", "9" * 64),  # another project's
    ]
    assert index_hashes.wheel_hashes("numpy", "2.4.6", files, supported) == sorted(
        ["a" * 64, "b" * 64, "3" * 64, "4" * 64, "5" * 64, "6" * 64]
    )


def test_a_lock_reads_as_pip_reads_it():
    text = (
        "# header\n"
        "torch==2.14.1 --hash=sha256:" + "a" * 64 + " --hash=sha256:" + "b" * 64 + "\n"
        "\n"
        "Jinja2==3.1.6 \\\n"
        "    --hash sha256:" + "c" * 64 + "  # a comment\n"
        "idna==3.20\n"
    )
    found = locks.parse_lock(text)
    assert [(p.name, p.version, len(p.hashes), p.line) for p in found] == [
        ("torch", "2.14.1", 2, 2),
        ("jinja2", "3.1.6", 1, 4),
        ("idna", "3.20", 0, 6),
    ]


def _lock_copy(tmp_path, monkeypatch, edit) -> accelerators.Profile:
    profile = accelerators.get("cpu")
    folder = shutil.copytree(profile.folder, tmp_path / "cpu")
    (folder / "lock.txt").write_text(edit(profile.lock_file.read_text()))
    return profile.model_copy(update={"folder": folder})


def test_a_pin_without_a_hash_is_refused_before_any_build_in_one_line(tmp_path, monkeypatch):
    profile = _lock_copy(tmp_path, monkeypatch, lambda t: re.sub(r"^(idna==\S+) .*$", r"\1", t, flags=re.M))
    line = next(
        n for n, text in enumerate(profile.lock_file.read_text().splitlines(), 1) if text == "idna==3.20"
    )
    with pytest.raises(ReprokitError) as caught:
        images.context_files(profile)
    assert str(caught.value) == (
        f"{profile.lock_file}:{line}: idna==3.20 has no --hash: the image installs its lock with "
        "--require-hashes; make it with `inv pins --accelerator cpu --write`"
    )
    with pytest.raises(ReprokitError, match="idna==3.20 has no --hash"):
        images.wheelhouse_command(profile, tmp_path / "wheels")


def test_a_lock_that_no_longer_pins_a_profile_requirement_is_refused(tmp_path, monkeypatch):
    profile = _lock_copy(tmp_path, monkeypatch, lambda t: t.replace("\ntimm==1.0.15 ", "\ntimm==1.0.14 "))
    assert locks.lock_problems(profile) == [
        f"{profile.lock_file} does not pin timm==1.0.15 of cpu/profile.yaml"
    ]


def test_inv_pins_check_names_the_pins_whose_hashes_the_index_does_not_list(tmp_path, monkeypatch):
    profile = _lock_copy(
        tmp_path,
        monkeypatch,
        lambda t: re.sub(r"^(idna==\S+) .*$", r"\1 --hash=sha256:" + "0" * 64, t, flags=re.M),
    )
    listed = locks.read_hashes(accelerators.get("cpu").lock_file) | {"idna": ["ab" * 32]}
    install = locks.read_lock(profile.lock_file)
    with pytest.raises(
        ReprokitError, match=r"the hashes of idna==3.20 are not the files https://pypi.org/simple lists"
    ):
        image_tasks._check_lock(profile, install, listed, "https://pypi.org/simple")
    image_tasks._check_lock(profile, install, locks.read_hashes(profile.lock_file), "https://pypi.org/simple")


def test_the_framework_layer_is_torch_and_its_gpu_stack_and_only_where_the_profile_brings_it():
    text = accelerators.get("cpu").lock_file.read_text()
    names = {locks.normalize(line.split("==")[0]) for line in locks.framework_pins(text)}
    assert {"torch", "torchvision", "triton", "nvidia-cublas", "cuda-toolkit"} <= names
    assert not {"nvidia-ml-py", "numpy", "pillow", "transformers"} & names
    assert all(locks.FRAMEWORK.match(n) for n in names)
    for name in ("cuda", "gaudi2"):  # their bases ship the framework
        assert locks.framework_pins(accelerators.get(name).lock_file.read_text()) == []


@pytest.mark.slow
def test_a_pin_that_conflicts_with_the_base_fails_the_resolution():
    """opencv-python-headless 5 requires numpy 2: on the NGC base, whose numpy is 1.26.4, impossible.
    The pin is resolved alone: the profile's other pins resolve on the base (the test above), and with
    them pip read every index page of the profile again before it failed on the same conflict."""
    profile = accelerators.get("cuda")
    found = pins.resolve(profile, ["opencv-python-headless==5.0.0.93"])
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
        declared = {locks.normalize(n) for n in profile.differences}
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


class _FlakyIndex(http.server.BaseHTTPRequestHandler):
    """An index whose first answers fail as PyPI's sometimes do (a 503, a dropped connection), then
    serve the page; a project it does not have is a 404 every time."""

    failures: list[str] = []
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).asked.append(self.path)
        if self.path != "/idna/":
            self.send_error(404)
            return
        failure = type(self).failures.pop(0) if type(self).failures else None
        if failure == "503":
            self.send_error(503)
            return
        if failure == "drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        body = json.dumps(
            {"files": [{"filename": "idna-3.20-py3-none-any.whl", "hashes": {"sha256": "a" * 64}}]}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args) -> None:  # noqa: ANN002
        pass


@pytest.fixture
def flaky_index(monkeypatch):
    monkeypatch.setattr(index_hashes, "RETRY_WAITS_S", (0.01, 0.01))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FlakyIndex)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _FlakyIndex.asked.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_an_index_page_that_fails_once_or_twice_is_read_again_and_a_missing_project_is_not(flaky_index):
    # A 503 and a dropped connection (what a lost name lookup or a reset look like to urllib) pass on
    # the third try; the lock's hashes come from that page.
    _FlakyIndex.failures[:] = ["503", "drop"]
    files = index_hashes.index_files("idna", flaky_index)
    assert files == [("idna-3.20-py3-none-any.whl", "a" * 64)] and _FlakyIndex.asked == ["/idna/"] * 3
    # Three failures are one line naming the page; a 404 is the index's answer, asked once.
    _FlakyIndex.asked.clear()
    _FlakyIndex.failures[:] = ["503", "503", "503"]
    with pytest.raises(
        ReprokitError, match=rf"^cannot read {flaky_index}/idna/ for the hashes of idna: .*503"
    ):
        index_hashes.index_files("idna", flaky_index)
    assert len(_FlakyIndex.asked) == 3
    _FlakyIndex.asked.clear()
    with pytest.raises(ReprokitError, match="HTTP Error 404"):
        index_hashes.index_files("no-such-project", flaky_index)
    assert _FlakyIndex.asked == ["/no-such-project/"]
