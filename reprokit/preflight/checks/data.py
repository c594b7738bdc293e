"""Data and checkpoint: what each cell would train on. Given folders (--data) are sampled and decoded,
naming any bad file, and a class folder none of whose images decodes (planning has refused one that
holds none: plan/data.py); a given Hugging Face cache must hold the dataset (at the pinned revision's size)
and the checkpoint, and is read through a writable view where it is read-only. Without --data, a
published cell needs the hub (where its data is a hub dataset), or it would train on synthetic data and
not be judged."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path

from reprokit.plan.data import IMAGE_SUFFIXES, LABEL_SUFFIXES
from reprokit.plan.recipes import DataKey, Recipe
from reprokit.preflight.checks import storage
from reprokit.preflight.checks.base import Check
from reprokit.preflight.context import Context
from reprokit.preflight.findings import Finding

# Files decoded per given folder: spread over its classes, a few seconds at most.
SAMPLE = 64
HUB = "https://huggingface.co"
OFFLINE = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def hub_reachable(kind: str, repo: str) -> str | None:
    """None when the hub answers for `repo` (kind: datasets or models); else why not, in a few words."""
    offline = [name for name in OFFLINE if os.environ.get(name, "").lower() in ("1", "true", "yes")]
    if offline:
        return f"offline ({offline[0]} is set)"
    try:
        request = urllib.request.Request(
            f"{os.environ.get('HF_ENDPOINT', HUB)}/api/{kind}/{repo}", method="HEAD"
        )
        urllib.request.urlopen(request, timeout=5)  # noqa: S310 -- the hub's own https address
        return None
    except Exception as error:  # noqa: BLE001 -- any failure means the same: the hub is not reachable
        reason = getattr(error, "reason", None) or error
        return f"the hub does not answer ({str(reason).splitlines()[0][:80] or type(error).__name__})"


def sample(root: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """Up to SAMPLE files of `root/<class>/` spread over its classes, in a fixed order."""
    classes = sorted(entry.path for entry in os.scandir(root) if entry.is_dir()) if root.is_dir() else []
    if not classes:
        return []
    chosen = classes[:: max(1, len(classes) // SAMPLE)][:SAMPLE]
    per_class = max(1, SAMPLE // len(chosen))
    files: list[Path] = []
    for folder in chosen:
        names = sorted(
            e.name for e in os.scandir(folder) if e.is_file() and e.name.lower().endswith(suffixes)
        )
        files += [Path(folder) / name for name in names[:per_class]]
    return files[:SAMPLE]


def unreadable_classes(sampled: list[Path], bad: set[Path], suffixes: tuple[str, ...]) -> list[Path]:
    """The class folders the sample read whole and found not one good file in: once its bad files are
    removed, such a class is empty, and the trainer would count it and never see it."""
    by_class: dict[Path, list[Path]] = {}
    for path in sampled:
        by_class.setdefault(path.parent, []).append(path)
    dead = []
    for folder, files in by_class.items():
        if not all(path in bad for path in files):
            continue
        with os.scandir(folder) as entries:
            held = sum(1 for e in entries if e.name.lower().endswith(suffixes) and e.is_file())
        if held == len(files):
            dead.append(folder)
    return dead


def image_problem(path: Path) -> str | None:
    """Why Pillow cannot decode `path` to RGB (what the trainers' loaders do first); None if it can."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.convert("RGB")
        return None
    except Exception as error:  # noqa: BLE001 -- Pillow raises OSError, SyntaxError, ValueError, ...
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        return re.sub(rf"\s*'?{re.escape(str(path))}'?", "", text).strip() or type(error).__name__


def label_map_problem(path: Path) -> str | None:
    """A token-label map is a torch.save file (a zip archive, or a legacy pickle): its first bytes say."""
    with open(path, "rb") as handle:
        head = handle.read(4)
    return None if head.startswith(b"PK\x03\x04") or head[:1] == b"\x80" else "not a torch.save file"


def cached_dataset(root: Path, dataset: str, config: str | None) -> Path | None:
    """The prepared dataset in a datasets cache (<namespace>___<name>/<config>/<version>/<hash>/)."""
    namespace, _, name = dataset.rpartition("/")
    folder = root / (f"{namespace}___{name}" if namespace else name)
    found = sorted(folder.glob(f"{config or '*'}/*/*/dataset_info.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def cached_checkpoint(root: Path, model: str) -> Path | None:
    found = sorted((root / f"models--{model.replace('/', '--')}" / "snapshots").glob("*/config.json"))
    return found[-1].parent if found else None


class Data(Check):
    name = "data"

    def run(self, context: Context) -> list[Finding]:
        found: list[Finding] = []
        given: dict[str, tuple[str, DataKey, Recipe]] = {}
        for cell in context.cells:
            recipe = context.recipe(cell)
            for key, path in cell.data.items():
                given.setdefault(key, (path, recipe.dataset.data[key], recipe))
        for key, (path, spec, recipe) in given.items():
            cells = tuple(c.cell_id for c in context.cells if key in c.data)
            where = Path(path)
            if spec.layout == "imagenet":
                found += self._decoded(
                    key, sample(where / "train", IMAGE_SUFFIXES), IMAGE_SUFFIXES, image_problem, "image", cells,
                    self._classes(where / "train", recipe),
                )  # fmt: skip
            elif spec.layout == "token_labels":
                found += self._decoded(
                    key, sample(where, LABEL_SUFFIXES), LABEL_SUFFIXES, label_map_problem, "label map", cells
                )
            else:
                found += self._hub_cache(context, key, where, recipe, cells)
        found += self._without_data(context)
        return found

    @staticmethod
    def _classes(train: Path, recipe: Recipe) -> str:
        """How many classes the folder gives, beside the published dataset's: a folder of the user's
        own is trained on whole, and its count recorded (num_classes_data in the summary)."""
        given = sum(1 for entry in os.scandir(train) if entry.is_dir())
        published = recipe.dataset.synthetic.get("num_classes")
        if published is None or given == published:
            return f"{given} class folder(s); "
        return f"{given} class folder(s) ({recipe.dataset.id} has {published}: the run records the count it trained on); "

    def _decoded(
        self,
        key: str,
        files: list[Path],
        suffixes: tuple[str, ...],
        problem,
        what: str,
        cells: tuple[str, ...],
        classes: str = "",
    ) -> list[Finding]:
        bad = [(path, why) for path in files if (why := problem(path))]
        if bad:
            path, why = bad[0]
            more = f" (and {len(bad) - 1} more of the {len(files)} sampled)" if len(bad) > 1 else ""
            dead = unreadable_classes(files, {p for p, _ in bad}, suffixes)
            if dead:
                shown = ", ".join(map(str, dead[:5])) + (
                    f" and {len(dead) - 5} more" if len(dead) > 5 else ""
                )
                return [
                    self.finding(
                        f"--data {key}: not one {what} of class folder(s) {shown} reads (bad {what} {path}: {why}"
                        f"{more}); every class given is trained on: replace its {what}s or remove the folder",
                        True,
                        cells,
                    )
                ]
            return [
                self.finding(
                    f"--data {key}: bad {what} {path}: {why}; remove or replace it{more}", True, cells
                )
            ]
        return [
            self.finding(
                f"--data {key}: {classes}{len(files)} {what}(s) sampled over its classes, all decode"
            )
        ]

    def _hub_cache(
        self, context: Context, key: str, root: Path, recipe: Recipe, cells: tuple[str, ...]
    ) -> list[Finding]:
        found = []
        dataset, model = recipe.dataset, recipe.model
        prepared = cached_dataset(root, dataset.id, dataset.config)
        if prepared is None:
            found.append(
                self.finding(
                    f"--data {key}={root} holds no prepared {dataset.id} ({dataset.config or 'default'}): the trainer "
                    "would stop (nothing replaces given data); prepare it there with load_dataset(..., cache_dir=...) "
                    "where the hub is reachable",
                    True,
                    cells,
                )
            )
        else:
            splits = json.loads((prepared / "dataset_info.json").read_text()).get("splits") or {}
            rows = {name: int(split.get("num_examples", 0)) for name, split in splits.items()}
            differ = {name: n for name, n in dataset.splits.items() if rows.get(name) != n}
            if differ:
                held = ", ".join(f"{name} {rows.get(name, 0)}" for name in differ)
                pinned = ", ".join(f"{name} {n}" for name, n in differ.items())
                published = tuple(
                    c for c in cells if next(x for x in context.cells if x.cell_id == c).scale == "published"
                )
                found.append(
                    self.finding(
                        f"--data {key}: its {dataset.id} holds {held} rows, the pinned revision {pinned}: not the "
                        "published data",
                        bool(published),
                        published,
                    )
                )
            else:
                found.append(
                    self.finding(
                        f"--data {key}: {dataset.id} ({dataset.config}) prepared, its splits of the pinned size"
                    )
                )
        if "/" in model.id:
            if cached_checkpoint(root, model.id) is None:
                found.append(
                    self.finding(
                        f"--data {key}={root} holds no {model.id} checkpoint: the trainer would stop (a given cache is "
                        "used as given); put it there (huggingface-cli download --cache-dir)",
                        True,
                        cells,
                    )
                )
            else:
                found.append(self.finding(f"--data {key}: the {model.id} checkpoint is there"))
        if not storage.writable(root):
            scratch = os.environ.get("REPROKIT_SCRATCH")
            if context.container == "none" and scratch and not storage.writable(Path(scratch)):
                found.append(
                    self.finding(
                        f"--data {key}={root} is read-only and REPROKIT_SCRATCH={scratch} is not writable: the trainer "
                        "cannot make the writable view datasets needs for its locks; mount it read-write or point "
                        "REPROKIT_SCRATCH at a writable folder",
                        True,
                        cells,
                    )
                )
            else:
                found.append(
                    self.finding(
                        f"--data {key}: read-only; the trainer reads it through a writable view (its locks go there)"
                    )
                )
        return found

    def _without_data(self, context: Context) -> list[Finding]:
        found = []
        for recipe_name in dict.fromkeys(c.recipe for c in context.cells):
            cells = [c for c in context.cells if c.recipe == recipe_name]
            recipe = context.recipe(cells[0])
            missing = [key for key in recipe.dataset.data if not any(key in c.data for c in cells)]
            # A variant beyond the publication too: its speedup over synthetic data is no verdict either.
            published = tuple(c.cell_id for c in cells if c.scale == "published")
            if not missing:
                continue
            wanted = ", ".join(f"--data {key}=PATH" for key in missing)
            if "/" in recipe.dataset.id and not any(c.data for c in cells):
                why = hub_reachable("datasets", recipe.dataset.id)
                if why is None:
                    context.hub_datasets.append(recipe.dataset.id)
                    found.append(
                        self.finding(
                            f"{recipe.name}: {recipe.dataset.id} from the hub at revision {recipe.dataset.revision}"
                        )
                    )
                    continue
                context.hub_unreachable = why
                reason = f"{recipe.name}: synthetic data: {why} and no {wanted}"
            else:
                reason = (
                    f"{recipe.name}: synthetic data: no {wanted} ({recipe.dataset.data[missing[0]].help})"
                )
            if published:
                found.append(self.finding(reason, True, published))
            else:
                found.append(self.finding(f"{reason} (the {cells[0].scale} scale's stand-in)"))
        return found
