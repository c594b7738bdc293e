"""What one changed pin costs an image rebuild: the bytes downloaded and the time, measured on a real
build of an accelerator's image from a kept wheelhouse.

    python -m benchmarks.image_rebuild --wheelhouse /var/tmp/wheelhouse-cpu --change idna==3.10
    python -m benchmarks.image_rebuild --wheelhouse /var/tmp/wheelhouse-cpu --change idna==3.10 --builder legacy
    python -m benchmarks.image_rebuild --project /tmp/src-before --wheelhouse /var/tmp/wheelhouse-cpu --change idna==3.10

1. The image of the profile's lock is built from the wheelhouse (or found up to date): the image
   a user has before the change.
2. A copy of the lock with one pin changed (with the new version's hashes, read from the index, where
   the lock has hashes) gets the wheel it lacks from the kit's own `wheelhouse` (pip download into the
   kept folder): the download from the package index.
3. The image of the changed lock is built from the wheelhouse, which stands for the index: every byte
   it serves is counted (what pip downloaded during the build), with the build's time, what pip
   installed, and how much of the image is new (not shared with the first image or the base).

`--project` measures another checkout of the kit (e.g. `git archive` of the commit before) with the
same steps. Both images are removed at the end unless `--keep`. Needs a Docker engine and the base
(`--base-image`, default reprokit/base:bookworm, made by .ci/make-base-image.sh).
"""

from __future__ import annotations

import argparse
import http.server
import inspect
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _count_served(record: list[tuple[str, int]]) -> None:
    """Count every file body the wheelhouse's HTTP server sends (any kit version serves it this way)."""
    original = http.server.SimpleHTTPRequestHandler.copyfile

    def copyfile(self, source, outputfile):  # noqa: ANN001, ANN202 - the base class's signature
        try:
            size = os.fstat(source.fileno()).st_size
        except (OSError, ValueError):  # a folder's listing, made in memory
            size = len(source.getvalue())
        record.append((self.path, size))
        return original(self, source, outputfile)

    http.server.SimpleHTTPRequestHandler.copyfile = copyfile


def _changed_lock(text: str, name: str, version: str, hashes: list[str] | None) -> str:
    pattern = re.compile(rf"^{re.escape(name)}==\S+.*$", re.MULTILINE | re.IGNORECASE)
    if not pattern.search(text):
        sys.exit(f"the lock pins no {name}")
    line = f"{name}=={version}" + "".join(f" --hash=sha256:{h}" for h in hashes or [])
    return pattern.sub(line, text)


def _unique_mb(client, tag: str) -> float:
    """The image's bytes shared with no other image here: the layers this build made."""
    for image in client.df()["Images"]:
        if tag in (image.get("RepoTags") or []):
            return (image["Size"] - image["SharedSize"]) / 1e6
    return float("nan")


def _installed(log: Path | None) -> list[str]:
    if log is None or not log.exists():
        return []
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if "Successfully installed " in line:
            found += line.split("Successfully installed ", 1)[1].split()
    return found


def measure(args: argparse.Namespace) -> dict[str, object]:
    sys.path.insert(0, str(args.project))
    from reprokit import images
    from reprokit.images import engine
    from reprokit.plan import accelerators

    served: list[tuple[str, int]] = []
    _count_served(served)
    profile = accelerators.get(args.accelerator)
    wheelhouse = Path(args.wheelhouse)
    extra = {"builder": args.builder} if "builder" in inspect.signature(images.build).parameters else {}
    if args.builder != "auto" and not extra:
        sys.exit(f"the kit at {args.project} has no --builder: it builds with the legacy builder")
    client = engine.client()

    def build(label: str) -> dict[str, object]:
        served.clear()
        started = time.monotonic()
        result = images.build(profile, args.base_image, wheelhouse, False, None, True, **extra)
        fetched = [(p, s) for p, s in served if p.endswith(".whl")]
        return {
            "step": label,
            "tag": result.tag,
            "up_to_date": result.cached,
            "seconds": round(time.monotonic() - started, 1),
            "wheels_fetched": len(fetched),
            "mb_fetched": round(sum(s for _, s in fetched) / 1e6, 1),
            "packages_installed": len(_installed(result.log)) if not result.cached else 0,
            "new_layers_mb": round(_unique_mb(client, result.tag), 1),
        }

    if not wheelhouse.is_dir() or not any(wheelhouse.glob("*.whl")):
        images.wheelhouse(profile, wheelhouse)
    first = build("the lock")
    name, _, version = args.change.partition("==")
    text = profile.lock_file.read_text()
    hashes = None
    if "--hash=" in text:
        from reprokit.images import index_hashes, locks

        hashes = index_hashes.locked_hashes({locks.normalize(name): version}, profile.base_manifest)[
            locks.normalize(name)
        ]
    with tempfile.TemporaryDirectory(prefix="reprokit-lock-") as tmp:
        folder = shutil.copytree(profile.folder, Path(tmp) / profile.name)
        (folder / "lock.txt").write_text(_changed_lock(text, name, version, hashes))
        profile = profile.model_copy(update={"folder": folder})  # its lock_file is read from here now
        before = {p.name: p.stat().st_size for p in wheelhouse.glob("*.whl")}
        started = time.monotonic()
        images.wheelhouse(profile, wheelhouse)
        added = {p.name: p.stat().st_size for p in wheelhouse.glob("*.whl") if p.name not in before}
        fill = {
            "step": f"inv wheelhouse for the lock with {args.change} (kept folder)",
            "seconds": round(time.monotonic() - started, 1),
            "wheels_downloaded": sorted(added),
            "mb_downloaded": round(sum(added.values()) / 1e6, 3),
        }
        second = build(f"the lock with {args.change}")
    if not args.keep:
        for tag in {first["tag"], second["tag"]}:
            client.images.remove(tag)
    return {
        "kit": str(args.project),
        "builder": args.builder if extra else "legacy (the kit has no other)",
        "engine": client.version().get("Version"),
        "steps": [first, fill, second],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, default=ROOT, help="the kit's checkout (default: this one)")
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--base-image", default="reprokit/base:bookworm")
    parser.add_argument("--wheelhouse", required=True, help="a kept wheelhouse folder (filled when empty)")
    parser.add_argument("--change", required=True, help="the pin to change, e.g. idna==3.10")
    parser.add_argument("--builder", default="auto", help="auto, buildkit or legacy (the kit's --builder)")
    parser.add_argument("--keep", action="store_true", help="keep both images")
    args = parser.parse_args()
    args.project = args.project.resolve()
    os.chdir(args.project)  # the build log goes to <project>/rendered/build/
    print(json.dumps(measure(args), indent=2))


if __name__ == "__main__":
    main()
