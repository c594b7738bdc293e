"""``--loader dali``: NVIDIA DALI decodes and augments VOLO's training images, one pipeline per process.

The publication trained with "one DALI loader per GPU process" (recipes/volo/SOURCES.md §1). Token labeling ties
each image to a score map that must be cropped and flipped exactly as the image was, so the loader
is built around the crop rather than around a DALI file reader:

- **Samples**: the torch loader's own dataset in its encoded form (``imagenet.ImageTrainDataset``
  with ``encoded=True``): DataLoader workers read each sample's JPEG bytes, label and token-label
  map, and draw its flip and random-resized-crop box from the JPEG header. A ``DistributedSampler``
  gives each rank its own share (shard ``rank`` of ``world``), reshuffled per epoch.
- **Pipeline**: an external source feeds those batches to DALI, which decodes (``mixed``: nvJPEG on
  the process's GPU; ``cpu`` where there is none), flips, applies RandAugment to the whole image and
  crops + resizes the drawn box (the token-labeling toolbox's order), bilinear or bicubic per image.
- **Alignment**: the box, flip, label and map travel through the pipeline beside the image and come
  out in the same batch, so ``tokenlabel.build_token_targets`` crops each map with its image's box.
- **After the pipeline**: normalization and random erasing run on the device in the training loop
  (``imagenet.DeviceNormalize``), as they do for the torch loader.

RandAugment is timm's ``rand-m*-n*-mstd*-inc1`` rebuilt from DALI's augmentation operators with
timm's op set, levels (magnitude noise drawn per op, on a grid of 0.01) and per-op probability. The
policy string and timm's magnitude-to-argument formulas are read as the GPU decode loader reads them
(``common/data/randaugment.py``). What DALI cannot reproduce is recorded as a departure
(``RandAugmentSpec.departure``).

Importing this module needs DALI: run_volo.py imports it for ``--loader dali`` only, and says in one
line how to install it when it is missing.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import nvidia.dali
import torch
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali import math as dmath
from nvidia.dali.auto_aug import augmentations as dali_ops
from nvidia.dali.auto_aug.core import select
from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

from reprokit_trainers.common.data import imagenet, randaugment

VERSION = nvidia.dali.__version__
OUTPUTS = ("pixel_values", "crop_box", "flipped", "labels", "label_map")
LEVEL_MAX = randaugment.LEVEL_DENOM  # magnitudes are clipped to [0, 10]
LEVEL_STEPS = 100  # magnitude grid of 0.01 level: the noisy magnitude as DALI indexes it
# timm fills the corners that geometric ops uncover with the per-channel mean (124, 116, 104);
# DALI's warps take one value, so the nearest single gray.
FILL_GRAY = round(sum(round(255 * m) for m in imagenet.IMAGENET_MEAN) / 3)
INTERPOLATIONS = {"random": ("LINEAR", "CUBIC"), "bilinear": ("LINEAR",), "bicubic": ("CUBIC",)}


def pipeline_device() -> int | None:
    """The CUDA device the process trains on (one pipeline each), or None: a CPU-only pipeline."""
    hpu = getattr(torch, "hpu", None)
    if hpu is not None and hpu.is_available():
        raise ValueError("--loader dali runs on NVIDIA GPUs (or the CPU), not on Gaudi: use --loader torch")
    return torch.cuda.current_device() if torch.cuda.is_available() else None


# ----------------------------------------------------------------------------------------------
# RandAugment as timm configures it


@dataclass(frozen=True)
class RandAugmentSpec:
    """timm's ``rand-...`` string and its policy (ops per image, magnitude, its noise, each op's
    probability), as far as this loader follows it."""

    text: str
    policy: randaugment.Policy

    @classmethod
    def parse(cls, text: str) -> RandAugmentSpec:
        """The policy as randaugment.parse_policy reads it; what this loader cannot follow is refused."""
        policy = randaugment.parse_policy(text)
        for section in text.split("-")[1:]:
            if section.startswith("mmax"):  # the argument tables stop at timm's default bound
                raise ValueError(
                    f"--auto_augment {text}: the dali loader does not implement timm's '{section}' section"
                )
        if policy.ops != randaugment.INCREASING_OPS:
            raise ValueError(
                f"--auto_augment {text}: the dali loader implements timm's increasing op set (inc1) only"
            )
        return cls(text, policy)

    @property
    def departure(self) -> str:
        return (
            f"dali RandAugment differs from timm's {self.text}: Equalize is DALI's (OpenCV's formula, not "
            "PIL's); rotate, shear and translate interpolate bilinearly (timm: bilinear or bicubic at random) "
            f"and fill with one gray ({FILL_GRAY}) instead of the per-channel mean; colour ops round where "
            "PIL truncates"
        )


# The ops whose argument timm negates half the time: their tables interleave (+v, -v) per level, so
# a sample's row is 2 x its level index + its sign.
SIGNED_OPS = (
    "rotate",
    "color",
    "contrast",
    "brightness",
    "sharpness",
    "shear_x",
    "shear_y",
    "translate_x",
    "translate_y",
)
# Parameters that DALI's own suite keeps on the images' device (its param_device="auto").
ON_IMAGE_DEVICE = ("posterize", "solarize", "solarize_add", "sharpness")


def parameter_tables() -> dict[str, np.ndarray]:
    """Each op's argument at every level k / LEVEL_STEPS of the grid: timm's level-to-argument
    functions (randaugment.op_parameter), evaluated on the whole grid at once."""
    levels = torch.arange(int(LEVEL_MAX) * LEVEL_STEPS + 1, dtype=torch.float64) / LEVEL_STEPS
    signs = torch.tensor([1.0, -1.0], dtype=torch.float64).repeat(len(levels))

    def timm(op: str, signed: bool = False) -> np.ndarray:
        if signed:  # rows (+v, -v) per level
            return randaugment.op_parameter(op, levels.repeat_interleave(2), signs).numpy()
        return randaugment.op_parameter(op, levels, torch.ones_like(levels)).numpy()

    enhance = timm("ColorIncreasing", signed=True)  # Contrast, Brightness, Sharpness: the same
    # PIL's Sharpness blends the image with its 3x3 smoothing (ImageFilter.SMOOTH): one kernel.
    smooth = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]]) / 13
    identity = np.zeros((3, 3))
    identity[1, 1] = 1
    sharpness = (1 - enhance)[:, None, None] * smooth + enhance[:, None, None] * identity
    # PosterizeIncreasing keeps 4 - int(level / 10 * 4) bits: none at level 10 (black, as in timm).
    bits = timm("PosterizeIncreasing").astype(np.int64)
    # PIL's affine maps each output pixel to its source, DALI's (inverse_map=False) each source pixel
    # to its output: the same shear or shift is the opposite sign there.
    shear, translate = -timm("ShearX", signed=True), -timm("TranslateXRel", signed=True)
    zeros = np.zeros_like(shear)
    return {
        "rotate": timm("Rotate", signed=True).astype(np.float32),
        "posterize": (0xFF ^ (2 ** (8 - bits) - 1)).astype(np.uint8),
        "solarize": timm("SolarizeIncreasing").astype(np.float32),
        "solarize_add": timm("SolarizeAdd").astype(np.uint8),
        "color": enhance.astype(np.float32),
        "contrast": enhance.astype(np.float32),
        "brightness": enhance.astype(np.float32),
        "sharpness": sharpness.astype(np.float32),
        "shear_x": np.stack([shear, zeros], axis=1).astype(np.float32),
        "shear_y": np.stack([zeros, shear], axis=1).astype(np.float32),
        "translate_x": np.stack([translate, zeros], axis=1).astype(np.float32),
        "translate_y": np.stack([zeros, translate], axis=1).astype(np.float32),
    }


# DALI 2 moved these out of fn.experimental, whose names now warn; older DALIs have only those.
EQUALIZE = getattr(fn, "equalize", None) or fn.experimental.equalize
FILTER = getattr(fn, "filter", None) or fn.experimental.filter


@dataclass(frozen=True)
class SuiteOp:
    """One op of the RandAugment suite on its DALI implementation, ``apply(data, argument, **extras)``.

    ``select`` hands every op of the suite the same arguments by name, split among the ops per sample:
    the images, each table's row (looked up before the split, see TimmRandAugment), the image shape,
    the fill and the interpolation. An op's argument is its table's row (``table``; None: it takes
    none), and the ``extras`` go on by name.
    """

    apply: Callable[..., Any]
    table: str | None = None
    extras: tuple[str, ...] = ()

    def __call__(self, data: Any, **arguments: Any) -> Any:
        argument = arguments[self.table] if self.table else None
        return self.apply(data, argument, **{name: arguments[name] for name in self.extras})


WARP = ("fill_value", "interp_type")  # what the geometric ops take beside their argument

# timm's _RAND_INCREASING_TRANSFORMS, in its order, on DALI's implementations of each op.
TIMM_INCREASING = {
    "AutoContrast": SuiteOp(dali_ops.auto_contrast.op),
    "Equalize": SuiteOp(lambda data, _: EQUALIZE(data)),
    "Invert": SuiteOp(dali_ops.invert.op),
    "Rotate": SuiteOp(dali_ops.rotate.op, "rotate", WARP),
    "PosterizeIncreasing": SuiteOp(dali_ops.posterize.op, "posterize"),
    "SolarizeIncreasing": SuiteOp(dali_ops.solarize.op, "solarize"),
    "SolarizeAdd": SuiteOp(dali_ops.solarize_add.op, "solarize_add"),
    "ColorIncreasing": SuiteOp(dali_ops.color.op, "color"),
    "ContrastIncreasing": SuiteOp(dali_ops.contrast.op, "contrast"),
    "BrightnessIncreasing": SuiteOp(dali_ops.brightness.op, "brightness"),
    "SharpnessIncreasing": SuiteOp(FILTER, "sharpness"),  # the PIL blend as one kernel (parameter_tables)
    "ShearX": SuiteOp(dali_ops.shear_x.op, "shear_x", WARP),
    "ShearY": SuiteOp(dali_ops.shear_y.op, "shear_y", WARP),
    "TranslateXRel": SuiteOp(dali_ops.translate_x.op, "translate_x", ("shape", *WARP)),
    "TranslateYRel": SuiteOp(dali_ops.translate_y.op, "translate_y", ("shape", *WARP)),
}
SKIPPED = SuiteOp(dali_ops.identity.op)  # what an op that does not apply does


class TimmRandAugment:
    """timm's RandAugment in a DALI pipeline: ``num_layers`` ops per image, each chosen uniformly
    (with replacement) and applied with probability ``prob``, at a magnitude drawn for that
    application (normal around m, or uniform in [0, m]; clipped to [0, 10]; on a 0.01 grid).

    The argument tables are built here, outside the pipeline: DALI traces the pipeline's Python
    through AutoGraph, where evaluating timm's functions level by level would take minutes.
    """

    def __init__(self, spec: RandAugmentSpec, on_gpu: bool) -> None:
        self.spec = spec
        self.tables = parameter_tables()
        self.device = "gpu" if on_gpu else "cpu"

    def __call__(self, images: Any, shape: Any) -> Any:
        """``images``: uint8 HWC; ``shape``: their (H, W, C), to which translations are relative.
        Call inside a pipeline defined with ``enable_conditionals=True``."""
        suite = [*TIMM_INCREASING.values(), SKIPPED]
        skipped = len(TIMM_INCREASING)
        policy = self.spec.policy
        for _ in range(policy.num_layers):
            chosen = fn.random.uniform(values=list(range(skipped)), dtype=types.INT32)
            if policy.prob < 1.0:
                keep = fn.random.coin_flip(probability=policy.prob, dtype=types.INT32)
                chosen = chosen * keep + skipped * (1 - keep)
            negate = fn.random.coin_flip(probability=0.5, dtype=types.INT32)
            images = select(suite, chosen, **self._arguments(images, shape, self._level(), negate))
        return images

    def apply(self, images: Any, shape: Any, op: str, level: float, negate: bool = False) -> Any:
        """One op by timm's name at one level, e.g. ("PosterizeIncreasing", 9.0): to hold each
        against timm's own."""
        index = int(round(level * LEVEL_STEPS))
        return TIMM_INCREASING[op](**self._arguments(images, shape, index, int(negate)))

    def _arguments(self, images: Any, shape: Any, level: Any, negate: Any) -> dict[str, Any]:
        """What every op of the suite may take; each picks its own by name."""
        row = 2 * level + negate
        return {
            "data": images,
            "shape": shape,
            "fill_value": FILL_GRAY,
            "interp_type": types.INTERP_LINEAR,
            **{name: self._argument(name, row if name in SIGNED_OPS else level) for name in self.tables},
        }

    def _level(self) -> Any:
        magnitude, std = float(self.spec.policy.magnitude), self.spec.policy.magnitude_std
        if std == 0:
            return int(round(min(magnitude, LEVEL_MAX) * LEVEL_STEPS))
        if math.isinf(std):
            level = fn.random.uniform(range=[0.0, magnitude])
        else:
            level = fn.random.normal(mean=magnitude, stddev=std)
        level = dmath.clamp(level, 0.0, LEVEL_MAX)
        return fn.cast(level * float(LEVEL_STEPS), dtype=types.INT32)  # DALI's cast rounds to the nearest

    def _argument(self, name: str, row: Any) -> Any:
        device = self.device if name in ON_IMAGE_DEVICE else "cpu"
        return types.Constant(self.tables[name], device=device)[row]


# ----------------------------------------------------------------------------------------------
# The pipeline


def _without_exif_rotation(op: Callable[..., Any]) -> dict[str, Any]:
    """PIL (the torch loader, the token-label toolbox) decodes the stored pixels and ignores EXIF
    orientation; DALI's nvImageCodec decoders rotate by it unless told not to (older ones ignore it
    and have no such argument)."""
    try:
        parameters = inspect.signature(op).parameters
    except (TypeError, ValueError):
        return {}
    return {"adjust_orientation": False} if "adjust_orientation" in parameters else {}


def build_pipeline(
    source: Callable[[Any], tuple[Any, ...]],
    *,
    batch_size: int,
    img_size: int,
    device_id: int | None,
    num_threads: int,
    seed: int,
    rand_augment_spec: RandAugmentSpec | None,
    interpolation: str = "random",
) -> Any:
    """The training pipeline: external source -> decode -> flip -> RandAugment -> crop-resize.

    ``source(batch_info)`` returns one batch: JPEG bytes, crop boxes (x0, y0, x1, y1) as fractions
    of the flipped image, flips, labels and token-label maps; all but the bytes come out as they
    went in, beside the uint8 CHW crops.
    """
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"--train_interpolation {interpolation}: the dali loader takes {', '.join(INTERPOLATIONS)}"
        )
    modes = [getattr(types, f"INTERP_{name}") for name in INTERPOLATIONS[interpolation]]
    rand_augment = TimmRandAugment(rand_augment_spec, device_id is not None) if rand_augment_spec else None

    @pipeline_def(enable_conditionals=True)
    def train() -> tuple[Any, ...]:
        jpegs, boxes, flips, labels, maps = fn.external_source(
            source=source,
            batch_info=True,
            batch=True,
            num_outputs=len(OUTPUTS),
            dtype=[types.UINT8, types.FLOAT, types.INT32, types.INT64, types.FLOAT],
        )
        decoder = "mixed" if device_id is not None else "cpu"
        images = fn.decoders.image(
            jpegs, device=decoder, output_type=types.RGB, **_without_exif_rotation(fn.decoders.image)
        )
        images = fn.flip(images, horizontal=flips)  # the box is in the flipped image's coordinates
        if rand_augment is not None:
            shape = fn.cast(
                fn.peek_image_shape(jpegs, **_without_exif_rotation(fn.peek_image_shape)), dtype=types.FLOAT
            )
            images = rand_augment(images, shape)
        mode = modes[0]
        if len(modes) > 1:  # one interpolation per image, as timm's "random"
            mode = fn.cast(
                fn.random.uniform(values=[int(m) for m in modes], dtype=types.INT32), dtype=types.INTERP_TYPE
            )
        images = fn.resize(
            images,
            size=[img_size, img_size],
            # DALI's ROI is in the tensor's (y, x) order; the box is (x0, y0, x1, y1).
            roi_start=fn.stack(boxes[1], boxes[0]),
            roi_end=fn.stack(boxes[3], boxes[2]),
            roi_relative=True,
            interp_type=mode,
            antialias=True,  # as PIL's resize(box=...) when it shrinks
        )
        return fn.transpose(images, perm=[2, 0, 1]), boxes, flips, labels, maps

    pipe = train(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=seed)
    try:
        pipe.build()
    except RuntimeError as error:  # no usable GPU or driver for this DALI, and the like: one line
        reason = _reason(error)
    else:
        return pipe
    del pipe  # shut the pipeline down now: left to the interpreter's exit, DALI complains in a traceback
    where = f"GPU {device_id}" if device_id is not None else "the CPU"
    raise ValueError(f"--loader dali: DALI cannot build its pipeline on {where}: {reason}")


def _reason(error: Exception) -> str:
    """The line of a DALI error that says what failed (its messages run over many lines)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        found = re.search(r"failed: (.+)", line)
        if found:
            return found.group(1)
    return lines[0] if lines else type(error).__name__


class _Feed:
    """DALI's external source: the encoded torch loader's batches, one epoch per DALI epoch.

    DALI asks for the next epoch's first batches as soon as one ends (it prefetches), before the
    training loop turns the epoch: so the epoch the sampler shuffles for is DALI's own count.
    """

    # DALI prefetches a few batches ahead: one that fails to decode is among the last ones fed.
    RECENT = 8

    def __init__(self, loader: torch.utils.data.DataLoader) -> None:
        self.loader = loader
        self.batches: Iterator[dict[str, Any]] | None = None
        self.recent: deque[list[str]] = deque(maxlen=self.RECENT)

    def __call__(self, info: Any) -> tuple[Any, ...]:
        if info.iteration == 0 or self.batches is None:
            self.loader.sampler.set_epoch(info.epoch_idx)
            self.batches = iter(self.loader)
        batch = next(self.batches)  # StopIteration ends DALI's epoch
        self.recent.append(list(batch.get("source", [])))
        return (
            [jpeg.numpy() for jpeg in batch["jpeg"]],
            batch["crop_box"].numpy(),
            batch["flipped"].numpy().astype(np.int32),
            batch["labels"].numpy().astype(np.int64),
            batch["label_map"].float().numpy(),  # float16 on disk: widened, not rounded
        )


class DaliLoader:
    """What the training loop iterates instead of the torch DataLoader: batches of the same dict
    (``pixel_values`` uint8 [B, 3, S, S] on the pipeline's device, ``crop_box``, ``flipped``,
    ``labels``, ``label_map``), ``len()`` full batches per epoch, and ``sampler`` (the shard's)."""

    def __init__(
        self,
        dataset: imagenet.ImageTrainDataset,
        batch_size: int,
        *,
        img_size: int,
        shard_id: int = 0,
        num_shards: int = 1,
        device_id: int | None = None,
        num_workers: int = 0,
        num_threads: int = 2,
        seed: int = 0,
        rand_augment_spec: RandAugmentSpec | None = None,
        interpolation: str = "random",
    ) -> None:
        if not dataset.encoded:
            raise ValueError("the dali loader decodes itself: give it the dataset with encoded=True")
        # The same shards the torch loader's DistributedSampler gives each rank, full batches only.
        self.sampler = torch.utils.data.DistributedSampler(
            dataset, num_replicas=num_shards, rank=shard_id, shuffle=True, seed=seed, drop_last=True
        )
        self.feed = torch.utils.data.DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=self.sampler,
            num_workers=num_workers,
            collate_fn=imagenet.collate,
            drop_last=True,
            persistent_workers=num_workers > 0,
            worker_init_fn=imagenet.seed_worker,
        )
        if num_workers > 0:
            # Start the workers now, before DALI's threads exist: a fork copies only the calling thread.
            iter(self.feed)
        self.device = "gpu" if device_id is not None else "cpu"
        self.num_threads = num_threads
        self.departures = [rand_augment_spec.departure] if rand_augment_spec is not None else []
        self._feed = _Feed(self.feed)
        self.pipeline = build_pipeline(
            self._feed,
            batch_size=batch_size,
            img_size=img_size,
            device_id=device_id,
            num_threads=num_threads,
            seed=seed + shard_id,
            rand_augment_spec=rand_augment_spec,
            interpolation=interpolation,
        )
        with self._bad_images_named():  # the iterator runs the pipeline for its first batch
            self._batches = DALIGenericIterator(
                [self.pipeline],
                list(OUTPUTS),
                size=-1,
                last_batch_policy=LastBatchPolicy.PARTIAL,
                auto_reset=True,
            )

    def __len__(self) -> int:
        return len(self.feed)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        with self._bad_images_named():
            for (batch,) in self._batches:
                batch["flipped"] = batch["flipped"].bool()
                yield batch

    @contextlib.contextmanager
    def _bad_images_named(self) -> Iterator[None]:
        """DALI says which sample of a batch it failed to decode, not which file: a failure is
        named by the recently fed file that Pillow cannot decode either, where there is one."""
        try:
            yield
        except RuntimeError:
            for names in reversed(self._feed.recent):
                for name in names:
                    if not Path(name).is_file():
                        continue
                    try:
                        imagenet.open_rgb(Path(name).read_bytes())
                    except (OSError, ValueError) as bad:  # as the torch loader's workers decode it
                        raise imagenet.bad_file(name, bad) from None
            raise


def train_loader(
    dataset: imagenet.ImageTrainDataset,
    batch_size: int,
    *,
    img_size: int,
    auto_augment: str | None,
    interpolation: str,
    num_workers: int,
    seed: int,
) -> tuple[DaliLoader, dict[str, Any]]:
    """This process's loader (its own GPU, its shard of the data) and what the summary records of it."""
    import torch.distributed as dist

    device_id = pipeline_device()
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    spec = RandAugmentSpec.parse(auto_augment) if auto_augment else None
    loader = DaliLoader(
        dataset,
        batch_size,
        img_size=img_size,
        shard_id=rank,
        num_shards=world,
        device_id=device_id,
        num_workers=num_workers,
        num_threads=max(1, num_workers),
        seed=seed,
        rand_augment_spec=spec,
        interpolation=interpolation,
    )
    return loader, {
        "dali_version": VERSION,
        "dali_device": loader.device,
        "dali_num_threads": loader.num_threads,
    }
