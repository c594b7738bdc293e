"""ImageNet-style training data for the image trainers: real folders or a synthetic stand-in.

Throughput is what the kit measures, so the data path must cost what the published one costs:

- ``ImageFolderSource`` reads ImageNet's ``<root>/train/<class>/*.JPEG`` layout (classes sorted,
  as torchvision's ImageFolder and timm number them; a class folder it cannot read or that holds no
  image is refused, never counted and left out);
- ``SyntheticImageSource`` serves real JPEG bytes of ImageNet's typical sizes (synthetic.py)
  from a pool built once per process, so every sample is decoded and augmented for real; with
  ``REPROKIT_SYNTHETIC_FILES`` set (a bare node's runner sets it) the pool is JPEG files in that
  folder, written once and read per sample by every run that draws the same pool;
- ``ImageTrainDataset`` decodes and augments in the DataLoader workers and returns uint8 crops;
  normalization and random erasing run on the device afterwards (``DeviceNormalize``), as timm's
  prefetching loader does in the published scripts (it is on by default there).

``TrainTransform`` reports the crop box and the flip of each sample so that per-image targets
(token-label maps) can be cropped with the image.
"""

from __future__ import annotations

import io
import math
import os
import random
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image

from reprokit_trainers.common.data import gpudecode, randaugment
from reprokit_trainers.common.data.synthetic import jpeg_bytes, sample_sizes
from reprokit_trainers.common.process.args import arg, config_error

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png")


@dataclass
class ImageNetArguments:
    """The image data of the ImageNet trainers (VOLO, ViT): a real ImageNet folder or its synthetic stand-in."""

    dataset_name: str = arg("imagenet-1k", "recorded in the summary")
    data_dir: str | None = arg(None, "ImageNet root with train/<class>/*.JPEG; without it, synthetic data")
    synthetic_data: bool = arg(False, "use synthetic ImageNet-like JPEGs even with data_dir")
    synthetic_num_train: int = arg(1_281_167, "epoch length (ImageNet-1k train)")
    synthetic_num_classes: int = arg(1000)
    synthetic_image_width: list[int] = field(
        default_factory=lambda: [375, 500], metadata={"help": "[min, max]"}
    )
    synthetic_image_height: list[int] = field(
        default_factory=lambda: [333, 500], metadata={"help": "[min, max]"}
    )
    synthetic_pool_size: int = arg(512, "distinct JPEGs the samples cycle through")
    synthetic_seed: int = arg(0)

    def image_source(self) -> tuple[ImageFolderSource | SyntheticImageSource, dict[str, Any]]:
        """The ImageNet folder when one is given (and synthetic data not forced), else the stand-in;
        with what the summary records of it."""
        if self.data_dir and not self.synthetic_data:
            folder = ImageFolderSource(self.data_dir)
            return folder, {
                "data": "imagenet-folder",
                "data_dir": self.data_dir,
                "num_classes_data": folder.num_classes,
            }
        source = SyntheticImageSource(
            self.synthetic_num_train,
            self.synthetic_num_classes,
            self.synthetic_image_width,
            self.synthetic_image_height,
            self.synthetic_pool_size,
            self.synthetic_seed,
        )
        return source, {
            "data": "synthetic",
            "synthetic_pool_size": len(source.pool),
            "synthetic_files": str(source.folder) if source.folder else None,
            "num_classes_data": source.num_classes,
        }


class ImageFolderSource:
    """``<root>/<split>/<class>/<image>``: ImageNet's layout; class ids follow the sorted class names."""

    def __init__(self, root: str | os.PathLike, split: str = "train") -> None:
        base = Path(root)
        if (base / split).is_dir():
            base = base / split
        if not base.is_dir():
            raise ValueError(f"no image folder at {base} (expected <data_dir>/{split}/<class>/*.JPEG)")
        classes = sorted(entry.name for entry in os.scandir(base) if entry.is_dir())
        # Every class the user gave is used or the run stops: a class folder that is a link to
        # nothing would silently leave a class out (the run would train on fewer than given).
        for entry in os.scandir(base):
            if entry.is_symlink() and not entry.is_dir():
                raise ValueError(
                    f"class folder {base / entry.name} is a link to {os.readlink(entry.path)}, which is not a "
                    "folder: every class of the given data must be readable; fix or remove the link"
                )
        self.root = base
        self.classes = classes
        self.samples: list[tuple[str, int]] = []
        empty: list[str] = []
        for label, name in enumerate(classes):
            try:
                entries = list(os.scandir(base / name))
            except OSError as error:
                raise ValueError(
                    f"class folder {base / name} cannot be read ({error.strerror}): every class of the given "
                    "data must be readable"
                ) from None
            files = sorted(
                entry.name
                for entry in entries
                if entry.is_file() and entry.name.lower().endswith(IMAGE_EXTENSIONS)
            )
            self.samples += [(f"{name}/{file}", label) for file in files]
            if not files:
                empty.append(str(base / name))
        if not self.samples:
            raise ValueError(f"no images under {base}/<class>/ (extensions {', '.join(IMAGE_EXTENSIONS)})")
        if empty:
            # A class with no image would be counted (num_classes_data, the labels' range) and never
            # trained on: less than was given, in silence.
            shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
            holds = "holds" if len(empty) == 1 else "hold"
            raise ValueError(
                f"{len(empty)} of the {len(classes)} class folders of {base} {holds} no image "
                f"({', '.join(IMAGE_EXTENSIONS)}): {shown}; every class given is trained on: add its images or "
                "remove the folder"
            )

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return len(self.samples)

    def read(self, index: int) -> bytes:
        return (self.root / self.samples[index][0]).read_bytes()

    def label(self, index: int) -> int:
        return self.samples[index][1]

    def key(self, index: int) -> str:
        """``<class>/<stem>``: how per-image side data (token-label maps) is filed."""
        return self.samples[index][0].rsplit(".", 1)[0]

    def describe(self, index: int) -> str:
        """The sample's file, as a user finds it."""
        return str(self.root / self.samples[index][0])


class SyntheticImageSource:
    """``num_samples`` images cycling through a pool of distinct JPEGs of ImageNet-like sizes.

    Encoding a JPEG costs about what decoding one does, so the bytes are made once, up front,
    and each sample only pays the decode that a real one pays. Labels are spread over the classes.
    """

    def __init__(
        self,
        num_samples: int,
        num_classes: int = 1000,
        widths: Sequence[int] = (375, 500),
        heights: Sequence[int] = (333, 500),
        pool_size: int = 512,
        seed: int = 0,
    ) -> None:
        if num_samples < 1 or pool_size < 1:
            raise ValueError("the synthetic dataset needs num_train >= 1 and pool_size >= 1")
        count = min(pool_size, num_samples)
        self.folder = synthetic_files(widths, heights, count, seed)

        def draw() -> list[bytes]:
            rng = np.random.default_rng(seed)
            return [jpeg_bytes(w, h, rng) for w, h in sample_sizes(count, rng, widths, heights)]

        # In memory, or files written once (a node's slice: every cell reads the same files).
        self.pool: list[bytes] | list[Path] = draw() if self.folder is None else _written(self.folder, draw)
        self.num_samples = num_samples
        self.num_classes = num_classes
        self.seed = seed

    def __len__(self) -> int:
        return self.num_samples

    def read(self, index: int) -> bytes:
        item = self.pool[index % len(self.pool)]
        return item.read_bytes() if isinstance(item, Path) else item

    def label(self, index: int) -> int:
        # A fixed odd multiplier spreads consecutive indices over all classes, deterministically.
        return (index * 7919 + self.seed) % self.num_classes

    def key(self, index: int) -> str:
        return f"synthetic/{index:08d}"

    def describe(self, index: int) -> str:
        item = self.pool[index % len(self.pool)]
        return (
            str(item) if isinstance(item, Path) else f"synthetic image {index % len(self.pool)} of the pool"
        )


SYNTHETIC_FILES = "REPROKIT_SYNTHETIC_FILES"


def synthetic_files(widths: Sequence[int], heights: Sequence[int], count: int, seed: int) -> Path | None:
    """Where the synthetic pool's JPEG files are (None: no REPROKIT_SYNTHETIC_FILES, the pool stays in
    memory): a folder per draw, so runs that draw the same pool read the same files."""
    root = os.environ.get(SYNTHETIC_FILES)
    if not root:
        return None
    return Path(root) / f"imagenet-{widths[0]}-{widths[-1]}x{heights[0]}-{heights[-1]}-n{count}-seed{seed}"


def _written(folder: Path, draw: Callable[[], list[bytes]]) -> list[Path]:
    """The pool's files in `folder`, written once: a run finds a complete folder (its files renamed
    into place together) or writes one; two runs writing at once each finish, the first rename wins."""
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        # A folder of this run's own (mkdtemp: a name nobody could have planted a link at beforehand).
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        staging.chmod(0o755)
        for index, data in enumerate(draw()):
            (staging / f"{index:06d}.JPEG").write_bytes(data)
        try:
            staging.rename(folder)
        except OSError:  # another run put it there first: the same draw
            for path in staging.iterdir():
                path.unlink()
            staging.rmdir()
    return sorted(folder.glob("*.JPEG"))


class BadImage(ValueError):
    """An image no decoder can read, named by its file: one line, also from a loader worker."""

    @staticmethod
    def line(error: BaseException) -> str:
        """The one line of a BadImage, also when a loader worker raised it (the main process gets its
        message after the worker's traceback: the last line is the error's)."""
        last = str(error).strip().splitlines()[-1]
        return last.split(f"{BadImage.__name__}: ", 1)[-1]


@contextmanager
def bad_images_named(prog: str) -> Iterator[None]:
    """A bad image met while training ends the trainer in one line naming its file."""
    try:
        yield
    except BadImage as error:
        raise config_error(prog, BadImage.line(error)) from None


def bad_image(source: Any, index: int, error: BaseException) -> BadImage:
    """The one-line error of sample ``index`` of ``source`` that failed to decode with ``error``."""
    return bad_file(source.describe(index), error)


def bad_file(name: str, error: BaseException) -> BadImage:
    """The one-line error of the image file ``name`` that failed to decode with ``error``."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, OSError) and error.strerror and error.filename:
        reason = error.strerror  # its own message names the file again
    # PIL names the buffer it read from (<_io.BytesIO object at 0x...>), which says nothing to a user.
    reason = re.sub(r"\s*<_io\.BytesIO object at 0x[0-9a-f]+>", "", reason)
    return BadImage(f"bad image {name}: {reason}; remove or replace the file")


def open_rgb(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


@dataclass(frozen=True)
class Crop:
    """Where a training crop came from: box (x0, y0, x1, y1) as fractions of the source image.

    The box is in the coordinates of the image after the horizontal flip, when there was one.
    """

    box: tuple[float, float, float, float]
    flipped: bool


def random_resized_crop_params(
    width: int, height: int, scale: Sequence[float], ratio: Sequence[float]
) -> tuple[int, int, int, int]:
    """(top, left, h, w) of a random-resized crop, drawn by torchvision's (and timm's) rule."""
    from torchvision.transforms import RandomResizedCrop

    # get_params reads only the size: an expanded one-element tensor stands in for the image.
    stand_in = torch.empty(1, 1, 1).expand(3, height, width)
    return tuple(RandomResizedCrop.get_params(stand_in, list(scale), list(ratio)))


def augment_fill(mean: Sequence[float] = IMAGENET_MEAN) -> tuple[int, ...]:
    """The colour RandAugment fills uncovered areas with: the mean, as timm's ``img_mean``."""
    return tuple(min(255, round(255 * m)) for m in mean)


def _posterize(image: Image.Image, bits: int, **_: Any) -> Image.Image:
    # timm's PosterizeIncreasing asks for 0 bits at magnitude 10 (1 draw in 44 of N(9, 0.5)), which
    # Pillow 13 refuses with an error; the Pillow of the publication's time kept no bit: black.
    if bits <= 0:
        return Image.new(image.mode, image.size, 0)
    from timm.data.auto_augment import posterize

    return posterize(image, bits)


class TrainTransform:
    """Flip, RandAugment, random-resized crop: in the order the token-labeling toolbox applies them.

    sail-sg/volo trains with the token-labeling toolbox's transforms, which flip and augment the
    whole decoded image and crop last (so the crop box can be recorded for the label map). timm's
    RandAugment is used as published (``rand-m9-mstd0.5-inc1``); the resize interpolation is
    bilinear or bicubic at random (``--train-interpolation random``), and a fixed one is also what
    RandAugment's geometric ops use, as the toolbox passes it. Returns a uint8 CHW crop.
    """

    def __init__(
        self,
        img_size: int,
        auto_augment: str | None = "rand-m9-mstd0.5-inc1",
        hflip: float = 0.5,
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3 / 4, 4 / 3),
        interpolation: str = "random",
        mean: Sequence[float] = IMAGENET_MEAN,
    ) -> None:
        self.img_size = img_size
        self.hflip = hflip
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        if interpolation == "random":
            self.interpolations = (Image.Resampling.BILINEAR, Image.Resampling.BICUBIC)
        else:
            self.interpolations = (Image.Resampling[interpolation.upper()],)
        self.rand_augment = None
        if auto_augment:
            from timm.data.auto_augment import rand_augment_transform

            hparams: dict[str, Any] = {
                "translate_const": int(img_size * 0.45),
                "img_mean": augment_fill(mean),
            }
            if interpolation != "random":
                hparams["interpolation"] = self.interpolations[0]
            self.rand_augment = rand_augment_transform(auto_augment, hparams)
            for op in self.rand_augment.ops:
                if op.name.startswith("Posterize"):
                    op.aug_fn = _posterize

    def __call__(self, image: Image.Image) -> tuple[torch.Tensor, Crop]:
        flipped = random.random() < self.hflip
        if flipped:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        if self.rand_augment is not None:
            image = self.rand_augment(image)
        width, height = image.size
        top, left, h, w = random_resized_crop_params(width, height, self.scale, self.ratio)
        size = (self.img_size, self.img_size)
        # Pillow's resize with box= is crop-then-resize in one pass (torchvision's resized_crop).
        crop = image.resize(size, random.choice(self.interpolations), box=(left, top, left + w, top + h))
        tensor = torch.from_numpy(np.asarray(crop, dtype=np.uint8).copy()).permute(2, 0, 1)
        box = (left / width, top / height, (left + w) / width, (top + h) / height)
        return tensor, Crop(box=box, flipped=flipped)


class ImageTrainDataset(torch.utils.data.Dataset):
    """Decodes and augments one sample per call (in a DataLoader worker).

    ``encoded=True`` skips the decode: the sample carries its JPEG bytes and a crop drawn from the
    header's size, for loaders that decode on the device. ``extra(index, crop)`` adds per-sample
    side data (e.g. token-label maps) to the returned dict.
    """

    def __init__(
        self,
        source: ImageFolderSource | SyntheticImageSource,
        transform: TrainTransform,
        encoded: bool = False,
        extra: Callable[[int, Crop], dict[str, Any]] | None = None,
    ) -> None:
        self.source = source
        self.transform = transform
        self.encoded = encoded
        self.extra = extra

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> dict[str, Any]:
        try:
            data = self.source.read(index)
        except OSError as error:  # gone since the folder was listed, or unreadable
            raise bad_image(self.source, index, error) from None
        sample: dict[str, Any] = {"labels": self.source.label(index)}
        if self.encoded:
            try:
                width, height = Image.open(io.BytesIO(data)).size  # header only, no decode
            except (OSError, ValueError) as error:  # PIL: UnidentifiedImageError, a truncated header
                raise bad_image(self.source, index, error) from None
            flipped = random.random() < self.transform.hflip
            top, left, h, w = random_resized_crop_params(
                width, height, self.transform.scale, self.transform.ratio
            )
            crop = Crop(
                box=(left / width, top / height, (left + w) / width, (top + h) / height), flipped=flipped
            )
            sample["jpeg"] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            # Decoded later, on the device, where only this name can say which file was bad.
            sample["source"] = self.source.describe(index)
        else:
            try:
                image = open_rgb(data)
            except (OSError, ValueError) as error:  # PIL: UnidentifiedImageError, "image file is truncated"
                raise bad_image(self.source, index, error) from None
            sample["pixel_values"], crop = self.transform(image)
        sample["crop_box"] = torch.tensor(crop.box, dtype=torch.float32)
        sample["flipped"] = crop.flipped
        if self.extra is not None:
            sample.update(self.extra(index, crop))
        return sample


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """default_collate, except JPEG byte strings (of different lengths) stay a list."""
    jpegs = [s.pop("jpeg") for s in samples] if "jpeg" in samples[0] else None
    batch = torch.utils.data.default_collate(samples)
    if jpegs is not None:
        batch["jpeg"] = jpegs
    return batch


def train_loader(
    dataset: torch.utils.data.Dataset, batch_size: int, num_workers: int, pin_memory: bool, seed: int
) -> torch.utils.data.DataLoader:
    """Shuffled full batches: in a group of several ranks each reads its own share of every epoch."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        sampler: Any = torch.utils.data.DistributedSampler(dataset, shuffle=True, seed=seed, drop_last=True)
    else:
        sampler = torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    # Workers live across epochs: starting them again each epoch would show as measured data wait.
    workers = {
        "num_workers": num_workers,
        "persistent_workers": num_workers > 0,
        "worker_init_fn": seed_worker,
    }
    return torch.utils.data.DataLoader(
        dataset,
        batch_size,
        sampler=sampler,
        collate_fn=collate,
        pin_memory=pin_memory,
        drop_last=True,
        **workers,
    )


def set_epoch(loader: torch.utils.data.DataLoader, epoch: int) -> None:
    """Reshuffle the ranks' shares for a new epoch (a single process's RandomSampler needs nothing)."""
    if isinstance(loader.sampler, torch.utils.data.DistributedSampler):
        loader.sampler.set_epoch(epoch)


def seed_worker(worker_id: int) -> None:
    """Give each worker its own numpy stream: timm's RandAugment picks its ops with numpy."""
    np.random.seed(torch.initial_seed() % 2**32)


class DeviceNormalize:
    """uint8 batch on the device -> normalized float, then random erasing (CutOut), on the device."""

    def __init__(
        self,
        device: torch.device,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        re_prob: float = 0.25,
        re_mode: str = "pixel",
        re_count: int = 1,
    ) -> None:
        self.mean = torch.tensor([255 * m for m in mean], device=device).view(1, 3, 1, 1)
        self.std = torch.tensor([255 * s for s in std], device=device).view(1, 3, 1, 1)
        self.erase = None
        if re_prob > 0:
            from timm.data.random_erasing import RandomErasing

            self.erase = RandomErasing(re_prob, mode=re_mode, max_count=re_count, device=str(device))

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        out = images.float().sub_(self.mean).div_(self.std)
        return self.erase(out) if self.erase is not None else out


class GpuDecode:
    """JPEG bytes -> augmented uint8 crops on the device, in the published order: flip, RandAugment
    on the whole image, random-resized crop resized as Pillow resizes (antialiased).

    Decoding goes through the shared device decoder (gpudecode.py: its own CUDA stream, a per-image
    CPU fallback for what nvJPEG cannot decode, counted in ``cpu_fallbacks``). RandAugment is the
    policy string's own (randaugment.py: timm's ops and magnitudes, on tensors); ``interpolation``
    is ``--train_interpolation``: per image bilinear or bicubic at random, or a fixed one, for the
    resize and for RandAugment's geometric ops, as on the CPU. The crop boxes and flips were drawn
    in the workers from the JPEG headers, so targets that are cropped with the image stay consistent.
    """

    def __init__(
        self,
        img_size: int,
        device: torch.device,
        auto_augment: str | None = "rand-m9-mstd0.5-inc1",
        interpolation: str = "random",
        mean: Sequence[float] = IMAGENET_MEAN,
        seed: int = 0,
    ) -> None:
        if interpolation not in randaugment.INTERPOLATIONS:
            raise ValueError(
                f"--train_interpolation {interpolation}: choose one of {', '.join(randaugment.INTERPOLATIONS)}"
            )
        self.img_size = img_size
        self.decoder = gpudecode.DeviceDecoder(device)
        self.modes = ("bilinear", "bicubic") if interpolation == "random" else (interpolation,)
        self.generator = torch.Generator().manual_seed(seed)
        self.rand_augment = None
        if auto_augment:
            policy = randaugment.parse_policy(auto_augment)
            self.rand_augment = randaugment.DeviceRandAugment(
                policy, augment_fill(mean), interpolation=interpolation, seed=seed + 1
            )

    @property
    def cpu_fallbacks(self) -> int:
        return self.decoder.cpu_fallbacks

    def __call__(
        self,
        jpegs: list[torch.Tensor],
        boxes: torch.Tensor,
        flipped: torch.Tensor,
        sources: Sequence[str],
    ) -> torch.Tensor:
        """The batch's crops; ``sources`` (the samples' files) name an image no decoder can read."""
        try:
            return self.decoder.run(jpegs, lambda images: self._finish(images, boxes, flipped))
        except gpudecode.UndecodableImage as bad:
            raise bad_file(sources[bad.index], bad.error) from None

    def _augment(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        # Images of one size are augmented as one batch (ImageNet's are mostly 500 x 375 or 375 x 500).
        by_size: dict[tuple[int, ...], list[int]] = {}
        for index, image in enumerate(images):
            by_size.setdefault(tuple(image.shape), []).append(index)
        out = list(images)
        for indices in by_size.values():
            augmented = self.rand_augment(torch.stack([images[i] for i in indices]))
            for row, index in enumerate(indices):
                out[index] = augmented[row]
        return out

    def _finish(self, images: list[torch.Tensor], boxes: torch.Tensor, flipped: torch.Tensor) -> torch.Tensor:
        images = [
            image.flip(-1) if flip else image for image, flip in zip(images, flipped.tolist(), strict=True)
        ]
        if self.rand_augment is not None:
            images = self._augment(images)
        picks = torch.randint(len(self.modes), (len(images),), generator=self.generator).tolist()
        out = []
        for image, box, pick in zip(images, boxes.tolist(), picks, strict=True):
            height, width = image.shape[-2:]
            top, left = round(box[1] * height), round(box[0] * width)
            h, w = max(1, round((box[3] - box[1]) * height)), max(1, round((box[2] - box[0]) * width))
            out.append(
                gpudecode.resized_crop(
                    image, (top, left, h, w), self.img_size, self.modes[pick], antialias=True
                )
            )
        return torch.stack(out)


def steps_per_epoch(num_samples: int, global_batch: int) -> int:
    """Full batches per epoch (training loaders drop the last partial batch)."""
    return max(1, math.floor(num_samples / global_batch))
