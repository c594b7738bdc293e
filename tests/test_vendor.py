"""Vendor files (optimum-habana's mediapipe modules, in no package): fetched at the pinned tag when the
gaudi2 image is built, checked by sha256, staged for offline builds, never carried by the kit."""

from __future__ import annotations

import hashlib

import pytest

from reprokit import images
from reprokit.contract.errors import ReprokitError
from reprokit.images import vendor
from reprokit.images.wheelhouse import serve_directory
from reprokit.plan import accelerators
from reprokit.plan.accelerators import Vendor, VendorFile

FILES = {"habana_dataloader_trainer.py": b"# stand-in 1\n", "clip_media_pipe.py": b"# stand-in 2\n"}


@pytest.fixture
def profile():
    """The gaudi2 profile with stand-in vendor files (the real ones are on GitHub, out of reach here)."""
    real = accelerators.get("gaudi2")
    files = [
        VendorFile(
            name=name, url=f"https://example.invalid/v1.17.0/{name}", sha256=hashlib.sha256(data).hexdigest()
        )
        for name, data in FILES.items()
    ]
    return real.model_copy(
        update={"vendor": Vendor(folder=real.vendor.folder, why=real.vendor.why, files=files)}
    )


@pytest.fixture
def mirror(tmp_path, monkeypatch):
    """The stand-in files served over HTTP where the build fetches vendor files from."""
    (tmp_path / "mirror").mkdir()
    for name, data in FILES.items():
        (tmp_path / "mirror" / name).write_bytes(data)
    with serve_directory(tmp_path / "mirror", port=0) as url:
        monkeypatch.setenv("REPROKIT_VENDOR_MIRROR", url)
        yield url


def test_the_gaudi2_profile_pins_the_mediapipe_modules_by_tag_and_checksum():
    pinned = accelerators.get("gaudi2").vendor
    assert {f.name for f in pinned.files} == {
        "habana_dataloader_trainer.py",
        "clip_mediapipe_dataloader.py",
        "clip_media_pipe.py",
    }
    assert all("/optimum-habana/v1.17.0/examples/contrastive-image-text/" in f.url for f in pinned.files)
    assert all(len(f.sha256) == 64 for f in pinned.files)


def test_fetched_files_go_into_the_context_where_the_trainer_imports_them(profile, mirror):
    fetched = vendor.files(profile)
    files = images.context_files(profile, fetched)
    assert files[f"vendor/{profile.vendor.folder}/clip_media_pipe.py"] == FILES["clip_media_pipe.py"]
    dockerfile = files["Dockerfile"].decode()
    assert "COPY vendor/ /opt/reprokit/vendor/" in dockerfile
    assert f"PYTHONPATH=/opt/reprokit:/opt/reprokit/vendor/{profile.vendor.folder}" in dockerfile
    # The tag is known without the bytes (their checksums stand for them), and differs without them.
    assert images.image_tag(profile, files) == images.image_tag(profile)
    assert images.image_tag(profile, images.context_files(profile, with_vendor=False)) != images.image_tag(
        profile
    )
    assert "COPY vendor/" not in images.context_files(profile, with_vendor=False)["Dockerfile"].decode()


def test_a_file_that_is_not_the_pinned_one_is_refused_in_one_line(profile, tmp_path):
    (tmp_path / "vendor").mkdir()
    for name in FILES:
        (tmp_path / "vendor" / name).write_bytes(b"# tampered\n")
    with pytest.raises(
        ReprokitError,
        match=r"vendor/habana_dataloader_trainer.py: sha256 [0-9a-f]{16}\.\.\. is not the pinned",
    ):
        vendor.files(profile, tmp_path)


def test_an_offline_build_says_how_to_stage_what_it_lacks(profile, tmp_path, monkeypatch):
    monkeypatch.delenv("REPROKIT_VENDOR_MIRROR", raising=False)
    with pytest.raises(ReprokitError) as error:
        vendor.files(profile, tmp_path)  # a wheelhouse folder without vendor/
    message = str(error.value)
    assert "\n" not in message and "is missing" in message
    assert "`inv wheelhouse --accelerator gaudi2 --dest DIR`" in message and "--without-vendor" in message


def test_staging_writes_the_checked_files_beside_the_wheels(profile, mirror, tmp_path, monkeypatch):
    staged = vendor.stage(profile, tmp_path / "wheelhouse")
    assert sorted(p.name for p in staged) == sorted(FILES)
    monkeypatch.delenv("REPROKIT_VENDOR_MIRROR")
    assert set(vendor.files(profile, tmp_path / "wheelhouse")) == {
        f"vendor/{profile.vendor.folder}/{n}" for n in FILES
    }
