"""A read-only cache is read through a writable view, never replaced: the view mirrors the folders,
links the large files (read in place) and copies the small ones the libraries rewrite; where no view
can be made, one line says what to do."""

from __future__ import annotations

import os

import pytest

from reprokit_trainers.common.data import caches


@pytest.fixture
def cache(tmp_path):
    root = tmp_path / "cache"
    (root / "models--org--m" / "refs").mkdir(parents=True)
    (root / "models--org--m" / "refs" / "main").write_text("abc")
    (root / "models--org--m" / "blobs").mkdir()
    (root / "models--org--m" / "blobs" / "big").write_bytes(b"w" * (caches.COPY_AT_MOST + 1))
    (root / "models--org--m" / "snapshots" / "abc").mkdir(parents=True)
    (root / "models--org--m" / "snapshots" / "abc" / "model.safetensors").symlink_to("../../blobs/big")
    return root


def test_a_writable_cache_is_used_itself(cache, tmp_path):
    assert caches.writable(cache, tmp_path / "scratch", "--cache_dir") == (cache.resolve(), False)
    assert not (tmp_path / "scratch").exists()


def test_a_read_only_cache_is_read_through_a_view_that_never_writes_into_it(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(caches, "is_writable", lambda folder: not str(folder).startswith(str(cache)))
    view, made = caches.writable(cache, tmp_path / "scratch", "--cache_dir")
    assert made and view.parent == tmp_path / "scratch" and view.name.startswith("cache-")
    ref = view / "models--org--m" / "refs" / "main"
    assert not ref.is_symlink() and ref.read_text() == "abc"  # small: a copy huggingface_hub may rewrite
    weights = view / "models--org--m" / "snapshots" / "abc" / "model.safetensors"
    assert weights.is_symlink() and weights.read_bytes() == b"w" * (caches.COPY_AT_MOST + 1)
    big = view / "models--org--m" / "blobs" / "big"
    assert os.readlink(big) == str(cache / "models--org--m" / "blobs" / "big")  # read in place, not copied
    ref.write_text("def")
    (view / "models--org--m" / "x.lock").write_text("")
    assert (cache / "models--org--m" / "refs" / "main").read_text() == "abc"
    assert not (cache / "models--org--m" / "x.lock").exists()
    # A second process (another rank) finds the view made.
    assert caches.writable(cache, tmp_path / "scratch", "--cache_dir") == (view, True)


def test_without_a_writable_scratch_the_error_says_what_to_do(cache, tmp_path, monkeypatch):
    monkeypatch.setattr(caches, "is_writable", lambda folder: False)
    blocker = tmp_path / "scratch"
    blocker.write_text("a file, not a folder")
    with pytest.raises(caches.ReadOnlyCache) as caught:
        caches.writable(cache, blocker, "--cache_dir")
    assert str(caught.value).startswith(
        f"--cache_dir {cache} is read-only and the libraries write lock and cache files into it"
    )
    assert str(caught.value).endswith(
        "mount it read-write, or set REPROKIT_SCRATCH to a folder the run may write"
    )


def test_the_scratch_folder_is_the_platforms_else_the_run_directorys(tmp_path, monkeypatch):
    monkeypatch.delenv("REPROKIT_SCRATCH", raising=False)
    assert caches.scratch_root(tmp_path) == tmp_path / ".scratch"
    monkeypatch.setenv("REPROKIT_SCRATCH", "/tmp/elsewhere")
    assert str(caches.scratch_root(tmp_path)) == "/tmp/elsewhere"
